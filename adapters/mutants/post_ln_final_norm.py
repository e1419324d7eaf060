"""A post-LN encoder that ends with one more LayerNorm, as ``nn.TransformerEncoder(layer, n,
norm=nn.LayerNorm(d))`` and ``nn.Transformer`` build it: the last layer's output is
normalised twice, which the paper's post-LN stack does not do. Cited: pytorch/pytorch#24930
("Successive Layer Normalization in nn.Transformer"), #50086, #74092 ("Two consecutive
nn.LayerNorm are used in transformer model when norm_first is False"),
Atten4Vis/ConditionalDETR#11.
"""

from __future__ import annotations

from tck.adapters import TorchEntry
from tck.adapters.reference import forwards
from tck.reference import Config, Conventions
from tck.reference import model as ref

from .tutorial import mutant

BUG_CLASS = "post_ln_final_norm"
EXPECTED_CODES = frozenset({"blocks.final_norm_extra"})
DECLARED = Conventions(norm_placement="post")  # the paper's: no final norm after post-LN


def _make(c: Config):
    return ref.build("encoder", c, Conventions(norm_placement="post", final_norm="always"))  # BUG


adapter = mutant(
    BUG_CLASS,
    TorchEntry(
        "encoder", make=_make, forward=forwards("top_left")["encoder"], conventions=DECLARED
    ),
)
