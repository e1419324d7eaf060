"""§11 Decoder-only models: the properties that decide whether a language model is correct.

Every causal subject (``causal_self_attention``, ``decoder_block``, ``causal_lm``) is checked
on unpadded calls of several lengths against the oracle (a subject that takes no padding mask
still gets oracle equality), for causal no-leak, for batching rows of different lengths, for
grouped-query attention, and, through ``Adapter.step``, for KV-cache equivalence and for
left-padding invariance.

A subject offered only in float32 and below (transformers' Llama computes RMSNorm, RoPE and
its eager softmax in float32 whatever the model's dtype) is checked in float32: oracle
comparisons bound it by the careful run's float32 error (SPEC.md §10.7), and the
comparisons of the implementation with itself use float32's floor of the tolerance rule.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tck.adapters import AdapterFailure, Unsupported
from tck.conformance.diagnosis.cache_measure import layers_share_cache, measure_cache
from tck.conformance.diagnosis.cache_positions import position_cause
from tck.conformance.diagnosis.cache_seen import measured_cause
from tck.conformance.diagnosis.decoding import (
    buffer_capacities,
    buffer_slots,
    cache_orders,
    cache_slots,
    decode,
    decoder_only_over_slots,
    decoder_only_seeing,
    token_input,
)
from tck.conformance.diagnosis.explain import explain_steps
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.input_edits import batch_slice
from tck.conformance.toolkit.instances import zero_params
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import Config, Conventions, oracle
from tck.reference.components import record, tagged
from tck.reference.expected import decoder_only
from tck.reference.inputs import Inputs, Shape
from tck.reference.tolerance import Comparison, compare
from tck.reference.variants import expected_under, oracle_variant

spec = pytest.mark.spec
components = pytest.mark.components

CAUSAL = tagged("kv_cache")
LENGTHS = (1, 3, 7, 13, 29)  # a prefix of 1, and lengths that are not multiples of 8
CLAUSE = {name: record(name).clauses[0] for name in CAUSAL}

# What torch.cat, torch broadcasting and numpy say when a cache is concatenated along the wrong
# axis (the other axes then disagree between the cache and the new token's keys).
CONCAT_ERRORS = re.compile(
    r"Sizes of tensors must match|must match the size of tensor|dimensions except for the "
    r"concatenation axis|shape mismatch|cannot be broadcast|size mismatch",
    re.IGNORECASE,
)


# --------------------------------------------------------------------------------- helpers


def instance(tck: Harness, **config) -> Instance:
    """float64 when the adapter offers it, else the highest precision it offers."""
    offered = tck.dtypes()
    dtype = next(d for d in ("float64", "float32", "bfloat16", "float16") if d in offered)
    return tck.instance(tck.config(**config) if config else None, dtype=dtype)


def unpadded(tck: Harness, inst: Instance, batch: int, length: int, seed: int) -> Inputs:
    return tck.inputs(inst, Shape(batch=batch, lq=length, lk=length, masked=False), seed=seed)


def same(
    inst: Instance, test: np.ndarray, truth: np.ndarray, ignore=None, *, what: str = ""
) -> Comparison:
    """The implementation against itself: the floor of the tolerance rule in its dtype. The
    positions compared are real tokens, which must be finite on both sides: a NaN or inf
    there fails with ``numerics.nonfinite_output`` (``what`` says which comparison), since a
    NaN on both sides is no evidence that the two computations agree (SPEC.md §10.7)."""
    result = compare(test, truth, dtype=inst.dtype, ignore=ignore, require_finite=True)
    if result.nonfinite:
        raise CheckFailure(
            "numerics.nonfinite_output",
            f"{what + ': ' if what else ''}{result.describe_nonfinite('output', 'reference')} "
            "(positions compared: real tokens, never pads); a fill of -inf or a division by "
            "zero in a fully masked pad row spreads NaN to the real tokens (SPEC.md §4.4, "
            "§10.7)",
            result.metrics(),
        )
    return result


def describe(result: Comparison) -> str:
    return (
        f"max |difference| {result.max_abs_err:.3g} > bound {result.bound:.3g} at index "
        f"{result.worst_index}"
    )


def run_or_skip(tck: Harness, inst: Instance, inputs: Inputs, why: str) -> np.ndarray:
    try:
        return tck.run(inst, inputs)
    except Unsupported as err:
        pytest.skip(f"{why}: {err}")


# ------------------------------------------------------------------ oracle and causality


def full_length_here(tck: Harness) -> int | None:
    """A checkpoint's own context (``real_length`` of its adapter) when the subject offers no
    float64: equality.oracle, which makes that call otherwise, then does not run."""
    real_length = getattr(tck.adapter, "real_length", None)
    if not callable(real_length) or "float64" in tck.dtypes():
        return None
    return real_length(tck.subject)


@spec("11.1", "11.4", "11.5", id="decoder.oracle_lengths")
@components(*CAUSAL)
def test_oracle_lengths(tck: Harness) -> None:
    """The oracle on unpadded calls of lengths 1, 3, 7, 13 and 29 through one instance: the
    calls every causal implementation takes, whether or not it takes a padding mask."""
    tck.record.measured(CLAUSE[tck.component])
    inst = instance(tck)
    tck.require_params(inst)
    for index, length in enumerate(LENGTHS):
        inputs = unpadded(tck, inst, 2, length, seed=100 + index)
        tck.assert_matches_oracle(inst, inputs, what=f"unpadded call of length {length}")
    full = full_length_here(tck)
    if full is not None:  # a checkpoint's own context, where equality.oracle cannot run
        inputs = unpadded(tck, inst, 1, full, seed=150)
        tck.assert_matches_oracle(inst, inputs, what=f"unpadded call of length {full}")
        tck.note({"full_length": full})
    padded = tck.inputs(inst, Shape(batch=2, lq=13, lk=13, lengths=(13, 7)), seed=199)
    try:  # right padding, where the implementation takes key_padding
        tck.assert_matches_oracle(inst, padded, what="right-padded rows of lengths 13 and 7")
    except Unsupported as why:
        tck.note({"unsupported_calls": [f"right-padded rows: {why}"]})


@spec("11.2", id="decoder.grouped_query_attention")
@components(*CAUSAL)
def test_grouped_query_attention(tck: Harness) -> None:
    """§11.2: n_kv_heads = 2 of 4 query heads: key/value head j serves query heads 2j and
    2j + 1 (repeated in place, not tiled); checked against the oracle, unpadded."""
    check_kv_heads(tck, 2)


@spec("11.2", id="decoder.multi_query_attention")
@components(*CAUSAL)
def test_multi_query_attention(tck: Harness) -> None:
    """§11.2: n_kv_heads = 1: one key/value head serves every query head."""
    check_kv_heads(tck, 1)


def check_kv_heads(tck: Harness, n_kv_heads: int) -> None:
    try:
        inst = instance(tck, n_kv_heads=n_kv_heads)
    except Unsupported as err:
        pytest.skip(f"n_kv_heads={n_kv_heads}: {err}")
    except ValueError as err:  # load(): k and v have n_heads heads whatever n_kv_heads says
        if "shape" not in str(err):
            raise
        pytest.skip(
            f"the implementation has no grouped-query attention: its key/value projections do "
            f"not take n_kv_heads={n_kv_heads} ({str(err)[:200]})"
        )
    tck.require_params(inst)
    for index, length in enumerate((5, 11)):
        inputs = unpadded(tck, inst, 2, length, seed=200 + index)
        tck.assert_matches_oracle(
            inst, inputs, what=f"n_kv_heads={n_kv_heads} of {inst.config.n_heads}, L={length}"
        )


@spec("4.3", "11.1", id="decoder.causal_no_leak")
@components(*CAUSAL)
def test_causal_no_leak(tck: Harness) -> None:
    """§11.1: always causal. Changing the tokens at positions >= s leaves rows < s unchanged."""
    inst = instance(tck)
    name = token_input(tck.component)
    rng = np.random.default_rng(tck.seed)
    for length, s in ((2, 1), (9, 4), (13, 12)):
        inputs = unpadded(tck, inst, 2, length, seed=300 + length)
        base = tck.run(inst, inputs)
        changed = dict(inputs)
        if name == "ids":
            ids = np.array(inputs["ids"])
            ids[:, s:] = (
                ids[:, s:] + rng.integers(1, inst.config.vocab_size, ids[:, s:].shape)
            ) % (inst.config.vocab_size)
            changed["ids"] = ids
        else:
            x = np.array(inputs["x"])
            x[:, s:] = rng.standard_normal(x[:, s:].shape)
            changed["x"] = x
        after = tck.run(inst, changed)
        result = same(
            inst, after[:, :s], base[:, :s], what=f"rows < {s} after changing later tokens"
        )
        tck.note({"max_abs_delta": result.max_abs_err})
        if not result.passed:
            raise CheckFailure(
                "mask.causal_leak",
                f"changing positions >= {s} (of {length}) changes earlier rows: "
                f"{describe(result)}; the model sees future tokens (SPEC.md §4.3, §11.1)",
                result.metrics(),
            )


@spec("10.2", "11.8", id="decoder.batch_rows_of_different_lengths")
@components(*CAUSAL)
def test_batch_rows_of_different_lengths(tck: Harness) -> None:
    """§11.8: a batch of right-padded rows of lengths 11, 6 and 1 gives, at each row's real
    positions, what the row gives alone and unpadded."""
    inst = instance(tck)
    lengths = (11, 6, 1)
    inputs = tck.inputs(inst, Shape(batch=3, lq=11, lk=11, lengths=lengths), seed=400)
    out = run_or_skip(tck, inst, inputs, "a padded batch needs key_padding")
    for b, length in enumerate(lengths):
        alone = {k: v[:, :length] for k, v in batch_slice(inputs, b).items() if k != "key_padding"}
        truth = tck.run(inst, alone)
        result = same(inst, out[b : b + 1, :length], truth, what=f"row {b} in the batch -> alone")
        tck.note({"max_abs_delta": result.max_abs_err})
        if not result.passed:
            raise CheckFailure(
                "batch.padded_rows_differ",
                f"row {b} (length {length} of 11, right-padded) in a batch differs from the "
                f"same row alone: {describe(result)} (SPEC.md §10.2, §11.8)",
                result.metrics(),
            )


# ---------------------------------------------------------------------------- KV cache


def left_padded(tck: Harness, inst: Instance, lengths: tuple[int, ...], seed: int) -> Inputs:
    """Rows right-aligned in a batch of length max(lengths): pads first, key_padding False
    there, and position ids shifted so every row's first real token is at 0 (§11.7). An
    attention or block without RoPE computes nothing from positions (the learned table is
    the model's, which embeds the tokens, §11.5): it gets none, so a module that takes none
    is judged too."""
    total = max(lengths)
    inputs = tck.inputs(
        inst, Shape(batch=len(lengths), lq=total, lk=total, masked=False), seed=seed
    )
    pads = total - np.asarray(lengths)
    keep = np.arange(total)[None, :] >= pads[:, None]  # (B, T)
    inputs["key_padding"] = keep
    if token_input(tck.component) == "ids" or inst.conventions.positions == "rope":
        inputs["positions"] = np.maximum(np.arange(total)[None, :] - pads[:, None], 0)
    return inputs


def step_outputs(
    tck: Harness,
    inst: Instance,
    inputs: Inputs,
    prefill: int,
    chunk: int = 1,
    *,
    give_positions: bool = True,
) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """The outputs of incremental decoding, concatenated along the sequence (B, L, ...), and
    the token range of each call."""
    try:
        outs, ranges = decode(
            tck.adapter,
            inst.handle,
            tck.component,
            inputs,
            prefill,
            chunk,
            give_positions=give_positions,
        )
    except (Unsupported, AdapterFailure, CheckFailure):
        raise
    except Exception as err:  # the implementation's own error while decoding
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        length = int(inputs[token_input(tck.component)].shape[1])
        sizes = keys_of_the_call_alone(str(err), prefill, chunk, length)
        # a chunk's causal mask not widened over the cache is the other reading of a chunk's
        # sizes: then the same cache fed one token a call runs
        if sizes is not None and (
            chunk == 1 or not one_token_steps_run(tck, inst, inputs, prefill, give_positions)
        ):
            raise CheckFailure(
                "cache.ignored",
                f"a decoding step with the cache failed: {type(err).__name__}: {first[:200]}; "
                f"it sets {sizes[0]} against {sizes[1]} on one axis: the call's own tokens "
                f"against the cache and the call ({sizes[1]} keys). Something sized for the "
                "keys (a mask, the positions) counts the cached ones while the scores have the "
                "call's alone: the cache never reaches the attention (SPEC.md §11.6)",
                {"inferred_from": "exception"},
            ) from err
        if CONCAT_ERRORS.search(str(err)):
            shared = layers_share_cache(tck, inst, unpadded(tck, inst, 2, 11, seed=509))
            if shared is not None:  # a one-layer build decodes right: not the axis
                raise CheckFailure(
                    shared[0], f"{shared[1]}; the step failed: {first[:200]}"
                ) from err
            if chunk > 1 and one_token_steps_run(tck, inst, inputs, prefill, give_positions):
                raise CheckFailure(
                    "cache.causal_top_left",
                    f"a call of {chunk} tokens on a non-empty cache failed: "
                    f"{type(err).__name__}: {first[:200]}; the same cache fed one token per "
                    "call runs, so the cache grows along the right axis and what does not fit "
                    "is sized for the call's tokens alone: the chunk's causal mask built "
                    f"({chunk}, {chunk}), not widened over the cached keys (SPEC.md §11.9, "
                    "§4.3)",
                    {"inferred_from": "exception"},
                ) from err
            raise CheckFailure(
                "cache.wrong_axis",
                f"a decoding step with the cache failed: {type(err).__name__}: {first[:200]}; "
                "appending the new token's keys and values to the cache does not fit: the "
                "cache grows along an axis other than the sequence axis (SPEC.md §11.6)",
                # read from the error's words, not measured: weaker than a measured cause
                {"inferred_from": "exception"},
            ) from err
        raise
    for out, (start, stop) in zip(outs, ranges, strict=True):
        expected_shape = (inputs[token_input(tck.component)].shape[0], stop - start)
        if out.shape[:2] != expected_shape:
            raise CheckFailure(
                "cache.wrong_axis",
                f"the step with tokens {start}..{stop - 1} returned shape {out.shape}, not "
                f"{expected_shape} + the output's trailing axes: the cache (or its output) "
                "grows along the wrong axis (SPEC.md §11.6)",
                {"shape": list(out.shape)},
            )
    return np.concatenate(outs, axis=1), ranges


# A shape in an error message: (2, 1, 1, 5) or torch.Size([2, 1, 1, 5]); and torch's
# broadcasting error, "The size of tensor a (1) must match the size of tensor b (5) at
# non-singleton dimension 3".
_SHAPE = re.compile(r"[(\[]\s*(\d+(?:\s*,\s*\d+)+)\s*,?\s*[)\]]")
_BROADCAST = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)")


def keys_of_the_call_alone(
    message: str, prefill: int, chunk: int, length: int
) -> tuple[int, int] | None:
    """(chunk, total) when ``message``, the error of a decoding step of ``chunk`` tokens,
    names two sizes of one axis (two shapes that differ only in their last axis, or torch's
    broadcasting error), one the call's tokens and the other those and the cache before them
    (``prefill`` or more, up to ``length``, the sequence's): keys counted without the cache
    where something else (a mask, the positions) counts them with it. None otherwise."""
    pairs = [(int(a), int(b)) for a, b in _BROADCAST.findall(message)]
    shapes = [tuple(int(n) for n in found.split(",")) for found in _SHAPE.findall(message)]
    pairs += [(a[-1], b[-1]) for a in shapes for b in shapes if a[:-1] == b[:-1] != ()]
    for a, b in pairs:
        own, total = min(a, b), max(a, b)
        if own == chunk and prefill + chunk <= total <= length:
            return own, total
    return None


def one_token_steps_run(
    tck: Harness, inst: Instance, inputs: Inputs, prefill: int, give_positions: bool
) -> bool:
    """Whether decoding the same inputs one token per call after the same prefill runs
    without an error (its outputs are judged by the one-token checks)."""
    try:
        decode(
            tck.adapter,
            inst.handle,
            tck.component,
            inputs,
            prefill,
            1,
            give_positions=give_positions,
        )
    except Exception:  # any error: the one-token schedule fails too
        return False
    return True


def cached_keys_seen(
    batch: int,
    length: int,
    ranges: list[tuple[int, int]],
    key_padding: np.ndarray | None,
    *,
    prepend: bool = False,
    pad_in_steps: bool = True,
) -> np.ndarray:
    """(B, 1, L, L): which tokens' keys each query sees when the calls take the token ranges
    ``ranges`` and attend their cache as an implementation lays the masks over it: query i of
    a call of n tokens on a cache of T keys (this call's included) sees cache slots 0..T-n+i
    (bottom-right, §11.6) whose padding entry, read at the slot's index, is True (§11.7).
    ``prepend``: each call after the first puts its keys before the cached ones (so slot j
    no longer holds token j); ``pad_in_steps=False``: the padding mask is applied in the
    first call only. Both False/True give the spec's causal AND padding mask."""
    keep = np.zeros((batch, length, length), bool)
    order: list[int] = []  # token held by each cache slot
    for call, (start, stop) in enumerate(ranges):
        new = list(range(start, stop))
        order = new + order if prepend and call else order + new
        slots, n = np.asarray(order), stop - start
        for i in range(n):
            seen = slots[: len(order) - n + i + 1]
            if key_padding is None or (call and not pad_in_steps):
                keep[:, start + i, seen] = True
            else:
                keep[:, start + i, seen] = np.asarray(key_padding, bool)[:, : len(seen)]
    return keep[:, None]


def _top_left_bands(
    top_left: np.ndarray, ranges: list[tuple[int, int]], window: int | None
) -> list[tuple[np.ndarray, str]]:
    """The top-left causal mask of cached steps (``top_left``, (L, L)) with a declared sliding
    window (SPEC.md §4.5) cut the way such code cuts it: numbered the same way (query i of a
    call sees keys i - w + 1..i), or still offset by the cache (query i at place T - n + i
    sees keys above T - n + i - w, so that once the cache holds w keys the two bands no
    longer meet and the query sees no key: NaN or a row's fill, §4.4); without a window,
    the mask alone. Each with the words the cause's message gains."""
    if window is None:
        return [(top_left, "")]
    length = top_left.shape[0]
    keys = np.arange(length)
    local = np.tril(np.ones((length, length), bool))
    for start, stop in ranges[1:]:
        for row in range(start, stop):
            local[row] = keys > row - start - window
    offset = keys[None, :] > keys[:, None] - window
    return [
        (top_left & local, f"; its sliding window of {window} is numbered the same way"),
        (
            top_left & offset,
            f"; its sliding window of {window} is still offset by the cache, so once the "
            "cache holds that many keys the two bands no longer meet and a query sees no key",
        ),
        (top_left, f"; the sliding window of {window} is not applied in cached steps"),
    ]


def constant_offsets(
    ranges: list[tuple[int, int]], length: int
) -> Iterator[tuple[int, np.ndarray]]:
    """(o, keep) for each constant offset o of the cached steps' causal masks that these
    calls tell from the spec (query i of a call at place T - n + i sees keys 0..o + i among
    the T keys written: ``bias[o:o + n, :T]`` with o not the cache's length), and from the
    top-left mask (o = 0, ``cache.causal_top_left``)."""
    spec = np.tril(np.ones((length, length), bool))
    keys = np.arange(length)
    for offset in range(1, length):
        keep = spec.copy()
        for start, stop in ranges[1:]:
            for row in range(start, stop):
                keep[row] = keys <= min(offset + row - start, stop - 1)
        if not np.array_equal(keep, spec):
            yield offset, keep


def cache_hypotheses(tck: Harness, inst: Instance, inputs: Inputs, ranges: list[tuple[int, int]]):
    """(code, message, gold over the whole sequence) for the bugs of cached decoding, the
    calls having taken the token ranges ``ranges`` (the first one the prefill)."""
    component, c, conv, p = tck.component, inst.config, inst.conventions, inst.params or {}
    b, length = np.asarray(inputs[token_input(component)]).shape[:2]
    positions = inputs.get("positions")
    positions = np.broadcast_to(np.arange(length), (b, length)) if positions is None else positions
    prefill = ranges[0][1]
    restarted = np.array(positions)
    top_left = np.tril(np.ones((length, length), bool))
    for start, stop in ranges[1:]:
        restarted[:, start:stop] = np.arange(stop - start)  # numbered within its own call
        for row in range(start, stop):  # query i of the call sees keys 0..i
            top_left[row] = np.arange(length) <= row - start
    what = "RoPE rotates" if conv.positions == "rope" else "the position table gives"
    code = "cache.rope_offset_wrong" if conv.positions == "rope" else "cache.position_offset_wrong"
    yield (
        code,
        f"{what} each decoded token at its index within its own call (from 0), not at its "
        "place after the cached tokens: the cache's offset is not added to the position ids "
        "(SPEC.md §11.6, §11.9)",
        decoder_only(component, {**inputs, "positions": restarted}, p, c, conv),
    )
    if conv.positions == "rope":  # one of the two rotated at the right position, not both
        yield (
            code,
            "RoPE rotates each decoded token's key at its index within its own call (from 0) "
            "and its query at its place after the cached tokens: the cache's offset reaches "
            "the queries but not the keys (SPEC.md §11.6, §2.3)",
            decoder_only(component, inputs, p, c, conv, key_positions=restarted),
        )
        yield (
            code,
            "RoPE rotates each decoded token's query at its index within its own call (from 0) "
            "and its key at its place after the cached tokens: the cache's offset reaches the "
            "keys but not the queries (SPEC.md §11.6, §2.3)",
            decoder_only(
                component,
                {**inputs, "positions": restarted},
                p,
                c,
                conv,
                key_positions=np.asarray(positions),
            ),
        )
    strict = np.tril(np.ones((length, length), bool))
    rows = np.arange(prefill, length)
    strict[rows, rows] = False  # decoded tokens do not see their own key
    yield (
        "cache.causal_off_by_one",
        "each decoded token attends the cached keys but not its own: the causal mask of a "
        "cached step is off by one position (j < T instead of j <= T - 1; SPEC.md §11.6)",
        decoder_only(component, inputs, p, c, conv, causal_keep=strict),
    )
    # A static cache written one slot late (slots F+1..F+n for F..F+n-1): every query reads an
    # empty (zero) slot and misses its own key; the causal mask skipped once the cache is
    # non-empty: a chunk's tokens see the later tokens of their chunk.
    key_padding = inputs.get("key_padding")
    unpadded_inputs = {k: v for k, v in inputs.items() if k != "key_padding"}
    window = conv.sliding_window

    def over_slots(rotated_when_read: bool = False, **order: Any) -> np.ndarray:
        """The oracle over the cache's two rows of slots laid out by ``cache_orders``."""
        orders = cache_orders(b, length, ranges, key_padding, window=window, **order)
        return decoder_only_over_slots(
            component,
            unpadded_inputs,
            p,
            c,
            conv,
            orders,
            keys_rotated_when_read=rotated_when_read,
        )

    spec_keep, _ = cache_slots(b, length, ranges, key_padding, window=window)
    for code, message, layout in (
        (
            "cache.causal_off_by_one",
            "each call's keys and values are written one cache slot too far (slots F+1..F+n "
            "of a cache filled to F, where F..F+n-1 are read): every token misses its own key "
            "and attends an unwritten zero slot instead (SPEC.md §11.6)",
            {"write_offset": 1},
        ),
        (
            "mask.causal_leak",
            "the causal mask is skipped once the cache is non-empty: a call of several tokens "
            "on a cache lets each of them see the later tokens of its own call (right only "
            "for one token per call; SPEC.md §4.3, §11.9)",
            {"causal_in_steps": False},
        ),
    ):
        keep, empty = cache_slots(b, length, ranges, key_padding, window=window, **layout)
        if not empty.any() and np.array_equal(keep, spec_keep):
            continue  # these calls cannot tell it from the spec (one token per call)
        yield (
            code,
            message,
            decoder_only_seeing(component, unpadded_inputs, p, c, conv, keep, empty),
        )
    # only one of the two caches extended at the wrong end (torch.cat([v, cache_v]) beside
    # torch.cat([cache_k, k])): each weight multiplies another token's value
    for keys_order, values_order, which in (
        ("append", "prepend", "values"),
        ("prepend", "append", "keys"),
    ):
        yield (
            "cache.keys_prepended",
            f"each call's {which} are put before the cached ones instead of after them (the "
            f"{'keys' if which == 'values' else 'values'} appended as they should be): the "
            "weight of a cached key multiplies another token's value (SPEC.md §11.6)",
            over_slots(keys=keys_order, values=values_order),
        )
    # a cache that holds unrotated keys and rotates them when read, by slot index
    # (TransformerLens' apply_rotary over the concatenated cache): keys put before the cached
    # ones are then also turned to another token's angle
    given = inputs.get("positions")
    if conv.positions == "rope" and (
        given is None or bool(np.all(np.asarray(given) == np.arange(length)))
    ):
        for values_order, which in (("append", "keys"), ("prepend", "keys and values")):
            yield (
                "cache.keys_prepended",
                f"each call's {which} are put before the cached ones instead of after them, in "
                "a cache that holds its keys unrotated and rotates each at the index of its "
                "slot when read: a key slot holds another token's key, turned to another "
                "token's angle (SPEC.md §11.6, §2.3)",
                over_slots(rotated_when_read=True, keys="prepend", values=values_order),
            )
    # only one of the two written one slot too far into a preallocated cache
    # (cache_k[:, :, F + 1:F + n + 1] = k beside cache_v[:, :, F:F + n] = v)
    for keys_order, values_order, which, other in (
        ("late", "append", "keys", "values"),
        ("append", "late", "values", "keys"),
    ):
        yield (
            "cache.causal_off_by_one",
            f"each call's {which} are written one cache slot too far (slots F+1..F+n of a "
            f"cache filled to F, where F..F+n-1 are read) while its {other} are written where "
            f"they belong: every token's own {which[:-1]} is never read, slot 0 holds zeros, "
            "and each weight meets the other tensor of the token before (SPEC.md §11.6)",
            over_slots(keys=keys_order, values=values_order),
        )
    # keys, values or both written at the cache's start by every call (``cache[:, 0:n] =``
    # for ``cache[:, F:F + n] =``): later calls overwrite the first slots, and the slots
    # read at F..F+n-1 were never written (zeros); the cache is rewritten, not extended
    for keys_order, values_order, which in (
        ("start", "append", "keys"),
        ("append", "start", "values"),
        ("start", "start", "keys and values"),
        # a buffer the full forward also writes (a static cache held by the module, as
        # Meta's reference holds it): the slots a step reads past its own hold that call's
        ("start_over_forward", "append", "keys"),
        ("append", "start_over_forward", "values"),
        ("start_over_forward", "start_over_forward", "keys and values"),
    ):
        yield (
            "cache.ignored",
            f"each call's {which} are written at the start of the cache (slots 0..n-1) instead "
            "of after the cached tokens (slots F..F+n-1 of a cache filled to F): every call "
            "overwrites the first tokens' entries, and the slots it reads for its own tokens "
            "hold zeros or an older call's (SPEC.md §11.6)",
            over_slots(keys=keys_order, values=values_order),
        )
    # the write position advanced by one per call instead of by the call's tokens
    # (``cache_pos.add_(1)`` for ``add_(n)``): right for one token per call
    yield (
        "cache.slots_overlap",
        "the cache's write position advances by one slot per call instead of by the number "
        "of tokens written (call k writes at slots k..k+n-1): a call of several tokens is "
        "overwritten by the next calls, and the slots read after it hold zeros or other "
        "tokens' entries (SPEC.md §11.6, §11.9)",
        over_slots(keys="calls", values="calls"),
    )
    # the value cache written with the keys (values[..., F:F + n] = keys), read by the call
    # itself or only by the calls after it (present = (key, key)): the full forward, which
    # reads no cache, is right
    for values_order, words in (
        ("keys", "each call stores its keys in the value cache (values[..., F:F + n] = keys)"),
        (
            "keys_after_prefill",
            "each call after the prefill appends its keys to the value cache (the prefill's "
            "values stored right: a cache update whose first write differs from the others)",
        ),
        (
            "keys_stored",
            "each call attends its own values but returns a cache whose values are its keys "
            "(present = (key, key))",
        ),
    ):
        yield (
            "attention.value_uses_key_projection",
            f"{words}: the cached attention weighs the tokens' keys, as rotated, where their "
            "values belong; the full forward, which reads no cache, is right (SPEC.md §11.6, "
            "§3.1)",
            over_slots(values=values_order),
        )
    # the whole preallocated buffer returned (keys for keys[..., :offset]): the unwritten
    # slots, zeros, take a share of each unmasked softmax; a capacity of the config's
    # max_len or a power of two (the buffers such caches allocate)
    if key_padding is None:
        for capacity in buffer_capacities(c, length):
            for chunks in ("masked", "bottom_right"):
                keep, empty = buffer_slots(b, length, ranges, capacity, chunks=chunks)
                if not empty.any():
                    continue
                yield (
                    "cache.unwritten_slots_read",
                    f"the cache returns its whole preallocated buffer of {capacity} slots "
                    "instead of the slots written so far: every unmasked query also attends "
                    "the unwritten ones, zero keys and values that still take a share of the "
                    "softmax"
                    + (
                        ", and a call of several tokens, masked bottom-right over the whole "
                        "buffer, sees its own later tokens"
                        if chunks == "bottom_right"
                        else ""
                    )
                    + " (SPEC.md §11.6)",
                    decoder_only_seeing(component, unpadded_inputs, p, c, conv, keep, empty),
                )
    # the cached keys and values exchanged when read back (``past_value, past_key =
    # layer_past``), then stored as used (swapped at every other call) or left right
    for swapped, stored in (
        ("stored", "stores what it used, so the cached part is swapped at every other call"),
        ("read", "leaves the cache itself right"),
    ):
        yield (
            "cache.keys_values_swapped",
            "each cached step reads the cached keys as values and the cached values as keys "
            "(a (key, value) pair unpacked in the other order) and " + stored + ": the "
            "scores of the cached tokens use their values (SPEC.md §11.6)",
            over_slots(swapped=swapped),
        )
    top_left_message = (
        "each decoded token attends only the first tokens of the sequence: the causal mask of "
        "a cached step is built for the new tokens alone (query i sees keys 0..i), aligned "
        "top-left, instead of offset by the number of cached keys (bottom-right: query i sees "
        "keys up to T - n + i; SPEC.md §11.6, §4.3)"
    )
    for keep, words in _top_left_bands(top_left, ranges, window):
        yield (
            "cache.causal_top_left",
            top_left_message + words,
            decoder_only(component, inputs, p, c, conv, causal_keep=keep),
        )
    # the step's mask assembled in the wrong order, [triu(n, n) | zeros(n, T - n)] for
    # [zeros(n, T - n) | triu(n, n)] (Meta's llama hstack with its two blocks swapped): the
    # triangle falls on the first n keys, the open block on the last T - n, the call's own
    # later tokens among them; one token per call sees every key either way
    swapped = np.tril(np.ones((length, length), bool))
    keys = np.arange(length)
    for start, stop in ranges[1:]:
        n = stop - start
        for row in range(start, stop):
            swapped[row] = ((keys <= row - start) | (keys >= n)) & (keys < stop)
    if not np.array_equal(swapped, np.tril(np.ones((length, length), bool))):
        yield (
            "cache.causal_top_left",
            "the causal mask of a cached call of n tokens is assembled with its two blocks in "
            "the wrong order, the triangle over the first n keys and the open block over the "
            "last T - n (torch.cat([mask, zeros(n, past)]) for torch.cat([zeros(n, past), "
            "mask])): the triangle is aligned top-left, and each token sees the later tokens "
            "of its own call (SPEC.md §11.6, §11.9, §4.3)",
            decoder_only(component, inputs, p, c, conv, causal_keep=swapped),
        )
    for offset, keep in constant_offsets(ranges, length):
        yield (
            "cache.causal_offset_wrong",
            f"the causal mask of every cached step is offset by {offset} whatever the cache "
            f"holds (query i of a call sees keys 0..{offset} + i, among those written so far), "
            "instead of by the number of cached keys: a length read off another axis of the "
            "cache, or a constant (SPEC.md §11.6, §4.3)",
            decoder_only(component, inputs, p, c, conv, causal_keep=keep),
        )
    yield (
        "cache.keys_prepended",
        "each call's keys and values are put before the cached ones instead of after them: "
        "the causal and padding masks, laid over the cache by index, fall on the wrong keys "
        "(SPEC.md §11.6)",
        decoder_only(
            component,
            unpadded_inputs,
            p,
            c,
            conv,
            causal_keep=cached_keys_seen(b, length, ranges, key_padding, prepend=True),
        ),
    )
    if key_padding is not None:
        yield (
            "cache.padding_dropped_in_steps",
            "the decoded tokens attend the padded keys: the key-padding mask is applied in "
            "the full forward and the prefill but not in cached steps (SPEC.md §11.6, §11.7)",
            decoder_only(
                component,
                unpadded_inputs,
                p,
                c,
                conv,
                causal_keep=cached_keys_seen(b, length, ranges, key_padding, pad_in_steps=False),
            ),
        )
    diagonal = np.eye(length, dtype=bool)
    diagonal[:prefill, :prefill] = np.tril(np.ones((prefill, prefill), bool))
    for start, stop in ranges[1:]:  # a call's tokens see each other, not the cache
        diagonal[start:stop, start:stop] = np.tril(np.ones((stop - start, stop - start), bool))
    yield (
        "cache.ignored",
        "each decoded token attends only the tokens of its own call: the cache is not used, "
        "or each call writes its keys and values from the cache's first slot over the ones "
        "before (a write position, and the mask rows read with it, not offset by the cached "
        "length; SPEC.md §11.6)",
        decoder_only(component, inputs, p, c, conv, causal_keep=diagonal),
    )
    # the cache each call returns holds its own keys and values only (``present = (k, v)``
    # of the call, not of the concatenation): a call sees the previous call and itself
    previous = diagonal.copy()
    for (before, last), (start, stop) in itertools.pairwise(ranges):
        previous[start:stop, before:last] = True
    yield (
        "cache.ignored",
        "each decoded token attends only the tokens of its own call and of the call before: "
        "the cache each call returns holds that call's keys and values alone, replaced "
        "instead of extended, so every earlier call is forgotten (SPEC.md §11.6)",
        decoder_only(component, inputs, p, c, conv, causal_keep=previous),
    )


def reproducing_cache_bug(
    tck: Harness,
    inst: Instance,
    inputs: Inputs,
    ranges: list[tuple[int, int]],
    cached: np.ndarray,
    decoded: np.ndarray,
) -> tuple[str, str] | None:
    """(code, message) of the first cache bug (``cache_hypotheses``) whose oracle gives the
    cached output ``cached`` on the ``decoded`` positions, NaN where it has NaN; None. The
    fit is recorded as a reproduction (``reproduced_by``), which the ranking of root causes
    puts before a finding read from an exception's words (``tck.reports.causes``)."""
    if inst.params is None or tck.component not in CAUSAL:
        return None
    spec = tck.gold(inst, inputs)
    for code, message, gold in cache_hypotheses(tck, inst, inputs, ranges):
        if compare(gold, spec, dtype=inst.dtype, ignore=~decoded).passed:
            continue  # the spec's own output where it is judged: no evidence either way
        if compare(cached, gold, dtype=inst.dtype, ignore=~decoded).passed:
            tck.note({"reproduced_by": code, "reproduced_at": inst.dtype})
            return code, message
    return None


# (prefill, tokens per later call): one token per step, as generate() decodes
ONE_TOKEN = ((1, 1), (4, 1))
# chunked prefill (§11.9): several tokens per call on a non-empty cache, two chunk sizes
# that divide what follows the prefill of length 11, so every later call has n > 1
CHUNKED = ((1, 2), (3, 4))


def check_cache(
    tck: Harness,
    inst: Instance,
    inputs: Inputs,
    what: str,
    schedules: tuple[tuple[int, int], ...] = ONE_TOKEN,
    *,
    give_positions: bool = True,
    clause: str = "SPEC.md §11.6",
) -> None:
    full = tck.run(inst, inputs)
    keep = inputs.get("key_padding")
    ignore = None
    if keep is not None:  # padded query rows are not promised anything here
        ignore = ~np.asarray(keep)[(..., *([None] * (full.ndim - 2)))]
    # a finding on padded rows weighs less where the padded forward fails too (reports.causes)
    tck.note({"padded_call": keep is not None})
    for prefill, chunk in schedules:
        try:
            cached, ranges = step_outputs(
                tck, inst, inputs, prefill, chunk, give_positions=give_positions
            )
        except Unsupported as err:
            pytest.skip(f"incremental decoding: {err}")
        decoded = np.zeros(full.shape, bool)
        decoded[:, prefill:] = True
        if ignore is not None:
            decoded &= ~np.broadcast_to(ignore, full.shape)
        try:
            result = same(
                inst,
                cached,
                full,
                ignore,
                what=f"{what}, prefill {prefill}: cached -> full forward",
            )
        except CheckFailure as nonfinite:  # a cache bug may leave a query no key (§4.4)
            found = reproducing_cache_bug(tck, inst, inputs, ranges, cached, decoded)
            if found is None:
                raise
            raise CheckFailure(
                found[0], f"{found[1]}; {nonfinite.message}", nonfinite.metrics
            ) from None
        tck.note({"max_abs_delta": result.max_abs_err})
        if result.passed:
            continue
        worst = result.worst_index[1] if result.worst_index else "?"
        per_call = "one token" if chunk == 1 else f"{chunk} tokens"
        numbers = (
            f"{what}, prefill {prefill} then {per_call} per step"
            f"{'' if give_positions else ', no positions given'}: at position {worst} the "
            f"cached output differs from the full forward: {describe(result)}"
        )
        found = reproducing_cache_bug(tck, inst, inputs, ranges, cached, decoded)
        if found is not None:
            raise CheckFailure(found[0], f"{found[1]}; {numbers}", result.metrics())
        # no layout reproduces it: measure which keys each cached query attends
        # (tck.conformance.diagnosis.cache_seen), then the cache (one layer against several;
        # which earlier tokens still reach the last one: cache_measure)
        measured = None
        if inst.params is not None and tck.component in CAUSAL:
            judged = np.zeros(full.shape[:2], bool)
            judged[:, prefill:] = True
            if keep is not None:
                judged &= np.asarray(keep, bool)
            measured = position_cause(tck, inst, inputs, cached, ranges, judged)
            measured = measured or measured_cause(
                tck, inst, inputs, ranges, judged, give_positions=give_positions
            )
        measured = measured or measure_cache(tck, inst, unpadded(tck, inst, 2, 11, seed=509))
        # the cache measured right: the forward's own hypotheses, on the steps' output (a bug
        # on the decoding path alone, the full forward right)
        measured = measured or explain_steps(tck, inst, inputs, full, cached, prefill, decoded)
        if measured is not None:
            raise CheckFailure(measured[0], f"{measured[1]}; {numbers}", result.metrics())
        raise CheckFailure("cache.mismatch", f"{numbers} ({clause})", result.metrics())


@spec("11.6", id="decoder.kv_cache")
@components(*CAUSAL)
def test_kv_cache(tck: Harness) -> None:
    """§11.6: decoding with the subject's own cache, a prefill of 1 or 4 tokens and then one
    token per step, gives at every step what one full forward gives (length 11, batch 2)."""
    inst = instance(tck)
    check_cache(tck, inst, unpadded(tck, inst, 2, 11, seed=500), "unpadded rows of length 11")


@spec("11.6", "11.7", id="decoder.kv_cache_left_padded")
@components(*CAUSAL)
def test_kv_cache_left_padded(tck: Harness) -> None:
    """§11.6, §11.7: the same with left-padded rows (lengths 11 and 7) and shifted position
    ids, the key padding growing with the sequence: how generate() decodes a batch."""
    inst = instance(tck)
    inputs = left_padded(tck, inst, (11, 7), seed=501)
    try:
        check_cache(tck, inst, inputs, "left-padded rows of lengths 11 and 7")
    except Unsupported as err:
        pytest.skip(f"left padding needs key_padding and positions: {err}")


@spec("11.9", "11.6", "11.7", id="decoder.kv_cache_chunked")
@components(*CAUSAL)
def test_kv_cache_chunked(tck: Harness) -> None:
    """§11.9: chunked prefill. Calls of several tokens on a non-empty cache (a prefill of 1,
    then 2 tokens per call; a prefill of 3, then 4) give what one full forward gives: the
    causal mask of such a call is bottom-right within the cache (query i of n sees keys up to
    T - n + i) and its tokens are numbered after the cache. Unpadded rows, then left-padded
    ones where the subject takes key_padding."""
    inst = instance(tck)
    check_cache(
        tck,
        inst,
        unpadded(tck, inst, 2, 11, seed=502),
        "unpadded rows of length 11",
        CHUNKED,
        clause="SPEC.md §11.6, §11.9",
    )
    try:  # batched prompts, left-padded, fed in chunks (§11.7)
        check_cache(
            tck,
            inst,
            left_padded(tck, inst, (11, 6), seed=506),
            "left-padded rows of lengths 11 and 6",
            CHUNKED,
            clause="SPEC.md §11.6, §11.7, §11.9",
        )
    except Unsupported as why:
        tck.note({"unsupported_calls": [f"left-padded rows: {why}"]})


@spec("11.9", "11.6", id="decoder.kv_cache_own_positions")
@components(*CAUSAL)
def test_kv_cache_own_positions(tck: Harness) -> None:
    """§11.9: a subject that numbers the new tokens itself (``Subject.derives_positions``)
    is decoded without ``positions`` (one token per call, then chunks), as generate()
    leaves it to: each token must be placed after the cached ones, not from 0 again."""
    if not tck.subject.derives_positions:
        pytest.skip(
            "the subject does not declare derives_positions: its steps are always given "
            "position ids (Subject.derives_positions, SPEC.md §11.9)"
        )
    inst = instance(tck)
    inputs = {k: v for k, v in unpadded(tck, inst, 2, 11, seed=503).items() if k != "positions"}
    check_cache(
        tck,
        inst,
        inputs,
        "unpadded rows of length 11",
        ((4, 1), (3, 4)),
        give_positions=False,
        clause="SPEC.md §11.6, §11.9",
    )


@spec("11.9", "10.1", id="decoder.forward_after_steps")
@components(*CAUSAL)
def test_forward_after_steps(tck: Harness) -> None:
    """§11.9: a plain forward after cached decoding on the same instance gives what it gave
    before: the cache of the decoded sequence does not leak into a later full forward."""
    inst = instance(tck)
    inputs = unpadded(tck, inst, 2, 9, seed=504)
    before = tck.run(inst, inputs)
    try:
        step_outputs(tck, inst, unpadded(tck, inst, 2, 11, seed=505), 4, 1)
    except Unsupported as err:
        pytest.skip(f"incremental decoding: {err}")
    result = same(inst, tck.run(inst, inputs), before)
    tck.note({"max_abs_delta": result.max_abs_err})
    if not result.passed:
        raise CheckFailure(
            "cache.leaks_into_forward",
            "after decoding 11 tokens with step(), a plain forward of other tokens on the same "
            f"instance differs from the same forward before: {describe(result)}; the cache "
            "(or state it filled) is still read by a call that was given none (SPEC.md §11.9, "
            "§10.1)",
            result.metrics(),
        )


# ------------------------------------------------------------- same-length batches, reuse


@spec("10.2", "11.8", id="decoder.batch_rows_same_length")
@components(*CAUSAL)
def test_batch_rows_same_length(tck: Harness) -> None:
    """§10.2 on causal subjects, with no padding (so every subject takes it): each row of a
    batch of 3 rows of length 7 gives what it gives alone."""
    inst = instance(tck)
    inputs = unpadded(tck, inst, 3, 7, seed=410)
    out = tck.run(inst, inputs)
    for b in range(3):
        result = same(inst, out[b : b + 1], tck.run(inst, batch_slice(inputs, b)))
        tck.note({"max_abs_delta": result.max_abs_err})
        if not result.passed:
            raise CheckFailure(
                "batch.rows_interact",
                f"batch row {b} of 3 (unpadded, length 7) differs from the same row run alone: "
                f"{describe(result)} (SPEC.md §10.2)",
                result.metrics(),
            )


@spec("10.1", id="decoder.instance_reuse")
@components(*CAUSAL)
def test_instance_reuse(tck: Harness) -> None:
    """§10.1 on causal subjects, unpadded: after calls with other batch sizes and lengths
    (longer and shorter), the first inputs give the first output again."""
    inst = instance(tck)
    first = unpadded(tck, inst, 2, 5, seed=420)
    out = tck.run(inst, first)
    for batch, length in ((2, 12), (3, 3)):
        tck.run(inst, unpadded(tck, inst, batch, length, seed=421 + length))
        result = same(inst, tck.run(inst, first), out)
        tck.note({"max_abs_delta": result.max_abs_err})
        if not result.passed:
            raise CheckFailure(
                "state.leaks_between_calls",
                f"after a call with batch {batch} and length {length}, the first inputs (batch "
                f"2, length 5) give another output: {describe(result)}; state (a cache sized "
                "or filled by an earlier call: a causal mask, cos/sin tables) leaks between "
                "calls (SPEC.md §10.1)",
                result.metrics(),
            )


# ------------------------------------------------------------------- the attention scale


def two_key_weights(
    probe: Config, conv: Conventions, norm: Any, scores: float, *, own_key: bool = False
) -> dict[str, np.ndarray]:
    """Canonical q/k/v/o weights under which token 1 of the two tokens ``norm`` maps to (the
    rows of ``probe_tokens`` as the attention sees them: after the block's norm) has, per
    head h, scores (scores, 0) against (token 0, token 1) and reads its two weights off
    channels (h d_k, h d_k + 1): key 0 = u_h, key 1 = 0, query 1 = scores R(-1) u_h (under
    RoPE, token 1's rotation by position 1 then gives scores u_h: §2.3), value 0 = e_0,
    value 1 = e_1, output projection the identity. ``own_key``: the scores are (0, scores)
    instead, key 0 = 0 and key 1 = u_h, so that the score is token 1's query against its own
    key at its own position: any rotation that is one (whatever its frequencies, pairing,
    direction or position offset) cancels in q . k, and no turn-back is needed."""
    h, dk, d = probe.n_heads, probe.head_dim_k, probe.d_model
    seen = np.stack([norm[0], norm[1]], axis=1)  # (D, 2): the two tokens as attention sees them
    inverse = np.linalg.pinv(seen)  # (2, D): W @ seen = targets for W = targets @ inverse
    rng = np.random.default_rng(7)
    targets = {name: np.zeros((h * dk, 2)) for name in "qkv"}
    for head in range(h):
        rows = slice(head * dk, (head + 1) * dk)
        u = rng.standard_normal(dk)
        u /= np.linalg.norm(u)
        targets["k"][rows, 1 if own_key else 0] = u
        query = u
        if conv.positions == "rope" and not own_key:  # R(1) R(-1) u = u
            omega = oracle.rope_frequencies_of(dk, conv)  # §2.6: scaled as declared
            query = oracle.rope(
                u[None], [-1], base=conv.pe_base, layout=conv.rope_layout, frequencies=omega
            )[0]
        targets["q"][rows, 1] = scores * query
        targets["v"][head * dk, 0] = targets["v"][head * dk + 1, 1] = 1.0
    out = {f"{name}.weight": target @ inverse for name, target in targets.items()}
    out["o.weight"] = np.eye(d)
    return out


def probe_tokens(d_model: int, n_heads: int) -> np.ndarray:
    """Two tokens (2, D): token 0 has 3 at channel h d_k of every head h, token 1 at h d_k + 1
    (linearly independent before and after any norm)."""
    dk = d_model // n_heads
    x = np.zeros((2, d_model))
    x[0, ::dk] = x[1, 1::dk] = 3.0
    return x


@spec("3.1", "3.2", "11.1", "11.4", id="decoder.effective_scale")
@components(*(name for name in CAUSAL if record(name).level != "model"))
def test_effective_scale(tck: Harness) -> None:
    """§3.1 inside causal attention: per head, the second of two tokens has scores (s, 0)
    against the two keys (weights loaded to make it so, its query turned back by RoPE's
    rotation at position 1), and its output reads the two weights, so scale = logit / s,
    which must be 1/sqrt(d_k). In a pre-LN decoder block the weights are solved through the
    norm (gain 1) and the FFN is zero, so the block's output minus its input is the
    attention's."""
    from tck.conformance.checks.test_attention import (
        PROBE_SCORES,
        SCALE_RTOL,
        judge_scale,
        logit_pair,
    )

    inst = instance(tck)
    c, conv = inst.config, inst.conventions
    if c.n_heads * c.head_dim_k != c.d_model or c.head_dim_v != c.head_dim_k:
        pytest.skip("the probe needs H * d_k = H * d_v = d_model")
    if c.kv_heads != c.n_heads:
        pytest.skip("the probe needs as many key/value heads as query heads")
    block = record(tck.component).level == "layer"
    if block and conv.norm_placement != "pre":
        pytest.skip("post-LN: the attention's output is normalised before it can be read")
    params = zero_params(inst)
    x = probe_tokens(c.d_model, c.n_heads)
    prefix = "self_attn." if block else ""
    seen = x
    if block:
        for name in params:  # norms with gain 1 and shift 0; every FFN weight 0
            if name.startswith(("norm1.", "norm2.")) and name.endswith("weight"):
                params[name] = np.ones_like(params[name])
        seen = oracle.norm(x, params, "norm1.", conv)
    inputs: Inputs = {"x": x[None]}  # at positions 0 and 1
    dk = c.head_dim_k
    measured: list[np.ndarray] = []
    # Under RoPE the scale is read twice: against key 0 with the query turned back by the
    # declared rotation at position 1, and against the query's own key, where any rotation
    # cancels. A subject that rotates otherwise than declared (frequencies, table layout)
    # moves the first reading only: then the two disagree and no scale is read at all, so a
    # RoPE bug is never named a scale (the oracle comparisons name it).
    own_keys = [False, True] if conv.positions == "rope" else [False]
    readings: dict[bool, list[np.ndarray]] = {own: [] for own in own_keys}
    for score, own_key in itertools.product(PROBE_SCORES, own_keys):
        measured = readings[own_key]
        for name, value in two_key_weights(c, conv, seen, score, own_key=own_key).items():
            params[prefix + name] = value
        try:
            tck.adapter.load(inst.handle, params)
        except Unsupported as err:
            pytest.skip(f"the probe loads its weights: {err}")
        out = tck.run(inst, inputs)
        attended = out[0] - x if block else out[0]  # (2, D)
        first = attended[0].reshape(c.n_heads, dk)[:, :2]
        if not same(inst, first, np.tile([1.0, 0.0], (c.n_heads, 1))).passed:
            pytest.skip(
                "the probe's first token does not read back its own value (1, 0) per head, so "
                "the weights cannot be read off (see decoder.oracle_lengths)"
            )
        heads = attended[1].reshape(c.n_heads, dk)  # per head: (w0, w1, 0, ...)
        if not same(inst, heads[:, 0] + heads[:, 1], np.ones(c.n_heads)).passed:
            pytest.skip(
                "the weights of the two keys do not sum to 1, so the scale cannot be read off "
                "(see decoder.oracle_lengths)"
            )
        if own_key:
            measured.append(logit_pair(heads[:, 1], heads[:, 0]) / score)
        else:
            measured.append(logit_pair(heads[:, 0], heads[:, 1]) / score)
    measured = readings[False]
    if True in readings:
        turned, own = np.array(readings[False]), np.array(readings[True])
        with np.errstate(invalid="ignore"):
            apart = np.abs(turned - own) > SCALE_RTOL * np.abs(own)
        if apart.any():
            tck.note({"scale_readings_disagree": float(np.nanmax(np.abs(turned - own)))})
            pytest.skip(
                "the scale read against the query's own key and against key 0 after the "
                "declared RoPE turn-back disagree: the subject rotates otherwise than declared "
                "(see the rope and oracle checks), so no scale is read"
            )
    where = "the attention of a pre-LN decoder block" if block else "causal self-attention"
    judge_scale(tck, np.array(measured).T, c, f"{where} (per head, two-token probe)")


# ---------------------------------------------------------------------------- left padding


def padding_on_queries(tck: Harness, inst: Instance, inputs: Inputs, out: np.ndarray) -> bool:
    """Is ``out`` the spec's with the key-padding mask over the queries, at every position?
    On real rows of a causal subject that is the output without padding (each real query
    sees every earlier key, pads included): what tells the two apart is the pad rows, left
    with no key, which follow a fully-masked-row policy (§4.4: 0, uniform, or non-finite
    exactly there; or the mean of the keys the causal mask left, where both fills are
    added) instead of attending their keys."""
    from tck.conformance.diagnosis.explain import padding_over_queries

    # the pad rows follow a §4.4 policy, or average the keys the causal mask left them
    for pieces, policy in (
        *((padding_over_queries(), policy) for policy in ("zero", "uniform", "nan")),
        (padding_over_queries(causal_uniform=True), "zero"),
    ):
        variant = oracle_variant(pieces)
        conventions = dataclasses.replace(inst.conventions, fully_masked_rows=policy)
        try:
            gold = expected_under(
                variant, tck.component, inputs, inst.params, inst.config, conventions
            )
        except (ValueError, KeyError):
            return False
        undefined = np.isnan(gold)
        if undefined.any() and not np.array_equal(undefined, ~np.isfinite(out)):
            continue
        if compare(out, gold, dtype=inst.dtype, ignore=undefined).passed:
            return True
    return False


def real_positions(inputs: Inputs, out: np.ndarray) -> np.ndarray:
    """Where ``out`` (B, L, ...) holds a real token: ``key_padding`` over its trailing axes."""
    keep = np.asarray(inputs["key_padding"], bool)
    return np.broadcast_to(keep[(..., *([None] * (out.ndim - 2)))], out.shape)


def pad_rows_spread_nan(tck: Harness, inst: Instance, inputs: Inputs, out: np.ndarray) -> None:
    """Raise ``mask.fully_masked_rows_nan`` when the spec under ``fully_masked_rows='nan'``
    is non-finite at exactly the real positions where ``out`` is, and agrees elsewhere: a
    left pad's query has no key (its keys are pads, the causal mask hides the rest), a fill
    of -inf gives its row 0/0, and the next layer's zero weight on that pad's NaN value
    (0 * NaN) carries it to every real token. Public: pytorch/pytorch#26098,
    huggingface/transformers#15326, NVIDIA-BioNeMo/bionemo-recipes#35."""
    declared = inst.conventions.fully_masked_rows
    if inst.params is None or declared == "nan" or "key_padding" not in inputs:
        return
    conventions = dataclasses.replace(inst.conventions, fully_masked_rows="nan")
    try:
        gold = tck.gold(inst, inputs, conventions=conventions)
    except (ValueError, KeyError):
        return
    if gold.shape != out.shape:
        return
    real = real_positions(inputs, out)
    spread, undefined = ~np.isfinite(out) & real, ~np.isfinite(gold) & real
    if not spread.any() or not np.array_equal(spread, undefined):
        return
    if not compare(out, gold, dtype=inst.dtype, ignore=~real | undefined).passed:
        return
    if inst.dtype == "float64" and finite_in_float32(tck, inst, inputs, real):
        code = "numerics.float32_island"
        raise CheckFailure(
            code,
            f"the real tokens are NaN or inf at exactly the {int(spread.sum())} position(s) "
            "where the spec with fully_masked_rows='nan' is, in float64 only: the same call in "
            "float32 keeps them finite, as declared. A float64 fill that float32 cannot hold "
            "(finfo(float64).min, -1e300) becomes -inf in a step computed in float32 (a "
            "softmax with dtype=float32, scores cast down), so a left pad's query row is 0/0 "
            "and the next layer carries the NaN to the real tokens: compute the step in the "
            "input dtype, or take the fill from the dtype of the step (SPEC.md §10.12, §4.4)",
            {"reproduced_by": code, "reproduced_at": inst.dtype},
        )
    code = "mask.fully_masked_rows_nan"
    raise CheckFailure(
        code,
        f"the real tokens are NaN or inf at exactly the {int(spread.sum())} position(s) where "
        "the spec with fully_masked_rows='nan' is, and agree with it elsewhere: a left pad's "
        "query has no key to attend, a fill of -inf makes its row 0/0, and the next layer's "
        "zero weight on that pad's NaN value (0 * NaN) carries the NaN to the real tokens; "
        f"the adapter declares fully_masked_rows={declared!r} (a finite fill such as "
        "finfo.min keeps the pads' rows finite; SPEC.md §4.4, §11.7)",
        {"reproduced_by": code, "reproduced_at": inst.dtype},
    )


def finite_in_float32(tck: Harness, inst: Instance, inputs: Inputs, real: np.ndarray) -> bool:
    """Does the subject, built in float32 from the same parameters, give finite values at
    every real position of ``inputs``? False where it cannot be built or run in float32."""
    try:
        low = tck.instance(inst.config, dtype="float32")
        out = np.asarray(tck.run(low, inputs), dtype=np.float64)
    except (Unsupported, AdapterFailure, ValueError, RuntimeError):
        return False
    return out.shape == real.shape and bool(np.isfinite(out[real]).all())


@spec("11.7", id="decoder.left_padding")
@components(*CAUSAL)
def test_left_padding(tck: Harness) -> None:
    """§11.7: a left-padded row, key padding False on its pads and its position ids shifted
    so its first real token is at 0, gives at its real positions what the row gives alone."""
    inst = instance(tck)
    inputs = left_padded(tck, inst, LEFT_PADDED, seed=600)
    out = run_or_skip(tck, inst, inputs, "left padding needs key_padding and positions")
    check_left_padded(tck, inst, inputs, out)


@spec("11.7", "11.9", id="decoder.left_padding_own_positions")
@components(*CAUSAL)
def test_left_padding_own_positions(tck: Harness) -> None:
    """§11.7, §11.9: a subject that numbers its tokens from the padding mask
    (``Subject.derives_positions = "padding"``: ``cumsum(mask) - 1``, as OPT and generate()
    do) is given left-padded rows without position ids, one call and then cached steps: each
    row must give at its real positions what it gives alone, its pads left uncounted."""
    if tck.subject.derives_positions != "padding":
        pytest.skip(
            "the subject does not declare derives_positions='padding': left-padded rows are "
            "always given their position ids (Subject.derives_positions, SPEC.md §11.9)"
        )
    inst = instance(tck)
    inputs = left_padded(tck, inst, LEFT_PADDED, seed=601)
    unnumbered = {k: v for k, v in inputs.items() if k != "positions"}
    out = run_or_skip(tck, inst, unnumbered, "left padding needs key_padding")
    check_left_padded(tck, inst, inputs, out, positions_given=False)
    check_cache(
        tck,
        inst,
        {k: v for k, v in left_padded(tck, inst, (11, 7), seed=602).items() if k != "positions"},
        "left-padded rows of lengths 11 and 7",
        ((4, 1), (3, 4)),
        give_positions=False,
        clause="SPEC.md §11.6, §11.7, §11.9",
    )


LEFT_PADDED = (9, 6, 2)


def check_left_padded(
    tck: Harness, inst: Instance, inputs: Inputs, out: np.ndarray, *, positions_given: bool = True
) -> None:
    """Each row of the left-padded call ``inputs`` (output ``out``; ``positions_given``:
    the call carried the shifted position ids, else the subject numbered its tokens) against
    the row alone at its real positions; a difference named by the account that reproduces
    it."""
    name = token_input(tck.component)
    total = np.shape(inputs[name])[1]
    lengths = tuple(int(n) for n in np.asarray(inputs["key_padding"]).sum(axis=1))
    for b, length in enumerate(lengths):
        pad = total - length
        alone = {name: np.asarray(inputs[name])[b : b + 1, pad:]}
        truth = tck.run(inst, alone)
        try:
            result = same(inst, out[b : b + 1, pad:], truth, what=f"left-padded row {b} -> alone")
        except CheckFailure as failure:
            if failure.code == "numerics.nonfinite_output":
                pad_rows_spread_nan(tck, inst, inputs, out)
            raise
        tck.note({"max_abs_delta": result.max_abs_err})
        if result.passed:
            continue
        numbers = (
            f"row {b} ({length} tokens after {pad} pads) differs from the row alone: "
            f"{describe(result)}"
        )
        if inst.params is not None:
            pads = ~real_positions(inputs, out)
            unshifted = {k: v for k, v in inputs.items() if k != "positions"}
            gold = tck.gold(inst, unshifted)
            if compare(out, gold, dtype=inst.dtype, ignore=pads).passed:
                whose = "given" if positions_given else "the subject derives"
                raise CheckFailure(
                    "padding.left_positions_not_shifted",
                    "the output is what position ids 0 .. L-1 give, counting the pads: the "
                    f"position ids {whose} are not shifted past the left padding (SPEC.md "
                    "§11.7); " + numbers,
                    result.metrics(),
                )
            if padding_on_queries(tck, inst, inputs, out):
                raise CheckFailure(
                    "mask.applied_to_queries",
                    "the output is the spec's with the key-padding mask laid over the query "
                    "axis (mask[:, None, :, None]): the pad rows have no key left, and the real "
                    "tokens attend the left pads as if there were no padding (SPEC.md §4.2, "
                    "§11.7); " + numbers,
                    result.metrics(),
                )
            unmasked = {k: v for k, v in inputs.items() if k != "key_padding"}
            if compare(out, tck.gold(inst, unmasked), dtype=inst.dtype, ignore=pads).passed:
                raise CheckFailure(
                    "mask.ignored",
                    "the output is what the spec gives with no key padding: the real tokens "
                    "attend the left pads (SPEC.md §11.7); " + numbers,
                    result.metrics(),
                )
            account = reproduced_on_oracle(tck, inst, inputs) if positions_given else None
            if account is not None:
                raise CheckFailure(
                    account.code,
                    f"{account.message}; {numbers} (SPEC.md §11.7)",
                    {**result.metrics(), "reproduced_by": account.code},
                )
        raise CheckFailure(
            "padding.left_padding_changes_output", f"{numbers} (SPEC.md §11.7)", result.metrics()
        )


def reproduced_on_oracle(tck: Harness, inst: Instance, inputs: Inputs) -> CheckFailure | None:
    """The explainer's account of a padded call, where a hypothesis reproduces the output:
    the call compared with the oracle (``Harness.assert_matches_oracle``). A left-padded call
    is where a padding mask read inverted shows on a causal subject: right-padded, every real
    row it empties is a row §4.4 decides, and the pads it leaves seeing keys are rows the spec
    does not promise (§11.7)."""
    try:
        tck.assert_matches_oracle(inst, inputs, what="the left-padded call")
    except CheckFailure as failure:
        if tck.record.metrics.get("reproduced_by") == failure.code:
            return failure
    except (Unsupported, AdapterFailure, ValueError):
        pass
    return None
