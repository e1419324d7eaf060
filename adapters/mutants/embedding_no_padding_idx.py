"""An embedding built without ``padding_idx``: ``nn.Embedding(vocab, d_model)`` where the spec
(SPEC.md §1.3) keeps the padding row fixed, so the padding token's vector is trained like any
other. The forward pass is the same (the canonical padding row is loaded as zeros); only the
gradient of the padding row differs. Cited: bentrevett/pytorch-seq2seq#167 (the tutorial's
embeddings leave padding_idx unset), pytorch/pytorch#3711, fastai/fastai#2517 (a padding row
that receives updates).
"""

from __future__ import annotations

from torch import Tensor, nn

from tck.adapters import TorchEntry
from tck.reference import Config

from .tutorial import mutant

BUG_CLASS = "embedding_no_padding_idx"
EXPECTED_CODES = frozenset({"gradients.padding_row"})


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None):
        super().__init__()
        self.table = nn.Embedding(vocab_size, d_model)  # BUG: padding_idx not passed

    def forward(self, ids: Tensor) -> Tensor:
        return self.table(ids)


def _make(c: Config) -> nn.Module:
    return TokenEmbedding(c.vocab_size, c.d_model, c.padding_idx)


adapter = mutant(
    BUG_CLASS,
    TorchEntry(
        "embedding",
        make=_make,
        forward=lambda m, ids: m(ids),
        param_map={"weight": "table.weight"},
    ),
)
