"""The reference encoder-decoder (``tck.reference.model.Seq2Seq``) with its forward cut into
the steps a mutant replaces one at a time: the source's and the target's embeddings and the
target's keep-mask. Not a mutant: the correct model, computing exactly the reference's
forward (SPEC.md §8.1)."""

from __future__ import annotations

from torch import Tensor, nn

from tck.reference import model as ref


class Seq2Seq(ref.Seq2Seq):
    def embed_source(self, src_ids: Tensor, table: nn.Module) -> Tensor:
        """§1.2, §2.1: the scaled source embeddings with the sinusoidal table."""
        return self.embed(src_ids, table)

    def embed_target(self, tgt_ids: Tensor, table: nn.Module) -> Tensor:
        """§1.2, §2.1: the scaled target embeddings with the sinusoidal table."""
        return self.embed(tgt_ids, table)

    def target_keep(self, tgt_ids: Tensor) -> Tensor:
        """§4.2, §4.3: the target's padding keep-mask and its causal triangle, (B, 1, Lt, Lt)."""
        lt = tgt_ids.shape[-1]
        causal = ref.causal_keep_mask(lt, lt, self.conventions.causal_alignment, tgt_ids.device)
        return self.keep(tgt_ids) & causal

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        tied = self.config.tie_weights
        src_table = self.embedding if tied else self.src_embedding
        tgt_table = self.embedding if tied else self.tgt_embedding
        out_table = self.embedding.weight if tied else self.generator.weight
        src_keep = self.keep(src_ids)
        memory = self.encoder(self.embed_source(src_ids, src_table), src_keep)
        target = self.embed_target(tgt_ids, tgt_table)
        x = self.decoder(target, memory, self.target_keep(tgt_ids), src_keep)
        _, logit_scale = ref.embedding_scale(self.config.d_model, self.conventions)
        return ref.matmul(x, out_table.T) * logit_scale
