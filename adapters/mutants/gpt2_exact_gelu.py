"""A GPT-2 port whose MLP uses the exact (erf) GELU, ``nn.GELU()``, where GPT-2's weights were
trained with the tanh approximation (``gelu_new``). Cited: nntile/nntile#370 (review: "GPT-2
MLP uses exact GELU instead of tanh-approximate ... HuggingFace GPT-2 uses gelu_new", High
Severity), karpathy/nanoGPT#2 and #274 (the tanh form kept "to preserve the ability to init
from these checkpoints"), kyutai-labs/pocket-tts#278 (exact GELU at inference on weights
trained with tanh: "a silent train/serve mismatch").
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from tck.reference import Config

from . import gpt_tutorial
from .gpt_tutorial import gpt_entry
from .tutorial import mutant

BUG_CLASS = "gpt2_exact_gelu"
EXPECTED_CODES = frozenset({"ffn.activation_gelu"})


class MLP(gpt_tutorial.MLP):
    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))  # BUG: GPT-2 is approximate="tanh"


class GPT(gpt_tutorial.GPT):
    def __init__(self, c: Config):
        super().__init__(c)
        for block in self.h:
            block.mlp = MLP(c.d_model, c.d_ff)


adapter = mutant(BUG_CLASS, gpt_entry(GPT))
