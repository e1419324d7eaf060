"""The Annotated Transformer's LayerNorm, adapted as if it were PyTorch's: three conventions
at once, none declared. harvardnlp/annotated-transformer (``the_annotated_transformer.py``,
class ``LayerNorm``): ``std = x.std(-1, keepdim=True)`` (torch's unbiased std, divides by
D - 1), ``a_2 * (x - mean) / (std + self.eps) + b_2`` (eps outside the square root) and
``eps=1e-6``. Reported there as harvardnlp/annotated-transformer#83 ("LayerNorm differs from
nn.LayerNorm"). Each field alone leaves the output unexplained; the three together explain
it."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_layer_entry, layer_norm_entry, mutant

BUG_CLASS = "layer_norm_annotated"
EXPECTED_CODES = frozenset({"layer_norm.eps_outside_sqrt"})


class LayerNorm(tutorial.LayerNorm):
    def __init__(self, features: int, eps: float = 1e-5):
        super().__init__(features, eps=1e-6)  # BUG: the Annotated Transformer's default eps

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)  # BUG: unbiased (D - 1)
        return self.gamma * (x - mean) / (std + self.eps) + self.beta  # BUG: eps outside sqrt


class EncoderLayer(tutorial.EncoderLayer):
    norm_class = LayerNorm


adapter = mutant(BUG_CLASS, layer_norm_entry(LayerNorm), encoder_layer_entry(EncoderLayer))
