"""An RMSNorm ported with eps 1e-5 (a LayerNorm's default) for a Llama checkpoint that
declares ``rms_norm_eps = 1e-6``. Cited: huggingface/candle#271 ("Line-up the llama
implementation with the python-transformers one. One discrepency was the epsilon used in the
layer norm (1e-5 vs 1e-6). After fixing this, logits line up pretty well"),
emonosuke/emoASR#13 (LayerNorm eps 1e-12 vs 1e-5), mindspore-lab/mindone#219 (an eps
changed by mistake in a port).
"""

from __future__ import annotations

from .gpt_tutorial import RMSNorm, rms_norm_entry
from .tutorial import mutant

BUG_CLASS = "rms_norm_eps_llama"
EXPECTED_CODES = frozenset({"layer_norm.eps_wrong"})

adapter = mutant(BUG_CLASS, rms_norm_entry(RMSNorm, eps=1e-5))  # BUG: Llama declares 1e-6
