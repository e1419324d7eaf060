"""A pre-LN encoder whose feed-forward module adds its own input to its output, a skip
connection kept inside the module when it was lifted from a codebase whose layer does not
add the residual (``return x + self.w_2(...)``), while the layer adds the residual as well:
the normalised input reaches the stream beside the residual, x + h + FFN(h) (SPEC.md §7.1)."""

from __future__ import annotations

from torch import Tensor, nn

from . import tutorial
from .tutorial import encoder_entry, mutant

BUG_CLASS = "encoder_ffn_adds_its_input"
EXPECTED_CODES = frozenset({"blocks.residual_added_twice"})


class PositionwiseFeedForward(tutorial.PositionwiseFeedForward):
    def forward(self, x: Tensor) -> Tensor:
        return x + self.w_2(self.dropout(self.activation(self.w_1(x))))  # BUG: no x +


class EncoderLayer(tutorial.EncoderLayer):
    def __init__(self, d_model: int, n_heads: int, d_ff: int, **kw: object) -> None:
        super().__init__(d_model, n_heads, d_ff, **kw)  # type: ignore[arg-type]
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, 0.1)


class Encoder(tutorial.Encoder):
    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, eps: float = 1e-5):
        super().__init__(n_layers, d_model, n_heads, d_ff, eps)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, eps=eps, norm_first=True) for _ in range(n_layers)
        )


adapter = mutant(BUG_CLASS, encoder_entry(Encoder))
