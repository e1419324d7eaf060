"""Heads folded into the batch: explanations for attention written in the layout of
fairseq's and ``torch.nn.MultiheadAttention``'s reference code, where the heads are folded
into the batch axis (``[B * H, L, d]``) and the activations are often time-first
(``[L, B, D]``).

In that layout a missing transpose does not stay within one sequence: viewing a time-first
``[L, B, D]`` tensor as ``[B * H, L, d]`` without first moving the batch axis reads rows of
*other batch rows* into a head, and a softmax over the folded axis normalises across batch
rows and heads at once. The symptom is that a batch's rows interact (SPEC.md §10.2); the
cause is one of these, and each reproduces the subject's output on a batched call:

- ``attention.heads_split_wrong_order``: the queries, the keys, the values (or several of
  them) viewed as ``[B * H, L, d]`` straight from their ``[B, L, D]`` (batch-first) or
  ``[L, B, D]`` (time-first) memory, without the transpose; each target alone as well as
  all three, since a port often rewrites one of the three lines only (SPEC.md §3.3);
- ``attention.heads_merged_wrong_order``: the ``[B * H, L, d]`` heads viewed as
  ``[L, B, D]`` without the transpose (time-first; the batch-first form is
  ``hypotheses_more``'s);
- ``attention.softmax_axis_wrong``: the softmax over the folded ``B * H`` axis of the
  ``[B * H, Lq, Lk]`` scores (``dim=0``), which is the batch and head axes together
  (``hypotheses_layout`` has each single axis).

They apply wherever the component's oracle runs the piece they replace (``split_heads``,
``merge_heads``, ``scaled_dot_product_attention``; ``tck.reference.variants.reaches``), so
every layer, stack and model with attention gets them, with no list of components.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tck.reference import oracle
from tck.reference.variants import reaches

from .alternatives import Alternative
from .hypotheses_layout import MASK_FILL, _scores

# The layouts a [*, L, D] activation can sit in memory before the heads are folded out of it.
LAYOUTS = ("batch_first", "time_first")
_LAYOUT_WORDS = {"batch_first": "[B, L, D] (batch-first)", "time_first": "[L, B, D] (time-first)"}

# Which of the projections the wrong split reaches: each alone, the keys and values together
# (one line for both in many ports), all three.
TARGETS: tuple[tuple[str, ...], ...] = (("q",), ("k",), ("v",), ("k", "v"), ("q", "k", "v"))
_TENSOR_WORDS = {"q": "queries", "k": "keys", "v": "values"}

# The oracle splits q, k, v in this order in every attention it runs (SPEC.md §3.4, §11.2).
_SPLIT_ORDER = ("q", "k", "v")


def fold_without_transpose(x: Any, n_heads: int, layout: str) -> np.ndarray:
    """(B, L, H*d) in memory as ``layout``, viewed as (B*H, L, d) without the transpose and
    returned as (B, H, L, d): ``x.view(B * H, L, d)`` on a batch-first tensor,
    ``x.view(B * H, L, d)`` on a time-first ``[L, B, D]`` one where the spec's
    ``x.view(L, B * H, d).transpose(0, 1)`` is meant."""
    x = oracle._f64(x)
    b, length, width = x.shape
    if width % n_heads:
        raise ValueError(f"width {width} is not divisible by n_heads={n_heads}")
    memory = x if layout == "batch_first" else np.ascontiguousarray(x.transpose(1, 0, 2))
    return memory.reshape(b, n_heads, length, width // n_heads)


def unfold_without_transpose(x: Any) -> np.ndarray:
    """(B, H, L, d) heads, in memory as (B*H, L, d), viewed as a time-first (L, B, H*d)
    tensor without the transpose, returned as (B, L, H*d)."""
    x = oracle._f64(x)
    b, h, length, d = x.shape
    return np.ascontiguousarray(x).reshape(length, b, h * d).transpose(1, 0, 2)


def _split_some(targets: tuple[str, ...], layout: str) -> Callable[[], dict[str, Any]]:
    """A fresh ``split_heads`` for each evaluation that folds the ``targets`` among q, k, v
    (the oracle's calls, in that order) without the transpose, the others as the spec does."""

    def pieces() -> dict[str, Any]:
        calls = [0]

        def split_heads(x: Any, n_heads: int) -> np.ndarray:
            which = _SPLIT_ORDER[calls[0] % len(_SPLIT_ORDER)]
            calls[0] += 1
            if which in targets:
                return fold_without_transpose(x, n_heads, layout)
            return oracle.split_heads(oracle._f64(x), n_heads)

        return {"split_heads": split_heads}

    return pieces


def folded_split_hypotheses(component: str) -> Iterator[Alternative]:
    """q, k or v (or several) folded into (B*H, L, d) without the transpose, from a
    batch-first or a time-first tensor. All three from a batch-first tensor is
    ``hypotheses_more.head_split_hypotheses``'s and is not repeated here."""
    if not reaches(component, "split_heads"):
        return
    for layout in LAYOUTS:
        for targets in TARGETS:
            if layout == "batch_first" and len(targets) == len(_SPLIT_ORDER):
                continue
            words = " and ".join(_TENSOR_WORDS[t] for t in targets)
            yield Alternative(
                "attention.heads_split_wrong_order",
                f"the output is the spec's with the {words} split into heads by a view "
                f"without the transpose: {_LAYOUT_WORDS[layout]} viewed straight as "
                "[B*H, L, d] (x.view(B*H, L, d)) where the spec splits each position's "
                "channels (x.view(L, B*H, d).transpose(0, 1) time-first, "
                "x.view(B, L, H, d).transpose(1, 2) batch-first), so a head holds other "
                "positions' (and, time-first, other batch rows') channels and the batch's "
                "rows interact (SPEC.md §3.3)",
                pieces=_split_some(targets, layout),
            )


def folded_merge_hypotheses(component: str) -> Iterator[Alternative]:
    """The (B*H, L, d) heads viewed as a time-first (L, B, D) tensor without the transpose."""
    if not reaches(component, "merge_heads"):
        return
    yield Alternative(
        "attention.heads_merged_wrong_order",
        "the output is the spec's with the heads merged by a view without the transpose: "
        "the [B*H, L, d] attention output viewed straight as a time-first [L, B, D] tensor "
        "(attn.view(L, B, D)) where the spec takes attn.transpose(0, 1).view(L, B, D), so each "
        "output row mixes other positions', other heads' and other batch rows' values "
        "(SPEC.md §3.3)",
        pieces={"merge_heads": unfold_without_transpose},
    )


def _sdpa_softmax_over_folded(fill: float) -> Callable[..., np.ndarray]:
    """Scaled dot-product attention whose softmax runs over the batch and head axes together
    (``softmax(dim=0)`` on folded (B*H, Lq, Lk) scores), masked scores filled with ``fill``."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        scores = _scores(q, k, scale)
        if scores.ndim != 4:
            raise ValueError("no folded batch and head axes")
        if keep_mask is not None:
            keep = np.broadcast_to(np.asarray(keep_mask), scores.shape)
            scores = np.where(keep, scores, fill)
        with np.errstate(invalid="ignore", over="ignore"):
            shifted = scores - np.max(scores, axis=(0, 1), keepdims=True)
            e = np.exp(shifted)
            weights = np.nan_to_num(e / e.sum(axis=(0, 1), keepdims=True), nan=0.0)
        return weights @ oracle._f64(v)

    return sdpa


def folded_softmax_hypotheses(component: str) -> Iterator[Alternative]:
    """The softmax over the folded batch*heads axis of the scores."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    for fill in (MASK_FILL, -np.inf):
        yield Alternative(
            "attention.softmax_axis_wrong",
            "the output is the spec's with the softmax taken over the folded batch*heads "
            "axis of [B*H, Lq, Lk] scores (softmax(scores, dim=0)) instead of over the keys "
            "(dim=-1): each weight is normalised across the other batch rows and heads, so the "
            "batch's rows interact (SPEC.md §3.1)",
            pieces={"scaled_dot_product_attention": _sdpa_softmax_over_folded(fill)},
        )


def folded_hypotheses(component: str) -> Iterator[Alternative]:
    """Every hypothesis of this module for ``component``, in the order they are tried."""
    yield from folded_split_hypotheses(component)
    yield from folded_merge_hypotheses(component)
    yield from folded_softmax_hypotheses(component)
