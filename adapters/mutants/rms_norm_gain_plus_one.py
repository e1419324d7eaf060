"""An RMSNorm that multiplies by ``1 + weight`` (Gemma's convention, whose checkpoints store
the gain minus one) loading weights stored for a plain ``weight`` gain (Llama's), so every
gain is one too large. Cited: Blaizzy/mlx-vlm#2041 (the model "reads the RMSNorm weights
with the opposite centering convention to the one the checkpoints store": ``y * (1.0 +
weight)`` over standard gains centred at 1.0, deterministic garbage), utensils/mold#1078
(Gemma's ``x * (w + 1)`` applied to GGUF weights that already carry the +1: "All ~200 norms
... scaled by (w + 2)").
"""

from __future__ import annotations

from torch import Tensor

from .gpt_tutorial import RMSNorm, rms_norm_entry
from .tutorial import mutant

BUG_CLASS = "rms_norm_gain_plus_one"
EXPECTED_CODES = frozenset({"layer_norm.gain_plus_one"})


class GemmaRMSNorm(RMSNorm):
    def forward(self, x: Tensor) -> Tensor:
        return self.normed(x) * (1.0 + self.weight)  # BUG: the weights are Llama's


adapter = mutant(BUG_CLASS, rms_norm_entry(GemmaRMSNorm))
