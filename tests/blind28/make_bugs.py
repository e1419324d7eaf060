# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twenty-eighth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there, stripped) and the stripped replacement; the line number and the indentation are
taken from the frozen implementation files, so the JSON tables always match them. Phase 2 fills
each bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind28/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind28"

HT = "hooked_transformer"
ES = "espnet_encoder"
DV = "dino_vit"
HT_NORM = ["rms_norm", "decoder_block", "causal_lm"]
HT_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
HT_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
HT_BLOCK = ["decoder_block", "causal_lm"]
HT_LM = ["causal_lm"]
E_LN = ["layer_norm", "encoder_layer", "encoder"]
E_FFN = ["ffn", "encoder_layer", "encoder"]
E_MHA = ["mha", "encoder_layer", "encoder"]
E_MHA_ONLY = ["mha"]
E_LAYER = ["encoder_layer", "encoder"]
E_STACK = ["encoder"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "vit"]
V_MASK = ["encoder_layer"]
V_VIT = ["vit"]

GQA_TILE = "https://github.com/onnx/onnx/pull/7274"
ROPE_TABLE_LAYOUT = "https://github.com/raiyanyahya/how-to-train-your-gpt/issues/6"
TL_CAUSAL_ROWS = "https://github.com/TransformerLensOrg/TransformerLens/pull/777"
ROPE_CACHE_OFFSET = "https://github.com/pytorch/executorch/pull/2010"
GLU_BRANCHES_FLIPPED = "https://github.com/ooples/AiDotNet.Tensors/pull/46"
FP16_FILL_OVERFLOW = "https://github.com/NVIDIA/apex/issues/1105"
SPLIT_HEADS_VIEW = "https://github.com/hyunwoongko/transformer/issues/15"
MERGE_HEADS_NO_PERMUTE = "https://github.com/ajhalthor/Transformer-Neural-Network/pull/4"
SOFTMAX_WRONG_AXIS = "https://github.com/labmlai/annotated_deep_learning_paper_implementations/issues/146"
FUNCTIONAL_DROPOUT_IN_EVAL = "https://github.com/pytorch/pytorch/issues/26338"
DINO_POS_INTERPOLATION = "https://github.com/facebookresearch/dino/issues/8"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- hooked_transformer (TransformerLens, Llama configuration)
    ("ht.kv_keys_tiled", HT,
     "k = torch.repeat_interleave(k, dim=2, repeats=self.repeat_kv_heads)",
     "k = k.repeat(1, 1, self.repeat_kv_heads, 1)",
     HT_ATTN, "grouped-query attention",
     "The key heads are shared out to the query heads by tiling (query head h reads key head h mod H_kv) while the value heads are still repeated in place (query head h reads value head h // g): a query head scores against one group's keys and reads another group's values.",
     "GroupedQueryAttention's key expansion rewritten with Tensor.repeat, as when the einops pattern '(n_kv g)' is turned into a tile: with 1 < n_kv < n_heads the keys of the wrong group serve each query head, the values still the right one.",
     GQA_TILE),
    ("ht.rotary_table_adjacent_pairs", HT,
     'freq = torch.cat([freq, freq])  # "d -> (2 d)"',
     'freq = freq.repeat_interleave(2)  # "d -> (2 d)"',
     HT_ATTN, "rope",
     "The cos/sin table is laid out for adjacent pairs (each frequency twice in a row) while the rotation pairs channel i with channel i + d/2: the two members of a pair get different angles, so the map is no longer a rotation and scores no longer depend on the distance alone.",
     "The '(2 d)' einops pattern of calculate_sin_cos_rotary translated as repeat_interleave, which is the '(d 2)' pattern of the GPT-J layout, while rotate_every_two keeps the GPT-NeoX half split.",
     ROPE_TABLE_LAYOUT),
    ("ht.rotate_every_two_sign_lost", HT,
     "rot_x[..., :n] = -x[..., n:]",
     "rot_x[..., :n] = x[..., n:]",
     HT_ATTN, "rope",
     "The rotate-half helper lost its minus sign: x cos + swap(x) sin is then not a rotation (both members of a pair are mixed with a plus sign), so vector norms change with position and scores are not a function of the distance.",
     "rotate_every_two's first half written without the negation, as in a retyped GPT-NeoX branch: [x2, x1] instead of [-x2, x1].",
     ""),
    ("ht.cached_keys_rotated_at_offset", HT,
     "k = self.hook_rot_k(self.apply_rotary(k, 0, attention_mask, position_ids))  # keys are cached unrotated",
     "k = self.hook_rot_k(self.apply_rotary(k, kv_cache_pos_offset, attention_mask, position_ids))  # keys are cached unrotated",
     HT_LM, "kv cache",
     "In a cached step whose positions the model derives itself, the whole key sequence (cached and new, stored unrotated) is rotated starting at the cache length instead of at 0: every key sits at its position plus the number of cached tokens, the query at the right one.",
     "The keys given the queries' offset in AbstractAttention.forward, a copy-paste of the line above: harmless in a forward without cache (offset 0), wrong in every cached step that numbers tokens from the cache; with a padding mask the position ids are too short and the step fails.",
     ROPE_CACHE_OFFSET),
    ("ht.query_offset_dropped", HT,
     "q = self.hook_rot_q(self.apply_rotary(q, kv_cache_pos_offset, attention_mask, position_ids))",
     "q = self.hook_rot_q(self.apply_rotary(q, 0, attention_mask, position_ids))",
     HT_LM, "kv cache",
     "In a cached step whose positions the model derives itself, the new queries are rotated at positions counted from 0 in each call instead of after the cached tokens, while the keys are at their true positions.",
     "The query rotation called with offset 0, as when the cache offset is thought to be handled by the key side only; given position ids hide it, derived ones do not.",
     ROPE_CACHE_OFFSET),
    ("ht.causal_mask_top_left", HT,
     "final_mask = self.mask[None, None, -query_ctx_length:, -key_ctx_length:]  # [1, 1, pos, pos]",
     "final_mask = self.mask[None, None, :query_ctx_length, :key_ctx_length]  # [1, 1, pos, pos]",
     HT_ATTN, "masks",
     "The causal mask of a call is cut from the top-left corner of the table instead of the bottom-right: with cached keys, new query i sees only keys 0..i instead of every key up to its own position; a full forward is unchanged.",
     "apply_causal_mask indexed front to back (the first query_ctx rows), the layout TransformerLens's attention once had for one model family before the fix that takes the last rows.",
     TL_CAUSAL_ROWS),
    ("ht.padding_mask_over_queries", HT,
     "final_mask = final_mask & attention_mask[:, None, None, :].bool()",
     "final_mask = final_mask & attention_mask[:, None, :, None].bool()",
     HT_ATTN, "masks",
     "The padding mask is broadcast over the query axis instead of the key axis: padded positions stop asking rather than stop being attended, so real tokens still attend the pads' keys.",
     "The attention mask expanded with the singleton on the wrong axis when the einops einsum ('batch head pos offset_pos, batch offset_pos') is rewritten by hand.",
     ""),
    ("ht.scale_by_d_model", HT,
     "self.attn_scale = np.sqrt(self.d_head)",
     "self.attn_scale = np.sqrt(self.d_model)",
     HT_ATTN, "attention scale",
     "The attention scores are divided by the square root of the model width instead of the square root of the head width.",
     "HookedTransformerConfig's default attn_scale computed from d_model, a slip between the two widths in the config's post-init.",
     ""),
    ("ht.W_O_flattened_head_last", HT,
     'w = self.W_O.reshape(self.cfg.n_heads * self.cfg.d_head, self.cfg.d_model).T  # "head_index d_head d_model -> d_model (head_index d_head)"',
     'w = self.W_O.permute(1, 0, 2).reshape(self.cfg.n_heads * self.cfg.d_head, self.cfg.d_model).T  # "head_index d_head d_model -> d_model (head_index d_head)"',
     HT_ATTN, "head split/merge",
     "The output projection's input axis is flattened as (d_head, head) while the merged head outputs are laid out (head, d_head): each output channel weights the wrong head's features.",
     "The einops rearrange of W_O to '(head_index d_head)' rewritten with a permute that orders the axes the other way, as a port to plain torch does.",
     ""),
    ("ht.gate_up_swapped", HT,
     "post_act = self.hook_post((self.act_fn(pre_act) * pre_linear) + self.b_in)",
     "post_act = self.hook_post((self.act_fn(pre_linear) * pre_act) + self.b_in)",
     HT_FFN, "feed-forward",
     "The gated FFN applies the activation to the up (linear) projection and multiplies by the gate projection, instead of activating the gate.",
     "GatedMLP's two branches exchanged: act(W_in x) * W_gate x, as when a checkpoint's gate_proj and up_proj are thought to be named the other way round.",
     GLU_BRANCHES_FLIPPED),
    ("ht.rms_eps_outside_sqrt", HT,
     "scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())",
     "scale = self.hook_scale(x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps)",
     HT_NORM, "norms",
     "RMSNorm adds epsilon to the root mean square instead of to the mean square under the root.",
     "The hook_scale expression re-bracketed, as when porting from a LayerNorm written std + eps.",
     ""),
    ("ht.rms_statistics_in_half", HT,
     "x = x.to(torch.float32)",
     "x = x.to(self.cfg.dtype)",
     HT_NORM, "precision",
     "In float16/bfloat16 the RMSNorm statistics (the mean square and its root) are formed in the 16-bit input dtype instead of float32.",
     "The upcast in RMSNorm.forward 'simplified' to the configured dtype, which makes it a no-op in a half-precision model; float32 and float64 unchanged.",
     ""),
    ("ht.final_norm_only_for_layernorm", HT,
     "if self.cfg.normalization_type is not None:",
     'if self.cfg.normalization_type == "LN":',
     HT_LM, "stack wiring",
     "The model's final RMSNorm (ln_final) is never applied: the unembedding reads the last block's raw residual stream.",
     "HookedTransformer.forward's final-norm condition narrowed to LayerNorm models, as when LN-folding code paths are special-cased; the RMS configuration falls through.",
     ""),
    ("ht.attention_residual_from_normed", HT,
     "resid_mid = self.hook_resid_mid(resid_pre + attn_out)  # [batch, pos, d_model]",
     "resid_mid = self.hook_resid_mid(self.ln1(resid_pre) + attn_out)  # [batch, pos, d_model]",
     HT_BLOCK, "residual",
     "The attention sublayer's residual adds the normalised block input instead of the raw residual stream.",
     "TransformerBlock's residual written from the normalised input, a refactor that keeps ln1's output in one variable for both the attention and the skip.",
     ""),
    ("ht.cache_keys_prepended", HT,
     "updated_keys: torch.Tensor = torch.cat([self.past_keys, new_keys], dim=1)",
     "updated_keys: torch.Tensor = torch.cat([new_keys, self.past_keys], dim=1)",
     HT_ATTN, "kv cache",
     "The cache puts the new keys before the cached ones (the values after): from the second step on key slot j holds another token's key than value slot j and the causal mask lays over the wrong keys.",
     "HookedTransformerKeyValueCacheEntry.append concatenates the keys in the wrong order, a copy-paste slip in one of the two cat lines.",
     ""),
    ("ht.padding_mask_not_accumulated", HT,
     "attention_mask = past_kv_cache.append_attention_mask(attention_mask)",
     "past_kv_cache.append_attention_mask(attention_mask)",
     HT_LM, "kv cache",
     "In cached steps the model's padding mask covers only the new tokens (the cache records the full mask, but the call does not use it): a one-token step applies its own bit to every key, so the cached pads become visible.",
     "The return value of append_attention_mask dropped in HookedTransformer.forward, as a refactor that thinks the cache is updated in place and read elsewhere.",
     ""),
    ("ht.rope_exponent_over_full_dim", HT,
     "freq = base ** (dim / (rotary_dim / 2))",
     "freq = base ** (dim / rotary_dim)",
     HT_ATTN, "rope",
     "The RoPE frequencies use the exponent i/d instead of 2i/d: every pair but the first turns faster than the spec's base^(-2i/d), i.e. a different frequency spectrum (as if the base were its square root).",
     "calculate_sin_cos_rotary's exponent written over rotary_dim instead of rotary_dim / 2, the usual confusion between the pair index and the channel index.",
     ""),
    # ---- espnet_encoder (ESPnet Transformer encoder)
    ("es.mask_polarity_inverted", ES,
     "mask = mask.unsqueeze(1).eq(0)  # (batch, 1, *, time2)",
     "mask = mask.unsqueeze(1).eq(1)  # (batch, 1, *, time2)",
     E_MHA, "masks",
     "The keep-mask is read with the opposite polarity: the keys that may be attended are filled with the minimum (and zeroed after softmax) and the masked ones are attended.",
     "forward_attention's comparison flipped, as when a mask built with 1 = padding (make_pad_mask) is fed where ESPnet expects make_non_pad_mask.",
     ""),
    ("es.mask_fill_constant_overflows_half", ES,
     "min_value = torch.finfo(scores.dtype).min",
     "min_value = -1e10",
     E_MHA, "precision",
     "The masking fill value is a fixed -1e10, which does not fit in float16: masked attention in float16 fails (the fill cannot be converted), float32/float64/bfloat16 are unchanged.",
     "The older hard-coded fill constant restored in forward_attention, the mixed-precision failure ESPnet's switch to finfo(dtype).min fixed.",
     FP16_FILL_OVERFLOW),
    ("es.scale_by_d_k", ES,
     "scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.d_k)",
     "scores = torch.matmul(q, k.transpose(-2, -1)) / self.d_k",
     E_MHA, "attention scale",
     "The scores are divided by d_k instead of sqrt(d_k).",
     "The square root dropped from MultiHeadedAttention.forward's scaling.",
     ""),
    ("es.keys_split_without_transpose", ES,
     "k = self.linear_k(key).view(n_batch, -1, self.h, self.d_k)",
     "k = self.linear_k(key).view(n_batch, self.h, -1, self.d_k).transpose(1, 2)",
     E_MHA, "head split/merge",
     "The keys are split into heads by viewing [B, T, D] directly as [B, H, T, d_k] (then brought to the layout the next line expects): each 'head' of a key row mixes channels of several positions.",
     "forward_qkv's key split written as view(batch, head, time, d_k), the tutorial shortcut that skips the transpose, on one of the three projections.",
     SPLIT_HEADS_VIEW),
    ("es.heads_merged_without_transpose", ES,
     "x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)",
     "x.contiguous().view(n_batch, -1, self.h * self.d_k)",
     E_MHA, "head split/merge",
     "The head outputs [B, H, T, d_k] are merged by a view without transposing back to [B, T, H, d_k]: each output row concatenates several positions of one head.",
     "forward_attention's merge with the transpose dropped, as in a refactor that assumes the context is already time-major.",
     MERGE_HEADS_NO_PERMUTE),
    ("es.softmax_over_queries_unmasked", ES,
     "self.attn = torch.softmax(scores, dim=-1)  # (batch, head, time1, time2)",
     "self.attn = torch.softmax(scores, dim=-2)  # (batch, head, time1, time2)",
     E_MHA, "softmax",
     "In calls without a mask the attention weights are normalised over the queries instead of over the keys (each key column sums to one, the rows do not); masked calls are unaffected.",
     "The unmasked branch of forward_attention given the other axis, a slip in one of its two softmax calls.",
     SOFTMAX_WRONG_AXIS),
    ("es.ffn_activation_swish", ES,
     "def __init__(self, idim, hidden_units, dropout_rate, activation=torch.nn.ReLU()):",
     "def __init__(self, idim, hidden_units, dropout_rate, activation=torch.nn.SiLU()):",
     E_FFN, "feed-forward",
     "The feed-forward activation is SiLU (Swish) instead of ReLU.",
     "PositionwiseFeedForward's default activation changed to Swish, as copied from the Conformer's feed-forward module, while the Transformer encoder relies on the default.",
     ""),
    ("es.ffn_adds_its_input", ES,
     "return self.w_2(self.dropout(self.activation(self.w_1(x))))",
     "return self.w_2(self.dropout(self.activation(self.w_1(x)))) + x",
     E_FFN, "residual",
     "The feed-forward module adds its own input to its output, so the layer, which adds the residual again, counts the normalised input once more.",
     "A residual folded into PositionwiseFeedForward, as in implementations whose FFN owns its skip connection, while EncoderLayer still adds its own.",
     ""),
    ("es.layer_norm_default_eps", ES,
     "super(LayerNorm, self).__init__(nout, eps=1e-12)",
     "super(LayerNorm, self).__init__(nout)",
     E_LN, "norms",
     "ESPnet's LayerNorm uses torch's default epsilon 1e-5 instead of 1e-12.",
     "The eps argument lost from LayerNorm's constructor, so every norm of the encoder runs with PyTorch's default.",
     ""),
    ("es.ffn_residual_dropped", ES,
     "x = residual + stoch_layer_coeff * self.dropout(self.feed_forward(x))",
     "x = stoch_layer_coeff * self.dropout(self.feed_forward(x))",
     E_LAYER, "residual",
     "The feed-forward sublayer's residual connection is missing: the layer's output is the FFN branch alone.",
     "The skip dropped from EncoderLayer's second sublayer while editing the stochastic-depth coefficient.",
     ""),
    ("es.keys_values_from_unnormed_input", ES,
     "self.self_attn(x_q, x, x, mask)",
     "self.self_attn(x_q, residual, residual, mask)",
     E_LAYER, "projections",
     "In the pre-LN layer the queries come from the normalised input but the keys and values from the raw layer input (before norm1).",
     "EncoderLayer's attention call given the residual for key and value, as when adapting the cache branch (where x_q is a slice) and mixing up which tensor is normalised.",
     ""),
    ("es.norm2_shares_norm1", ES,
     "self.norm2 = LayerNorm(size)",
     "self.norm2 = self.norm1",
     E_LAYER, "parameters",
     "The layer's second norm is the same module as the first: the FFN sublayer is normalised with norm1's gain and shift, and norm2's own parameters do not exist.",
     "norm2 aliased to norm1 in EncoderLayer.__init__, a refactor that tries to save parameters or a copy-paste of one norm.",
     ""),
    ("es.layers_post_ln_in_pre_ln_stack", ES,
     "normalize_before,",
     "concat_after,",
     E_STACK, "norm placement",
     "The encoder builds its layers post-LN (normalize_before receives concat_after's False) while it keeps the pre-LN stack's final after_norm.",
     "The positional argument list of the repeat() lambda shifted by copy-paste: concat_after passed where normalize_before is expected.",
     ""),
    ("es.values_from_key_input", ES,
     "v = self.linear_v(value).view(n_batch, -1, self.h, self.d_k)",
     "v = self.linear_v(key).view(n_batch, -1, self.h, self.d_k)",
     E_MHA_ONLY, "projections",
     "The values are projected from the key input instead of the value input; in self-attention (key = value) nothing changes.",
     "forward_qkv's value projection fed the key tensor, a copy-paste of the previous line.",
     ""),
    ("es.attention_dropout_functional", ES,
     "p_attn = self.dropout(self.attn)",
     "p_attn = torch.nn.functional.dropout(self.attn, p=self.dropout.p)",
     E_MHA, "dropout",
     "Dropout on the attention weights stays active in evaluation mode (the functional call defaults to training=True), so eval outputs are random and rescaled.",
     "The dropout module replaced by the functional call without training=self.training.",
     FUNCTIONAL_DROPOUT_IN_EVAL),
    # ---- dino_vit (facebookresearch/dino v1)
    ("dv.qkv_heads_and_tokens_swapped", DV,
     "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)",
     "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 1, 3, 4)",
     V_LAYER, "head split/merge",
     "After the fused qkv split the head axis and the token axis are left in the wrong order ([B, N, H, d] instead of [B, H, N, d]): attention runs across the heads of each token instead of across tokens.",
     "The permute of Attention.forward written (2, 0, 1, 3, 4), as a port that forgets the attention wants heads before tokens.",
     ""),
    ("dv.qkv_read_per_head_interleaved", DV,
     "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)",
     "qkv = self.qkv(x).reshape(B, N, self.num_heads, 3, C // self.num_heads).permute(3, 0, 2, 1, 4)",
     V_LAYER, "parameters",
     "The fused qkv output is read as per-head interleaved [head, (q, k, v), d] instead of [(q, k, v), head, d]: the rows taken as one head's query are other rows of the fused weight (q, k and v mixed).",
     "The qkv reshape of a checkpoint layout that interleaves q, k, v per head (Megatron/GPT-NeoX style) applied to timm/DINO's [q; k; v] layout.",
     ""),
    ("dv.scale_inverted", DV,
     "self.scale = qk_scale or head_dim ** -0.5",
     "self.scale = qk_scale or head_dim ** 0.5",
     V_LAYER, "attention scale",
     "The scores are multiplied by sqrt(d_k) instead of 1/sqrt(d_k).",
     "The sign of the exponent lost in Attention.__init__.",
     ""),
    ("dv.queries_keys_exchanged", DV,
     "q, k, v = qkv[0], qkv[1], qkv[2]",
     "k, q, v = qkv[0], qkv[1], qkv[2]",
     V_LAYER, "projections",
     "Queries and keys are exchanged: the query weights make the keys and the key weights make the queries, so the score matrix is the transpose of the right one.",
     "The unpacking of the fused qkv written in the wrong order.",
     ""),
    ("dv.heads_merged_without_transpose", DV,
     "x = (attn @ v).transpose(1, 2).reshape(B, N, C)",
     "x = (attn @ v).reshape(B, N, C)",
     V_LAYER, "head split/merge",
     "The head outputs [B, H, N, d] are merged by a reshape without the transpose back to [B, N, H, d]: each token's row is made of several tokens of one head.",
     "The transpose dropped from Attention.forward's merge.",
     MERGE_HEADS_NO_PERMUTE),
    ("dv.mlp_reads_norm1", DV,
     "x = x + self.drop_path(self.mlp(self.norm2(x)))",
     "x = x + self.drop_path(self.mlp(self.norm1(x)))",
     V_LAYER, "norms",
     "The MLP sublayer is normalised with the first norm's parameters; norm2 is never used.",
     "A copy-paste of Block.forward's attention line that keeps norm1.",
     ""),
    ("dv.drop_path_active_in_eval", DV,
     "if drop_prob == 0. or not training:",
     "if drop_prob == 0.:",
     V_LAYER, "dropout",
     "Stochastic depth stays active in evaluation mode: whole residual branches are dropped at random per sample and the kept ones rescaled.",
     "drop_path's early return reduced to the zero-probability case, so the training flag is ignored.",
     ""),
    ("dv.mlp_gelu_tanh", DV,
     "self.act = act_layer()",
     "self.act = act_layer(approximate='tanh')",
     V_LAYER, "feed-forward",
     "The MLP uses the tanh approximation of GELU instead of the exact erf GELU.",
     "Mlp's activation built with approximate='tanh', as when matching a JAX checkpoint's gelu or optimising for speed.",
     ""),
    ("dv.patches_column_major", DV,
     "x = self.proj(x).flatten(2).transpose(1, 2)",
     "x = self.proj(x).transpose(2, 3).flatten(2).transpose(1, 2)",
     V_PATCH, "patchify",
     "The patch tokens are ordered column by column (width outer) instead of row by row, so each token meets another grid cell's position embedding.",
     "The conv output's spatial axes swapped before flattening, the w/h naming confusion of prepare_tokens ('B, nc, w, h = x.shape') carried into PatchEmbed.",
     ""),
    ("dv.pos_embed_always_interpolated", DV,
     "if npatch == N and w == h:",
     "if npatch == N and w != h:",
     V_VIT, "positions",
     "The position table is resampled (bicubic, with DINO's +0.1 offset in the scale factor) even when the image has the training grid, so every patch token receives a transformed table instead of its own row.",
     "interpolate_pos_encoding's shortcut condition inverted on the aspect test, as in the non-square fixes that followed DINO issue 8.",
     DINO_POS_INTERPOLATION),
    ("dv.class_token_appended", DV,
     "x = torch.cat((cls_tokens, x), dim=1)",
     "x = torch.cat((x, cls_tokens), dim=1)",
     V_VIT, "class token",
     "The class token is appended after the patch tokens instead of prepended; the readout still takes index 0, a patch token, and the position rows are shifted by one.",
     "prepare_tokens' concatenation in the wrong order.",
     ""),
    ("dv.mean_pool_with_class_token", DV,
     "output = torch.cat([x[:, 0] for x in intermediate_output], dim=-1)",
     "output = torch.cat([x.mean(1) for x in intermediate_output], dim=-1)",
     V_VIT, "pooling",
     "The classifier's representation is the mean over all tokens including the class token, instead of the class token.",
     "eval_linear's readout rewritten as average pooling (the avgpool_patchtokens idea) over every token, class token included.",
     ""),
    ("dv.intermediate_output_not_normed", DV,
     "output.append(self.norm(x))",
     "output.append(x)",
     V_VIT, "stack wiring",
     "get_intermediate_layers returns the last block's output without the final norm: the classifier reads an unnormalised class token and the encoder's norm is never applied.",
     "The norm dropped from get_intermediate_layers, as when it is taken to return raw block outputs like timm's forward_intermediates.",
     ""),
    ("dv.mask_fill_negative_infinity", DV,
     "attn = attn.masked_fill(~attn_mask, torch.finfo(attn.dtype).min)",
     "attn = attn.masked_fill(~attn_mask, float('-inf'))",
     V_MASK, "masks",
     "Masked scores are filled with -inf instead of the dtype's minimum: a query with no visible key gets NaN instead of the declared uniform average.",
     "The optional attention mask applied with -inf, the usual idiom, which breaks the layer's declared behaviour for fully masked rows.",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.ht_freq_repeat", HT,
     'freq = torch.cat([freq, freq])  # "d -> (2 d)"',
     'freq = freq.repeat(2)  # "d -> (2 d)"',
     HT_ATTN,
     "Tensor.repeat(2) on a 1-D tensor is the concatenation of two copies, the same '(2 d)' layout."),
    ("control.ht_scores_matmul", HT,
     "attn_scores = q_ @ k_ / self.attn_scale",
     "attn_scores = torch.matmul(q_, k_) / self.attn_scale",
     HT_ATTN,
     "The @ operator is torch.matmul."),
    ("control.ht_softmax_method", HT,
     "pattern = F.softmax(attn_scores, dim=-1)",
     "pattern = attn_scores.softmax(dim=-1)",
     HT_ATTN,
     "The tensor method is the same softmax over the same axis."),
    ("control.es_merge_permute_reshape", ES,
     "x.transpose(1, 2).contiguous().view(n_batch, -1, self.h * self.d_k)",
     "x.permute(0, 2, 1, 3).reshape(n_batch, -1, self.h * self.d_k)",
     E_MHA,
     "permute(0, 2, 1, 3) is transpose(1, 2), and reshape copies the non-contiguous tensor as contiguous().view does."),
    ("control.es_query_permute", ES,
     "q = q.transpose(1, 2)  # (batch, head, time1, d_k)",
     "q = q.permute(0, 2, 1, 3)  # (batch, head, time1, d_k)",
     E_MHA,
     "permute(0, 2, 1, 3) of a 4-D tensor is transpose(1, 2)."),
    ("control.dv_merge_permute", DV,
     "x = (attn @ v).transpose(1, 2).reshape(B, N, C)",
     "x = (attn @ v).permute(0, 2, 1, 3).reshape(B, N, C)",
     V_LAYER,
     "permute(0, 2, 1, 3) is transpose(1, 2); the reshape copies as needed."),
    ("control.dv_patches_channels_last", DV,
     "x = self.proj(x).flatten(2).transpose(1, 2)",
     "x = self.proj(x).permute(0, 2, 3, 1).reshape(B, -1, self.proj.out_channels)",
     V_PATCH,
     "Channels last, then rows of the grid in order: the same [B, N, D] tokens in the same row-major order."),
    ("control.dv_scale_queries_first", DV,
     "attn = (q @ k.transpose(-2, -1)) * self.scale",
     "attn = (q * self.scale) @ k.transpose(-2, -1)",
     V_LAYER,
     "Scaling the queries first is the same product up to rounding."),
]

