"""An encoder layer whose attention branch is multiplied by a LayerScale (CaiT, DeiT III,
DINOv2: ``x + gamma_1 * attn(norm1(x))``) that the checkpoint does not hold: built because a
config's ``init_values`` defaulted to 1e-5 (``init_values or 1e-5`` for ``init_values``), it
keeps that value, and the attention sublayer adds a hundred-thousandth of its output
(SPEC.md §7.1). The FFN branch is right."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "layer_scale_left_at_init"
EXPECTED_CODES = frozenset({"blocks.branch_scaled"})
INIT_VALUES = 1e-5


class EncoderLayer(tutorial.EncoderLayer):
    def __init__(self, d_model: int, *args: object, **kw: object) -> None:
        super().__init__(d_model, *args, **kw)  # type: ignore[arg-type]
        self.gamma_1 = nn.Parameter(INIT_VALUES * torch.ones(d_model))  # BUG: never loaded

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)
        gamma = self.gamma_1.to(x.dtype)
        if self.norm_first:
            h = self.norm1(x)
            x = x + gamma * self.dropout(self.self_attn(h, h, h, mask, causal))
            return x + self.dropout(self.feed_forward(self.norm2(x)))
        x = self.norm1(x + gamma * self.dropout(self.self_attn(x, x, x, mask, causal)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
