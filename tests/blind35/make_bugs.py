# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the thirty-fifth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind35/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind35"

KL = "kerashub_llama"
AL = "albert_encoder"
BV = "beit_vit"
KL_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
KL_NORM = ["rms_norm", "decoder_block", "causal_lm"]
KL_BLOCK = ["decoder_block", "causal_lm"]
KL_LM = ["causal_lm"]
A_ALL = ["encoder_layer", "encoder"]
A_STACK = ["encoder"]
B_PATCH = ["patch_embed", "vit"]
B_LAYER = ["encoder_layer", "encoder", "vit"]
B_VIT = ["vit"]

GQA_TILE = "https://github.com/onnx/onnx/pull/7274"
QWEN_CACHE_CAUSAL = "https://github.com/QwenLM/Qwen/issues/979"
KERAS_EINSUM_KEY_QUERY = "https://github.com/keras-team/keras-hub/pull/1429"
ROPE_CAT_VS_INTERLEAVE = "https://github.com/allenai/molmo/issues/49"
RMSNORM_FLOAT64_DOWNCAST = "https://github.com/patrick-kidger/equinox/pull/723"
ALBERT_GELU_NEW = "https://github.com/huggingface/transformers/issues/2395"
MERGE_WITHOUT_PERMUTE = "https://github.com/jsbaan/transformer-from-scratch/pull/6"
QKV_ROW_ORDER_PER_HEAD = "https://github.com/sgl-project/sglang/pull/34529"
DROP_PATH_IN_EVAL = "https://github.com/WangFeng18/Swin-Transformer/issues/7"
VIT_EPS_1E6 = "https://github.com/karpathy/makemore/issues/1"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- kerashub_llama
    ("kl.softmax_mask_polarity_inverted", KL,
     "adder = (1.0 - mask.to(inputs.dtype)) * _large_negative_number(inputs.dtype)",
     "adder = mask.to(inputs.dtype) * _large_negative_number(inputs.dtype)",
     KL_ATTN, "masks",
     "The keep-mask is used as a drop-mask: the keys the causal and padding masks allow get the large negative number and the masked ones are left untouched, so each query attends only to future or padded keys.",
     "The masked Softmax's adder written as `mask * large_negative` instead of `(1 - mask) * large_negative`, as when a port confuses Keras' 1 = keep masks with a boolean 'masked' tensor.",
     ""),
    ("kl.softmax_over_queries", KL,
     "self._softmax = Softmax(axis=-1)",
     "self._softmax = Softmax(axis=-2)",
     KL_ATTN, "softmax",
     "The attention softmax normalises over the query axis of the (batch, heads, queries, keys) scores instead of the key axis: each key's column sums to one and the rows do not.",
     "The Softmax layer built with axis=-2, as when the einsum output \"buqk\" is read as \"bukq\".",
     ""),
    ("kl.causal_mask_ignores_cache_index", KL,
     "i = torch.arange(output_length)[:, None] + cache_index",
     "i = torch.arange(output_length)[:, None]",
     KL_ATTN, "kv cache",
     "In cached decoding the causal mask of a call is aligned to the call's own first token instead of the cache position: new query i sees cache slots 0..i, not 0..cache_index+i, so it loses the keys of earlier tokens (and a one-token step sees only slot 0).",
     "compute_causal_mask drops the `+ cache_index` offset; the full forward (cache_index 0) is unchanged, cached and chunked decoding are wrong.",
     QWEN_CACHE_CAUSAL),
    ("kl.causal_mask_strict", KL,
     "mask = (i >= j).to(torch.int32).unsqueeze(0)",
     "mask = (i > j).to(torch.int32).unsqueeze(0)",
     KL_ATTN, "masks",
     "The causal mask uses a strict inequality: every query is denied its own key, and the first query has no key at all (it then attends everything, the future included, since the additive mask shifts all its scores alike).",
     "`i >= j` retyped as `i > j` in compute_causal_mask, the off-by-one of a mask written as 'strictly before'.",
     ""),
    ("kl.rope_start_index_zero", KL,
     "start_index = cache_update_index if cache_update_index is not None else 0",
     "start_index = 0",
     KL_ATTN, "rope",
     "When no position ids are given, the rotary positions of the tokens of a cached call are numbered from 0 instead of from the cache's length, for queries and keys alike; calls with explicit position ids and the full forward are unaffected.",
     "LlamaAttention passes start_index=0 to the rotary layer whatever cache_update_index is, as when the cache path is bolted onto a forward written without one.",
     ""),
    ("kl.rope_table_interleaved", KL,
     "embedding = torch.stack((freq, freq), dim=-2)",
     "embedding = torch.stack((freq, freq), dim=-1)",
     KL_ATTN, "rope",
     "The cos/sin table is laid out for adjacent pairs (each frequency repeated twice in a row) while the rotation pairs channel i with channel i + d/2: the two members of a pair get different angles, so the map is no longer a rotation and the scores no longer depend only on the distance.",
     "The rotary table's `stack(..., axis=-2)` then reshape (concatenated halves) written with axis=-1 (repeat-interleaved), the GPT-J/NeoX layout mix-up.",
     ROPE_CAT_VS_INTERLEAVE),
    ("kl.inverse_freq_half_dim", KL,
     "freq_range = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim",
     "freq_range = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / (rotary_dim // 2)",
     KL_ATTN, "rope",
     "The rotary inverse frequencies use exponent 2i/(d/2) instead of 2i/d, i.e. base**(-4i/d): the frequencies fall twice as fast, as if the base were squared.",
     "_get_inverse_freq divides the even channel indices by half the rotary dimension, mixing the `arange(0, d, 2) / d` and `arange(0, d/2) / (d/2)` spellings.",
     ""),
    ("kl.norm_statistics_float32", KL,
     "x = x.to(torch.promote_types(x.dtype, torch.float32))",
     "x = x.to(torch.float32)",
     KL_NORM, "precision",
     "The RMSNorm statistics and normalisation are computed in float32 whatever the input dtype, then cast back: a float64 build silently loses precision there (a float32 step inside a float64 model).",
     "LlamaLayerNorm keeps Keras' `ops.cast(x, \"float32\")` literally instead of upcasting only lower precisions.",
     RMSNORM_FLOAT64_DOWNCAST),
    ("kl.gqa_keys_tiled", KL,
     "key = torch.repeat_interleave(key, repeats=self.num_key_value_groups, dim=2)",
     "key = key.repeat(1, 1, self.num_key_value_groups, 1)",
     KL_ATTN, "grouped-query attention",
     "The key heads are tiled (query head h reads key head h mod H_kv) while the value heads are repeated in place (h // g): with 1 < H_kv < H, query heads score against the keys of another group.",
     "ops.repeat ported as torch `repeat` (tile) for the keys only; the values keep repeat_interleave.",
     GQA_TILE),
    ("kl.scale_hidden_dim", KL,
     "self._inv_norm_factor = 1.0 / math.sqrt(head_dim)",
     "self._inv_norm_factor = 1.0 / math.sqrt(hidden_dim)",
     KL_ATTN, "attention scale",
     "The queries are scaled by 1/sqrt(d_model) instead of 1/sqrt(head_dim): every score is too small by sqrt(n_heads).",
     "_inv_norm_factor computed from the hidden size instead of the head size.",
     ""),
    ("kl.cache_slots_swapped", KL,
     "cache = torch.stack((key, value), dim=1)",
     "cache = torch.stack((value, key), dim=1)",
     KL_ATTN, "kv cache",
     "The updated cache is stored with its two slots exchanged: the next call reads the values as keys and the keys as values (and writes them back exchanged again), so every cached call after the first attends with the wrong tensors.",
     "The stacked (batch, 2, ...) cache assembled as (value, key) while it is read back as cache[:, 0] = key, cache[:, 1] = value.",
     ""),
    ("kl.cache_written_at_start", KL,
     "start = [0, cache_update_index, 0, 0]",
     "start = [0, 0, 0, 0]",
     KL_ATTN, "kv cache",
     "Each cached call writes its new keys and values at the start of the cache instead of at the cache's current length, overwriting the earliest tokens; the slots where they belong stay empty (zeros) and are still attended.",
     "slice_update's start index misses cache_update_index.",
     ""),
    ("kl.padding_causal_union", KL,
     "return torch.minimum(decoder_mask, causal_mask) if decoder_mask is not None else causal_mask",
     "return torch.maximum(decoder_mask, causal_mask) if decoder_mask is not None else causal_mask",
     KL_ATTN, "masks",
     "When a padding mask is given, it is combined with the causal mask by union instead of intersection: every real key, future ones included, becomes visible, and padded keys stay visible where the causal mask allows them.",
     "The merged padding and causal masks combined with maximum (logical or) instead of minimum (logical and).",
     ""),
    ("kl.gate_reads_up_projection", KL,
     "gate_output = self._feedforward_gate_dense(x)",
     "gate_output = self._feedforward_intermediate_dense(x)",
     KL_BLOCK, "feed-forward",
     "The gated FFN's activated branch is the up projection instead of the gate projection: the output is down(silu(up x) * up x) and the gate weights are never used.",
     "A copy-paste of the Dense call: the gate branch calls the intermediate (up) layer.",
     ""),
    ("kl.ffn_residual_from_normed", KL,
     "x = self._feedforward_layernorm(x)",
     "x = residual = self._feedforward_layernorm(x)",
     KL_BLOCK, "residual",
     "The feed-forward sublayer's residual adds the normalised stream instead of the un-normalised one: the block returns norm2(h) + FFN(norm2(h)).",
     "A refactor that chains the assignment so the residual is taken after the pre-FFN norm.",
     ""),
    ("kl.cached_head_reads_unnormed", KL,
     "hidden_states = x = self.backbone.layer_norm(x)",
     "hidden_states = self.backbone.layer_norm(x)",
     KL_LM, "stack wiring",
     "In cached decoding the logits are computed from the last block's output before the final norm: the norm is applied only to the returned hidden states, not to what the head reads; the full forward is unaffected.",
     "call_with_cache's chained assignment reduced to hidden_states only, so the following reverse embedding reads the un-normalised x.",
     ""),
    ("kl.cache_layer_slot_zero", KL,
     "current_cache = cache[:, i, ...]",
     "current_cache = cache[:, 0, ...]",
     KL_LM, "kv cache",
     "In cached decoding every layer reads the first layer's cache slot: the second layer attends to the first layer's cached keys and values (and its own are lost after the call).",
     "The per-layer cache slice indexed with 0 instead of the layer index.",
     ""),
    ("kl.query_kernel_heads_transposed", KL,
     "self._query_dense = EinsumDense(\"bqm,muh->bquh\", (hidden_dim, self.num_query_heads, head_dim))",
     "self._query_dense = EinsumDense(\"bqm,mhu->bquh\", (hidden_dim, head_dim, self.num_query_heads))",
     KL_ATTN, "head split/merge",
     "The query projection's output features are split into heads in the wrong order: feature h*d + j of the canonical query projection is read as if the layout were (head_dim, heads), so each query head gathers strided features from every head.",
     "The query EinsumDense kernel declared (hidden, head_dim, heads) instead of (hidden, heads, head_dim) while the checkpoint map (permute to (1, 2, 0) and reshape) stays the same, a checkpoint-conversion layout mistake.",
     ""),
    ("kl.scores_keys_by_queries", KL,
     "attention_scores = torch.einsum(self._dot_product_equation, query, key)",
     "attention_scores = torch.einsum(self._dot_product_equation, key, query)",
     KL_ATTN, "attention scores",
     "The einsum operands are exchanged, so the score matrix is transposed: row i holds key i against every query, and the causal mask and softmax are then applied to that transposed matrix (cached calls, whose key and query lengths differ, fail on shapes).",
     "`ops.einsum(equation, key, query)` for `(equation, query, key)`: the operand order is not checked by the equation when the lengths agree.",
     KERAS_EINSUM_KEY_QUERY),
    # ---- albert_encoder
    ("al.mask_fill_sign_flipped", AL,
     "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min",
     "extended_attention_mask = (extended_attention_mask - 1.0) * torch.finfo(dtype).min",
     A_ALL, "masks",
     "The additive padding mask has the wrong sign: padded keys get the largest positive value instead of the most negative one, so every query attends only (uniformly) to the padded keys.",
     "`(1.0 - mask)` rewritten as `(mask - 1.0)` in the extended-mask helper.",
     ""),
    ("al.mask_fill_finite", AL,
     "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min",
     "extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0",
     A_ALL, "masks",
     "The padding fill is the finite constant -10000 instead of the dtype's minimum: padded keys are still masked, but a query whose keys are all padding attends normally (softmax of its real scores) instead of uniformly, and very large scores can overcome the fill.",
     "The pre-4.x BERT `-10000.0` fill restored when porting the extended-mask helper.",
     ""),
    ("al.all_layers_use_first_group", AL,
     "group_idx = int(i / (self.config.num_hidden_layers / self.config.num_hidden_groups))",
     "group_idx = int(i / self.config.num_hidden_groups)",
     A_STACK, "stack wiring",
     "Every layer of the stack runs the first layer's parameters (the stack shares one layer's weights): the later layers' own parameters are loaded but never used.",
     "The group index divides by the number of groups instead of by layers-per-group; with as many groups as layers every index rounds down to 0.",
     ""),
    ("al.merge_heads_without_transpose", AL,
     "context_layer = context_layer.transpose(2, 1).flatten(2)",
     "context_layer = context_layer.reshape(context_layer.size(0), context_layer.size(2), -1)",
     A_ALL, "head split/merge",
     "The heads are merged by reshaping (batch, heads, tokens, head_dim) straight to (batch, tokens, hidden) without moving the head axis back: each output token gathers pieces of several tokens' head outputs.",
     "transpose(2, 1).flatten(2) replaced by a reshape to the final shape, the classic missing permute before a reshape.",
     MERGE_WITHOUT_PERMUTE),
    ("al.split_heads_dims_swapped", AL,
     "new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)",
     "new_x_shape = x.size()[:-1] + (self.attention_head_size, self.num_attention_heads)",
     A_ALL, "head split/merge",
     "The head split reads the hidden features as (head_dim, heads) instead of (heads, head_dim): the attention runs head_dim heads of width n_heads made of strided features, scaled by the wrong width, and merged back in the same strided order.",
     "The two sizes of transpose_for_scores' view exchanged.",
     ""),
    ("al.scale_all_head_size", AL,
     "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
     "attention_scores = attention_scores / math.sqrt(self.all_head_size)",
     A_ALL, "attention scale",
     "The scores are divided by sqrt(hidden size) instead of sqrt(head size).",
     "all_head_size used where attention_head_size is meant.",
     ""),
    ("al.attention_residual_dropped", AL,
     "layernormed_context_layer = self.LayerNorm(hidden_states + projected_context_layer_dropout)",
     "layernormed_context_layer = self.LayerNorm(projected_context_layer_dropout)",
     A_ALL, "residual",
     "The attention sublayer has no residual connection: its LayerNorm gets the projected context alone.",
     "The `hidden_states +` dropped from the attention output's post-norm.",
     ""),
    ("al.ffn_residual_from_layer_input", AL,
     "hidden_states = self.full_layer_layer_norm(ffn_output + attention_output[0])",
     "hidden_states = self.full_layer_layer_norm(ffn_output + hidden_states)",
     A_ALL, "residual",
     "The feed-forward sublayer's residual adds the layer's input instead of the attention sublayer's output, so the attention result reaches the output only through the FFN.",
     "`hidden_states` reused in AlbertLayer.forward where `attention_output[0]` is meant (the variable names suggest it).",
     ""),
    ("al.ffn_norm_uses_attention_norm", AL,
     "hidden_states = self.full_layer_layer_norm(ffn_output + attention_output[0])",
     "hidden_states = self.attention.LayerNorm(ffn_output + attention_output[0])",
     A_ALL, "norms",
     "The feed-forward sublayer's norm uses the attention sublayer's norm parameters; the layer's own second norm (full_layer_layer_norm) is never used.",
     "The wrong LayerNorm module called after the FFN (both are post-norms of a residual add).",
     ""),
    ("al.gelu_new_is_exact_gelu", AL,
     "ACT2FN = {\"gelu\": GELUActivation, \"gelu_new\": NewGELUActivation, \"relu\": nn.ReLU}",
     "ACT2FN = {\"gelu\": GELUActivation, \"gelu_new\": GELUActivation, \"relu\": nn.ReLU}",
     A_ALL, "activation",
     "The FFN activation is the exact (erf) GELU where the model uses the tanh approximation (gelu_new).",
     "The activation registry maps 'gelu_new' to the exact GELU.",
     ALBERT_GELU_NEW),
    ("al.layer_norm_eps_default", AL,
     "layer_norm_eps=1e-12,",
     "layer_norm_eps=1e-5,",
     A_ALL, "norms",
     "Every LayerNorm uses epsilon 1e-5 instead of the model's 1e-12.",
     "AlbertConfig's default epsilon taken from torch's nn.LayerNorm default.",
     ""),
    ("al.attention_dropout_in_eval", AL,
     "attention_probs = self.attention_dropout(attention_probs)",
     "attention_probs = nn.functional.dropout(attention_probs, p=0.1)",
     A_ALL, "dropout",
     "Dropout on the attention probabilities is applied in evaluation mode too: the output is random.",
     "The dropout module replaced by the functional call, whose `training` defaults to True.",
     ""),
    ("al.keys_from_query_projection", AL,
     "key_layer = self.transpose_for_scores(mixed_key_layer)",
     "key_layer = self.transpose_for_scores(mixed_query_layer)",
     A_ALL, "projections",
     "The keys are the query projection's output: the scores are Q Q^T and the key projection's parameters are never used.",
     "A copy-paste of the transpose_for_scores line with the query tensor left in.",
     ""),
    # ---- beit_vit
    ("bv.qkv_unpacked_per_head", BV,
     "qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)",
     "qkv = qkv.reshape(B, N, self.num_heads, 3, -1).permute(3, 0, 2, 1, 4)",
     B_LAYER, "head split/merge",
     "The fused qkv output is unpacked as per-head (q, k, v) triples instead of three contiguous blocks (all queries, then all keys, then all values): every 'query' head mixes query, key and value features.",
     "The Megatron-style per-head qkv layout assumed for a checkpoint whose fused weight is [q; k; v].",
     QKV_ROW_ORDER_PER_HEAD),
    ("bv.scale_inverted", BV,
     "self.scale = qk_scale or head_dim ** -0.5",
     "self.scale = qk_scale or head_dim ** 0.5",
     B_LAYER, "attention scale",
     "The queries are multiplied by sqrt(head_dim) instead of 1/sqrt(head_dim).",
     "The exponent's minus sign lost.",
     ""),
    ("bv.merge_heads_without_transpose", BV,
     "x = (attn @ v).transpose(1, 2).reshape(B, N, -1)",
     "x = (attn @ v).reshape(B, N, -1)",
     B_LAYER, "head split/merge",
     "The heads are merged by a reshape of (B, heads, N, head_dim) without moving the head axis next to head_dim: tokens and heads are mixed.",
     "The transpose before the reshape dropped.",
     MERGE_WITHOUT_PERMUTE),
    ("bv.class_token_position_twice", BV,
     "cls_tokens = self.cls_token.expand(batch_size, -1, -1)  # stole cls_tokens impl from Phil Wang, thanks",
     "cls_tokens = self.cls_token.expand(batch_size, -1, -1) + self.pos_embed[:, :1]  # stole cls_tokens impl from Phil Wang, thanks",
     B_VIT, "class token",
     "The class token receives its position embedding twice (once here, once with the whole table).",
     "A port that adds the class token's position row when building it (as some implementations do) while the table is still added to every token afterwards.",
     ""),
    ("bv.mean_pooling_with_class_token", BV,
     "return x[:, 0]",
     "return x.mean(1)",
     B_VIT, "pooling",
     "The head receives the mean of all tokens, class token included, after the final norm, instead of the class token.",
     "use_mean_pooling's branch half-applied: the mean over every token replaces the class token, without fc_norm and without leaving the class token out.",
     ""),
    ("bv.class_token_without_position", BV,
     "x = x + self.pos_embed",
     "x[:, 1:] = x[:, 1:] + self.pos_embed[:, 1:]",
     B_VIT, "positions",
     "The position embedding is added to the patch tokens only: the class token gets none, and row 0 of the position table is never used.",
     "A port from a codebase whose class token carries no position embedding.",
     ""),
    ("bv.patches_column_major", BV,
     "x = self.proj(x).flatten(2).transpose(1, 2)",
     "x = self.proj(x).transpose(2, 3).flatten(2).transpose(1, 2)",
     B_PATCH, "patchify",
     "The patch tokens are numbered column by column instead of row by row: token k is the patch at (k mod n, k div n), so each patch gets another patch's position embedding.",
     "An (H, W) transpose of the conv output before flattening, as when porting from a width-major (NWHC) layout.",
     ""),
    ("bv.norm2_default_eps", BV,
     "self.norm2 = norm_layer(dim)",
     "self.norm2 = nn.LayerNorm(dim)",
     B_LAYER, "norms",
     "The second norm of every block uses epsilon 1e-5 instead of the model's 1e-6.",
     "nn.LayerNorm called directly where the `partial(nn.LayerNorm, eps=1e-6)` norm_layer is meant.",
     VIT_EPS_1E6),
    ("bv.attention_residual_from_normed", BV,
     "x = x + self.drop_path(self.attn(self.norm1(x), rel_pos_bias=rel_pos_bias))",
     "x = self.norm1(x) + self.drop_path(self.attn(self.norm1(x), rel_pos_bias=rel_pos_bias))",
     B_LAYER, "residual",
     "The attention sublayer's residual adds the normalised input instead of the un-normalised stream.",
     "The residual taken from the norm's output, as when `x = self.norm1(x)` is inlined in the wrong place.",
     ""),
    ("bv.drop_path_in_eval", BV,
     "if drop_prob == 0. or not training:",
     "if drop_prob == 0.:",
     B_LAYER, "dropout",
     "Stochastic depth stays active in evaluation: whole residual branches are dropped at random (and the kept ones rescaled) per sample.",
     "drop_path's `not training` guard dropped.",
     DROP_PATH_IN_EVAL),
    ("bv.gelu_tanh_default", BV,
     "drop_path=0., init_values=None, act_layer=nn.GELU, norm_layer=nn.LayerNorm,",
     "drop_path=0., init_values=None, act_layer=partial(nn.GELU, approximate='tanh'), norm_layer=nn.LayerNorm,",
     B_LAYER, "activation",
     "The MLP activation is the tanh-approximated GELU instead of the exact GELU.",
     "Block's default act_layer changed to the tanh approximation.",
     ""),
    ("bv.keys_values_swapped", BV,
     "q, k, v = qkv[0], qkv[1], qkv[2]   # make torchscript happy (cannot use tensor as tuple)",
     "q, k, v = qkv[0], qkv[2], qkv[1]   # make torchscript happy (cannot use tensor as tuple)",
     B_LAYER, "projections",
     "Keys and values are exchanged: the third block of the fused projection is used as keys and the second as values.",
     "The unpacking indices of the fused qkv tensor mistyped.",
     ""),
    ("bv.softmax_over_heads", BV,
     "attn = attn.softmax(dim=-1)",
     "attn = attn.softmax(dim=1)",
     B_LAYER, "softmax",
     "The attention softmax normalises across the heads axis of (B, heads, N, N) instead of across the keys.",
     "softmax over dim=1, as when code written for (B*heads, N, N) scores is reused on a 4-D tensor.",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.kl_half_rot_flatten", KL,
     "half_rot_tensor = torch.reshape(half_rot_tensor, tensor.shape)",
     "half_rot_tensor = half_rot_tensor.flatten(-2)",
     KL_ATTN,
     "Flattening the last two axes of the stacked (-x2, x1) tensor gives the same (..., d) tensor as reshaping it to the input's shape."),
    ("control.kl_query_divided", KL,
     "query = torch.mul(query, self._inv_norm_factor)",
     "query = query / math.sqrt(query.shape[-1])",
     KL_ATTN,
     "Dividing by sqrt(head_dim) equals multiplying by its inverse (to rounding); the query's last axis is head_dim."),
    ("control.kl_repeat_kv_expand", KL,
     "key = torch.repeat_interleave(key, repeats=self.num_key_value_groups, dim=2)",
     "key = key[:, :, :, None, :].expand(-1, -1, -1, self.num_key_value_groups, -1).flatten(2, 3)",
     KL_ATTN,
     "transformers' repeat_kv idiom: expanding a new axis after the heads and flattening it into them repeats each key head in place, as repeat_interleave does."),
    ("control.al_scale_multiplied", AL,
     "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
     "attention_scores = attention_scores * (1.0 / math.sqrt(self.attention_head_size))",
     A_ALL,
     "Multiplying by the inverse of sqrt(attention_head_size) equals dividing by it, to rounding."),
    ("control.al_merge_permute_reshape", AL,
     "context_layer = context_layer.transpose(2, 1).flatten(2)",
     "context_layer = context_layer.permute(0, 2, 1, 3).reshape(context_layer.size(0), context_layer.size(2), self.all_head_size)",
     A_ALL,
     "permute(0, 2, 1, 3) is transpose(2, 1) on a 4-D tensor, and reshaping to (batch, tokens, all_head_size) is flatten(2)."),
    ("control.al_mask_masked_fill", AL,
     "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min",
     "extended_attention_mask = extended_attention_mask.masked_fill(extended_attention_mask == 0, torch.finfo(dtype).min).masked_fill(extended_attention_mask == 1, 0.0)",
     A_ALL,
     "For a 0/1 mask, filling the zeros with the dtype's minimum and the ones with zero gives the same additive mask as (1 - mask) * min."),
    ("control.bv_scores_einsum", BV,
     "attn = (q @ k.transpose(-2, -1))",
     "attn = torch.einsum(\"bhqd,bhkd->bhqk\", q, k)",
     B_LAYER,
     "The einsum contracts the head dimension of queries and keys exactly as q @ k^T."),
    ("control.bv_patches_einsum", BV,
     "x = self.proj(x).flatten(2).transpose(1, 2)",
     "x = torch.einsum(\"bchw->bhwc\", self.proj(x)).reshape(B, -1, self.proj.out_channels)",
     B_PATCH,
     "Moving the channels last and flattening (h, w) row-major gives the same (B, N, D) patch tokens, in the same order, as flatten(2).transpose(1, 2)."),
]

