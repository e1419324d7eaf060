"""A decoder layer that normalises the encoder's memory before cross-attention reads it:
PyTorch's ``nn.TransformerDecoderLayer`` with ``_mha_block`` running the cross-attention
sublayer's own norm over the memory too (``multihead_attn(x, norm2(mem), norm2(mem))``), one
norm written around both inputs, as a port of a pre-LN decoder does when it reads
``cross_attn(ln(x), ln(xa))``. The layer must take the memory as the encoder left it
(SPEC.md §7.2): keys and values are those of a re-normalised memory."""

from __future__ import annotations

from torch import Tensor, nn

from .cross_attn_memory_unread import decoder_layer_mutant

BUG_CLASS = "cross_attn_memory_normed"
EXPECTED_CODES = frozenset({"blocks.memory_normed"})


class DecoderLayer(nn.TransformerDecoderLayer):
    def _mha_block(  # type: ignore[override]
        self,
        x: Tensor,
        mem: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool = False,
    ) -> Tensor:
        mem = self.norm2(mem)  # BUG: the memory is normalised by the sublayer's norm
        x = self.multihead_attn(
            x,
            mem,
            mem,
            attn_mask=attn_mask,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            need_weights=False,
        )[0]
        return self.dropout2(x)


adapter = decoder_layer_mutant(BUG_CLASS, DecoderLayer)
