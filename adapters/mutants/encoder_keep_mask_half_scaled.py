"""A keep-mask cast to float16 before it is scaled by the model dtype's minimum, as BERT-style
``get_extended_attention_mask`` code does when the cast is hard-wired "for fp16
compatibility" (``(1.0 - mask.half()) * torch.finfo(dtype).min``): in a float32 or float64
model the minimum overflows float16 to -inf, so a kept key gets 0 * -inf = NaN and a masked
one -inf. Every masked call of the stack is NaN everywhere (huggingface/transformers#17306
is the float16 side of the same arithmetic).

No hypothesis can fit an output that is NaN wherever it is judged: the report must name the
overflow (SPEC.md §10.7), not a mask, head or row convention that NaN happens to spread to.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_entry, encoder_layer_entry, mutant

BUG_CLASS = "encoder_keep_mask_half_scaled"
EXPECTED_CODES = frozenset({"numerics.overflow"})
# bfloat16 scores plus the float16 mask promote to float32, and the float32 weights meet the
# bfloat16 values in a matmul that raises (as the code it imitates does)
RAISES = True


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        keep = None if mask is None else mask.bool()
        if causal:
            lq, lk = attn.shape[-2:]
            past = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).tril()
            keep = past if keep is None else keep & past
        if keep is not None:
            # BUG: keep.to(attn.dtype)
            attn = attn + (1.0 - keep.half()) * torch.finfo(attn.dtype).min
        attn = torch.softmax(attn, dim=-1)
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


class Encoder(tutorial.Encoder):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-5):
        super().__init__(n_layers, d_model, n_heads, d_ff, eps)
        self.layers = torch.nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, eps=eps, norm_first=True) for _ in range(n_layers)
        )


adapter = mutant(
    BUG_CLASS, encoder_layer_entry(EncoderLayer, norm_first=True), encoder_entry(Encoder)
)
