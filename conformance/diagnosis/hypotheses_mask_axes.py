"""Masks and weights on the wrong axis of the scores, by class: the causal triangle read
inverted, the attention weights contracted with the values over the query axis, and the
batch axis read as the sequence axis.

- ``mask.polarity_inverted`` (the causal triangle): the subsequent-positions mask kept where
  it should hide, ``subsequent == 1`` for ``subsequent == 0`` (``triu(ones, 1)`` used as a
  keep-mask): each query sees the keys after it and none before it, its own included. The
  piece replaced is §4.3's ``causal_keep_mask``, so every component whose oracle builds a
  causal mask gets it (a decoder layer, a seq2seq model's decoder, a causal LM). The last
  query then has no key at all, which each implementation fills its own way (a finite fill
  makes it uniform, -inf makes it NaN): those rows are left out of the judgement.
  A padding property check reads this bug as a padding mask laid over the queries (the
  right-padded queries see only later keys, which are pads); the oracle reproducing it
  names it.
- ``attention.softmax_axis_wrong`` (the weights transposed): ``einsum("bhij,bhid->bhjd",
  attn, v)`` for ``"bhij,bhjd->bhid"``, i.e. ``attn^T @ v``: output row j sums the values
  of the queries with the weights every query gave key j, so each output row's weights are
  normalised over the other axis. Only a call with as many queries as keys can run it (an
  attention whose queries and keys differ in number fails on its own shapes).

- ``batch.rows_interact`` (the batch read as the sequence): a sequence-first module
  (``nn.MultiheadAttention`` or ``nn.TransformerEncoderLayer`` without ``batch_first=True``)
  given ``(B, L, D)`` tensors attends, at each position, over the *sequences of the batch*
  at that position: the attention's batch and sequence axes swapped, every per-token step
  (projections, norms, FFN) unchanged. Only an unmasked call with as many queries as keys
  and a batch of two or more runs it (the module refuses a ``(B, L)`` padding mask unless
  B == L; one sequence would make each token attend to itself alone, which other bugs can
  produce).

All replace one piece of the oracle (``tck.reference.variants``) and are judged by the rules
of ``alternatives.fits``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from tck.reference import oracle
from tck.reference.variants import reaches

from .alternatives import Alternative


def _causal_inverted(lq: int, lk: int, alignment: str = "top_left", window: int | None = None):  # type: ignore[no-untyped-def]
    """§4.3's keep-mask inverted: the keys strictly after each query (and, under a sliding
    window, the keys out of it)."""
    return ~oracle.causal_keep_mask(lq, lk, alignment, window)


def causal_inverted_hypotheses(component: str) -> Iterator[Alternative]:
    """The causal triangle read inverted, wherever the component's oracle builds one."""
    if not reaches(component, "causal_keep_mask"):
        return
    yield Alternative(
        "mask.polarity_inverted",
        "the output is the spec's with the causal (subsequent-positions) mask inverted: each "
        "query sees the keys after it and hides the ones before it and its own "
        "(subsequent == 1 for subsequent == 0, or triu(ones, 1) used as a keep-mask); the "
        "future leaks and the past is lost (SPEC.md §4.3, §4.1)",
        pieces={"causal_keep_mask": _causal_inverted},
        conventions={"fully_masked_rows": "nan"},
        nan="ignore",
    )


def _sdpa_weights_transposed(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    """§3.1's weights (softmax over the keys, masked keys removed) contracted with the values
    over the query axis: ``weights^T @ v``."""
    q, k, v = oracle._f64(q), oracle._f64(k), oracle._f64(v)
    if q.shape[-2] != k.shape[-2]:
        raise ValueError("the weights' transpose needs as many queries as keys")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    if keep_mask is not None:
        keep = np.broadcast_to(np.asarray(keep_mask, bool), scores.shape)
        scores = np.where(keep, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        weights = np.nan_to_num(oracle.softmax(scores), nan=0.0)
    return np.swapaxes(weights, -1, -2) @ v


def weights_transposed_hypotheses(component: str) -> Iterator[Alternative]:
    """The attention weights contracted with the values over the query axis."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    yield Alternative(
        "attention.softmax_axis_wrong",
        "the output is the spec's with the attention weights transposed before they meet the "
        "values (attn^T @ v; einsum 'bhij,bhid->bhjd' for 'bhij,bhjd->bhid'): output row j "
        "sums the values with the weights every query gave key j, weights normalised over the "
        "keys where the contraction runs over the queries (SPEC.md §3.1)",
        pieces={"scaled_dot_product_attention": _sdpa_weights_transposed},
    )


def _sdpa_batch_as_sequence(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    """§3.1 with the batch axis (the first) and the sequence axis (the second-last) of q, k
    and v swapped: each position attends over the batch's rows at that position."""
    q, k, v = oracle._f64(q), oracle._f64(k), oracle._f64(v)
    if q.ndim < 3 or q.shape[0] < 2 or q.shape[-2] != k.shape[-2]:
        raise ValueError("the batch read as the sequence needs a batch of two or more, Lq == Lk")
    if keep_mask is not None and not np.all(keep_mask):
        raise ValueError("a sequence-first module refuses a batch-first mask")
    out = oracle.scaled_dot_product_attention(
        *(np.swapaxes(t, 0, -2) for t in (q, k, v)),
        scale=scale,
        fully_masked_rows=fully_masked_rows,
    )
    return np.swapaxes(out, 0, -2)


def batch_as_sequence_hypotheses(component: str) -> Iterator[Alternative]:
    """The attention's batch and sequence axes swapped (a sequence-first module called
    batch-first)."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    yield Alternative(
        "batch.rows_interact",
        "the output is the spec's with the attention's batch and sequence axes swapped: each "
        "position attends over the batch's rows at that position, not over its own sequence "
        "(a sequence-first nn.MultiheadAttention or nn.TransformerEncoderLayer, batch_first "
        "left False, given (B, L, D) tensors); per-token steps are unchanged, so only the "
        "attention mixes the batch (SPEC.md §3.1, §10.2)",
        pieces={"scaled_dot_product_attention": _sdpa_batch_as_sequence},
    )


def mask_axes_hypotheses(component: str) -> Iterator[Alternative]:
    """Every hypothesis of this module for ``component``, in the order they are tried."""
    yield from causal_inverted_hypotheses(component)
    yield from weights_transposed_hypotheses(component)
    yield from batch_as_sequence_hypotheses(component)
