"""A pre-LN encoder stack built without its final LayerNorm: the constructor's condition for
the norm is inverted (``LayerNorm(d) if placement == "post" else None``), so the pre-LN stack
that needs it has none and returns the last layer's raw residual stream (SPEC.md §7.3). The
adapter's param_map still names the canonical ``norm.weight`` and ``norm.bias``, which have
nowhere to go. Resembles NVIDIA-NeMo/Speech#2197 (a pre-LN stack's final norm left out)."""

from __future__ import annotations

from torch import Tensor

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "encoder_final_norm_not_built"
EXPECTED_CODES = frozenset({"blocks.final_norm_missing"})
# every check that loads the canonical parameters raises: the module has no norm.* slot
RAISES = True


class Encoder(tutorial.Encoder):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-5):
        super().__init__(n_layers, d_model, n_heads, d_ff, eps)
        del self.norm  # BUG: built only for post-LN layers

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, pad_mask, attn_mask, causal)
        return x


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