# Phase 2 only: bug id -> (expected codes, class without code). Empty in phase 1.
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    """The 1-based line number and the full line of the one line whose stripped text is
    ``stripped``; the indentation of the replacement follows the original's."""
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}.py: {stripped!r} occurs {len(hits)} times")
    return hits[0] + 1, lines[hits[0]]


def _row(impl: str, original: str, replacement: str) -> dict[str, Any]:
    line, full = _locate(impl, original)
    indent = full[: len(full) - len(full.lstrip())]
    return {
        "impl": impl,
        "file": f"{FOLDER}/{impl}.py",
        "line": line,
        "original": full,
        "replacement": indent + replacement,
    }


def main() -> None:
    bugs = []
    for bug_id, impl, original, replacement, components, family, klass, description, report in BUGS:
        codes, without = PHASE_2.get(bug_id, ([], ""))
        bugs.append({
            "id": bug_id,
            **_row(impl, original, replacement),
            "components": components,
            "family": family,
            "class": klass,
            "description": description,
            "public_report": report,
            "expected_codes": codes,
            "class_without_code": without,
        })
    controls = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        controls.append({
            "id": control_id,
            **_row(impl, original, replacement),
            "components": components,
            "why_correct": why,
        })
    (HERE / "bugs.json").write_text(json.dumps(bugs, indent=1) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(controls, indent=1) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
