"""An RMSNorm that adds eps to the root instead of under it: ``x / (x.pow(2).mean(-1).sqrt()
+ eps)`` for ``x * rsqrt(x.pow(2).mean(-1) + eps)``, the LayerNorm slip of the Annotated
Transformer (``std + eps``) carried over to RMSNorm. On rows of ordinary scale the two differ
by about eps / rms relative, a float32-sized difference; on rows whose root mean square is
near sqrt(eps) they differ by far more (SPEC.md §5.3)."""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import rms_norm_entry
from .tutorial import mutant

BUG_CLASS = "rms_norm_eps_outside"
EXPECTED_CODES = frozenset({"layer_norm.eps_outside_sqrt"})


class RMSNorm(gpt_tutorial.RMSNorm):
    def normed(self, x: Tensor) -> Tensor:
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        root = xf.pow(2).mean(-1, keepdim=True).sqrt()
        return (xf / (root + self.eps)).to(x.dtype)  # BUG: rsqrt(mean + eps)


adapter = mutant(BUG_CLASS, rms_norm_entry(RMSNorm))
