"""A ScaleNorm that loads its gain and never multiplies by it: ``x / max(||x||, eps)``, the
``* self.g`` left out (F.normalize(x, dim=-1, eps=eps) written for the whole layer). The
output rows have norm 1 instead of |g| (SPEC.md §5.4); the paper starts g at sqrt(d), so
even an untrained model shows it.
"""

from __future__ import annotations

from torch import Tensor

from .tutorial import ScaleNorm, mutant, scale_norm_entry

BUG_CLASS = "scale_norm_gain_unused"
EXPECTED_CODES = frozenset({"layer_norm.gain_unused"})


class GainlessScaleNorm(ScaleNorm):
    def forward(self, x: Tensor) -> Tensor:
        return x / self.norm(x)  # BUG: not * self.g


adapter = mutant(BUG_CLASS, scale_norm_entry(GainlessScaleNorm))
