"""A GPT-2 style model whose attention divides layer i's scores by its number i + 1 as well
as by sqrt(d_k) and never multiplies it back: query-key layer scaling (Megatron-LM's
``apply_query_key_layer_scaling``, GPT-2's ``scale_attn_by_inverse_layer_idx``) with the
softmax's ``scale=coeff`` dropped when the softmax was moved off the fused kernel that
re-applies it. Layer 0 (number 1) has the spec's scale, so every layer subject passes; the
stack is wrong from its second layer on, which the scale probes of layer 0 cannot see."""

from __future__ import annotations

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "layer_scaling_not_undone"
EXPECTED_CODES = frozenset({"attention.scale_wrong"})


class Attention(gpt_tutorial.Attention):
    layer_number = 1  # set by the model: 1 for its first layer

    def scale(self) -> float:
        return super().scale() / self.layer_number  # BUG: the softmax never multiplies it back


class Block(gpt_tutorial.Block):
    attention = Attention


class GPT(gpt_tutorial.GPT):
    block = Block

    def __init__(self, c: gpt_tutorial.Config) -> None:
        super().__init__(c)
        for i, block in enumerate(self.h):
            block.attn.layer_number = i + 1


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
