"""A post-LN decoder layer whose feed-forward residual is the stream as it was before the
cross-attention: ``norm3(h + ff(x))`` with ``h`` the self-attention sublayer's output, where
the residual variable was not refreshed after the cross-attention sublayer (BART's decoder
layer with its ``residual = hidden_states`` line lost before the feed-forward block). The
cross-attention's output reaches the feed-forward branch but leaves the residual stream
(SPEC.md §7.1, §7.2)."""

from __future__ import annotations

from torch import Tensor, nn

from .cross_attn_memory_unread import decoder_layer_mutant

BUG_CLASS = "decoder_ffn_residual_stale"
EXPECTED_CODES = frozenset({"blocks.residual_from_layer_input"})


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
        x = self.norm2(
            h + self._mha_block(h, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
        )
        return self.norm3(h + self._ff_block(x))  # BUG: x + self._ff_block(x)


adapter = decoder_layer_mutant(BUG_CLASS, DecoderLayer)
