# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the thirteenth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them.

    python tests/blind13/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind13"

TT = "torchtune_llama"
BC = "bigcode_gpt"
FV = "func_vit"
T_NORM = ["rms_norm", "decoder_block", "causal_lm"]
T_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
T_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
T_SUB = ["causal_self_attention", "decoder_block"]
T_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
T_BLOCK = ["decoder_block", "causal_lm"]
T_LM = ["causal_lm"]
B_NORM = ["layer_norm", "decoder_block", "causal_lm"]
B_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
B_FFN = ["ffn", "decoder_block", "causal_lm"]
B_BLOCK = ["decoder_block", "causal_lm"]
B_LM = ["causal_lm"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_MASK = ["encoder_layer", "encoder"]
V_STACK = ["encoder", "vit"]
V_VIT = ["vit"]

ROPE_SCALING_DROPPED = "https://github.com/unslothai/unsloth/pull/6197"
ROPE_THETA_LLAMA3 = "https://github.com/marin-community/levanter/pull/649"
GQA_TILE = "https://github.com/onnx/onnx/pull/7274"
HEAD_MERGE = "https://github.com/jsbaan/transformer-from-scratch/pull/6"
CAUSAL_SKIPPED = "https://github.com/facebookresearch/xformers/issues/103"
GELU_TANH = "https://github.com/NVIDIA/TensorRT-LLM/pull/947"
PAST_POSITIONS = "https://github.com/huggingface/transformers/pull/15751"
SOFTMAX_AXIS = "https://github.com/nerminnuraydogan/vision-transformer/issues/1"
F_DROPOUT = "https://github.com/pytorch/pytorch/issues/26338"
F_DROPOUT_TRAINING_TRUE = "https://github.com/Coderx7/SimpleNet/issues/2"
TIE_MISSING = "https://github.com/vec2text/vec2text/pull/94"
PATCH_CHANNELS = "https://github.com/gupta-abhay/pytorch-vit/issues/7"
PATCH_VIEW = "https://github.com/duoan/TorchCode/issues/21"
MEAN_POOL_CLS = "https://github.com/lucidrains/vit-pytorch/issues/226"
QKV_INTERLEAVED = "https://github.com/awslabs/slapo/pull/46"
MERGE_WRONG_LAYOUT = "https://github.com/gazelle93/Transformer-Various-Positional-Encoding/issues/1"
SCALE_MODEL_WIDTH = "https://github.com/omihub777/ViT-CIFAR/pull/11"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- torchtune_llama -----------------------------------------------------------------
    (
        "t.rms_eps_outside_root", TT,
        "x_normed = (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)",
        "x_normed = (x_fp32 / (torch.sqrt(x_fp32.pow(2).mean(-1, keepdim=True)) + self.eps)).type_as(x)",
        T_NORM, "normalisation",
        "RMSNorm divides by the root mean square plus epsilon, sqrt(mean(x^2)) + eps, instead of sqrt(mean(x^2) + eps): epsilon is added outside the square root",
        "A port that rewrites torchtune's rsqrt as a division moves eps out of the root (the `std + eps` form of older LayerNorm code).",
        "",
    ),
    (
        "t.rms_centred_variance", TT,
        "x_normed = (x_fp32 * torch.rsqrt(x_fp32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)",
        "x_normed = (x_fp32 * torch.rsqrt(x_fp32.var(-1, keepdim=True, unbiased=False) + self.eps)).type_as(x)",
        T_NORM, "normalisation",
        "RMSNorm scales by the inverse standard deviation (the mean is subtracted in the statistic, as LayerNorm's variance) instead of the inverse root mean square of the raw features; the features themselves are not centred",
        "A refactor that shares a LayerNorm helper computes the centred variance inside RMSNorm.",
        "",
    ),
    (
        "t.rms_statistics_input_dtype", TT,
        "x_fp32 = x.float()",
        "x_fp32 = x",
        T_NORM, "precision",
        "RMSNorm's mean of squares and reciprocal root are computed in the input dtype, so in float16/bfloat16 the statistics are formed in 16-bit instead of float32",
        "An optimisation drops torchtune's upcast (`x.float()`) to save memory: the norm statistics of a half-precision model lose precision.",
        "",
    ),
    (
        "t.rope_cos_sin_swapped", TT,
        "cache = torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1)",
        "cache = torch.stack([torch.sin(idx_theta), torch.cos(idx_theta)], dim=-1)",
        T_ROPE, "rope",
        "the rotary table stores sine where the rotation reads cosine and vice versa: each pair is rotated by 90 degrees minus the angle, so position 0 is not the identity and the relative rotation runs the other way",
        "The cache's last axis is (cos, sin) in torchtune and the rotation indexes it by [..., 0] and [..., 1]; a copy that stacks (sin, cos) swaps them.",
        "",
    ),
    (
        "t.rope_base_llama2", TT,
        "def llama3_1_attention(embed_dim, num_heads, num_kv_heads, max_seq_len, rope_base=500_000):",
        "def llama3_1_attention(embed_dim, num_heads, num_kv_heads, max_seq_len, rope_base=10_000):",
        T_ATTN, "rope",
        "RoPE frequencies built from base 10000 while the model declares base 500000: every rotation angle uses the wrong frequency base",
        "The Llama 3.1 attention builder keeps Llama 2's rope_base default; the rope subject builds its own table at 500000 and is unaffected.",
        ROPE_THETA_LLAMA3,
    ),
    (
        "t.rope_scaling_dropped", TT,
        "theta = self.apply_scaling(freqs, self.scale_factor, self.low_freq_factor, self.high_freq_factor, self.old_context_len)",
        "theta = freqs",
        T_ROPE, "rope scaling",
        "the declared Llama 3.1 frequency scaling is not applied: the low and middle RoPE frequencies are left unscaled (plain RoPE) although the model declares llama3 scaling",
        "A port of Llama3ScaledRoPE builds the table from the raw frequencies and never calls apply_scaling.",
        ROPE_SCALING_DROPPED,
    ),
    (
        "t.rope_scaling_blend_swapped", TT,
        "new_freqs.append((1 - smooth) * freq / scale_factor + smooth * freq)",
        "new_freqs.append(smooth * freq / scale_factor + (1 - smooth) * freq)",
        T_ROPE, "rope scaling",
        "in Llama 3.1 RoPE scaling, the frequencies between the two wavelength thresholds are blended with the weights exchanged (s on the scaled frequency, 1 - s on the original), so the mid band is wrong and the blend is discontinuous at both thresholds",
        "The smooth interpolation of apply_scaling written with its two weights swapped.",
        "",
    ),
    (
        "t.rope_angles_float32", TT,
        'idx_theta = torch.einsum("i, j -> ij", seq_idx, self.theta)',
        'idx_theta = torch.einsum("i, j -> ij", seq_idx, self.theta).float()',
        T_ROPE, "precision",
        "the RoPE angles (position times frequency) are rounded to float32 before the cos/sin table is built, in a float64 build that declares no float32 step",
        "torchtune builds its RoPE cache in float32; a port that keeps that cast silently makes the float64 model's rotation tables float32.",
        "",
    ),
    (
        "t.cache_advances_one_slot", TT,
        "self.cache_pos.add_(seq_len)",
        "self.cache_pos.add_(1)",
        T_ATTN, "kv cache",
        "the KV cache's write position advances by one slot per call whatever the number of tokens written, so after a multi-token call the next call overwrites cached keys and values and later slots are read empty",
        "A KVCache.update written for one-token decoding advances cache_pos by 1; a prefill of several tokens then desynchronises the slots.",
        "",
    ),
    (
        "t.value_cache_gets_keys", TT,
        "v_out[:, :, self.cache_pos[:seq_len]] = v_val",
        "v_out[:, :, self.cache_pos[:seq_len]] = k_val",
        T_ATTN, "kv cache",
        "the value cache is filled with the new keys instead of the new values, so cached decoding attends over keys in place of values",
        "A copy-paste slip in KVCache.update writes k_val into both buffers.",
        "",
    ),
    (
        "t.cached_mask_rows_from_zero", TT,
        "mask = self.causal_mask[input_pos] if input_pos.dim() == 2 else self.causal_mask[None, input_pos]",
        "mask = self.causal_mask[None, : input_pos.shape[-1]]",
        T_SUB, "kv cache",
        "during cached decoding the causal mask rows are taken for positions 0 .. n-1 of the call instead of the new tokens' positions: after the prefill a new token sees only the first cached keys (top-left alignment of the step's mask)",
        "The causal_mask buffer sliced by the call's length rather than indexed by input_pos.",
        "",
    ),
    (
        "t.keys_rotated_at_call_index", TT,
        "k = self.pos_embeddings(k, input_pos=input_pos)",
        "k = self.pos_embeddings(k, input_pos=None)",
        T_ATTN, "rope",
        "keys are rotated at their index within the call (0 .. n-1) while queries are rotated at their position ids: with given positions or in cached steps the keys' RoPE positions are wrong",
        "The key rotation drops input_pos (copied from a path without a cache).",
        "",
    ),
    (
        "t.gqa_values_tiled", TT,
        "v = v.unsqueeze(2).expand(expand_shape).reshape(b, self.num_heads, -1, self.head_dim)",
        "v = v.unsqueeze(1).expand(b, q_per_kv, self.num_kv_heads, -1, self.head_dim).reshape(b, self.num_heads, -1, self.head_dim)",
        T_ATTN, "grouped-query attention",
        "grouped-query attention: the value heads are tiled (query head h reads value head h mod n_kv_heads) instead of repeated in place (h // group), while the key heads are grouped correctly",
        "The values expanded on a new leading axis, as `repeat` / `tile` would, not beside their own head.",
        GQA_TILE,
    ),
    (
        "t.heads_merged_without_transpose", TT,
        "output = output.transpose(1, 2).contiguous().view(b, s_x, -1)",
        "output = output.contiguous().view(b, s_x, -1)",
        T_ATTN, "head split/merge",
        "the attention heads are merged by reshaping [B, H, L, d] straight to [B, L, H*d] without moving the head axis next to the feature axis: outputs of different positions and heads are mixed",
        "The transpose before the merge dropped in a refactor.",
        HEAD_MERGE,
    ),
    (
        "t.sdpa_not_causal", TT,
        "output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=self.kv_cache is None and mask is None and self.is_causal)",
        "output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=False)",
        T_ATTN, "masks",
        "when no mask is passed the attention is not causal: every query attends every key of the call, later tokens included",
        "is_causal hard-coded to False, so the unmasked path (a forward without padding) relies on a mask that is never built.",
        CAUSAL_SKIPPED,
    ),
    (
        "t.padding_on_query_axis", TT,
        "mask.narrow(2, 0, seq_len).mul_(padding_mask[:, None, :].expand(-1, seq_len, -1))",
        "mask.narrow(2, 0, seq_len).mul_(padding_mask[:, :, None].expand(-1, -1, seq_len))",
        T_ATTN, "masks",
        "the key-padding mask is applied along the query axis: padded query rows are blanked while real queries still attend the padded keys",
        "The padding mask broadcast over the wrong axis when the causal mask is combined with it.",
        "",
    ),
    (
        "t.scale_by_head_dim", TT,
        "output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=self.kv_cache is None and mask is None and self.is_causal)",
        "output = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=self.kv_cache is None and mask is None and self.is_causal, scale=1.0 / self.head_dim)",
        T_ATTN, "attention scale",
        "attention scores are divided by the head width d_k instead of its square root",
        "An explicit scale passed to SDPA as 1/head_dim (muP-style) in a model trained with 1/sqrt(head_dim).",
        "",
    ),
    (
        "t.ffn_activation_on_up", TT,
        "h = self.activation(self.w1(x))",
        "h = self.activation(self.w3(x))",
        T_FFN, "feed-forward",
        "the gated FFN applies SiLU to the up projection and multiplies it by the up projection again: the gate projection is unused",
        "w1 and w3 confused in FeedForward.forward (torchtune's names hide which is the gate).",
        "",
    ),
    (
        "t.attn_residual_from_normed", TT,
        "h = self.sa_scale(attn_out) + x",
        "h = self.sa_scale(attn_out) + h",
        T_BLOCK, "residual/norm placement",
        "the attention residual adds the normalised input instead of the block's input, so the residual stream is replaced by its norm",
        "The residual written with the normed tensor `h` (the variable reused for the norm's output).",
        "",
    ),
    (
        "t.final_norm_dropped", TT,
        "h = self.norm(h)",
        "h = h",
        T_LM, "residual/norm placement",
        "the decoder's final RMSNorm before the output projection is skipped: the pre-LN stack ends without its norm",
        "The final norm lost when the output head was moved into a chunked-output path.",
        "",
    ),
    (
        "t.head_reads_embedding", TT,
        "output = self.output(h)",
        "output = F.linear(h, self.tok_embeddings.weight)",
        T_LM, "weight tying",
        "the untied model computes its logits with the token embedding matrix (as a tied model would): the output projection's own weight is unused",
        "Code from Llama 3.2's TiedLinear path used for Llama 3.1, whose output projection is a separate matrix.",
        "",
    ),
    (
        "t.logits_float32", TT,
        "output = self.output(h)",
        "output = self.output(h).float()",
        T_LM, "precision",
        "the logits are cast to float32, so a float64 model returns float32-rounded logits (a float32 step it does not declare)",
        "torchtune's TransformerDecoder returns `self.output(h).float()`; in a float64 build that rounds every logit to float32.",
        "",
    ),
    # ---- bigcode_gpt -----------------------------------------------------------------------
    (
        "b.fused_split_key_value_first", BC,
        "query, key_value = self.c_attn(hidden_states).split((self.embed_dim, 2 * self.kv_dim), dim=2)",
        "key_value, query = self.c_attn(hidden_states).split((2 * self.kv_dim, self.embed_dim), dim=2)",
        B_ATTN, "fused-projection split",
        "the fused query/key/value projection is split in the wrong order: the key and value are read from the first rows (which hold the query) and the query from the rest",
        "A converter that lays c_attn out as [key, value, query] (or a port that assumes it).",
        "",
    ),
    (
        "b.key_value_swapped", BC,
        "key, value = key_value.split((self.head_dim, self.head_dim), dim=-1)",
        "value, key = key_value.split((self.head_dim, self.head_dim), dim=-1)",
        B_ATTN, "multi-query cache",
        "the single key/value head is split from the fused key_value tensor with keys and values exchanged: scores use the value projection and the output averages the key projection",
        "The two halves of the fused multi-query key_value unpacked in the wrong order.",
        "",
    ),
    (
        "b.new_keys_before_past", BC,
        "key_value = torch.cat((layer_past, key_value), dim=-2)",
        "key_value = torch.cat((key_value, layer_past), dim=-2)",
        B_ATTN, "kv cache",
        "the new tokens' fused keys and values are concatenated before the cached ones instead of after them, so the cache's sequence order is wrong from the second call on",
        "The concatenation order of the layer_past cache reversed.",
        "",
    ),
    (
        "b.present_keeps_only_new", BC,
        "present = key_value if use_cache else None",
        "present = key_value[:, -hidden_states.shape[1]:] if use_cache else None",
        B_ATTN, "multi-query cache",
        "the cache returned after each call holds only that call's keys and values: every earlier token is forgotten at the next call",
        "The returned present sliced to the new tokens (as a rolling buffer of one call would).",
        "",
    ),
    (
        "b.positions_restart_each_call", BC,
        "position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long, device=input_ids.device)",
        "position_ids = torch.arange(0, input_shape[-1], dtype=torch.long, device=input_ids.device)",
        B_LM, "embeddings",
        "position ids derived by the model ignore the cached length: every decoding call numbers its tokens from 0, so learned positions are looked up at the wrong rows",
        "The past_length offset dropped from the derived position ids.",
        PAST_POSITIONS,
    ),
    (
        "b.mask_value_zero", BC,
        "self.mask_value = torch.full([], torch.finfo(dtype).min, dtype=dtype, device=device)",
        "self.mask_value = torch.full([], 0.0, dtype=dtype, device=device)",
        B_ATTN, "masks",
        "masked attention scores are replaced by 0 instead of a very large negative number, so masked (future and padded) keys keep a non-negligible weight",
        "The cached mask_value tensor created with 0 (a `torch.zeros` style default).",
        "",
    ),
    (
        "b.mask_where_inverted", BC,
        "attn_weights = torch.where(attention_mask, attn_weights, mask_value)",
        "attn_weights = torch.where(attention_mask, mask_value, attn_weights)",
        B_ATTN, "masks",
        "the boolean mask is applied inverted: allowed keys are masked and disallowed (future, padded) keys kept",
        "torch.where's branches swapped (the mask read with the opposite polarity); only the non-upcast path (float32 and float64) runs this line.",
        "",
    ),
    (
        "b.causal_rows_top_left", BC,
        "mask = bias[None, key_length - query_length : key_length, :key_length]",
        "mask = bias[None, :query_length, :key_length]",
        B_ATTN, "kv cache",
        "with a non-empty cache the causal mask rows are taken from the top of the triangle (rows 0 .. n-1) instead of rows past .. past+n-1: new tokens see only the first keys",
        "The bias buffer sliced as for a call without cache.",
        "",
    ),
    (
        "b.masks_combined_by_or", BC,
        "mask = mask * attention_mask.view(batch_size, 1, -1).to(dtype=torch.bool, device=mask.device)",
        "mask = mask + attention_mask.view(batch_size, 1, -1).to(dtype=torch.bool, device=mask.device)",
        B_ATTN, "masks",
        "the causal mask and the padding mask are combined with a logical OR instead of AND: whenever a padding mask is given, every real key (later ones included) is visible and padded keys stay visible where causal",
        "Boolean masks combined with `+`, which is OR for torch bools.",
        "",
    ),
    (
        "b.layer_scale_not_restored", BC,
        "unscale = self.layer_idx + 1 if self.scale_attention_softmax_in_fp32 and upcast else 1",
        "unscale = self.layer_idx + 1 if self.scale_attention_softmax_in_fp32 else 1",
        B_BLOCK, "attention scale",
        "the scores are divided by (layer index + 1) even where the softmax does not multiply that factor back (float32 and float64): in every layer after the first the attention temperature is too high",
        "The upcast condition dropped from GPTBigCode's `unscale`; the multiplication back only happens in the upcast softmax.",
        "",
    ),
    (
        "b.scale_by_head_dim", BC,
        "scale_factor /= self.head_dim**0.5",
        "scale_factor /= self.head_dim",
        B_ATTN, "attention scale",
        "attention scores are divided by the head width instead of its square root",
        "The ** 0.5 dropped from the scale.",
        "",
    ),
    (
        "b.softmax_over_heads", BC,
        "attn_weights = torch.nn.functional.softmax(attn_weights, dim=-1)",
        "attn_weights = torch.nn.functional.softmax(attn_weights, dim=-2)",
        B_ATTN, "attention",
        "the attention softmax normalises over the heads axis of the multi-query layout [B, L, H, keys] instead of over the keys",
        "softmax(dim=-2) carried over from a layout where the keys are the second-to-last axis.",
        SOFTMAX_AXIS,
    ),
    (
        "b.softmax_float32_always", BC,
        "softmax_dtype = torch.float32 if self.attention_softmax_in_fp32 and dtype in (torch.float16, torch.bfloat16) else dtype",
        "softmax_dtype = torch.float32 if self.attention_softmax_in_fp32 else dtype",
        B_ATTN, "precision",
        "the attention softmax is computed in float32 whatever the model dtype, so a float64 model's softmax (and its scaled scores) are rounded to float32, a step it does not declare",
        "transformers' literal `attention_softmax_in_fp32` rule, which also downcasts float64.",
        "",
    ),
    (
        "b.ln_2_uses_ln_1", BC,
        "hidden_states = self.ln_2(hidden_states)",
        "hidden_states = self.ln_1(hidden_states)",
        B_BLOCK, "normalisation",
        "the FFN sublayer is normalised with the attention sublayer's LayerNorm (its gain and bias): the FFN norm's own parameters are unused",
        "Copy-paste of the first sublayer's norm call.",
        "",
    ),
    (
        "b.attn_residual_from_normed", BC,
        "hidden_states = self.ln_1(hidden_states)",
        "hidden_states = residual = self.ln_1(hidden_states)",
        B_BLOCK, "residual/norm placement",
        "the attention residual is taken after ln_1: the normalised input is added back instead of the block's input",
        "The residual re-assigned on the norm's line.",
        "",
    ),
    (
        "b.gelu_exact", BC,
        "self.act = ACT2FN[config.activation_function]",
        'self.act = ACT2FN["gelu"]',
        B_FFN, "feed-forward",
        "the FFN uses exact (erf) GELU instead of the tanh approximation the model declares",
        "The activation hard-coded to `gelu`, as converters that ignore `gelu_pytorch_tanh` do.",
        GELU_TANH,
    ),
    (
        "b.embedding_dropout_in_eval", BC,
        "hidden_states = self.drop(hidden_states)",
        "hidden_states = F.dropout(hidden_states, p=0.1, training=True)",
        B_LM, "dropout",
        "dropout on the embeddings stays active in evaluation mode (functional dropout with training=True), so the model is random at inference",
        "The embedding dropout module replaced by F.dropout with its training flag hard-coded.",
        F_DROPOUT,
    ),
    (
        "b.attention_dropout_in_eval", BC,
        "attn_weights = self.attn_dropout(attn_weights)",
        "attn_weights = F.dropout(attn_weights, p=0.1)",
        B_ATTN, "dropout",
        "dropout on the attention weights stays active in evaluation mode (functional dropout defaults to training=True), so attention is random at inference",
        "nn.Dropout replaced by F.dropout without `training=self.training`.",
        F_DROPOUT_TRAINING_TRUE,
    ),
    (
        "b.positions_offset_by_one", BC,
        "position_embeds = self.wpe(position_ids)",
        "position_embeds = self.wpe(position_ids + 1)",
        B_LM, "embeddings",
        "the learned position table is read one row later than the token's position (position p uses row p + 1)",
        "An OPT/RoBERTa-style position offset copied into a model without one.",
        "",
    ),
    (
        "b.head_untied_copy", BC,
        "self.lm_head.weight = self.transformer.wte.weight",
        "self.lm_head.weight = nn.Parameter(self.transformer.wte.weight.clone())",
        B_LM, "weight tying",
        "the output head is an independent copy of the embedding matrix instead of the same tensor: the tied model's head does not follow the loaded embedding",
        "tie_weights written with clone(), so the head keeps its initial values after the embedding is loaded.",
        TIE_MISSING,
    ),
    (
        "b.layer_norm_eps_default", BC,
        "layer_norm_epsilon: float = 1e-5",
        "layer_norm_epsilon: float = 1e-6",
        B_NORM, "normalisation",
        "the LayerNorm epsilon is 1e-6 where the model declares 1e-5",
        "The config dataclass default copied from another model family.",
        "",
    ),
    # ---- func_vit ----------------------------------------------------------------------------
    (
        "f.patch_pixels_channel_last", FV,
        "x = x.permute(1, 3, 0, 2, 4)",
        "x = x.permute(1, 3, 2, 4, 0)",
        V_PATCH, "vit patchify",
        "each patch is flattened channel-last (row, column, channel) while the projection weight is laid out channel-first (channel, row, column): pixels meet the wrong weights",
        "The paper's H x W x C flatten order used with a [D, C, p, p] kernel.",
        PATCH_CHANNELS,
    ),
    (
        "f.patches_by_plain_reshape", FV,
        "x = x.permute(1, 3, 0, 2, 4)",
        "x = x.reshape(H // p, W // p, C, p, p)",
        V_PATCH, "vit patchify",
        "patches are cut by reshaping the image's memory straight into [N_p, C p p] without moving its axes: a token holds consecutive pixels of one channel's rows instead of one p x p block of every channel",
        "The permute of the patchify dropped, which amounts to `img.view(N_p, -1)`.",
        PATCH_VIEW,
    ),
    (
        "f.patch_weight_reshaped", FV,
        "return patches @ w.reshape(D, C * p * p).T + b",
        "return patches @ w.reshape(C * p * p, D) + b",
        V_PATCH, "vit patchify",
        "the patch projection weight [D, C, p, p] is reshaped to [C p p, D] instead of flattened to [D, C p p] and transposed: the projection mixes unrelated weights",
        "A transpose written as a reshape.",
        "",
    ),
    (
        "f.cls_token_appended", FV,
        "x = torch.cat([cls, x], dim=0)",
        "x = torch.cat([x, cls], dim=0)",
        V_VIT, "vit class token",
        "the class token is appended after the patch tokens instead of prepended, so the head reads the first patch token and the position rows are shifted",
        "The concatenation order reversed.",
        "",
    ),
    (
        "f.cls_without_position", FV,
        'x = x + params["pos_embed"][0]',
        'x = x + torch.cat([torch.zeros_like(params["pos_embed"][0, :1]), params["pos_embed"][0, 1:]])',
        V_VIT, "vit position embedding",
        "the class token receives no position embedding (its row 0 is replaced by zeros) while the patches get theirs",
        "Position rows added to the patches only, as code that adds positions before prepending the class token does.",
        "",
    ),
    (
        "f.pool_mean_with_cls", FV,
        "pooled = x[0]",
        "pooled = x.mean(0)",
        V_VIT, "pooling",
        "the representation fed to the head is the mean over every token including the class token, not the class token's state",
        "Mean pooling over all tokens in a class-token model.",
        MEAN_POOL_CLS,
    ),
    (
        "f.qkv_rows_per_head", FV,
        "qkv = qkv.reshape(N, 3, num_heads, head_dim).permute(1, 2, 0, 3)",
        "qkv = qkv.reshape(N, num_heads, 3, head_dim).permute(2, 1, 0, 3)",
        V_LAYER, "fused-projection split",
        "the fused qkv output is split as if its rows were interleaved per head (q, k, v of head 0, then head 1 ...) while the weight stores all queries, then all keys, then all values",
        "A Megatron/NeoX per-head qkv layout assumed for a timm [q; k; v] weight.",
        QKV_INTERLEAVED,
    ),
    (
        "f.merge_axes_of_batched_code", FV,
        "out = out.transpose(0, 1).reshape(N, D)",
        "out = out.transpose(1, 2).reshape(N, D)",
        V_LAYER, "vmap/functional batching",
        "the heads are merged by transposing the per-example tensor's axes 1 and 2 (the axes the batched code swaps) instead of 0 and 1: position and feature axes are exchanged and tokens' features scrambled",
        "The merge copied from a batched [B, H, N, d] implementation into a per-example function without a batch axis.",
        MERGE_WRONG_LAYOUT,
    ),
    (
        "f.scale_by_model_width", FV,
        "scores = (q @ k.transpose(-2, -1)) * head_dim ** -0.5",
        "scores = (q @ k.transpose(-2, -1)) * D ** -0.5",
        V_LAYER, "attention scale",
        "attention scores are scaled by 1/sqrt(D) (the model width) instead of 1/sqrt(d_k) (the head width)",
        "The scale computed from the embedding width.",
        SCALE_MODEL_WIDTH,
    ),
    (
        "f.keep_mask_inverted", FV,
        "allowed = allowed & keep[None, :]",
        "allowed = allowed & ~keep[None, :]",
        V_MASK, "masks",
        "the key-padding keep-mask is read with the opposite polarity: real tokens are masked and padding attended",
        "A True-means-pad convention (PyTorch's key_padding_mask) applied to a True-means-keep mask.",
        "",
    ),
    (
        "f.padding_on_queries", FV,
        "allowed = allowed & keep[None, :]",
        "allowed = allowed & keep[:, None]",
        V_MASK, "masks",
        "the padding mask is applied to the query axis instead of the key axis: real queries still attend padded keys and padded query rows are blanked",
        "keep broadcast along the wrong axis.",
        "",
    ),
    (
        "f.causal_upper_triangle", FV,
        "allowed = torch.tril(allowed)",
        "allowed = torch.triu(allowed)",
        V_MASK, "masks",
        "the causal mask keeps the upper triangle: each query attends itself and the later keys instead of the earlier ones",
        "tril and triu confused.",
        "",
    ),
    (
        "f.vmap_output_axis", FV,
        'return vmap(patch_embed, in_dims=(None, None, 0))(params, "", x)',
        'return vmap(patch_embed, in_dims=(None, None, 0), out_dims=1)(params, "", x)',
        ["patch_embed"], "vmap/functional batching",
        "the vmapped patch embedding puts the batch axis second: the output is [N_p, B, D] instead of [B, N_p, D]",
        "out_dims set for a sequence-first consumer.",
        "",
    ),
    (
        "f.layer_norm_default_eps", FV,
        'return F.layer_norm(x, x.shape[-1:], params[prefix + "weight"], params[prefix + "bias"], eps)',
        'return F.layer_norm(x, x.shape[-1:], params[prefix + "weight"], params[prefix + "bias"])',
        V_LAYER, "normalisation",
        "LayerNorm uses epsilon 1e-5 (the functional default) where the model declares 1e-6",
        "The eps argument dropped from the functional call.",
        "",
    ),
    (
        "f.final_norm_dropped", FV,
        'return layer_norm(params, prefix + "norm.", x, eps)',
        "return x",
        V_STACK, "residual/norm placement",
        "the encoder's final LayerNorm is skipped: the pre-LN stack ends without its norm",
        "The final norm left out of the functional encoder.",
        "",
    ),
    (
        "f.attn_residual_from_normed", FV,
        'x = x + attention(params, prefix + "attn.", layer_norm(params, prefix + "norm1.", x, eps), keep, num_heads, causal)',
        'x = layer_norm(params, prefix + "norm1.", x, eps) + attention(params, prefix + "attn.", layer_norm(params, prefix + "norm1.", x, eps), keep, num_heads, causal)',
        V_LAYER, "residual/norm placement",
        "the attention residual adds the normalised input instead of the layer's input",
        "The residual branch taken after the norm.",
        "",
    ),
    (
        "f.mlp_norm_reads_norm1", FV,
        'x = x + mlp(params, prefix + "mlp.", layer_norm(params, prefix + "norm2.", x, eps))',
        'x = x + mlp(params, prefix + "mlp.", layer_norm(params, prefix + "norm1.", x, eps))',
        V_LAYER, "normalisation",
        "the MLP sublayer is normalised with the attention norm's gain and bias (the first norm's parameters read twice); the second norm's parameters are unused",
        "A prefix copy-pasted in the functional block.",
        "",
    ),
    (
        "f.gelu_tanh", FV,
        "h = F.gelu(h)",
        'h = F.gelu(h, approximate="tanh")',
        V_LAYER, "feed-forward",
        "the MLP uses the tanh approximation of GELU instead of exact GELU",
        "GPT-2's GELU copied into a ViT.",
        "",
    ),
    (
        "f.dropout_training_true", FV,
        "x = F.dropout(x, p=0.1, training=False)",
        "x = F.dropout(x, p=0.1, training=True)",
        V_VIT, "dropout",
        "dropout after the position embedding stays active at inference (the functional call's training flag is True), so the model is random in evaluation",
        "The functional pos_drop written with training=True.",
        "",
    ),
    (
        "f.qkv_bias_dropped", FV,
        'qkv = linear(params, prefix + "qkv.", x)',
        'qkv = x @ params[prefix + "qkv.weight"].T',
        V_LAYER, "fused-projection split",
        "the fused qkv projection's bias is not added: queries, keys and values lack their biases although the parameters exist",
        "A qkv_bias=False model's projection used for a checkpoint with qkv biases.",
        "",
    ),
]

