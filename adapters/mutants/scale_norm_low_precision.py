"""A ScaleNorm that forms its sum of squares in the input dtype: ``sqrt((x * x).sum(-1))``
with no ``.float()`` first, where the paper-style module (``tutorial.ScaleNorm``) and the
reference upcast half inputs. In float16 a channel past 256 squares past 65504: the norm is
inf and the row collapses to 0 (SPEC.md §5.4, §10.10).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .tutorial import ScaleNorm, mutant, scale_norm_entry

BUG_CLASS = "scale_norm_low_precision"
EXPECTED_CODES = frozenset({"numerics.norm_statistics_low_precision"})


class HalfScaleNorm(ScaleNorm):
    def forward(self, x: Tensor) -> Tensor:
        norm = torch.sqrt((x * x).sum(-1, keepdim=True))  # BUG: in x's dtype, no upcast
        return x / norm.clamp(min=self.eps) * self.g


adapter = mutant(BUG_CLASS, scale_norm_entry(HalfScaleNorm))
