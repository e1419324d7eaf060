"""A decoder layer whose cross-attention drops the source padding mask: PyTorch's
``nn.TransformerDecoderLayer`` with ``_mha_block`` passing ``key_padding_mask=None``, so the
decoder reads the padded source positions while its self-attention keeps its own masks
(SPEC.md §3.5, §7.2). Cited: OpenNMT/OpenNMT-py#272 (the source mask not applied in the
decoder's attention over the encoder output)."""

from __future__ import annotations

from torch import Tensor, nn

from .cross_attn_memory_unread import decoder_layer_mutant

BUG_CLASS = "cross_attn_padding_dropped"
EXPECTED_CODES = frozenset({"mask.ignored"})


class DecoderLayer(nn.TransformerDecoderLayer):
    def _mha_block(  # type: ignore[override]
        self,
        x: Tensor,
        mem: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool = False,
    ) -> Tensor:
        x = self.multihead_attn(
            x, mem, mem, attn_mask=attn_mask, key_padding_mask=None, need_weights=False
        )[0]  # BUG: the source padding never reaches the cross-attention
        return self.dropout2(x)


adapter = decoder_layer_mutant(BUG_CLASS, DecoderLayer)