# Phase 2 (after the phase-1 commit): the codes whose one-line meaning (SPEC.md Appendix C)
# names each bug's frozen class; a bug no code names gets its class described instead.
# bug id -> (expected_codes, class_without_code)
PHASE_2: dict[str, tuple[list[str], str]] = {
    "t.rms_eps_outside_root": (["layer_norm.eps_outside_sqrt"], ""),
    "t.rms_centred_variance": (["layer_norm.rms_wrong_statistics"], ""),
    "t.rms_statistics_input_dtype": (["numerics.norm_statistics_low_precision"], ""),
    "t.rope_cos_sin_swapped": (["rope.not_identity_at_zero", "rope.rotation_inverted"], ""),
    "t.rope_base_llama2": (["positional.base_wrong", "positional.frequency_wrong"], ""),
    "t.rope_scaling_dropped": (["rope.scaling_none", "positional.frequency_wrong"], ""),
    "t.rope_scaling_blend_swapped": (["positional.frequency_wrong"], ""),
    "t.rope_angles_float32": (["numerics.float32_island", "numerics.float64_precision_lost", "numerics.rope_angles_low_precision"], ""),
    "t.cache_advances_one_slot": (["cache.slots_overlap", "cache.unwritten_slots_read"], ""),
    "t.value_cache_gets_keys": (["attention.value_uses_key_projection"], ""),
    "t.cached_mask_rows_from_zero": (["cache.causal_top_left", "mask.causal_alignment_top_left"], ""),
    "t.keys_rotated_at_call_index": (["cache.rope_offset_wrong", "rope.positions_ignored"], ""),
    "t.gqa_values_tiled": (["attention.kv_heads_tiled"], ""),
    "t.heads_merged_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "t.sdpa_not_causal": (["mask.causal_leak"], ""),
    "t.padding_on_query_axis": (["mask.applied_to_queries"], ""),
    "t.scale_by_head_dim": (["attention.scale_wrong"], ""),
    "t.ffn_activation_on_up": (["ffn.gate_up_swapped"], ""),
    "t.attn_residual_from_normed": (["blocks.residual_after_norm"], ""),
    "t.final_norm_dropped": (["blocks.final_norm_missing"], ""),
    "t.head_reads_embedding": (["model.head_tied_to_embedding"], ""),
    "t.logits_float32": (["numerics.float32_island", "numerics.float64_precision_lost"], ""),
    "b.fused_split_key_value_first": (["attention.qkv_order_wrong"], ""),
    "b.key_value_swapped": (["attention.qkv_order_wrong", "cache.keys_values_swapped"], ""),
    "b.new_keys_before_past": (["cache.keys_prepended"], ""),
    "b.present_keeps_only_new": ([], "a KV cache that keeps only the latest call's keys and values: at every call the tokens of the earlier calls are dropped from the cache (neither unused, nor overlapping, nor unwritten slots)"),
    "b.positions_restart_each_call": (["cache.position_offset_wrong"], ""),
    "b.mask_value_zero": (["mask.added_as_bias", "mask.causal_leak"], ""),
    "b.mask_where_inverted": (["mask.polarity_inverted"], ""),
    "b.causal_rows_top_left": (["cache.causal_top_left", "mask.causal_alignment_top_left"], ""),
    "b.masks_combined_by_or": (["mask.combined_with_or", "mask.causal_leak"], ""),
    "b.layer_scale_not_restored": (["attention.scale_wrong"], ""),
    "b.scale_by_head_dim": (["attention.scale_wrong"], ""),
    "b.softmax_over_heads": (["attention.softmax_axis_wrong"], ""),
    "b.softmax_float32_always": (["numerics.float32_island", "numerics.float64_precision_lost"], ""),
    "b.ln_2_uses_ln_1": (["params.read_from_other_module"], ""),
    "b.attn_residual_from_normed": (["blocks.residual_after_norm"], ""),
    "b.gelu_exact": (["ffn.activation_gelu"], ""),
    "b.embedding_dropout_in_eval": (["dropout.active_in_eval"], ""),
    "b.attention_dropout_in_eval": (["dropout.active_in_eval"], ""),
    "b.positions_offset_by_one": (["positional.position_offset"], ""),
    "b.head_untied_copy": (["model.head_not_tied"], ""),
    "b.layer_norm_eps_default": (["layer_norm.eps_wrong"], ""),
    "f.patch_pixels_channel_last": (["vit.patch_flatten_order"], ""),
    "f.patches_by_plain_reshape": (["vit.patch_extraction_wrong"], ""),
    "f.patch_weight_reshaped": ([], "the patch projection's weight [D, C, p, p] reinterpreted by a reshape as [C p p, D] instead of flattened to [D, C p p] and transposed: every patch pixel meets a scrambled weight (not a flatten order of the patch, not a transposed kernel within the patch)"),
    "f.cls_token_appended": (["vit.pooling_wrong_token"], ""),
    "f.cls_without_position": (["vit.cls_pos_embed_missing"], ""),
    "f.pool_mean_with_cls": (["vit.pooling_mean_with_cls"], ""),
    "f.qkv_rows_per_head": (["attention.qkv_order_wrong"], ""),
    "f.merge_axes_of_batched_code": (["attention.heads_merged_wrong_order"], ""),
    "f.scale_by_model_width": (["attention.scale_wrong"], ""),
    "f.keep_mask_inverted": (["mask.polarity_inverted"], ""),
    "f.padding_on_queries": (["mask.applied_to_queries"], ""),
    "f.causal_upper_triangle": (["mask.causal_leak"], ""),
    "f.vmap_output_axis": (["shape.wrong_output_shape"], ""),
    "f.layer_norm_default_eps": (["layer_norm.eps_wrong"], ""),
    "f.final_norm_dropped": (["blocks.final_norm_missing"], ""),
    "f.attn_residual_from_normed": (["blocks.residual_after_norm"], ""),
    "f.mlp_norm_reads_norm1": (["params.read_from_other_module"], ""),
    "f.gelu_tanh": (["ffn.activation_gelu_tanh"], ""),
    "f.dropout_training_true": (["dropout.active_in_eval"], ""),
    "f.qkv_bias_dropped": (["params.bias_unused"], ""),
}

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    (
        "control.tt_silu_functional", TT,
        "h = self.activation(self.w1(x))",
        "h = F.silu(self.w1(x))",
        T_FFN,
        "the FeedForward's activation is nn.SiLU(); F.silu is the same function.",
    ),
    (
        "control.tt_values_repeat_interleave", TT,
        "v = v.unsqueeze(2).expand(expand_shape).reshape(b, self.num_heads, -1, self.head_dim)",
        "v = torch.repeat_interleave(v, q_per_kv, dim=1)",
        T_ATTN,
        "expand on a new axis after the kv-head axis then reshape repeats each value head in place, as repeat_interleave on the head axis does.",
    ),
    (
        "control.tt_merge_permute_reshape", TT,
        "output = output.transpose(1, 2).contiguous().view(b, s_x, -1)",
        "output = output.permute(0, 2, 1, 3).reshape(b, s_x, -1)",
        T_ATTN,
        "permute(0, 2, 1, 3) is transpose(1, 2); reshape copies when needed, as contiguous().view does.",
    ),
    (
        "control.bc_scale_multiplied", BC,
        "scale_factor /= self.head_dim**0.5",
        "scale_factor *= self.head_dim**-0.5",
        B_ATTN,
        "dividing by sqrt(d) and multiplying by d ** -0.5 agree to rounding.",
    ),
    (
        "control.bc_key_value_slices", BC,
        "key, value = key_value.split((self.head_dim, self.head_dim), dim=-1)",
        "key, value = key_value[..., : self.head_dim], key_value[..., self.head_dim :]",
        B_ATTN,
        "the two slices are the two halves split returns.",
    ),
    (
        "control.bc_gelu_new_formula", BC,
        'return F.gelu(x, approximate="tanh")',
        "return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))",
        B_FFN,
        "transformers' NewGELU formula is the tanh approximation F.gelu(approximate='tanh') computes.",
    ),
    (
        "control.fv_patchify_einsum", FV,
        "x = x.permute(1, 3, 0, 2, 4)",
        'x = torch.einsum("chpwq->hwcpq", x)',
        V_PATCH,
        "the einsum names the same axis permutation (grid row, grid column, channel, row, column).",
    ),
    (
        "control.fv_cls_reshape", FV,
        'cls = params["cls_token"][0]',
        'cls = params["cls_token"].reshape(1, -1)',
        V_VIT,
        "cls_token [1, 1, D] indexed at 0 and reshaped to [1, D] are the same row.",
    ),
]


