"""``nn.MultiheadAttention(..., key_padding_mask=attention_mask)`` with a Hugging-Face-style
mask (1 = a real token): PyTorch's key_padding_mask means True = ignore this key, so the
real tokens are masked and the padding attended. Cited: mlwithme/TransformerTranslation#2
(whether ``masked_fill(key_padding_mask, -inf)`` should be ``key_padding_mask == False``),
facebookresearch/detr#96 (a key_padding_mask of all True "make its attention weight equal 0").
"""

from __future__ import annotations

from torch import Tensor, nn

from tck.adapters import TorchEntry
from tck.adapters.torch_nn import _attn_keep, _ignore, _make_mha, _mha_map
from tck.reference import Conventions

from .tutorial import mutant

BUG_CLASS = "mha_key_padding_keep"
EXPECTED_CODES = frozenset({"mask.polarity_inverted"})


def forward(
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
        key_padding_mask=key_padding,  # BUG: a keep-mask where True means ignore
        attn_mask=_ignore(keep),
        need_weights=False,
    )
    return out


adapter = mutant(
    BUG_CLASS,
    TorchEntry(
        "mha",
        make=_make_mha,
        forward=forward,
        param_map=_mha_map,
        conventions=Conventions(fully_masked_rows="nan"),  # nn.MultiheadAttention's, declared
    ),
)
