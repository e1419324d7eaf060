# fmt: off
# ruff: noqa: E501
"""Write bugs.json and controls.json of the fourth blind set from the tables below.

Each row names one line of an implementation *without its indentation* (it must occur exactly
once in the file) and the line that replaces it (indented as the original). Run from anywhere:

    python tests/blind4/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# components each part of each implementation reaches
GPT_ATT = ["causal_self_attention", "decoder_block", "causal_lm"]
GPT_BLK = ["decoder_block", "causal_lm"]
GPT_LM = ["causal_lm"]
QW_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
QW_ATT = ["causal_self_attention", "decoder_block", "causal_lm"]
QW_NORM = ["rms_norm", "decoder_block", "causal_lm"]
QW_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
QW_BLK = ["decoder_block", "causal_lm"]
QW_LM = ["causal_lm"]
DE_PE = ["patch_embed", "vit"]
DE_LAYER = ["encoder_layer", "vit"]
DE_VIT = ["vit"]
AN_MHA = ["mha", "encoder_layer", "decoder_layer", "seq2seq"]
AN_SUB = ["encoder_layer", "decoder_layer", "seq2seq"]
AN_DEC = ["decoder_layer", "seq2seq"]
AN_S2S = ["seq2seq"]

R_GPT2_LEFTPAD = "https://github.com/huggingface/transformers/issues/21080"
R_CACHE_POS = "https://github.com/ml-explore/mlx-lm/pull/93"
R_GPT2_PAST = "https://github.com/huggingface/transformers/issues/18104"
R_GELU = "https://github.com/nntile/nntile/pull/370"
R_FILL = "https://github.com/NVIDIA/apex/issues/1052"
R_FILL2 = "https://github.com/ahrefs/ocannl/issues/548"
R_THETA = "https://github.com/casper-hansen/AutoAWQ/issues/567"
R_THETA2 = "https://github.com/sgl-project/SpecForge/issues/265"
R_SWA_CACHE = "https://github.com/huggingface/transformers/pull/47708"
R_LN_STD = "https://github.com/harvardnlp/annotated-transformer/pull/119"
R_LN_EPS = "https://github.com/codertimo/BERT-pytorch/issues/30"
R_XMASK = "https://github.com/Kamichanw/SeekDeeper/issues/3"
R_XMASK2 = "https://github.com/OpenNMT/OpenNMT-py/issues/272"
R_CONV1D = "https://github.com/nntile/nntile/pull/402"
R_ALLEN = "https://github.com/allenai/allennlp/pull/953"

# (id, impl, original, replacement, components, family, class, expected codes, class without code, public report, description)
BUGS: list[tuple] = [
    # ---- mingpt_gpt2 ----
    ("gpt.scale_by_head_dim", "mingpt_gpt2", "attn_weights = attn_weights / math.sqrt(value.size(-1))", "attn_weights = attn_weights / value.size(-1)", GPT_ATT, "attention_scale", "scores divided by d_k instead of sqrt(d_k)", ["attention.scale_wrong"], "", "", "The sqrt is lost from the attention scale."),
    ("gpt.causal_top_left_in_steps", "mingpt_gpt2", "causal = torch.tril(causal, diagonal=key_length - query_length)", "causal = torch.tril(causal)", GPT_ATT, "kv_cache", "causal mask aligned top-left when the cache makes Lk > Lq", ["cache.causal_top_left"], "", R_GPT2_PAST, "The causal mask ignores the cached keys' offset, as a port that slices the tril buffer [:T, :T] does."),
    ("gpt.causal_diagonal_hidden", "mingpt_gpt2", "causal = torch.tril(causal, diagonal=key_length - query_length)", "causal = torch.tril(causal, diagonal=key_length - query_length - 1)", GPT_ATT, "mask", "strict causal mask: a token cannot see itself", ["mask.causal_diagonal_hidden", "cache.causal_off_by_one"], "", "", "The causal diagonal is shifted by one and hides each token's own key."),
    ("gpt.padding_mask_inverted", "mingpt_gpt2", "visible = causal[None, None] & attention_mask[:, None, None, :]", "visible = causal[None, None] & ~attention_mask[:, None, None, :]", GPT_ATT, "mask", "keep-mask read as a pad-mask", ["mask.polarity_inverted"], "", "", "The 1 = token attention_mask is used as if 1 meant padding."),
    ("gpt.padding_mask_ignored", "mingpt_gpt2", "visible = causal[None, None] & attention_mask[:, None, None, :]", "visible = causal[None, None].expand(attention_mask.shape[0], 1, -1, -1)", GPT_ATT, "mask", "attention_mask never reaches the scores", ["mask.ignored", "padding.left_padding_changes_output"], "", R_GPT2_LEFTPAD, "Only the causal mask is applied; padded keys are attended."),
    ("gpt.mask_fill_minus_1e9", "mingpt_gpt2", "mask_value = torch.finfo(attn_weights.dtype).min", "mask_value = -1e9", GPT_ATT, "precision", "fill value beyond float16's range", ["numerics.fill_value_overflow"], "", R_FILL, "The masked scores are filled with -1e9, which float16 cannot hold."),
    ("gpt.softmax_over_queries", "mingpt_gpt2", "attn_weights = F.softmax(attn_weights.to(upcast), dim=-1).to(value.dtype)", "attn_weights = F.softmax(attn_weights.to(upcast), dim=-2).to(value.dtype)", GPT_ATT, "softmax", "softmax over the query axis", ["attention.softmax_axis_wrong"], "", "", "The softmax normalises over queries."),
    ("gpt.fully_masked_rows_uniform", "mingpt_gpt2", "attn_weights = attn_weights * visible.any(dim=-1, keepdim=True)", "attn_weights = attn_weights.to(value.dtype)", GPT_ATT, "mask", "a query without visible keys averages every value", ["mask.fully_masked_rows_uniform"], "", "", "The guard zeroing rows with no visible key is lost, so finfo.min rows spread evenly."),
    ("gpt.split_heads_no_permute", "mingpt_gpt2", "return tensor.view(new_shape).permute(0, 2, 1, 3)  # (B, nh, T, hs)", "return tensor.view(tensor.size(0), self.n_head, tensor.size(1), self.head_dim)", GPT_ATT, "heads_split_merge", "heads split by a view without the transpose", ["attention.heads_split_wrong_order"], "", "", "Heads are cut from the flat projection by a view straight to (B, nh, T, hs)."),
    ("gpt.merge_heads_interleaved", "mingpt_gpt2", "tensor = tensor.permute(0, 2, 1, 3).contiguous()", "tensor = tensor.permute(0, 2, 3, 1).contiguous()", GPT_ATT, "heads_split_merge", "heads merged feature-major", ["attention.heads_merged_wrong_order"], "", "", "The merge permutes (B, T, hs, nh), interleaving the heads' features."),
    ("gpt.c_attn_split_kqv", "mingpt_gpt2", "query, key, value = self.c_attn(hidden_states).split(self.n_embd, dim=2)", "key, query, value = self.c_attn(hidden_states).split(self.n_embd, dim=2)", GPT_ATT, "qkv_projection", "fused c_attn split as k, q, v", ["attention.qkv_order_wrong"], "", R_CONV1D, "The fused projection's thirds are unpacked in the wrong order."),
    ("gpt.cache_keys_prepended", "mingpt_gpt2", "key = torch.cat((past_key, key), dim=-2)", "key = torch.cat((key, past_key), dim=-2)", GPT_ATT, "kv_cache", "new keys put before the cached ones", ["cache.keys_prepended"], "", "", "The new key is concatenated in front of past_key."),
    ("gpt.past_length_wrong_axis", "mingpt_gpt2", "past_length = past_key_values[0][0].size(-2)", "past_length = past_key_values[0][0].size(-1)", GPT_LM, "kv_cache", "past length read from the head_dim axis", ["cache.position_offset_wrong"], "", R_CACHE_POS, "The cached length is read from the wrong axis of the key tensor, so steps get wrong learned positions."),
    ("gpt.positions_restart_each_step", "mingpt_gpt2", "position_ids = torch.arange(past_length, t + past_length, dtype=torch.long, device=idx.device)", "position_ids = torch.arange(0, t, dtype=torch.long, device=idx.device)", GPT_LM, "kv_cache", "cached steps numbered from 0", ["cache.position_offset_wrong"], "", R_CACHE_POS, "New tokens always get positions 0.. regardless of the cache."),
    ("gpt.given_positions_ignored", "mingpt_gpt2", "if position_ids is None:", "if True:", GPT_LM, "embedding_positions", "given position ids ignored (left padding not shifted)", ["padding.left_positions_not_shifted"], "", R_GPT2_LEFTPAD, "Positions are always derived from the cache length, so left-padded rows get unshifted positions."),
    ("gpt.exact_gelu", "mingpt_gpt2", "h = gelu_new(self.c_fc(x))", "h = F.gelu(self.c_fc(x))", GPT_BLK, "ffn_activation", "exact GELU where GPT-2 uses the tanh GELU", ["ffn.activation_gelu"], "", R_GELU, "The MLP uses the exact GELU instead of gelu_new."),
    ("gpt.gelu_coefficient_typo", "mingpt_gpt2", "return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))", "return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.44715 * torch.pow(x, 3.0))))", GPT_BLK, "ffn_activation", "tanh GELU with a wrong cubic coefficient", [], "an activation that is none of ReLU, exact GELU or tanh GELU (a wrong constant in gelu_new)", "", "A typo in gelu_new's cubic coefficient."),
    ("gpt.residual_after_ln1", "mingpt_gpt2", "x = x + attn_output", "x = self.ln_1(x) + attn_output", GPT_BLK, "residual_norm_placement", "residual taken from the normalised input", ["blocks.residual_after_norm"], "", "", "The attention residual adds to ln_1(x) instead of x."),
    ("gpt.mlp_post_ln", "mingpt_gpt2", "x = x + self.mlp(self.ln_2(x))", "x = self.ln_2(x + self.mlp(x))", GPT_BLK, "residual_norm_placement", "MLP sublayer post-LN in a pre-LN block", ["blocks.norm_placement_post"], "", "", "The second sublayer normalises after the residual add."),
    ("gpt.ln_2_before_attention", "mingpt_gpt2", "attn_output, present = self.attn(self.ln_1(x), layer_past=layer_past, attention_mask=attention_mask)", "attn_output, present = self.attn(self.ln_2(x), layer_past=layer_past, attention_mask=attention_mask)", GPT_BLK, "parameters_and_output", "attention normalised with ln_2's parameters", ["params.read_from_other_module"], "", "", "The attention input goes through the second LayerNorm."),
    ("gpt.head_untied", "mingpt_gpt2", "self.lm_head.weight = self.transformer.wte.weight  # weight tying", "# self.lm_head.weight = self.transformer.wte.weight  # weight tying", GPT_LM, "parameters_and_output", "lm_head not tied to wte", ["params.count_wrong"], "", "", "The tie is lost: the head is a matrix of its own that loading wte never reaches."),
    ("gpt.embeddings_scaled", "mingpt_gpt2", "x = tok_emb + pos_emb", "x = tok_emb * math.sqrt(self.config.n_embd) + pos_emb", GPT_LM, "embedding_positions", "token embeddings multiplied by sqrt(d_model)", ["embedding.scale_on_embeddings"], "", "", "A tutorial's sqrt(d_model) embedding scale carried into GPT-2."),
    ("gpt.blocks_one_module", "mingpt_gpt2", "h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),", "h=nn.ModuleList([Block(config)] * config.n_layer),", GPT_LM, "parameters_and_output", "every layer is one module repeated", ["blocks.layer_params_wrong", "params.round_trip_changed", "params.count_wrong"], "", "", "The list repeats one Block, so the layers share parameters."),
    # ---- qwen_swa ----
    ("qwen.rope_theta_not_passed", "qwen_swa", "self.rotary_emb = Qwen2RotaryEmbedding(self.head_dim, base=config.rope_theta)", "self.rotary_emb = Qwen2RotaryEmbedding(self.head_dim)", QW_ATT, "rope", "RoPE base left at 10000", ["positional.base_wrong"], "", R_THETA, "rope_theta 1e6 is not passed to the rotary embedding."),
    ("qwen.rope_table_interleaved", "qwen_swa", "emb = torch.cat((freqs, freqs), dim=-1)", "emb = torch.repeat_interleave(freqs, 2, dim=-1)", QW_ROPE, "rope", "cos/sin table laid out for interleaved pairs fed to rotate_half", [], "a cos/sin table for interleaved pairs used with rotate_half (half-split) pairs", "", "The table repeats each frequency twice in place while rotate_half pairs (i, i + d/2)."),
    ("qwen.rotate_half_sign", "qwen_swa", "return torch.cat((-x2, x1), dim=-1)", "return torch.cat((x2, -x1), dim=-1)", QW_ROPE, "rope", "rotation by -theta", ["rope.rotation_inverted"], "", "", "rotate_half negates the wrong half."),
    ("qwen.rope_queries_unrotated", "qwen_swa", "q_embed = (q * cos) + (rotate_half(q) * sin)", "q_embed = q", QW_ATT, "rope", "only the keys rotated", ["rope.applied_to_wrong_tensors"], "", "", "The queries skip the rotation."),
    ("qwen.rope_angles_half", "qwen_swa", "inv_freq = self.inv_freq.to(_compute_dtype(x.dtype))", "inv_freq = self.inv_freq.to(x.dtype)", QW_ROPE, "precision", "RoPE angles formed in 16-bit", ["numerics.rope_angles_low_precision", "numerics.table_low_precision"], "", "", "The angles are computed in the activations' dtype."),
    ("qwen.rms_eps_outside_sqrt", "qwen_swa", "hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)", "hidden_states = hidden_states / (torch.sqrt(variance) + self.variance_epsilon)", QW_NORM, "norm", "eps added outside the square root", ["layer_norm.eps_outside_sqrt"], "", R_LN_EPS, "The RMS is computed as sqrt(ms) + eps."),
    ("qwen.rms_stats_in_half", "qwen_swa", "hidden_states = hidden_states.to(_compute_dtype(input_dtype))", "hidden_states = hidden_states.to(input_dtype)", QW_NORM, "precision", "RMSNorm statistics in 16-bit", ["numerics.norm_statistics_low_precision"], "", "", "The float32 upcast of the RMSNorm input is lost."),
    ("qwen.rms_gain_plus_one", "qwen_swa", "return self.weight * hidden_states.to(input_dtype)", "return (1.0 + self.weight) * hidden_states.to(input_dtype)", QW_NORM, "norm", "gain read as 1 + weight", ["layer_norm.gain_plus_one"], "", "", "Gemma's (1 + weight) gain carried into Qwen2."),
    ("qwen.rms_centred", "qwen_swa", "variance = hidden_states.pow(2).mean(-1, keepdim=True)", "variance = hidden_states.var(-1, keepdim=True, unbiased=False)", QW_NORM, "norm", "RMSNorm divides by the standard deviation", ["layer_norm.rms_wrong_statistics"], "", "", "The mean square is replaced by the variance."),
    ("qwen.gqa_tiled", "qwen_swa", "group = torch.arange(self.num_heads, device=hidden_states.device) // g", "group = torch.arange(self.num_heads, device=hidden_states.device) % self.num_key_value_heads", QW_ATT, "gqa", "query heads mapped to kv heads by modulo", ["attention.kv_heads_tiled"], "", "", "GQA maps query head h to kv head h % n_kv instead of h // g."),
    ("qwen.values_tiled", "qwen_swa", "value_states = value_states[:, group]", "value_states = value_states.repeat(1, g, 1, 1)", QW_ATT, "gqa", "value heads tiled while key heads are grouped", ["attention.kv_heads_tiled"], "", "", "The values are expanded with repeat (tiling) while the keys are indexed by group."),
    ("qwen.rope_inv_freq_step", "qwen_swa", "inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))", "inv_freq = 1.0 / (base ** (torch.arange(0, dim // 2, dtype=torch.float64) / dim))", QW_ROPE, "rope", "frequency exponents i/d instead of 2i/d", ["positional.frequency_wrong"], "", "", "The exponent steps by 1 over d instead of by 2."),
    ("qwen.fused_read_part_major", "qwen_swa", "fused = fused.view(bsz, q_len, self.num_key_value_heads, g + 2, self.head_dim)", "fused = fused.view(bsz, q_len, g + 2, self.num_key_value_heads, self.head_dim).transpose(2, 3)", QW_ATT, "qkv_projection", "per-group fused qkv read as part-major", ["attention.qkv_order_wrong"], "", R_CONV1D, "The grouped query_key_value is viewed as if it were [q | k | v]."),
    ("qwen.window_one_too_wide", "qwen_swa", "visible = (k_slot[None, :] <= q_slot[:, None]) & (k_slot[None, :] > q_slot[:, None] - self.sliding_window)", "visible = (k_slot[None, :] <= q_slot[:, None]) & (k_slot[None, :] >= q_slot[:, None] - self.sliding_window)", QW_ATT, "mask", "sliding window keeps w + 1 keys", ["mask.sliding_window_wrong"], "", "", "The window bound is inclusive, as flash-attn's window_size=(w, 0) is."),
    ("qwen.rolling_cache_keeps_too_few", "qwen_swa", "keep = self.window - 1", "keep = self.window - 2", QW_ATT, "kv_cache", "rolling buffer drops a key the window still needs", ["mask.sliding_window_wrong"], "", R_SWA_CACHE, "The rolling buffer keeps w - 2 keys, so cached steps see a window of w - 1."),
    ("qwen.step_causal_top_left", "qwen_swa", "q_slot = torch.arange(q_len, device=hidden_states.device) + (first + kv_len - q_len)", "q_slot = torch.arange(q_len, device=hidden_states.device) + first", QW_ATT, "kv_cache", "query slots numbered from the first kept key", ["cache.causal_top_left"], "", "", "Query slots ignore the kept keys, aligning the mask top-left in steps."),
    ("qwen.padding_only_without_cache", "qwen_swa", "if attention_mask is not None:", "if attention_mask is not None and cache is None:", QW_ATT, "kv_cache", "key padding dropped in cached steps", ["cache.padding_dropped_in_steps"], "", "", "The padding mask is only applied to uncached calls."),
    ("qwen.padding_slice_from_zero", "qwen_swa", "visible = visible & attention_mask[:, None, None, first : first + kv_len]", "visible = visible & attention_mask[:, None, None, :kv_len]", QW_ATT, "kv_cache", "key padding read from slot 0 instead of the kept keys' slots", [], "the cache reads the key-padding mask at the wrong slots (from 0, not from the first kept key)", "", "The mask is sliced from its start rather than at the rolling buffer's first slot."),
    ("qwen.positions_restart", "qwen_swa", "start = 0 if cache is None else cache.seen", "start = 0", QW_ATT, "kv_cache", "cached steps rotated from position 0", ["cache.rope_offset_wrong"], "", R_CACHE_POS, "Derived positions ignore the cache's length."),
    ("qwen.o_proj_bias", "qwen_swa", "self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)", "self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=True)", QW_ATT, "parameters_and_output", "an output bias Qwen2 does not have", ["params.count_wrong", "params.names_differ"], "", "", "o_proj gets a bias, randomly initialised and never loaded."),
    ("qwen.qkv_bias_dropped", "qwen_swa", "fused = F.linear(hidden_states, weight, self.query_key_value_bias.reshape(-1))", "fused = F.linear(hidden_states, weight)", QW_ATT, "parameters_and_output", "q/k/v bias never added", ["params.bias_unused"], "", "", "The fused projection's bias is dropped."),
    ("qwen.nan_guard_lost", "qwen_swa", "attn_weights = torch.nan_to_num(attn_weights, nan=0.0)", "# attn_weights = torch.nan_to_num(attn_weights, nan=0.0)", QW_ATT, "mask", "rows without visible keys are NaN", ["mask.fully_masked_rows_nan"], "", "", "The NaN guard after the -inf softmax is commented out."),
    ("qwen.gate_up_swapped", "qwen_swa", "return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))", "return self.down_proj(F.silu(self.up_proj(x)) * self.gate_proj(x))", QW_FFN, "ffn_activation", "gate and up swapped", ["ffn.gate_up_swapped"], "", "", "SiLU is applied to the up projection."),
    ("qwen.act_after_gating", "qwen_swa", "return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))", "return self.down_proj(F.silu(self.gate_proj(x) * self.up_proj(x)))", QW_FFN, "ffn_activation", "activation of the product", ["ffn.activation_after_gating"], "", "", "SiLU wraps the product gate * up."),
    ("qwen.layers_share_cache", "qwen_swa", "cache = [RollingCache(model.config.sliding_window) for _ in model.layers]", "cache = [RollingCache(model.config.sliding_window)] * len(model.layers)", QW_LM, "kv_cache", "every layer shares one cache", [], "the layers share one KV cache (each layer writes into the same buffer)", "", "A list repeated by * makes one RollingCache for all layers."),
    ("qwen.head_tied", "qwen_swa", "return self.lm_head(hidden_states)", "return F.linear(hidden_states, self.embed_tokens.weight)", QW_LM, "parameters_and_output", "untied head replaced by the token embedding", ["model.head_tied_to_embedding"], "", "", "The logits use embed_tokens though tie_word_embeddings is False."),
    # ---- einsum_deit ----
    ("deit.patch_grid_transposed", "einsum_deit", 'x = torch.einsum("bcypxq,dcpq->byxd", patches, self.kernel) + self.bias', 'x = torch.einsum("bcypxq,dcpq->bxyd", patches, self.kernel) + self.bias', DE_PE, "vit", "patch tokens read column-major", ["vit.patch_order"], "", "", "The einsum output orders the grid (x, y)."),
    ("deit.kernel_transposed", "einsum_deit", 'x = torch.einsum("bcypxq,dcpq->byxd", patches, self.kernel) + self.bias', 'x = torch.einsum("bcypxq,dcqp->byxd", patches, self.kernel) + self.bias', DE_PE, "vit", "patch kernel applied transposed within the patch", [], "the patch kernel's rows and columns are swapped within each patch", "", "An einsum label swap transposes each patch against its kernel."),
    ("deit.cls_without_position", "einsum_deit", "x = x + self.pos_embed", "x = torch.cat((x[:, :1], x[:, 1:] + self.pos_embed[:, 1:]), dim=1)", DE_VIT, "vit", "class token gets no position embedding", ["vit.cls_pos_embed_missing"], "", "", "The position table is added to the patches only."),
    ("deit.cls_appended", "einsum_deit", "x = torch.cat((cls_tokens, x), dim=1)", "x = torch.cat((x, cls_tokens), dim=1)", DE_VIT, "vit", "class token appended after the patches", ["vit.pooling_wrong_token"], "", "", "The class token goes last, so token 0 is a patch."),
    ("deit.pool_mean_with_cls", "einsum_deit", "pooled = x[:, 0]", "pooled = x.mean(dim=1)", DE_VIT, "vit", "mean pooling over every token, class token included", ["vit.pooling_mean_with_cls"], "", "", "The head reads the mean of all tokens."),
    ("deit.final_norm_dropped", "einsum_deit", "x = self.norm(x)", "# x = self.norm(x)", DE_VIT, "residual_norm_placement", "final norm missing", ["blocks.final_norm_missing"], "", "", "The final LayerNorm is commented out."),
    ("deit.ln_unbiased", "einsum_deit", "var = (x - mu).pow(2).mean(dim=-1, keepdim=True)", "var = x.var(dim=-1, keepdim=True)", DE_LAYER, "norm", "unbiased variance", ["layer_norm.unbiased_variance"], "", R_ALLEN, "torch.var's default Bessel correction."),
    ("deit.ln_eps_outside", "einsum_deit", "x = (x - mu) / torch.sqrt(var + self.eps)", "x = (x - mu) / (torch.sqrt(var) + self.eps)", DE_LAYER, "norm", "eps outside the square root", ["layer_norm.eps_outside_sqrt"], "", R_LN_EPS, "The norm divides by std + eps."),
    ("deit.ln_stats_in_half", "einsum_deit", "x = x.to(_upcast(dtype))", "x = x.to(dtype)", DE_LAYER, "precision", "LayerNorm statistics in 16-bit", ["numerics.norm_statistics_low_precision"], "", "", "The float32 upcast of the norm is lost."),
    ("deit.norm1_eps_default", "einsum_deit", "self.norm1 = LayerNorm(dim, eps=eps)", "self.norm1 = LayerNorm(dim, eps=1e-5)", DE_LAYER, "norm", "eps 1e-5 where DeiT declares 1e-6", ["layer_norm.eps_wrong"], "", "", "norm1 hard-codes nn.LayerNorm's default eps."),
    ("deit.gelu_tanh", "einsum_deit", "return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))", 'return torch.nn.functional.gelu(x, approximate="tanh")', DE_LAYER, "ffn_activation", "tanh GELU where exact GELU is declared", ["ffn.activation_gelu_tanh"], "", "", "The hand-written exact GELU replaced by the tanh approximation."),
    ("deit.quick_gelu", "einsum_deit", "return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))", "return x * torch.sigmoid(1.702 * x)", DE_LAYER, "ffn_activation", "QuickGELU (CLIP's) where exact GELU is declared", [], "an activation none of the declared ones names (QuickGELU, x * sigmoid(1.702 x))", "", "CLIP's QuickGELU carried into DeiT."),
    ("deit.scale_inverted", "einsum_deit", "self.scale = self.head_dim ** -0.5", "self.scale = self.head_dim ** 0.5", DE_LAYER, "attention_scale", "scores multiplied by sqrt(d_k)", ["attention.scale_inverted"], "", "", "The exponent's sign is lost."),
    ("deit.attn_transposed_in_einsum", "einsum_deit", 'out = torch.einsum("bhij,bhjd->bhid", attn, v)', 'out = torch.einsum("bhij,bhid->bhjd", attn, v)', DE_LAYER, "softmax", "attention weights applied transposed", ["attention.softmax_axis_wrong", "attention.weights_not_normalized"], "", "", "The einsum contracts the query axis of the weights with the values."),
    ("deit.query_bias_from_key", "einsum_deit", 'q = torch.einsum("bnc,hdc->bhnd", x, self.w_q) + self.b_q[None, :, None, :]', 'q = torch.einsum("bnc,hdc->bhnd", x, self.w_q) + self.b_k[None, :, None, :]', DE_LAYER, "parameters_and_output", "query bias read from the key bias", ["params.read_from_other_module"], "", "", "The query projection adds b_k."),
    ("deit.value_uses_key_weight", "einsum_deit", 'v = torch.einsum("bnc,hdc->bhnd", x, self.w_v) + self.b_v[None, :, None, :]', 'v = torch.einsum("bnc,hdc->bhnd", x, self.w_k) + self.b_v[None, :, None, :]', DE_LAYER, "qkv_projection", "values through the key weight", ["attention.value_uses_key_projection"], "", "", "A copy-paste uses w_k for the values."),
    ("deit.mask_polarity", "einsum_deit", 'dots = dots.masked_fill(~keep, float("-inf"))', 'dots = dots.masked_fill(keep, float("-inf"))', DE_LAYER, "mask", "keep-mask read as a pad-mask", ["mask.polarity_inverted"], "", "", "The boolean keep-mask fills the kept positions."),
    ("deit.causal_triu", "einsum_deit", "tri = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()", "tri = torch.ones(n, n, dtype=torch.bool, device=x.device).triu()", ["encoder_layer"], "mask", "causal keep-mask built with triu", ["mask.causal_leak"], "", "", "The causal keep-mask keeps the future instead of the past."),
    ("deit.nan_guard_lost", "einsum_deit", "attn = torch.nan_to_num(attn, nan=0.0).to(v.dtype)", "attn = attn.to(v.dtype)", DE_LAYER, "mask", "rows without visible keys are NaN", ["mask.fully_masked_rows_nan"], "", "", "The NaN guard after the -inf softmax is lost."),
    ("deit.blocks_one_module", "einsum_deit", "self.blocks = nn.ModuleList([Block(dim, heads, hidden, eps) for _ in range(depth)])", "self.blocks = nn.ModuleList([Block(dim, heads, hidden, eps)] * depth)", DE_VIT, "parameters_and_output", "every block is one module repeated", ["blocks.layer_params_wrong", "params.round_trip_changed", "params.count_wrong"], "", "", "A repeated list shares one Block."),
    # ---- annotated_seq2seq ----
    ("ann.mask_eq_one", "annotated_seq2seq", "scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)", "scores = scores.masked_fill(mask == 1, torch.finfo(scores.dtype).min)", AN_MHA, "mask", "keep-mask read as a pad-mask", ["mask.polarity_inverted"], "", "", "mask == 1 fills the kept positions."),
    ("ann.fill_minus_1e9", "annotated_seq2seq", "scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)", "scores = scores.masked_fill(mask == 0, -1e9)", AN_MHA, "precision", "fill value beyond float16's range", ["numerics.fill_value_overflow"], "", R_FILL2, "The tutorial's -1e9, which float16 cannot hold."),
    ("ann.scale_missing", "annotated_seq2seq", "scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)", "scores = torch.matmul(query, key.transpose(-2, -1))", AN_MHA, "attention_scale", "scores not scaled", ["attention.scale_missing"], "", "", "The 1/sqrt(d_k) is lost."),
    ("ann.merge_without_transpose", "annotated_seq2seq", "x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)", "x = x.contiguous().view(nbatches, -1, self.h * self.d_k)", AN_MHA, "heads_split_merge", "heads merged by a view without the transpose", ["attention.heads_merged_wrong_order"], "", "", "The merge views (B, h, L, d_k) straight to (B, L, D)."),
    ("ann.split_without_transpose", "annotated_seq2seq", "lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)", "lin(x).view(nbatches, self.h, -1, self.d_k)", AN_MHA, "heads_split_merge", "heads split by a view without the transpose", ["attention.heads_split_wrong_order"], "", "", "The split views (B, L, D) straight to (B, h, L, d_k)."),
    ("ann.subsequent_diagonal", "annotated_seq2seq", "subsequent = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)", "subsequent = torch.triu(torch.ones(attn_shape), diagonal=0).type(torch.uint8)", AN_DEC, "mask", "subsequent mask hides the diagonal", ["mask.causal_diagonal_hidden"], "", "", "diagonal=0 masks each token's own position."),
    ("ann.subsequent_inverted", "annotated_seq2seq", "return subsequent == 0", "return subsequent == 1", AN_DEC, "mask", "subsequent mask inverted (future kept, past hidden)", ["mask.causal_leak", "mask.polarity_inverted"], "", "", "The comparison keeps the strictly-future positions."),
    ("ann.ln_biased_std", "annotated_seq2seq", "std = x.std(-1, keepdim=True)", "std = x.std(-1, keepdim=True, unbiased=False)", AN_SUB, "norm", "biased std where the tutorial's unbiased std is declared", ["layer_norm.biased_variance"], "", R_LN_STD, "A fork switches to the biased std while the adapter declares the tutorial's unbiased one."),
    ("ann.ln_eps_inside", "annotated_seq2seq", "return self.a_2 * (x - mean) / (std + self.eps) + self.b_2", "return self.a_2 * (x - mean) / torch.sqrt(std ** 2 + self.eps) + self.b_2", AN_SUB, "norm", "eps inside the square root where outside is declared", ["layer_norm.eps_inside_sqrt"], "", R_LN_EPS, "The norm is rewritten as sqrt(var + eps)."),
    ("ann.sublayer_post_ln", "annotated_seq2seq", "return x + self.dropout(sublayer(self.norm(x)))", "return self.norm(x + self.dropout(sublayer(x)))", AN_SUB, "residual_norm_placement", "post-LN where pre-LN is declared", ["blocks.norm_placement_post"], "", "", "The SublayerConnection normalises after the add (the paper's order)."),
    ("ann.cross_attn_no_mask", "annotated_seq2seq", "x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask))", "x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, None))", AN_DEC, "cross_attention", "source padding ignored in cross-attention", ["mask.ignored"], "", R_XMASK2, "The cross-attention never sees the source mask."),
    ("ann.cross_attn_tgt_mask", "annotated_seq2seq", "x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask))", "x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, tgt_mask))", AN_DEC, "cross_attention", "cross-attention masked with the target mask", ["mask.ignored"], "", R_XMASK, "The decoder's cross-attention gets tgt_mask instead of src_mask."),
    ("ann.cross_attn_keys_from_decoder", "annotated_seq2seq", "x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask))", "x = self.sublayer[1](x, lambda x: self.src_attn(x, x, m, src_mask))", AN_DEC, "cross_attention", "cross-attention keys from the decoder stream", [], "cross-attention keys taken from the decoder's own stream instead of the encoder memory", "", "The keys of the source attention are the target states."),
    ("ann.self_attn_src_mask", "annotated_seq2seq", "x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))", "x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, src_mask))", AN_DEC, "mask", "decoder self-attention without the subsequent mask", ["mask.causal_leak"], "", "", "The decoder's self-attention gets the source mask."),
    ("ann.pe_cos_as_sin", "annotated_seq2seq", "pe[:, 1::2] = torch.cos(position * div_term)", "pe[:, 1::2] = torch.sin(position * div_term)", AN_S2S, "embedding_positions", "odd dims get sines too", ["positional.not_relative"], "", "", "A copy-paste writes sin on the odd dimensions."),
    ("ann.pe_base_1000", "annotated_seq2seq", "div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * -(math.log(10000.0) / d_model))", "div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * -(math.log(1000.0) / d_model))", AN_S2S, "embedding_positions", "positional base 1000", ["positional.base_wrong"], "", "", "The log-space base loses a zero."),
    ("ann.embedding_unscaled", "annotated_seq2seq", "return self.lut(x) * math.sqrt(self.d_model)", "return self.lut(x)", AN_S2S, "embedding_positions", "embeddings not scaled by sqrt(d_model)", ["embedding.scale_missing"], "", "", "The sqrt(d_model) factor is dropped."),
    ("ann.ffn_gelu", "annotated_seq2seq", "return self.w_2(self.dropout(self.w_1(x).relu()))", "return self.w_2(self.dropout(torch.nn.functional.gelu(self.w_1(x))))", AN_SUB, "ffn_activation", "GELU where ReLU is declared", ["ffn.activation_gelu"], "", "", "A BERT-style GELU in the tutorial's FFN."),
    ("ann.ffn_relu_after_w2", "annotated_seq2seq", "return self.w_2(self.dropout(self.w_1(x).relu()))", "return self.w_2(self.dropout(self.w_1(x))).relu()", AN_SUB, "ffn_activation", "ReLU after the second linear", [], "the FFN activation applied after the output projection instead of between the two", "", "A misplaced parenthesis."),
    ("ann.clones_shallow", "annotated_seq2seq", "return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])", "return nn.ModuleList([module for _ in range(N)])", AN_MHA, "parameters_and_output", "clones share one module", ["blocks.layer_params_wrong", "params.round_trip_changed", "params.count_wrong"], "", "", "clones without deepcopy: layers (and the four projections) share parameters."),
    ("ann.src_mask_on_queries", "annotated_seq2seq", "src_mask = (src_ids != pad).unsqueeze(-2)", "src_mask = (src_ids != pad).unsqueeze(-1)", AN_S2S, "mask", "source padding mask broadcast over queries", ["mask.applied_to_queries"], "", "", "The source mask is unsqueezed on the wrong axis."),
]

CONTROLS: list[tuple] = [
    ("control.gpt.gelu_new_as_torch", "mingpt_gpt2", "h = gelu_new(self.c_fc(x))", 'h = F.gelu(self.c_fc(x), approximate="tanh")', GPT_BLK, "torch's tanh GELU is gelu_new (nanoGPT switched to it)."),
    ("control.gpt.scale_by_power", "mingpt_gpt2", "attn_weights = attn_weights / math.sqrt(value.size(-1))", "attn_weights = attn_weights * value.size(-1) ** -0.5", GPT_ATT, "Multiplying by d ** -0.5 is dividing by sqrt(d)."),
    ("control.qwen.cache_keeps_window", "qwen_swa", "keep = self.window - 1", "keep = self.window", QW_ATT, "Keeping one more key than needed is harmless: the window mask hides it."),
    ("control.qwen.group_repeat_interleave", "qwen_swa", "group = torch.arange(self.num_heads, device=hidden_states.device) // g", "group = torch.arange(self.num_key_value_heads, device=hidden_states.device).repeat_interleave(g)", QW_ATT, "The same head-to-group map written with repeat_interleave."),
    ("control.qwen.rms_sqrt_division", "qwen_swa", "hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)", "hidden_states = hidden_states / torch.sqrt(variance + self.variance_epsilon)", QW_NORM, "Dividing by sqrt is multiplying by rsqrt."),
    ("control.deit.var_builtin", "einsum_deit", "var = (x - mu).pow(2).mean(dim=-1, keepdim=True)", "var = x.var(dim=-1, keepdim=True, unbiased=False)", DE_LAYER, "torch's biased variance is the mean squared deviation."),
    ("control.deit.einsum_operands_swapped", "einsum_deit", 'x = torch.einsum("bcypxq,dcpq->byxd", patches, self.kernel) + self.bias', 'x = torch.einsum("dcpq,bcypxq->byxd", self.kernel, patches) + self.bias', DE_PE, "The same contraction with the operands listed the other way."),
    ("control.ann.std_from_var", "annotated_seq2seq", "std = x.std(-1, keepdim=True)", "std = x.var(-1, keepdim=True).sqrt()", AN_SUB, "The unbiased std is the square root of the unbiased variance."),
    ("control.ann.scale_queries_first", "annotated_seq2seq", "scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)", "scores = torch.matmul(query / math.sqrt(d_k), key.transpose(-2, -1))", AN_MHA, "Scaling the queries before the product is scaling the scores."),
    ("control.ann.subsequent_by_tril", "annotated_seq2seq", "subsequent = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)", "subsequent = (1 - torch.tril(torch.ones(attn_shape))).type(torch.uint8)", AN_DEC, "1 - tril is triu(diagonal=1) on a matrix of ones."),
]


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}.py: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line[: len(line) - len(line.lstrip())]


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bugs = []
    for (bug_id, impl, original, replacement, components, family, klass, codes, without, report, description) in BUGS:
        number, indent = _locate(impl, original)
        bugs.append({
            "id": bug_id, "impl": impl, "file": f"tests/blind4/{impl}.py", "line": number,
            "original": indent + original, "replacement": indent + replacement,
            "components": list(components), "family": family, "class": klass,
            "expected_codes": list(codes), "class_without_code": without,
            "public_report": report, "description": description,
        })
    controls = []
    for (control_id, impl, original, replacement, components, why) in CONTROLS:
        number, indent = _locate(impl, original)
        controls.append({
            "id": control_id, "impl": impl, "file": f"tests/blind4/{impl}.py", "line": number,
            "original": indent + original, "replacement": indent + replacement,
            "components": list(components), "why_correct": why,
        })
    return bugs, controls


if __name__ == "__main__":
    bugs, controls = build()
    (HERE / "bugs.json").write_text(json.dumps(bugs, indent=1) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(controls, indent=1) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")
