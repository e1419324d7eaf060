"""Causal self-attention on ``nn.MultiheadAttention`` handed the keep-mask (True = token) as
its ``key_padding_mask``, where True means "pad": ``key_padding_mask=keep`` for ``~keep``
(pytorch/pytorch#39321 discusses that convention; mlwithme/TransformerTranslation#2 is a
reader confused by it). The real tokens are hidden and the pads attended. The module zeroes
the rows left without a key after its output projection (where the MHA module returns NaN),
so on a right-padded row under the causal mask every real query comes out 0, a row §4.4
decides; the bug shows on the rows the spec promises when the pads come first (SPEC.md §4.1,
§4.2, §11.7)."""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from tck.adapters import Chunk, TorchEntry, Unsupported
from tck.adapters.torch_module import linear_params
from tck.reference import DECODER_CANONICAL, Config

from .tutorial import mutant

BUG_CLASS = "lm_key_padding_inverted"
EXPECTED_CODES = frozenset({"mask.polarity_inverted"})


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, x: Tensor, keep: Tensor | None = None) -> Tensor:
        length = x.shape[1]
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        pad = None if keep is None else keep  # BUG: ~keep (True = pad for nn.MultiheadAttention)
        y, _ = self.attn(x, x, x, key_padding_mask=pad, attn_mask=future, need_weights=False)
        if pad is None:
            return y
        no_key = (future[None] | pad[:, None, :]).all(dim=-1)  # (B, L)
        return y.masked_fill(no_key[..., None], 0.0)


def make(c: Config) -> nn.Module:
    if c.kv_heads != c.n_heads or not (c.has_attention_bias and c.has_attention_out_bias):
        raise Unsupported("nn.MultiheadAttention has equal heads and biases on every projection")
    return Attention(c.d_model, c.n_heads)


def param_map(c: Config) -> dict:
    mapping: dict = {f"{n}.weight": Chunk("attn.in_proj_weight", i, 3) for i, n in enumerate("qkv")}
    mapping |= {f"{n}.bias": Chunk("attn.in_proj_bias", i, 3) for i, n in enumerate("qkv")}
    return mapping | linear_params("o.", "attn.out_proj.")


adapter = mutant(
    BUG_CLASS,
    TorchEntry(
        "causal_self_attention",
        make=make,
        forward=lambda m, x, key_padding=None: m(x, key_padding),
        param_map=param_map,
        conventions=dataclasses.replace(DECODER_CANONICAL, fully_masked_rows="zero"),
    ),
)
