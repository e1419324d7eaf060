"""What the spec says a component returns: the oracle called on the canonical inputs.

``expected(component, inputs, params, config, conventions)`` is the single bridge from the
adapter-facing input dict (tck.adapters.INPUTS) to the oracle functions, so every check
computes ``gold`` the same way.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tck.reference import Config, Conventions, oracle

Arrays = Mapping[str, np.ndarray]


def _flag(inputs: Arrays, name: str) -> bool:
    return bool(np.asarray(inputs[name])) if name in inputs else False


def self_keep(inputs: Arrays, length: int, conventions: Conventions):
    """§4.1: the self-attention keep-mask from key_padding, attn_mask and causal."""
    return oracle.combine_keep_masks(
        length,
        length,
        key_padding=inputs.get("key_padding"),
        attn_mask=inputs.get("attn_mask"),
        causal=_flag(inputs, "causal"),
        alignment=conventions.causal_alignment,
    )


def memory_keep(inputs: Arrays, lq: int, lk: int):
    return oracle.combine_keep_masks(lq, lk, key_padding=inputs.get("memory_key_padding"))


def expected(
    component: str,
    inputs: Arrays,
    params: Arrays | None,
    config: Config,
    conventions: Conventions,
) -> np.ndarray:
    """The oracle's output for one call (float64). ``params`` may be None for components
    without parameters."""
    c, conv, p = config, conventions, params or {}
    if component == "embedding":
        return oracle.embedding(inputs["ids"], p["weight"])
    if component == "sinusoidal_pe":
        positions = np.asarray(inputs["positions"])
        table = oracle.sinusoidal_pe(
            int(positions.max()) + 1, c.d_model, base=conv.pe_base, layout=conv.pe_layout
        )
        return table[positions]
    if component == "rope":
        return oracle.rope(
            inputs["x"], inputs["positions"], base=conv.pe_base, layout=conv.rope_layout
        )
    if component == "attention":
        q, k = inputs["q"], inputs["k"]
        keep = inputs.get("keep_mask")
        if _flag(inputs, "causal"):
            causal = oracle.causal_keep_mask(q.shape[-2], k.shape[-2], conv.causal_alignment)
            keep = causal if keep is None else keep & causal
        return oracle.scaled_dot_product_attention(
            q, k, inputs["v"], keep, fully_masked_rows=conv.fully_masked_rows
        )
    if component == "mha":
        query, key = inputs["query"], inputs["key"]
        keep = oracle.combine_keep_masks(
            query.shape[1],
            key.shape[1],
            key_padding=inputs.get("key_padding"),
            attn_mask=inputs.get("attn_mask"),
            causal=_flag(inputs, "causal"),
            alignment=conv.causal_alignment,
        )
        return oracle.multi_head_attention(
            query, key, inputs["value"], p, n_heads=c.n_heads, keep_mask=keep, conventions=conv
        )
    if component == "layer_norm":
        return oracle.layer_norm(
            inputs["x"],
            p["weight"],
            p.get("bias"),  # absent: Config.norm_bias=False
            eps=conv.eps,
            eps_placement=conv.eps_placement,
            variance=conv.variance,
        )
    if component == "rms_norm":
        return oracle.rms_norm(inputs["x"], p["weight"], eps=conv.eps)
    if component == "ffn":
        return oracle.feed_forward(inputs["x"], p, activation=conv.activation)
    if component in ("encoder_layer", "encoder"):
        x = inputs["x"]
        keep = self_keep(inputs, x.shape[1], conv)
        if component == "encoder":
            query_keep = inputs.get("key_padding")  # self-attention: queries are the keys
            return oracle.encoder(x, p, c, keep_mask=keep, query_keep=query_keep, conventions=conv)
        return oracle.encoder_layer(x, p, n_heads=c.n_heads, keep_mask=keep, conventions=conv)
    if component in ("decoder_layer", "decoder"):
        x, memory = inputs["x"], inputs["memory"]
        keep = self_keep(inputs, x.shape[1], conv)
        mem_keep = memory_keep(inputs, x.shape[1], memory.shape[1])
        if component == "decoder":
            return oracle.decoder(
                x, memory, p, c, self_keep_mask=keep, memory_keep_mask=mem_keep, conventions=conv
            )
        return oracle.decoder_layer(
            x,
            memory,
            p,
            n_heads=c.n_heads,
            self_keep_mask=keep,
            memory_keep_mask=mem_keep,
            conventions=conv,
        )
    if component == "seq2seq":
        return oracle.seq2seq(inputs["src_ids"], inputs["tgt_ids"], p, c, conventions=conv)
    if component == "patch_embed":
        return oracle.patch_embed(inputs["images"], p["weight"], p["bias"], patch_size=c.patch_size)
    if component == "vit":
        return oracle.vit(inputs["images"], p, c, conventions=conv)
    if component in ("causal_self_attention", "decoder_block", "causal_lm"):
        return decoder_only(component, inputs, p, c, conv)
    if component == "gated_ffn":
        return oracle.gated_feed_forward(inputs["x"], p, activation=conv.gate_activation)
    raise ValueError(f"no oracle for component {component!r}")


def decoder_only(
    component: str,
    inputs: Arrays,
    params: Arrays,
    config: Config,
    conventions: Conventions,
    causal_keep: np.ndarray | None = None,
) -> np.ndarray:
    """§11: the decoder-only components; ``causal_keep`` (L, L) replaces the causal triangle
    (only the diagnosis of cached decoding passes one)."""
    common = {
        "key_padding": inputs.get("key_padding"),
        "positions": inputs.get("positions"),
        "causal_keep": causal_keep,
        "conventions": conventions,
    }
    if component == "causal_lm":
        return oracle.causal_lm(inputs["ids"], params, config, **common)
    fn = (
        oracle.causal_self_attention
        if component == "causal_self_attention"
        else oracle.decoder_block
    )
    return fn(inputs["x"], params, n_heads=config.n_heads, n_kv_heads=config.kv_heads, **common)
