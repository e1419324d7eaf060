# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twenty-second blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the replacement; the line number and the indentation are taken from the frozen
implementation files, so the JSON tables always match them (a replacement that starts with
spaces is indented that much further than the original line). Phase 2 fills each bug's
expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind22/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind22"

IL = "internlm2_decoder"
WH = "whisper_seq2seq"
UN = "unshuffle_vit"
I_NORM = ["rms_norm", "decoder_block", "causal_lm"]
I_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
I_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
I_BLOCK = ["decoder_block", "causal_lm"]
I_LM = ["causal_lm"]
W_CORE = ["mha", "encoder_layer", "decoder_layer", "encoder", "decoder"]
W_BLOCKS = ["encoder_layer", "decoder_layer", "encoder", "decoder"]
W_CROSS = ["decoder_layer", "decoder"]
W_GLUE_CAUSAL = ["encoder_layer", "decoder_layer", "encoder"]
W_ENC = ["encoder"]
W_DEC = ["decoder"]
U_PATCH = ["patch_embed", "vit"]
U_LAYER = ["encoder_layer", "encoder", "vit"]
U_MASK = ["encoder_layer", "encoder"]
U_ENC = ["encoder", "vit"]
U_VIT = ["vit"]

GQA_TILE = "https://github.com/onnx/onnx/pull/7274"
PER_GROUP_WQKV = "https://github.com/epfLLM/Megatron-LLM/pull/45"
ROPE_THETA_DROPPED = "https://github.com/sgl-project/SpecForge/issues/265"
POSITIONS_NO_PAST = "https://github.com/huggingface/transformers/pull/15751"
SWIGLU_ORDER = "https://github.com/ml-explore/mlx-lm/pull/767"
INV_FREQ_ROUNDED = "https://github.com/sgl-project/sglang-jax/issues/1472"
MERGE_NO_PERMUTE = "https://github.com/jsbaan/transformer-from-scratch/pull/6"
BH_UNFLATTEN = "https://github.com/gazelle93/Transformer-Various-Positional-Encoding/issues/1"
DIAGONAL_MASKED = "https://github.com/RVC-Boss/GPT-SoVITS/issues/965"
CLS_NO_POS = "https://github.com/labmlai/annotated_deep_learning_paper_implementations/pull/221"
F_DROPOUT_EVAL = "https://github.com/BogiHsu/Tacotron2-PyTorch/issues/8"
SOFTMAX_DIM = "https://github.com/nerminnuraydogan/vision-transformer/issues/1"
PAD_POLARITY = "https://github.com/lucidrains/feedback-transformer-pytorch/issues/6"

