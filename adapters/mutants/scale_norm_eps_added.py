"""A ScaleNorm that adds eps to the norm instead of clamping it: ``g * x / (||x|| + eps)``,
the guard against division by zero written the way LayerNorm ports write ``std + eps``
(seed 000's "Norm Layer", the Annotated Transformer). Every row is off by a relative
eps / ||x||, and rows near eps by up to a factor of 2 (SPEC.md §5.4: ``max(||x||, eps)``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .tutorial import ScaleNorm, mutant, scale_norm_entry

BUG_CLASS = "scale_norm_eps_added"
EXPECTED_CODES = frozenset({"layer_norm.scale_norm_eps_not_clamped"})


class EpsAddedScaleNorm(ScaleNorm):
    def norm(self, x: Tensor) -> Tensor:
        return torch.norm(x, dim=-1, keepdim=True) + self.eps  # BUG: + eps, not .clamp(min=eps)


adapter = mutant(BUG_CLASS, scale_norm_entry(EpsAddedScaleNorm))
