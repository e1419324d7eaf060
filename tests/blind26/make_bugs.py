# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twenty-sixth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind26/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind26"

GJ = "gptj_decoder"
BA = "bart_seq2seq"
PV = "paddle_vit"
GJ_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
GJ_FFN = ["ffn", "decoder_block", "causal_lm"]
GJ_BLOCK = ["decoder_block", "causal_lm"]
GJ_LM = ["causal_lm"]
B_ALL = ["encoder_layer", "encoder", "decoder_layer", "decoder"]
B_ENC = ["encoder_layer", "encoder"]
B_DEC = ["decoder_layer", "decoder"]
B_ENC_STACK = ["encoder"]
B_DEC_STACK = ["decoder"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_MASK = ["encoder_layer", "encoder"]
V_VIT = ["vit"]

ROTATE_EVERY_TWO_FLAX = "https://github.com/huggingface/transformers/pull/16298"
GPTJ_ROTARY_LAYOUT = "https://github.com/TransformerLensOrg/TransformerLens/pull/365"
POSITIONS_IGNORE_PAST = "https://github.com/huggingface/transformers/pull/15751"
POSITIONS_FROM_ZERO_EACH_CALL = "https://github.com/ml-explore/mlx-lm/pull/93"
CAUSAL_MASK_IGNORES_PAST = "https://github.com/tinygrad/tinygrad/pull/15949"
SCALE_BY_CHANNELS = "https://github.com/karpathy/ng-video-lecture/pull/6"
SCALE_BY_EMBEDDING_DIM = "https://github.com/Graylab/DL4Proteins-notebooks/issues/12"
EXPAND_MASK_TRANSPOSED = "https://github.com/huggingface/transformers/pull/26421"
FUNCTIONAL_DROPOUT_IN_EVAL = "https://github.com/pytorch/pytorch/issues/26338"
LAYER_NORM_EPS_1E5_1E6 = "https://github.com/huggingface/candle/pull/271"
PADDLE_LINEAR_WEIGHT_LAYOUT = "https://github.com/PaddlePaddle/docs/pull/5945"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- gptj_decoder
    ("gj.rotate_every_two_inverted", GJ,
     "x = torch.stack((-x2, x1), dim=-1)",
     "x = torch.stack((x2, -x1), dim=-1)",
     GJ_ATTN, "rope",
     "Each adjacent pair of query and key channels is turned by minus its angle instead of plus it: the scores still depend only on the distance between two tokens, but as if the distance had the opposite sign.",
     "rotate_every_two written with the sign on the wrong half (as a port from a convention that rotates the other way does), so the rotation of every pair is the inverse one.",
     ROTATE_EVERY_TWO_FLAX),
    ("gj.sin_table_tiled_not_interleaved", GJ,
     "sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)",
     "sin = torch.cat([sin[:, :, None, :], sin[:, :, None, :]], dim=3)",
     GJ_ATTN, "rope",
     "The sine factors are laid out as two copies of the half-width table one after the other, while the cosines and the rotated pairs stay adjacent-pair interleaved: most channel pairs are multiplied by the cosine of one frequency and the sine of another, so the map is no longer a rotation and the scores stop depending on the distance alone.",
     "A port mixing the two rotary layouts: the sine is expanded the half-split way (the table concatenated with itself), the cosine the every-two way (repeat_interleave).",
     GPTJ_ROTARY_LAYOUT),
    ("gj.rotary_table_by_call_index", GJ,
     "sincos = torch.gather(embed_positions, 1, repeated_position_ids)",
     "sincos = embed_positions[:, : position_ids.shape[-1]]",
     GJ_ATTN, "positions",
     "The rotary angles are read from the first rows of the table, by each token's index within the call, ignoring the position ids: given positions are not used, and in cached decoding every call's tokens are rotated as if they started at position 0 while the cached keys keep their own angles.",
     "A simplification of the gather to a slice of the table, correct only for a full forward from position 0.",
     POSITIONS_FROM_ZERO_EACH_CALL),
    ("gj.positions_restart_at_zero", GJ,
     "position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long, device=device)",
     "position_ids = torch.arange(0, input_shape[-1], dtype=torch.long, device=device)",
     GJ_LM, "cache",
     "When the model numbers the tokens itself, each call numbers its new tokens from 0 instead of from the number of tokens already in the cache, so decoded tokens are rotated at the wrong positions relative to the cached keys.",
     "The model's default position ids built without the past length (as several ports wrote them before caching was added).",
     POSITIONS_IGNORE_PAST),
    ("gj.causal_rows_from_top", GJ,
     "causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]",
     "causal_mask = self.bias[:, :, :query_length, :key_length]",
     GJ_ATTN, "cache",
     "The causal mask's rows are cut from the top of the lower-triangular buffer instead of its bottom: with keys already cached, the i-th new token may only see keys 0..i of the whole sequence, not every key up to its own position.",
     "The buffer slice written for equal query and key lengths, forgetting the offset of the cached keys.",
     CAUSAL_MASK_IGNORES_PAST),
    ("gj.causal_where_inverted", GJ,
     "attn_weights = torch.where(causal_mask, attn_weights, mask_value)",
     "attn_weights = torch.where(causal_mask, mask_value, attn_weights)",
     GJ_ATTN, "mask",
     "The two branches of the causal selection are exchanged: every earlier key and the token itself are masked and only later keys stay visible (the last token sees none and averages every key).",
     "torch.where's arguments swapped in a rewrite from masked_fill (whose mask marks what to hide) to where (whose condition marks what to keep).",
     ""),
    ("gj.scale_by_embed_dim", GJ,
     "self.scale_attn = math.sqrt(self.head_dim)",
     "self.scale_attn = math.sqrt(self.embed_dim)",
     GJ_ATTN, "scale",
     "The attention scores are divided by the square root of the model width instead of the square root of one head's width.",
     "The scale taken from the hidden size instead of the head size.",
     SCALE_BY_CHANNELS),
    ("gj.padding_mask_not_inverted", GJ,
     "attention_mask = (1.0 - attention_mask) * torch.finfo(dtype).min",
     "attention_mask = attention_mask * torch.finfo(dtype).min",
     GJ_LM, "mask",
     "The padding mask's large negative bias is put on the real tokens instead of the padding: with padding, each row attends only to padded keys (or, when none is visible, to the real ones with a uniform shift).",
     "The `1.0 - mask` inversion dropped when the 0/1 attention mask is turned into an additive bias.",
     ""),
    ("gj.cache_keys_after_new", GJ,
     "key = torch.cat((past_key, key), dim=-2)",
     "key = torch.cat((key, past_key), dim=-2)",
     GJ_ATTN, "cache",
     "In cached calls the new keys are put before the cached ones while the values keep the cached ones first: keys and values no longer belong to the same tokens, and the causal mask and padding are laid over the keys in the wrong order.",
     "The concatenation order of the key cache written the other way round from the value cache's.",
     ""),
    ("gj.cache_values_hold_keys", GJ,
     "present = (key.to(hidden_states.dtype), value)",
     "present = (key.to(hidden_states.dtype), key)",
     GJ_ATTN, "cache",
     "The cache returned for the next call stores the keys in the values' place: later calls average the cached tokens' (rotated) keys instead of their values.",
     "A copy-paste slip in the returned cache tuple.",
     ""),
    ("gj.merge_heads_width_major", GJ,
     "tensor = tensor.permute(0, 2, 1, 3).contiguous()",
     "tensor = tensor.permute(0, 2, 3, 1).contiguous()",
     GJ_ATTN, "heads",
     "When the heads are merged back into the model width, the head axis is put last: each output channel block interleaves the heads channel by channel instead of laying each head's channels out contiguously, so the output projection reads permuted inputs.",
     "A wrong permutation in _merge_heads.",
     ""),
    ("gj.queries_not_rotated", GJ,
     "query = torch.cat([q_rot, q_pass.to(q_rot.dtype)], dim=-1)",
     "query = torch.cat([query[:, :, :, : self.rotary_dim], q_pass.to(q_rot.dtype)], dim=-1)",
     GJ_ATTN, "rope",
     "The rotated part of the queries is thrown away and the unrotated slice put back: only the keys carry positions, so the scores depend on the keys' absolute positions instead of on the distance.",
     "The partial-rotary concatenation re-reading the original slice instead of the rotated one.",
     ""),
    ("gj.gelu_tanh_factor_not_square_rooted", GJ,
     "return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))",
     "return 0.5 * input * (1.0 + torch.tanh((2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))",
     GJ_FFN, "ffn",
     "The tanh approximation of GELU multiplies its inner term by 2/pi instead of sqrt(2/pi): the MLP's activation is a different, flatter curve.",
     "A typo in a hand-written activation (the square root dropped).",
     ""),
    ("gj.mlp_reads_attention_norm", GJ,
     "feed_forward_hidden_states = self.mlp(self.ln_2(hidden_states))",
     "feed_forward_hidden_states = self.mlp(self.ln_1(hidden_states))",
     GJ_BLOCK, "norm",
     "The feed-forward sublayer's input is normalised with the attention sublayer's norm parameters; the second norm's weight and bias are never used.",
     "A conversion of GPT-J's parallel block (where the MLP shares ln_1) to the sequential form that kept ln_1 on the MLP path.",
     ""),
    ("gj.residual_after_ln_1", GJ,
     "hidden_states = self.ln_1(hidden_states)",
     "hidden_states = residual = self.ln_1(hidden_states)",
     GJ_BLOCK, "residual",
     "The attention sublayer's residual is the normalised input instead of the block's input, so the un-normalised residual stream is replaced by its normalised copy at every block.",
     "A chained assignment that rebinds the residual to the norm's output.",
     ""),
    ("gj.logits_cast_to_float32", GJ,
     "lm_logits = self.lm_head(hidden_states)",
     "lm_logits = self.lm_head(hidden_states).to(torch.float32)",
     GJ_LM, "precision",
     "The logits are rounded to float32 whatever the model's precision: a float64 model returns float32-rounded logits.",
     "transformers' GPT-J casts its logits to float32 for sampling in half precision; kept in a port whose model runs in float64.",
     ""),
    ("gj.value_from_key_projection", GJ,
     "value = self.v_proj(hidden_states)",
     "value = self.k_proj(hidden_states)",
     GJ_ATTN, "projection",
     "The values are computed with the key projection's weight (before rotation), so attention averages key vectors and the value weight is never used.",
     "A copy-paste slip among the three projection lines.",
     ""),
    # ---- bart_seq2seq
    ("b.scaling_exponent_sign", BA,
     "self.scaling = self.head_dim**-0.5",
     "self.scaling = self.head_dim**0.5",
     B_ALL, "scale",
     "The queries are multiplied by the square root of the head width instead of divided by it: the scores are d_head times too large.",
     "The minus sign of the exponent lost.",
     ""),
    ("b.scaled_twice", BA,
     "attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))",
     "attn_weights = torch.bmm(query_states, key_states.transpose(1, 2)) * self.scaling",
     B_ALL, "scale",
     "The scores are scaled by 1/sqrt(d_head) a second time after the queries were already scaled: in all they are divided by d_head.",
     "A refactor that moved the scale onto the scores and left the query's multiplication in place.",
     ""),
    ("b.split_heads_by_view", BA,
     "return tensor.view(bsz, seq_len, self.num_heads, self.head_dim).transpose(1, 2).contiguous()",
     "return tensor.view(bsz, self.num_heads, seq_len, self.head_dim).contiguous()",
     B_ALL, "heads",
     "The projected [batch, length, width] tensor is viewed directly as [batch, heads, length, head width]: each head receives a block of consecutive memory that mixes tokens and channels instead of its own channels of every token.",
     "The head split written as one view without the transpose.",
     ""),
    ("b.padding_mask_not_inverted", BA,
     "inverted_mask = 1.0 - expanded_mask",
     "inverted_mask = expanded_mask",
     B_ALL, "mask",
     "The padding keep-mask is not inverted before it becomes the additive bias: real keys get the large negative bias and padded keys none.",
     "The inversion dropped in _expand_mask.",
     ""),
    ("b.padding_mask_over_queries", BA,
     "expanded_mask = mask[:, None, None, :].expand(bsz, 1, tgt_len, src_len).to(dtype)",
     "expanded_mask = mask[:, None, :, None].expand(bsz, 1, tgt_len, src_len).to(dtype)",
     B_ALL, "mask",
     "The padding mask is laid along the query axis instead of the key axis: padded positions stop attending (their rows are filled uniformly) while real queries still attend padded keys; with a source of another length than the target the expansion fails.",
     "The broadcasting axes of the padding mask exchanged.",
     EXPAND_MASK_TRANSPOSED),
    ("b.causal_diagonal_masked", BA,
     "mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)",
     "mask.masked_fill_(mask_cond < mask_cond.view(mask.size(-1), 1), 0)",
     B_ALL, "mask",
     "The causal mask opens only the strictly earlier keys: no token sees its own key, and the first token sees none.",
     "The +1 of the diagonal dropped from the comparison.",
     ""),
    ("b.keys_from_value_projection", BA,
     "key_states = self._shape(self.k_proj(hidden_states), -1, bsz)",
     "key_states = self._shape(self.v_proj(hidden_states), -1, bsz)",
     B_ALL, "projection",
     "In self-attention the keys are computed with the value projection's weight and bias; the key projection is never used.",
     "A copy-paste slip in the self-attention branch.",
     ""),
    ("b.cross_attention_norm_reused", BA,
     "hidden_states = self.encoder_attn_layer_norm(hidden_states)",
     "hidden_states = self.self_attn_layer_norm(hidden_states)",
     B_DEC, "norm",
     "After the cross-attention sublayer the decoder layer normalises with the self-attention sublayer's norm parameters; the cross-attention norm's weight and bias are never used.",
     "A copy-paste slip in the decoder layer.",
     ""),
    ("b.encoder_attention_norm_dropped", BA,
     "hidden_states = self.self_attn_layer_norm(hidden_states)",
     "# hidden_states = self.self_attn_layer_norm(hidden_states)",
     B_ENC, "norm",
     "The encoder layer's first post-norm is never applied: the feed-forward sublayer and its residual receive the un-normalised sum of the input and the attention output.",
     "A line commented out while debugging and left so.",
     ""),
    ("b.ffn_residual_from_before_cross_attention", BA,
     "residual = hidden_states  # decoder: feed-forward residual",
     "# residual = hidden_states  # decoder: feed-forward residual",
     B_DEC, "residual",
     "The decoder layer's feed-forward residual is not refreshed: the feed-forward output is added to the cross-attention sublayer's input (the self-attention block's normalised output) instead of to the cross-attention block's normalised output.",
     "A residual line deleted as an apparent duplicate of the previous residual line.",
     ""),
    ("b.gelu_tanh_approximation", BA,
     "self.act = nn.functional.gelu",
     "self.act = lambda input: nn.functional.gelu(input, approximate=\"tanh\")",
     B_ALL, "ffn",
     "The feed-forward activation is the tanh approximation of GELU instead of the exact (erf) GELU.",
     "The activation mapped to the 'gelu_new'/'gelu_pytorch_tanh' variant during a port.",
     ""),
    ("b.fc2_dropout_always_on", BA,
     "hidden_states = nn.functional.dropout(hidden_states, p=self.dropout, training=self.training)  # encoder: fc2 dropout",
     "hidden_states = nn.functional.dropout(hidden_states, p=self.dropout)  # encoder: fc2 dropout",
     B_ENC, "dropout",
     "The dropout after the encoder layer's second feed-forward projection stays active in evaluation (p = 0.1): outputs are random and scaled.",
     "Functional dropout called without training=self.training (its default is training=True).",
     FUNCTIONAL_DROPOUT_IN_EVAL),
    ("b.encoder_layers_read_stack_input", BA,
     "layer_outputs = encoder_layer(hidden_states, attention_mask)",
     "layer_outputs = encoder_layer(inputs_embeds, attention_mask)",
     B_ENC_STACK, "stack",
     "Every encoder layer is applied to the stack's input instead of to the previous layer's output, so the stack returns only the last layer applied to the input.",
     "The loop variable confused with the function's argument.",
     ""),
    ("b.cross_attention_over_decoder_states", BA,
     "encoder_hidden_states=encoder_hidden_states,",
     "encoder_hidden_states=hidden_states,",
     B_DEC_STACK, "cross-attention",
     "The decoder stack hands each layer its own hidden states as the memory: cross-attention attends over the decoder's tokens instead of the encoder output (and fails when a memory padding mask of another length is given).",
     "A wrong variable in the decoder loop's keyword arguments.",
     ""),
    ("b.memory_padding_dropped", BA,
     "encoder_attention_mask=encoder_attention_mask,",
     "encoder_attention_mask=None,",
     B_DEC_STACK, "mask",
     "The decoder stack never passes the memory padding mask to its layers: cross-attention attends padded source positions.",
     "The expanded memory mask computed but not forwarded.",
     ""),
    ("b.out_proj_without_bias", BA,
     "self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)",
     "self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)",
     B_ALL, "parameters",
     "The attention output projection is built without a bias although the configuration gives every attention projection one: the parameter is missing.",
     "The output projection written as in models whose o_proj has no bias.",
     ""),
    # ---- paddle_vit
    ("pv.qkv_heads_tokens_swapped", PV,
     "qkv = paddle_transpose(self.qkv(x).reshape((-1, N, 3, self.num_heads, C // self.num_heads)), (2, 0, 3, 1, 4))",
     "qkv = paddle_transpose(self.qkv(x).reshape((-1, N, 3, self.num_heads, C // self.num_heads)), (2, 0, 1, 3, 4))",
     V_LAYER, "heads",
     "After the fused projection is split into q, k and v, the head and token axes are not exchanged: the scores are computed between heads of one token instead of between tokens of one head.",
     "A wrong permutation in the port of Paddle's transpose.",
     ""),
    ("pv.scale_by_model_width", PV,
     "self.scale = qk_scale or head_dim**-0.5",
     "self.scale = qk_scale or dim**-0.5",
     V_LAYER, "scale",
     "The scores are multiplied by 1/sqrt(model width) instead of 1/sqrt(head width).",
     "The scale computed from the layer's width instead of the head's.",
     SCALE_BY_EMBEDDING_DIM),
    ("pv.linear_weight_transposed", PV,
     "out = x.matmul(self.weight)",
     "out = x.matmul(self.weight.T)",
     V_LAYER, "projection",
     "Every Paddle-layout linear layer multiplies by the transpose of its [in, out] weight: square layers apply the transposed map and the others fail on their shapes.",
     "A torch habit (F.linear's x W^T) carried into the port of Paddle's x W.",
     PADDLE_LINEAR_WEIGHT_LAYOUT),
    ("pv.softmax_over_heads", PV,
     "attn = F.softmax(attn.to(_at_least_float32(attn.dtype)), dim=-1).to(v.dtype)",
     "attn = F.softmax(attn.to(_at_least_float32(attn.dtype)), dim=1).to(v.dtype)",
     V_LAYER, "softmax",
     "The attention softmax normalises over the head axis instead of over the keys: each weight is divided by the sum over heads, and no row of one head sums to one.",
     "Paddle's axis=-1 ported as dim=1.",
     ""),
    ("pv.heads_merged_without_transpose", PV,
     "x = paddle_transpose(attn.matmul(v), (0, 2, 1, 3)).reshape((-1, N, C))",
     "x = attn.matmul(v).reshape((-1, N, C))",
     V_LAYER, "heads",
     "The per-head outputs [batch, heads, tokens, head width] are reshaped to [batch, tokens, width] without moving the head axis: each output token receives pieces of several tokens of one head.",
     "The transpose before the merge dropped.",
     ""),
    ("pv.mask_axes_exchanged", PV,
     "attn = attn + attn_mask",
     "attn = attn + attn_mask.transpose(-1, -2)",
     V_MASK, "mask",
     "The additive mask is added with its query and key axes exchanged: padding hides the padded queries' rows instead of the padded keys, and a causal mask lets each token see the later tokens instead of the earlier ones.",
     "A mask built [keys, queries] by a caller and transposed the wrong way in the port.",
     ""),
    ("pv.norm1_default_epsilon", PV,
     "self.norm1 = eval(norm_layer)(dim, epsilon=epsilon)",
     "self.norm1 = eval(norm_layer)(dim)",
     V_LAYER, "norm",
     "The attention sublayer's LayerNorm uses the library default epsilon 1e-5 instead of the model's 1e-6 (the feed-forward norm and the final norm keep 1e-6).",
     "The epsilon keyword not forwarded to one of the norms.",
     LAYER_NORM_EPS_1E5_1E6),
    ("pv.class_token_appended", PV,
     "x = paddle_concat((cls_tokens, x), axis=1)",
     "x = paddle_concat((x, cls_tokens), axis=1)",
     V_VIT, "class token",
     "The class token is put after the patches instead of before them: it receives the last row of the position table, and the head reads the first patch token.",
     "The concatenation order reversed.",
     ""),
    ("pv.pooling_mean_of_all_tokens", PV,
     "return x[:, 0]",
     "return x.mean(1)",
     V_VIT, "pooling",
     "The head is fed the average of every token, the class token included, instead of the class token.",
     "Global average pooling from another backbone's forward_features, kept with the class token in the average.",
     ""),
    ("pv.patches_reshaped_not_transposed", PV,
     "x = paddle_transpose(self.proj(x).flatten(2), (0, 2, 1))",
     "x = self.proj(x).flatten(2).reshape((B, -1, self.proj.out_channels))",
     V_PATCH, "patchify",
     "The convolution's [batch, width, patches] output is reshaped to [batch, patches, width] instead of transposed: each token is a slice of consecutive values of one channel over several patches, not one patch's embedding.",
     "reshape used where a transpose is needed.",
     ""),
    ("pv.attention_residual_after_norm", PV,
     "x = x + self.drop_path(self.attn(self.norm1(x), attn_mask))",
     "x = self.norm1(x) + self.drop_path(self.attn(self.norm1(x), attn_mask))",
     V_LAYER, "residual",
     "The attention sublayer's residual adds its output to the normalised input instead of to the block's input.",
     "The norm applied to the residual term too.",
     ""),
    ("pv.mlp_reads_norm1", PV,
     "x = x + self.drop_path(self.mlp(self.norm2(x)))",
     "x = x + self.drop_path(self.mlp(self.norm1(x)))",
     V_LAYER, "norm",
     "The feed-forward sublayer's input is normalised with the attention sublayer's norm parameters; the second norm is never used.",
     "A copy-paste slip between the two residual lines.",
     ""),
    ("pv.gelu_tanh_approximation", PV,
     "self.act = act_layer()",
     "self.act = act_layer(approximate=\"tanh\")",
     V_LAYER, "ffn",
     "The MLP's GELU is the tanh approximation instead of the exact (erf) GELU.",
     "Paddle's GELU(approximate=True) carried into the port as torch's tanh approximation.",
     ""),
    ("pv.qkv_without_bias", PV,
     "self.qkv = Linear(dim, dim * 3, bias_attr=qkv_bias)",
     "self.qkv = Linear(dim, dim * 3, bias_attr=False)",
     V_LAYER, "parameters",
     "The fused q, k, v projection is built without a bias although the model is configured with one: the bias parameters are missing.",
     "PaddleClas' default qkv_bias=False hard-coded in the port.",
     ""),
    ("pv.final_norm_dropped", PV,
     "x = self.norm(x)",
     "# x = self.norm(x)",
     V_VIT, "norm",
     "The model's final LayerNorm is never applied: the head reads the class token straight from the last block's residual stream.",
     "A line commented out while comparing intermediate features, and left so.",
     ""),
    ("pv.last_block_skipped", PV,
     "for blk in self.blocks:",
     "for blk in self.blocks[:-1]:",
     V_VIT, "stack",
     "The model applies every block but the last before the final norm and the head.",
     "A loop slice from code returning the penultimate layer's features.",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why it stays correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.gj_scale_as_power", GJ,
     "self.scale_attn = math.sqrt(self.head_dim)",
     "self.scale_attn = self.head_dim ** 0.5",
     GJ_ATTN,
     "The same square root of the head width, written as a power."),
    ("control.gj_flatten_as_reshape", GJ,
     "return x.flatten(-2)  # in einsum notation: rearrange(x, '... d j -> ... (d j)')",
     "return x.reshape(*x.shape[:-2], -1)",
     GJ_ATTN,
     "Merging the last two axes by reshape is the same as flatten(-2)."),
    ("control.gj_value_cache_cat_list", GJ,
     "value = torch.cat((past_value, value), dim=-2)",
     "value = torch.cat([past_value, value], dim=2)",
     GJ_ATTN,
     "The value cache is [batch, heads, length, head width]: axis 2 is axis -2, and a list concatenates like a tuple."),
    ("control.b_transpose_as_permute", BA,
     "attn_output = attn_output.transpose(1, 2)",
     "attn_output = attn_output.permute(0, 2, 1, 3)",
     B_ALL,
     "On a four-axis tensor, exchanging axes 1 and 2 is the permutation (0, 2, 1, 3)."),
    ("control.b_scaling_reciprocal_sqrt", BA,
     "self.scaling = self.head_dim**-0.5",
     "self.scaling = 1.0 / math.sqrt(self.head_dim)",
     B_ALL,
     "The same factor 1/sqrt(d_head), computed as a reciprocal of the square root."),
    ("control.b_mask_fill_by_comparison", BA,
     "return inverted_mask.masked_fill(inverted_mask.to(torch.bool), torch.finfo(dtype).min)",
     "return inverted_mask.masked_fill(inverted_mask > 0.5, torch.finfo(dtype).min)",
     B_ALL,
     "The inverted mask holds only 0 and 1, so '> 0.5' selects the same entries as the cast to bool."),
    ("control.pv_unbind_qkv", PV,
     "q, k, v = qkv[0], qkv[1], qkv[2]",
     "q, k, v = qkv.unbind(0)",
     V_LAYER,
     "unbind(0) returns the three slices of the first axis in order."),
    ("control.pv_class_token_repeat", PV,
     "cls_tokens = self.cls_token.expand((B, -1, -1))",
     "cls_tokens = self.cls_token.repeat(B, 1, 1)",
     V_VIT,
     "repeat copies the class token B times where expand makes a view of it: the same values."),
]

