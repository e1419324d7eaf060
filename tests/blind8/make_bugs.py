"""The eighth blind benchmark's tables: bugs.json and controls.json, written from the rows below.

Each row names one line of one implementation by its stripped text; the line number and the
indentation come from the frozen implementation file, so the JSON rows hold the exact line
(``run.patched_source`` replaces it) and where it is. Run from anywhere:

    python tests/blind8/make_bugs.py

Phase 1 (PROTOCOL.md): every bug has ``expected_codes = []`` and ``class_without_code = ""``;
phase 2 fills exactly those two fields, from the frozen ``class`` and the registry's meanings.
"""

# ruff: noqa: E501  (the rows quote implementation lines verbatim)
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind8"

G_NORM = ["rms_norm", "decoder_block", "causal_lm"]
G_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
G_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
G_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
G_SDPA = ["causal_self_attention", "decoder_block"]
G_LM = ["causal_lm"]
G_BLOCK = ["decoder_block", "causal_lm"]
V_BLOCK = ["encoder_layer", "vit"]
V_LAYER = ["encoder_layer"]
V_VIT = ["vit"]
W_ALL = ["mha", "encoder_layer", "decoder_layer", "seq2seq"]
W_LAYERS = ["encoder_layer", "decoder_layer", "seq2seq"]
W_DEC = ["decoder_layer", "seq2seq"]
W_ENC = ["encoder_layer", "seq2seq"]
W_S2S = ["seq2seq"]

