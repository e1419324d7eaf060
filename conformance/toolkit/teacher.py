"""A language model's call at its full context, judged layer by layer ("teacher forcing").

The whole-model comparison of a long call costs one float64 forward of the oracle on top of
the model's own: 0.84 TFLOP for a 135 M-parameter Llama at 2048 tokens, most of a run's time
on a 2-core machine. At real size (``tck.adapters.real_size``) the oracle comparison's call
at the checkpoint's own context is judged instead from what the model computed on the way:

- the input to layer 0 (token embedding, and the learned position table where there is
  one) against the oracle's, at **every** position (SPEC.md §11.5);
- each layer's output against the oracle's decoder block (SPEC.md §11.4) applied to the
  model's own output of the layer before, at a sample of query positions spread over the
  whole context (``judged_rows``: evenly spaced from the first to the last, and a few
  drawn at random), with the keys and values of **every** position up to the last judged
  one: so the causal mask, a sliding window, the RoPE angle of every key and the
  attention over the whole row are the oracle's, at positions up to the context;
- the logits at the judged positions against the oracle's final norm and output
  projection applied to the model's last layer output (SPEC.md §11.5); an adapter that can
  has the model form its logits at those positions alone (``LayerStates.keep_rows``),
  the work of the output head at every other position being that same projection.

Each layer is fed the model's own output of the layer before, so a layer that reads
another tensor (the embedding, an earlier layer's output), runs out of order or is skipped
fails its comparison. Each part is held to the tolerance rule of its own component (the
decoder block's for a layer, the model's for the embedding and the logits), with the
error of one layer rather than the sum of all: the same rule as the whole comparison's,
at a smaller scale. What this leaves out is the outputs at positions not judged: a bug
that changes some positions past the sample and none in it. A bug of a position range
(RoPE past a position, a window, the mask) changes every judged position in that range.

Where any part fails, the harness falls back to the whole-model comparison of the same
output (the oracle's forward of every position), which gives the verdict and the
diagnosis as before: the layer-by-layer judgement only ever decides a pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tck.adapters.real_size import LayerStates
from tck.reference import Config, Conventions, oracle
from tck.reference.params import has_final_norm, subparams
from tck.reference.tolerance import Comparison, compare, k_forward

# Positions judged per layer: evenly spaced from the first to the last (SPREAD) and a few
# drawn at random (RANDOM, seeded), so no fixed stride can hide a periodic bug.
SPREAD = 48
RANDOM = 16


def judged_rows(length: int, seed: int = 0) -> np.ndarray:
    """The query positions judged at each layer: ``SPREAD`` evenly spaced from 0 to
    ``length - 1`` (both included) and ``RANDOM`` drawn at random, sorted, unique."""
    spread = np.linspace(0, length - 1, min(SPREAD, length)).round().astype(np.int64)
    drawn = np.random.default_rng(seed).integers(0, length, size=min(RANDOM, length))
    return np.unique(np.concatenate([spread, drawn, [length - 1]]))


def block_rows(
    x: np.ndarray,
    params: Mapping[str, np.ndarray],
    rows: np.ndarray,
    *,
    n_heads: int,
    n_kv_heads: int | None,
    key_padding: np.ndarray | None,
    positions: np.ndarray,
    conventions: Conventions,
) -> np.ndarray:
    """``oracle.decoder_block(x, ...)[:, rows]`` (SPEC.md §11.4) without computing the other
    rows: queries, the attention output and the FFN at ``rows`` only; keys and values at
    every position up to the last row (a causal query sees no later key). ``positions``
    (B, L) are the position ids (§11.7). The same arithmetic as the oracle's per row, so
    the same values up to the blocking of a matrix product (a few float64 ulps)."""
    x = np.asarray(x, dtype=np.float64)
    length = x.shape[1]
    last = int(rows.max()) + 1
    x = x[:, :last]
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    attn, ffn = subparams(params, "self_attn."), subparams(params, "ffn.")

    def attention(h: np.ndarray) -> np.ndarray:  # h (B, last, D) -> (B, R, D)
        q = oracle.split_heads(oracle.linear(h[:, rows], attn, "q."), n_heads)
        k = oracle.split_heads(oracle.linear(h, attn, "k."), n_kv_heads)
        v = oracle.split_heads(oracle.linear(h, attn, "v."), n_kv_heads)
        if conventions.positions == "rope":
            omega = oracle.rope_frequencies_of(q.shape[-1], conventions)  # §2.6
            layout = conventions.rope_layout
            q = oracle.rope_rows(q, positions[:, rows], layout=layout, frequencies=omega)
            k = oracle.rope_rows(k, positions[:, :last], layout=layout, frequencies=omega)
        k = oracle.repeat_kv(k, n_heads // n_kv_heads)
        v = oracle.repeat_kv(v, n_heads // n_kv_heads)
        window = conventions.sliding_window  # §4.3, §4.5: the rows of the causal mask
        keep = oracle.causal_keep_mask(length, length, window=window)[rows][:, :last]
        if key_padding is not None:
            keep = oracle.key_padding(np.asarray(key_padding)[:, :last]) & keep
        heads = oracle.scaled_dot_product_attention(
            q, k, v, keep, fully_masked_rows=conventions.fully_masked_rows
        )
        return oracle.linear(oracle.merge_heads(heads), attn, "o.")

    if conventions.norm_placement == "post":  # §7.1: Norm(x + f(x))
        y = oracle.norm(x[:, rows] + attention(x), params, "norm1.", conventions)
    else:  # x + f(Norm(x))
        y = x[:, rows] + attention(oracle.norm(x, params, "norm1.", conventions))
    return oracle._sublayer(
        y, params, "norm2.", conventions, lambda h: oracle.decoder_ffn(h, ffn, conventions)
    )


def embedded(
    ids: np.ndarray,
    params: Mapping[str, np.ndarray],
    config: Config,
    conventions: Conventions,
    positions: np.ndarray,
) -> np.ndarray:
    """The oracle's input to layer 0 (SPEC.md §11.5): E[id] times the embedding factor, plus
    the learned position table's rows where there is one."""
    factor, _ = oracle.embedding_scale(config.d_model, conventions)
    x = oracle.embedding(ids, params["embedding.weight"], scale=factor)
    if conventions.positions == "learned":
        x = x + np.asarray(params["pos_embedding.weight"], dtype=np.float64)[positions]
    return x


