"""A Llama-style decoder block whose RMSNorm takes its mean square over the batch axis as well
as the features (``mean(dim=(0, -1))``, the statistics of a batch norm over a norm's axis),
adapted without a padding mask: each token's output then depends on the tokens at the same
position in the other rows of its batch (SPEC.md §10.2), which the batch checks that need
padded rows do not reach."""

from __future__ import annotations

import torch
from torch import Tensor

from tck.adapters import TorchEntry
from tck.reference import Config

from . import gpt_tutorial
from .gpt_tutorial import LLAMA, _check, _linear, attention_map
from .tutorial import mutant

BUG_CLASS = "decoder_norm_over_batch"
EXPECTED_CODES = frozenset({"batch.rows_interact"})


class RMSNorm(gpt_tutorial.RMSNorm):
    def normed(self, x: Tensor) -> Tensor:
        # BUG: over the batch rows too, not each token's features alone
        return x * torch.rsqrt(x.pow(2).mean(dim=(0, -1), keepdim=True) + self.eps)


class Block(gpt_tutorial.Block):
    def __init__(self, c: Config):
        super().__init__(c, llama=True)
        self.ln_1, self.ln_2 = RMSNorm(c.d_model), RMSNorm(c.d_model)


def block_map(c: Config) -> dict[str, str]:
    mapping = attention_map("self_attn.", "attn.", c.has_attention_bias)
    mapping |= {"norm1.weight": "ln_1.weight", "norm2.weight": "ln_2.weight"}
    for ours, theirs in (("gate.", "w1."), ("up.", "w3."), ("down.", "w2.")):
        mapping |= _linear(f"ffn.{ours}", f"mlp.{theirs}", c.has_ffn_bias)
    return mapping


def make(c: Config) -> Block:
    _check(c)
    return Block(c)


adapter = mutant(
    BUG_CLASS,
    TorchEntry(
        "decoder_block",
        make=make,
        forward=lambda m, x, positions=None: m(x, positions)[0],  # no padding mask
        param_map=block_map,
        conventions=LLAMA,
    ),
)
