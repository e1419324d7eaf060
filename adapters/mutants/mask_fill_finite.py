"""Masked scores filled with a finite constant, ``score.masked_fill(mask == 0, -10000)``,
instead of ``-inf``: a query whose keys are all masked gets equal scores everywhere and
returns the mean of V, where this subject declares zeros for such a query. Cited:
YutaroOgawa/pytorch_advanced#175 (with the book's ``-1e9`` fill, a padded query row is all
-1e9, and after the softmax every one of its five keys gets 1/5), hyunwoongko/transformer#10
("shouldn't the masked inputs be set to -inf", a finite fill replaced by ``-np.inf``),
harvardnlp/annotated-transformer's ``attention()`` (``scores.masked_fill(mask == 0, -1e9)``)
and Hugging Face BERT's extended attention mask (``(1.0 - mask) * -10000.0``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import tutorial
from .tutorial import attention_entry, mutant

BUG_CLASS = "mask_fill_finite"
EXPECTED_CODES = frozenset({"mask.fully_masked_rows_uniform"})


class ScaledDotProductAttention(tutorial.ScaledDotProductAttention):
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False
    ) -> Tensor:
        attn = q @ k.transpose(-2, -1) / self.temperature
        if causal:
            lq, lk = attn.shape[-2:]
            future = torch.ones(lq, lk, dtype=torch.bool, device=attn.device).triu(1)
            attn = attn.masked_fill(future, -10000.0)  # BUG: not -inf
        if mask is not None:
            attn = attn.masked_fill(mask == 0, -10000.0)  # BUG: not -inf
        attn = torch.softmax(attn, dim=-1).nan_to_num(0.0)
        return self.dropout(attn) @ v


adapter = mutant(BUG_CLASS, attention_entry(ScaledDotProductAttention))
