# fmt: off
# ruff: noqa: E501  (the tables name lines verbatim, one row per line)
"""Write bugs.json and controls.json of the fifth blind set from the tables below.

Each row names one line of an implementation by its text without indentation; the line must
occur exactly once (the indentation is copied to the replacement). Run from anywhere:
``python tests/blind5/make_bugs.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind5"

P, R, V, M = "pytree_gqa", "hf_roberta_sdpa", "bigvision_vit", "marian_seq2seq"
P_ATT = ["causal_self_attention", "decoder_block", "causal_lm"]
P_LM = ["causal_lm"]
P_CACHE = ["causal_self_attention", "causal_lm"]
R_ALL = ["encoder_layer", "encoder"]
V_ENC = ["encoder_layer", "vit"]
V_PATCH = ["patch_embed", "vit"]
M_DEC = ["decoder_layer", "seq2seq"]
M_ALL = ["encoder_layer", "decoder_layer", "seq2seq"]

# id, impl, original, replacement, components, family, class, expected codes, class without code, description
BUGS = [
    # ---- pytree_gqa: the functional GQA decoder with a static cache
    ("p.rms_stats_in_half", P, "h = x.float() if dtype in HALF else x", "h = x", ["rms_norm"], "precision", "RMSNorm statistics formed in float16/bfloat16", ["numerics.norm_statistics_low_precision"], "", "The float32 upcast of the norm statistics is dropped."),
    ("p.rms_gain_plus_one", P, "return scale * h.to(dtype)", "return (1 + scale) * h.to(dtype)", ["rms_norm", "decoder_block"], "norm", "RMSNorm gain applied as 1 + weight (Gemma's convention) on a Llama checkpoint", ["layer_norm.gain_plus_one"], "", "Gemma's (1 + w) gain carried into a Llama-style port."),
    ("p.rope_exponent_half", P, "inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))", "inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, head_dim // 2, dtype=torch.float64) / head_dim))", ["rope", "causal_self_attention"], "rope", "RoPE exponent i/d instead of 2i/d (frequencies of base sqrt(10000))", ["positional.base_wrong", "positional.frequency_wrong"], "", "The arange step 2 is replaced by a half-length arange, halving every exponent."),
    ("p.rope_rotation_inverted", P, "rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)", "rotated = torch.stack((x_even * cos + x_odd * sin, x_odd * cos - x_even * sin), dim=-1)", ["rope", "causal_self_attention"], "rope", "rotation by -theta (conjugate of the complex multiply)", ["rope.rotation_inverted"], "", "The complex multiply written with the conjugate: the rotation turns the other way."),
    ("p.rope_half_split_pairs", P, "x_even, x_odd = x[..., 0::2], x[..., 1::2]", "x_even, x_odd = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]", ["rope", "causal_self_attention"], "rope", "rotate_half pairing (i, i + d/2) used where the checkpoint pairs (2i, 2i + 1)", ["rope.layout_half_split"], "", "HF's rotate_half pairing mixed into Meta's interleaved RoPE."),
    ("p.rope_queries_not_rotated", P, "q = apply_rope(q, angles)", "q = q", ["causal_self_attention", "decoder_block"], "rope", "RoPE applied to the keys only", ["rope.applied_to_wrong_tensors"], "", "The query rotation is lost in a refactor."),
    ("p.rope_angles_in_half", P, "cos = torch.cos(angles)[:, None].to(x.dtype)", "cos = torch.cos(angles.to(x.dtype))[:, None]", ["rope", "causal_self_attention"], "precision", "RoPE angles (for cos) cast to the 16-bit dtype before the cosine", ["numerics.rope_angles_low_precision"], "", "The angles are cast to the activation dtype before cos."),
    ("p.gqa_keys_tiled", P, "scores = torch.matmul(q, k[:, :, None].transpose(-1, -2)) / math.sqrt(head_dim)", "scores = torch.matmul(q, k[:, None].transpose(-1, -2)) / math.sqrt(head_dim)", P_ATT, "gqa", "key heads broadcast on the group axis: query head h reads key head h mod H_kv", ["attention.kv_heads_tiled"], "", "The group axis of the keys is inserted in the wrong place, so the key heads are tiled, not grouped."),
    ("p.gqa_values_tiled", P, "out = torch.matmul(probs, v[:, :, None])", "out = torch.matmul(probs, v[:, None])", P_ATT, "gqa", "value heads broadcast on the group axis: query head h reads value head h mod H_kv", ["attention.kv_heads_tiled"], "", "The group axis of the values is inserted in the wrong place."),
    ("p.scale_by_model_dim", P, "scores = torch.matmul(q, k[:, :, None].transpose(-1, -2)) / math.sqrt(head_dim)", "scores = torch.matmul(q, k[:, :, None].transpose(-1, -2)) / math.sqrt(D)", P_ATT, "attention_scale", "scores divided by sqrt(d_model) instead of sqrt(head_dim)", ["attention.scale_wrong"], "", "The scale uses the model width."),
    ("p.causal_not_offset_by_cache", P, "q_index = torch.arange(start, start + L)[:, None]", "q_index = torch.arange(L)[:, None]", P_CACHE, "kv_cache", "cached step's causal mask aligned top-left (query indices not offset by the cache length)", ["cache.causal_top_left"], "", "The query indices restart at 0 in each cached step."),
    ("p.padding_new_tokens_only", P, "allowed = allowed & key_padding[:, None, None, None, :Lk]", "allowed = allowed & key_padding[:, None, None, None, -L:]", P_CACHE, "kv_cache", "in cached steps the key-padding mask is taken for the new tokens only (broadcast over the cached keys)", ["cache.padding_dropped_in_steps"], "", "The mask is sliced to the new tokens, so the cached keys' padding is not applied in steps."),
    ("p.zero_guard_removed", P, "probs = probs * allowed.any(dim=-1, keepdim=True)", "probs = probs", P_CACHE, "mask", "a query without visible keys averages every value (finfo.min fill) instead of the declared zeros", ["mask.fully_masked_rows_uniform"], "", "The guard zeroing fully masked rows is dropped."),
    ("p.value_from_key_weight", P, "v = (x @ params[prefix + \"wv\"]).view(B, L, -1, head_dim).transpose(1, 2)", "v = (x @ params[prefix + \"wk\"]).view(B, L, -1, head_dim).transpose(1, 2)", P_ATT, "qkv_projection", "values computed with the key weight (a wrong key into the parameter dict)", ["attention.value_uses_key_projection", "params.read_from_other_module"], "", "The pytree key for the value weight is mistyped as the key weight."),
    ("p.swiglu_gate_up_swapped", P, "return (F.silu(gate) * up) @ params[prefix + \"w_down\"]", "return (gate * F.silu(up)) @ params[prefix + \"w_down\"]", ["gated_ffn", "decoder_block"], "ffn_activation", "SiLU applied to the up projection instead of the gate", ["ffn.gate_up_swapped"], "", "Gate and up swapped in the SwiGLU."),
    ("p.swiglu_gelu", P, "return (F.silu(gate) * up) @ params[prefix + \"w_down\"]", "return (F.gelu(gate) * up) @ params[prefix + \"w_down\"]", ["gated_ffn", "decoder_block"], "ffn_activation", "GeGLU gate where SwiGLU is declared", ["ffn.gate_activation_gelu"], "", "The gate uses GELU (a GeGLU port's habit)."),
    ("p.unembed_tied", P, "return x @ params[\"unembed\"]", "return x @ params[\"embed\"].T", P_LM, "parameters", "the logits use the token embedding where the model has its own unembedding", ["model.head_tied_to_embedding"], "", "The head is tied to the embedding as in GPT-2."),
    ("p.embed_scaled", P, "x = params[\"embed\"][ids]", "x = params[\"embed\"][ids] * math.sqrt(params[\"embed\"].shape[1])", P_LM, "embedding", "embeddings multiplied by sqrt(d_model) (Gemma's normaliser) where none is declared", ["embedding.scale_on_embeddings"], "", "A Gemma-style embedding normaliser carried over."),
    ("p.cache_length_not_accumulated", P, "return out, {\"layers\": cache[\"layers\"], \"length\": start + ids.shape[1]}", "return out, {\"layers\": cache[\"layers\"], \"length\": ids.shape[1]}", P_LM, "kv_cache", "the cache's fill count is set to the step's length instead of advanced: later steps overwrite earlier slots", ["cache.slots_overlap", "cache.rope_offset_wrong"], "", "The filled-slot counter is reset instead of incremented."),
    ("p.cache_layers_shared", P, "return {\"layers\": [{\"k\": torch.zeros(shape, dtype=dtype), \"v\": torch.zeros(shape, dtype=dtype)} for _ in range(n_caches)], \"length\": 0}", "return {\"layers\": [{\"k\": torch.zeros(shape, dtype=dtype), \"v\": torch.zeros(shape, dtype=dtype)}] * n_caches, \"length\": 0}", P_LM, "kv_cache", "one static buffer shared by every layer ([buf] * n)", ["cache.layers_share_pool"], "", "List multiplication shares one buffer between the layers."),
    ("p.cache_write_off_by_one", P, "cache[\"k\"][:, :, start:start + L] = k", "cache[\"k\"][:, :, start + 1:start + L + 1] = k", P_CACHE, "kv_cache", "keys written one slot late: a decoded token misses its own key (and reads an empty slot)", ["cache.causal_off_by_one"], "", "Off-by-one in the static cache's write index (keys only)."),
    # ---- hf_roberta_sdpa: the HF-style post-LN encoder with SDPA
    ("r.extended_mask_not_inverted", R, "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min", "extended_attention_mask = extended_attention_mask * torch.finfo(dtype).min", R_ALL, "mask", "additive mask built without 1 - mask: real tokens are masked, padding is kept", ["mask.polarity_inverted"], "", "The 1 - mask inversion is lost."),
    ("r.mask_added_as_bias", R, "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min", "extended_attention_mask = extended_attention_mask", R_ALL, "mask", "the 0/1 attention mask passed to SDPA as a float bias (keep = +1, pad = 0)", ["mask.added_as_bias"], "", "The conversion to an additive mask is skipped; SDPA adds the 0/1 floats."),
    ("r.mask_fp32_min_in_half", R, "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min", "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(torch.float32).min", R_ALL, "precision", "float32's minimum used as the fill in a 16-bit model (overflows to -inf, 0 * -inf = NaN)", ["numerics.fill_value_overflow", "numerics.overflow"], "", "The fill value hard-codes float32's finfo.min."),
    ("r.causal_mask_flipped", R, "causal_mask = seq_ids[None, :] <= seq_ids[:, None]", "causal_mask = seq_ids[None, :] >= seq_ids[:, None]", R_ALL, "mask", "causal mask built upper-triangular: queries see the future and not the past", ["mask.causal_leak"], "", "The comparison is flipped."),
    ("r.padding_on_query_axis", R, "extended_attention_mask = attention_mask[:, None, None, :].to(dtype)", "extended_attention_mask = attention_mask[:, None, :, None].to(dtype)", R_ALL, "mask", "the padding mask broadcast over the query axis", ["mask.applied_to_queries"], "", "The mask is unsqueezed on the key axis instead of the query axis."),
    ("r.qkv_per_head_layout", R, "qkv = self.qkv(hidden_states).view(batch_size, seq_len, 3, self.num_attention_heads, self.attention_head_size)", "qkv = self.qkv(hidden_states).view(batch_size, seq_len, self.num_attention_heads, 3, self.attention_head_size).transpose(2, 3)", R_ALL, "qkv_projection", "packed qkv read head-major ([H, 3, d], GPT-NeoX) where it is part-major ([3, H, d])", ["attention.qkv_order_wrong"], "", "The NeoX per-head layout applied to a part-major checkpoint."),
    ("r.split_no_head_transpose", R, "query_layer, key_layer, value_layer = qkv.permute(2, 0, 3, 1, 4).unbind(0)", "query_layer, key_layer, value_layer = qkv.permute(2, 0, 1, 3, 4).unbind(0)", R_ALL, "heads_split_merge", "q/k/v left as [B, L, H, d] (the flash-attn layout) and given to SDPA, which wants [B, H, L, d]", ["attention.heads_split_wrong_order"], "", "The head axis is not moved before SDPA."),
    ("r.scale_inverted", R, "self.scaling = self.attention_head_size ** -0.5", "self.scaling = self.attention_head_size ** 0.5", R_ALL, "attention_scale", "SDPA's scale given sqrt(d) (it multiplies)", ["attention.scale_inverted"], "", "SDPA's scale argument multiplies; sqrt(d) passed instead of its inverse."),
    ("r.ffn_residual_from_layer_input", R, "return self.output(intermediate_output, attention_output)", "return self.output(intermediate_output, hidden_states)", R_ALL, "residual_norm_placement", "the FFN's residual adds the layer input instead of the attention sublayer's output", [], "a residual connection adds another tensor than its sublayer's input (skips the previous sublayer)", "The wrong tensor is passed as the residual."),
    ("r.act_relu", R, "hidden_act: str = \"gelu\"", "hidden_act: str = \"relu\"", R_ALL, "ffn_activation", "ReLU where the exact GELU is declared", ["ffn.activation_relu"], "", "The config default is the original Transformer's."),
    ("r.ln_eps_default", R, "layer_norm_eps: float = 1e-12", "layer_norm_eps: float = 1e-5", R_ALL, "norm", "LayerNorm eps 1e-5 (torch's default) where 1e-12 is declared", ["layer_norm.eps_wrong"], "", "torch's default eps instead of BERT's."),
    ("r.layers_shared", R, "self.layer = nn.ModuleList([RobertaLayer(config) for _ in range(config.num_hidden_layers)])", "self.layer = nn.ModuleList([RobertaLayer(config)] * config.num_hidden_layers)", ["encoder"], "parameters", "every layer of the stack is one module (the last loaded parameters win)", ["blocks.layer_params_wrong"], "", "List multiplication shares one layer."),
    # ---- bigvision_vit: the flax-layout ViT
    ("v.patch_grid_column_major", V, "x = x.permute(0, 1, 3, 2, 4, 5)", "x = x.permute(0, 3, 1, 2, 4, 5)", V_PATCH, "vit", "patch tokens read column-major from the grid", ["vit.patch_order"], "", "The grid axes are swapped in the permute."),
    ("v.patch_no_grid_transpose", V, "x = x.permute(0, 1, 3, 2, 4, 5)", "x = x", V_PATCH, "vit", "patchify reshape without the transpose: tokens are strips, not p x p patches", [], "patch extraction without the grid transpose (each token holds p rows of p-pixel strips across patches)", "The einops-style rearrange is done by reshape alone."),
    ("v.kernel_flattened_channels_first", V, "return x @ self.kernel.reshape(p * p * C, -1) + self.bias", "return x @ self.kernel.permute(2, 0, 1, 3).reshape(p * p * C, -1) + self.bias", V_PATCH, "vit", "patch kernel flattened channels-first against channels-last patches", ["vit.patch_flatten_order"], "", "A torch-conv habit: the kernel is flattened (C, p, p) while the patches are (p, p, C)."),
    ("v.patch_bias_dropped", V, "return x @ self.kernel.reshape(p * p * C, -1) + self.bias", "return x @ self.kernel.reshape(p * p * C, -1)", V_PATCH, "parameters", "the patch embedding's bias is never added", ["params.bias_unused"], "", "The Dense bias is dropped."),
    ("v.cls_appended", V, "x = torch.cat([cls, x], dim=1)", "x = torch.cat([x, cls], dim=1)", ["vit"], "vit", "class token appended after the patches (the head still reads token 0)", ["vit.pooling_wrong_token"], "", "The class token is concatenated at the end."),
    ("v.pool_mean_with_cls", V, "x = x[:, 0]", "x = x.mean(dim=1)", ["vit"], "vit", "mean pooling over all tokens, the class token included", ["vit.pooling_mean_with_cls"], "", "big_vision's pool_type='gap' written over every token."),
    ("v.final_norm_missing", V, "x = self.encoder_norm(x)", "x = x", ["vit"], "residual_norm_placement", "the encoder's final norm is dropped", ["blocks.final_norm_missing"], "", "encoder_norm is not applied."),
    ("v.ln_unbiased_variance", V, "var = (x - mean).pow(2).mean(-1, keepdim=True)", "var = x.var(-1, keepdim=True)", V_ENC, "norm", "LayerNorm with the unbiased variance", ["layer_norm.unbiased_variance"], "", "torch.var's default unbiased=True."),
    ("v.ln_eps_outside_sqrt", V, "return (x - mean) * torch.rsqrt(var + LN_EPS) * scale + bias", "return (x - mean) / (torch.sqrt(var) + LN_EPS) * scale + bias", V_ENC, "norm", "LayerNorm eps added outside the square root", ["layer_norm.eps_outside_sqrt"], "", "The std + eps form."),
    ("v.ln_not_centred", V, "return (x - mean) * torch.rsqrt(var + LN_EPS) * scale + bias", "return x * torch.rsqrt(var + LN_EPS) * scale + bias", V_ENC, "norm", "LayerNorm divides by the std but does not subtract the mean", ["layer_norm.not_centred"], "", "The centring is dropped from the output."),
    ("v.softmax_over_queries", V, "weights = torch.softmax(logits, dim=-1)", "weights = torch.softmax(logits, dim=-2)", V_ENC, "softmax", "softmax over the query axis", ["attention.softmax_axis_wrong"], "", "dim=-2 instead of -1 on [B, H, Lq, Lk]."),
    ("v.weights_contracted_over_queries", V, "attended = torch.einsum(\"bhqk,bkhd->bqhd\", weights, value)", "attended = torch.einsum(\"bhkq,bkhd->bqhd\", weights, value)", V_ENC, "softmax", "attention weights transposed in the value einsum (contracted over the query axis)", [], "the attention weights are applied transposed (weights[k, q] used for query q)", "Two einsum labels swapped."),
    ("v.fill_minus_1e9", V, "big_neg = torch.finfo(logits.dtype).min", "big_neg = -1e9", ["encoder_layer"], "precision", "a -1e9 fill that float16 cannot hold", ["numerics.fill_value_overflow"], "", "The classic -1e9 constant instead of finfo.min."),
    ("v.gelu_tanh", V, "x = F.gelu(x)", "x = F.gelu(x, approximate=\"tanh\")", V_ENC, "ffn_activation", "tanh GELU where the exact GELU is declared (flax's nn.gelu default is approximate=True)", ["ffn.activation_gelu_tanh"], "", "flax.linen.gelu approximates by default; a port copies that."),
    ("v.quick_gelu", V, "x = F.gelu(x)", "x = x * torch.sigmoid(1.702 * x)", V_ENC, "ffn_activation", "QuickGELU (CLIP) where the exact GELU is declared", [], "the FFN uses QuickGELU x * sigmoid(1.702 x), none of the declared activations", "CLIP's QuickGELU carried into a ViT."),
    ("v.residual_from_normed", V, "y = self.LayerNorm_0(x)", "x = self.LayerNorm_0(x)", V_ENC, "residual_norm_placement", "the attention residual adds the normalised input", ["blocks.residual_after_norm"], "", "The norm output overwrites the residual stream."),
    # ---- marian_seq2seq: the HF Marian/BART-style encoder-decoder
    ("m.cross_keys_from_decoder", M, "key_states = self._shape(self.k_proj(key_value_states), -1, bsz)", "key_states = self._shape(self.k_proj(hidden_states), -1, bsz)", M_DEC, "cross_attention", "cross-attention keys computed from the decoder stream instead of the encoder output", [], "cross-attention keys (or values) taken from the decoder's own states instead of the memory", "A copy-paste of the self-attention branch."),
    ("m.cross_mask_dropped", M, "cross_attn_out = self.encoder_attn(hidden_states=hidden_states, key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask)", "cross_attn_out = self.encoder_attn(hidden_states=hidden_states, key_value_states=encoder_hidden_states)", M_DEC, "cross_attention", "the source padding mask never reaches the cross-attention", ["mask.ignored"], "", "encoder_attention_mask is not passed on."),
    ("m.cross_residual_missing", M, "hidden_states = self.encoder_attn_layer_norm(residual + cross_attn_out)", "hidden_states = self.encoder_attn_layer_norm(cross_attn_out)", M_DEC, "cross_attention", "the cross-attention sublayer's residual is missing", ["blocks.residual_missing"], "", "The residual is dropped around the cross-attention."),
    ("m.cross_norm_is_self_norm", M, "hidden_states = self.encoder_attn_layer_norm(residual + cross_attn_out)", "hidden_states = self.self_attn_layer_norm(residual + cross_attn_out)", M_DEC, "parameters", "the cross-attention's norm uses the self-attention norm's parameters", ["params.read_from_other_module"], "", "Copy-paste of the first norm's name."),
    ("m.cross_values_from_key_proj", M, "value_states = self._shape(self.v_proj(key_value_states), -1, bsz)", "value_states = self._shape(self.k_proj(key_value_states), -1, bsz)", M_DEC, "cross_attention", "cross-attention values through the key projection", ["attention.value_uses_key_projection"], "", "Copy-paste of k_proj in the cross-attention branch."),
    ("m.causal_hides_diagonal", M, "mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)", "mask.masked_fill_(mask_cond < mask_cond.view(mask.size(-1), 1), 0)", M_ALL, "mask", "the causal mask hides the diagonal (the +1 lost)", ["mask.causal_diagonal_hidden"], "", "Off by one in _make_causal_mask."),
    ("m.scaling_dropped", M, "query_states = self.q_proj(hidden_states) * self.scaling", "query_states = self.q_proj(hidden_states)", M_ALL, "attention_scale", "the queries are not scaled", ["attention.scale_missing"], "", "A refactor drops the query scaling (as when moving the scale into an SDPA call that is not made)."),
    ("m.merge_no_transpose", M, "attn_output = attn_output.transpose(1, 2)", "attn_output = attn_output", M_ALL, "heads_split_merge", "heads merged without moving the head axis back", ["attention.heads_merged_wrong_order"], "", "The transpose before the reshape is dropped."),
    ("m.pe_exponent_per_feature", M, "position_enc = torch.tensor([[pos / math.pow(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)], dtype=torch.float64)", "position_enc = torch.tensor([[pos / math.pow(10000, j / dim) for j in range(dim)] for pos in range(n_pos)], dtype=torch.float64)", ["seq2seq"], "embedding", "sinusoidal exponent j/d per feature instead of 2*(j//2)/d per pair (the cosines get other frequencies)", ["positional.frequency_wrong"], "", "The pair index j // 2 is lost."),
    ("m.positions_offset_two", M, "positions = torch.arange(past_key_values_length, past_key_values_length + seq_len, dtype=torch.long)", "positions = torch.arange(past_key_values_length + 2, past_key_values_length + seq_len + 2, dtype=torch.long)", ["seq2seq"], "embedding", "positions offset by 2 (BART's learned-position offset carried into Marian's sinusoidal table)", ["positional.position_offset"], "", "BART's offset of 2 applied to a table that has none."),
    ("m.embed_scale_off", M, "scale_embedding: bool = True", "scale_embedding: bool = False", ["seq2seq"], "embedding", "embeddings not scaled by sqrt(d_model) (BART's default) where Marian scales them", ["embedding.scale_missing"], "", "The BART config default is used."),
]


# Public reports of the same class found by searching GitHub issues and pull requests.
REPORTS = {
    "p.rope_half_split_pairs": "https://github.com/karpathy/nanochat/issues/264",
    "p.gqa_keys_tiled": "https://github.com/onnx/onnx/pull/7274",
    "p.cache_length_not_accumulated": "https://github.com/skyzh/tiny-llm/pull/46",
    "r.mask_added_as_bias": "https://github.com/timeseriesAI/tsai/issues/171",
    "r.mask_fp32_min_in_half": "https://github.com/microsoft/onnxscript/pull/2992",
    "v.fill_minus_1e9": "https://github.com/google/flax/issues/982",
    "v.gelu_tanh": "https://github.com/huggingface/pytorch-image-models/pull/2105",
    "v.ln_unbiased_variance": "https://github.com/LBANN/lbann/pull/2024",
    "v.ln_eps_outside_sqrt": "https://github.com/tracel-ai/burn/issues/2185",
    "v.pool_mean_with_cls": "https://github.com/lucidrains/vit-pytorch/issues/226",
}

# id, impl, original, replacement, components, why it stays correct
CONTROLS = [
    ("control.p.square_by_product", P, "h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)", "h = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + EPS)", ["rms_norm", "decoder_block"], "h * h is h squared."),
    ("control.p.scale_by_power", P, "scores = torch.matmul(q, k[:, :, None].transpose(-1, -2)) / math.sqrt(head_dim)", "scores = torch.matmul(q, k[:, :, None].transpose(-1, -2)) * head_dim ** -0.5", P_ATT, "Multiplying by d ** -0.5 is dividing by sqrt(d)."),
    ("control.p.rotation_terms_reordered", P, "rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)", "rotated = torch.stack((cos * x_even - sin * x_odd, cos * x_odd + sin * x_even), dim=-1)", ["rope", "causal_self_attention"], "The same rotation with the products reordered."),
    ("control.r.scale_by_sqrt", R, "self.scaling = self.attention_head_size ** -0.5", "self.scaling = 1.0 / math.sqrt(self.attention_head_size)", R_ALL, "1 / sqrt(d) is d ** -0.5."),
    ("control.r.causal_by_tril", R, "causal_mask = seq_ids[None, :] <= seq_ids[:, None]", "causal_mask = torch.tril(torch.ones(seq_length, seq_length, dtype=torch.bool, device=self.device))", R_ALL, "The lower triangle is key <= query."),
    ("control.r.merge_by_permute", R, "context_layer = context_layer.transpose(1, 2).contiguous()", "context_layer = context_layer.permute(0, 2, 1, 3).contiguous()", R_ALL, "permute(0, 2, 1, 3) is transpose(1, 2) on a 4-d tensor."),
    ("control.v.square_by_method", V, "var = (x - mean).pow(2).mean(-1, keepdim=True)", "var = (x - mean).square().mean(-1, keepdim=True)", V_ENC, "square() is pow(2)."),
    ("control.m.merge_by_flatten", M, "attn_output = attn_output.reshape(bsz, tgt_len, self.embed_dim)", "attn_output = attn_output.flatten(2)", M_ALL, "Flattening the last two axes of [B, L, H, d] is the reshape to [B, L, D]."),
    ("control.v.gelu_by_erf", V, "x = F.gelu(x)", "x = 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))", V_ENC, "The exact GELU written with erf."),
    ("control.v.scale_by_power", V, "query = query / math.sqrt(depth)", "query = query * depth ** -0.5", V_ENC, "Multiplying by d ** -0.5 is dividing by sqrt(d)."),
]


def locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise SystemExit(f"{impl}: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line


def row(rid: str, impl: str, original: str, replacement: str, components: list[str]) -> dict:
    number, line = locate(impl, original)
    indent = line[: len(line) - len(line.lstrip())]
    return {
        "id": rid,
        "impl": impl,
        "file": f"{FOLDER}/{impl}.py",
        "line": number,
        "original": line,
        "replacement": indent + replacement,
        "components": components,
    }


def tables() -> tuple[list[dict], list[dict]]:
    bugs = []
    for rid, impl, orig, repl, comps, family, cls, codes, without, desc in BUGS:
        bugs.append(
            row(rid, impl, orig, repl, comps)
            | {
                "family": family,
                "class": cls,
                "expected_codes": codes,
                "class_without_code": without,
                "public_report": REPORTS.get(rid, ""),
                "description": desc,
            }
        )
    controls = [
        row(rid, impl, orig, repl, comps) | {"why_correct": why}
        for rid, impl, orig, repl, comps, why in CONTROLS
    ]
    return bugs, controls


def main() -> None:
    bugs, controls = tables()
    assert set(REPORTS) <= {b["id"] for b in bugs}
    for name, data in (("bugs.json", bugs), ("controls.json", controls)):
        (HERE / name).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
