"""An RMSNorm that returns the normalised input without its gain: ``x * rsqrt(mean(x^2) +
eps)``, the ``* self.weight`` left out of a hand-written norm (its weight is loaded, read
back, and never multiplied). Invisible with the gains of a fresh model (all ones); any
trained checkpoint's gains differ from one.
"""

from __future__ import annotations

from torch import Tensor

from .gpt_tutorial import RMSNorm, rms_norm_entry
from .tutorial import mutant

BUG_CLASS = "rms_norm_gain_unused"
EXPECTED_CODES = frozenset({"layer_norm.gain_unused"})


class GainlessRMSNorm(RMSNorm):
    def forward(self, x: Tensor) -> Tensor:
        return self.normed(x)  # BUG: not * self.weight


adapter = mutant(BUG_CLASS, rms_norm_entry(GainlessRMSNorm))
