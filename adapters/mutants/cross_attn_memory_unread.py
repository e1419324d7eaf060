"""A decoder layer whose cross-attention attends its own stream: PyTorch's
``nn.TransformerDecoderLayer`` with ``_mha_block`` calling ``multihead_attn(x, x, x)`` where
``multihead_attn(x, mem, mem)`` is meant, so the encoder's memory is never read and the
source padding mask (sized for the memory) is left out with it (SPEC.md §3.5, §7.2).
Resembles the keys of the source attention taken from the target states
(``src_attn(x, x, m)``) in tutorial encoder-decoders; here the values come from the decoder
too, so the layer runs whatever the source length."""

from __future__ import annotations

import dataclasses

from torch import Tensor, nn

from tck.adapters import TorchModuleAdapter, torch_nn

from .tutorial import mutant

BUG_CLASS = "cross_attn_memory_unread"
EXPECTED_CODES = frozenset({"attention.cross_keys_from_decoder"})


class DecoderLayer(nn.TransformerDecoderLayer):
    def _mha_block(  # type: ignore[override]
        self,
        x: Tensor,
        mem: Tensor,
        attn_mask: Tensor | None,
        key_padding_mask: Tensor | None,
        is_causal: bool = False,
    ) -> Tensor:
        x = self.multihead_attn(x, x, x, need_weights=False)[0]  # BUG: mem never read
        return self.dropout2(x)


def decoder_layer_mutant(
    bug_class: str, layer: type[nn.TransformerDecoderLayer]
) -> TorchModuleAdapter:
    """The ``torch.nn`` adapter's decoder layer (batch-first, post-LN) built as ``layer``."""

    def make(config):  # type: ignore[no-untyped-def]
        torch_nn._check_layer(config, "nn.TransformerDecoderLayer")
        return layer(
            config.d_model,
            config.n_heads,
            dim_feedforward=config.d_ff,
            dropout=torch_nn.DROPOUT,
            batch_first=True,
        )

    return mutant(bug_class, dataclasses.replace(torch_nn._decoder_layer_entries()[0], make=make))


adapter = decoder_layer_mutant(BUG_CLASS, DecoderLayer)
