"""A pre-LN decoder block whose second norm computes with the first norm's weights: the
block keeps ``ln_1`` and ``ln_2`` but the FFN's input is normalised by ``ln_1`` (a wrong key
into the parameter tree, ``p["ln_1_g"]`` for ``p["ln_2_g"]``), so ``ln_2``'s gain is loaded
and never used (SPEC.md §0.2, §7.1)."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import llama_block_entry
from .tutorial import mutant

BUG_CLASS = "norm_reads_sibling"
EXPECTED_CODES = frozenset({"params.read_from_other_module"})


class Block(gpt_tutorial.Block):
    def forward(self, x, positions=None, pad_mask=None, cache=None):  # type: ignore[no-untyped-def]
        h, cache = self.attn(self.ln_1(x), positions, pad_mask, cache)
        x = x + h
        return x + self.mlp(self.ln_1(x)), cache  # BUG: self.ln_2(x)


adapter = mutant(BUG_CLASS, llama_block_entry(Block))
