# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twenty-ninth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind29/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind29"

VL = "vllm_llama"
JN = "joeynmt_encoder"
BV = "blip_vit"
VL_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
VL_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
VL_BLOCK = ["decoder_block", "causal_lm"]
VL_LM = ["causal_lm"]
J_ALL = ["encoder_layer", "encoder"]
J_STACK = ["encoder"]
B_PATCH = ["patch_embed", "vit"]
B_LAYER = ["encoder_layer", "vit"]
B_VIT = ["vit"]

# bug id -> a public issue or pull request of the same class (each URL appeared in a result of
# the project's `issues` search)
PUBLIC: dict[str, str] = {
    "vl.rope_not_neox_style": "https://github.com/Dao-AILab/flash-attention/issues/288",
    "vl.gqa_heads_tiled_not_grouped": "https://github.com/onnx/onnx/pull/7274",
    "vl.scale_from_hidden_size": "https://github.com/omihub777/ViT-CIFAR/pull/12",
    "vl.causal_bias_top_left": "https://github.com/tinygrad/tinygrad/pull/15949",
    "vl.derived_positions_restart": "https://github.com/huggingface/transformers/pull/15751",
    "jn.scale_by_model_size": "https://github.com/karpathy/ng-video-lecture/pull/6",
    "jn.final_norm_dropped": "https://github.com/NVIDIA-NeMo/Speech/pull/2197",
    "jn.ffn_norm_default_eps": "https://github.com/keras-team/keras-hub/pull/133",
    "jn.query_heads_not_transposed": "https://github.com/reczoo/FuxiCTR/issues/30",
    "bv.scale_from_dim": "https://github.com/lucidrains/vit-pytorch/issues/65",
    "bv.heads_merged_without_transpose": "https://github.com/jsbaan/transformer-from-scratch/pull/6",
}

