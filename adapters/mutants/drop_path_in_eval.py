"""Stochastic depth left on in evaluation: timm's ``drop_path`` copied without its training
guard (``if drop_prob == 0. or not training: return x`` written without ``not training``), so
each sample's residual branch is dropped with probability ``drop_prob`` and the kept ones
rescaled by ``1 / (1 - drop_prob)`` in eval too (SPEC.md §10.1). With a small rate most calls
drop nothing: two calls may agree by chance, and what differs is the call that drew a drop."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mutant

BUG_CLASS = "drop_path_in_eval"
EXPECTED_CODES = frozenset({"dropout.active_in_eval"})
DROP_PROB = 0.1


def drop_path(x: Tensor, drop_prob: float, training: bool) -> Tensor:
    if drop_prob == 0.0:  # BUG: `or not training` dropped
        return x
    keep = 1.0 - drop_prob
    shape = (x.shape[0],) + (1,) * (x.ndim - 1)  # one draw per sample
    mask = (keep + torch.rand(shape, dtype=x.dtype, device=x.device)).floor()
    return x.div(keep) * mask


class EncoderLayer(tutorial.EncoderLayer):
    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        mask = self.make_mask(pad_mask, attn_mask)

        def branch(h: Tensor) -> Tensor:
            return drop_path(h, DROP_PROB, self.training)

        if self.norm_first:
            h = self.norm1(x)
            x = x + branch(self.dropout(self.self_attn(h, h, h, mask, causal)))
            return x + branch(self.dropout(self.feed_forward(self.norm2(x))))
        x = self.norm1(x + branch(self.dropout(self.self_attn(x, x, x, mask, causal))))
        return self.norm2(x + branch(self.dropout(self.feed_forward(x))))


adapter = mutant(BUG_CLASS, encoder_layer_entry(EncoderLayer))
