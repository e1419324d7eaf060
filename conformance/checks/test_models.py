"""§8 The sequence-to-sequence model: logits out, causal in the target, blind to padding.

No parameters needed: the model is compared with itself. (The embedding scale of §1.2 is
probed by test_fingerprint; tying by the oracle equality.)
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tck.conformance.toolkit.deltas import delta, note_worst, require_deterministic
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.input_edits import rng, rows_where
from tck.conformance.toolkit.instances import cached_instance
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.strategies import seeds, split_points
from tck.reference.inputs import Shape

spec = pytest.mark.spec
components = pytest.mark.components


@spec("8.2", id="models.logits_not_probabilities")
@components("seq2seq")
def test_logits_not_probabilities(tck: Harness) -> None:
    """§8.2: the model returns unnormalised logits; the softmax belongs to the loss.
    Probabilities (rows in [0, 1] summing to 1) or log-probabilities (rows whose exp sums
    to 1) are another function."""
    inst = tck.instance()
    logits = tck.run(inst, tck.inputs(inst, Shape(batch=2, lq=5, lk=7)))
    sums = logits.sum(axis=-1)
    with np.errstate(over="ignore"):
        exp_sums = np.exp(logits).sum(axis=-1)
    probabilities = not delta(np.ones_like(sums), sums).changed and logits.min() >= 0.0
    log_probabilities = not delta(np.ones_like(exp_sums), exp_sums).changed
    tck.note({"min_logit": float(logits.min()), "max_row_sum": float(np.abs(sums).max())})
    if probabilities:
        raise CheckFailure(
            "model.returns_probabilities",
            f"every output row lies in [0, 1] and sums to 1 (first row sums to "
            f"{sums.flat[0]:.12g}): the model applies a softmax, as seed 004's "
            "F.softmax(self.out(dec_output)) does; it must return logits (SPEC.md §8.2)",
        )
    if log_probabilities:
        raise CheckFailure(
            "model.returns_log_probabilities",
            "exp of every output row sums to 1: the model applies a log-softmax; it must "
            "return unnormalised logits (SPEC.md §8.2)",
        )


@spec("8.1", "4.3", id="models.causal")
@components("seq2seq")
@given(seed=seeds, split=split_points(max_len=9))
def test_causal(tck: Harness, seed: int, split: tuple[int, int]) -> None:
    """§8.1, §4.3: changing target tokens at positions >= s leaves the logits of every
    earlier position unchanged."""
    inst = cached_instance(tck, "default", tck.own_instance)
    length, s = split
    generator = rng(seed)
    inputs = tck.inputs(inst, Shape(batch=2, lq=length, lk=6, masked=False), seed=seed)
    changed = dict(inputs)
    tgt = inputs["tgt_ids"].copy()
    tgt[:, s:] = fresh_tokens(generator, tgt[:, s:].shape, inst.config)
    changed["tgt_ids"] = tgt
    base, after = tck.run(inst, inputs), tck.run(inst, changed)
    earlier = np.broadcast_to(np.arange(length) < s, (2, length))
    found = delta(base, after, rows_where(earlier, base.ndim, 1))
    note_worst(tck, found)
    if found.changed:
        require_deterministic(tck, inst, inputs, base)
        raise CheckFailure(
            "mask.causal_leak",
            f"changing target tokens at positions >= {s} changes the logits of earlier "
            f"positions: {found.describe()}; the decoder sees future tokens (SPEC.md §4.3, "
            "§8.1)",
            found.metrics(),
        )


def fresh_tokens(generator: np.random.Generator, shape: tuple[int, ...], config) -> np.ndarray:
    """Token ids that are never the padding id."""
    tokens = generator.integers(0, config.vocab_size, size=shape)
    pad = config.padding_idx
    if pad is None:
        return tokens
    return np.where(tokens == pad, (pad + 1) % config.vocab_size, tokens)


def other_tokens(ids: np.ndarray, config) -> np.ndarray:
    """Each (non-padding) id replaced by the next id that is not padding either."""
    allowed = np.array([t for t in range(config.vocab_size) if t != config.padding_idx])
    return allowed[(np.searchsorted(allowed, ids) + 1) % len(allowed)]


@spec("8.1", "4.2", id="models.source_padding_invariance")
@components("seq2seq")
@given(seed=seeds, more=st.integers(1, 4))
def test_source_padding_invariance(tck: Harness, seed: int, more: int) -> None:
    """§8.1, §4.2: padding tokens in the source are masked everywhere: appending more
    padding to every source row leaves the logits unchanged (the real tokens keep their
    positions)."""
    inst = cached_instance(tck, "default", tck.own_instance)
    pad = inst.config.padding_idx
    if pad is None:
        pytest.skip("Config.padding_idx is None: nothing is padded")
    inputs = tck.inputs(inst, Shape(batch=2, lq=4, lk=6, lengths=(5, 3)), seed=seed)
    src = inputs["src_ids"]
    padded = dict(inputs, src_ids=np.concatenate([src, np.full((2, more), pad)], axis=1))
    base = tck.run(inst, inputs)
    found = delta(base, tck.run(inst, padded))
    note_worst(tck, found)
    if not found.changed:
        return
    require_deterministic(tck, inst, inputs, base)
    # Is the real source read at all? Under an inverted mask only the padding is.
    real = src.copy()
    real[:, 0] = other_tokens(src[:, 0], inst.config)
    read = delta(base, tck.run(inst, dict(inputs, src_ids=real)))
    if not read.changed:
        code = "mask.polarity_inverted"
        why = (
            "and changing a REAL source token changes nothing: the model attends to the "
            "padding and ignores the real tokens"
        )
    else:
        code = "mask.ignored"
        why = "the source padding mask has no effect"
    raise CheckFailure(
        code,
        f"appending {more} padding token(s) to the source changes the logits: "
        f"{found.describe()}; {why} (SPEC.md §4.2, §8.1)",
        found.metrics(),
    )
