# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the eleventh blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them.

    python tests/blind11/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind11"

QW = "qwen2_hf"
LC = "llama2c_flat"
DV = "dinov2_vit"
Q_NORM = ["rms_norm", "decoder_block", "causal_lm"]
Q_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
Q_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
Q_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
Q_BLOCK = ["decoder_block", "causal_lm"]
Q_LM = ["causal_lm"]
L_NORM = ["rms_norm", "decoder_block", "causal_lm"]
L_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
L_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
L_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
L_BLOCK = ["decoder_block", "causal_lm"]
L_LM = ["causal_lm"]
D_PATCH = ["patch_embed", "vit"]
D_LAYER = ["encoder_layer", "encoder", "vit"]
D_MASK = ["encoder_layer", "encoder"]
D_VIT = ["vit"]

CANDLE_POS = "https://github.com/huggingface/candle/issues/2286"
FP16_FILL = "https://github.com/pytorch/benchmark/pull/794"
GQA_TILE = "https://github.com/onnx/onnx/pull/7274"
CHUNK_MASK = "https://github.com/hyprstream/hyprstream/pull/1521"
CACHE_POS = "https://github.com/huggingface/transformers/pull/37403"
ROPE_LAYOUT = "https://github.com/NeuraLegion/shainet/pull/111"
RMS_UPCAST = "https://github.com/jingyaogong/minimind/issues/301"
RMS_EPS = "https://github.com/apache/tvm/pull/15856"
LLAMA2C_ROPE = "https://github.com/srush/llama2.rs/pull/21"
DROP_PATH = "https://github.com/WangFeng18/Swin-Transformer/issues/7"
ROPE_AXIS = "https://github.com/mlfoundations/open_lm/issues/4"
NO_MASK_PREFILL = "https://github.com/Mikyx-1/TinyLLM/issues/17"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- qwen2_hf ------------------------------------------------------------------------
    (
        "q.rmsnorm_float32_literal", QW,
        "hidden_states = hidden_states.to(_upcast(input_dtype))",
        "hidden_states = hidden_states.to(torch.float32)",
        Q_NORM, "precision",
        "the RMSNorm statistics are always computed in float32, so a float64 build loses precision there (an undeclared float32 step)",
        "transformers' literal `.to(torch.float32)` kept in a port that runs the model in float64", RMS_UPCAST,
    ),
    (
        "q.rms_eps_outside_root", QW,
        "hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)",
        "hidden_states = hidden_states / (torch.sqrt(variance) + self.variance_epsilon)",
        Q_NORM, "normalisation",
        "the norm's epsilon is added to the root mean square instead of to the mean square under the root",
        "RMSNorm rewritten as x / (rms + eps), the placement of a TF-style norm", "https://github.com/apple/coremltools/issues/2821",
    ),
    (
        "q.rms_mean_over_sequence", QW,
        "variance = hidden_states.pow(2).mean(-1, keepdim=True)",
        "variance = hidden_states.pow(2).mean(1, keepdim=True)",
        Q_NORM, "normalisation",
        "the norm's mean square is taken over the sequence axis instead of the feature axis",
        "axis 1 written for the hidden axis (right for [B, D] inputs, wrong for [B, L, D])", "",
    ),
    (
        "q.rope_theta_llama2", QW,
        "rope_theta: float = 1000000.0",
        "rope_theta: float = 10000.0",
        Q_ROPE, "rope",
        "the rotary base is another model's value (10000 where the checkpoint was trained with 1e6)",
        "Qwen2's rope_theta default copied from the Llama-2 config class", "https://github.com/LostRuins/koboldcpp/issues/426",
    ),
    (
        "q.inv_freq_exponent_halved", QW,
        "inv_freq = 1.0 / (self.base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))",
        "inv_freq = 1.0 / (self.base ** (torch.arange(0, dim // 2, dtype=torch.int64).to(torch.float64) / dim))",
        Q_ROPE, "rope",
        "the rotary frequencies use exponent i/d instead of 2i/d (the frequency ladder is wrong)",
        "arange(0, dim, 2) rewritten as arange(dim // 2) without doubling the exponent", "",
    ),
    (
        "q.rope_angles_float32", QW,
        "freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)",
        "freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)",
        Q_ROPE, "precision",
        "the rotary angles are formed in float32 whatever the model's precision (a float32 step in a float64 build)",
        "transformers' `.float()` on inv_freq and position ids kept in a float64 port", "",
    ),
    (
        "q.rope_angles_half", QW,
        "emb = torch.cat((freqs, freqs), dim=-1)",
        "emb = torch.cat((freqs, freqs), dim=-1).to(x.dtype)",
        Q_ROPE, "precision",
        "the rotary angles are rounded to the 16-bit input dtype before cos and sin",
        "the angle table cast to the activations' dtype one step too early (before cos/sin instead of after)", "",
    ),
    (
        "q.rotate_half_sign", QW,
        "return torch.cat((-x2, x1), dim=-1)",
        "return torch.cat((x2, -x1), dim=-1)",
        Q_ROPE, "rope",
        "the rotation is by the negative angle (rotate_half's sign on the wrong half)",
        "rotate_half ported with the minus sign on the second half", "",
    ),
    (
        "q.cos_table_interleaved", QW,
        "emb = torch.cat((freqs, freqs), dim=-1)",
        "emb = torch.repeat_interleave(freqs, 2, dim=-1)",
        Q_ROPE, "rope",
        "the cos/sin table is laid out for neighbouring pairs while the rotation pairs i with i + d/2 (table and rotation in different layouts)",
        "a GPT-J style repeat_interleave table fed to the NeoX rotate_half", ROPE_LAYOUT,
    ),
    (
        "q.rope_on_values", QW,
        "query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)",
        "query_states, value_states = apply_rotary_pos_emb(query_states, value_states, cos, sin)",
        Q_ATTN, "rope",
        "the rotation is applied to the queries and the values, the keys are left unrotated",
        "a refactor that renamed the second operand", "",
    ),
    (
        "q.scale_from_hidden_size", QW,
        "self.scaling = self.head_dim ** -0.5",
        "self.scaling = config.hidden_size ** -0.5",
        Q_ATTN, "attention scale",
        "the scores are scaled by 1/sqrt(model width) instead of 1/sqrt(head width)",
        "the scaling computed from the wrong config field", "",
    ),
    (
        "q.repeat_kv_tiled", QW,
        "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
        "hidden_states = hidden_states[:, None, :, :, :].expand(batch, n_rep, num_key_value_heads, slen, head_dim)",
        Q_ATTN, "grouped-query attention",
        "the key/value heads are tiled across the query heads instead of each repeated in place (query head h served by kv head h mod H_kv)",
        "repeat_kv's expand written with the repeat axis before the kv-head axis", GQA_TILE,
    ),
    (
        "q.cache_cat_heads_axis", QW,
        "self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)",
        "self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=1)",
        Q_ATTN, "kv cache",
        "the cached keys grow along the head axis instead of the sequence axis",
        "dim=1 written for the sequence axis of a [B, T, H, d] cache that is [B, H, T, d] here", "",
    ),
    (
        "q.cache_values_prepended", QW,
        "self.value_cache[layer_idx] = torch.cat([self.value_cache[layer_idx], value_states], dim=-2)",
        "self.value_cache[layer_idx] = torch.cat([value_states, self.value_cache[layer_idx]], dim=-2)",
        Q_ATTN, "kv cache",
        "a step's new values are put before the cached ones, so values no longer line up with their keys",
        "operands of the concatenation swapped for the values only", "",
    ),
    (
        "q.step_causal_top_left", QW,
        "causal = kv_arange[None, :] <= cache_position[:, None]",
        "causal = kv_arange[None, :] <= torch.arange(cache_position.shape[0])[:, None]",
        Q_ATTN, "kv cache",
        "the causal mask of a call is built from the call's own indices, ignoring the cached tokens (query i sees keys 0..i)",
        "the mask built from arange(q_len) instead of cache_position", CHUNK_MASK,
    ),
    (
        "q.causal_excludes_diagonal", QW,
        "causal = kv_arange[None, :] <= cache_position[:, None]",
        "causal = kv_arange[None, :] < cache_position[:, None]",
        Q_ATTN, "masks",
        "the causal mask excludes a token's own key (strict inequality)",
        "triu(diagonal=1) logic written as '<'", "",
    ),
    (
        "q.padding_polarity", QW,
        "mask = mask & attention_mask[:, None, None, :].bool()",
        "mask = mask & ~attention_mask[:, None, None, :].bool()",
        Q_ATTN, "masks",
        "the padding mask's polarity is inverted: pads are attended and real tokens masked",
        "a 1 = masked convention assumed for a 1 = keep attention_mask", "",
    ),
    (
        "q.padding_on_queries", QW,
        "mask = mask & attention_mask[:, None, None, :].bool()",
        "mask = mask & attention_mask[:, None, :, None].bool()",
        Q_ATTN, "masks",
        "the key-padding mask is broadcast over query rows instead of key columns",
        "the unsqueeze axes of the 2-D mask swapped", "",
    ),
    (
        "q.derived_positions_from_zero", QW,
        "position_ids = cache_position.unsqueeze(0).expand(hidden_states.shape[0], -1)",
        "position_ids = torch.arange(seq_len).unsqueeze(0).expand(hidden_states.shape[0], -1)",
        Q_ATTN, "kv cache",
        "positions derived in a cached step restart at 0 instead of continuing after the cached tokens (rotary offset lost)",
        "default position ids from the call length, not from cache_position", CACHE_POS,
    ),
    (
        "q.softmax_float32_literal", QW,
        "attn_weights = F.softmax(attn_weights, dim=-1, dtype=_upcast(query_states.dtype)).to(query_states.dtype)",
        "attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)",
        Q_ATTN, "precision",
        "the softmax is always computed in float32, so a float64 build loses precision there (an undeclared float32 step)",
        "transformers' eager softmax dtype kept in a float64 port", "",
    ),
    (
        "q.mask_fill_minus_1e9", QW,
        "min_dtype = torch.finfo(attn_weights.dtype).min",
        "min_dtype = -1e9",
        Q_ATTN, "masks",
        "the masked scores are filled with a constant that overflows to -inf in float16, so a query with every key masked becomes NaN",
        "the classic -1e9 fill in place of finfo(dtype).min", FP16_FILL,
    ),
    (
        "q.heads_merged_without_transpose", QW,
        "attn_output = attn_output.transpose(1, 2).contiguous()",
        "attn_output = attn_output.contiguous()",
        Q_ATTN, "head split/merge",
        "the heads are merged from a [B, H, L, d] tensor without moving the head axis back, mixing tokens and heads",
        "the transpose dropped when switching from an SDPA kernel returning [B, L, H, d]", "",
    ),
    (
        "q.query_split_wrong", QW,
        "query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)",
        "query_states = self.q_proj(hidden_states).view(input_shape[0], -1, input_shape[1], self.head_dim)",
        Q_ATTN, "head split/merge",
        "the query projection is split into heads by a view straight to [B, H, L, d] instead of [B, L, H, d] then transpose",
        "the view/transpose pair collapsed into one view", "",
    ),
    (
        "q.silu_on_up", QW,
        "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))",
        "down_proj = self.down_proj(self.gate_proj(x) * self.act_fn(self.up_proj(x)))",
        Q_FFN, "feed-forward",
        "the gated FFN activates the up projection instead of the gate projection",
        "gate_proj/up_proj roles exchanged in a rewrite", "",
    ),
    (
        "q.mlp_gelu", QW,
        "self.act_fn = nn.SiLU()",
        "self.act_fn = nn.GELU()",
        Q_FFN, "feed-forward",
        "the gate activation is GELU where the model uses SiLU",
        "ACT2FN[hidden_act] replaced by a hard-coded activation from another model", "",
    ),
    (
        "q.residual_from_normed", QW,
        "hidden_states = self.input_layernorm(hidden_states)",
        "hidden_states = residual = self.input_layernorm(hidden_states)",
        Q_BLOCK, "residual/norm placement",
        "the attention sublayer's residual is taken from the normalised input instead of the block input",
        "the residual assigned after the norm", "",
    ),
    (
        "q.ffn_norm_reuses_input_norm", QW,
        "hidden_states = self.post_attention_layernorm(hidden_states)",
        "hidden_states = self.input_layernorm(hidden_states)",
        Q_BLOCK, "normalisation",
        "the FFN sublayer is normalised with the attention sublayer's norm module (its gain), the second norm's parameters unused",
        "copy-paste of the first norm call", "",
    ),
    (
        "q.final_norm_missing", QW,
        "hidden_states = self.norm(hidden_states)",
        "hidden_states = hidden_states",
        Q_LM, "residual/norm placement",
        "the final norm of the pre-LN stack is not applied",
        "the final norm dropped when the model body and the head were split", "",
    ),
    (
        "q.lm_head_tied_to_embedding", QW,
        "logits = self.lm_head(hidden_states)",
        "logits = hidden_states @ self.model.embed_tokens.weight.T",
        Q_LM, "weight tying",
        "the logits are computed with the token embedding although the model has its own untied output matrix",
        "tie_word_embeddings assumed true for a checkpoint that ships lm_head", "",
    ),
    (
        "q.embedding_scaled", QW,
        "inputs_embeds = self.embed_tokens(input_ids)",
        "inputs_embeds = self.embed_tokens(input_ids) * self.config.hidden_size ** 0.5",
        Q_LM, "embeddings",
        "the token embeddings are multiplied by sqrt(model width) in a model that does not scale them",
        "Gemma's normalizer copied into a Qwen2 port", "",
    ),
    # ---- llama2c_flat --------------------------------------------------------------------
    (
        "l.rmsnorm_x_float", LC,
        "x = x.to(_acc(dtype))",
        "x = x.float()",
        L_NORM, "precision",
        "the RMSNorm statistics are always computed in float32, so a float64 build loses precision there (an undeclared float32 step)",
        "run.c's float arithmetic ported literally as .float()", RMS_UPCAST,
    ),
    (
        "l.rms_sum_not_mean", LC,
        "ss = (x * x).sum(-1, keepdim=True) / x.shape[-1]",
        "ss = (x * x).sum(-1, keepdim=True)",
        L_NORM, "normalisation",
        "the norm divides by the root of the sum of squares instead of the root of their mean",
        "the `/ size` of run.c's rmsnorm dropped", "",
    ),
    (
        "l.rms_eps_other_model", LC,
        "ss = ss + eps",
        "ss = ss + 1e-6",
        L_NORM, "normalisation",
        "the norm's epsilon is hard-coded to another model's value instead of the configured one",
        "a hard-coded 1e-6 for a model trained with 1e-5", RMS_EPS,
    ),
    (
        "l.rms_gain_dropped", LC,
        "return weight * (ss * x).to(dtype)",
        "return (ss * x).to(dtype)",
        L_NORM, "normalisation",
        "the norm's learned gain is not applied",
        "the weight multiply lost in a rewrite", "",
    ),
    (
        "l.rope_freq_from_flat_index", LC,
        "head_dim = i % head_size",
        "head_dim = i",
        L_ROPE, "rope",
        "the rotary frequency is taken from the index in the whole q/k vector instead of the index within the head",
        "the `% head_size` of run.c's RoPE loop dropped", LLAMA2C_ROPE,
    ),
    (
        "l.rope_pairs_written_as_halves", LC,
        "out = torch.stack((v0 * fcr - v1 * fci, v0 * fci + v1 * fcr), dim=-1)",
        "out = torch.cat((v0 * fcr - v1 * fci, v0 * fci + v1 * fcr), dim=-1)",
        L_ROPE, "rope",
        "the rotated pairs are read as neighbours but written back as the two halves of the vector (mixed rotary layouts)",
        "stack replaced by cat when vectorising the pair loop", ROPE_LAYOUT,
    ),
    (
        "l.rope_rotation_inverted", LC,
        "out = torch.stack((v0 * fcr - v1 * fci, v0 * fci + v1 * fcr), dim=-1)",
        "out = torch.stack((v0 * fcr + v1 * fci, v1 * fcr - v0 * fci), dim=-1)",
        L_ROPE, "rope",
        "the rotation is by the negative angle (conjugate rotation)",
        "the sign of the sine swapped in the 2x2 rotation", "",
    ),
    (
        "l.rope_angles_float32", LC,
        "val = pos[..., None].to(torch.float64) * freq",
        "val = pos[..., None].to(torch.float32) * freq.float()",
        L_ROPE, "precision",
        "the rotary angles are formed in float32 whatever the model's precision (a float32 step in a float64 build)",
        "run.c's float angles ported literally", "",
    ),
    (
        "l.rope_theta_llama3", LC,
        "rope_theta: float = 10000.0",
        "rope_theta: float = 500000.0",
        L_ATTN, "rope",
        "the rotary base is another model's value (Llama 3's 500000 in a Llama 2 model)",
        "the config default taken from a newer release", "",
    ),
    (
        "l.rope_keys_skipped", LC,
        "k = rope_rotate(k, pos, head_size, p.rope_theta)",
        "k = k",
        L_ATTN, "rope",
        "the rotation is applied to the queries only; the keys are cached unrotated",
        "run.c's `rotn` (2 = q and k, 1 = q only) logic ported wrongly", "",
    ),
    (
        "l.kv_head_modulo", LC,
        "kvh = h // kv_mul",
        "kvh = h % p.n_kv_heads",
        L_ATTN, "grouped-query attention",
        "query head h reads key/value head h mod H_kv instead of h / (H / H_kv) (tiled instead of grouped)",
        "the kv-head index computed the way tiling would", GQA_TILE,
    ),
    (
        "l.scale_model_width", LC,
        "att = qh @ kh.transpose(-1, -2) / math.sqrt(head_size)",
        "att = qh @ kh.transpose(-1, -2) / math.sqrt(dim)",
        L_ATTN, "attention scale",
        "the scores are scaled by 1/sqrt(model width) instead of 1/sqrt(head width)",
        "sqrt(dim) written for sqrt(head_size)", "",
    ),
    (
        "l.cache_written_at_slot_zero", LC,
        "s.key_cache[l][:, s.pos : s.pos + n] = k",
        "s.key_cache[l][:, :n] = k",
        L_ATTN, "kv cache",
        "every call writes its keys at the start of the cache, overwriting the earlier tokens' keys",
        "the write offset (pos) dropped from the key cache store", "",
    ),
    (
        "l.value_cache_stores_keys", LC,
        "s.value_cache[l][:, s.pos : s.pos + n] = v",
        "s.value_cache[l][:, s.pos : s.pos + n] = k",
        L_ATTN, "kv cache",
        "the value cache is filled with the keys",
        "copy-paste of the key store line", "",
    ),
    (
        "l.step_causal_top_left", LC,
        "allowed = t[None, :] <= torch.arange(s.pos, T)[:, None]",
        "allowed = t[None, :] <= torch.arange(n)[:, None]",
        L_ATTN, "kv cache",
        "the causal mask of a call is built from the call's own indices, ignoring the cached tokens",
        "the query indices counted from 0 in every call", CHUNK_MASK,
    ),
    (
        "l.causal_excludes_self", LC,
        "allowed = t[None, :] <= torch.arange(s.pos, T)[:, None]",
        "allowed = t[None, :] < torch.arange(s.pos, T)[:, None]",
        L_ATTN, "masks",
        "the causal mask excludes a token's own key (run.c's `t <= pos` written as `t < pos`)",
        "off-by-one in the attended range", "",
    ),
    (
        "l.padding_mask_dropped", LC,
        "allowed = allowed[None, :, :] & keep[:, None, :T]",
        "allowed = allowed[None, :, :]",
        L_ATTN, "masks",
        "the key-padding mask is never applied",
        "the padding term lost when run.c's single-sequence loop was batched", "",
    ),
    (
        "l.pos_counter_reset", LC,
        "s.pos += x.shape[1]",
        "s.pos = x.shape[1]",
        L_ATTN, "kv cache",
        "the cache's length counter is set to the last call's length instead of advanced by it, so later writes and positions go to the wrong slots",
        "`+=` typed as `=`", "",
    ),
    (
        "l.derived_positions_from_zero", LC,
        "pos = torch.arange(s.pos, s.pos + n)[None, :].expand(B, n)",
        "pos = torch.arange(n)[None, :].expand(B, n)",
        L_ATTN, "kv cache",
        "positions derived in a cached step restart at 0 instead of continuing after the cached tokens",
        "default positions computed from the call alone", CACHE_POS,
    ),
    (
        "l.softmax_no_max_subtraction", LC,
        "x = torch.exp(x - max_val)",
        "x = torch.exp(x)",
        L_ATTN, "precision",
        "the softmax exponentiates the raw scores without subtracting the row maximum (overflow on large scores, 0/0 on fully masked rows)",
        "run.c's max subtraction dropped as 'only for stability'", "",
    ),
    (
        "l.mask_fill_zero", LC,
        "att = att.masked_fill(~allowed, torch.finfo(att.dtype).min)",
        "att = att.masked_fill(~allowed, 0.0)",
        L_ATTN, "masks",
        "masked scores are set to 0 instead of a large negative number, so masked keys still get weight",
        "the fill value of a multiplicative mask used for an additive one", "https://github.com/Shujun-He/RibonanzaNet/issues/5",
    ),
    (
        "l.heads_interleaved_on_merge", LC,
        "xb = torch.cat(heads, dim=-1)",
        "xb = torch.stack(heads, dim=-1).flatten(-2)",
        L_ATTN, "head split/merge",
        "the heads' outputs are merged channel-interleaved instead of head after head",
        "stack on the last axis instead of concatenation", "",
    ),
    (
        "l.sigmoid_instead_of_silu", LC,
        "hb = hb * (1.0 / (1.0 + torch.exp(-hb)))",
        "hb = 1.0 / (1.0 + torch.exp(-hb))",
        L_FFN, "feed-forward",
        "the gate activation is the sigmoid instead of SiLU (x * sigmoid(x))",
        "the leading `val *` of run.c's SwiGLU lost", "",
    ),
    (
        "l.up_reads_gate_weight", LC,
        "hb2 = matmul(xb, w.w3[l])",
        "hb2 = matmul(xb, w.w1[l])",
        L_FFN, "feed-forward",
        "the up projection reads the gate projection's weight (w1 for w3)",
        "copy-paste of the gate matmul", "",
    ),
    (
        "l.ffn_norm_gain_from_attention", LC,
        "xb = rmsnorm(x, w.rms_ffn_weight[l], p.norm_eps)",
        "xb = rmsnorm(x, w.rms_att_weight[l], p.norm_eps)",
        L_BLOCK, "normalisation",
        "the FFN sublayer's norm uses the attention sublayer's gain",
        "copy-paste of the attention rmsnorm call", "",
    ),
    (
        "l.residual_from_normed", LC,
        "x = x + attention(p, w, l, xb, s, pos, keep)",
        "x = xb + attention(p, w, l, xb, s, pos, keep)",
        L_BLOCK, "residual/norm placement",
        "the attention sublayer's residual is taken from the normalised input instead of the block input",
        "xb (the normed buffer) added instead of x", "",
    ),
    # ---- dinov2_vit ----------------------------------------------------------------------
    (
        "d.patches_column_major", DV,
        "x = x.flatten(2).transpose(1, 2)  # B HW C",
        "x = x.transpose(2, 3).flatten(2).transpose(1, 2)  # B HW C",
        D_PATCH, "vit patchify",
        "the patch tokens are ordered column by column instead of row by row over the grid",
        "a W/H transpose left over from a channels-last port", "https://github.com/facebookresearch/dinov2/issues/456",
    ),
    (
        "d.patches_reshaped_not_transposed", DV,
        "x = x.flatten(2).transpose(1, 2)  # B HW C",
        "x = x.reshape(x.shape[0], -1, x.shape[1])  # B HW C",
        D_PATCH, "vit patchify",
        "the conv output [B, D, N] is reshaped to [B, N, D] instead of transposed, scrambling tokens and channels",
        "reshape used where a transpose is needed", "",
    ),
    (
        "d.cls_token_appended", DV,
        "x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)",
        "x = torch.cat((x, self.cls_token.expand(x.shape[0], -1, -1)), dim=1)",
        D_VIT, "vit class token",
        "the class token is appended after the patches instead of prepended, so the head reads a patch token and the positions shift",
        "concatenation order swapped", "",
    ),
    (
        "d.pos_shortcut_returns_tokens", DV,
        "return self.pos_embed",
        "return x",
        D_VIT, "vit position embedding",
        "at the native resolution the position-embedding function returns the tokens themselves, so the tokens are doubled and no position is added",
        "the shortcut of interpolate_pos_encoding returns its input", CANDLE_POS,
    ),
    (
        "d.pos_always_resampled", DV,
        "if npatch == N and w == h:",
        "if npatch == N and w != h:",
        D_VIT, "vit position embedding",
        "the position table is bicubically resampled (with DINOv2's offset) even at the native grid, so every patch gets a blurred position",
        "the shortcut's condition inverted", "https://github.com/facebookresearch/dinov2/issues/468",
    ),
    (
        "d.key_scaled_too", DV,
        "q, k, v = qkv[0] * self.scale, qkv[1], qkv[2]",
        "q, k, v = qkv[0] * self.scale, qkv[1] * self.scale, qkv[2]",
        D_LAYER, "attention scale",
        "the scale is applied to both queries and keys, so the scores are scaled by 1/d instead of 1/sqrt(d)",
        "scaling pushed into q and k during a refactor", "",
    ),
    (
        "d.qkv_per_head_layout", DV,
        "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)",
        "qkv = self.qkv(x).reshape(B, N, self.num_heads, 3, C // self.num_heads).permute(3, 0, 2, 1, 4)",
        D_LAYER, "head split/merge",
        "the fused qkv output is read as per-head [q, k, v] triples where the checkpoint stores all queries, then all keys, then all values",
        "Megatron's per-head qkv layout assumed for a timm/DINOv2 checkpoint", "",
    ),
    (
        "d.softmax_over_queries", DV,
        "attn = attn.softmax(dim=-1)",
        "attn = attn.softmax(dim=-2)",
        D_LAYER, "attention",
        "the attention softmax normalises over the queries instead of the keys",
        "dim=-2 after a transposed score layout was undone", "",
    ),
    (
        "d.heads_merged_without_transpose", DV,
        "x = (attn @ v).transpose(1, 2).reshape(B, N, C)",
        "x = (attn @ v).reshape(B, N, C)",
        D_LAYER, "head split/merge",
        "the heads are merged from [B, H, N, d] without moving the head axis back, mixing tokens and heads",
        "the transpose dropped", "",
    ),
    (
        "d.bias_polarity", DV,
        "return bias.masked_fill(~keep, torch.finfo(dtype).min)",
        "return bias.masked_fill(keep, torch.finfo(dtype).min)",
        D_MASK, "masks",
        "the attention bias blocks the allowed keys and lets the masked ones through (polarity inverted)",
        "a keep-mask used as a masked-mask", "",
    ),
    (
        "d.causal_upper_triangle", DV,
        "keep = keep & torch.ones(n, n, dtype=torch.bool).tril()[None, None]",
        "keep = keep & torch.ones(n, n, dtype=torch.bool).triu()[None, None]",
        D_MASK, "masks",
        "the causal keep-mask is the upper triangle: each query sees the future and not the past",
        "triu for tril", "",
    ),
    (
        "d.padding_on_queries", DV,
        "keep = keep & key_padding[:, None, None, :]",
        "keep = keep & key_padding[:, None, :, None]",
        D_MASK, "masks",
        "the key-padding mask is broadcast over query rows instead of key columns",
        "the unsqueeze axes swapped", "",
    ),
    (
        "d.masked_scores_neg_inf", DV,
        "attn = torch.maximum(attn + attn_bias, torch.tensor(torch.finfo(attn.dtype).min, dtype=attn.dtype))",
        "attn = attn.masked_fill(attn_bias < 0, float(\"-inf\"))",
        D_MASK, "masks",
        "the masked scores are set to -inf instead of the most negative finite number, so a query with every key masked becomes NaN (where the model declares a uniform row)",
        "the bias applied the way xformers' reference attention applies an -inf bias", "https://github.com/robertknight/rten/pull/1321",
    ),
    (
        "d.drop_path_in_eval", DV,
        "if drop_prob == 0.0 or not training:",
        "if drop_prob == 0.0:",
        D_VIT, "dropout in eval",
        "stochastic depth keeps dropping residual branches in evaluation mode",
        "the training guard of drop_path lost", DROP_PATH,
    ),
    (
        "d.layerscale_always_on", DV,
        "self.ls1 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()",
        "self.ls1 = LayerScale(dim, init_values=init_values or 1e-5)",
        D_LAYER, "parameters",
        "the attention branch is multiplied by a layer-scale parameter the checkpoint does not have (left at its initial value)",
        "LayerScale built unconditionally for a model trained without it", "",
    ),
    (
        "d.gelu_tanh", DV,
        "self.act = act_layer()",
        "self.act = act_layer(approximate=\"tanh\")",
        D_LAYER, "feed-forward",
        "the FFN uses the tanh approximation of GELU where the exact GELU is declared",
        "approximate='tanh' passed for speed", "",
    ),
    (
        "d.vit_layernorm_default_eps", DV,
        "norm_layer = partial(nn.LayerNorm, eps=1e-6)",
        "norm_layer = nn.LayerNorm",
        D_VIT, "normalisation",
        "the LayerNorms use torch's default epsilon (1e-5) instead of the model's 1e-6",
        "the partial with eps dropped", "",
    ),
    (
        "d.final_norm_missing", DV,
        "x_norm = self.norm(x)",
        "x_norm = x",
        D_VIT, "residual/norm placement",
        "the final norm of the pre-LN encoder is not applied before pooling",
        "the final norm dropped", "",
    ),
    (
        "d.pooled_last_token", DV,
        "\"x_norm_clstoken\": x_norm[:, 0],",
        "\"x_norm_clstoken\": x_norm[:, -1],",
        D_VIT, "vit pooling",
        "the head reads the last token instead of the class token",
        "index -1 (a causal LM's habit) for the class token", "",
    ),
    (
        "d.ffn_norm_reuses_norm1", DV,
        "return self.ls2(self.mlp(self.norm2(x)))",
        "return self.ls2(self.mlp(self.norm1(x)))",
        D_LAYER, "normalisation",
        "the FFN sublayer is normalised with the attention sublayer's norm module",
        "copy-paste of norm1", "",
    ),
]

CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    (
        "control.q.query_prescaled", QW,
        "attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) * self.scaling",
        "attn_weights = torch.matmul(query_states * self.scaling, key_states.transpose(2, 3))",
        Q_ATTN,
        "scaling the queries before the product is the same scaling of the scores (rounding only)",
    ),
    (
        "control.q.gain_before_cast", QW,
        "return self.weight * hidden_states.to(input_dtype)",
        "return (self.weight * hidden_states).to(input_dtype)",
        Q_NORM,
        "Llama's order (gain times the upcast tensor, then cast) is the same function; in float64 identical, in 16-bit one rounding apart",
    ),
    (
        "control.q.causal_as_difference", QW,
        "causal = kv_arange[None, :] <= cache_position[:, None]",
        "causal = (cache_position[:, None] - kv_arange[None, :]) >= 0",
        Q_ATTN,
        "the same comparison written as a non-negative distance",
    ),
    (
        "control.l.rms_mean", LC,
        "ss = (x * x).sum(-1, keepdim=True) / x.shape[-1]",
        "ss = x.pow(2).mean(-1, keepdim=True)",
        L_NORM,
        "the mean of the squares, computed by mean instead of sum / size",
    ),
    (
        "control.l.heads_stacked", LC,
        "xb = torch.cat(heads, dim=-1)",
        "xb = torch.stack(heads, dim=-2).flatten(-2)",
        L_ATTN,
        "stacking on a new head axis before the channel axis and flattening is the same head-after-head concatenation",
    ),
    (
        "control.l.silu_sigmoid", LC,
        "hb = hb * (1.0 / (1.0 + torch.exp(-hb)))",
        "hb = hb * torch.sigmoid(hb)",
        L_FFN,
        "x * sigmoid(x) is SiLU, as the hand-written form",
    ),
    (
        "control.d.einsum_merge", DV,
        "x = (attn @ v).transpose(1, 2).reshape(B, N, C)",
        "x = torch.einsum(\"bhnm,bhmd->bnhd\", attn, v).reshape(B, N, C)",
        D_LAYER,
        "the einsum computes the weighted values directly in [B, N, H, d], the same merge",
    ),
    (
        "control.d.qkv_unflatten", DV,
        "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)",
        "qkv = self.qkv(x).unflatten(-1, (3, self.num_heads, -1)).permute(2, 0, 3, 1, 4)",
        D_LAYER,
        "unflatten of the last axis into (3, H, d) is the same split as the reshape",
    ),
]

