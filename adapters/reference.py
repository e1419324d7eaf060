"""The built-in ``reference`` adapter: the minimal torch Transformer and ViT of
``tck.reference.model``, every component, in float64. Its parameter names are canonical,
so it needs no parameter map; each forward only turns the canonical mask inputs into the
single keep-mask the reference modules take."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor

from tck.reference import COMPONENTS, DECODER_CANONICAL, Conventions, canonical_conventions
from tck.reference import model as ref

from .base import CACHED
from .torch_module import TorchEntry, TorchModuleAdapter


def keep_mask(
    lq: int,
    lk: int,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
    alignment: str = "top_left",
    device: torch.device | None = None,
) -> Tensor | None:
    """Key padding AND attn_mask AND causal as one keep-mask (SPEC.md §4.1), on ``device``
    (the inputs')."""
    keep = attn_mask
    if causal:
        causal_mask = ref.causal_keep_mask(lq, lk, alignment, device)
        keep = causal_mask if keep is None else keep & causal_mask
    if key_padding is not None:
        padding = ref.key_padding(key_padding)  # (B, 1, 1, Lk)
        keep = padding if keep is None else padding & keep
    return keep


def forwards(alignment: str) -> dict[str, Callable[..., Tensor]]:
    """One forward per component, for a subject that declares ``alignment`` (§4.3)."""

    def attention(m, q, k, v, keep_mask=None, causal=False):
        if causal:
            causal_mask = ref.causal_keep_mask(q.shape[-2], k.shape[-2], alignment, q.device)
            keep_mask = causal_mask if keep_mask is None else keep_mask & causal_mask
        return m(q, k, v, keep_mask)

    def mha(m, query, key, value, key_padding=None, attn_mask=None, causal=False):
        lq, lk = query.shape[1], key.shape[1]
        keep = keep_mask(lq, lk, key_padding, attn_mask, causal, alignment, query.device)
        return m(query, key, value, keep)

    def encoder(m, x, key_padding=None, attn_mask=None, causal=False):
        length = x.shape[1]
        return m(x, keep_mask(length, length, key_padding, attn_mask, causal, alignment, x.device))

    def decoder(m, x, memory, key_padding=None, memory_key_padding=None, causal=False):
        length = x.shape[1]
        self_keep = keep_mask(length, length, key_padding, None, causal, alignment, x.device)
        return m(x, memory, self_keep, keep_mask(length, memory.shape[1], memory_key_padding))

    def causal(m, x, key_padding=None, positions=None):
        return m(x, key_padding, positions)

    def sinusoidal_pe(m, positions):
        # The whole table, then a lookup: no length read off the data, so it exports to ONNX
        table = m(m.max_len)
        if table.device != positions.device:  # never while exporting (on the CPU)
            table = table.to(positions.device)
        return table[positions]

    return {
        "embedding": lambda m, ids: m(ids),
        "sinusoidal_pe": sinusoidal_pe,
        "rope": lambda m, x, positions: m(x, positions),
        "attention": attention,
        "mha": mha,
        "layer_norm": lambda m, x: m(x),
        "rms_norm": lambda m, x: m(x),
        "scale_norm": lambda m, x: m(x),
        "ffn": lambda m, x: m(x),
        "activation": lambda m, x: m(x),
        "encoder_layer": encoder,
        "encoder": encoder,
        "decoder_layer": decoder,
        "decoder": decoder,
        "seq2seq": lambda m, src_ids, tgt_ids: m(src_ids, tgt_ids),
        "patch_embed": lambda m, images: m(images),
        "vit": lambda m, images: m(images),
        "causal_self_attention": causal,
        "gated_ffn": lambda m, x: m(x),
        "decoder_block": causal,
        "causal_lm": lambda m, ids, key_padding=None, positions=None: m(
            ids, key_padding, positions
        ),
    }


def step(m, cache, key_padding=None, positions=None, **token_input):
    """§11.6: the new tokens through the reference module with its KVCache."""
    cache = ref.KVCache() if cache is None else cache
    (new,) = token_input.values()  # x or ids
    return m(new, key_padding, positions, cache), cache


def entry(component: str, conventions: Conventions, name: str | None = None) -> TorchEntry:
    return TorchEntry(
        component,
        make=lambda config: ref.build(component, config, conventions),
        forward=forwards(conventions.causal_alignment)[component],
        conventions=conventions,
        name=name,
        step=step if component in CACHED else None,
        derives_positions=component in CACHED,  # default_positions(past): SPEC.md §11.9
    )


LLAMA = dataclasses.replace(
    DECODER_CANONICAL,
    norm_kind="rms_norm",
    eps=1e-6,
    positions="rope",
    rope_layout="half_split",
    ffn_kind="gated",
)

# Besides the canonical subjects, declared variants prove that the suite computes the
# oracle under the declared conventions (zero false failures off the canonical path).
VARIANTS = {
    "encoder_layer[pre_gelu]": (
        "encoder_layer",
        Conventions(norm_placement="pre", activation="gelu"),
    ),
    "layer_norm[std_plus_eps]": ("layer_norm", Conventions(eps_placement="outside_sqrt", eps=1e-6)),
    "mha[nan_rows]": ("mha", Conventions(fully_masked_rows="nan")),
    "activation[gelu_tanh]": ("activation", Conventions(activation="gelu_tanh")),
    "vit[mean_pool]": ("vit", Conventions(norm_placement="pre", activation="gelu", pooling="mean")),
    # §11: the Llama family's choices (RMSNorm, RoPE half-split, SwiGLU, untied head is a Config)
    "causal_self_attention[rope]": (
        "causal_self_attention",
        dataclasses.replace(DECODER_CANONICAL, positions="rope", rope_layout="half_split"),
    ),
    "gated_ffn[geglu]": (
        "gated_ffn",
        dataclasses.replace(DECODER_CANONICAL, gate_activation="gelu"),
    ),
    "decoder_block[llama]": ("decoder_block", LLAMA),
    "decoder_block[post_ln]": (
        "decoder_block",
        dataclasses.replace(DECODER_CANONICAL, norm_placement="post", activation="gelu"),
    ),
    "causal_lm[llama]": ("causal_lm", LLAMA),
    # §2.6: Llama 3.1's RoPE scaling at its shipped numbers (its blended band needs d_k = 8)
    "causal_self_attention[llama3]": (
        "causal_self_attention",
        dataclasses.replace(
            LLAMA, pe_base=500000.0, rope_scaling="llama3", rope_original_max_positions=8192
        ),
    ),
    # §4.5: Mistral's sliding window (Llama's choices, each query sees its last 4 keys)
    "causal_self_attention[window]": (
        "causal_self_attention",
        dataclasses.replace(LLAMA, sliding_window=4),
    ),
    "causal_lm[mistral]": ("causal_lm", dataclasses.replace(LLAMA, sliding_window=4)),
}

adapter = TorchModuleAdapter(
    "reference",
    [entry(c, canonical_conventions(c)) for c in COMPONENTS]
    + [entry(component, conv, name) for name, (component, conv) in VARIANTS.items()],
)