# (id, impl, original (stripped), replacement (stripped), family, components,
#  description: how the mistake happens, class: what is wrong in general words, public_report)
BUGS: list[tuple[str, str, str, str, str, list[str], str, str, str]] = [
    # ---- gemma_hf ------------------------------------------------------------------------
    (
        "g.norm_gain_without_unit_offset",
        "gemma_hf",
        "output = output * (1.0 + self.weight.to(output.dtype))",
        "output = output * self.weight.to(output.dtype)",
        "norm",
        G_NORM,
        "Gemma's RMSNorm is ported from Llama's: the Llama line `output * self.weight` is kept, so "
        "the stored offset weights (gain - 1, zero at init) are used as the gain itself.",
        "The norm's learned gain is stored as an offset from one but applied as if it were the "
        "gain: every normalised channel is multiplied by gamma - 1 instead of gamma.",
        "https://github.com/linkedin/Liger-Kernel/issues/74",
    ),
    (
        "g.rms_eps_added_to_root",
        "gemma_hf",
        "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
        "return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + self.eps)",
        "eps_placement",
        G_NORM,
        "A rewrite from `rsqrt` to a division, as in tutorial RMSNorms, moves eps from the mean "
        "square to the root mean square.",
        "The RMSNorm epsilon is added to the root mean square (outside the square root) instead "
        "of to the mean square inside it.",
        "",
    ),
    (
        "g.rms_statistics_in_half",
        "gemma_hf",
        "output = self._norm(x.to(_upcast(x.dtype)))",
        "output = self._norm(x)",
        "precision",
        G_NORM,
        "An optimisation drops Gemma's `x.float()` upcast to save memory in bfloat16 inference, so "
        "the mean square is formed in the 16-bit input dtype.",
        "The norm's mean square and the normalised value are computed in the 16-bit input "
        "precision instead of float32.",
        "",
    ),
    (
        "g.geglu_exact_gelu",
        "gemma_hf",
        'self.act_fn = nn.GELU(approximate="tanh")',
        "self.act_fn = nn.GELU()",
        "ffn_activation",
        G_FFN,
        'The config\'s legacy `hidden_act="gelu"` is mapped to exact GELU, while Gemma was '
        "trained with the tanh approximation (`gelu_pytorch_tanh`).",
        "The gated FFN's gate activation is the exact erf GELU where the model uses the tanh "
        "approximation of GELU.",
        "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4661",
    ),
    (
        "g.gate_and_up_swapped",
        "gemma_hf",
        "down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))",
        "down_proj = self.down_proj(self.act_fn(self.up_proj(x)) * self.gate_proj(x))",
        "ffn_gating",
        G_FFN,
        "A refactor of the MLP into one expression puts the activation on the wrong projection.",
        "In the gated FFN the activation is applied to the up projection and the gate "
        "projection is left linear: the roles of gate and up are swapped.",
        "",
    ),
    (
        "g.rope_table_interleaved_for_half_rotation",
        "gemma_hf",
        "emb = torch.cat((freqs, freqs), dim=-1)",
        "emb = freqs.repeat_interleave(2, dim=-1)",
        "rope",
        G_ROPE,
        "Someone 'fixes' the cos/sin table to repeat each frequency twice in a row (the "
        "GPT-J / RoFormer table) while the rotation still pairs x_i with x_{i+d/2} (rotate_half).",
        "The RoPE cos/sin table is laid out for neighbouring pairs while the rotation pairs "
        "channel i with channel i + d/2: the two halves of the rotation use different "
        "frequencies.",
        "https://github.com/huggingface/transformers/issues/40462",
    ),
    (
        "g.rotate_half_sign_flipped",
        "gemma_hf",
        "return torch.cat((-x2, x1), dim=-1)",
        "return torch.cat((x2, -x1), dim=-1)",
        "rope",
        G_ROPE,
        "rotate_half is rewritten from a JAX port that negates the other half.",
        "Queries and keys are rotated by minus the angle (the rotation's direction is reversed).",
        "",
    ),
    (
        "g.rope_angles_in_half",
        "gemma_hf",
        "freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)",
        "freqs = (inv_freq_expanded.to(x.dtype) @ position_ids_expanded.to(x.dtype)).transpose(1, 2)",
        "precision",
        G_ROPE,
        "A device/dtype clean-up casts the frequencies and positions to the activations' dtype "
        "before the product, as older transformers versions did.",
        "The RoPE angles position * frequency are formed in the 16-bit model dtype, so long "
        "positions lose whole radians.",
        "https://github.com/huggingface/transformers/pull/29285",
    ),
    (
        "g.kv_heads_tiled",
        "gemma_hf",
        "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
        "hidden_states = hidden_states[:, None, :, :, :].expand(batch, n_rep, num_key_value_heads, slen, head_dim)",
        "gqa",
        G_ATTN,
        "repeat_kv is rewritten with the new axis in front, like `k.repeat(1, n_rep, 1, 1)`.",
        "Key/value heads are tiled across the query heads (query head h uses key/value head "
        "h mod H_kv) instead of each key/value head serving a contiguous group of query heads.",
        "https://github.com/onnx/onnx/pull/7274",
    ),
    (
        "g.query_heads_split_without_transpose",
        "gemma_hf",
        "query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)",
        "query_states = self.q_proj(hidden_states).view(input_shape[0], -1, input_shape[1], self.head_dim)",
        "heads",
        G_ATTN,
        "The query line is 'simplified' to view straight into the [B, H, L, d] layout the kernel "
        "wants, skipping the transpose (the key and value lines keep it).",
        "The query heads are split by a reshape to [B, H, L, d] without the transpose, so "
        "positions and heads are interleaved in the queries.",
        "",
    ),
    (
        "g.scale_by_model_width",
        "gemma_hf",
        "self.scaling = self.head_dim**-0.5",
        "self.scaling = config.hidden_size**-0.5",
        "attention_scale",
        G_ATTN,
        "Gemma 2's `query_pre_attn_scalar` is confused with the hidden size when porting the "
        "scaling.",
        "Attention scores are scaled by 1/sqrt(d_model) instead of 1/sqrt(head width).",
        "",
    ),
    (
        "g.sdpa_dropout_in_eval",
        "gemma_hf",
        "dropout=0.0 if not self.training else self.attention_dropout,",
        "dropout=self.attention_dropout,",
        "dropout",
        G_SDPA,
        "The training check at the call site is dropped in a refactor; the sdpa path passes the "
        "rate to `F.scaled_dot_product_attention`, which applies it whatever the module's mode.",
        "Attention dropout stays active in evaluation mode (the functional kernel gets a nonzero "
        "dropout probability).",
        "https://github.com/pytorch/pytorch/issues/124464",
    ),
    (
        "g.eager_softmax_over_queries",
        "gemma_hf",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=_upcast(query.dtype)).to(query.dtype)",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-2, dtype=_upcast(query.dtype)).to(query.dtype)",
        "softmax",
        G_LM,
        "The eager path is ported from a layout with keys on the second-to-last axis.",
        "The attention softmax normalises over the query axis instead of the key axis.",
        "",
    ),
    (
        "g.cache_returns_new_only",
        "gemma_hf",
        "return self.key_cache[layer_idx], self.value_cache[layer_idx]",
        "return key_states, value_states",
        "kv_cache",
        G_ATTN,
        "A cache refactor returns its inputs instead of the concatenated entries.",
        "The cache stores every step's keys and values but a step attends only to its own new "
        "keys and values, never to the cached ones.",
        "",
    ),
    (
        "g.derived_positions_from_zero",
        "gemma_hf",
        "position_ids = cache_position.unsqueeze(0).expand(inputs_embeds.shape[0], -1)",
        "position_ids = torch.arange(inputs_embeds.shape[1]).unsqueeze(0).expand(inputs_embeds.shape[0], -1)",
        "positions_under_cache",
        G_ATTN,
        "Default position ids are built from the call's length, as they are without a cache.",
        "When no position ids are given, the new tokens of a cached call are numbered from 0 "
        "instead of after the cached tokens.",
        "https://github.com/huggingface/transformers/pull/15751",
    ),
    (
        "g.causal_diagonal_excluded",
        "gemma_hf",
        "return kv_idx <= q_idx",
        "return kv_idx < q_idx",
        "causal_mask",
        G_ATTN,
        "The causal mask function is written as the strict comparison of a 'future' mask.",
        "The causal mask hides each token's own key: a query sees only strictly earlier keys.",
        "",
    ),
    (
        "g.mask_queries_indexed_from_zero",
        "gemma_hf",
        "q_idx = cache_position[None, None, :, None]",
        "q_idx = torch.arange(len(cache_position))[None, None, :, None]",
        "chunked_prefill",
        G_ATTN,
        "The query index of the mask function is taken as the index within the call, as it is "
        "for a prefill without a cache.",
        "In a call on a non-empty cache the causal mask is built for the new tokens alone "
        "(query i of the call sees keys 0 .. i), not offset by the cached length.",
        "",
    ),
    (
        "g.padding_mask_inverted",
        "gemma_hf",
        "return padding_mask[batch_idx, kv_idx]",
        "return ~padding_mask[batch_idx, kv_idx]",
        "mask_polarity",
        G_ATTN,
        "The padding mask function is written for a mask with True at the pads "
        "(`key_padding_mask` convention) while it is given the tokenizer's attention mask.",
        "The key padding mask is read with the opposite polarity: real tokens are hidden and "
        "pads are attended.",
        "",
    ),
    (
        "g.keep_mask_added_as_bias",
        "gemma_hf",
        "return torch.where(mask, torch.tensor(0.0, dtype=dtype), min_dtype)",
        "return mask.to(dtype)",
        "mask_fill",
        G_LM,
        "The eager mask helper returns the boolean mask cast to float, so the 1/0 keep-mask is "
        "added to the scores as if it were an additive mask.",
        "A 0/1 keep-mask is added to the attention scores as a bias instead of being turned "
        "into 0 / -large: masked keys are not removed, kept keys get +1.",
        "https://github.com/huggingface/transformers/issues/542",
    ),
    (
        "g.embedding_scale_missing",
        "gemma_hf",
        "hidden_states = hidden_states * normalizer",
        "hidden_states = hidden_states",
        "embedding_scale",
        G_LM,
        "The model body is copied from Llama, which does not scale its embeddings.",
        "The token embeddings are not multiplied by sqrt(d_model) where the model scales them.",
        "",
    ),
    (
        "g.residual_taken_after_norm",
        "gemma_hf",
        "hidden_states = self.input_layernorm(hidden_states)",
        "hidden_states = residual = self.input_layernorm(hidden_states)",
        "residual",
        G_BLOCK,
        "A chained assignment, meant to save a line, rebinds the residual to the normalised "
        "stream.",
        "The attention sublayer's residual branch carries the normalised input instead of the "
        "un-normalised residual stream.",
        "",
    ),
    (
        "g.lm_head_untied",
        "gemma_hf",
        "self.lm_head.weight = self.model.embed_tokens.weight",
        "self.lm_head.weight = nn.Parameter(self.model.embed_tokens.weight.clone())",
        "weight_tying",
        G_LM,
        "The head is cloned from the embedding (to make the checkpoint's shards independent), so "
        "it no longer follows the embedding when weights are loaded.",
        "The output head is an independent copy of the embedding matrix where the model ties "
        "them: loading the embedding does not set the head.",
        "https://github.com/sgl-project/sglang/pull/1508",
    ),
    # ---- torchvision_vit -----------------------------------------------------------------
    (
        "v.batch_first_dropped",
        "torchvision_vit",
        "self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout, batch_first=True)",
        "self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout)",
        "batch_axis",
        V_BLOCK,
        "The block is copied from an older torchvision that transposed to (S, N, E) itself; "
        "`batch_first=True` is lost while the inputs stay batch-first.",
        "Attention reads the batch axis as the sequence axis: tokens attend across the images "
        "of the batch at the same position instead of across positions.",
        "https://github.com/pytorch/pytorch/issues/122959",
    ),
    (
        "v.keys_values_from_unnormed_input",
        "torchvision_vit",
        "x, _ = self.self_attention(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)",
        "x, _ = self.self_attention(x, input, input, key_padding_mask=key_padding_mask, need_weights=False)",
        "norm_placement",
        V_BLOCK,
        "The call is edited to pass the block input as keys and values, as in a cross-attention "
        "block.",
        "Keys and values are taken from the un-normalised block input while queries come from "
        "the normalised one.",
        "",
    ),
    (
        "v.padding_mask_polarity_at_boundary",
        "torchvision_vit",
        "forward=lambda module, x, key_padding=None: module(x, None if key_padding is None else ~key_padding),",
        "forward=lambda module, x, key_padding=None: module(x, key_padding),",
        "mask_polarity",
        V_LAYER,
        "A keep-mask (True = token) is passed straight to nn.MultiheadAttention's "
        "key_padding_mask (True = ignore).",
        "The key padding mask is given with the opposite polarity: real tokens are ignored and "
        "pads attended.",
        "https://github.com/pytorch/pytorch/pull/141694",
    ),
    (
        "v.functional_dropout_in_eval",
        "torchvision_vit",
        "x = self.dropout(x)",
        "x = F.dropout(x, p=0.1)",
        "dropout",
        V_BLOCK,
        "The module dropout is replaced by the functional one without `training=self.training`; "
        "F.dropout defaults to training=True.",
        "Dropout on the attention output stays active in evaluation mode.",
        "https://github.com/pytorch/pytorch/issues/26338",
    ),
    (
        "v.mlp_residual_dropped",
        "torchvision_vit",
        "return x + y",
        "return y",
        "residual",
        V_BLOCK,
        "The block's return is simplified while moving the residual into the MLP wrapper, which "
        "never got it.",
        "The MLP sublayer has no residual connection: the block returns the MLP output alone.",
        "",
    ),
    (
        "v.mlp_tanh_gelu",
        "torchvision_vit",
        "nn.GELU(),",
        'nn.GELU(approximate="tanh"),',
        "ffn_activation",
        V_BLOCK,
        "The MLP is switched to the tanh GELU for speed, as some JAX ports do.",
        "The FFN activation is the tanh approximation of GELU where the model uses exact GELU.",
        "",
    ),
    (
        "v.layernorm_eps_default",
        "torchvision_vit",
        "norm_layer = partial(nn.LayerNorm, eps=1e-6)",
        "norm_layer = nn.LayerNorm",
        "eps",
        V_VIT,
        "A refactor passes `nn.LayerNorm` as the norm layer, losing the 1e-6 the JAX-trained "
        "weights need.",
        "The LayerNorm epsilon is PyTorch's default 1e-5 instead of the model's 1e-6.",
        "https://github.com/kornia/kornia/pull/2786",
    ),
    (
        "v.patches_reshaped_not_permuted",
        "torchvision_vit",
        "x = x.permute(0, 2, 1)",
        "x = x.reshape(n, n_h * n_w, self.hidden_dim)",
        "patch_embed",
        V_VIT,
        "The permute is replaced by a reshape to the wanted shape, which reinterprets memory.",
        "The patch grid is flattened to tokens by a reshape of the channel-major tensor "
        "instead of a transpose: tokens mix channels of different patches.",
        "",
    ),
    (
        "v.class_token_appended",
        "torchvision_vit",
        "x = torch.cat([batch_class_token, x], dim=1)",
        "x = torch.cat([x, batch_class_token], dim=1)",
        "class_token",
        V_VIT,
        "The class token is appended, as in models that read the last token.",
        "The class token is placed after the patch tokens instead of before them (so it gets "
        "the last position row and the pooled token 0 is a patch).",
        "",
    ),
    (
        "v.mean_pool_includes_class_token",
        "torchvision_vit",
        "x = x[:, 0]",
        "x = x.mean(dim=1)",
        "pooling",
        V_VIT,
        "Global average pooling is switched on by averaging every token, the class token included.",
        "The image representation averages all tokens, class token included, where the model "
        "reads the class token.",
        "https://github.com/lucidrains/vit-pytorch/issues/226",
    ),
    (
        "v.encoder_final_norm_missing",
        "torchvision_vit",
        "return self.ln(self.layers(self.dropout(input)))",
        "return self.layers(self.dropout(input))",
        "final_norm",
        V_VIT,
        "The final norm is moved to the head in a refactor that never added it there.",
        "The pre-LN encoder stack ends without its final norm.",
        "",
    ),
    (
        "v.patch_grid_column_major",
        "torchvision_vit",
        "x = x.reshape(n, self.hidden_dim, n_h * n_w)",
        "x = x.transpose(2, 3).reshape(n, self.hidden_dim, n_h * n_w)",
        "patch_embed",
        V_VIT,
        "The grid is flattened after a transpose left over from a port of a channels-last "
        "(N, W, H) layout, so patches are numbered down the columns.",
        "Patch tokens are ordered column by column over the grid instead of row by row, so each "
        "patch gets another patch's position row.",
        "",
    ),
    (
        "v.mlp_reads_block_input",
        "torchvision_vit",
        "y = self.ln_2(x)",
        "y = self.ln_2(input)",
        "residual",
        V_BLOCK,
        "A parallel-block experiment (attention and MLP both on the input) is left half-undone.",
        "The MLP sublayer reads the block's input instead of the attention sublayer's output.",
        "",
    ),
    # ---- func_wmt ------------------------------------------------------------------------
    (
        "w.pe_flax_frequency_spacing",
        "func_wmt",
        "scale_factor = -np.log(max_scale) / (d_feature // 2)",
        "scale_factor = -np.log(max_scale) / (d_feature // 2 - 1)",
        "positional_encoding",
        W_S2S,
        "The table is copied from flax's `sinusoidal_init`, which spaces its frequencies over "
        "d/2 - 1 steps (tensor2tensor's timing signal).",
        "The sinusoidal frequencies are spaced as base^(-i/(d/2 - 1)) instead of "
        "base^(-2i/d): every frequency but the first is lower than the model's.",
        "",
    ),
    (
        "w.logits_divided_by_width",
        "func_wmt",
        "logits = logits / math.sqrt(y.shape[-1])",
        "logits = logits / y.shape[-1]",
        "embedding_scale",
        W_S2S,
        "The normalisation of the tied logits is written from memory as a division by the width.",
        "The tied output logits are divided by d_model instead of sqrt(d_model).",
        "",
    ),
    (
        "w.encoder_final_norm_missing",
        "func_wmt",
        'return layer_norm(p["encoder"]["encoder_norm"], x)',
        "return x",
        "final_norm",
        W_S2S,
        "The encoder's final norm is dropped on the assumption that the decoder normalises its "
        "memory.",
        "The pre-LN encoder stack ends without its final norm, so the decoder attends to an "
        "un-normalised memory.",
        "",
    ),
    (
        "w.cross_attention_source_padding_dropped",
        "func_wmt",
        "encoder_decoder_mask = make_attention_mask(torch.ones_like(targets, dtype=torch.bool), inputs > 0)",
        "encoder_decoder_mask = make_attention_mask(torch.ones_like(targets, dtype=torch.bool), torch.ones_like(inputs, dtype=torch.bool))",
        "cross_attention",
        W_S2S,
        "The memory mask is rebuilt from ones after a refactor that meant to mask padding in the "
        "encoder only.",
        "Cross-attention does not mask the source's padded positions: the decoder attends to "
        "padded memory keys.",
        "",
    ),
    (
        "w.cross_attention_query_unnormed",
        "func_wmt",
        'y = multi_head_dot_product_attention(p["MultiHeadDotProductAttention_0"], y, encoded, encoded, encoder_decoder_mask, cfg.num_heads)',
        'y = multi_head_dot_product_attention(p["MultiHeadDotProductAttention_0"], x, encoded, encoded, encoder_decoder_mask, cfg.num_heads)',
        "cross_attention",
        W_DEC,
        "The cross-attention call is copied from the self-attention line above, keeping `x`.",
        "Cross-attention queries come from the un-normalised residual stream instead of the "
        "sublayer's norm output.",
        "",
    ),
    (
        "w.cross_residual_skips_self_attention",
        "func_wmt",
        "y = y + x",
        "y = y + targets",
        "residual",
        W_DEC,
        "The residual of the cross-attention sublayer is added to the block's input by a "
        "copy-paste of the line above.",
        "The cross-attention sublayer's residual is the block input, so the self-attention "
        "sublayer's output is dropped from the stream.",
        "",
    ),
    (
        "w.deterministic_flag_inverted",
        "func_wmt",
        "return not self.training",
        "return self.training",
        "dropout",
        W_S2S,
        "flax's `deterministic` (True = no dropout) is mapped to torch's `training` with the "
        "polarity kept, not inverted.",
        "Dropout is active in evaluation mode (the no-dropout flag has the opposite meaning).",
        "https://github.com/google-research/vision_transformer/issues/19",
    ),
    (
        "w.mask_where_inverted",
        "func_wmt",
        "attn_weights = torch.where(mask, attn_weights, big_neg)",
        "attn_weights = torch.where(mask, big_neg, attn_weights)",
        "mask_polarity",
        W_ALL,
        "The `where` is ported from code whose mask marks the positions to drop.",
        "The attention mask is applied with the opposite polarity: kept keys are filled and "
        "masked keys attended.",
        "",
    ),
    (
        "w.softmax_over_queries",
        "func_wmt",
        "attn_weights = torch.softmax(attn_weights.to(_upcast(attn_weights.dtype)), dim=-1).to(value.dtype)",
        "attn_weights = torch.softmax(attn_weights.to(_upcast(attn_weights.dtype)), dim=1).to(value.dtype)",
        "softmax",
        W_ALL,
        "The per-head function inherits an axis index from the batched [B, H, Lq, Lk] code; "
        "under vmap the head axis is gone and axis 1 is the query axis.",
        "The attention softmax normalises over the query axis instead of the key axis.",
        "",
    ),
    (
        "w.scale_by_model_width",
        "func_wmt",
        "depth = query.shape[-1]",
        "depth = query.shape[-1] * query.shape[-2]",
        "attention_scale",
        W_ALL,
        "The depth is taken from the flattened qkv width, as in the flax example's `qkv_dim`.",
        "Attention scores are scaled by 1/sqrt(d_model) instead of 1/sqrt(head width).",
        "https://github.com/omihub777/ViT-CIFAR/issues/11",
    ),
    (
        "w.layernorm_one_pass_variance",
        "func_wmt",
        "var = ((x - mean) ** 2).mean(-1, keepdim=True)",
        "var = (x ** 2).mean(-1, keepdim=True) - mean ** 2",
        "precision",
        W_LAYERS,
        "flax's `use_fast_variance` form is ported for speed: E[x^2] - E[x]^2.",
        "The variance is computed in one pass as the mean of squares minus the squared mean, "
        "which cancels catastrophically when the mean is large against the spread.",
        "https://github.com/pytorch/pytorch/pull/55044",
    ),
    (
        "w.layernorm_eps_torch_default",
        "func_wmt",
        "def layer_norm(p, x, epsilon=1e-6):",
        "def layer_norm(p, x, epsilon=1e-5):",
        "eps",
        W_LAYERS,
        "The port takes PyTorch's LayerNorm default instead of flax's.",
        "The LayerNorm epsilon is 1e-5 instead of the model's 1e-6.",
        "https://github.com/huggingface/candle/pull/271",
    ),
    (
        "w.value_projected_with_key_kernel",
        "func_wmt",
        'value = dense_general_in(p["value"], inputs_v)',
        'value = dense_general_in(p["key"], inputs_v)',
        "qkv_projection",
        W_ALL,
        "The value line is copied from the key line above and its parameter name not changed.",
        "The values are projected with the key projection's weights instead of the value "
        "projection's.",
        "",
    ),
    (
        "w.mlp_gelu_for_relu",
        "func_wmt",
        "x = torch.relu(x)",
        "x = F.gelu(x)",
        "ffn_activation",
        W_LAYERS,
        "The MLP takes the activation of a later flax example (GELU).",
        "The FFN activation is GELU where the model uses ReLU.",
        "",
    ),
    (
        "w.causal_mask_inverted",
        "func_wmt",
        "return make_attention_mask(idxs, idxs, torch.greater_equal)",
        "return make_attention_mask(idxs, idxs, torch.less_equal)",
        "causal_mask",
        W_S2S,
        "The comparison is written as key <= query with the arguments in query, key order.",
        "The causal mask is reversed: each target position sees itself and the later positions "
        "instead of the earlier ones.",
        "",
    ),
    (
        "w.masks_combined_with_or",
        "func_wmt",
        "mask = torch.logical_and(mask, other)",
        "mask = torch.logical_or(mask, other)",
        "mask_combination",
        W_ALL,
        "combine_masks is rewritten with `logical_or`, reading masks as lists of positions to "
        "drop.",
        "Masks are combined by OR instead of AND, so a key is attended if any one mask keeps it.",
        "",
    ),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    (
        "control.g.rotate_half_neg",
        "gemma_hf",
        "return torch.cat((-x2, x1), dim=-1)",
        "return torch.cat((x2.neg(), x1), dim=-1)",
        G_ROPE,
        "`x2.neg()` is `-x2`.",
    ),
    (
        "control.g.repeat_interleave_kv",
        "gemma_hf",
        "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
        "hidden_states = hidden_states.repeat_interleave(n_rep, dim=1)",
        G_ATTN,
        "repeat_interleave along the head axis gives [B, H_kv * n_rep, L, d] with each key/value "
        "head repeated in place; the next line's reshape to that same shape leaves it as it is.",
    ),
    (
        "control.g.scaling_rsqrt",
        "gemma_hf",
        "self.scaling = self.head_dim**-0.5",
        "self.scaling = 1.0 / math.sqrt(self.head_dim)",
        G_ATTN,
        "1 / sqrt(d) and d ** -0.5 are the same number (to the last bit or one rounding).",
    ),
    (
        "control.v.transpose_tokens",
        "torchvision_vit",
        "x = x.permute(0, 2, 1)",
        "x = x.transpose(1, 2)",
        V_VIT,
        "For a 3-D tensor permute(0, 2, 1) and transpose(1, 2) are the same view.",
    ),
    (
        "control.v.class_token_slice",
        "torchvision_vit",
        "x = x[:, 0]",
        "x = x[:, 0, :]",
        V_VIT,
        "Indexing the token axis with or without the trailing full slice selects the same "
        "[B, D] tensor.",
    ),
    (
        "control.w.scale_as_power",
        "func_wmt",
        "query = query / math.sqrt(depth)",
        "query = query * depth ** -0.5",
        W_ALL,
        "Multiplying by depth ** -0.5 is dividing by sqrt(depth), up to one rounding.",
    ),
    (
        "control.w.scores_by_matmul",
        "func_wmt",
        'attn_weights = torch.einsum("bqd,bkd->bqk", query, key)',
        "attn_weights = query @ key.transpose(-2, -1)",
        W_ALL,
        "Per head, q [B, Lq, d] times k^T [B, d, Lk] is the same contraction over d as the einsum.",
    ),
    (
        "control.w.relu_as_clamp",
        "func_wmt",
        "x = torch.relu(x)",
        "x = torch.clamp(x, min=0)",
        W_LAYERS,
        "clamp(x, min=0) is max(x, 0), which is ReLU.",
    ),
]