def _locate(impl: str, stripped: str, replacement: str) -> tuple[int, str, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    return hits[0] + 1, line, indent + replacement


def bug_rows() -> list[dict[str, Any]]:
    unknown = sorted(set(PHASE_2) - {b[0] for b in BUGS})
    if unknown:
        raise ValueError(f"PHASE_2 names unknown bugs: {unknown}")
    rows = []
    for bug_id, impl, original, replacement, components, family, klass, description, report in BUGS:
        line, orig, repl = _locate(impl, original, replacement)
        codes, without = PHASE_2.get(bug_id, ([], ""))
        rows.append(
            {
                "id": bug_id,
                "impl": impl,
                "file": f"{FOLDER}/{impl}.py",
                "line": line,
                "original": orig,
                "replacement": repl,
                "components": components,
                "family": family,
                "class": klass,
                "description": description,
                "public_report": report,
                "expected_codes": list(codes),
                "class_without_code": without,
            }
        )
    return rows


def control_rows() -> list[dict[str, Any]]:
    rows = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        line, orig, repl = _locate(impl, original, replacement)
        rows.append(
            {
                "id": control_id,
                "impl": impl,
                "file": f"{FOLDER}/{impl}.py",
                "line": line,
                "original": orig,
                "replacement": repl,
                "components": components,
                "why_correct": why,
            }
        )
    return rows


def main() -> None:
    (HERE / "bugs.json").write_text(json.dumps(bug_rows(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(control_rows(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