@dataclass
class Judgement:
    """The parts of a layer-by-layer judgement: each (what, comparison), in order."""

    parts: list[tuple[str, Comparison]]
    rows: int

    @property
    def passed(self) -> bool:
        return all(c.passed for _, c in self.parts)

    def worst(self) -> tuple[str, Comparison]:
        failing = [p for p in self.parts if not p[1].passed]
        return max(failing or self.parts, key=lambda p: p[1].ratio)


def judge(
    inputs: Mapping[str, Any],
    test: np.ndarray,
    states: LayerStates,
    params: Mapping[str, np.ndarray],
    config: Config,
    conventions: Conventions,
    *,
    dtype: str = "float64",
    component: str = "causal_lm",
    seed: int = 0,
) -> Judgement:
    """Judge a causal LM's output ``test`` (B, L, V), or (B, R, V) at the judged positions
    alone (``states.logits_rows``), for ``inputs`` from the ``states`` the model computed
    on the way (module docstring). Padded query rows are not compared (their
    outputs are not promised, SPEC.md §11.7)."""
    ids = np.asarray(inputs["ids"])
    b, length = ids.shape
    positions = oracle.position_ids(inputs.get("positions"), b, length)
    key_padding = inputs.get("key_padding")
    rows = judged_rows(length, seed)
    pads = None if key_padding is None else ~np.asarray(key_padding, dtype=bool)
    row_pads = None if pads is None else pads[:, rows, None]
    k_block, k_model = k_forward("decoder_block"), k_forward(component)

    def held(test_part: np.ndarray, gold: np.ndarray, ignore: np.ndarray | None, k: float):
        if ignore is not None:
            ignore = np.broadcast_to(ignore, gold.shape)
            ignore = ignore if ignore.any() else None
        return compare(test_part, gold, dtype=dtype, k=k, ignore=ignore)

    parts: list[tuple[str, Comparison]] = []
    assert states.first is not None
    gold = embedded(ids, params, config, conventions, positions)
    first_pads = None if pads is None else pads[:, :, None]
    parts.append(
        ("the input to layer 0, every position", held(states.first, gold, first_pads, k_model))
    )
    previous = states.first
    for i, output in enumerate(states.outputs):
        assert output is not None
        gold = block_rows(
            previous,
            subparams(params, f"layers.{i}."),
            rows,
            n_heads=config.n_heads,
            n_kv_heads=config.kv_heads,
            key_padding=key_padding,
            positions=positions,
            conventions=conventions,
        )
        parts.append((f"layer {i}'s output", held(output[:, rows], gold, row_pads, k_block)))
        previous = output
    last = previous[:, rows]
    if has_final_norm(conventions):  # §7.3
        last = oracle.norm(last, params, "norm.", conventions)
    gold = oracle.causal_lm_logits(last, params, config, conventions)
    logits = np.asarray(test)
    if states.logits_rows is None:  # every position's; else the judged ones' alone
        logits = logits[:, rows]
    elif not np.array_equal(states.logits_rows, rows):
        raise ValueError("the model's output holds the logits of other positions than judged")
    parts.append(("the logits", held(logits, gold, row_pads, k_model)))
    return Judgement(parts, len(rows))
