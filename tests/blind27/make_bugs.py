# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twenty-seventh blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind27/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind27"

SL = "stablelm_decoder"
EL = "electra_encoder"
MV = "mmseg_vit"
SL_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
SL_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
SL_BLOCK = ["decoder_block", "causal_lm"]
SL_LM = ["causal_lm"]
E_ALL = ["encoder_layer", "encoder"]
E_STACK = ["encoder"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_MASK = ["encoder_layer", "encoder"]
V_VIT = ["vit"]

ROTATE_HALF_LAYOUT = "https://github.com/EleutherAI/gpt-neox/issues/834"
POSITIONS_IGNORE_PAST = "https://github.com/huggingface/transformers/pull/15751"
MASK_IGNORES_CACHE = "https://github.com/meta-llama/llama/issues/899"
GLU_BRANCHES_FLIPPED = "https://github.com/ooples/AiDotNet.Tensors/pull/46"
MERGE_HEADS_WITHOUT_TRANSPOSE = "https://github.com/meta-pytorch/opacus/pull/825"
FUNCTIONAL_DROPOUT_IN_EVAL = "https://github.com/pytorch/pytorch/issues/26338"
ELECTRA_LAYER_NORM_EPS = "https://github.com/huggingface/transformers/pull/15332"
FP16_MASK_MINIMUM = "https://github.com/huggingface/transformers/pull/17306"
PADDING_MASK_POLARITY = "https://github.com/mlwithme/TransformerTranslation/issues/2"
BATCH_FIRST_VIEW = "https://github.com/pytorch/pytorch/issues/67651"
LAYER_NORM_EPS_1E6 = "https://github.com/karpathy/makemore/issues/1"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- stablelm_decoder
    ("sl.rotate_half_sign_flipped", SL,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.cat((x2, -x1), dim=-1)",
     SL_ATTN, "rope",
     "Every (i, i + d/2) channel pair of the queries and keys is turned by minus its angle instead of plus it: the scores still depend only on the distance between two tokens, but as if that distance had the opposite sign.",
     "rotate_half with the minus sign on the wrong half, as when it is retyped from a convention that rotates the other way, so every pair is rotated by the inverse rotation.",
     ""),
    ("sl.rope_table_interleaved", SL,
     "emb = torch.cat((freqs, freqs), dim=-1)",
     "emb = torch.repeat_interleave(freqs, 2, dim=-1)",
     SL_ATTN, "rope",
     "The cos/sin table is laid out for adjacent pairs (each frequency repeated in place) while rotate_half pairs channel i with channel i + d/2: a pair's two channels get different angles, so the transform is no longer a rotation and the scores no longer depend on the distance alone.",
     "The rotary table built the GPT-J/Meta way (repeat_interleave) in a model whose rotate_half uses the half-split pairing, a mix-up of the two RoPE layouts.",
     ROTATE_HALF_LAYOUT),
    ("sl.keys_not_rotated", SL,
     "k_embed = (k * cos) + (rotate_half(k) * sin)",
     "k_embed = k",
     SL_ATTN, "rope",
     "Only the queries are rotated; the keys keep their unrotated values, so the scores depend on the query's absolute position instead of the distance between the two tokens.",
     "apply_rotary_pos_emb returns the key unrotated (a line simplified away while refactoring the partial-rotary split).",
     ""),
    ("sl.positions_restart_each_call", SL,
     "position_ids = cache_position.unsqueeze(0)",
     "position_ids = torch.arange(seq_length, device=input_ids.device).unsqueeze(0)",
     SL_LM, "positions",
     "When the model numbers the tokens itself, every call numbers its new tokens from 0, ignoring the tokens already in the cache: in cached decoding each new token is rotated as if it were at the start of the sequence.",
     "The default position ids made from the call's length instead of cache_position (the pre-cache code path kept after the cache was added).",
     POSITIONS_IGNORE_PAST),
    ("sl.causal_mask_ignores_cache_position", SL,
     "causal_mask *= torch.arange(target_length, device=device) > cache_position.reshape(-1, 1)",
     "causal_mask *= torch.arange(target_length, device=device) > torch.arange(sequence_length, device=device).reshape(-1, 1)",
     SL_ATTN, "kv cache",
     "The causal mask of a call is aligned to the top-left corner of the (new tokens x all keys) block: with cached keys, new token i sees only keys 0..i instead of every cached key and the new ones up to itself.",
     "The mask's row index taken from the call's own token index instead of cache_position, so it is right in a full forward and wrong as soon as there is a cache.",
     MASK_IGNORES_CACHE),
    ("sl.own_key_hidden_in_cached_steps", SL,
     "causal_mask *= torch.arange(target_length, device=device) > cache_position.reshape(-1, 1)",
     "causal_mask *= torch.arange(target_length, device=device) >= cache_position.reshape(-1, 1)",
     SL_ATTN, "kv cache",
     "In a call on a non-empty cache, each new token's own key is masked (key index >= its position instead of >): the full forward is right (the triu already keeps the diagonal), cached decoding is not.",
     "An off-by-one in the comparison of key indices with cache_position.",
     ""),
    ("sl.padding_mask_inverted", SL,
     "padding_mask = padding_mask == 0",
     "padding_mask = padding_mask != 0",
     SL_ATTN, "masks",
     "The padding merge masks the causally visible real tokens and keeps the padded ones: with key padding each query attends only its visible pads, and a row with no pad attends nothing (uniform over all keys).",
     "The comparison that marks 'visible but padded' written with the opposite test.",
     PADDING_MASK_POLARITY),
    ("sl.padding_fill_discarded", SL,
     "causal_mask[:, :, :, :mask_length] = causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)",
     "causal_mask[:, :, :, :mask_length].masked_fill(padding_mask, min_dtype)",
     SL_ATTN, "masks",
     "The padding positions are filled in a copy that is thrown away: the key padding mask never reaches the scores and padded keys are attended like real tokens.",
     "An out-of-place masked_fill whose result is not assigned (the in-place masked_fill_ was meant).",
     ""),
    ("sl.gate_and_up_swapped", SL,
     "return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))",
     "return self.down_proj(self.gate_proj(x) * self.act_fn(self.up_proj(x)))",
     SL_FFN, "feed-forward",
     "The SiLU is applied to the up projection and the gate projection is used linearly: act(up(x)) * gate(x) instead of act(gate(x)) * up(x).",
     "The gated MLP's two branches exchanged, as when gate_proj and up_proj are mapped the wrong way round from a fused checkpoint.",
     GLU_BRANCHES_FLIPPED),
    ("sl.scale_by_hidden_size", SL,
     "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)",
     "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.hidden_size)",
     SL_ATTN, "attention scale",
     "The scores are divided by sqrt(d_model) instead of sqrt(d_head): every softmax is flatter by a factor sqrt(n_heads) in the logits.",
     "The scale computed from the model width instead of the head width.",
     ""),
    ("sl.heads_merged_without_transpose", SL,
     "attn_output = attn_output.transpose(1, 2).contiguous()",
     "attn_output = attn_output.contiguous()",
     SL_ATTN, "head split/merge",
     "The per-head outputs [B, H, T, d] are reshaped to [B, T, D] without moving the head axis after the token axis: each output row mixes several tokens of one head instead of every head of one token.",
     "The transpose before the reshape dropped (the reshape succeeds because the sizes match).",
     MERGE_HEADS_WITHOUT_TRANSPOSE),
    ("sl.cache_values_hold_keys", SL,
     "self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)",
     "self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], key_states], dim=-2)",
     SL_ATTN, "kv cache",
     "From the second call on, the value cache grows with the new tokens' (rotated) keys instead of their values: the prefill's values are right, every later token contributes its key vector as its value.",
     "A copy-paste slip in DynamicCache.update's append branch (key_states written into the value cache).",
     ""),
    ("sl.mlp_reads_input_layernorm", SL,
     "mlp_output = self.mlp(self.post_attention_layernorm(residual))",
     "mlp_output = self.mlp(self.input_layernorm(residual))",
     SL_BLOCK, "norms",
     "The MLP's input is normalised with the attention sublayer's LayerNorm (input_layernorm's weight and bias); post_attention_layernorm's parameters are loaded but never used.",
     "The wrong norm module named when the parallel-residual branch (which reuses input_layernorm) is turned into the sequential one.",
     ""),
    ("sl.final_norm_dropped", SL,
     "hidden_states = self.norm(hidden_states)",
     "hidden_states = hidden_states",
     SL_LM, "norms",
     "The model's final LayerNorm is skipped: the last block's un-normalised residual stream goes straight into lm_head, and the norm's parameters are never used.",
     "The final norm left out of the model's forward (as when the hidden states are returned for a head that was meant to normalise them).",
     ""),
    ("sl.attention_dropout_always_on", SL,
     "attn_weights = self.attention_dropout(attn_weights)",
     "attn_weights = nn.functional.dropout(attn_weights, p=self.config.attention_dropout, training=True)",
     SL_ATTN, "dropout",
     "Attention-probability dropout (p = 0.1) stays active in evaluation mode: outputs are random and not the model's function.",
     "The nn.Dropout module replaced by the functional dropout with training=True hard-coded.",
     FUNCTIONAL_DROPOUT_IN_EVAL),
    ("sl.kv_heads_tiled", SL,
     "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
     "hidden_states = hidden_states[:, None, :, :, :].expand(batch, n_rep, num_key_value_heads, slen, head_dim)",
     SL_ATTN, "grouped-query attention",
     "With fewer key/value heads than query heads, the key/value heads are repeated as a whole group (tiled) instead of each in place: query head h uses key/value head h mod H_kv instead of h // g.",
     "repeat_kv's new axis inserted before the key/value head axis instead of after it.",
     ""),
    ("sl.rope_table_float32", SL,
     "self.cos_cached[:seq_len].to(device=x.device, dtype=x.dtype),",
     "self.cos_cached[:seq_len].to(device=x.device, dtype=torch.float32),",
     SL_ATTN, "precision",
     "The cosine table is rounded to float32 before it multiplies the queries and keys, so a float64 model computes its rotation with float32 cosines (the sines stay float64); in a 16-bit model the rotated queries and keys are promoted to float32.",
     "A cast of the rotary table to float32 (the usual choice for half-precision models) applied whatever the model's dtype.",
     ""),
    # ---- electra_encoder
    ("el.mask_not_inverted", EL,
     "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min",
     "extended_attention_mask = extended_attention_mask * torch.finfo(dtype).min",
     E_ALL, "masks",
     "The 0/1 keep-mask is turned into the additive mask without inverting it: real tokens get the dtype's minimum and padded (or causally hidden) keys get 0, so queries attend only what should be masked.",
     "The (1.0 - mask) step dropped from get_extended_attention_mask.",
     PADDING_MASK_POLARITY),
    ("el.padding_mask_over_queries", EL,
     "extended_attention_mask = attention_mask[:, None, None, :]",
     "extended_attention_mask = attention_mask[:, None, :, None]",
     E_ALL, "masks",
     "The [B, L] padding mask is broadcast along the key axis instead of the query axis: padded query rows get the dtype's minimum added to every score (their attention becomes uniform over all keys) and padded keys stay visible to the real queries.",
     "The two None axes placed on the wrong side when the 2-D mask is expanded to [B, 1, L, L].",
     ""),
    ("el.mask_3d_transposed", EL,
     "extended_attention_mask = attention_mask[:, None, :, :]",
     "extended_attention_mask = attention_mask[:, None, :, :].transpose(-1, -2)",
     E_ALL, "masks",
     "A [B, from, to] mask is used with its query and key axes exchanged: under the causal flag each query sees the later tokens instead of the earlier ones, and padding masks the padded queries' rows instead of the padded keys.",
     "The 3-D mask read as [B, to, from] (the layout some TF ports use).",
     ""),
    ("el.scale_by_head_size", EL,
     "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
     "attention_scores = attention_scores / self.attention_head_size",
     E_ALL, "attention scale",
     "The scores are divided by d_head instead of sqrt(d_head).",
     "The square root lost from the scale.",
     ""),
    ("el.softmax_over_queries", EL,
     "attention_probs = nn.functional.softmax(attention_scores, dim=-1)",
     "attention_probs = nn.functional.softmax(attention_scores, dim=-2)",
     E_ALL, "softmax",
     "The softmax normalises over the queries (dim -2) instead of the keys: each key column sums to one, no query row does.",
     "The softmax axis written as -2 (a [B, H, from, to] vs [B, H, to, from] confusion).",
     ""),
    ("el.split_heads_without_permute", EL,
     "return x.permute(0, 2, 1, 3)",
     "return x.reshape(x.shape[0], x.shape[2], x.shape[1], x.shape[3])",
     E_ALL, "head split/merge",
     "transpose_for_scores reshapes [B, L, H, d] to [B, H, L, d] instead of permuting: each 'head' is a block of consecutive tokens' channels, so tokens and heads are mixed in q, k and v.",
     "A reshape written where a permute was needed (the shapes agree, the element order does not).",
     ""),
    ("el.heads_merged_channel_major", EL,
     "context_layer = context_layer.permute(0, 2, 1, 3).contiguous()",
     "context_layer = context_layer.permute(0, 2, 3, 1).contiguous()",
     E_ALL, "head split/merge",
     "The heads are merged channel-major: the [B, L, d, H] layout is flattened, so the output projection's input interleaves the heads channel by channel instead of concatenating them.",
     "The permutation of the context layer written with the last two axes exchanged.",
     ""),
    ("el.value_from_key_projection", EL,
     "value_layer = self.transpose_for_scores(self.value(hidden_states))",
     "value_layer = self.transpose_for_scores(self.key(hidden_states))",
     E_ALL, "projections",
     "The values are computed with the key projection: the attention averages key vectors, and the value weights are loaded but never used.",
     "A copy-paste slip from the line above (self.key for self.value).",
     ""),
    ("el.attention_residual_dropped", EL,
     "hidden_states = self.LayerNorm(hidden_states + input_tensor)",
     "hidden_states = self.LayerNorm(hidden_states)",
     E_ALL, "residual",
     "The attention sublayer has no residual connection: its LayerNorm normalises the attention output alone and the layer input is lost.",
     "The '+ input_tensor' dropped from ElectraSelfOutput.",
     ""),
    ("el.ffn_norm_before_residual_add", EL,
     "hidden_states = self.LayerNorm(hidden_states + input_tensor)  # the layer's output",
     "hidden_states = self.LayerNorm(hidden_states) + input_tensor  # the layer's output",
     E_ALL, "residual",
     "The FFN sublayer normalises its branch and then adds the residual: the layer's output is x + LN(FFN(x)) instead of LN(x + FFN(x)), so it is not normalised.",
     "The closing parenthesis of the LayerNorm call moved before the residual add.",
     ""),
    ("el.ffn_reads_layer_input", EL,
     "self.feed_forward_chunk, self.chunk_size_feed_forward, self.seq_len_dim, attention_output",
     "self.feed_forward_chunk, self.chunk_size_feed_forward, self.seq_len_dim, hidden_states",
     E_ALL, "stack wiring",
     "The feed-forward sublayer is fed the layer's input instead of the attention sublayer's output (both as its input and as its residual): the attention sublayer's output never reaches the layer's output.",
     "The wrong tensor passed to apply_chunking_to_forward.",
     ""),
    ("el.gelu_tanh_approximation", EL,
     "self.act = nn.functional.gelu",
     "self.act = lambda x: nn.functional.gelu(x, approximate=\"tanh\")",
     E_ALL, "feed-forward",
     "The FFN uses the tanh approximation of GELU instead of the exact erf GELU ELECTRA was trained with.",
     "The exact 'gelu' mapped to the 'gelu_new' (tanh) activation.",
     ""),
    ("el.attention_norm_default_eps", EL,
     "self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)",
     "self.LayerNorm = nn.LayerNorm(config.hidden_size)",
     E_ALL, "norms",
     "The attention sublayer's LayerNorm uses torch's default epsilon 1e-5 instead of the configured 1e-12.",
     "eps not passed to nn.LayerNorm, so the framework default replaces the checkpoint's value.",
     ELECTRA_LAYER_NORM_EPS),
    ("el.last_layer_skipped", EL,
     "for i, layer_module in enumerate(self.layer):",
     "for i, layer_module in enumerate(self.layer[:-1]):",
     E_STACK, "stack wiring",
     "The encoder runs every layer but the last: the last layer's parameters are loaded and never used.",
     "A slice meant for collecting intermediate hidden states left in the layer loop.",
     ""),
    ("el.attention_dropout_functional", EL,
     "attention_probs = self.dropout(attention_probs)",
     "attention_probs = nn.functional.dropout(attention_probs, p=self.dropout.p)",
     E_ALL, "dropout",
     "Attention-probability dropout (p = 0.1) is applied in evaluation mode too (functional dropout defaults to training=True).",
     "The dropout module replaced by the functional call without training=self.training.",
     FUNCTIONAL_DROPOUT_IN_EVAL),
    ("el.mask_cast_to_float16", EL,
     "extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility",
     "extended_attention_mask = extended_attention_mask.to(dtype=torch.float16)  # fp16 compatibility",
     E_ALL, "precision",
     "The keep-mask is cast to float16 before it is scaled by the model dtype's minimum: in a float32 or float64 model the product overflows float16 to -inf, so masked keys get -inf (a query with no visible key gives NaN) and the mask is float16 whatever the model's dtype.",
     "The 'fp16 compatibility' cast hard-coded to float16 instead of the model's dtype.",
     FP16_MASK_MINIMUM),
    # ---- mmseg_vit
    ("mv.output_reshaped_not_transposed", MV,
     "out = out.transpose(0, 1)",
     "out = out.reshape(out.shape[1], out.shape[0], -1)",
     V_LAYER, "layout",
     "nn.MultiheadAttention's (L, B, D) output is brought back to batch-first by a reshape instead of a transpose: the rows of different images and tokens are scrambled before the residual add.",
     "A reshape written for the batch_first conversion of the output (the shapes agree, the order does not).",
     BATCH_FIRST_VIEW),
    ("mv.attention_residual_from_normed_input", MV,
     "x = self.attn(self.norm1(x), identity=x, attn_mask=attn_mask)",
     "x = self.attn(self.norm1(x), attn_mask=attn_mask)",
     V_LAYER, "residual",
     "The attention sublayer's residual is the normalised input norm1(x) instead of x (mmcv's wrapper falls back to identity = query).",
     "identity=x dropped from the call of the mmcv attention wrapper.",
     ""),
    ("mv.ffn_reads_norm1", MV,
     "x = self.ffn(self.norm2(x), identity=x)",
     "x = self.ffn(self.norm1(x), identity=x)",
     V_LAYER, "norms",
     "The FFN's input is normalised with the attention sublayer's norm (ln1's weight and bias); ln2's parameters are never used.",
     "norm1 for norm2 in the layer's inner forward (a copy-paste slip).",
     ""),
    ("mv.drop_path_in_eval", MV,
     "if drop_prob == 0. or not training:",
     "if drop_prob == 0.:",
     V_VIT, "dropout",
     "Stochastic depth stays active in evaluation mode: with drop_path_rate 0.1 the last block's FFN branch is randomly dropped (and rescaled) per image.",
     "The training test dropped from drop_path.",
     ""),
    ("mv.patches_reshaped_not_transposed", MV,
     "x = x.flatten(2).transpose(1, 2)",
     "x = x.flatten(2).reshape(x.shape[0], -1, x.shape[1])",
     V_PATCH, "patchify",
     "The conv output [B, D, N] is reshaped to [B, N, D] instead of transposed: each 'token' is a run of one channel over consecutive patches.",
     "A reshape where the transpose was meant.",
     ""),
    ("mv.patch_stride_half", MV,
     "stride=patch_size,",
     "stride=patch_size // 2,",
     V_VIT, "patchify",
     "The patch projection strides half a patch, so patches overlap and there are about four times as many tokens; the position table is then silently resized by bicubic interpolation to the new grid.",
     "The stride of the patch embedding written as half the kernel (the overlapping-patch setting of other backbones).",
     ""),
    ("mv.class_token_appended", MV,
     "x = torch.cat((cls_tokens, x), dim=1)",
     "x = torch.cat((x, cls_tokens), dim=1)",
     V_VIT, "class token",
     "The class token is appended after the patch tokens: the position table's row 0 goes to the first patch, the class token gets the last patch's row, and the head reads the first patch's output as the class token.",
     "The concatenation order reversed.",
     ""),
    ("mv.pooled_mean_with_class_token", MV,
     "out = [out, x[:, 0]]",
     "out = [out, x.mean(dim=1)]",
     V_VIT, "pooling",
     "The representation fed to the head is the mean over every token, class token included, instead of the class token's output.",
     "Global average pooling substituted for the class token (the segmentation backbone's habit) while keeping the class token in the average.",
     ""),
    ("mv.final_norm_never_applied", MV,
     "if i == len(self.layers) - 1:",
     "if i == len(self.layers):",
     V_VIT, "norms",
     "The final LayerNorm is never applied (the loop index never reaches len(layers)): the head reads the un-normalised class token and the final norm's parameters are unused.",
     "An off-by-one in the test for the last layer.",
     ""),
    ("mv.gelu_tanh", MV,
     "return nn.GELU(**cfg_)",
     "return nn.GELU(approximate='tanh')",
     V_LAYER, "feed-forward",
     "The FFN activation is the tanh approximation of GELU instead of the exact GELU.",
     "The activation builder hard-coding the tanh approximation.",
     ""),
    ("mv.ffn_activation_missing", MV,
     "nn.Linear(in_channels, feedforward_channels), build_activation_layer(act_cfg),",
     "nn.Linear(in_channels, feedforward_channels), nn.Identity(),",
     V_LAYER, "feed-forward",
     "The FFN has no activation between its two linear layers: it is one linear map.",
     "The activation layer replaced by an identity (as when act_cfg is not resolved by the registry-free port).",
     ""),
    ("mv.norm_default_eps", MV,
     "layer = nn.LayerNorm(num_features, **cfg_)",
     "layer = nn.LayerNorm(num_features)",
     V_LAYER, "norms",
     "Every LayerNorm uses torch's default epsilon 1e-5 instead of the configured 1e-6.",
     "The norm config's keyword arguments not passed on, so the framework default replaces eps.",
     LAYER_NORM_EPS_1E6),
    ("mv.attention_mask_not_passed", MV,
     "out = self.attn(query=query, key=key, value=value, attn_mask=attn_mask, key_padding_mask=key_padding_mask)[0]",
     "out = self.attn(query=query, key=key, value=value, key_padding_mask=key_padding_mask)[0]",
     V_MASK, "masks",
     "The attention mask is never passed to nn.MultiheadAttention: padded keys are attended and the causal flag has no effect.",
     "attn_mask dropped from the wrapper's call of nn.MultiheadAttention.",
     ""),
    ("mv.output_after_second_to_last_layer", MV,
     "out_indices = num_layers - 1",
     "out_indices = num_layers - 2",
     V_VIT, "stack wiring",
     "The class token is read after the second-to-last layer: the last layer (and the final norm applied after it) never reaches the head.",
     "An off-by-one when out_indices=-1 is converted to a layer index.",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why it stays correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.sl_rotate_half_neg", SL,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.cat((x2.neg(), x1), dim=-1)",
     SL_ATTN,
     "x2.neg() is -x2."),
    ("control.sl_scale_as_power", SL,
     "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)",
     "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.head_dim**-0.5",
     SL_ATTN,
     "Multiplying by d**-0.5 is dividing by sqrt(d) (to rounding)."),
    ("control.sl_merge_by_view", SL,
     "attn_output = attn_output.reshape(bsz, q_len, self.hidden_size)",
     "attn_output = attn_output.view(bsz, q_len, -1)",
     SL_ATTN,
     "The tensor is contiguous after the transpose, so view gives the same [B, T, D] tensor; -1 is hidden_size."),
    ("control.el_transpose_for_scores", EL,
     "return x.permute(0, 2, 1, 3)",
     "return x.transpose(1, 2)",
     E_ALL,
     "transpose(1, 2) of a 4-D tensor is permute(0, 2, 1, 3)."),
    ("control.el_mask_by_comparison", EL,
     "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min",
     "extended_attention_mask = (extended_attention_mask == 0).to(dtype) * torch.finfo(dtype).min",
     E_ALL,
     "The mask holds only 0 and 1, so (mask == 0) is 1.0 - mask."),
    ("control.el_softmax_method", EL,
     "attention_probs = nn.functional.softmax(attention_scores, dim=-1)",
     "attention_probs = attention_scores.softmax(dim=-1)",
     E_ALL,
     "The tensor method is the same softmax."),
    ("control.mv_patches_channels_last", MV,
     "x = x.flatten(2).transpose(1, 2)",
     "x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, x.shape[1])",
     V_PATCH,
     "Moving the channels last and flattening the grid row-major gives the same [B, N, D] tokens in the same order."),
    ("control.mv_query_permute", MV,
     "query = query.transpose(0, 1)",
     "query = query.permute(1, 0, 2)",
     V_LAYER,
     "For a 3-D tensor permute(1, 0, 2) is transpose(0, 1)."),
]

# Phase 2 only: bug id -> (expected codes, class without a code). Empty in phase 1.
PHASE_2: dict[str, tuple[list[str], str]] = {}


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