# Phase 2 (after the phase-1 commit, from each bug's frozen `class` and the one-line meanings of
# SPEC.md Appendix C): the codes that name the class, or, where none does, the class described.
PHASE_2: dict[str, tuple[list[str], str]] = {
    "g.norm_gain_without_unit_offset": (
        [],
        "a norm gain stored as an offset from one applied without the one (the gain used is "
        "gamma - 1); layer_norm.gain_plus_one names the opposite error (1 + gamma)",
    ),
    "g.rms_eps_added_to_root": (["layer_norm.eps_outside_sqrt"], ""),
    "g.rms_statistics_in_half": (["numerics.norm_statistics_low_precision"], ""),
    "g.geglu_exact_gelu": (["ffn.gate_activation_gelu"], ""),
    "g.gate_and_up_swapped": (["ffn.gate_up_swapped"], ""),
    "g.rope_table_interleaved_for_half_rotation": (["rope.table_layout_mismatch"], ""),
    "g.rotate_half_sign_flipped": (["rope.rotation_inverted"], ""),
    "g.rope_angles_in_half": (["numerics.rope_angles_low_precision"], ""),
    "g.kv_heads_tiled": (["attention.kv_heads_tiled"], ""),
    "g.query_heads_split_without_transpose": (["attention.heads_split_wrong_order"], ""),
    "g.scale_by_model_width": (["attention.scale_wrong"], ""),
    "g.sdpa_dropout_in_eval": (["dropout.active_in_eval"], ""),
    "g.eager_softmax_over_queries": (["attention.softmax_axis_wrong"], ""),
    "g.cache_returns_new_only": (["cache.ignored"], ""),
    "g.derived_positions_from_zero": (
        ["cache.position_offset_wrong", "cache.rope_offset_wrong"],
        "",
    ),
    "g.causal_diagonal_excluded": (["mask.causal_diagonal_hidden", "cache.causal_off_by_one"], ""),
    "g.mask_queries_indexed_from_zero": (
        ["cache.causal_top_left", "mask.causal_alignment_top_left"],
        "",
    ),
    "g.padding_mask_inverted": (["mask.polarity_inverted"], ""),
    "g.keep_mask_added_as_bias": (["mask.added_as_bias"], ""),
    "g.embedding_scale_missing": (["embedding.scale_missing"], ""),
    "g.residual_taken_after_norm": (["blocks.residual_after_norm"], ""),
    "g.lm_head_untied": (["model.head_not_tied"], ""),
    "v.batch_first_dropped": (["batch.rows_interact"], ""),
    "v.keys_values_from_unnormed_input": (
        [],
        "a pre-LN self-attention whose norm reaches the queries only: keys and values are "
        "projected from the un-normalised sublayer input",
    ),
    "v.padding_mask_polarity_at_boundary": (["mask.polarity_inverted"], ""),
    "v.functional_dropout_in_eval": (["dropout.active_in_eval"], ""),
    "v.mlp_residual_dropped": (["blocks.residual_missing"], ""),
    "v.mlp_tanh_gelu": (["ffn.activation_gelu_tanh"], ""),
    "v.layernorm_eps_default": (["layer_norm.eps_wrong"], ""),
    "v.patches_reshaped_not_permuted": (["vit.patch_order", "vit.patch_extraction_wrong"], ""),
    "v.class_token_appended": (["vit.pooling_wrong_token"], ""),
    "v.mean_pool_includes_class_token": (["vit.pooling_mean_with_cls"], ""),
    "v.encoder_final_norm_missing": (["blocks.final_norm_missing"], ""),
    "v.patch_grid_column_major": (["vit.patch_order"], ""),
    "v.mlp_reads_block_input": (
        [],
        "the second sublayer (the FFN) reads the layer's input instead of the first "
        "sublayer's output, while its residual is still the first sublayer's output",
    ),
    "w.pe_flax_frequency_spacing": (["positional.frequency_wrong"], ""),
    "w.logits_divided_by_width": (
        [],
        "the output logits divided by d_model instead of sqrt(d_model) (a wrong factor where "
        "the model declares the logit-side scale)",
    ),
    "w.encoder_final_norm_missing": (["blocks.final_norm_missing"], ""),
    "w.cross_attention_source_padding_dropped": (["mask.ignored"], ""),
    "w.cross_attention_query_unnormed": (
        [],
        "cross-attention queries taken from the un-normalised residual stream instead of the "
        "sublayer's norm output (keys and values from the memory are right)",
    ),
    "w.cross_residual_skips_self_attention": (["blocks.residual_from_layer_input"], ""),
    "w.deterministic_flag_inverted": (["dropout.active_in_eval"], ""),
    "w.mask_where_inverted": (["mask.polarity_inverted"], ""),
    "w.softmax_over_queries": (["attention.softmax_axis_wrong"], ""),
    "w.scale_by_model_width": (["attention.scale_wrong"], ""),
    "w.layernorm_one_pass_variance": (
        [],
        "the variance computed in one pass as E[x^2] - E[x]^2, which cancels when the mean is "
        "large against the spread (not a matter of the dtype the statistics are held in)",
    ),
    "w.layernorm_eps_torch_default": (["layer_norm.eps_wrong"], ""),
    "w.value_projected_with_key_kernel": (["attention.value_uses_key_projection"], ""),
    "w.mlp_gelu_for_relu": (["ffn.activation_gelu"], ""),
    "w.causal_mask_inverted": (["mask.causal_leak"], ""),
    "w.masks_combined_with_or": (
        [],
        "masks combined by logical OR instead of AND, so a key is attended when any one of the "
        "masks keeps it",
    ),
}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    """The 1-based line number of the one line whose stripped text is ``stripped``, and the line
    itself (with its indentation)."""
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}.py: {stripped!r} occurs {len(hits)} times")
    return hits[0] + 1, lines[hits[0]]


def _row(row_id: str, impl: str, original: str, replacement: str) -> dict[str, Any]:
    line, full = _locate(impl, original)
    indent = full[: len(full) - len(full.lstrip())]
    return {
        "id": row_id,
        "impl": impl,
        "file": f"{FOLDER}/{impl}.py",
        "line": line,
        "original": full,
        "replacement": indent + replacement,
    }


def tables() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    assert set(PHASE_2) == {b[0] for b in BUGS}
    bugs = []
    for row_id, impl, orig, repl, family, components, description, klass, report in BUGS:
        row = _row(row_id, impl, orig, repl)
        row |= {
            "family": family,
            "components": components,
            "description": description,
            "class": klass,
            "public_report": report,
            "expected_codes": PHASE_2[row_id][0],
            "class_without_code": PHASE_2[row_id][1],
        }
        bugs.append(row)
    controls = []
    for row_id, impl, orig, repl, components, why in CONTROLS:
        controls.append(
            _row(row_id, impl, orig, repl) | {"components": components, "why_correct": why}
        )
    return bugs, controls


def main() -> None:
    bugs, controls = tables()
    (HERE / "bugs.json").write_text(
        json.dumps(bugs, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    (HERE / "controls.json").write_text(
        json.dumps(controls, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
