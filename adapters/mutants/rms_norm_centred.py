"""An RMSNorm that centres its rows first: ``xf = xf - xf.mean(-1, keepdim=True)`` before the
mean square, a LayerNorm without bias standing where RMSNorm belongs (a norm shared with a
LayerNorm model's code, or a port of T5's norm that "fixed" it). On rows whose mean is near
zero the two agree; on the suite's rows they do not.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import gpt_tutorial
from .gpt_tutorial import rms_norm_entry
from .tutorial import mutant

BUG_CLASS = "rms_norm_centred"
EXPECTED_CODES = frozenset({"layer_norm.rms_wrong_statistics"})


class RMSNorm(gpt_tutorial.RMSNorm):
    def normed(self, x: Tensor) -> Tensor:
        xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        xf = xf - xf.mean(-1, keepdim=True)  # BUG: RMSNorm does not centre
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


adapter = mutant(BUG_CLASS, rms_norm_entry(RMSNorm))
