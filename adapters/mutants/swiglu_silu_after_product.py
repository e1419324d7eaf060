"""A SwiGLU FFN that applies SiLU after the gating product: ``w2(silu(w1(x) * w3(x)))``
where the spec computes ``w2(silu(w1(x)) * w3(x))`` (a misplaced parenthesis when the
gate and up projections are fused into one ``w13`` and split before the product).
"""

from __future__ import annotations

from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import gated_ffn_entry
from .tutorial import mutant

BUG_CLASS = "swiglu_silu_after_product"
EXPECTED_CODES = frozenset({"ffn.activation_after_gating"})


class SwiGLU(gpt_tutorial.SwiGLU):
    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.act(self.w1(x) * self.w3(x)))  # BUG: act after the product


adapter = mutant(BUG_CLASS, gated_ffn_entry(SwiGLU))
