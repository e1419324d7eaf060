# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the tenth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them.

    python tests/blind10/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind10"

RM = "rolling_mistral"
MG = "megatron_gpt"
FV = "flax_memvit"
R_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
R_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
R_NORM = ["rms_norm", "decoder_block", "causal_lm"]
R_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
M_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
M_FFN = ["ffn", "decoder_block", "causal_lm"]
M_LN = ["layer_norm", "decoder_block", "causal_lm"]
M_BLOCK = ["decoder_block", "causal_lm"]
M_LM = ["causal_lm"]
F_LAYER = ["encoder_layer", "vit"]
F_PATCH = ["patch_embed", "vit"]
F_VIT = ["vit"]

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- rolling_mistral ---------------------------------------------------------------
    (
        "r.rope_exponent_step_one",
        RM,
        "return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: (dim // 2)] / dim))",
        "return 1.0 / (theta ** (torch.arange(0, dim // 2, dtype=torch.float64) / dim))",
        R_ROPE,
        "rope",
        "the rotary frequencies use the exponent i/d instead of 2i/d, so they span only half the intended range of wavelengths",
        "precompute_freqs rewritten to index the d/2 pairs directly (arange(d // 2)) while keeping the division by d, the way the JAX ports write 'fraction = arange(d/2) / (d/2)' but with the wrong denominator",
        "",
    ),
    (
        "r.rope_conjugated",
        RM,
        "freqs_cis = freqs_cis[:, :, None, :].to(xq_.dtype)",
        "freqs_cis = freqs_cis[:, :, None, :].conj().to(xq_.dtype)",
        R_ROPE,
        "rope",
        "queries and keys are both rotated by the negative angle (rotation in the opposite direction)",
        "the complex table conjugated while porting from code whose table stores exp(-i theta) (cos - i sin) for a different sign convention of the rotation",
        "",
    ),
    (
        "r.rope_on_values",
        RM,
        "xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)",
        "xq, xv = apply_rotary_emb(xq, xv, freqs_cis=freqs_cis)",
        R_ATTN,
        "rope",
        "the rotary embedding is applied to the values instead of the keys (keys are left unrotated)",
        "a refactor that renamed the projections' outputs left the rotary call on the wrong tensor of the (xk, xv) pair",
        "",
    ),
    (
        "r.rope_theta_of_other_release",
        RM,
        "rope_theta: float = 10000.0",
        "rope_theta: float = 1000000.0",
        R_ATTN,
        "rope",
        "the rotary base differs from the one the model declares (frequencies of another base)",
        "the ModelArgs default copied from a later Mistral release's params.json (rope_theta 1e6) into code and checkpoints that use 1e4",
        "",
    ),
    (
        "r.window_one_key_too_many",
        RM,
        "return (diff >= 0) & (diff < window)",
        "return (diff >= 0) & (diff <= window)",
        R_ATTN,
        "sliding_window",
        "the sliding window keeps w + 1 keys (the query's own key plus w earlier ones) instead of w",
        "the band written as 'at most window tokens back', the off-by-one mistral-src's first mask had with triu(..., diagonal=-sliding_window)",
        "https://github.com/huggingface/transformers/pull/26792",
    ),
    (
        "r.unrotate_in_slot_order",
        RM,
        "return torch.cat([t[:, position:], t[:, :position]], dim=1)",
        "return torch.cat([t[:, :position], t[:, position:]], dim=1)",
        R_ATTN,
        "kv_cache",
        "once the rolling buffer has wrapped, the cached keys and values are read back in slot order rather than token order, so their order no longer matches the indices the mask assigns them",
        "the two halves of the ring swapped in unrotate, which is invisible until a sequence grows past the window (single-token decoding with a permutation-invariant softmax over the whole buffer hides it too)",
        "https://github.com/ollama/ollama/pull/15591",
    ),
    (
        "r.cache_slots_from_call_index",
        RM,
        "positions = torch.arange(self.seqlen, self.seqlen + seqlen)[-W:]",
        "positions = torch.arange(seqlen)[-W:]",
        R_ATTN,
        "kv_cache",
        "the rolling-buffer slots of new tokens are computed from their index within the call instead of their absolute token index, so each call overwrites the first slots",
        "mistral-src's scatter_pos is computed from the positions it is handed; a port that builds them locally from the chunk length forgets the tokens already cached",
        "",
    ),
    (
        "r.key_indices_from_buffer_start",
        RM,
        "k_index = torch.arange(start + seqlen - key.shape[1], start + seqlen)",
        "k_index = torch.arange(key.shape[1])",
        R_ATTN,
        "kv_cache",
        "in cached calls the keys' token indices used by the mask are counted from the start of the (truncated) buffer, not as absolute indices, so the causal and window tests compare queries and keys on different scales",
        "the key indices taken as positions within the interleaved key tensor, which is right only while nothing has been dropped from the cache and the call is the first",
        "",
    ),
    (
        "r.query_indices_from_zero",
        RM,
        "q_index = torch.arange(start, start + seqlen)",
        "q_index = torch.arange(seqlen)",
        R_ATTN,
        "kv_cache",
        "in cached calls the new queries are indexed from 0 instead of after the cached tokens, so the causal mask of a step is laid out for the call alone",
        "the prefill mask code (arange(seqlen) for both axes) reused for decoding steps, where mistral-src builds it from the cache offset",
        "",
    ),
    (
        "r.step_padding_from_first_columns",
        RM,
        "new_keep = keep[:, start:]",
        "new_keep = keep[:, :seqlen]",
        R_ATTN,
        "padding_mask",
        "in cached calls the new tokens' padding flags are read from the first columns of the running padding mask instead of its last columns",
        "the key-padding mask assumed to hold only the current call's tokens, as for the prefill, while the caller passes the mask over every token so far",
        "",
    ),
    (
        "r.value_heads_tiled",
        RM,
        "values = torch.repeat_interleave(values, repeats=repeats, dim=2)",
        "values = values.repeat(1, 1, repeats, 1)",
        R_ATTN,
        "gqa",
        "the value heads are tiled across the query heads (query head h reads value head h mod H_kv) instead of each value head serving a contiguous group of query heads",
        "repeat_interleave replaced by a 'cheaper' repeat for the values only, after profiling showed it in the decode loop",
        "",
    ),
    (
        "r.scale_from_model_width",
        RM,
        "self.scale = self.args.head_dim ** -0.5",
        "self.scale = self.args.dim ** -0.5",
        R_ATTN,
        "attention_scale",
        "the attention scores are scaled by one over the square root of the model width instead of the head width",
        "ModelArgs has both dim and head_dim; the scale picked the wrong field",
        "",
    ),
    (
        "r.padding_on_query_rows",
        RM,
        "mask = mask[None, None] & key_keep[:, None, None, :]",
        "mask = mask[None, None] & key_keep[:, None, :, None]",
        R_ATTN,
        "padding_mask",
        "the key-padding mask is applied along the query axis (masking rows of padded queries) instead of the key axis",
        "the [B, T] keep vector unsqueezed on the wrong axis when the mask was rebuilt as a [B, 1, Lq, Lk] boolean",
        "",
    ),
    (
        "r.rope_angles_float32",
        RM,
        "angles = positions.to(torch.float64)[..., None] * freqs",
        "angles = positions.to(torch.float32)[..., None] * freqs.float()",
        R_ROPE,
        "precision",
        "the rotary angles (position times frequency) are formed in float32 also in a float64 build, so long positions lose angle precision",
        "mistral-src's precompute_freqs_cis builds its table in float32 (torch.arange(end).float()); the port kept that cast while the rest of the model runs in float64",
        "https://github.com/huggingface/transformers/pull/29285",
    ),
    (
        "r.heads_merged_without_transpose",
        RM,
        "output = output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)",
        "output = output.contiguous().view(bsz, seqlen, -1)",
        R_ATTN,
        "heads",
        "the per-head outputs [B, H, L, d] are flattened to [B, L, H*d] without first moving the head axis behind the sequence axis",
        "mistral-src's memory-efficient kernel returns [B, L, H, d]; switching to the matmul path that returns [B, H, L, d] kept the old merge",
        "",
    ),
    (
        "r.rms_eps_on_root",
        RM,
        "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
        "return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + self.eps)",
        R_NORM,
        "eps_placement",
        "RMSNorm adds eps to the root mean square instead of to the mean square under the root",
        "rsqrt rewritten as an explicit division 'for readability', with eps moved out of the root",
        "",
    ),
    (
        "r.rms_statistics_float32_always",
        RM,
        "output = self._norm(x.to(_accum(x.dtype))).type_as(x)",
        "output = self._norm(x.float()).type_as(x)",
        R_NORM,
        "precision",
        "the RMSNorm statistics and normalised value are computed in float32 also in a float64 build (precision lowered to float32 in one step)",
        "mistral-src's literal x.float(), which upcasts half inputs but downcasts float64 ones",
        "",
    ),
    (
        "r.silu_on_up_projection",
        RM,
        "return self.w2(F.silu(self.w1(x)) * self.w3(x))",
        "return self.w2(self.w1(x) * F.silu(self.w3(x)))",
        R_FFN,
        "ffn_gating",
        "in the gated FFN the activation is applied to the up projection instead of the gate projection",
        "w1 and w3 mixed up when the checkpoint names (gate_proj, up_proj) were mapped to Meta's (w1, w3)",
        "",
    ),
    (
        "r.residual_from_normed_input",
        RM,
        "h = x + r",
        "h = self.attention_norm(x) + r",
        ["decoder_block", "causal_lm"],
        "residual",
        "the attention residual adds the normalised block input instead of the un-normalised residual stream",
        "the normed input bound to a name and reused for the residual when the block was restructured to call the norm once",
        "",
    ),
    (
        "r.final_norm_skipped",
        RM,
        "return self.output(self.norm(h))",
        "return self.output(h)",
        ["causal_lm"],
        "final_norm",
        "the final norm of the pre-norm stack is skipped before the output projection",
        "the norm moved into a separate 'last hidden state' method for a pipeline stage and not called on the logits path",
        "",
    ),
    # ---- megatron_gpt -------------------------------------------------------------------
    (
        "m.fused_qkv_read_as_blocks",
        MG,
        "(query_layer, key_layer, value_layer) = split_tensor_along_last_dim(mixed_x_layer, 3)",
        "(query_layer, key_layer, value_layer) = (t.unflatten(-1, (self.num_attention_heads_per_partition, -1)) for t in split_tensor_along_last_dim(mixed_x_layer.flatten(2), 3))",
        M_ATTN,
        "qkv_projection",
        "the fused QKV output is split as one block of queries, one of keys and one of values, while its rows are laid out per head (each head's query, key and value together)",
        "the ordering of Megatron checkpoints of version 0 ([3, np, hn]) applied to weights saved in the later [np, 3, hn] layout",
        "https://github.com/sgl-project/sglang/pull/34529",
    ),
    (
        "m.qkv_heads_strided_over_ranks",
        MG,
        "return self.weight[rank * n:(rank + 1) * n].reshape(-1, self.weight.shape[-1])",
        "return self.weight[rank::self.world_size].reshape(-1, self.weight.shape[-1])",
        M_ATTN,
        "tensor_parallel",
        "the fused QKV weight gives each rank a strided set of heads while its bias and the output projection's input shards assume contiguous heads per rank",
        "heads dealt round-robin to the ranks, the way an interleaved pipeline schedule deals layers, instead of in contiguous blocks",
        "",
    ),
    (
        "m.row_bias_in_every_rank",
        MG,
        "partials = [F.linear(x, self.weight[:, rank * n:(rank + 1) * n]) for rank, x in enumerate(inputs_parallel)]",
        "partials = [F.linear(x, self.weight[:, rank * n:(rank + 1) * n], self.bias) for rank, x in enumerate(inputs_parallel)]",
        [*M_ATTN, "ffn"],
        "tensor_parallel",
        "the bias of a row-parallel linear is added to every rank's partial output before the all-reduce, so it is counted once per rank (and again where the caller adds it)",
        "the bias fused into each rank's GEMM, as a column-parallel linear may do, forgetting that a row-parallel output is summed over ranks",
        "https://github.com/GeeeekExplorer/nano-vllm/issues/99",
    ),
    (
        "m.all_reduce_missing",
        MG,
        "output_ = reduce_from_tensor_model_parallel_region(partials)",
        "output_ = partials[0]",
        [*M_ATTN, "ffn"],
        "tensor_parallel",
        "the partial outputs of a row-parallel linear are not summed over the ranks: only the first rank's share of the input features contributes",
        "the all-reduce stubbed out for a single-process debug run ('world size 1 needs no reduce') and left that way when two simulated ranks were added",
        "",
    ),
    (
        "m.vocab_mask_inverted",
        MG,
        "output_parallel[input_mask, :] = 0.0",
        "output_parallel[~input_mask, :] = 0.0",
        M_LM,
        "tensor_parallel",
        "the vocabulary-parallel embedding zeroes the rows of the ids inside the rank's vocabulary range and keeps those outside it (the mask's polarity is inverted)",
        "the out-of-range mask read as a keep-mask, as the attention masks of other codebases are",
        "",
    ),
    (
        "m.logit_shards_strided",
        MG,
        "logits_parallel = [F.linear(input_, word_embeddings_weight[rank * n:(rank + 1) * n]) for rank in range(world_size)]",
        "logits_parallel = [F.linear(input_, word_embeddings_weight[rank::world_size]) for rank in range(world_size)]",
        M_LM,
        "weight_tying",
        "the tied output layer splits the vocabulary across ranks in strided order while the embedding (and the gather) use contiguous ranges, so the logits come out with the vocabulary permuted",
        "the output layer's partition written independently of VocabParallelEmbedding's vocab_range_from_global_vocab_size",
        "",
    ),
    (
        "m.layer_scaling_not_undone",
        MG,
        "self.scale_mask_softmax = FusedScaleMaskSoftmax(softmax_in_fp32=True, scale=coeff)",
        "self.scale_mask_softmax = FusedScaleMaskSoftmax(softmax_in_fp32=True, scale=None)",
        M_LM,
        "attention_scale",
        "with query-key layer scaling, the scores are divided by the layer number but the softmax does not multiply it back, so layer l's scores are scaled by 1/(l sqrt(d)) instead of 1/sqrt(d)",
        "the softmax's scale argument dropped when the softmax was moved off the fused kernel (which is the one that re-applies coeff)",
        "",
    ),
    (
        "m.mask_fill_polarity",
        MG,
        "input = input.masked_fill(mask, -10000.0)",
        "input = input.masked_fill(~mask, -10000.0)",
        M_ATTN,
        "mask_polarity",
        "the attention mask's polarity is inverted: the allowed keys are filled and the masked ones kept",
        "Megatron's masks are True where masked; a port used to keep-masks (True = attend) negated it",
        "",
    ),
    (
        "m.masks_combined_with_and",
        MG,
        "attention_mask = attention_mask | ~keep[:, None, None, :]",
        "attention_mask = attention_mask & ~keep[:, None, None, :]",
        M_ATTN,
        "mask_combine",
        "two masks in masked-polarity (True = removed) are combined with AND, so a key is removed only when both masks remove it",
        "the rule 'combine masks with AND' of keep-masks applied to Megatron's inverted masks",
        "",
    ),
    (
        "m.step_mask_rows_from_top",
        MG,
        "layer_attention_mask = attention_mask[..., sequence_start:sequence_end, :sequence_end]",
        "layer_attention_mask = attention_mask[..., :sequence_end - sequence_start, :sequence_end]",
        M_ATTN,
        "kv_cache",
        "in cached calls the new tokens get the first rows of the full causal mask instead of the rows of their own positions, so their causal mask is aligned as if they were the first tokens",
        "the mask sliced like the inference memory ([:n]) instead of at the sequence offset",
        "",
    ),
    (
        "m.ranks_share_cache_memory",
        MG,
        "key = (self.layer_number, rank)",
        "key = self.layer_number",
        M_ATTN,
        "kv_cache",
        "the KV-cache memories of the tensor-parallel ranks share one entry, so one rank reads the other rank's cached keys and values",
        "key_value_memory_dict keyed by layer number as in Megatron, where every rank is its own process; with ranks simulated in one process they collide",
        "",
    ),
    (
        "m.layernorm_zero_centered_gamma",
        MG,
        "return out * self.weight + self.bias",
        "return out * (1 + self.weight) + self.bias",
        M_LN,
        "norm",
        "the LayerNorm gain is applied as 1 + weight (zero-centred gamma) while the stored weights are plain gains",
        "Megatron's apply_layernorm_1p (layernorm_zero_centered_gamma) path taken for a checkpoint trained without it",
        "",
    ),
    (
        "m.layernorm_statistics_in_half",
        MG,
        "x = input.to(_acc(input.dtype))",
        "x = input",
        M_LN,
        "precision",
        "for 16-bit inputs the LayerNorm mean and variance are computed in the 16-bit input dtype instead of float32",
        "the fused kernel's float32 accumulation lost when it was written out in PyTorch ops on the input as it comes",
        "",
    ),
    (
        "m.gelu_constant_truncated",
        MG,
        "return x * 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * x * (1 + 0.044715 * x * x)))",
        "return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))",
        M_FFN,
        "ffn_activation",
        "the tanh GELU's constant sqrt(2/pi) is truncated to 8 significant digits",
        "Megatron's fused bias_gelu literal (0.79788456) copied in place of the computed constant",
        "",
    ),
    (
        "m.fc1_bias_dropped",
        MG,
        "intermediate_parallel = [bias_gelu(b, x) for x, b in zip(intermediate_parallel, bias_parallel)]",
        "intermediate_parallel = [F.gelu(x, approximate='tanh') for x in intermediate_parallel]",
        M_FFN,
        "ffn_bias",
        "the first FFN linear's bias is never added: the layer skips adding it (skip_bias_add) and the activation that should add it is replaced by a plain one",
        "the fused bias_gelu replaced by F.gelu when the fusion was turned off, forgetting that dense_h_to_4h returns its bias apart",
        "",
    ),
    (
        "m.bias_dropout_add_training",
        MG,
        "bias_dropout_add_func = get_bias_dropout_add(self.training)",
        "bias_dropout_add_func = get_bias_dropout_add(True)",
        M_BLOCK,
        "dropout",
        "the residual dropout stays active in evaluation mode",
        "the training variant (bias_dropout_add_fused_train) chosen unconditionally, as when the jit-scripted train/inference pair is collapsed into one function",
        "https://github.com/pytorch/pytorch/issues/26338",
    ),
    (
        "m.residual_post_layernorm",
        MG,
        "self.apply_residual_connection_post_layernorm = False",
        "self.apply_residual_connection_post_layernorm = True",
        M_BLOCK,
        "residual",
        "each residual adds the normalised sublayer input instead of the un-normalised stream",
        "the BERT-style option apply_residual_connection_post_layernorm switched on for a GPT checkpoint trained without it",
        "",
    ),
    (
        "m.context_heads_merged_wrong",
        MG,
        "context_layer = context_layer.permute(2, 0, 1, 3).contiguous()",
        "context_layer = context_layer.permute(2, 0, 3, 1).contiguous()",
        M_ATTN,
        "heads",
        "the per-head outputs are merged with the head axis and the head-width axis exchanged, so the output features are interleaved across heads",
        "the permute written for a [b, np, hn, sq] layout of another kernel",
        "",
    ),
    (
        "m.causal_diagonal_masked",
        MG,
        "attention_mask = torch.tril(torch.ones((key_length, key_length)))[key_length - query_length:]",
        "attention_mask = torch.tril(torch.ones((key_length, key_length)), diagonal=-1)[key_length - query_length:]",
        M_ATTN,
        "causal_mask",
        "the causal mask also removes each token's own key (the diagonal), keeping only strictly earlier keys",
        "the 'masked' polarity's triu(diagonal=1) translated to tril with the diagonal shifted the wrong way",
        "",
    ),
    # ---- flax_memvit --------------------------------------------------------------------
    (
        "f.chunk_rescale_sign_flipped",
        FV,
        "max_diffs = torch.exp(chunk_max - global_max)",
        "max_diffs = torch.exp(global_max - chunk_max)",
        F_LAYER,
        "online_softmax",
        "when the key chunks are combined, each chunk's partial sums are rescaled by exp(global max - chunk max) instead of exp(chunk max - global max)",
        "the correction factor written from memory as 'the difference of the maxima', with the operands in the wrong order",
        "",
    ),
    (
        "f.chunks_normalised_twice",
        FV,
        "return exp_values, exp_weights.sum(dim=-1), max_score[..., 0]",
        "return exp_values / exp_weights.sum(dim=-1, keepdim=True), exp_weights.sum(dim=-1), max_score[..., 0]",
        F_LAYER,
        "online_softmax",
        "each key chunk's weighted values are normalised by that chunk's own sum before the chunks are combined and normalised again by the total",
        "summarize_chunk made to return a softmax-normalised partial output (as a single-chunk path would), while the combine step still divides by the combined weights",
        "",
    ),
    (
        "f.global_max_over_heads",
        FV,
        "global_max = chunk_max.amax(dim=0, keepdim=True)",
        "global_max = chunk_max.amax(dim=-1, keepdim=True)",
        F_LAYER,
        "online_softmax",
        "the maximum used to combine the key chunks is taken over the heads of each chunk instead of over the chunks, so different chunks are rescaled against different maxima",
        "the axis of jnp.max(chunk_max, axis=0) translated to the last axis after chunk_max lost a leading axis in an earlier refactor",
        "",
    ),
    (
        "f.masked_scores_neg_inf",
        FV,
        "attn_weights = torch.where(mask[:, None, :], attn_weights, torch.finfo(attn_weights.dtype).min)",
        "attn_weights = attn_weights.masked_fill(~mask[:, None, :], float('-inf'))",
        F_LAYER,
        "mask_fill",
        "masked scores are set to -inf, so a key chunk in which every key is masked has a -inf maximum and produces NaN, even for a query that has keys left in other chunks",
        "the finite big-negative fill replaced by -inf 'to be exact', which a one-pass softmax tolerates but a chunked one does not",
        "https://github.com/Dao-AILab/flash-attention/issues/1930",
    ),
    (
        "f.last_key_chunk_clamped",
        FV,
        "chunks = [chunk_scanner(i) for i in range(0, num_kv, key_chunk_size)]",
        "chunks = [chunk_scanner(min(i, num_kv - key_chunk_size)) for i in range(0, num_kv, key_chunk_size)]",
        F_LAYER,
        "online_softmax",
        "when the number of keys is not a multiple of the chunk size, the last key chunk is moved back to end at the last key, so the keys it shares with the previous chunk are counted twice",
        "lax.dynamic_slice's clamping of out-of-range starts reproduced on purpose so that every chunk has the static size the scan needs",
        "",
    ),
    (
        "f.padding_on_queries",
        FV,
        "mask = keep[None, :].expand(length, length)",
        "mask = keep[:, None].expand(length, length)",
        ["encoder_layer"],
        "padding_mask",
        "the padding mask is applied to the query rows instead of the key columns",
        "the [L] keep vector broadcast on the wrong side when nn.make_attention_mask(keep, keep)'s outer product was simplified",
        "",
    ),
    (
        "f.causal_mask_transposed",
        FV,
        "mask = mask & torch.ones(length, length, dtype=torch.bool).tril()",
        "mask = mask & torch.ones(length, length, dtype=torch.bool).triu()",
        ["encoder_layer"],
        "causal_mask",
        "the causal mask is transposed: each query sees itself and the later keys instead of the earlier ones",
        "nn.make_causal_mask's comparison (query index >= key index) rewritten with triu, which keeps the opposite triangle",
        "",
    ),
    (
        "f.scale_quarter_power",
        FV,
        "query = query / math.sqrt(k_features)",
        "query = query / k_features ** 0.25",
        F_LAYER,
        "attention_scale",
        "the attention scores are scaled by d^(-1/4) instead of d^(-1/2)",
        "the scale split symmetrically between queries and keys (d^(-1/4) each, for fp16 range) but applied to the queries only",
        "",
    ),
    (
        "f.fast_variance",
        FV,
        "var = (x - mean).square().mean(-1, keepdim=True)",
        "var = x.square().mean(-1, keepdim=True) - mean.square()",
        F_LAYER,
        "norm_statistics",
        "the LayerNorm variance is computed in one pass as E[x^2] - E[x]^2 instead of the mean of squared deviations",
        "Flax's LayerNorm default use_fast_variance=True reproduced",
        "https://github.com/pytorch/pytorch/issues/40302",
    ),
    (
        "f.gelu_tanh_default",
        FV,
        'x = F.gelu(x, approximate="none")',
        'x = F.gelu(x, approximate="tanh")',
        F_LAYER,
        "ffn_activation",
        "the MLP uses the tanh approximation of GELU where the exact (erf) GELU is declared",
        "flax.linen.gelu defaults to approximate=True; the port copied the JAX default instead of the checkpoint's",
        "https://github.com/huggingface/pytorch-image-models/pull/2105",
    ),
    (
        "f.deterministic_flag_inverted",
        FV,
        "fn = partial(vit_apply, patch_size=cfg.patch_size, num_layers=cfg.n_layers, deterministic=not self.training)",
        "fn = partial(vit_apply, patch_size=cfg.patch_size, num_layers=cfg.n_layers, deterministic=self.training)",
        F_VIT,
        "dropout",
        "dropout is active in evaluation mode (and off in training): the deterministic flag is set from the training flag with the wrong polarity",
        "Flax's 'deterministic' and torch's 'training' are opposites; one of the two call sites was converted without the negation",
        "https://github.com/huggingface/transformers/issues/15534",
    ),
    (
        "f.mlp_residual_from_block_input",
        FV,
        "return x + y",
        "return inputs + y",
        F_LAYER,
        "residual",
        "the MLP's residual is added to the block input instead of the stream after the attention residual, dropping the attention branch from the output",
        "the names inputs / x of Encoder1DBlock confused when the block was flattened into a pure function",
        "",
    ),
    (
        "f.keys_from_query_params",
        FV,
        'key = dense_general_in(p["key"], x)',
        'key = dense_general_in(p["query"], x)',
        F_LAYER,
        "qkv_projection",
        "the keys are projected with the query projection's parameters",
        "a copy-pasted line of the three DenseGeneral calls whose parameter subtree was not renamed",
        "",
    ),
    (
        "f.patches_without_grid_transpose",
        FV,
        "x = x.permute(0, 2, 1, 3, 4).reshape(gh * gw, patch_size * patch_size * c)",
        "x = x.reshape(gh * gw, patch_size * patch_size * c)",
        F_PATCH,
        "patch_embed",
        "the image is cut into patches by a reshape alone, without bringing the two grid axes together, so each 'patch' is a strip of pixels from one row band rather than a p x p square",
        "the einops pattern 'h (p1) w (p2) c' implemented as a plain reshape",
        "",
    ),
    (
        "f.chw_reshaped_as_hwc",
        FV,
        "image = image.permute(1, 2, 0)  # NCHW input -> HWC, as the JAX input pipeline has it",
        "image = image.reshape(image.shape[1], image.shape[2], image.shape[0])  # NCHW input -> HWC, as the JAX input pipeline has it",
        F_PATCH,
        "patch_embed",
        "channel-first images are reinterpreted as channel-last by a reshape instead of a transpose, scrambling pixels and channels",
        "the layout change NCHW -> NHWC done with reshape, which keeps the memory order",
        "",
    ),
    (
        "f.pool_mean_with_class_token",
        FV,
        "x = encoded[0]  # classifier == 'token'",
        "x = encoded.mean(dim=0)  # classifier == 'token'",
        F_VIT,
        "pooling",
        "the image representation is the mean over every token, class token included, where the class token is declared",
        "the 'gap' classifier's line used for the 'token' classifier",
        "",
    ),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    (
        "control.r.repeat_kv_expand",
        RM,
        "values = torch.repeat_interleave(values, repeats=repeats, dim=2)",
        "values = values[:, :, :, None, :].expand(-1, -1, -1, repeats, -1).flatten(2, 3)",
        R_ATTN,
        "expanding a new axis after the head axis and flattening it repeats each value head in place, exactly as repeat_interleave(dim=2)",
    ),
    (
        "control.r.unrotate_with_roll",
        RM,
        "return torch.cat([t[:, position:], t[:, :position]], dim=1)",
        "return torch.roll(t, shifts=-position, dims=1)",
        R_ATTN,
        "rolling by -position along the slot axis puts slot position first, the same order as the concatenation of the two halves",
    ),
    (
        "control.r.rms_mean_of_products",
        RM,
        "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
        "return x * (x * x).mean(-1, keepdim=True).add(self.eps).rsqrt()",
        R_NORM,
        "x * x is x.pow(2) and the method chain computes the same rsqrt(mean + eps)",
    ),
    (
        "control.m.row_partial_matmul",
        MG,
        "partials = [F.linear(x, self.weight[:, rank * n:(rank + 1) * n]) for rank, x in enumerate(inputs_parallel)]",
        "partials = [x @ self.weight[:, rank * n:(rank + 1) * n].t() for rank, x in enumerate(inputs_parallel)]",
        [*M_ATTN, "ffn"],
        "F.linear without a bias is x @ W^T",
    ),
    (
        "control.m.einsum_scores",
        MG,
        "matmul_result = torch.bmm(query_layer.transpose(0, 1), key_layer.transpose(0, 1).transpose(1, 2)) * (1.0 / self.norm_factor)",
        "matmul_result = torch.einsum('qnd,knd->nqk', query_layer, key_layer) * (1.0 / self.norm_factor)",
        M_ATTN,
        "the einsum contracts the head width of [sq, b*np, hn] queries and [sk, b*np, hn] keys into [b*np, sq, sk], the same product as the bmm of the transposed tensors",
    ),
    (
        "control.m.masked_input_fill",
        MG,
        "masked_input[input_mask] = 0",
        "masked_input = masked_input.masked_fill(input_mask, 0)",
        M_LM,
        "an out-of-place masked_fill gives the same ids as the in-place index assignment",
    ),
    (
        "control.f.var_two_pass",
        FV,
        "var = (x - mean).square().mean(-1, keepdim=True)",
        "var = x.var(-1, unbiased=False, keepdim=True)",
        F_LAYER,
        "torch.var with unbiased=False is the biased variance, computed from deviations about the mean (not by the one-pass formula)",
    ),
    (
        "control.f.gelu_erf_written_out",
        FV,
        'x = F.gelu(x, approximate="none")',
        "x = 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))",
        F_LAYER,
        "the exact GELU x Phi(x) written with erf, as F.gelu(approximate='none') computes it",
    ),
]