# Phase 2 only: bug id -> (expected codes, class without a code).
PHASE_2: dict[str, tuple[list[str], str]] = {
    # hooked_transformer
    "ht.kv_keys_tiled": (["attention.kv_heads_tiled"], ""),
    "ht.rotary_table_adjacent_pairs": (["rope.table_layout_mismatch", "rope.not_norm_preserving", "rope.not_relative"], ""),
    "ht.rotate_every_two_sign_lost": (["rope.not_norm_preserving", "rope.not_relative"], ""),
    "ht.cached_keys_rotated_at_offset": (["cache.rope_offset_wrong"], ""),
    "ht.query_offset_dropped": (["cache.rope_offset_wrong"], ""),
    "ht.causal_mask_top_left": (["cache.causal_top_left", "mask.causal_alignment_top_left"], ""),
    "ht.padding_mask_over_queries": (["mask.applied_to_queries"], ""),
    "ht.scale_by_d_model": (["attention.scale_wrong"], ""),
    "ht.W_O_flattened_head_last": (["attention.heads_merged_wrong_order"], ""),
    "ht.gate_up_swapped": (["ffn.gate_up_swapped"], ""),
    "ht.rms_eps_outside_sqrt": (["layer_norm.eps_outside_sqrt"], ""),
    "ht.rms_statistics_in_half": (["numerics.norm_statistics_low_precision"], ""),
    "ht.final_norm_only_for_layernorm": (["blocks.final_norm_missing", "params.unused"], ""),
    "ht.attention_residual_from_normed": (["blocks.residual_after_norm"], ""),
    "ht.cache_keys_prepended": (["cache.keys_prepended"], ""),
    "ht.padding_mask_not_accumulated": (["cache.padding_dropped_in_steps"], ""),
    "ht.rope_exponent_over_full_dim": (["positional.frequency_wrong", "positional.base_wrong"], ""),
    # espnet_encoder
    "es.mask_polarity_inverted": (["mask.polarity_inverted"], ""),
    "es.mask_fill_constant_overflows_half": (["numerics.fill_value_overflow"], ""),
    "es.scale_by_d_k": (["attention.scale_wrong"], ""),
    "es.keys_split_without_transpose": (["attention.heads_split_wrong_order"], ""),
    "es.heads_merged_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "es.softmax_over_queries_unmasked": (["attention.softmax_axis_wrong", "attention.weights_not_normalized"], ""),
    "es.ffn_activation_swish": (["ffn.activation_wrong"], ""),
    "es.ffn_adds_its_input": ([], "The feed-forward network adds its own input to its output (a skip connection inside the branch, FFN(x) + x), so a layer that adds its residual as well puts the sublayer's (normalised) input into the stream a second time; no meaning names an extra residual inside a sublayer."),
    "es.layer_norm_default_eps": (["layer_norm.eps_wrong"], ""),
    "es.ffn_residual_dropped": (["blocks.residual_missing"], ""),
    "es.keys_values_from_unnormed_input": (["blocks.norm_bypassed"], ""),
    "es.norm2_shares_norm1": (["params.read_from_other_module", "params.count_wrong"], ""),
    "es.layers_post_ln_in_pre_ln_stack": (["blocks.norm_placement_post", "blocks.final_norm_extra"], ""),
    "es.values_from_key_input": (["attention.input_read_wrong"], ""),
    "es.attention_dropout_functional": (["dropout.active_in_eval"], ""),
    # dino_vit
    "dv.qkv_heads_and_tokens_swapped": (["attention.softmax_axis_wrong"], ""),
    "dv.qkv_read_per_head_interleaved": (["attention.qkv_order_wrong"], ""),
    "dv.scale_inverted": (["attention.scale_inverted"], ""),
    "dv.queries_keys_exchanged": (["attention.qkv_order_wrong"], ""),
    "dv.heads_merged_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "dv.mlp_reads_norm1": (["params.read_from_other_module", "params.unused"], ""),
    "dv.drop_path_active_in_eval": (["dropout.active_in_eval"], ""),
    "dv.mlp_gelu_tanh": (["ffn.activation_gelu_tanh"], ""),
    "dv.patches_column_major": (["vit.patch_order"], ""),
    "dv.pos_embed_always_interpolated": (["vit.pos_embed_transformed"], ""),
    "dv.class_token_appended": (["vit.pooling_wrong_token", "vit.pos_embed_transformed"], ""),
    "dv.mean_pool_with_class_token": (["vit.pooling_mean_with_cls"], ""),
    "dv.intermediate_output_not_normed": (["blocks.final_norm_missing", "params.unused"], ""),
    "dv.mask_fill_negative_infinity": (["mask.fully_masked_rows_nan"], ""),
}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}.py: {stripped!r} occurs {len(hits)} times (stripped)")
    line = lines[hits[0]]
    if sum(l == line for l in lines) != 1:
        raise ValueError(f"{impl}.py: {line!r} is not unique")
    return hits[0] + 1, line


def _row(rid: str, impl: str, original: str, replacement: str, components: list[str]) -> dict[str, Any]:
    number, line = _locate(impl, original)
    indent = line[: len(line) - len(line.lstrip())]
    return {
        "id": rid, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
        "original": line, "replacement": indent + replacement, "components": list(components),
    }


def main() -> None:
    bugs = []
    for rid, impl, original, replacement, components, family, klass, description, report in BUGS:
        row = _row(rid, impl, original, replacement, components)
        codes, without = PHASE_2.get(rid, ([], ""))
        row |= {
            "family": family, "class": klass, "description": description, "public_report": report,
            "expected_codes": list(codes), "class_without_code": without,
        }
        bugs.append(row)
    controls = []
    for rid, impl, original, replacement, components, why in CONTROLS:
        controls.append(_row(rid, impl, original, replacement, components) | {"why_correct": why})
    for name, rows in (("bugs.json", bugs), ("controls.json", controls)):
        (HERE / name).write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
