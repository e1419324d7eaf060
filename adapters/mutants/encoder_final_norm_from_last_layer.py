"""A pre-LN encoder whose stack ends with its last layer's feed-forward norm where its own
final norm belongs (fair-esm's ``self.emb_layer_norm_after(x)`` written
``self.layers[-1].final_layer_norm(x)``): the final norm is loaded and never used. Its
attention fills masked scores with -inf (``fully_masked_rows='nan'``), so a left-padded
causal call's empty rows are NaN and IEEE arithmetic (0 * NaN) carries them to the later
layers' real rows, as the spec's own arithmetic does (SPEC.md §0.2, §4.4, §7.3)."""

from __future__ import annotations

from torch import Tensor, nn

from tck.reference import Conventions

from . import fully_masked_nan, tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "encoder_final_norm_from_last_layer"
EXPECTED_CODES = frozenset({"params.read_from_other_module"})
NAN_ROWS = Conventions(norm_placement="pre", fully_masked_rows="nan")


class EncoderLayer(tutorial.EncoderLayer):
    # -inf fills and no guard: a row with no key is NaN, right here (declared 'nan')
    attention_class = fully_masked_nan.MultiHeadAttention


class Encoder(tutorial.Encoder):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-5):
        super().__init__(n_layers, d_model, n_heads, d_ff, eps)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, eps=eps, norm_first=True) for _ in range(n_layers)
        )

    def forward(
        self,
        x: Tensor,
        pad_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, pad_mask, attn_mask, causal)
        return self.layers[-1].norm2(x)  # BUG: self.norm(x)


adapter = mutant(BUG_CLASS, encoder_entry(Encoder, conventions=NAN_ROWS))
