"""Heads laid out feature-major within a position: the (H, d) split or merge of SPEC.md §3.3
read as (d, H).

The spec splits each position's H*d channels into heads head-major: channel ``h*d + j`` is
feature j of head h (``x.view(B, L, H, d)``). A view as (d, H) and a transpose back
(``x.reshape(B*L, d, H).transpose(1, 2)``), or a merge that transposes the last two axes
before the reshape (``ctx.transpose(1, 2).reshape(B, L, H*d)`` on a (B*L, H, d) context), put
feature j of head h at channel ``j*H + h`` instead: every head gets a strided comb of the
position's channels, and nothing crosses positions (the layouts that do cross positions, a
view without the transpose, are ``hypotheses_more`` and ``hypotheses_folded``). The inverse
permutation, channel ``h*d + j`` holding channel ``j*H + h``, is what an output projection
computes whose weight reads its input axis as (d, H): a merge read feature-major.
The same inverse on the split side is a permute that exchanges the head and feature axes
before the reshape into heads (``split_grid_transposed``): head h' takes the d channels at
h'*d .. h'*d + d - 1 of the grid read (d, H).

Each hypothesis replaces the oracle's ``split_heads`` (for q, k, v or any of them, in the
order the oracle splits them) or ``merge_heads``, so it is tested on every component whose
oracle splits or merges heads (``tck.reference.variants.reaches``): ``mha``, a layer, a
stack, a ViT, a decoder; the attention need not be a subject of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tck.reference import oracle
from tck.reference.codes import code as registered
from tck.reference.variants import reaches

from .alternatives import Alternative
from .hypotheses_folded import TARGETS

_SPLIT_ORDER = ("q", "k", "v")  # the oracle's split_heads calls, in order (SPEC.md §3.4)
_TENSOR_WORDS = {"q": "queries", "k": "keys", "v": "values"}


def split_feature_major(x: Any, n_heads: int) -> np.ndarray:
    """(B, L, H*d) split as (B, L, d, H), returned as (B, H, L, d): channel j*H + h is
    feature j of head h."""
    x = oracle._f64(x)
    b, length, width = x.shape
    if width % n_heads:
        raise ValueError(f"width {width} is not divisible by n_heads={n_heads}")
    return x.reshape(b, length, width // n_heads, n_heads).transpose(0, 3, 1, 2)


def merge_feature_major(x: Any) -> np.ndarray:
    """(B, H, L, d) merged as (B, L, d, H) -> (B, L, d*H): feature j of head h at channel
    j*H + h."""
    x = oracle._f64(x)
    b, h, length, d = x.shape
    return x.transpose(0, 2, 3, 1).reshape(b, length, d * h)


def merge_read_feature_major(x: Any) -> np.ndarray:
    """(B, H, L, d) merged as the spec merges it, then read back as (d, H): channel h*d + j
    holds the spec's channel j*H + h. What an output projection computes whose weight's input
    axis is laid out (d, H) while the context is (H, d) (a (H, d, D) weight permuted to
    (d, H, D) before it is flattened): ``merge_feature_major``'s inverse, the same when
    H = d."""
    merged = oracle.merge_heads(oracle._f64(x))
    b, h, length, d = np.shape(x)
    return merged.reshape(b, length, d, h).transpose(0, 1, 3, 2).reshape(b, length, h * d)


# Tensor parallelism (Megatron-LM's column-parallel attention) gives each of g ranks H/g
# heads and merges them on the rank before the row-parallel output projection joins the
# ranks' blocks: a feature-major merge there interleaves within each block only.
RANK_GROUPS = (2, 4)


def merge_feature_major_in_groups(groups: int) -> Callable[[Any], np.ndarray]:
    """``merge_feature_major`` within each of ``groups`` consecutive blocks of H/groups heads,
    the blocks kept in order; the spec's merge where ``groups`` leaves under two heads a
    block (no such layout to tell apart)."""

    def merge_heads(x: Any) -> np.ndarray:
        x = oracle._f64(x)
        h = x.shape[1]
        if h % groups or h // groups < 2:
            return oracle.merge_heads(x)
        blocks = np.split(x, groups, axis=1)
        return np.concatenate([merge_feature_major(block) for block in blocks], axis=-1)

    return merge_heads


def split_grid_transposed(x: Any, n_heads: int) -> np.ndarray:
    """(B, L, H*d) with each position's (H, d) channel grid transposed to (d, H) before the
    head-major split (a permute that exchanges the head and feature axes ahead of a reshape,
    Sockeye's ``permute(1, 3, 2, 0)`` for ``permute(1, 2, 3, 0)``): channel ``j*H + h`` of
    the heads holds the spec's channel ``h*d + j``, ``split_feature_major``'s inverse, the
    same when H = d."""
    x = oracle._f64(x)
    b, length, width = x.shape
    if width % n_heads:
        raise ValueError(f"width {width} is not divisible by n_heads={n_heads}")
    grid = x.reshape(b, length, n_heads, width // n_heads).transpose(0, 1, 3, 2)
    return oracle.split_heads(grid.reshape(b, length, width), n_heads)


def split_channel_first(x: Any, n_heads: int) -> np.ndarray:
    """(B, L, H*d) held channel-first, (B, H*d, L), as convolutional code holds it
    (SqueezeBERT's NCW), viewed (B, H, d, L) and reshaped to (B, H, L, d) where a permute
    belongs: head h's (L, d) block is read in the order its (d, L) storage holds, so rows
    mix positions and features."""
    heads = oracle.split_heads(oracle._f64(x), n_heads)  # (B, H, L, d)
    return np.ascontiguousarray(heads.swapaxes(-1, -2)).reshape(heads.shape)


# every non-empty subset of q, k, v: a port rewrites one line, or two (the queries and the
# values of a code whose keys are kept pre-transposed for the product)
_SUBSETS = tuple(
    tuple(t for t, bit in zip(_SPLIT_ORDER, bits, strict=True) if bit)
    for bits in ((1, 0, 0), (0, 1, 0), (0, 0, 1), (1, 1, 0), (1, 0, 1), (0, 1, 1), (1, 1, 1))
)


def _split_some(
    targets: tuple[str, ...], split: Callable[[Any, int], np.ndarray] = split_feature_major
) -> Callable[[], dict[str, Any]]:
    """A fresh ``split_heads`` per evaluation, ``split`` (feature-major) for ``targets``."""

    def pieces() -> dict[str, Any]:
        calls = [0]

        def split_heads(x: Any, n_heads: int) -> np.ndarray:
            which = _SPLIT_ORDER[calls[0] % len(_SPLIT_ORDER)]
            calls[0] += 1
            if which in targets:
                return split(x, n_heads)
            return oracle.split_heads(oracle._f64(x), n_heads)

        return {"split_heads": split_heads}

    return pieces


def _rotated_then_split(targets: tuple[str, ...]) -> Callable[[], dict[str, Any]]:
    """A fresh ``rope_rows`` per evaluation: for ``targets`` (the oracle rotates q, then k),
    the rotation as the spec's, then the heads merged and cut again feature-major: RoPE
    applied on the (B, L, H, d) view, and the heads of the attention taken from the rotated
    (B, L, H*d) as (d, H) (a rearrange of ``b s (h d)`` written with the factors swapped,
    after llm-foundry's rotary)."""

    def pieces() -> dict[str, Any]:
        calls = [0]

        def rope_rows(x: Any, positions: Any, **kw: Any) -> np.ndarray:
            which = ("q", "k")[calls[0] % 2]
            calls[0] += 1
            out = oracle.rope_rows(x, positions, **kw)
            if which in targets:
                return split_feature_major(oracle.merge_heads(out), out.shape[1])
            return out

        return {"rope_rows": rope_rows}

    return pieces


def strided_head_hypotheses(component: str) -> Iterator[Alternative]:
    """The heads merged feature-major; q, k, v (or some of them) split feature-major."""
    if reaches(component, "merge_heads"):
        yield Alternative(
            registered("attention.heads_merged_wrong_order"),
            "the output is the spec's with the heads merged feature-major: feature j of head "
            "h lands at channel j*H + h instead of h*d + j (a (B, L, H, d) context transposed "
            "to (B, L, d, H) before the reshape to (B, L, H*d)), so the output projection "
            "reads the heads' features interleaved (SPEC.md §3.3)",
            pieces={"merge_heads": merge_feature_major},
        )
        yield Alternative(
            registered("attention.heads_merged_wrong_order"),
            "the output is the spec's with the merged heads read feature-major by the output "
            "projection: its weight's input axis is laid out (d_head, head) while the context "
            "is (head, d_head) (a (H, d, D) weight permuted to (d, H, D) before the flatten, "
            "an einsum over the axes in the other order), so each output channel weighs "
            "another head's features (SPEC.md §3.3)",
            pieces={"merge_heads": merge_read_feature_major},
        )
        for groups in RANK_GROUPS:
            yield Alternative(
                registered("attention.heads_merged_wrong_order"),
                f"the output is the spec's with the heads merged feature-major within each of "
                f"{groups} blocks of H/{groups} heads (a tensor-parallel rank's heads, merged on "
                "the rank as (d, H/g) before the blocks are joined): the output projection reads "
                "each block's features interleaved (SPEC.md §3.3)",
                pieces={"merge_heads": merge_feature_major_in_groups(groups)},
            )
    if not reaches(component, "split_heads"):
        return
    splits = [(t, _FEATURE_MAJOR, _split_some(t)) for t in TARGETS]
    splits += [(t, _CHANNEL_FIRST, _split_some(t, split_channel_first)) for t in _SUBSETS]
    splits += [(t, _GRID_TRANSPOSED, _split_some(t, split_grid_transposed)) for t in _SUBSETS]
    if reaches(component, "rope_rows"):
        splits += [(t, _AFTER_ROPE, _rotated_then_split(t)) for t in (("q",), ("k",), ("q", "k"))]
    for targets, how, pieces in splits:
        words = " and ".join(_TENSOR_WORDS[t] for t in targets)
        yield Alternative(
            registered("attention.heads_split_wrong_order"),
            f"the output is the spec's with the {words} {how}",
            pieces=pieces,
        )


# How a split went wrong, after "the output is the spec's with the queries (keys, ...)".
_FEATURE_MAJOR = (
    "split into heads feature-major: head h takes channels h, h + H, h + 2H, ... of each "
    "position (x.view(B, L, d, H).transpose(-1, -2)) instead of channels h*d .. h*d + d - 1 "
    "(x.view(B, L, H, d)), so each head attends with a comb of every head's features "
    "(SPEC.md §3.3)"
)
_CHANNEL_FIRST = (
    "split into heads from a channel-first layout by a reshape: (B, H*d, L) viewed (B, H, d, "
    "L) and reshaped to (B, H, L, d) where a permute belongs, so each head's rows read its "
    "(d, L) block in storage order and mix positions with features (SPEC.md §3.3)"
)
_GRID_TRANSPOSED = (
    "split into heads after each position's (head, feature) grid was transposed to "
    "(feature, head) (a permute that exchanges the head and feature axes before the reshape "
    "into heads): head 0 takes feature 0 of every head, then feature 1 of every head, ... "
    "instead of its own d channels, so each head attends with pieces of every head's "
    "features (SPEC.md §3.3)"
)
_AFTER_ROPE = (
    "rotated by RoPE per head and then cut into heads feature-major: head h takes channels "
    "h, h + H, ... of the rotated position ((B, L, H*d) viewed (B, L, d, H)), so each head "
    "attends with a comb of every head's rotated features (SPEC.md §3.3, §2.3)"
)


def _split_into(rule: str) -> Callable[..., np.ndarray]:
    """``split_heads`` that splits into another head count than it is given: ``"swapped"``,
    the head count and head width exchanged (``x.view(B, L, d, H)`` read back as heads of
    width H: H' = d), or ``"one"``, a single head of the whole width."""

    def split_heads(x: Any, n_heads: int) -> np.ndarray:
        x = oracle._f64(x)
        width = x.shape[-1]
        other = width // n_heads if rule == "swapped" else 1
        if other == n_heads or width % other:
            raise ValueError(f"no other head count than {n_heads} by rule {rule!r}")
        return oracle.split_heads(x, other)

    return split_heads


def _scaled_by_heads(q, k, v, keep_mask=None, *, scale=None, **kw):  # type: ignore[no-untyped-def]
    """§3.1 scaled by 1/sqrt of the head count the split made, which is the declared head
    width when the two are exchanged (the scale still reads the config's head size)."""
    q = oracle._f64(q)
    return oracle.scaled_dot_product_attention(
        q, k, v, keep_mask, scale=1.0 / np.sqrt(q.shape[-3]), **kw
    )


def head_count_hypotheses(component: str, n_kv_heads_differ: bool) -> Iterator[Alternative]:
    """The attention split into another number of heads than the config's: the head count
    and width exchanged in the split's view (scaled by the width each head then has, or by
    the declared head width), or one head of the whole width. Not where key/value heads are
    grouped (§11.2): their split needs the declared count to pair the heads."""
    if not reaches(component, "split_heads") or n_kv_heads_differ:
        return
    swapped = (
        "its head count and head width exchanged (x.view(B, L, d, H) for x.view(B, L, H, d), "
        "read back as d heads of width H)"
    )
    own_scale = "by 1/sqrt of the width each head has"
    for rule, words, scale_words, scale_piece in (
        ("swapped", swapped, own_scale, {}),
        (
            "swapped",
            swapped,
            "by 1/sqrt of the declared head width",
            {"scaled_dot_product_attention": _scaled_by_heads},
        ),
        ("one", "one head of the whole width", own_scale, {}),
    ):
        yield Alternative(
            registered("attention.head_count_wrong"),
            f"the output is the spec's with the attention split into {words}, scaled "
            f"{scale_words}: every head attends with another block of channels than the "
            "config's heads (SPEC.md §3.3)",
            pieces={"split_heads": _split_into(rule), **scale_piece},
        )
