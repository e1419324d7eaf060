"""A pre-LN decoder block whose FFN sublayer adds its output to the block's input instead of
to its own input: ``return x + mlp(ln_2(h))`` where ``h = x + attn(ln_1(x))`` is meant, so
the attention sublayer's output feeds the FFN but leaves the residual stream (SPEC.md §7.1).
A one-name slip when a block is rewritten with a temporary (``h``) for the stream."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import llama_block_entry
from .tutorial import mutant

BUG_CLASS = "ffn_residual_from_block_input"
EXPECTED_CODES = frozenset({"blocks.residual_from_layer_input"})


class Block(gpt_tutorial.Block):
    def forward(self, x, positions=None, pad_mask=None, cache=None):  # type: ignore[no-untyped-def]
        a, cache = self.attn(self.ln_1(x), positions, pad_mask, cache)
        h = x + a
        return x + self.mlp(self.ln_2(h)), cache  # BUG: h + self.mlp(self.ln_2(h))


adapter = mutant(BUG_CLASS, llama_block_entry(Block))
