"""A Llama-style attention whose keys are rotated by a ``rotate_half`` written out on that
side with its minus sign lost, ``cat((x2, x1))`` for ``cat((-x2, x1))``, while the queries
keep the right one (a rotation written out per side, as Meta's ``apply_rotary_emb`` writes
``xk_out_r = xk_r * cos - xk_i * sin``, with a + for the -): the keys' map is no rotation,
their norm changes with the position and the scores are no function of i - j (SPEC.md
§2.3, §2.4)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import attention_entry, llama_block_entry
from .tutorial import mutant

BUG_CLASS = "lm_key_rotation_sign_lost"
EXPECTED_CODES = frozenset({"rope.not_norm_preserving"})


class Attention(gpt_tutorial.Attention):
    def rotate_keys(self, k: Tensor, positions: Tensor) -> Tensor:  # k (B, H_kv, n, hd)
        freqs = positions.double()[:, None, :, None] * self.inv_freq.to(positions.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        x1, x2 = k.chunk(2, dim=-1)
        partner = torch.cat((x2, x1), dim=-1)  # BUG: torch.cat((-x2, x1), dim=-1)
        return k * emb.cos().to(k.dtype) + partner * emb.sin().to(k.dtype)


class Block(gpt_tutorial.Block):
    attention = Attention


adapter = mutant(BUG_CLASS, attention_entry(Attention), llama_block_entry(Block))