# (id, impl, original (stripped), replacement (stripped), components, family, class, description)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str]] = [
    # ---- vllm_llama
    ("vl.silu_and_mul_halves_swapped", VL,
     "return F.silu(x[..., :d]) * x[..., d:]",
     "return F.silu(x[..., d:]) * x[..., :d]",
     VL_FFN, "feed-forward",
     "The gated feed-forward network applies its nonlinearity to the wrong one of its two input projections: the up projection is activated and the gate projection multiplies it linearly.",
     "SiluAndMul reads the two halves of the merged gate_up output in the wrong order, as when a checkpoint converter stacks [up, gate] while the kernel expects [gate, up]."),
    ("vl.rmsnorm_eps_outside_sqrt", VL,
     "x = x * torch.rsqrt(variance + self.variance_epsilon)",
     "x = x / (torch.sqrt(variance) + self.variance_epsilon)",
     VL_BLOCK, "norms",
     "The RMS normalisation adds its epsilon to the root mean square instead of to the mean square under the root.",
     "rsqrt(var + eps) rewritten as 1 / (sqrt(var) + eps), the placement some T5/Gemma ports and hand-written kernels use; the output differs slightly for typical inputs and much for inputs of small magnitude."),
    ("vl.fused_add_residual_not_carried", VL,
     "residual = x.to(orig_dtype)",
     "residual = residual.to(orig_dtype)",
     VL_BLOCK, "residuals",
     "The residual stream handed on by the fused add-and-norm is the old residual, not the sum: the skip connection around the feed-forward network carries the block's input instead of input plus attention output, so the attention output reaches the block output only through the feed-forward network.",
     "In RMSNorm's fused residual path the updated residual is taken from the incoming residual instead of the sum just computed, a refactor slip in vLLM-style fused_add_rms_norm ports."),
    ("vl.rope_not_neox_style", VL,
     "self.rotary_emb = get_rope(self.head_dim, rotary_dim=self.head_dim, max_position=max_position_embeddings, base=rope_theta, is_neox_style=True)",
     "self.rotary_emb = get_rope(self.head_dim, rotary_dim=self.head_dim, max_position=max_position_embeddings, base=rope_theta, is_neox_style=False)",
     VL_ATTN, "rope",
     "The rotary embedding rotates adjacent channel pairs (2i, 2i+1) while the weights were laid out for pairs split across the two halves of each head (i, i + d/2).",
     "is_neox_style=False for a Llama checkpoint in HF layout (whose q/k weights were permuted for rotate_half), the GPT-J-style interleaving of Meta's original checkpoints."),
    ("vl.rope_inv_freq_step_one", VL,
     "inv_freq = 1.0 / (base ** (torch.arange(0, self.rotary_dim, 2, dtype=torch.float64) / self.rotary_dim))",
     "inv_freq = 1.0 / (base ** (torch.arange(0, self.rotary_dim // 2, dtype=torch.float64) / self.rotary_dim))",
     VL_ATTN, "rope",
     "The rotary frequencies use exponent i/d instead of 2i/d: the angle of each pair is computed from the wrong frequency spectrum (the slowest pair turns far too fast).",
     "inv_freq built from arange(0, d/2) / d instead of arange(0, d, 2) / d, as when the step is moved into the range's stop."),
    ("vl.cos_sin_cache_halves_swapped", VL,
     "cos, sin = cos_sin.chunk(2, dim=-1)",
     "sin, cos = cos_sin.chunk(2, dim=-1)",
     VL_ATTN, "rope",
     "The rotary table's cosine and sine halves are read the wrong way round, so every pair is transformed with sin where cos belongs and vice versa (not a rotation by the position's angle; position 0 is not the identity).",
     "The packed cos_sin_cache is split in the opposite order from the one _compute_cos_sin_cache concatenated."),
    ("vl.qkv_split_key_value_swapped", VL,
     "q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)",
     "q, v, k = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)",
     VL_ATTN, "attention-projections",
     "The key and value slices of the fused QKV projection are exchanged: the scores are computed against what should be the values and the output averages what should be the keys.",
     "Unpacking order of QKVParallelLinear's output mistyped as q, v, k."),
    ("vl.scale_from_hidden_size", VL,
     "self.scaling = self.head_dim**-0.5",
     "self.scaling = self.hidden_size**-0.5",
     VL_ATTN, "attention-scale",
     "The attention scores are scaled by one over the square root of the model width instead of the head width.",
     "The softmax scale computed from hidden_size, a copy-paste from code where head_dim equals the width."),
    ("vl.gqa_heads_tiled_not_grouped", VL,
     "k = k.repeat_interleave(self.num_queries_per_kv, dim=1)",
     "k = k.repeat(1, self.num_queries_per_kv, 1)",
     VL_ATTN, "grouped-query",
     "Grouped-query attention maps query heads to key heads by tiling (query head h reads key head h mod n_kv) while values are grouped (h // group): the keys each query head sees belong to another group than its values.",
     "repeat instead of repeat_interleave when expanding the key heads for the torch fallback path; only the keys."),
    ("vl.causal_bias_top_left", VL,
     "bias = torch.triu(bias, diagonal=seq_len - query_len + 1)",
     "bias = torch.triu(bias, diagonal=1)",
     VL_ATTN, "kv-cache",
     "The causal mask is aligned to the top left of the query-by-key matrix, not to the bottom right: when earlier tokens are cached, the new queries may only see the first keys instead of every key up to their own position.",
     "The causal bias built as for a prefill (triu(1)) in the code path that also serves decode steps with a context."),
    ("vl.padding_mask_inverted", VL,
     "attn_bias = attn_bias.masked_fill(~pad[None, :], torch.finfo(q.dtype).min)",
     "attn_bias = attn_bias.masked_fill(pad[None, :], torch.finfo(q.dtype).min)",
     VL_ATTN, "masks",
     "The key-padding mask is used with the wrong polarity: the real tokens are hidden and the padding is attended.",
     "The keep-mask is treated as a padding mask (True = pad), the classic polarity confusion between attention_mask conventions."),
    ("vl.slot_mapping_from_zero", VL,
     "slot_mapping = torch.cat([engine.block_tables[i, context_lens[i]:seq_lens[i]] for i in range(batch)])",
     "slot_mapping = torch.cat([engine.block_tables[i, :query_lens[i]] for i in range(batch)])",
     VL_ATTN, "kv-cache",
     "The new tokens' keys and values are written to the first slots of their sequence instead of after the cached ones: each step overwrites the beginning of the cache and the slots it then reads at the end hold stale zeros.",
     "The slot mapping computed as for a prefill (slots 0..n-1) in a step with a context."),
    ("vl.derived_positions_restart", VL,
     "positions = torch.stack([torch.arange(context_lens[i], seq_lens[i]) for i in range(batch)])",
     "positions = torch.stack([torch.arange(0, query_lens[i]) for i in range(batch)])",
     VL_ATTN, "positions",
     "When the caller gives no position ids, the new tokens are numbered from 0 in every call instead of from the number of tokens already cached.",
     "Positions derived from the query length alone, ignoring the context length, as in a prefill-only input preparer."),
    ("vl.every_layer_is_layer_zero", VL,
     "layer = self.layers[i]",
     "layer = self.layers[0]",
     VL_LM, "stack-wiring",
     "The model runs its first layer's weights at every depth (each with its own cache slot): the other layers' parameters are never used.",
     "An index slip in the layer loop (self.layers[0] for self.layers[i]), as after refactoring the loop for pipeline-parallel start/end layers."),
    ("vl.ffn_norm_uses_attention_norm", VL,
     "hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)",
     "hidden_states, residual = self.input_layernorm(hidden_states, residual)",
     VL_BLOCK, "parameters",
     "The norm before the feed-forward network uses the attention norm's weight; the feed-forward norm's weight is never used.",
     "Copy-paste of the attention half of the decoder layer into the MLP half without renaming the norm."),
    ("vl.rmsnorm_statistics_in_half", VL,
     "x = x.to(torch.float32) if orig_dtype in (torch.float16, torch.bfloat16) else x",
     "x = x",
     VL_BLOCK, "precision",
     "In 16-bit runs the RMS statistics (square, mean, reciprocal root) and the residual add are computed in 16 bits instead of in float32.",
     "The float32 upcast of forward_native dropped as 'redundant', so the mean of squares overflows or loses precision in float16/bfloat16."),
    ("vl.embedding_scaled_by_sqrt_d", VL,
     "return F.embedding(input_, self.weight)",
     "return F.embedding(input_, self.weight) * (self.weight.shape[1] ** 0.5)",
     VL_LM, "embeddings",
     "The token embeddings are multiplied by the square root of the model width, a scaling this architecture does not have.",
     "Gemma's normalizer (embeddings * sqrt(hidden_size)) carried into the shared VocabParallelEmbedding when porting another model."),
    # ---- joeynmt_encoder
    ("jn.scale_by_model_size", JN,
     "q = q / math.sqrt(self.head_size)",
     "q = q / math.sqrt(self.model_size)",
     J_ALL, "attention-scale",
     "The queries are scaled by one over the square root of the model width instead of the head width.",
     "math.sqrt(self.model_size) for math.sqrt(self.head_size): both attributes sit side by side in __init__."),
    ("jn.mask_polarity_inverted", JN,
     "scores = scores.masked_fill(~mask.unsqueeze(1), float(\"-inf\"))",
     "scores = scores.masked_fill(mask.unsqueeze(1), float(\"-inf\"))",
     J_ALL, "masks",
     "The mask is applied with the wrong polarity: the positions allowed to be attended are removed and the disallowed ones kept.",
     "The ~ dropped when porting from a codebase whose masks are True at padding."),
    ("jn.mask_fills_zero", JN,
     "scores = scores.masked_fill(~mask.unsqueeze(1), float(\"-inf\"))",
     "scores = scores.masked_fill(~mask.unsqueeze(1), 0.0)",
     J_ALL, "masks",
     "Masked scores are set to zero instead of minus infinity, so the masked keys still get attention weight (as much as a key with score 0).",
     "A multiplicative-mask habit (scores * mask) turned into masked_fill with 0."),
    ("jn.query_heads_not_transposed", JN,
     "q = q.view(batch_size, -1, num_heads, self.head_size).transpose(1, 2)",
     "q = q.view(batch_size, num_heads, -1, self.head_size)",
     J_ALL, "heads",
     "The queries are split into heads by a reshape straight to [batch, heads, length, head_size] without the transpose, so each 'head' mixes slices of several tokens and heads.",
     "view(B, H, -1, d) for view(B, -1, H, d).transpose(1, 2) on the query line only."),
    ("jn.value_uses_key_projection", JN,
     "v = self.v_layer(v)",
     "v = self.k_layer(v)",
     J_ALL, "attention-projections",
     "The values are projected with the key projection's weights; the value projection is never used.",
     "Copy-paste of the k line into the v line."),
    ("jn.softmax_over_queries", JN,
     "self.softmax = nn.Softmax(dim=-1)",
     "self.softmax = nn.Softmax(dim=-2)",
     J_ALL, "softmax",
     "The attention softmax normalises over the queries instead of over the keys.",
     "Softmax(dim=-2), from code whose scores are laid out [keys, queries]."),
    ("jn.ffn_residual_from_normed", JN,
     "x = self.pwff_layer(x) + self.alpha * residual",
     "x = self.pwff_layer(x) + self.alpha * x",
     J_ALL, "residuals",
     "The feed-forward sublayer's skip connection adds the normalised input instead of the un-normalised stream.",
     "After the pre-norm reassigns x, the residual term reads x instead of the saved residual."),
    ("jn.attention_reads_unnormed_input", JN,
     "x, _ = self.src_src_att(x, x, x, mask)",
     "x, _ = self.src_src_att(residual, residual, residual, mask)",
     J_ALL, "norm-placement",
     "The attention sublayer reads the un-normalised input: its pre-norm is computed but bypassed.",
     "Arguments of the attention call renamed to the saved residual during a refactor."),
    ("jn.relu_maps_to_silu", JN,
     "activation_fnc = {\"relu\": nn.ReLU, \"gelu\": nn.GELU, \"tanh\": nn.Tanh, \"swish\": nn.SiLU}",
     "activation_fnc = {\"relu\": nn.SiLU, \"gelu\": nn.GELU, \"tanh\": nn.Tanh, \"swish\": nn.SiLU}",
     J_ALL, "activation",
     "The feed-forward network's hidden activation is SiLU (swish) where ReLU is configured.",
     "The activation table's 'relu' entry mapped to the swish class by a copy-paste slip."),
    ("jn.final_norm_dropped", JN,
     "self.layer_norm = (nn.LayerNorm(hidden_size, eps=1e-6) if kwargs.get(\"layer_norm\", \"post\") == \"pre\" else None)",
     "self.layer_norm = (nn.LayerNorm(hidden_size, eps=1e-6) if kwargs.get(\"layer_norm\", \"post\") == \"post\" else None)",
     J_STACK, "stack-wiring",
     "The pre-norm encoder stack has no final layer norm: its output is the last layer's un-normalised residual stream.",
     "The condition for the final norm inverted, so it is built for post-norm stacks (where it is redundant) and left out for pre-norm ones."),
    ("jn.layers_read_embeddings", JN,
     "x = layer(x, mask)",
     "x = layer(embed_src, mask)",
     J_STACK, "stack-wiring",
     "Every layer of the stack reads the stack's input instead of the previous layer's output, so only the last layer's work reaches the output.",
     "The loop variable mistyped as the function's input argument."),
    ("jn.ffn_norm_default_eps", JN,
     "self.layer_norm = nn.LayerNorm(input_size, eps=1e-6)",
     "self.layer_norm = nn.LayerNorm(input_size)",
     J_ALL, "norms",
     "The feed-forward sublayer's layer norm uses epsilon 1e-5 (torch's default) instead of the 1e-6 the rest of the model uses.",
     "eps left at the default on one of the LayerNorms (JoeyNMT 1.x had no eps), so converted 2.x checkpoints run with a different epsilon in one norm."),
    ("jn.subsequent_mask_upper", JN,
     "return torch.tril(ones, out=ones).unsqueeze(0)",
     "return torch.triu(ones, out=ones).unsqueeze(0)",
     J_ALL, "masks",
     "The causal mask lets each position see itself and the future instead of itself and the past.",
     "triu for tril in the subsequent-mask helper."),
    ("jn.output_layer_without_bias", JN,
     "self.output_layer = nn.Linear(size, size)",
     "self.output_layer = nn.Linear(size, size, bias=False)",
     J_ALL, "parameters",
     "The attention output projection is built without its bias although the model has one; the checkpoint's bias has nowhere to go.",
     "bias=False on the output projection, as in bias-free variants, while the converted checkpoint carries output_layer.bias."),
    # ---- blip_vit
    ("bv.qkv_read_head_major", BV,
     "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)",
     "qkv = self.qkv(x).reshape(B, N, self.num_heads, 3, C // self.num_heads).permute(3, 0, 2, 1, 4)",
     B_LAYER, "attention-projections",
     "The fused qkv projection's output is read as per-head interleaved [head, (q, k, v), d] while the weights are stacked [q | k | v]: queries, keys and values are each assembled from slices of all three projections.",
     "Megatron's per-head qkv layout assumed for a timm-layout checkpoint."),
    ("bv.scale_from_dim", BV,
     "self.scale = qk_scale or head_dim ** -0.5",
     "self.scale = qk_scale or dim ** -0.5",
     B_LAYER, "attention-scale",
     "The attention scale is one over the square root of the model width instead of the head width.",
     "The early timm scale the NOTE in the code warns about (dim ** -0.5), brought back when syncing with an old fork."),
    ("bv.softmax_over_queries", BV,
     "attn = attn.softmax(dim=-1)",
     "attn = attn.softmax(dim=-2)",
     B_LAYER, "softmax",
     "The attention softmax normalises over the queries instead of over the keys.",
     "softmax(dim=-2) after transposing the scores in an attention-rollout experiment."),
    ("bv.heads_merged_without_transpose", BV,
     "x = (attn @ v).transpose(1, 2).reshape(B, N, C)",
     "x = (attn @ v).reshape(B, N, C)",
     B_LAYER, "heads",
     "The heads are merged by reshaping [B, heads, N, d] straight to [B, N, C] without moving the head axis next to the channels, so each token's output row is built from several tokens of one head.",
     "The transpose(1, 2) before reshape dropped."),
    ("bv.attn_residual_from_normed", BV,
     "x = x + self.drop_path(self.attn(self.norm1(x), register_hook=register_hook))",
     "x = self.norm1(x) + self.drop_path(self.attn(self.norm1(x), register_hook=register_hook))",
     B_LAYER, "residuals",
     "The attention sublayer's skip connection adds the normalised input instead of the raw residual stream.",
     "The residual term written as norm1(x), as when inlining a 'y = norm1(x)' variable."),
    ("bv.mlp_uses_norm1", BV,
     "x = x + self.drop_path(self.mlp(self.norm2(x)))",
     "x = x + self.drop_path(self.mlp(self.norm1(x)))",
     B_LAYER, "parameters",
     "The feed-forward sublayer is normalised with the attention sublayer's norm parameters; norm2 is never used.",
     "norm1 for norm2 in the copied line."),
    ("bv.gelu_tanh", BV,
     "self.act = act_layer()",
     "self.act = nn.GELU(approximate='tanh')",
     B_LAYER, "activation",
     "The MLP uses the tanh approximation of GELU instead of the exact erf GELU.",
     "The tanh-approximate GELU hard-coded when porting to a framework whose default GELU is the approximate one."),
    ("bv.vit_norm_default_eps", BV,
     "norm_layer = norm_layer or partial(nn.LayerNorm, eps=1e-6)",
     "norm_layer = norm_layer or nn.LayerNorm",
     B_VIT, "norms",
     "Every layer norm of the vision transformer uses epsilon 1e-5 (torch's default) instead of 1e-6.",
     "The partial with eps=1e-6 replaced by plain nn.LayerNorm."),
    ("bv.pos_embed_cls_row_broadcast", BV,
     "x = x + self.pos_embed[:,:x.size(1),:]",
     "x = x + self.pos_embed[:,:1,:]",
     B_VIT, "positions",
     "Every token gets the class token's position embedding (row 0), so the patches lose their positions and the other rows of the table are unused.",
     "A slice meant for the class token alone (as in interpolate_pos_embed's extra tokens) used for all tokens."),
    ("bv.cls_token_appended", BV,
     "x = torch.cat((cls_tokens, x), dim=1)",
     "x = torch.cat((x, cls_tokens), dim=1)",
     B_VIT, "cls-pooling",
     "The class token is appended after the patches instead of prepended: the position embeddings are shifted by one against the tokens and the classifier reads the first patch instead of the class token.",
     "Concatenation order reversed (as for register or distillation tokens appended at the end)."),
    ("bv.mean_pooling", BV,
     "return self.head(image_embeds[:, 0, :])",
     "return self.head(image_embeds.mean(dim=1))",
     B_VIT, "cls-pooling",
     "The classifier reads the mean of all tokens (class token included) instead of the class token.",
     "global_pool='avg' style pooling on a model trained with the [CLS] embedding."),
    ("bv.patches_column_major", BV,
     "x = x.flatten(2).transpose(1, 2)  # BCHW -> BNC",
     "x = x.transpose(2, 3).flatten(2).transpose(1, 2)  # BCHW -> BNC",
     B_PATCH, "patchify",
     "The patches are put in sequence column by column instead of row by row, so each patch gets another patch's position embedding.",
     "H and W swapped when flattening the patch grid (an NHWC/NCHW confusion)."),
    ("bv.patch_view_without_transpose", BV,
     "x = x.flatten(2).transpose(1, 2)  # BCHW -> BNC",
     "x = x.view(B, self.num_patches, -1)  # BCHW -> BNC",
     B_PATCH, "patchify",
     "The conv output [B, C, H', W'] is reinterpreted as [B, N, C] by a view, without moving the channel axis: each token's vector is a run of one channel's values over neighbouring patches.",
     "view instead of flatten + transpose, as in ports from channels-last layouts."),
    ("bv.last_block_skipped", BV,
     "for i,blk in enumerate(self.blocks):",
     "for i,blk in enumerate(self.blocks[:-1]):",
     B_VIT, "stack-wiring",
     "The last transformer block is never run: the final norm reads the output of the second-to-last block.",
     "A slice from feature-extraction code (all blocks but the last) left in the classification path."),
    ("bv.blocks_without_qkv_bias", BV,
     "dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale,",
     "dim=embed_dim, num_heads=num_heads, mlp_ratio=mlp_ratio, qk_scale=qk_scale,",
     B_VIT, "parameters",
     "The blocks are built without the qkv bias the model has (Block's default qkv_bias=False), so the query, key and value biases are missing.",
     "qkv_bias not forwarded from VisionTransformer to Block, whose default differs."),
]

