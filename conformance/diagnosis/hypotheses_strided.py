"""Heads laid out feature-major within a position: the (H, d) split or merge of SPEC.md §3.3
read as (d, H).

The spec splits each position's H*d channels into heads head-major: channel ``h*d + j`` is
feature j of head h (``x.view(B, L, H, d)``). A view as (d, H) and a transpose back
(``x.reshape(B*L, d, H).transpose(1, 2)``), or a merge that transposes the last two axes
before the reshape (``ctx.transpose(1, 2).reshape(B, L, H*d)`` on a (B*L, H, d) context), put
feature j of head h at channel ``j*H + h`` instead: every head gets a strided comb of the
position's channels, and nothing crosses positions (the layouts that do cross positions, a
view without the transpose, are ``hypotheses_more`` and ``hypotheses_folded``).

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


def _split_some(targets: tuple[str, ...]) -> Callable[[], dict[str, Any]]:
    """A fresh ``split_heads`` per evaluation, feature-major for ``targets``."""

    def pieces() -> dict[str, Any]:
        calls = [0]

        def split_heads(x: Any, n_heads: int) -> np.ndarray:
            which = _SPLIT_ORDER[calls[0] % len(_SPLIT_ORDER)]
            calls[0] += 1
            if which in targets:
                return split_feature_major(x, n_heads)
            return oracle.split_heads(oracle._f64(x), n_heads)

        return {"split_heads": split_heads}

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
    for targets in TARGETS:
        words = " and ".join(_TENSOR_WORDS[t] for t in targets)
        yield Alternative(
            registered("attention.heads_split_wrong_order"),
            f"the output is the spec's with the {words} split into heads feature-major: "
            "head h takes channels h, h + H, h + 2H, ... of each position (x.view(B, L, d, H)"
            ".transpose(-1, -2)) instead of channels h*d .. h*d + d - 1 (x.view(B, L, H, d)), "
            "so each head attends with a comb of every head's features (SPEC.md §3.3)",
            pieces=_split_some(targets),
        )
