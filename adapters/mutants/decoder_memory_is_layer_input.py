"""A post-LN decoder layer whose cross-attention reads the layer's own input as the memory:
``mha(x, tgt, tgt)`` for ``mha(x, memory, memory)``, as a decoder stack that hands each
layer its hidden states where the encoder's output belongs (``layer(h, h)`` for
``layer(h, encoder_out)``) computes. The source padding mask, sized for the memory, is left
out with it; the encoder's output is never read (SPEC.md §3.5, §7.2)."""

from __future__ import annotations

from torch import Tensor, nn

from .cross_attn_memory_unread import decoder_layer_mutant

BUG_CLASS = "decoder_memory_is_layer_input"
EXPECTED_CODES = frozenset({"attention.cross_keys_from_decoder"})


class DecoderLayer(nn.TransformerDecoderLayer):
    def forward(  # type: ignore[override]
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        h = self.norm1(tgt + self._sa_block(tgt, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        h = self.norm2(h + self._mha_block(h, tgt, None, None))  # BUG: memory, its masks
        return self.norm3(h + self._ff_block(h))


adapter = decoder_layer_mutant(BUG_CLASS, DecoderLayer)