# Phase 2 only: bug id -> (expected codes, class without a code), from each bug's frozen
# class and the one-line meanings of SPEC.md Appendix C (PROTOCOL.md, "Phase 2: codes").
PHASE_2: dict[str, tuple[list[str], str]] = {
    "gj.rotate_every_two_inverted": (["rope.rotation_inverted"], ""),
    "gj.sin_table_tiled_not_interleaved": (["rope.table_layout_mismatch", "rope.not_norm_preserving", "rope.not_relative"], ""),
    "gj.rotary_table_by_call_index": (["rope.positions_ignored", "cache.rope_offset_wrong"], ""),
    "gj.positions_restart_at_zero": (["cache.rope_offset_wrong"], ""),
    "gj.causal_rows_from_top": (["cache.causal_top_left", "mask.causal_alignment_top_left"], ""),
    "gj.causal_where_inverted": (["mask.polarity_inverted", "mask.causal_leak", "mask.causal_diagonal_hidden"], ""),
    "gj.scale_by_embed_dim": (["attention.scale_wrong"], ""),
    "gj.padding_mask_not_inverted": (["mask.polarity_inverted"], ""),
    "gj.cache_keys_after_new": (["cache.keys_prepended"], ""),
    "gj.cache_values_hold_keys": (["attention.value_uses_key_projection"], ""),
    "gj.merge_heads_width_major": (["attention.heads_merged_wrong_order"], ""),
    "gj.queries_not_rotated": (["rope.applied_to_wrong_tensors", "rope.not_relative"], ""),
    "gj.gelu_tanh_factor_not_square_rooted": (["ffn.activation_wrong"], ""),
    "gj.mlp_reads_attention_norm": (["params.read_from_other_module", "params.unused"], ""),
    "gj.residual_after_ln_1": (["blocks.residual_after_norm"], ""),
    "gj.logits_cast_to_float32": (["numerics.float32_island", "numerics.float64_precision_lost"], ""),
    "gj.value_from_key_projection": (["attention.value_uses_key_projection", "params.unused"], ""),
    "b.scaling_exponent_sign": (["attention.scale_inverted"], ""),
    "b.scaled_twice": (["attention.scale_wrong"], ""),
    "b.split_heads_by_view": (["attention.heads_split_wrong_order"], ""),
    "b.padding_mask_not_inverted": (["mask.polarity_inverted"], ""),
    "b.padding_mask_over_queries": (["mask.applied_to_queries"], ""),
    "b.causal_diagonal_masked": (["mask.causal_diagonal_hidden"], ""),
    "b.keys_from_value_projection": (["attention.qkv_order_wrong", "params.unused"], ""),
    "b.cross_attention_norm_reused": (["params.read_from_other_module", "params.unused"], ""),
    "b.encoder_attention_norm_dropped": (["blocks.norm_bypassed", "params.unused"], ""),
    "b.ffn_residual_from_before_cross_attention": (["blocks.residual_from_layer_input"], ""),
    "b.gelu_tanh_approximation": (["ffn.activation_gelu_tanh"], ""),
    "b.fc2_dropout_always_on": (["dropout.active_in_eval"], ""),
    "b.encoder_layers_read_stack_input": (["blocks.layers_not_chained", "params.unused"], ""),
    "b.cross_attention_over_decoder_states": (["attention.cross_keys_from_decoder"], ""),
    "b.memory_padding_dropped": (["mask.ignored"], ""),
    "b.out_proj_without_bias": (["params.count_wrong", "params.names_differ"], ""),
    "pv.qkv_heads_tokens_swapped": (["attention.heads_split_wrong_order"], ""),
    "pv.scale_by_model_width": (["attention.scale_wrong"], ""),
    "pv.linear_weight_transposed": (["params.weight_reshaped"], ""),
    "pv.softmax_over_heads": (["attention.softmax_axis_wrong", "attention.weights_not_normalized"], ""),
    "pv.heads_merged_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "pv.mask_axes_exchanged": (["mask.applied_to_queries", "mask.causal_leak"], ""),
    "pv.norm1_default_epsilon": (["layer_norm.eps_wrong"], ""),
    "pv.class_token_appended": (["vit.pooling_wrong_token"], ""),
    "pv.pooling_mean_of_all_tokens": (["vit.pooling_mean_with_cls"], ""),
    "pv.patches_reshaped_not_transposed": (["vit.patch_order"], ""),
    "pv.attention_residual_after_norm": (["blocks.residual_after_norm"], ""),
    "pv.mlp_reads_norm1": (["params.read_from_other_module", "params.unused"], ""),
    "pv.gelu_tanh_approximation": (["ffn.activation_gelu_tanh"], ""),
    "pv.qkv_without_bias": (["params.count_wrong", "params.names_differ"], ""),
    "pv.final_norm_dropped": (["blocks.final_norm_missing", "params.unused"], ""),
    "pv.last_block_skipped": (["params.unused"], ""),
}


