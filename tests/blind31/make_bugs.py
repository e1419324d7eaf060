# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the thirty-first blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind31/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind31"

IL = "internlm_decoder"
BP = "bertpytorch_encoder"
DT = "deit_vit"
IL_NORM = ["rms_norm", "decoder_block", "causal_lm"]
IL_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
IL_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
IL_BLOCK = ["decoder_block", "causal_lm"]
IL_LM = ["causal_lm"]
B_ALL = ["encoder_layer", "encoder"]
B_STACK = ["encoder"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_MASK = ["encoder_layer", "encoder"]
V_STACK = ["encoder", "vit"]
V_VIT = ["vit"]

INV_FREQ_FACTOR_TWO = "https://github.com/hkproj/pytorch-llama/issues/3"
POSITIONS_IGNORE_PAST = "https://github.com/huggingface/transformers/pull/15751"
SPLIT_WITHOUT_TRANSPOSE = "https://github.com/reczoo/FuxiCTR/issues/30"
MERGE_WITHOUT_TRANSPOSE = "https://github.com/jadore801120/attention-is-all-you-need-pytorch/issues/7"
SUBLAYER_NORM_PLACEMENT = "https://github.com/harvardnlp/annotated-transformer/issues/13"
DROPOUT_TRAINING_TRUE = "https://github.com/BogiHsu/Tacotron2-PyTorch/issues/8"
LAYER_NORM_EPS_DEFAULT = "https://github.com/keras-team/keras-hub/issues/642"
MODULELIST_TIMES_N = "https://github.com/zalandoresearch/pytorch-vq-vae/issues/2"
CHANNEL_ORDER = "https://github.com/open-mmlab/mmdetection/pull/11624"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- internlm_decoder
    ("il.inv_freq_without_step", IL,
     "inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).double().to(device) / dim))",
     "inv_freq = 1.0 / (base ** (torch.arange(0, dim // 2).double().to(device) / dim))",
     IL_ATTN, "rope",
     "The rotary frequencies use exponent i/d instead of 2i/d, so every channel pair after the first turns faster than it should (theta^(-i/d)): the geometric spread of wavelengths is halved.",
     "Porting the inverse-frequency line from a version that steps by 2, the step is dropped and the length fixed with dim // 2 instead, losing the factor 2 in the exponent.",
     INV_FREQ_FACTOR_TWO),
    ("il.positions_restart_after_cache", IL,
     "past_key_values_length, seq_length + past_key_values_length, dtype=torch.long, device=device",
     "0, seq_length, dtype=torch.long, device=device",
     IL_LM, "positions",
     "When the model builds its own position ids, the tokens of a cached step are numbered from 0 again instead of continuing after the cached prefix, so their rotary angles are those of the first positions.",
     "A refactor builds position_ids as arange(seq_length), forgetting the past length offset that only matters with a cache.",
     POSITIONS_IGNORE_PAST),
    ("il.cache_keys_appended_before_past", IL,
     "key_states = torch.cat([past_key_value[0], key_states], dim=2)",
     "key_states = torch.cat([key_states, past_key_value[0]], dim=2)",
     IL_ATTN, "kv cache",
     "In a cached step the new keys are put in front of the cached keys while the values are appended after the cached values, so each key is paired with another position's value (and the mask's column order no longer matches the keys).",
     "When the key concatenation is retyped, the order of the two operands is swapped for the keys only.",
     ""),
    ("il.cached_causal_block_left_aligned", IL,
     "mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)",
     "mask = torch.cat([mask, torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device)], dim=-1)",
     IL_ATTN, "kv cache",
     "With a cache and more than one new token, the causal triangle is laid over the first (cached) key columns and the new tokens' columns are all left open, so a new token sees the later new tokens of its chunk.",
     "The zeros for the cached prefix are concatenated after the square causal block instead of before it: the causal mask is aligned to the top-left of the key axis instead of the bottom-right.",
     ""),
    ("il.causal_mask_hides_diagonal", IL,
     "mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)",
     "mask.masked_fill_(mask_cond < mask_cond.view(mask.size(-1), 1), 0)",
     IL_ATTN, "masks",
     "The causal mask opens only strictly earlier keys: each token cannot attend to itself, and the first token (no allowed key) attends uniformly to everything masked.",
     "The +1 that turns '<' into '<=' is dropped when the comparison is simplified, so the diagonal of the causal mask is masked too (off by one).",
     ""),
    ("il.rms_eps_outside_sqrt", IL,
     "hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)",
     "hidden_states = hidden_states / (torch.sqrt(variance) + self.variance_epsilon)",
     IL_NORM, "norms",
     "RMSNorm divides by sqrt(mean(x^2)) + eps instead of sqrt(mean(x^2) + eps): eps is added outside the square root.",
     "rsqrt(var + eps) rewritten as a division by the root plus eps, as some norms (the Annotated Transformer's) write it; the epsilon moves outside the square root.",
     ""),
    ("il.rms_variance_about_mean", IL,
     "variance = hidden_states.to(torch.promote_types(hidden_states.dtype, torch.float32)).pow(2).mean(-1, keepdim=True)",
     "variance = hidden_states.to(torch.promote_types(hidden_states.dtype, torch.float32)).var(-1, keepdim=True, unbiased=False)",
     IL_NORM, "norms",
     "RMSNorm's denominator is the variance about the mean instead of the mean of squares, so the scale depends on the mean of the features while the mean itself is not subtracted.",
     "Copying the statistic from a LayerNorm, the mean square is replaced by the (biased) variance: the RMS norm uses a centred second moment without centring the input.",
     ""),
    ("il.swiglu_activation_after_product", IL,
     "return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))",
     "return self.down_proj(self.act_fn(self.gate_proj(x) * self.up_proj(x)))",
     IL_FFN, "feed-forward",
     "The SiLU is applied to the product of the gate and up projections instead of to the gate projection alone: down(silu(g*u)) instead of down(silu(g)*u).",
     "A misplaced parenthesis moves the product inside the activation of the gated feed-forward.",
     ""),
    ("il.gate_activation_gelu", IL,
     "ACT2FN = {\"silu\": nn.SiLU(), \"swish\": nn.SiLU()}",
     "ACT2FN = {\"silu\": nn.GELU(), \"swish\": nn.SiLU()}",
     IL_FFN, "activation",
     "The gated feed-forward's gate uses GELU instead of SiLU (a GeGLU where a SwiGLU is declared).",
     "The activation table maps 'silu' to the wrong module, as when it is copied from a GeGLU model's table.",
     ""),
    ("il.scale_by_head_dim", IL,
     "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)",
     "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / self.head_dim",
     IL_ATTN, "attention scale",
     "Attention scores are divided by d_head instead of sqrt(d_head) (the muP-style 1/d scale), so the softmax is flatter than it should be.",
     "The square root is dropped from the scale, as in a port from a muP-parametrised model.",
     ""),
    ("il.query_heads_split_without_transpose", IL,
     "query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)",
     "query_states = self.q_proj(hidden_states).view(bsz, self.num_heads, q_len, self.head_dim)",
     IL_ATTN, "head split/merge",
     "The query projection is viewed directly as [batch, heads, seq, head_dim] without the transpose, so each 'head' of the queries holds slices of several positions; keys and values are split correctly.",
     "The split of the queries is rewritten as a single view to the target shape, skipping the transpose, while the key and value lines stay as they were.",
     SPLIT_WITHOUT_TRANSPOSE),
    ("il.mlp_reads_unnormalised_stream", IL,
     "hidden_states = self.mlp(hidden_states)",
     "hidden_states = self.mlp(residual)",
     IL_BLOCK, "norm placement",
     "The MLP is applied to the residual stream instead of to its post_attention_layernorm output: the pre-norm of the feed-forward sub-layer is skipped and its weight never used.",
     "When the residual bookkeeping is refactored, the MLP is given the residual variable instead of the normalised hidden states.",
     ""),
    ("il.extra_residual_around_layer", IL,
     "hidden_states = layer_outputs[0]",
     "hidden_states = layer_outputs[0] + hidden_states",
     IL_LM, "stack wiring",
     "The model adds each decoder layer's input to its output again, although the layer already contains its residual connections: the input of every layer is counted twice.",
     "A stack loop written for layers that return only their branch output (no internal residual) is used with layers that already add their residual.",
     ""),
    ("il.rope_table_float32", IL,
     "self.register_buffer(\"inv_freq\", inv_freq, persistent=False)",
     "self.register_buffer(\"inv_freq\", inv_freq.float(), persistent=False)",
     IL_ATTN, "precision",
     "The rotary inverse frequencies (and so the cos/sin table) are stored in float32 whatever the model's dtype: a float64 model gets rotary angles accurate only to single precision.",
     "A cast to float32 added for memory or kernel compatibility makes the rotary table a float32 island in a float64 model.",
     ""),
    ("il.query_rotated_backwards", IL,
     "q_embed = (q * cos) + (rotate_half(q) * sin)",
     "q_embed = (q * cos) - (rotate_half(q) * sin)",
     IL_ATTN, "rope",
     "Queries are rotated by minus their angle while keys are rotated by plus theirs, so the score depends on the sum of the two positions instead of their difference.",
     "A sign slip in the query line of apply_rotary_pos_emb (the key line stays correct): the rotation of the queries is inverted.",
     ""),
    # ---- bertpytorch_encoder
    ("bp.layer_norm_eps_inside_sqrt", BP,
     "return self.a_2 * (x - mean) / (std + self.eps) + self.b_2",
     "return self.a_2 * (x - mean) / torch.sqrt(std ** 2 + self.eps) + self.b_2",
     B_ALL, "norms",
     "The layer norm divides by sqrt(std^2 + eps) instead of std + eps: the epsilon moves inside the square root, contrary to the model's own (Annotated-Transformer) norm.",
     "A 'cleanup' rewrites the norm the way nn.LayerNorm places eps, changing where epsilon enters.",
     ""),
    ("bp.layer_norm_not_centred", BP,
     "mean = x.mean(-1, keepdim=True)",
     "mean = 0",
     B_ALL, "norms",
     "The layer norm no longer subtracts the mean (the mean is taken as 0) while still dividing by the standard deviation about the mean.",
     "Half of a refactor towards RMS-style normalisation: the centring is removed but the std is kept.",
     ""),
    ("bp.sublayer_post_norm", BP,
     "return x + self.dropout(sublayer(self.norm(x)))",
     "return self.norm(x + self.dropout(sublayer(x)))",
     B_ALL, "norm placement",
     "Each sub-layer connection normalises after the residual addition (post-LN) instead of before the sub-layer (pre-LN), as the docstring ('a residual connection followed by a layer norm') suggests.",
     "Following the paper's formula LayerNorm(x + Sublayer(x)) instead of the code's pre-norm, the norm moves from the branch input to after the residual sum.",
     SUBLAYER_NORM_PLACEMENT),
    ("bp.gelu_sigmoid_approximation", BP,
     "return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))",
     "return x * torch.sigmoid(1.702 * x)",
     B_ALL, "activation",
     "The feed-forward activation is the sigmoid approximation of GELU (x*sigmoid(1.702x), 'quick GELU') instead of the tanh approximation.",
     "The custom GELU is replaced by the faster approximation used by CLIP, which is a different function.",
     ""),
    ("bp.padding_mask_over_queries", BP,
     "mask = pad_mask.unsqueeze(1).repeat(1, x.size(1), 1).unsqueeze(1)",
     "mask = pad_mask.unsqueeze(2).repeat(1, 1, x.size(1)).unsqueeze(1)",
     B_STACK, "masks",
     "The [B, L, L] mask is built with padding along the query axis instead of the key axis: real tokens still attend to padding keys, and padded query rows are fully masked.",
     "Unsqueezing the wrong dimension when the mask is repeated over the sequence: the padding mask ends up indexed by query instead of key.",
     ""),
    ("bp.mask_fill_polarity", BP,
     "scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)",
     "scores = scores.masked_fill(mask == 1, torch.finfo(scores.dtype).min)",
     B_ALL, "masks",
     "Scores are masked where the mask marks a real token instead of where it marks padding: tokens attend only to padding (or uniformly when there is none).",
     "The mask is treated as a padding mask (True = pad) although it is a keep-mask (True = token): the polarity is inverted.",
     ""),
    ("bp.scale_by_sequence_length", BP,
     "/ math.sqrt(query.size(-1))",
     "/ math.sqrt(query.size(-2))",
     B_ALL, "attention scale",
     "Scores are divided by the square root of the sequence length (size(-2)) instead of the head dimension (size(-1)).",
     "Wrong axis index in the scale: the query's sequence length is read instead of its head size.",
     ""),
    ("bp.softmax_over_heads", BP,
     "p_attn = F.softmax(scores, dim=-1)",
     "p_attn = F.softmax(scores, dim=1)",
     B_ALL, "softmax",
     "The attention softmax normalises over the head axis (dim 1 of [B, H, Lq, Lk]) instead of over the keys.",
     "dim=1 written for the key axis, as if the scores were [B, Lq, Lk] without a head axis.",
     ""),
    ("bp.heads_merged_without_transpose", BP,
     "x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)",
     "x = x.contiguous().view(batch_size, -1, self.h * self.d_k)",
     B_ALL, "head split/merge",
     "The per-head outputs [B, H, L, d_k] are viewed as [B, L, H*d_k] without moving the head axis back, so each output row mixes several positions of one head.",
     "The transpose before the 'concat' view is dropped; the view still succeeds because the sizes match.",
     MERGE_WITHOUT_TRANSPOSE),
    ("bp.heads_split_without_transpose", BP,
     "query, key, value = [l(x).view(batch_size, -1, self.h, self.d_k).transpose(1, 2)",
     "query, key, value = [l(x).view(batch_size, self.h, -1, self.d_k)",
     B_ALL, "head split/merge",
     "Queries, keys and values are viewed directly as [B, h, L, d_k] without the transpose, so each head holds a contiguous slab of positions and channels instead of one channel group at every position.",
     "The 'simplification' proposed in the Annotated Transformer's issue tracker: view to the target shape instead of view + transpose.",
     SPLIT_WITHOUT_TRANSPOSE),
    ("bp.first_block_only", BP,
     "for transformer in self.transformer_blocks:",
     "for transformer in self.transformer_blocks[:1]:",
     B_STACK, "stack wiring",
     "The encoder runs only its first transformer block; the others are built and loaded but never applied.",
     "A slice left over from debugging (or from a truncated-depth experiment) in the loop over the blocks.",
     ""),
    ("bp.ffn_dropout_functional", BP,
     "return self.w_2(self.dropout(self.activation(self.w_1(x))))",
     "return self.w_2(F.dropout(self.activation(self.w_1(x)), 0.1))",
     B_ALL, "dropout",
     "The feed-forward dropout is the functional F.dropout with its default training=True, so it stays active in eval mode.",
     "Replacing the Dropout module by F.dropout without passing training=self.training.",
     DROPOUT_TRAINING_TRUE),
    ("bp.keys_values_from_query_projection", BP,
     "for l, x in zip(self.linear_layers, (query, key, value))]",
     "for l, x in zip([self.linear_layers[0]] * 3, (query, key, value))]",
     B_ALL, "parameters",
     "The query projection is applied to produce the queries, the keys and the values; the key and value linears are never used.",
     "A refactor meant for a fused projection reuses the first linear three times.",
     ""),
    ("bp.activation_after_output_projection", BP,
     "return self.w_2(self.dropout(self.activation(self.w_1(x))))",
     "return self.activation(self.w_2(self.dropout(self.w_1(x))))",
     B_ALL, "feed-forward",
     "The GELU is applied after the second linear instead of between the two: the feed-forward is linear-linear-GELU.",
     "The activation call is moved to the wrong place when the line is reformatted.",
     ""),
    ("bp.residual_dropped", BP,
     "return x + self.dropout(sublayer(self.norm(x)))",
     "return self.dropout(sublayer(self.norm(x)))",
     B_ALL, "residuals",
     "Each sub-layer connection returns only the branch output: the residual (skip) connection is gone in both sub-layers.",
     "The x + of the residual connection is dropped from the SublayerConnection.",
     ""),
    # ---- deit_vit
    ("dt.patches_column_major", DT,
     "x = self.projection(pixel_values).flatten(2).transpose(1, 2)",
     "x = self.projection(pixel_values).transpose(2, 3).flatten(2).transpose(1, 2)",
     V_PATCH, "patchify",
     "Patches are enumerated column by column instead of row by row, so patch tokens come out in transposed order and each gets another patch's position embedding.",
     "An extra transpose of the (H', W') grid, as in a port from a framework with a width-major layout.",
     ""),
    ("dt.channels_reversed", DT,
     "embeddings = self.patch_embeddings(pixel_values)",
     "embeddings = self.patch_embeddings(pixel_values.flip(1))",
     V_VIT, "patchify",
     "The image's channels are reversed (RGB read as BGR) before the patch projection.",
     "A BGR/RGB conversion left in the model's embedding from an OpenCV pipeline.",
     CHANNEL_ORDER),
    ("dt.classifier_reads_first_patch", DT,
     "logits = self.classifier(sequence_output[:, 0, :])",
     "logits = self.classifier(sequence_output[:, 1, :])",
     V_VIT, "pooling",
     "The classifier reads token 1 (the first patch) instead of token 0 (the class token).",
     "Copied from the distilled DeiT head, which reads index 1 for its distillation token; in the class-token-only model index 1 is a patch.",
     ""),
    ("dt.mean_pooling_of_patches", DT,
     "logits = self.classifier(sequence_output[:, 0, :])",
     "logits = self.classifier(sequence_output[:, 1:, :].mean(dim=1))",
     V_VIT, "pooling",
     "The classifier reads the mean of the patch tokens instead of the class token.",
     "Mean pooling of the patch tokens (as BEiT/DINOv2 heads with use_mean_pooling do) used where the checkpoint's head was trained on the class token.",
     ""),
    ("dt.ffn_residual_from_attention_branch", DT,
     "layer_output = self.output(layer_output, hidden_states)",
     "layer_output = self.output(layer_output, attention_output)",
     V_LAYER, "residuals",
     "The second residual adds the attention branch output instead of the running stream: the layer's input (and the first residual sum) is lost from the output.",
     "The second argument of DeiTOutput (the tensor to add back) is the attention output instead of the post-attention hidden states.",
     ""),
    ("dt.ffn_normalises_attention_branch", DT,
     "layer_output = self.layernorm_after(hidden_states)",
     "layer_output = self.layernorm_after(attention_output)",
     V_LAYER, "stack wiring",
     "The feed-forward sub-layer reads the normalised attention branch output instead of the normalised residual stream (the residual sum is still used for the skip).",
     "The wrong local variable is handed to layernorm_after: the feed-forward input comes from the branch instead of the sum.",
     ""),
    ("dt.keys_heads_split_without_transpose", DT,
     "return x.permute(0, 2, 1, 3)",
     "return x.view(x.size(0), self.num_attention_heads, -1, self.attention_head_size)",
     V_LAYER, "head split/merge",
     "transpose_for_scores views [B, L, H, d] directly as [B, H, L, d] instead of permuting, so each head holds a block of positions and channels for queries, keys and values alike.",
     "The permute is replaced by a view to the same shape, which reinterprets the memory instead of moving the axis.",
     ""),
    ("dt.heads_merged_channel_major", DT,
     "context_layer = context_layer.permute(0, 2, 1, 3).contiguous()",
     "context_layer = context_layer.permute(0, 2, 3, 1).contiguous()",
     V_LAYER, "head split/merge",
     "The heads are merged with the head axis innermost ([B, L, d, H] flattened), so the output projection sees the channels in the wrong order.",
     "A wrong permutation order when the context layer is put back: head and head-dimension axes are swapped before the flatten.",
     ""),
    ("dt.scale_by_head_count", DT,
     "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
     "attention_scores = attention_scores / math.sqrt(self.num_attention_heads)",
     V_LAYER, "attention scale",
     "Scores are divided by sqrt(number of heads) instead of sqrt(head size).",
     "The wrong attribute is read for the scale, its neighbour in __init__.",
     ""),
    ("dt.layernorm_before_default_eps", DT,
     "self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)",
     "self.layernorm_before = nn.LayerNorm(config.hidden_size)",
     V_LAYER, "norms",
     "The attention pre-norm uses nn.LayerNorm's default eps 1e-5 instead of the configured 1e-12 (the other norms keep it).",
     "The eps argument is dropped from one LayerNorm construction, leaving PyTorch's default.",
     LAYER_NORM_EPS_DEFAULT),
    ("dt.layers_share_one_module", DT,
     "self.layer = nn.ModuleList([DeiTLayer(config) for _ in range(config.num_hidden_layers)])",
     "self.layer = nn.ModuleList([DeiTLayer(config)] * config.num_hidden_layers)",
     V_STACK, "parameters",
     "The encoder holds one DeiTLayer repeated N times (list multiplication): every layer shares the same parameters, so loading layer i's weights overwrites the others and the last ones loaded are used everywhere.",
     "List multiplication instead of a comprehension: N references to one module instead of N modules.",
     MODULELIST_TIMES_N),
    ("dt.gelu_tanh", DT,
     "ACT2FN = {\"gelu\": GELUActivation}",
     "ACT2FN = {\"gelu\": lambda: nn.GELU(approximate=\"tanh\")}",
     V_LAYER, "activation",
     "The feed-forward activation is the tanh approximation of GELU instead of the exact (erf) GELU.",
     "'gelu' mapped to the 'gelu_new'/'gelu_pytorch_tanh' implementation in the activation table.",
     ""),
    ("dt.softmax_in_float32", DT,
     "attention_probs = nn.functional.softmax(attention_scores, dim=-1)",
     "attention_probs = nn.functional.softmax(attention_scores.float(), dim=-1).type_as(attention_scores)",
     V_LAYER, "precision",
     "The attention softmax is computed in float32 whatever the input dtype: a float64 model gets attention weights rounded to single precision (and a float64 mask fill, cast to float32, overflows to -inf).",
     "A half-precision safety upcast written as .float() instead of promoting to at least float32.",
     ""),
    ("dt.attention_mask_not_passed", DT,
     "attention_mask=attention_mask,",
     "attention_mask=None,",
     V_MASK, "masks",
     "DeiTLayer does not pass the attention mask to its attention: padded keys are attended to.",
     "The keyword is left at None when the mask argument is threaded through the layers.",
     ""),
    ("dt.queries_from_key_projection", DT,
     "query_layer = self.transpose_for_scores(mixed_query_layer)",
     "query_layer = self.transpose_for_scores(self.key(hidden_states))",
     V_LAYER, "parameters",
     "The queries are computed with the key projection (the query linear's output is discarded), so scores are k_i . k_j.",
     "Copy-paste of the key line for the query line when the projections are rearranged.",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why it stays correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.il_rotate_half_neg", IL,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.cat((x2.neg(), x1), dim=-1)",
     IL_ATTN,
     "x2.neg() is -x2."),
    ("control.il_scale_as_power", IL,
     "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)",
     "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.head_dim ** -0.5",
     IL_ATTN,
     "Multiplying by d^-0.5 is dividing by sqrt(d) (to rounding)."),
    ("control.il_rms_division", IL,
     "hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)",
     "hidden_states = hidden_states / torch.sqrt(variance + self.variance_epsilon)",
     IL_NORM,
     "Dividing by the square root is multiplying by rsqrt, eps still inside the root."),
    ("control.bp_softmax_method", BP,
     "p_attn = F.softmax(scores, dim=-1)",
     "p_attn = scores.softmax(dim=-1)",
     B_ALL,
     "The tensor method is the same softmax over the same axis."),
    ("control.bp_mean_by_sum", BP,
     "mean = x.mean(-1, keepdim=True)",
     "mean = x.sum(-1, keepdim=True) / x.size(-1)",
     B_ALL,
     "The sum over the features divided by their number is the mean."),
    ("control.bp_merge_by_reshape", BP,
     "x = x.transpose(1, 2).contiguous().view(batch_size, -1, self.h * self.d_k)",
     "x = x.transpose(1, 2).reshape(batch_size, -1, self.h * self.d_k)",
     B_ALL,
     "reshape copies when needed; same values as contiguous().view()."),
    ("control.dt_transpose_for_scores", DT,
     "return x.permute(0, 2, 1, 3)",
     "return x.transpose(1, 2)",
     V_LAYER,
     "Swapping axes 1 and 2 of a 4-D tensor is the permutation (0, 2, 1, 3)."),
    ("control.dt_patches_channels_last", DT,
     "x = self.projection(pixel_values).flatten(2).transpose(1, 2)",
     "x = self.projection(pixel_values).permute(0, 2, 3, 1).flatten(1, 2)",
     V_PATCH,
     "Channels-last then flattening (H', W') gives the same row-major patch order and the same [B, N, D]."),
]

# Phase 2 only: bug id -> (expected codes, class without a code). Empty in phase 1.
PHASE_2: dict[str, tuple[list[str], str]] = {
}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    """The 1-based line number and the full original line of the one line whose stripped text
    is ``stripped``."""
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line


def _row(impl: str, original: str, replacement: str) -> dict[str, Any]:
    number, line = _locate(impl, original)
    indent = line[: len(line) - len(line.lstrip())]
    return {"impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number, "original": line,
            "replacement": indent + replacement}


def main() -> None:
    bugs = []
    for bug_id, impl, original, replacement, components, family, cls, description, report in BUGS:
        codes, without = PHASE_2.get(bug_id, ([], ""))
        bugs.append({"id": bug_id, **_row(impl, original, replacement), "components": components,
                     "family": family, "class": cls, "description": description,
                     "public_report": report, "expected_codes": codes,
                     "class_without_code": without})
    controls = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        controls.append({"id": control_id, **_row(impl, original, replacement),
                         "components": components, "why_correct": why})
    for name, rows in (("bugs.json", bugs), ("controls.json", controls)):
        (HERE / name).write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