# (id, impl, original (stripped), replacement, components, family, class, description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- internlm2_decoder
    ("i.key_from_value_slot", IL,
     "key_states = qkv_states[..., -2, :]",
     "key_states = qkv_states[..., -1, :]",
     I_ATTN, "fused projections",
     "keys are read from the value slot of each group of the fused projection: every key equals its value, and the key rows of the fused weight are never used",
     "Off-by-one index into the (groups + 2) axis of the fused wqkv output: the key is taken from slot -1 (the value) instead of slot -2.",
     ""),
    ("i.wqkv_slot_major_view", IL,
     "qkv_states = qkv_states.view(bsz, q_len, self.num_key_value_heads, 2 + self.num_key_value_groups, self.head_dim)",
     "qkv_states = qkv_states.view(bsz, q_len, 2 + self.num_key_value_groups, self.num_key_value_heads, self.head_dim).transpose(2, 3)",
     I_ATTN, "layouts (per-group)",
     "the fused projection's output is split as if it were slot-major (all groups' first query, then all groups' second query, ..., then all keys, then all values) while the weight is laid out group by group (each group's queries, key, value): queries, keys and values get the rows of other heads and of other projections",
     "A port that views the fused wqkv output with the slot axis before the kv-head axis, as for a checkpoint stored q|k|v-blockwise, on InternLM2's per-group layout.",
     PER_GROUP_WQKV),
    ("i.query_heads_slot_major", IL,
     "query_states = qkv_states[..., : self.num_key_value_groups, :].reshape(bsz, q_len, self.num_heads, self.head_dim)",
     "query_states = qkv_states[..., : self.num_key_value_groups, :].transpose(2, 3).reshape(bsz, q_len, self.num_heads, self.head_dim)",
     I_ATTN, "grouped-query attention",
     "query heads are numbered slot-major (query i of group j becomes head i * H_kv + j instead of j * g + i): each query head is paired with the key/value head of another group, and its output lands in another head's columns of the output projection",
     "The queries of each kv group are flattened with the slot axis outermost, as a rearrange 'b q h gs d -> b q (gs h) d' would do, instead of '(h gs)'.",
     ""),
    ("i.repeat_kv_tiled", IL,
     "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
     "hidden_states = hidden_states[:, None, :, :, :].expand(batch, n_rep, num_key_value_heads, slen, head_dim)",
     I_ATTN, "grouped-query attention",
     "key/value heads are tiled across the query heads (query head h served by key/value head h mod H_kv) instead of each being repeated in place for its own group (h // g)",
     "repeat_kv expands a new leading axis instead of one after the kv-head axis: the same as k.repeat(1, g, 1, 1), a tile instead of repeat_interleave.",
     GQA_TILE),
    ("i.rotate_half_sign", IL,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.cat((x2, -x1), dim=-1)",
     I_ATTN, "rope",
     "RoPE rotates queries and keys by -theta instead of +theta (the sign of the rotated half is on the wrong member of each pair)",
     "rotate_half returns (x2, -x1) instead of (-x2, x1), as when porting from a complex-multiply implementation with the conjugate.",
     ""),
    ("i.rope_theta_not_passed", IL,
     "self.rotary_emb = InternLM2RotaryEmbedding(self.head_dim, max_position_embeddings=self.max_position_embeddings, base=self.config.rope_theta)",
     "self.rotary_emb = InternLM2RotaryEmbedding(self.head_dim, max_position_embeddings=self.max_position_embeddings)",
     I_ATTN, "rope",
     "RoPE uses frequency base 10000 instead of the model's base 1e6 (the configured rope_theta is not passed on, the constructor default is used): every rotation frequency except the first is wrong",
     "The rotary embedding is built without base=, so the default 10000 replaces the checkpoint's rope_theta = 1e6.",
     ROPE_THETA_DROPPED),
    ("i.inv_freq_float32", IL,
     "inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim))",
     "inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2).float() / self.dim))",
     I_ATTN, "precision",
     "RoPE's inverse frequencies (and so the angle table) are computed in float32 in a float64 build, an undeclared float32 step: the angles at large positions are off by float32 rounding",
     "InternLM2's own `.float()` on the frequency exponent, kept in a float64 build: the table is float32 and cast up.",
     INV_FREQ_ROUNDED),
    ("i.positions_ignore_cache", IL,
     "position_ids = torch.arange(past_key_values_length, seq_length + past_key_values_length, dtype=torch.long, device=hidden_states.device)",
     "position_ids = torch.arange(seq_length, dtype=torch.long, device=hidden_states.device)",
     I_ATTN, "kv cache",
     "when the caller gives no position ids, the new tokens of a call on a non-empty cache are numbered from 0 instead of from the cache length, so their queries and keys are rotated at the wrong positions",
     "The default position ids forget past_key_values_length.",
     POSITIONS_NO_PAST),
    ("i.cache_keys_prepended", IL,
     "key_states = torch.cat([past_key_value[0], key_states], dim=2)",
     "key_states = torch.cat([key_states, past_key_value[0]], dim=2)",
     I_ATTN, "kv cache",
     "the new keys are put before the cached keys while the values stay in order: keys no longer line up with their values or with the mask's key positions",
     "Argument order of the key concatenation swapped (the value line is right).",
     ""),
    ("i.causal_mask_hides_diagonal", IL,
     "mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)",
     "mask.masked_fill_(mask_cond < mask_cond.view(mask.size(-1), 1), 0)",
     I_ATTN, "masks",
     "the causal mask also masks the diagonal: a token cannot attend to itself (and the first token has no key at all)",
     "The +1 of _make_causal_mask dropped: strictly-earlier keys only.",
     DIAGONAL_MASKED),
    ("i.past_block_after_causal", IL,
     "mask = torch.cat([torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device), mask], dim=-1)",
     "mask = torch.cat([mask, torch.zeros(tgt_len, past_key_values_length, dtype=dtype, device=device)], dim=-1)",
     I_ATTN, "masks",
     "on a call over a non-empty cache the causal triangle is laid over the first keys and the open block over the last ones: the new tokens' causal mask is aligned top-left instead of bottom-right, so a chunk's tokens see later tokens of the chunk and miss some cached ones",
     "The zero block for the cached keys is concatenated after the causal block instead of before it.",
     ""),
    ("i.padding_mask_not_inverted", IL,
     "inverted_mask = 1.0 - expanded_mask",
     "inverted_mask = expanded_mask",
     I_ATTN, "masks",
     "the padding keep-mask is used with the wrong polarity: real tokens are masked and pads are attended",
     "_expand_mask forgets the 1 - mask: the 1 = token, 0 = pad attention mask is turned into a bias on the tokens.",
     PAD_POLARITY),
    ("i.rms_centred_variance", IL,
     "variance = hidden_states.pow(2).mean(-1, keepdim=True)",
     "variance = hidden_states.var(-1, keepdim=True, unbiased=False)",
     I_NORM, "normalisation",
     "RMSNorm divides by the standard deviation about the mean instead of the root mean square of x (the statistic subtracts the mean, the numerator does not)",
     "The mean of squares replaced by the variance, as when porting from a LayerNorm.",
     ""),
    ("i.rms_eps_outside_sqrt", IL,
     "hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)",
     "hidden_states = hidden_states / (torch.sqrt(variance) + self.variance_epsilon)",
     I_NORM, "normalisation",
     "RMSNorm adds epsilon to the root mean square after the square root instead of to the mean square under it",
     "rsqrt(mean(x^2) + eps) rewritten as 1 / (sqrt(mean(x^2)) + eps), as in some LayerNorm tutorials.",
     ""),
    ("i.swiglu_gate_up_swapped", IL,
     "down_proj = self.w2(self.act_fn(self.w1(x)) * self.w3(x))",
     "down_proj = self.w2(self.act_fn(self.w3(x)) * self.w1(x))",
     I_FFN, "feed-forward",
     "the gated FFN applies SiLU to the up projection and multiplies by the gate projection (gate and up swapped)",
     "w1 and w3 exchanged inside the SwiGLU expression.",
     SWIGLU_ORDER),
    ("i.ffn_residual_normalised", IL,
     "hidden_states = self.ffn_norm(hidden_states)",
     "residual = hidden_states = self.ffn_norm(hidden_states)",
     I_BLOCK, "residual/norm placement",
     "the FFN sublayer's residual is taken from the normalised input instead of the un-normalised residual stream",
     "A chained assignment makes the residual the ffn_norm output.",
     ""),
    ("i.output_uses_embedding", IL,
     "logits = self.output(hidden_states)",
     "logits = F.linear(hidden_states, self.model.tok_embeddings.weight)",
     I_LM, "weight tying",
     "the logits are computed with the token embedding matrix although the model is untied and has its own output matrix (the output matrix is unused)",
     "A port from a tied-embedding decoder keeps F.linear(x, wte.weight).",
     ""),
    ("i.merge_without_transpose", IL,
     "attn_output = attn_output.transpose(1, 2).contiguous()",
     "attn_output = attn_output.contiguous()",
     I_ATTN, "head split/merge",
     "the heads are merged by reshaping the [B, H, L, d] output straight to [B, L, D] without moving the head axis behind the sequence axis: each row mixes several positions of one head",
     "The transpose before the merge reshape dropped.",
     MERGE_NO_PERMUTE),
    # ---- whisper_seq2seq
    ("w.key_not_scaled", WH,
     "k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale",
     "k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1)",
     W_CORE, "attention scale",
     "only the queries are scaled by d_head^-1/4, the keys not at all: the scores are divided by d_head^(1/4) instead of sqrt(d_head)",
     "Of whisper's split scale (q and k each times d^-0.25) the key's factor is lost in a refactor.",
     ""),
    ("w.scale_from_n_state", WH,
     "scale = (n_state // self.n_head) ** -0.25",
     "scale = n_state ** -0.25",
     W_CORE, "attention scale",
     "the split scale is computed from the model width instead of the head width: the scores are divided by sqrt(d_model) instead of sqrt(d_head)",
     "The // self.n_head dropped from the scale.",
     ""),
    ("w.key_heads_strided", WH,
     "k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale",
     "k = k.view(*k.shape[:2], -1, self.n_head).permute(0, 3, 2, 1) * scale",
     W_CORE, "head split/merge",
     "the keys are split into heads with a stride (channel c goes to head c mod H) while the queries and values are split into contiguous blocks: each query head is scored against channels of other heads' keys",
     "The key view written (t, d, h) and permuted to (b, h, d, t): the shape fits, the channel grouping does not.",
     ""),
    ("w.heads_merged_d_major", WH,
     "return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2), qk.detach()",
     "return (w @ v).permute(0, 2, 3, 1).flatten(start_dim=2), qk.detach()",
     W_CORE, "head split/merge",
     "the heads are merged in the wrong channel order (channel d * H + h instead of h * d_head + d): the output projection reads every head's values in the wrong columns",
     "The merge permute puts the head axis last before flattening.",
     ""),
    ("w.softmax_over_queries", WH,
     "w = F.softmax(qk, dim=-1).to(q.dtype)",
     "w = F.softmax(qk, dim=-2).to(q.dtype)",
     W_CORE, "softmax",
     "the attention softmax normalises over the queries instead of over the keys",
     "softmax over dim -2 of the (b, h, t_q, t_k) scores.",
     SOFTMAX_DIM),
    ("w.decoder_mask_hides_diagonal", WH,
     "mask = torch.empty(n_ctx, n_ctx).fill_(-np.inf).triu_(1)",
     "mask = torch.empty(n_ctx, n_ctx).fill_(-np.inf).triu_(0)",
     W_DEC, "masks",
     "the decoder's causal mask also masks the diagonal: a token cannot attend to itself and the first token has no key at all",
     "triu_(0) instead of triu_(1) for the TextDecoder's mask buffer.",
     DIAGONAL_MASKED),
    ("w.causal_triangle_flipped", WH,
     "buffer = causal_buffer if causal_buffer is not None else torch.empty(n, n).fill_(-np.inf).triu_(1)",
     "buffer = causal_buffer if causal_buffer is not None else torch.empty(n, n).fill_(-np.inf).tril_(-1)",
     W_GLUE_CAUSAL, "masks",
     "the causal mask is flipped: -inf below the diagonal instead of above, so each query sees itself and the later keys instead of the earlier ones",
     "tril_(-1) in place of triu_(1) when the causal mask is built for a layer.",
     ""),
    ("w.memory_normalised", WH,
     "x = x + self.cross_attn(self.cross_attn_ln(x), xa, mask=xa_mask, kv_cache=kv_cache)[0]",
     "x = x + self.cross_attn(self.cross_attn_ln(x), self.cross_attn_ln(xa), mask=xa_mask, kv_cache=kv_cache)[0]",
     W_CROSS, "residual/norm placement",
     "the encoder memory is normalised with the cross-attention's norm before it gives keys and values (the decoder layer must use the memory as it comes)",
     "The cross-attention LayerNorm applied to xa as well as to x.",
     ""),
    ("w.cross_attention_mask_dropped", WH,
     "x = x + self.cross_attn(self.cross_attn_ln(x), xa, mask=xa_mask, kv_cache=kv_cache)[0]",
     "x = x + self.cross_attn(self.cross_attn_ln(x), xa, kv_cache=kv_cache)[0]",
     W_CROSS, "masks",
     "the memory padding mask is not applied in cross-attention: target tokens attend padded encoder positions",
     "Whisper's own call (audio has no padding) kept where a padded memory is passed.",
     ""),
    ("w.mlp_gelu_tanh", WH,
     "self.mlp = nn.Sequential(Linear(n_state, n_mlp), nn.GELU(), Linear(n_mlp, n_state))",
     "self.mlp = nn.Sequential(Linear(n_state, n_mlp), nn.GELU(approximate=\"tanh\"), Linear(n_mlp, n_state))",
     W_BLOCKS, "feed-forward",
     "the MLP uses the tanh approximation of GELU instead of the exact GELU",
     "approximate='tanh' copied from a GPT-2 style MLP.",
     ""),
    ("w.mlp_post_norm", WH,
     "x = x + self.mlp(self.mlp_ln(x))",
     "x = self.mlp_ln(x + self.mlp(x))",
     W_BLOCKS, "residual/norm placement",
     "the MLP sublayer is post-LN (norm after the residual add, on the stream) in a pre-LN block",
     "The MLP line rewritten in the 2017 post-LN form.",
     ""),
    ("w.ln_post_dropped", WH,
     "x = self.ln_post(x)",
     "x = x",
     W_ENC, "residual/norm placement",
     "the pre-LN encoder stack does not end with its final norm (ln_post is skipped)",
     "The encoder's final LayerNorm lost in a refactor of the stem.",
     ""),
    ("w.decoder_ln_in_loop", WH,
     "x = self.ln(x)",
     "    x = self.ln(x)",
     W_DEC, "residual/norm placement",
     "the decoder's final norm is applied after every block (inside the loop) instead of once after the last block",
     "An indentation slip puts x = self.ln(x) in the block loop (the blank line does not end the loop body).",
     ""),
    ("w.layernorm_float32", WH,
     "wide = torch.promote_types(x.dtype, torch.float32)",
     "wide = torch.float32",
     W_BLOCKS, "precision",
     "LayerNorm is computed in float32 in a float64 build, an undeclared float32 step",
     "Whisper's literal x.float() in LayerNorm, kept in a float64 build.",
     ""),
    ("w.value_from_key_projection", WH,
     "v = self.value(x if xa is None else xa)",
     "v = self.key(x if xa is None else xa)",
     W_BLOCKS, "projections",
     "the values are computed with the key projection (the value projection is unused)",
     "Copy-paste of the key line.",
     ""),
    ("w.padding_bias_polarity", WH,
     "return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, -np.inf)[:, None, None, :]",
     "return torch.zeros(keep.shape, dtype=dtype).masked_fill(keep, -np.inf)[:, None, None, :]",
     W_CORE, "masks",
     "the padding keep-mask is used with the wrong polarity: real tokens get -inf and pads are attended",
     "The keep-mask is treated as a pad mask (True = pad) when turned into whisper's additive form.",
     PAD_POLARITY),
    # ---- unshuffle_vit
    ("u.unshuffle_transposed_image", UN,
     "x = F.pixel_unshuffle(images, self.patch_size)  # [B, C*p*p, H/p, W/p], channels (c, p1, p2)",
     "x = F.pixel_unshuffle(images.transpose(2, 3), self.patch_size)  # [B, C*p*p, H/p, W/p], channels (c, p1, p2)",
     U_PATCH, "vit patchify",
     "the image is transposed before patching: the patch grid is read column by column and the pixels inside each patch are transposed",
     "images.transpose(2, 3) slipped in from an (N, C, W, H) data pipeline.",
     ""),
    ("u.tokens_reshaped_not_transposed", UN,
     "x = x.flatten(2).transpose(1, 2)  # [B, N, C*p*p], patches row-major",
     "x = x.flatten(2).reshape(x.shape[0], -1, x.shape[1])  # [B, N, C*p*p], patches row-major",
     U_PATCH, "layouts",
     "the [B, C*p*p, N] patch tensor is reshaped instead of transposed to [B, N, C*p*p]: each token gets values of several patches and channels",
     "reshape in place of transpose(1, 2): the shape fits, the memory order does not.",
     ""),
    ("u.grid_column_major", UN,
     "x = x.flatten(2).transpose(1, 2)  # [B, N, C*p*p], patches row-major",
     "x = x.transpose(2, 3).flatten(2).transpose(1, 2)  # [B, N, C*p*p], patches row-major",
     U_PATCH, "vit patchify",
     "the patch grid is flattened column-major: token n holds patch (n mod W/p, n div W/p) instead of (n div W/p, n mod W/p), so the position rows go to the wrong patches",
     "The grid axes swapped before flattening (the patches themselves are right).",
     ""),
    ("u.cls_appended", UN,
     "x = torch.cat((cls_tokens, x), dim=1)",
     "x = torch.cat((x, cls_tokens), dim=1)",
     U_VIT, "vit class token",
     "the class token is appended after the patches instead of prepended: position rows shift by one and the head reads the first patch token",
     "Concatenation order swapped.",
     ""),
    ("u.cls_without_position", UN,
     "x = self.pos_drop(x + self.pos_embed)",
     "x = self.pos_drop(torch.cat((x[:, :1], x[:, 1:] + self.pos_embed[:, 1:]), dim=1))",
     U_VIT, "vit position embedding",
     "the class token receives no position embedding row (only the patch tokens do)",
     "Positions added to the patch tokens only, as when they are added before the class token is prepended.",
     CLS_NO_POS),
    ("u.pool_mean_with_cls", UN,
     "return self.head(x[:, 0])",
     "return self.head(x.mean(dim=1))",
     U_VIT, "pooling",
     "the head reads the mean over all tokens, the class token included, instead of the class token",
     "Global average pooling written over every token while the model is a class-token ViT.",
     ""),
    ("u.baddbmm_alpha_lost", UN,
     "scores = torch.baddbmm(torch.empty(B * H, N, N, dtype=q.dtype, device=q.device), q, k.transpose(1, 2), beta=0, alpha=self.scale)",
     "scores = torch.baddbmm(torch.empty(B * H, N, N, dtype=q.dtype, device=q.device), q, k.transpose(1, 2), beta=0)",
     U_LAYER, "attention scale",
     "the unmasked path computes unscaled scores q k^T (the 1/sqrt(d_head) factor, passed as baddbmm's alpha, is lost)",
     "alpha= dropped when the matmul was rewritten as baddbmm.",
     ""),
    ("u.mask_bias_beta_zero", UN,
     "scores = torch.baddbmm(bias, q, k.transpose(1, 2), beta=1, alpha=self.scale)",
     "scores = torch.baddbmm(bias, q, k.transpose(1, 2), beta=0, alpha=self.scale)",
     U_MASK, "masks",
     "the additive mask is multiplied by zero (baddbmm's beta = 0): padding and causal masks have no effect",
     "beta=0 copied from the unmasked call.",
     ""),
    ("u.qkv_head_major", UN,
     "qkv = self.qkv(x).reshape(B, N, 3, H, d).permute(2, 0, 3, 1, 4)",
     "qkv = self.qkv(x).reshape(B, N, H, 3, d).permute(3, 0, 2, 1, 4)",
     U_LAYER, "fused projections",
     "the fused qkv output is read head-major (per head: q, k, v) instead of as q, k, v blocks: queries, keys and values get rows of the other projections",
     "The fused axis split as (H, 3) instead of (3, H), as for a checkpoint laid out per head.",
     ""),
    ("u.bh_axis_heads_major", UN,
     "out = out.view(B, H, N, d).transpose(1, 2).reshape(B, N, C)",
     "out = out.view(H, B, N, d).permute(1, 2, 0, 3).reshape(B, N, C)",
     U_LAYER, "layouts",
     "the (batch * heads) axis is unflattened heads-major instead of batch-major: an image's output takes heads computed for other images of the batch",
     "The flattened b * H + h index read back as h * B + b.",
     BH_UNFLATTEN),
    ("u.heads_merged_without_transpose", UN,
     "out = out.view(B, H, N, d).transpose(1, 2).reshape(B, N, C)",
     "out = out.view(B, H, N, d).reshape(B, N, C)",
     U_LAYER, "head split/merge",
     "the heads are merged without moving the head axis behind the sequence axis: each token's row mixes several positions of one head",
     "The transpose before the merge reshape dropped.",
     MERGE_NO_PERMUTE),
    ("u.attention_dropout_functional", UN,
     "attn = self.attn_drop(attn)",
     "attn = F.dropout(attn, p=0.1)",
     U_LAYER, "dropout",
     "dropout on the attention weights stays active in evaluation mode (functional dropout with its default training=True)",
     "The dropout module replaced by F.dropout without training=self.training.",
     F_DROPOUT_EVAL),
    ("u.final_norm_default_eps", UN,
     "self.norm = nn.LayerNorm(dim, eps=eps)",
     "self.norm = nn.LayerNorm(dim)",
     U_ENC, "normalisation",
     "the final LayerNorm uses eps 1e-5 instead of the model's 1e-6",
     "eps= forgotten on the final norm: PyTorch's default replaces the model's.",
     ""),
    ("u.attention_residual_normalised", UN,
     "x = x + self.attn(self.norm1(x), attn_bias)",
     "x = self.norm1(x) + self.attn(self.norm1(x), attn_bias)",
     U_LAYER, "residual/norm placement",
     "the attention sublayer's residual is taken from the normalised input instead of the un-normalised stream",
     "The residual written on the normed tensor.",
     ""),
    ("u.cls_token_zeros", UN,
     "cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)",
     "cls_tokens = torch.zeros_like(x[:, :1])",
     U_VIT, "vit class token",
     "the class token is a zero vector instead of the learned class token (the parameter is unused)",
     "A zero placeholder left from a refactor of the class token.",
     ""),
    ("u.causal_one_ahead", UN,
     "keep = keep & torch.ones(N, N, dtype=torch.bool).tril()",
     "keep = keep & torch.ones(N, N, dtype=torch.bool).tril(1)",
     U_MASK, "masks",
     "the causal mask is off by one: each query also sees the next key",
     "tril(1) instead of tril() when the causal keep-mask is built.",
     ""),
]