def locate(impl: str, original: str) -> tuple[int, str]:
    """The 1-based line number and the full text of the one line whose stripped text is
    ``original``."""
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == original]
    if len(hits) != 1:
        raise ValueError(f"{impl}.py: {original!r} occurs {len(hits)} times")
    return hits[0] + 1, lines[hits[0]]


def indent_like(line: str, replacement: str) -> str:
    return line[: len(line) - len(line.lstrip())] + replacement


def bug_rows() -> list[dict[str, Any]]:
    rows = []
    for id_, impl, original, replacement, components, family, class_, description, report in BUGS:
        number, line = locate(impl, original)
        codes, without = PHASE_2.get(id_, ([], ""))
        rows.append({
            "id": id_, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": line, "replacement": indent_like(line, replacement),
            "components": list(components), "family": family, "class": class_,
            "description": description, "public_report": report,
            "expected_codes": list(codes), "class_without_code": without,
        })
    return rows


def control_rows() -> list[dict[str, Any]]:
    rows = []
    for id_, impl, original, replacement, components, why in CONTROLS:
        number, line = locate(impl, original)
        rows.append({
            "id": id_, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": line, "replacement": indent_like(line, replacement),
            "components": list(components), "why_correct": why,
        })
    return rows


def main() -> None:
    unknown = set(PHASE_2) - {b[0] for b in BUGS}
    if unknown:
        raise ValueError(f"PHASE_2 names unknown bugs: {sorted(unknown)}")
    for name, rows in (("bugs.json", bug_rows()), ("controls.json", control_rows())):
        text = json.dumps(rows, indent=1, ensure_ascii=False) + "\n"
        (HERE / name).write_text(text, encoding="utf-8")
    print(f"{len(BUGS)} bugs, {len(CONTROLS)} controls written")


if __name__ == "__main__":
    main()
