# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the thirty-third blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind33/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind33"

MP = "mpt_decoder"
SQ = "squeezebert_encoder"
LV = "lukemelas_vit"
M_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
M_BLOCK = ["decoder_block", "causal_lm"]
M_LM = ["causal_lm"]
M_ATTN_FN = ["causal_self_attention", "decoder_block", "causal_lm"]
S_ALL = ["encoder_layer", "encoder"]
S_STACK = ["encoder"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_STACK = ["encoder"]
V_VIT = ["vit"]

FUNCTIONAL_DROPOUT_IN_EVAL = "https://github.com/pytorch/pytorch/issues/26338"
FP16_MASK_MINIMUM = "https://github.com/huggingface/transformers/pull/17306"
MASK_IGNORES_CACHE = "https://github.com/meta-llama/llama/issues/899"
GQA_TILE_NOT_REPEAT = "https://github.com/ekzhang/jax-js/pull/180"
JAX_LAYER_NORM_EPS = "https://github.com/kornia/kornia/pull/2786"
BERT_LAYER_NORM_EPS = "https://github.com/nomic-ai/gpt4all/pull/1946"
MODULE_LIST_MULTIPLIED = "https://github.com/zalandoresearch/pytorch-vq-vae/issues/2"
JAX_GELU_APPROXIMATE = "https://github.com/jax-ml/jax/issues/4428"
SOFTMAX_IMPLICIT_DIM = "https://github.com/natanielruiz/deep-head-pose/issues/118"
ROPE_LOW_PRECISION_ANGLES = "https://github.com/EleutherAI/gpt-neox/issues/1003"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- mpt_decoder
    ("mp.key_heads_split_d_h", MP,
     "k = key.view(b, key.size(1), kv_n_heads, -1).permute(0, 2, 3, 1)",
     "k = key.view(b, key.size(1), -1, kv_n_heads).permute(0, 3, 2, 1)",
     M_ATTN, "head split",
     "The keys' width is cut into heads in the wrong order, as (head_dim, heads) instead of (heads, head_dim): each key head is a strided selection of channels, so query head h meets key channels that belong to every head while queries and values are split correctly.",
     "einops' 'b s (h d) -> b h d s' rewritten by hand as a view with the two factors swapped: the permute then puts a head's channels on the d axis from a strided slice.",
     ""),
    ("mp.context_merged_without_transpose", MP,
     "out = out.permute(0, 2, 1, 3).reshape(b, s_q, -1)",
     "out = out.reshape(b, s_q, -1)",
     M_ATTN, "head merge",
     "The per-head context [b, h, s, d] is flattened to [b, s, h*d] without first moving the head axis behind the sequence axis, so each output row mixes rows of other positions and heads.",
     "rearrange(out, 'b h s d -> b s (h d)') ported as a bare reshape.",
     ""),
    ("mp.cached_keys_concat_head_dim", MP,
     "k = torch.cat([past_key_value[0], k], dim=3)",
     "k = torch.cat([past_key_value[0], k], dim=2)",
     M_ATTN, "kv cache",
     "The cached keys are concatenated with the new keys along the wrong axis (the per-head channel axis of the [b, h, d, s] key layout instead of its sequence axis), so cached decoding fails or reads a malformed key tensor.",
     "The torch path stores keys as [b, h, d_head, s]; a refactor copying the value line (dim=2, right for [b, h, s, d]) to the key line.",
     ""),
    ("mp.causal_mask_skipped_when_caching", MP,
     "if is_causal and (not s_q == 1):",
     "if is_causal and past_key_value is None:",
     M_ATTN, "kv cache",
     "The causal mask is applied only when no cache is kept: every call that fills or extends a cache, the multi-token prefill and chunks included, lets each token attend to the later tokens of its own call.",
     "An 'optimisation' meant to skip the mask for one-token decode steps, written as 'no cache' instead of 'one query'; past_key_value is already the new (k, v) tuple at that point in every cached call.",
     MASK_IGNORES_CACHE),
    ("mp.past_position_from_head_axis", MP,
     "past_position = past_key_values[0][0].size(3)",
     "past_position = past_key_values[0][0].size(1)",
     M_LM, "positions",
     "The number of tokens already in the cache is read from the head axis of the cached key tensor, so positions that the model numbers itself in a cached step (no position ids given) start at the number of key/value heads instead of after the cached tokens.",
     "The flash layout's `past_key_values[0][0].size(1)` (keys [b, s, h, d]) kept for the torch layout (keys [b, h, d, s], sequence on axis 3).",
     ""),
    ("mp.derived_positions_restart_each_call", MP,
     "pos = torch.arange(past_position, S + past_position, dtype=torch.long, device=device).unsqueeze(0)",
     "pos = torch.arange(0, S, dtype=torch.long, device=device).unsqueeze(0)",
     M_LM, "positions",
     "When the model numbers the new tokens itself (no position ids given), it numbers every call from 0 instead of from the cache length, so in cached decoding each new token is rotated as if it were at the start of the sequence.",
     "The flash path's offset bookkeeping dropped in a refactor of the position builder; a full forward is unaffected.",
     ""),
    ("mp.causal_mask_top_left", MP,
     "causal_mask = causal_mask[-s_q:, -s_k:]",
     "causal_mask = causal_mask[:s_q, :s_k]",
     M_ATTN, "masks",
     "The causal mask of a call with fewer queries than keys is cut from the top-left corner of the square mask: in a chunk after cached tokens, query i sees keys 0..i instead of every cached key and the chunk's keys up to its own.",
     "The bottom-right slice of the square tril replaced by the top-left one, as in code that only ever ran full forwards.",
     MASK_IGNORES_CACHE),
    ("mp.padding_fill_minus_1e4", MP,
     "min_val = torch.finfo(attn_bias.dtype).min",
     "min_val = -10000.0",
     M_ATTN, "masks",
     "Padded keys get a finite additive bias of -1e4 instead of the dtype's minimum, so a padded key is not hidden when the raw scores are of that size: with large activations the padding leaks into the real tokens' attention.",
     "The older BERT-era constant kept in a port of MPT's attention-bias builder.",
     ""),
    ("mp.softmax_scale_per_kv_group", MP,
     "self.softmax_scale = 1 / math.sqrt(self.d_model / self.n_heads)",
     "self.softmax_scale = 1 / math.sqrt(self.d_model / self.kv_n_heads)",
     M_ATTN, "attention scale",
     "The default softmax scale is computed from the width of a key/value head group (d_model / kv_n_heads) instead of the head width: correct for multi-head attention, wrong (too small) whenever there are fewer key/value heads than query heads.",
     "A refactor from MultiheadAttention to GroupedQueryAttention that renamed n_heads to kv_n_heads in one place too many.",
     ""),
    ("mp.gqa_heads_tiled", MP,
     "hidden = hidden[:, :, :, None, :].expand(b, s, kv_n_heads, n_rep, d)",
     "hidden = hidden[:, :, None, :, :].expand(b, s, n_rep, kv_n_heads, d)",
     M_ATTN, "grouped-query attention",
     "Key/value heads are tiled (the group repeated as a whole) instead of each head repeated in place: query head h is served by key/value head h mod kv_n_heads instead of h // (n_heads / kv_n_heads).",
     "The new axis inserted before the kv-head axis instead of after it, giving torch.repeat's order rather than repeat_interleave's.",
     GQA_TILE_NOT_REPEAT),
    ("mp.rope_freq_exponent_halved", MP,
     "inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.int64).double().to(device) / self.dim))",
     "inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim // 2, dtype=torch.int64).double().to(device) / self.dim))",
     M_ATTN, "rope",
     "The rotary frequencies use exponents i/d instead of 2i/d (i = 0..d/2-1): the same number of frequencies, but they fall off as if the base were its square root, so every rotation angle above the first pair is wrong.",
     "arange(0, dim, 2) rewritten as arange(dim // 2) to get the right count, forgetting the factor 2 in the exponent.",
     ""),
    ("mp.rope_args_swapped", MP,
     "return LlamaRotaryEmbedding(rope_head_dim, max_position_embeddings=max_seq_len, base=rope_theta, device='cpu')",
     "return LlamaRotaryEmbedding(rope_head_dim, rope_theta, max_seq_len, device='cpu')",
     M_ATTN, "rope",
     "The rotary table is built with base = max_seq_len (512) and max_position_embeddings = rope_theta: positional arguments passed in the wrong order, so every frequency but the first uses the wrong base.",
     "Keywords dropped when the call was shortened; the constructor's order is (dim, max_position_embeddings, base).",
     ""),
    ("mp.rope_angles_float32", MP,
     "freqs = (inv_freq_expanded.double() @ position_ids_expanded.double()).transpose(1, 2)",
     "freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)",
     M_ATTN, "precision",
     "The rotary angles (position times frequency) are formed in float32 even in a float64 build, as transformers' LlamaRotaryEmbedding does, so the rotation is only float32-accurate, worst at large positions.",
     "transformers' `.float()` copied back over the float64 computation.",
     ROPE_LOW_PRECISION_ANGLES),
    ("mp.attn_residual_from_normed", MP,
     "x = x + self.resid_attn_dropout(b)",
     "x = a + self.resid_attn_dropout(b)",
     M_BLOCK, "residuals",
     "The attention sublayer's residual adds the attention output to the normalised input (norm_1(x)) instead of to the block's input x.",
     "MPT names the normed input `a` and the attention output `b`: one letter swapped.",
     ""),
    ("mp.ffn_reads_unnormed", MP,
     "n = self.apply_ffn(attention_mask, m)",
     "n = self.apply_ffn(attention_mask, x)",
     M_BLOCK, "norms",
     "The feed-forward sublayer is fed the un-normalised residual stream: norm_2 is computed but its output is not used.",
     "`m = x` then `m = self.norm_2(x)`: passing x rather than m to apply_ffn bypasses the norm.",
     ""),
    ("mp.final_norm_uses_last_block_norm", MP,
     "x = self.norm_f(x)",
     "x = self.blocks[-1].norm_2(x)",
     M_LM, "parameters",
     "The final norm of the stack is computed with the last block's FFN norm (its weights) instead of the model's own final norm, which is left unused.",
     "A refactor that thought the last block's norm_2 was the final norm (both are pre-LN LayerNorms of the same width).",
     ""),
    ("mp.functional_dropout_in_eval", MP,
     "attn_weight = torch.nn.functional.dropout(attn_weight, p=dropout_p, training=training, inplace=True)",
     "attn_weight = torch.nn.functional.dropout(attn_weight, p=dropout_p, inplace=True)",
     M_ATTN, "dropout",
     "Attention-probability dropout is active in evaluation: torch.nn.functional.dropout defaults to training=True, and the flag is no longer passed.",
     "The classic functional-dropout pitfall when a keyword is trimmed.",
     FUNCTIONAL_DROPOUT_IN_EVAL),
    # ---- squeezebert_encoder
    ("sq.heads_reshaped_not_permuted", SQ,
     "return x.permute(0, 1, 3, 2)  # [N, C1, C2, W] --> [N, C1, W, C2]",
     "return x.reshape(x.size(0), self.num_attention_heads, x.size(-1), self.attention_head_size)  # [N, C1, C2, W] --> [N, C1, W, C2]",
     S_ALL, "head split",
     "The queries and values are brought from [N, C1, C2, W] to [N, C1, W, C2] by a reshape instead of a permute: the channel and sequence axes are not exchanged, so each 'position' row of a head holds channels of several positions.",
     "Swapping the last two axes written as a reshape to the target shape, which only relabels the memory.",
     ""),
    ("sq.context_merged_without_permute", SQ,
     "x = x.permute(0, 1, 3, 2).contiguous()  # [N, C1, C2, W]",
     "x = x.contiguous()  # [N, C1, C2, W]",
     S_ALL, "head merge",
     "The per-head context [N, C1, W, C2] is viewed as [N, C, W] without first moving the width axis last, so the merged channels of a position come from other positions.",
     "The permute dropped as 'already contiguous', the shape comment left unchanged.",
     ""),
    ("sq.scale_by_sequence_length", SQ,
     "attention_score = attention_score / math.sqrt(self.attention_head_size)",
     "attention_score = attention_score / math.sqrt(key_layer.size(-1))",
     S_ALL, "attention scale",
     "The scores are divided by the square root of the sequence length instead of the head width: the BERT idiom sqrt(k.size(-1)) reads the last axis of SqueezeBERT's key layer, which is kept pre-transposed [N, C1, C2, W].",
     "A BERT idiom pasted into the NCW layout, where the keys' last axis is the sequence.",
     ""),
    ("sq.mask_transposed_for_ncw", SQ,
     "attention_score = attention_score + attention_mask",
     "attention_score = attention_score + attention_mask.transpose(-1, -2)",
     S_ALL, "masks",
     "The extended mask is transposed before it is added, as if the NCW layout required it: a key-padding mask then lands on the query axis (padded queries are blanked, padded keys stay visible) and a 3-D mask has its query and key axes exchanged.",
     "The docstring says the mask 'does not need to be transposed'; a port to NCW transposed it anyway.",
     ""),
    ("sq.mask_fill_float32_min", SQ,
     "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min",
     "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(torch.float32).min",
     S_ALL, "precision",
     "The masked positions get float32's most negative value whatever the compute dtype: in float16 it overflows to -inf, so a query with every key masked gives NaN and the masked scores are infinite rather than finite.",
     "The fill value hard-coded to float32's range, as before transformers made it dtype-dependent.",
     FP16_MASK_MINIMUM),
    ("sq.softmax_over_queries", SQ,
     "self.softmax = nn.Softmax(dim=-1)",
     "self.softmax = nn.Softmax(dim=-2)",
     S_ALL, "softmax",
     "The attention softmax normalises over the query axis instead of the key axis, so no query's weights sum to one.",
     "dim=-2 chosen in a layout-heavy port where the channels are on axis -2 of every other tensor.",
     ""),
    ("sq.post_attention_args_swapped", SQ,
     "post_attention_output = self.post_attention(attention_output, hidden_states)",
     "post_attention_output = self.post_attention(hidden_states, attention_output)",
     S_ALL, "residuals",
     "The output projection is applied to the layer input and the unprojected attention context is added as the residual: ConvDropoutLayerNorm's two arguments are passed in the wrong order.",
     "ConvDropoutLayerNorm(hidden_states, input_tensor): the residual is its second argument.",
     ""),
    ("sq.ffn_residual_from_layer_input", SQ,
     "layer_output = self.output(intermediate_output, post_attention_output)",
     "layer_output = self.output(intermediate_output, hidden_states)",
     S_ALL, "residuals",
     "The feed-forward sublayer's residual is the layer input instead of the attention sublayer's output, so the attention sublayer only reaches the output through the FFN.",
     "The residual argument copied from the post_attention call one line above.",
     ""),
    ("sq.ffn_reads_attention_context", SQ,
     "intermediate_output = self.intermediate(post_attention_output)",
     "intermediate_output = self.intermediate(attention_output)",
     S_ALL, "stack wiring",
     "The feed-forward network is fed the raw attention context (before the output projection, the residual and the first LayerNorm) instead of the attention sublayer's output, which is still used as the FFN's residual.",
     "Two similarly named tensors (attention_output, post_attention_output) confused.",
     ""),
    ("sq.layer_norm_eps_default", SQ,
     "nn.LayerNorm.__init__(self, normalized_shape=hidden_size, eps=eps)  # instantiates self.{weight, bias, eps}",
     "nn.LayerNorm.__init__(self, normalized_shape=hidden_size)  # instantiates self.{weight, bias, eps}",
     S_ALL, "norms",
     "The NCW LayerNorm subclass drops its eps argument, so every LayerNorm uses torch's default 1e-5 instead of the configured 1e-12.",
     "The subclass's explicit __init__ call forgetting to forward eps.",
     BERT_LAYER_NORM_EPS),
    ("sq.layers_shared_by_list_multiplication", SQ,
     "self.layers = nn.ModuleList(SqueezeBertModule(config) for _ in range(config.num_hidden_layers))",
     "self.layers = nn.ModuleList([SqueezeBertModule(config)] * config.num_hidden_layers)",
     S_STACK, "parameters",
     "Every layer of the stack is the same module: list multiplication repeats one SqueezeBertModule, so the layers share one set of weights and the stack holds one layer's parameters.",
     "The list-multiplication idiom applied to modules.",
     MODULE_LIST_MULTIPLIED),
    ("sq.query_from_key_conv", SQ,
     "mixed_query_layer = self.query(hidden_states)",
     "mixed_query_layer = self.key(hidden_states)",
     S_ALL, "projections",
     "The queries are computed with the key projection, so the query weights are never used and each head's scores are a key-key product.",
     "Copy-paste among three identical-looking lines.",
     ""),
    ("sq.gelu_maps_to_tanh", SQ,
     '"gelu": GELUActivation,',
     '"gelu": NewGELUActivation,',
     S_ALL, "activation",
     "The activation named 'gelu' in the configuration is the tanh approximation instead of exact erf GELU.",
     "The ACT2FN table's 'gelu' entry pointed at the 'gelu_new' class.",
     ""),
    # ---- lukemelas_vit
    ("lv.split_last_heads_reversed", LV,
     "q, k, v = (split_last(x, (self.n_heads, -1)).transpose(1, 2) for x in [q, k, v])",
     "q, k, v = (split_last(x, (-1, self.n_heads)).transpose(1, 2) for x in [q, k, v])",
     V_LAYER, "head split",
     "The model width is split as (head_dim, heads) instead of (heads, head_dim), and the transpose then takes the head_dim axis as the head axis: attention runs over head_dim 'heads' of n_heads channels each, each a strided channel selection.",
     "split_last's shape written in the other order; it works for any shape whose product fits.",
     ""),
    ("lv.scale_float32_constant", LV,
     "scores = q @ k.transpose(-2, -1) / np.sqrt(k.size(-1))",
     "scores = q @ k.transpose(-2, -1) / np.float32(np.sqrt(k.size(-1)))",
     V_LAYER, "precision",
     "The attention scale is a float32 constant, so in a float64 build the scores are scaled by sqrt(d_k) rounded to float32 (a relative error near 1e-8).",
     "A port from a float32 (JAX) checkpoint pipeline that casts its constants to float32.",
     ""),
    ("lv.mask_polarity_inverted", LV,
     "scores -= 10000.0 * (1.0 - mask)",
     "scores -= 10000.0 * mask",
     V_LAYER[:2], "masks",
     "The padding mask is used with the opposite polarity: the real tokens are pushed down by 1e4 and the padded ones are left visible.",
     "A mask given as 1 = pad in the code this was ported from.",
     ""),
    ("lv.mask_not_passed_to_blocks", LV,
     "x = block(x, mask)",
     "x = block(x, None)",
     V_STACK, "masks",
     "The stack does not hand its padding mask to its blocks: every layer attends to padded tokens.",
     "A refactor of the block call for the unmasked image path.",
     ""),
    ("lv.gelu_tanh_from_flax", LV,
     "return self.fc2(F.gelu(self.fc1(x)))",
     "return self.fc2(F.gelu(self.fc1(x), approximate='tanh'))",
     V_LAYER, "activation",
     "The FFN uses the tanh-approximate GELU instead of exact erf GELU.",
     "Flax's nn.gelu defaults to approximate=True; a port from the JAX ViT code matched it.",
     JAX_GELU_APPROXIMATE),
    ("lv.attention_norm_bypassed", LV,
     "h = self.drop(self.proj(self.attn(self.norm1(x), mask)))",
     "h = self.drop(self.proj(self.attn(x, mask)))",
     V_LAYER, "norms",
     "The attention sublayer reads the un-normalised residual stream: norm1 is never used.",
     "The norm call dropped when the attention call was edited.",
     ""),
    ("lv.ffn_uses_norm1", LV,
     "h = self.drop(self.pwff(self.norm2(x)))",
     "h = self.drop(self.pwff(self.norm1(x)))",
     V_LAYER, "parameters",
     "The feed-forward sublayer is normalised with the attention sublayer's LayerNorm (norm1's weights), and norm2 is never used.",
     "Copy-paste of the line above.",
     ""),
    ("lv.output_projection_skipped", LV,
     "h = self.drop(self.proj(self.attn(self.norm1(x), mask)))",
     "h = self.drop(self.attn(self.norm1(x), mask))",
     V_LAYER, "projections",
     "The attention's output projection is skipped: the merged heads are added to the residual directly and proj's weights are never used.",
     "lukemelas keeps the output projection in Block, not in MultiHeadedSelfAttention; a refactor that thought the attention module projected its own output.",
     ""),
    ("lv.keys_from_query_projection", LV,
     "q, k, v = self.proj_q(x), self.proj_k(x), self.proj_v(x)",
     "q, k, v = self.proj_q(x), self.proj_q(x), self.proj_v(x)",
     V_LAYER, "projections",
     "The keys are computed with the query projection, so the key weights are never used.",
     "Copy-paste in a one-line tuple assignment.",
     ""),
    ("lv.softmax_implicit_dim", LV,
     "scores = self.drop(F.softmax(scores, dim=-1))",
     "scores = self.drop(F.softmax(scores))",
     V_LAYER, "softmax",
     "The softmax has no dim: torch's legacy implicit choice for a 4-D tensor is dim=1, the head axis, so the weights are normalised across heads instead of across keys.",
     "The deprecated implicit-dim call, as older code wrote it.",
     SOFTMAX_IMPLICIT_DIM),
    ("lv.pool_last_token", LV,
     "x = self.norm(x)[:, 0]  # b,d",
     "x = self.norm(x)[:, -1]  # b,d",
     V_VIT, "pooling",
     "The classifier reads the last patch token instead of the class token.",
     "An index copied from a decoder's 'last token' pooling.",
     ""),
    ("lv.patches_column_major", LV,
     "x = x.flatten(2).transpose(1, 2)  # b,gh*gw,d",
     "x = x.permute(0, 3, 2, 1).flatten(1, 2)  # b,gh*gw,d",
     V_VIT, "patchify",
     "The patch tokens are ordered column by column (the patch grid transposed) while the position table and the reference order them row by row, so each patch gets another patch's position embedding.",
     "An NHWC-minded port (TF/JAX 'b h w c -> b (h w) c') written with the H and W axes swapped.",
     ""),
    ("lv.layer_norm_eps_torch_default", LV,
     "self.norm1 = nn.LayerNorm(dim, eps=1e-6)",
     "self.norm1 = nn.LayerNorm(dim)",
     V_LAYER, "norms",
     "The attention sublayer's LayerNorm uses torch's default eps 1e-5 instead of the checkpoint's 1e-6.",
     "The classic JAX-to-PyTorch conversion slip: flax's LayerNorm defaults to 1e-6, torch's to 1e-5.",
     JAX_LAYER_NORM_EPS),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.mp.softmax_scale_from_head_width", MP,
     "softmax_scale=self.softmax_scale,",
     "softmax_scale=None,",
     M_ATTN,
     "With softmax_scale None, scaled_multihead_dot_product_attention uses 1 / sqrt(d) with d the query head width, which is the module's default scale."),
    ("control.mp.bool_causal_mask", MP,
     "causal_mask = attn_weight.new_ones(s, s, dtype=torch.float32)",
     "causal_mask = torch.ones(s, s, dtype=torch.bool, device=attn_weight.device)",
     M_ATTN,
     "tril of a boolean ones matrix and its cast to bool give the same mask as the float32 one."),
    ("control.mp.repeat_interleave_keys", MP,
     "k = repeat_kv_for_gqa(k.transpose(1, 2), n_heads // kv_n_heads).transpose(1, 2)",
     "k = k.repeat_interleave(n_heads // kv_n_heads, dim=1)",
     M_ATTN,
     "repeat_kv_for_gqa repeats each key/value head in place; repeat_interleave on the head axis of [b, h, d, s] keys does the same."),
    ("control.sq.key_permuted_then_transposed", SQ,
     "key_layer = self.transpose_key_for_scores(mixed_key_layer)",
     "key_layer = self.transpose_for_scores(mixed_key_layer).transpose(-1, -2)",
     S_ALL,
     "[N, C1, W, C2] transposed on its last two axes is the [N, C1, C2, W] layout transpose_key_for_scores gives."),
    ("control.sq.gelu_module", SQ,
     "self.act = nn.functional.gelu",
     "self.act = nn.GELU()",
     S_ALL,
     "nn.GELU() with its default approximate='none' calls the same exact erf GELU as nn.functional.gelu."),
    ("control.sq.merged_width_inferred", SQ,
     "new_x_shape = (x.size()[0], self.all_head_size, x.size()[3])  # [N, C, W]",
     "new_x_shape = (x.size()[0], -1, x.size()[3])  # [N, C, W]",
     S_ALL,
     "The inferred size is C1 * C2 = all_head_size."),
    ("control.lv.norm_then_pool_swapped", LV,
     "x = self.norm(x)[:, 0]  # b,d",
     "x = self.norm(x[:, 0])  # b,d",
     V_VIT,
     "LayerNorm acts on each token alone, so normalising only the class token gives the same row."),
    ("control.lv.class_token_repeat", LV,
     "x = torch.cat((self.class_token.expand(b, -1, -1), x), dim=1)  # b,gh*gw+1,d",
     "x = torch.cat((self.class_token.repeat(b, 1, 1), x), dim=1)  # b,gh*gw+1,d",
     V_VIT,
     "repeat copies what expand views: the same class token in every row."),
]

# Phase 2 only: bug id -> (expected codes, class without a code).
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line


def _row(impl: str, original: str, replacement: str) -> dict[str, Any]:
    number, line = _locate(impl, original)
    indent = line[: len(line) - len(line.lstrip())]
    return {
        "impl": impl,
        "file": f"{FOLDER}/{impl}.py",
        "line": number,
        "original": line,
        "replacement": indent + replacement,
    }


def main() -> None:
    bugs = []
    for bug_id, impl, original, replacement, components, family, cls, description, report in BUGS:
        codes, without = PHASE_2.get(bug_id, ([], ""))
        row = _row(impl, original, replacement)
        bugs.append({
            "id": bug_id, **row, "components": components, "family": family, "class": cls,
            "description": description, "public_report": report,
            "expected_codes": codes, "class_without_code": without,
        })
    controls = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        controls.append({"id": control_id, **_row(impl, original, replacement), "components": components, "why_correct": why})
    (HERE / "bugs.json").write_text(json.dumps(bugs, indent=1) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(controls, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