# (id, impl, original (stripped), replacement, components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.i_repeat_interleave", IL,
     "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
     "hidden_states = hidden_states.repeat_interleave(n_rep, dim=1).view(batch, num_key_value_heads, n_rep, slen, head_dim)",
     I_ATTN,
     "repeat_interleave along the head axis repeats each kv head in place, the same [B, H_kv, g, L, d] tensor the expand gives."),
    ("control.i_rotate_half_stack", IL,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.stack((-x2, x1), dim=-2).flatten(-2)",
     I_ATTN,
     "stacking the halves on a new axis before the last and flattening lays them out -x2 then x1, as the concatenation does."),
    ("control.i_causal_cond_broadcast", IL,
     "mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)",
     "mask.masked_fill_(mask_cond[None, :] <= mask_cond[:, None], 0)",
     I_ATTN,
     "j < i + 1 is j <= i for integers: the same keys are opened."),
    ("control.w_key_permute_transpose", WH,
     "k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale",
     "k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 1, 3).transpose(-1, -2) * scale",
     W_CORE,
     "permute(0, 2, 1, 3) then transposing the last two axes is permute(0, 2, 3, 1)."),
    ("control.w_merge_transpose_reshape", WH,
     "return (w @ v).permute(0, 2, 1, 3).flatten(start_dim=2), qk.detach()",
     "return (w @ v).transpose(1, 2).reshape(n_batch, n_ctx, -1), qk.detach()",
     W_CORE,
     "transpose(1, 2) is permute(0, 2, 1, 3), and reshaping to (n_batch, n_ctx, -1) flattens the same two last axes."),
    ("control.u_baddbmm_zeros", UN,
     "scores = torch.baddbmm(torch.empty(B * H, N, N, dtype=q.dtype, device=q.device), q, k.transpose(1, 2), beta=0, alpha=self.scale)",
     "scores = torch.baddbmm(torch.zeros(B * H, N, N, dtype=q.dtype, device=q.device), q, k.transpose(1, 2), beta=0, alpha=self.scale)",
     U_LAYER,
     "with beta = 0 baddbmm ignores its input, empty or zero."),
    ("control.u_unshuffle_by_reshape", UN,
     "x = F.pixel_unshuffle(images, self.patch_size)  # [B, C*p*p, H/p, W/p], channels (c, p1, p2)",
     "x = images.reshape(images.shape[0], self.in_chans, images.shape[2] // self.patch_size, self.patch_size, images.shape[3] // self.patch_size, self.patch_size).permute(0, 1, 3, 5, 2, 4).flatten(1, 3)",
     U_PATCH,
     "[B, C, h, p, w, p] permuted to [B, C, p, p, h, w] and flattened over (C, p, p) is pixel_unshuffle's (c, p1, p2) channel order."),
    ("control.u_cls_repeat", UN,
     "cls_tokens = self.cls_token.expand(x.shape[0], -1, -1)",
     "cls_tokens = self.cls_token.repeat(x.shape[0], 1, 1)",
     U_VIT,
     "repeat copies the class token for each image, expand views it: the same values."),
]

# Phase 2: bug id -> (expected codes, class without code). Empty in phase 1.
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, original: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == original]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {original!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line[: len(line) - len(line.lstrip())]


def bug_rows() -> list[dict[str, Any]]:
    rows = []
    for bug_id, impl, original, replacement, components, family, klass, description, report in BUGS:
        number, indent = _locate(impl, original)
        codes, without = PHASE_2.get(bug_id, ([], ""))
        rows.append({
            "id": bug_id, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": indent + original, "replacement": indent + replacement,
            "components": components, "family": family, "class": klass,
            "description": description, "public_report": report,
            "expected_codes": codes, "class_without_code": without,
        })
    return rows


def control_rows() -> list[dict[str, Any]]:
    rows = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        number, indent = _locate(impl, original)
        rows.append({
            "id": control_id, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": indent + original, "replacement": indent + replacement,
            "components": components, "why_correct": why,
        })
    return rows


def main() -> None:
    (HERE / "bugs.json").write_text(json.dumps(bug_rows(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(control_rows(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
