"""A token embedding built as ``nn.Embedding(vocab, d_model)`` without ``padding_idx``: the
padding token's row is trained like any other (it receives gradient), where the spec keeps it
fixed.

Bug source: pytorch/pytorch issue #119371 (its decoder builds ``nn.Embedding(...,
padding_idx=pad_idx)`` "to don't compute the gradient" of the padding row, the guard this
module forgets); the ``padding_idx`` entry of the torch.nn.Embedding documentation.
"""

from __future__ import annotations

from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter


class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.lut = nn.Embedding(vocab_size, d_model)  # the bug: no padding_idx

    def forward(self, ids):
        return self.lut(ids)


ONLY = ("embedding",)
LABEL = "gradients.padding_row"

adapter = TorchModuleAdapter(
    "heldout.embedding_without_padding_idx",
    [
        TorchEntry(
            "embedding",
            make=lambda c: TokenEmbedding(c.vocab_size, c.d_model),
            forward=lambda m, ids: m(ids),
            param_map={"weight": "lut.weight"},
        )
    ],
)
