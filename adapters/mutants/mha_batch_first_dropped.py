"""``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` built without
``batch_first=True`` and called with ``(B, L, D)`` tensors: the modules read them as
``(L, B, D)``, so each position attends over the *batch* (the sequences of the batch at that
position) instead of over the sequence. The projections, norms and FFN are per token and
do not notice; a key padding mask of shape ``(B, L)`` is refused as the wrong shape unless
B == L. Cited: om-ai-lab/OmDet#19 (an encoder's ``nn.MultiheadAttention`` without
``batch_first=True``: "inconsistencies when using the model for batch inference"),
aipixel/AEMatter#3 (batch-first tensors into a sequence-first module, the batch read as the
sequence), kyegomez/movie-gen#8.
"""

from __future__ import annotations

from torch import nn

from tck.adapters import TorchEntry
from tck.adapters.torch_nn import (
    DROPOUT,
    MHA_SPACE,
    _encoder_layer_forward,
    _encoder_layer_map,
    _make_mha,
    _mha_forward,
    _mha_map,
)
from tck.reference import Config, Conventions

from .tutorial import mutant

BUG_CLASS = "mha_batch_first_dropped"
EXPECTED_CODES = frozenset({"batch.rows_interact"})
# the module refuses every (B, L) padding mask and (L, L) attention mask with B != L, as
# the real one does: raising there is the bug's own symptom
RAISES = True


def _mha(config: Config) -> nn.MultiheadAttention:
    return _make_mha(config, batch_first=False)  # BUG: the calls below pass (B, L, D)


def _encoder_layer(config: Config) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(
        config.d_model,
        config.n_heads,
        dim_feedforward=config.d_ff,
        dropout=DROPOUT,
        norm_first=True,  # BUG: batch_first left at its default, False
    )


adapter = mutant(
    BUG_CLASS,
    TorchEntry(
        "mha",
        make=_mha,
        forward=_mha_forward(),  # as called batch-first, the right way
        supports=MHA_SPACE,
        param_map=_mha_map,
        conventions=Conventions(fully_masked_rows="nan"),  # nn.MultiheadAttention's, declared
    ),
    TorchEntry(
        "encoder_layer",
        make=_encoder_layer,
        forward=_encoder_layer_forward(fast_path=False),
        supports=MHA_SPACE,
        param_map=_encoder_layer_map,
        conventions=Conventions(norm_placement="pre", fully_masked_rows="nan"),
    ),
)
