"""A pre-LN decoder block whose attention sublayer skips its norm: ``x + attn(x)`` for
``x + attn(ln_1(x))``, the FFN sublayer right. The queries, keys and values are all projected
from the raw residual stream, which grows with depth, and ``ln_1``'s gain is loaded but
never acts (SPEC.md §7.1, §11.4). Resembles agentdr1/LA_MIL#3 (a transformer layer whose
LayerNorm is declared but never applied)."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import llama_block_entry
from .tutorial import mutant

BUG_CLASS = "block_attention_norm_skipped"
EXPECTED_CODES = frozenset({"blocks.norm_bypassed"})


class Block(gpt_tutorial.Block):
    def forward(self, x, positions=None, pad_mask=None, cache=None):  # type: ignore[no-untyped-def]
        h, cache = self.attn(x, positions, pad_mask, cache)  # BUG: self.ln_1(x)
        x = x + h
        return x + self.mlp(self.ln_2(x)), cache


adapter = mutant(BUG_CLASS, llama_block_entry(Block))
