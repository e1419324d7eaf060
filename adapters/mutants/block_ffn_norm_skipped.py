"""A pre-LN decoder block whose feed-forward sublayer skips its norm: ``x + mlp(x)`` for
``x + mlp(ln_2(x))``, the attention sublayer right. The MLP reads the raw residual stream,
which grows with depth, and ``ln_2``'s gain is loaded but never acts (SPEC.md §7.1, §11.4).
Resembles the StarCoder2-style port that feeds ``self.mlp(residual)`` after computing
``post_attention_layernorm``, and agentdr1/LA_MIL#3 (a LayerNorm declared but never
applied)."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import llama_block_entry
from .tutorial import mutant

BUG_CLASS = "block_ffn_norm_skipped"
EXPECTED_CODES = frozenset({"blocks.norm_bypassed"})


class Block(gpt_tutorial.Block):
    def forward(self, x, positions=None, pad_mask=None, cache=None):  # type: ignore[no-untyped-def]
        h, cache = self.attn(self.ln_1(x), positions, pad_mask, cache)
        x = x + h
        return x + self.mlp(x), cache  # BUG: self.mlp(self.ln_2(x))


adapter = mutant(BUG_CLASS, llama_block_entry(Block))
