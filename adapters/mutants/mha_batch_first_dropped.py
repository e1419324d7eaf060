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

from torch import Tensor, nn

from tck.adapters import TorchEntry
from tck.adapters.torch_nn import (
    DROPOUT,
    MHA_SPACE,
    _attn_keep,
    _encoder_layer_map,
    _ignore,
    _make_mha,
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


def mha_forward(
    m: nn.MultiheadAttention,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    keep = _attn_keep(query.shape[1], key.shape[1], attn_mask, causal, query.device)
    out, _ = m(
        query,
        key,
        value,
        key_padding_mask=_ignore(key_padding),
        attn_mask=_ignore(keep),
        need_weights=False,
    )
    return out


def _encoder_layer(config: Config) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(
        config.d_model,
        config.n_heads,
        dim_feedforward=config.d_ff,
        dropout=DROPOUT,
        norm_first=True,  # BUG: batch_first left at its default, False
    )


def encoder_layer_forward(
    m: nn.TransformerEncoderLayer,
    x: Tensor,
    key_padding: Tensor | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
) -> Tensor:
    keep = _attn_keep(x.shape[1], x.shape[1], attn_mask, causal, x.device)
    return m(x, src_mask=_ignore(keep), src_key_padding_mask=_ignore(key_padding))


adapter = mutant(
    BUG_CLASS,
    TorchEntry(
        "mha",
        make=_mha,
        forward=mha_forward,
        supports=MHA_SPACE,
        param_map=_mha_map,
        conventions=Conventions(fully_masked_rows="nan"),  # nn.MultiheadAttention's, declared
    ),
    TorchEntry(
        "encoder_layer",
        make=_encoder_layer,
        forward=encoder_layer_forward,
        supports=MHA_SPACE,
        param_map=_encoder_layer_map,
        conventions=Conventions(norm_placement="pre", fully_masked_rows="nan"),
    ),
)
