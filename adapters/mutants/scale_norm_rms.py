"""A ScaleNorm that divides by the root mean square instead of the L2 norm:
``x * rsqrt(mean(x^2) + eps) * g``, an RMSNorm with one scalar gain. Cited:
facebookresearch/mega, ``fairseq/modules/scale_norm.py`` (its ``ScaleNorm`` takes
``torch.mean(torch.square(x))`` and ``rsqrt(mean_square + eps)``). Over a row of width D the
output is sqrt(D) times ScaleNorm's (SPEC.md §5.4): harmless only where a trained g absorbed
the factor, wrong against any weights written for ScaleNorm.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .tutorial import ScaleNorm, mutant, scale_norm_entry

BUG_CLASS = "scale_norm_rms"
EXPECTED_CODES = frozenset({"layer_norm.scale_norm_rms"})


class RMSScaleNorm(ScaleNorm):
    def norm(self, x: Tensor) -> Tensor:
        return torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)  # BUG: RMS, not ||x||


adapter = mutant(BUG_CLASS, scale_norm_entry(RMSScaleNorm))
