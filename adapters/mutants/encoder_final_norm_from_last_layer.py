"""A pre-LN encoder whose stack ends with its last layer's feed-forward norm where its own
final norm belongs (fair-esm's ``self.emb_layer_norm_after(x)`` written
``self.layers[-1].final_layer_norm(x)``): the final norm is loaded and never used. Its
attention fills masked scores with -inf (``fully_masked_rows='nan'``), so a left-padded
causal call's empty rows are NaN and IEEE arithmetic (0 * NaN) carries them to the later
layers' real rows, as the spec's own arithmetic does (SPEC.md §0.2, §4.4, §7.3)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tck.reference import Conventions

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "encoder_final_norm_from_last_layer"
EXPECTED_CODES = frozenset({"params.read_from_other_module"})
NAN_ROWS = Conventions(norm_placement="pre", fully_masked_rows="nan")


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, float("-inf"))
        if mask is not None:
            attn = attn.masked_fill(mask == 0, float("-inf"))
        return self.dropout(torch.softmax(attn, dim=-1)) @ v  # a query with no key: NaN


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


class Encoder(tutorial.Encoder):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-5):
        super().__init__(n_layers, d_model, n_heads, d_ff, eps)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, eps=eps, norm_first=True) for _ in range(n_layers)
        )

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, pad_mask, attn_mask, causal)
        return self.layers[-1].norm2(x)  # BUG: self.norm(x)


adapter = mutant(BUG_CLASS, encoder_entry(Encoder, conventions=NAN_ROWS))
