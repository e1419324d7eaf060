"""Cross-attention's memory and mask, by class (SPEC.md §3.5, §7.2): the decoder layer's
second sublayer given the wrong keys, values or mask.

The piece replaced is §7.2's ``decoder_layer`` (``tck.reference.variants``), so every
component whose oracle runs a decoder layer gets these hypotheses: the layer itself, a
decoder stack, a seq2seq model (whose source mask is built inside the model from the source
ids, where an input-level hypothesis cannot reach it).

- ``mask.ignored``: the cross-attention run without the source padding mask
  (``src_attn(x, m, m, None)``), or with the target's own mask (causal AND target padding)
  in its place, which only a call with as many target as source tokens can run;
- ``attention.cross_keys_from_decoder``: the keys, the values, or both taken from the
  decoder's own stream (the sublayer's normalised input) instead of the encoder's memory
  (``src_attn(x, x, m, mask)``); keys or values alone need as many target as source tokens,
  and with both from the decoder the source mask, sized for the memory, is left out; or
  both from the layer's own input (a stack passing each layer its hidden states as the
  memory), the source mask left out or kept where it fits;
- ``blocks.memory_normed``: the encoder's memory normalised with the cross-attention
  sublayer's own norm before it gives keys and values (``src_attn(ln(x), ln(m), ln(m))``,
  one norm written around both inputs), where the layer takes the memory as it comes.

A call on which a variant cannot run (its shapes do not fit) offers no evidence for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tck.reference import oracle
from tck.reference.variants import reaches

from .alternatives import Alternative


def _decoder_layer(
    keys: str, values: str, mask: str, *, memory_normed: bool = False
) -> Callable[..., Any]:
    """§7.2's decoder layer whose cross-attention takes its keys and values from ``keys`` /
    ``values`` ("memory", "decoder": the sublayer's input, or "layer": the layer's own
    input) under the mask ``mask`` ("source", "none", "target"), the memory passed through
    the sublayer's norm (norm2) first where ``memory_normed``."""

    def decoder_layer(
        x,
        memory,
        params,
        *,
        n_heads: int,
        self_keep_mask=None,
        memory_keep_mask=None,
        conventions=oracle.CANONICAL,
    ):  # type: ignore[no-untyped-def]
        self_attn = oracle.subparams(params, "self_attn.")
        cross_attn = oracle.subparams(params, "cross_attn.")
        ffn = oracle.subparams(params, "ffn.")
        x, memory = oracle._f64(x), oracle._f64(memory)
        cross_mask = {"source": memory_keep_mask, "none": None, "target": self_keep_mask}[mask]
        if memory_normed:
            memory = oracle.norm(memory, params, "norm2.", conventions)
        sources = {"memory": memory, "layer": x}

        def self_attention(h):  # type: ignore[no-untyped-def]
            return oracle.multi_head_attention(
                h, h, h, self_attn, n_heads=n_heads, keep_mask=self_keep_mask,
                conventions=conventions,
            )  # fmt: skip

        def cross_attention(h):  # type: ignore[no-untyped-def]
            k, v = (sources.get(which, h) for which in (keys, values))
            if k.shape[1] != v.shape[1]:
                raise ValueError("keys and values of different lengths")
            return oracle.multi_head_attention(
                h, k, v, cross_attn, n_heads=n_heads, keep_mask=cross_mask,
                conventions=conventions,
            )  # fmt: skip

        x = oracle._sublayer(x, params, "norm1.", conventions, self_attention)
        x = oracle._sublayer(x, params, "norm2.", conventions, cross_attention)
        return oracle._sublayer(
            x,
            params,
            "norm3.",
            conventions,
            lambda h: oracle.feed_forward(h, ffn, activation=conventions.activation),
        )

    return decoder_layer


def cross_attention_hypotheses(component: str) -> Iterator[Alternative]:
    """The cross-attention's mask dropped or replaced, its keys or values from the decoder."""
    if not reaches(component, "decoder_layer"):
        return
    for mask, words in (
        ("none", "without the source padding mask: the decoder reads the padded source keys"),
        (
            "target",
            "with the target's own mask (causal AND target padding) in place of the source "
            "padding mask: the source's padding is not applied",
        ),
    ):
        yield Alternative(
            "mask.ignored",
            f"the output is the spec's with the decoder's cross-attention run {words} "
            "(SPEC.md §3.5, §7.2)",
            pieces={"decoder_layer": _decoder_layer("memory", "memory", mask)},
            nan="ignore",
        )
    for keys, values, which in (
        ("decoder", "memory", "keys"),
        ("memory", "decoder", "values"),
        ("decoder", "decoder", "keys and values"),
    ):
        # the source padding mask does not fit the decoder's own keys: with both from the
        # decoder it is left out (an implementation attending its own stream drops it)
        mask = "none" if keys == values == "decoder" else "source"
        yield Alternative(
            "attention.cross_keys_from_decoder",
            f"the output is the spec's with the cross-attention's {which} taken from the "
            "decoder's own stream (the sublayer's input) instead of the encoder's memory "
            "(src_attn(x, x, m) for src_attn(x, m, m)): the decoder does not read the source "
            "there (SPEC.md §3.5, §7.2)",
            pieces={"decoder_layer": _decoder_layer(keys, values, mask)},
            nan="ignore",
        )
    # a stack that hands each layer its own input as the memory (``layer(h, memory=h)`` for
    # ``layer(h, memory=encoder_out)``): the source mask fits only as many target as
    # source tokens, so it is dropped, or kept where it fits
    for mask in ("none", "source"):
        yield Alternative(
            "attention.cross_keys_from_decoder",
            "the output is the spec's with the cross-attention's keys and values taken from "
            "the decoder layer's own input instead of the encoder's memory (a stack that "
            "passes each layer its hidden states as the memory, layer(h, h) for layer(h, m))"
            + (", under the source padding mask" if mask == "source" else "")
            + ": the decoder does not read the source (SPEC.md §3.5, §7.2)",
            pieces={"decoder_layer": _decoder_layer("layer", "layer", mask)},
            nan="ignore",
        )
    yield Alternative(
        "blocks.memory_normed",
        "the output is the spec's with the encoder's memory passed through the "
        "cross-attention sublayer's own norm before it gives keys and values "
        "(src_attn(norm(x), norm(m), norm(m))): the decoder layer must take the memory as "
        "the encoder left it (SPEC.md §7.2)",
        pieces={"decoder_layer": _decoder_layer("memory", "memory", "source", memory_normed=True)},
        nan="ignore",
    )