# Phase 2 (after the phase-1 commit): bug id -> (expected_codes, class_without_code).
PHASE_2: dict[str, tuple[list[str], str]] = {
    "r.rope_exponent_step_one": (["positional.frequency_wrong"], ""),
    "r.rope_conjugated": (["rope.rotation_inverted"], ""),
    "r.rope_on_values": (["rope.applied_to_wrong_tensors"], ""),
    "r.rope_theta_of_other_release": (["positional.base_wrong", "positional.frequency_wrong"], ""),
    "r.window_one_key_too_many": (["mask.sliding_window_wrong"], ""),
    "r.unrotate_in_slot_order": (
        [],
        "a rolling-buffer KV cache read back in slot order instead of token order once it has "
        "wrapped, so the cached keys no longer sit at the indices the step's mask gives them",
    ),
    "r.cache_slots_from_call_index": (["cache.slots_overlap"], ""),
    "r.key_indices_from_buffer_start": (["cache.causal_offset_wrong"], ""),
    "r.query_indices_from_zero": (["cache.causal_top_left", "mask.causal_alignment_top_left"], ""),
    "r.step_padding_from_first_columns": (["cache.padding_misaligned"], ""),
    "r.value_heads_tiled": (["attention.kv_heads_tiled"], ""),
    "r.scale_from_model_width": (["attention.scale_wrong"], ""),
    "r.padding_on_query_rows": (["mask.applied_to_queries"], ""),
    "r.rope_angles_float32": (
        [
            "numerics.float32_island",
            "numerics.float64_precision_lost",
            "numerics.rope_angles_low_precision",
        ],
        "",
    ),
    "r.heads_merged_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "r.rms_eps_on_root": (["layer_norm.eps_outside_sqrt"], ""),
    "r.rms_statistics_float32_always": (
        ["numerics.float32_island", "numerics.float64_precision_lost"],
        "",
    ),
    "r.silu_on_up_projection": (["ffn.gate_up_swapped"], ""),
    "r.residual_from_normed_input": (["blocks.residual_after_norm"], ""),
    "r.final_norm_skipped": (["blocks.final_norm_missing"], ""),
    "m.fused_qkv_read_as_blocks": (["attention.qkv_order_wrong"], ""),
    "m.qkv_heads_strided_over_ranks": (
        [],
        "the tensor-parallel shards of one attention layer taken in inconsistent orders: the "
        "fused QKV weight deals heads to ranks strided, its bias and the output projection "
        "contiguously",
    ),
    "m.row_bias_in_every_rank": (
        [],
        "a row-parallel linear's bias added to every rank's partial sum before the all-reduce, "
        "so the bias is counted once per rank",
    ),
    "m.all_reduce_missing": (
        [],
        "a row-parallel linear's all-reduce missing: only one rank's share of the input "
        "features reaches the output",
    ),
    "m.vocab_mask_inverted": (
        [],
        "a vocabulary-parallel embedding's range mask inverted: each rank zeroes the ids it "
        "owns and keeps (as its row 0) the ids it does not",
    ),
    "m.logit_shards_strided": (
        [],
        "a tied output layer sharded over the vocabulary in another order than the embedding "
        "and the gather, so the logits' vocabulary axis is permuted",
    ),
    "m.layer_scaling_not_undone": (["attention.scale_wrong"], ""),
    "m.mask_fill_polarity": (["mask.polarity_inverted"], ""),
    "m.masks_combined_with_and": (["mask.combined_with_or"], ""),
    "m.step_mask_rows_from_top": (["cache.causal_top_left", "mask.causal_alignment_top_left"], ""),
    "m.ranks_share_cache_memory": (
        [],
        "the tensor-parallel ranks of one layer share one KV-cache entry, so each rank reads "
        "another rank's cached heads",
    ),
    "m.layernorm_zero_centered_gamma": (["layer_norm.gain_plus_one"], ""),
    "m.layernorm_statistics_in_half": (["numerics.norm_statistics_low_precision"], ""),
    "m.gelu_constant_truncated": (["ffn.activation_wrong"], ""),
    "m.fc1_bias_dropped": (["params.bias_unused"], ""),
    "m.bias_dropout_add_training": (["dropout.active_in_eval"], ""),
    "m.residual_post_layernorm": (["blocks.residual_after_norm"], ""),
    "m.context_heads_merged_wrong": (["attention.heads_merged_wrong_order"], ""),
    "m.causal_diagonal_masked": (["mask.causal_diagonal_hidden"], ""),
    "f.chunk_rescale_sign_flipped": (
        [],
        "a chunked (online) softmax that rescales each key chunk's partial sums by the inverse "
        "factor, exp(global max - chunk max), when combining the chunks",
    ),
    "f.chunks_normalised_twice": (["attention.weights_not_normalized"], ""),
    "f.global_max_over_heads": (
        [],
        "a chunked (online) softmax that combines the key chunks against a maximum taken over "
        "another axis (the heads), so the chunks are rescaled against different maxima",
    ),
    "f.masked_scores_neg_inf": (["mask.fully_masked_rows_nan"], ""),
    "f.last_key_chunk_clamped": (
        [],
        "a tiled attention whose last partial key tile is moved back over the previous tile, "
        "so the keys of the overlap are counted twice",
    ),
    "f.padding_on_queries": (["mask.applied_to_queries"], ""),
    "f.causal_mask_transposed": (["mask.causal_leak"], ""),
    "f.scale_quarter_power": (["attention.scale_wrong"], ""),
    "f.fast_variance": (["numerics.norm_variance_cancels"], ""),
    "f.gelu_tanh_default": (["ffn.activation_gelu_tanh"], ""),
    "f.deterministic_flag_inverted": (["dropout.active_in_eval"], ""),
    "f.mlp_residual_from_block_input": (["blocks.residual_from_layer_input"], ""),
    "f.keys_from_query_params": (["params.read_from_other_module"], ""),
    "f.patches_without_grid_transpose": (["vit.patch_extraction_wrong"], ""),
    "f.chw_reshaped_as_hwc": (["vit.image_layout_wrong"], ""),
    "f.pool_mean_with_class_token": (["vit.pooling_mean_with_cls", "vit.pooling_mean"], ""),
}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise SystemExit(f"{impl}: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line[: len(line) - len(line.lstrip())]


def bug_rows() -> list[dict[str, Any]]:
    rows = []
    for bug_id, impl, original, replacement, components, family, klass, description, report in BUGS:
        number, indent = _locate(impl, original)
        codes, without = PHASE_2.get(bug_id, ([], ""))
        rows.append(
            {
                "id": bug_id,
                "impl": impl,
                "file": f"{FOLDER}/{impl}.py",
                "line": number,
                "original": indent + original,
                "replacement": indent + replacement,
                "components": components,
                "family": family,
                "class": klass,
                "description": description,
                "public_report": report,
                "expected_codes": codes,
                "class_without_code": without,
            }
        )
    return rows


def control_rows() -> list[dict[str, Any]]:
    rows = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        number, indent = _locate(impl, original)
        rows.append(
            {
                "id": control_id,
                "impl": impl,
                "file": f"{FOLDER}/{impl}.py",
                "line": number,
                "original": indent + original,
                "replacement": indent + replacement,
                "components": components,
                "why_correct": why,
            }
        )
    return rows


def main() -> None:
    (HERE / "bugs.json").write_text(
        json.dumps(bug_rows(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (HERE / "controls.json").write_text(
        json.dumps(control_rows(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()