# Phase 2 (filled only after the phase-1 commit, from each bug's frozen class and the meanings
# of SPEC.md Appendix C): bug id -> (expected codes, class without code)
ISLAND = ["numerics.float32_island", "numerics.float64_precision_lost"]
PHASE_2: dict[str, tuple[list[str], str]] = {
    # qwen2_hf
    "q.rmsnorm_float32_literal": (ISLAND, ""),
    "q.rms_eps_outside_root": (["layer_norm.eps_outside_sqrt"], ""),
    "q.rms_mean_over_sequence": (["layer_norm.positions_interact"], ""),
    "q.rope_theta_llama2": (["positional.base_wrong", "positional.frequency_wrong"], ""),
    "q.inv_freq_exponent_halved": (["positional.frequency_wrong"], ""),
    "q.rope_angles_float32": ([*ISLAND, "numerics.rope_angles_low_precision"], ""),
    "q.rope_angles_half": (["numerics.rope_angles_low_precision"], ""),
    "q.rotate_half_sign": (["rope.rotation_inverted"], ""),
    "q.cos_table_interleaved": (["rope.table_layout_mismatch"], ""),
    "q.rope_on_values": (["rope.applied_to_wrong_tensors"], ""),
    "q.scale_from_hidden_size": (["attention.scale_wrong"], ""),
    "q.repeat_kv_tiled": (["attention.kv_heads_tiled"], ""),
    "q.cache_cat_heads_axis": (["cache.wrong_axis"], ""),
    "q.cache_values_prepended": (["cache.keys_prepended"], ""),
    "q.step_causal_top_left": (["cache.causal_top_left"], ""),
    "q.causal_excludes_diagonal": (["mask.causal_diagonal_hidden", "cache.causal_off_by_one"], ""),
    "q.padding_polarity": (["mask.polarity_inverted"], ""),
    "q.padding_on_queries": (["mask.applied_to_queries"], ""),
    "q.derived_positions_from_zero": (["cache.rope_offset_wrong"], ""),
    "q.softmax_float32_literal": (ISLAND, ""),
    "q.mask_fill_minus_1e9": (["numerics.fill_value_overflow"], ""),
    "q.heads_merged_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "q.query_split_wrong": (["attention.heads_split_wrong_order"], ""),
    "q.silu_on_up": (["ffn.gate_up_swapped"], ""),
    "q.mlp_gelu": (["ffn.gate_activation_gelu"], ""),
    "q.residual_from_normed": (["blocks.residual_after_norm"], ""),
    "q.ffn_norm_reuses_input_norm": (["params.read_from_other_module"], ""),
    "q.final_norm_missing": (["blocks.final_norm_missing"], ""),
    "q.lm_head_tied_to_embedding": (["model.head_tied_to_embedding"], ""),
    "q.embedding_scaled": (["embedding.scale_on_embeddings"], ""),
    # llama2c_flat
    "l.rmsnorm_x_float": (ISLAND, ""),
    "l.rms_sum_not_mean": (["layer_norm.rms_wrong_statistics"], ""),
    "l.rms_eps_other_model": (["layer_norm.eps_wrong"], ""),
    "l.rms_gain_dropped": (["layer_norm.gain_unused"], ""),
    "l.rope_freq_from_flat_index": (["positional.frequency_wrong"], ""),
    "l.rope_pairs_written_as_halves": ([], "the rotated pairs are read in one layout (neighbours) and written back in the other (halves): the rotation is right but its output channels are permuted; no code names a read/write layout mismatch inside the rotation (rope.table_layout_mismatch is a cos/sin table against a rotation)"),
    "l.rope_rotation_inverted": (["rope.rotation_inverted"], ""),
    "l.rope_angles_float32": ([*ISLAND, "numerics.rope_angles_low_precision"], ""),
    "l.rope_theta_llama3": (["positional.base_wrong", "positional.frequency_wrong"], ""),
    "l.rope_keys_skipped": (["rope.applied_to_wrong_tensors"], ""),
    "l.kv_head_modulo": (["attention.kv_heads_tiled"], ""),
    "l.scale_model_width": (["attention.scale_wrong"], ""),
    "l.cache_written_at_slot_zero": (["cache.slots_overlap"], ""),
    "l.value_cache_stores_keys": (["attention.value_uses_key_projection"], ""),
    "l.step_causal_top_left": (["cache.causal_top_left"], ""),
    "l.causal_excludes_self": (["mask.causal_diagonal_hidden", "cache.causal_off_by_one"], ""),
    "l.padding_mask_dropped": (["mask.ignored"], ""),
    "l.pos_counter_reset": (["cache.slots_overlap", "cache.rope_offset_wrong", "cache.causal_offset_wrong"], ""),
    "l.derived_positions_from_zero": (["cache.rope_offset_wrong"], ""),
    "l.softmax_no_max_subtraction": (["numerics.overflow"], ""),
    "l.mask_fill_zero": (["mask.added_as_bias"], ""),
    "l.heads_interleaved_on_merge": (["attention.heads_merged_wrong_order"], ""),
    "l.sigmoid_instead_of_silu": (["ffn.activation_wrong"], ""),
    "l.up_reads_gate_weight": (["params.read_from_other_module"], ""),
    "l.ffn_norm_gain_from_attention": (["params.read_from_other_module"], ""),
    "l.residual_from_normed": (["blocks.residual_after_norm"], ""),
    # dinov2_vit
    "d.patches_column_major": (["vit.patch_order"], ""),
    "d.patches_reshaped_not_transposed": (["vit.patch_order"], ""),
    "d.cls_token_appended": (["vit.pooling_wrong_token"], ""),
    "d.pos_shortcut_returns_tokens": ([], "the learned position embedding is replaced by the tokens themselves (every token doubled, no position added); no code names a position embedding that adds the wrong tensor (vit.cls_pos_embed_missing is the class token alone)"),
    "d.pos_always_resampled": ([], "the learned position table is resampled (bicubic, with an offset) at the grid it was learned for, so every token gets a blurred position; no code names a resampled position table"),
    "d.key_scaled_too": (["attention.scale_wrong"], ""),
    "d.qkv_per_head_layout": (["attention.qkv_order_wrong"], ""),
    "d.softmax_over_queries": (["attention.softmax_axis_wrong"], ""),
    "d.heads_merged_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "d.bias_polarity": (["mask.polarity_inverted"], ""),
    "d.causal_upper_triangle": (["mask.causal_leak"], ""),
    "d.padding_on_queries": (["mask.applied_to_queries"], ""),
    "d.masked_scores_neg_inf": (["mask.fully_masked_rows_nan"], ""),
    "d.drop_path_in_eval": (["dropout.active_in_eval"], ""),
    "d.layerscale_always_on": ([], "a residual branch is multiplied by a parameter the checkpoint does not have (a layer scale left at its initial value); no code names an unloaded extra parameter scaling a branch (params.count_wrong is only the count)"),
    "d.gelu_tanh": (["ffn.activation_gelu_tanh"], ""),
    "d.vit_layernorm_default_eps": (["layer_norm.eps_wrong"], ""),
    "d.final_norm_missing": (["blocks.final_norm_missing"], ""),
    "d.pooled_last_token": (["vit.pooling_wrong_token"], ""),
    "d.ffn_norm_reuses_norm1": (["params.read_from_other_module"], ""),
}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise SystemExit(f"{impl}.py: {stripped!r} occurs {len(hits)} times")
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
    for bug_id, impl, orig, repl, comps, family, cls, desc, report in BUGS:
        codes, without = PHASE_2.get(bug_id, ([], ""))
        bugs.append({
            "id": bug_id, **_row(impl, orig, repl), "components": comps, "family": family,
            "class": cls, "description": desc, "public_report": report,
            "expected_codes": codes, "class_without_code": without,
        })  # fmt: skip
    controls = []
    for cid, impl, orig, repl, comps, why in CONTROLS:
        controls.append({"id": cid, **_row(impl, orig, repl), "components": comps, "why_correct": why})
    (HERE / "bugs.json").write_text(json.dumps(bugs, indent=1) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(controls, indent=1) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
