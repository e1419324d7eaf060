"""Attention that masks by lengths where it can and by a boolean mask where it must, and
inverts only the second: while every query's kept keys are a prefix of the keys (right
padding, a causal mask, both) it fills the keys past each row's length; for any other
pattern (left padding under a causal mask) it builds one keep-mask from padding and causal
together and fills it with the wrong polarity, ``masked_fill(keep, -1e9)``: those queries
attend the keys after them and the pads (d2l.ai's ``masked_softmax`` takes ``valid_lens``;
a boolean path added beside it for other masks inverted the mask, as
lucidrains/halonet-pytorch#4 did). Only a call whose mask is not a prefix shows it."""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, mha_entry, mutant

BUG_CLASS = "mask_inverted_off_prefix"
EXPECTED_CODES = frozenset({"mask.polarity_inverted"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature  # (B, H, Lq, Lk)
        lq, lk = attn.shape[-2:]
        keep = torch.ones(lq, lk, dtype=torch.bool, device=attn.device)
        if causal:
            keep = keep.tril()
        if mask is not None:
            keep = keep & (mask != 0)
        lengths = keep.sum(-1, keepdim=True)
        beyond = torch.arange(lk, device=attn.device) >= lengths
        if torch.equal(~beyond, keep.expand_as(beyond)):  # each row's keys a prefix
            attn = attn.masked_fill(beyond, float("-inf"))
        else:
            attn = attn.masked_fill(keep, -1e9)  # BUG: ~keep
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0)
        return self.dropout(attn) @ v


class MultiHeadAttention(tutorial.MultiHeadAttention):
    attention_class = ScaledDotProductAttention


class EncoderLayer(tutorial.EncoderLayer):
    attention_class = MultiHeadAttention


adapter = mutant(BUG_CLASS, mha_entry(MultiHeadAttention), encoder_layer_entry(EncoderLayer))