# (id, impl, original (stripped), replacement (stripped), components, why it stays correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.vl.silu_and_mul_explicit_end", VL,
     "return F.silu(x[..., :d]) * x[..., d:]",
     "return F.silu(x[..., :d]) * x[..., d:2 * d]",
     VL_FFN, "x has exactly 2d channels, so x[..., d:2 * d] is x[..., d:]."),
    ("control.vl.scaling_as_reciprocal_sqrt", VL,
     "self.scaling = self.head_dim**-0.5",
     "self.scaling = 1.0 / math.sqrt(self.head_dim)",
     VL_ATTN, "The same number (head_dim ** -0.5 and 1 / sqrt(head_dim) agree to the last bit or one ulp)."),
    ("control.vl.kv_heads_expand_reshape", VL,
     "k = k.repeat_interleave(self.num_queries_per_kv, dim=1)",
     "k = k[:, :, None, :].expand(-1, -1, self.num_queries_per_kv, -1).reshape(k.shape[0], -1, k.shape[-1])",
     VL_ATTN, "expand on a new axis after the head axis and flatten: each key head repeated group times in place, what repeat_interleave does."),
    ("control.jn.scale_as_power", JN,
     "q = q / math.sqrt(self.head_size)",
     "q = q * self.head_size ** -0.5",
     J_ALL, "Dividing by sqrt(d) and multiplying by d ** -0.5 are the same scale."),
    ("control.jn.scores_with_matmul_operator", JN,
     "scores = torch.matmul(q, k.transpose(2, 3))",
     "scores = q @ k.transpose(-1, -2)",
     J_ALL, "On 4-D tensors axes (2, 3) are (-2, -1), and @ is torch.matmul."),
    ("control.bv.patches_channels_last_reshape", BV,
     "x = x.flatten(2).transpose(1, 2)  # BCHW -> BNC",
     "x = x.permute(0, 2, 3, 1).reshape(B, -1, x.shape[1])  # BCHW -> BNC",
     B_PATCH, "permute to [B, H', W', C] and merge H', W' row-major: the same token order and vectors as flatten(2).transpose(1, 2)."),
    ("control.bv.softmax_last_axis_by_ndim", BV,
     "attn = attn.softmax(dim=-1)",
     "attn = torch.softmax(attn, dim=attn.ndim - 1)",
     B_LAYER, "The last axis named by its index: the same softmax over the keys."),
    ("control.bv.cls_token_repeat", BV,
     "cls_tokens = self.cls_token.expand(B, -1, -1)  # stole cls_tokens impl from Phil Wang, thanks",
     "cls_tokens = self.cls_token.repeat(B, 1, 1)  # stole cls_tokens impl from Phil Wang, thanks",
     B_VIT, "repeat copies the class token B times, expand views it B times: the same values."),
]

# Phase 2 only: bug id -> (expected codes, class without code).
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, original: str) -> tuple[int, str]:
    """The 1-based line number and the full (indented) text of the one line whose stripped
    text is ``original``."""
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == original]
    if len(hits) != 1:
        raise ValueError(f"{impl}.py: {original!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line


def _row(rid: str, impl: str, original: str, replacement: str) -> dict[str, Any]:
    number, line = _locate(impl, original)
    indent = line[: len(line) - len(line.lstrip())]
    return {"id": rid, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number, "original": line, "replacement": indent + replacement}


def main() -> None:
    bugs = []
    for rid, impl, original, replacement, components, family, klass, description in BUGS:
        codes, without = PHASE_2.get(rid, ([], ""))
        bugs.append({**_row(rid, impl, original, replacement), "components": components, "family": family, "class": klass, "description": description, "public_report": PUBLIC.get(rid, ""), "expected_codes": codes, "class_without_code": without})
    controls = [{**_row(rid, impl, original, replacement), "components": components, "why_correct": why} for rid, impl, original, replacement, components, why in CONTROLS]
    for name, rows in (("bugs.json", bugs), ("controls.json", controls)):
        (HERE / name).write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
