# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twelfth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them.

    python tests/blind12/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind12"

PH = "phi3_hf"
MX = "mlx_llama"
VT = "hf_vit"
P_NORM = ["rms_norm", "decoder_block", "causal_lm"]
P_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
P_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
P_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
P_BLOCK = ["decoder_block", "causal_lm"]
P_LM = ["causal_lm"]
M_NORM = ["rms_norm", "decoder_block", "causal_lm"]
M_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
M_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
M_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
M_BLOCK = ["decoder_block", "causal_lm"]
M_LM = ["causal_lm"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_MASK = ["encoder_layer", "encoder"]
V_VIT = ["vit"]

PHI3_SW = "https://github.com/huggingface/transformers/pull/33586"
SW_OFF_BY_ONE = "https://github.com/huggingface/transformers/issues/39408"
PARTIAL_ROTARY = "https://github.com/huggingface/text-generation-inference/pull/1442"
ROPE_THETA = "https://github.com/lyogavin/airllm/pull/369"
GQA_TILE = "https://github.com/ekzhang/jax-js/pull/180"
SCALE_DIM = "https://github.com/lucidrains/vit-pytorch/issues/65"
VIT_SCALE = "https://github.com/FrancescoSaverioZuppichini/ViT/issues/1"
TIE_HEAD = "https://github.com/huggingface/transformers/pull/43429"
ROPE_TRADITIONAL = "https://github.com/ml-explore/mlx-examples/issues/170"
MLX_OFFSET = "https://github.com/rajveer43/VeloxQuant-MLX/issues/389"
MLX_QK_OFFSET = "https://github.com/ml-explore/mlx-lm/issues/1699"
TOP_LEFT = "https://github.com/pytorch/executorch/pull/21749"
CLS_POS = "https://github.com/labmlai/annotated_deep_learning_paper_implementations/pull/221"
MASK_1E4 = "https://github.com/huggingface/transformers/pull/17306"
PATCH_LAYOUT = "https://github.com/gupta-abhay/pytorch-vit/issues/7"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- phi3_hf -------------------------------------------------------------------------
    (
        "p.qkv_values_read_key_rows", PH,
        "value_states = qkv[..., query_pos + self.num_key_value_heads * self.head_dim :]",
        "value_states = qkv[..., query_pos : query_pos + self.num_key_value_heads * self.head_dim]",
        P_ATTN, "fused-projection split",
        "the values are taken from the key rows of the fused projection, so every head attends over the key vectors as its values",
        "Copy-paste in the fused qkv split: the value slice repeats the key slice's bounds, so the values are the keys.",
        "",
    ),
    (
        "p.gate_up_chunk_swapped", PH,
        "gate, up_states = up_states.chunk(2, dim=-1)",
        "up_states, gate = up_states.chunk(2, dim=-1)",
        P_FFN, "fused-projection split",
        "the two halves of the fused gate/up projection are exchanged, so the activation is applied to the up half and the gate half is the linear factor",
        "A conversion that stacks [up; gate] instead of Phi-3's [gate; up] (or a port that unpacks in the wrong order): SiLU lands on the up projection.",
        "",
    ),
    (
        "p.rotate_half_inverted", PH,
        "return torch.cat((-x2, x1), dim=-1)",
        "return torch.cat((x2, -x1), dim=-1)",
        P_ROPE, "rope",
        "the rotation of each pair is by minus the angle (the sine term has the wrong sign), so queries and keys are rotated backwards",
        "rotate_half written with the minus on the wrong half: the rotation goes clockwise.",
        "",
    ),
    (
        "p.rope_table_interleaved", PH,
        "emb = torch.cat((freqs, freqs), dim=-1)",
        "emb = torch.repeat_interleave(freqs, 2, dim=-1)",
        P_ROPE, "rope",
        "the cos/sin table is laid out for neighbouring pairs (each frequency repeated in place) while the rotation pairs the two halves, so channel i and channel i + d/2 are rotated at different frequencies",
        "A port mixing RoPE layouts: the angle table is built the interleaved way (GPT-J) but the rotation is rotate_half (NeoX).",
        "",
    ),
    (
        "p.partial_rotary_copied", PH,
        "partial_rotary_factor: float = 1.0",
        "partial_rotary_factor: float = 0.5",
        P_ROPE, "rope",
        "only the first half of each head's channels is rotated, with frequencies computed over that half, while the model rotates the whole head",
        "A config default copied from a partial-rotary relative (Phi-2/Phi-4-mini style): the rotation covers half the head and its frequencies follow the shorter width.",
        PARTIAL_ROTARY,
    ),
    (
        "p.rope_theta_other_release", PH,
        "rope_theta: float = 10000.0",
        "rope_theta: float = 1000000.0",
        P_ROPE, "rope",
        "the rotary frequencies use a base of 1e6 instead of the checkpoint's 1e4, so every pair rotates at the wrong rate",
        "A config default taken from a long-context release: the RoPE base is 1e6 for a model trained with 1e4.",
        ROPE_THETA,
    ),
    (
        "p.derived_positions_restart", PH,
        "position_ids = cache_position.unsqueeze(0).expand(hidden_states.shape[0], -1)",
        "position_ids = torch.arange(hidden_states.shape[1]).unsqueeze(0).expand(hidden_states.shape[0], -1)",
        P_ATTN, "kv cache",
        "when no position ids are given, the new tokens of a cached step are numbered from 0 instead of after the cached tokens",
        "Positions derived from the call's length rather than from cache_position: every decoded token is rotated as if it were at the start.",
        "",
    ),
    (
        "p.cache_keys_prepended", PH,
        "self.key_cache[layer_idx] = torch.cat([self.key_cache[layer_idx], key_states], dim=-2)",
        "self.key_cache[layer_idx] = torch.cat([key_states, self.key_cache[layer_idx]], dim=-2)",
        P_ATTN, "kv cache",
        "a step's new keys are put before the cached keys while its values are put after the cached values, so keys and values no longer belong to the same tokens",
        "The concatenation order reversed in the key cache only: the key and value caches are out of step from the second call on.",
        "",
    ),
    (
        "p.window_one_too_wide", PH,
        "window = kv_idx[None, :] > cache_position[:, None] - sliding_window",
        "window = kv_idx[None, :] >= cache_position[:, None] - sliding_window",
        P_ATTN, "sliding window",
        "the sliding window lets a query see one key more than its width (w + 1 keys, its own included)",
        "The window bound written with >=, as flash-attention's window_size=(w, w) does: each query attends w + 1 keys.",
        SW_OFF_BY_ONE,
    ),
    (
        "p.window_not_applied", PH,
        "mask = (causal & window)[None, None, :, :]",
        "mask = causal[None, None, :, :]",
        P_ATTN, "sliding window",
        "the sliding window is not applied: every query sees every earlier key although the model declares a window",
        "A refactor of the mask builder drops the window term (Phi-3's eager path lost its sliding window the same way).",
        PHI3_SW,
    ),
    (
        "p.causal_diagonal_hidden", PH,
        "causal = kv_idx[None, :] <= cache_position[:, None]",
        "causal = kv_idx[None, :] < cache_position[:, None]",
        P_ATTN, "masks",
        "the causal mask excludes the query's own key: each token sees only strictly earlier tokens (the first token sees nothing)",
        "Strict inequality in the causal comparison.",
        "",
    ),
    (
        "p.softmax_float32_literal", PH,
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=_upcast(query.dtype)).to(query.dtype)",
        "attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)",
        P_ATTN, "precision",
        "the softmax is always computed in float32, so a float64 build loses precision in the attention weights",
        "transformers' literal dtype=torch.float32 upcast kept in a port that also runs in float64 (its float64 finfo.min fill also overflows to -inf in float32, so a row with no visible key becomes NaN).",
        "",
    ),
    (
        "p.rms_uses_variance", PH,
        "variance = hidden_states.pow(2).mean(-1, keepdim=True)",
        "variance = hidden_states.var(-1, keepdim=True, unbiased=False)",
        P_NORM, "normalisation",
        "the RMS norm divides by the standard deviation around the mean instead of the root mean square (the mean is subtracted in the statistic but not from the input)",
        "A LayerNorm habit in an RMSNorm: the statistic is the centred variance.",
        "",
    ),
    (
        "p.rms_eps_other_default", PH,
        "rms_norm_eps: float = 1e-5",
        "rms_norm_eps: float = 1e-6",
        P_BLOCK, "normalisation",
        "the blocks' RMS norms use epsilon 1e-6 instead of the 1e-5 the model declares",
        "The config default copied from Llama/Qwen (1e-6); Phi-3 ships 1e-5. The rms_norm subject passes its own eps and is unaffected.",
        "",
    ),
    (
        "p.scale_by_hidden_size", PH,
        "self.scaling = self.head_dim**-0.5",
        "self.scaling = config.hidden_size**-0.5",
        P_ATTN, "attention scale",
        "the scores are divided by the square root of the model width instead of the head width",
        "Scaling by sqrt(hidden_size) instead of sqrt(head_dim).",
        SCALE_DIM,
    ),
    (
        "p.repeat_kv_tiled", PH,
        "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
        "hidden_states = hidden_states[:, None, :, :, :].expand(batch, n_rep, num_key_value_heads, slen, head_dim)",
        P_ATTN, "grouped-query attention",
        "key/value heads are tiled over the query heads instead of repeated in place: query head h uses key/value head h mod H_kv instead of h // g",
        "repeat_kv rewritten with the repeat axis before the head axis (a tile, as torch.repeat would give).",
        GQA_TILE,
    ),
    (
        "p.merge_without_transpose", PH,
        "attn_output = attn_output.transpose(1, 2).contiguous()",
        "attn_output = attn_output.contiguous()",
        P_ATTN, "head split/merge",
        "the heads are merged by reshaping the heads-first tensor directly, so the merged rows mix positions and heads",
        "The transpose back to [B, L, H, d] dropped before the reshape.",
        "",
    ),
    (
        "p.resid_dropout_always_on", PH,
        "hidden_states = residual + self.resid_attn_dropout(hidden_states)",
        "hidden_states = residual + nn.functional.dropout(hidden_states, p=self.config.resid_pdrop, training=True)",
        P_BLOCK, "dropout",
        "dropout on the attention branch stays active in evaluation: the output is random and scaled",
        "The dropout module replaced by a functional call with training=True.",
        "",
    ),
    (
        "p.residual_after_norm", PH,
        "hidden_states = self.post_attention_layernorm(hidden_states)",
        "hidden_states = residual = self.post_attention_layernorm(hidden_states)",
        P_BLOCK, "residual/norm placement",
        "the feed-forward sublayer's residual is taken from the normalised input instead of the un-normalised stream",
        "A chained assignment saves the residual after the norm.",
        "",
    ),
    (
        "p.final_norm_skipped", PH,
        "hidden_states = self.norm(hidden_states)",
        "hidden_states = hidden_states",
        P_LM, "normalisation",
        "the final norm of the pre-LN stack is not applied before the output head",
        "The model's final RMSNorm dropped (a refactor moving it into the head that never happened).",
        "",
    ),
    (
        "p.head_tied_to_embedding", PH,
        "logits = self.lm_head(hidden_states)",
        "logits = hidden_states @ self.model.embed_tokens.weight.T",
        P_LM, "weight tying",
        "the logits are computed with the token embedding matrix although the model has its own untied output head",
        "A port assuming tied embeddings: lm_head is ignored and the embedding is used as the classifier.",
        TIE_HEAD,
    ),
    (
        "p.embed_dropout_functional", PH,
        "hidden_states = self.embed_dropout(inputs_embeds)",
        "hidden_states = nn.functional.dropout(inputs_embeds, p=self.config.embd_pdrop)",
        P_LM, "dropout",
        "dropout on the token embeddings stays active in evaluation (the functional form defaults to training mode)",
        "nn.Dropout replaced by F.dropout, whose training flag defaults to True.",
        "",
    ),
    # ---- mlx_llama -----------------------------------------------------------------------
    (
        "m.rope_traditional_off", MX,
        "rope_traditional: bool = True",
        "rope_traditional: bool = False",
        M_ATTN, "rope",
        "the attention rotates pairs (i, i + d/2) while the weights expect neighbouring pairs (2i, 2i + 1)",
        "ModelArgs' rope_traditional default flipped (a config converted from HF): the rotation layout no longer matches the checkpoint. The rope subject builds its own RoPE and is unaffected.",
        ROPE_TRADITIONAL,
    ),
    (
        "m.rope_sine_sign", MX,
        "rx1 = x1 * costheta - x2 * sintheta",
        "rx1 = x1 * costheta + x2 * sintheta",
        M_ROPE, "rope",
        "the first coordinate of each pair gets the wrong sign on its sine term, so the map is not a rotation (it does not preserve norms or relative angles)",
        "A sign typo in the hand-written rotation.",
        "",
    ),
    (
        "m.rope_base_llama3", MX,
        "rope_theta: float = 10000",
        "rope_theta: float = 500000",
        M_ATTN, "rope",
        "the rotary frequencies use a base of 500000 instead of 10000",
        "ModelArgs' default rope_theta taken from Llama 3 for a Llama 2 checkpoint. The rope subject builds its own RoPE and is unaffected.",
        ROPE_THETA,
    ),
    (
        "m.keys_rotated_at_zero", MX,
        "keys = self.rope(keys, offset=rope_offset)",
        "keys = self.rope(keys)",
        M_ATTN, "kv cache",
        "in cached steps the new keys are rotated at positions counted from 0 while the queries use the cache offset",
        "The offset argument lost on the keys' rope call: queries and keys of a step disagree on positions.",
        MLX_QK_OFFSET,
    ),
    (
        "m.derived_offset_zero", MX,
        "rope_offset = cache.offset if offset is None else offset",
        "rope_offset = 0 if offset is None else offset",
        M_ATTN, "kv cache",
        "when no positions are given, a cached step's queries and keys are rotated from position 0 instead of from the number of cached tokens",
        "The cache's offset not used as the rope offset: every decoded token is rotated as the first.",
        MLX_OFFSET,
    ),
    (
        "m.values_cache_gets_keys", MX,
        "self.values[..., prev : self.offset, :] = values",
        "self.values[..., prev : self.offset, :] = keys",
        M_ATTN, "kv cache",
        "the cache stores each step's keys in the value buffer, so cached steps attend over key vectors as values",
        "Copy-paste in update_and_fetch: the value write copies the keys.",
        "",
    ),
    (
        "m.cache_returns_buffer", MX,
        "return self.keys[..., : self.offset, :], self.values[..., : self.offset, :]",
        "return self.keys, self.values",
        M_ATTN, "kv cache",
        "the whole preallocated buffer is returned, so the queries also attend the empty (zero) slots after the filled ones",
        "update_and_fetch returns the 256-slot buffers instead of their filled part.",
        "",
    ),
    (
        "m.cache_writes_at_start", MX,
        "self.keys[..., prev : self.offset, :] = keys",
        "self.keys[..., : keys.shape[2], :] = keys",
        M_ATTN, "kv cache",
        "each step writes its keys at the first slots instead of after the cached ones, overwriting earlier keys and leaving its own slots empty",
        "The key write ignores prev.",
        "",
    ),
    (
        "m.causal_string_top_left", MX,
        "q_indices = torch.arange(kL - qL, kL)",
        "q_indices = torch.arange(qL)",
        M_ATTN, "masks",
        "the built-in causal mask aligns the queries with the first keys instead of the last ones, so a chunk after a non-empty cache sees only the first keys",
        "Top-left alignment of the \"causal\" mask when there are more keys than queries.",
        TOP_LEFT,
    ),
    (
        "m.array_mask_strict", MX,
        "mask = linds >= rinds",
        "mask = linds > rinds",
        M_ATTN, "masks",
        "the explicit causal mask (used with padding) hides each query's own key",
        "Strict inequality in create_causal_mask; the unpadded path (mask=\"causal\") is unaffected.",
        "",
    ),
    (
        "m.where_arguments_swapped", MX,
        "scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)",
        "scores = torch.where(mask, torch.finfo(scores.dtype).min, scores)",
        M_ATTN, "masks",
        "the mask's polarity is inverted: allowed keys are removed and forbidden keys kept",
        "The where() branches swapped (a keep-mask read as a drop-mask).",
        "",
    ),
    (
        "m.padding_dropped_single_token", MX,
        "if key_padding is None:",
        "if key_padding is None or T == 1:",
        M_ATTN, "masks",
        "one-token calls ignore the padding mask, so decoded tokens attend the pads of a left-padded row",
        "The single-token shortcut (mask None) taken even when the row has padding.",
        "",
    ),
    (
        "m.gqa_keys_tiled", MX,
        "keys = torch.unsqueeze(keys, dim=-3)",
        "keys = keys.repeat(1, n_repeats, 1, 1).reshape(B, n_kv_heads, n_repeats, -1, D)",
        M_ATTN, "grouped-query attention",
        "the keys are tiled over the query heads (query head h scores against key head h mod H_kv) while the values are still grouped in place",
        "The broadcast replaced by torch.repeat (a tile) for the keys only.",
        GQA_TILE,
    ),
    (
        "m.scale_by_model_width", MX,
        "self.scale = head_dim**-0.5",
        "self.scale = dim**-0.5",
        M_ATTN, "attention scale",
        "the scores are scaled by one over the square root of the model width instead of the head width",
        "The wrong local (dim, not head_dim) in the scale.",
        SCALE_DIM,
    ),
    (
        "m.merge_without_permute", MX,
        "output = output.permute(0, 2, 1, 3).reshape(B, L, -1)",
        "output = output.reshape(B, L, -1)",
        M_ATTN, "head split/merge",
        "the heads are merged by reshaping the heads-first output directly, mixing positions and heads",
        "The mlx transpose(0, 2, 1, 3) lost in the port.",
        "",
    ),
    (
        "m.query_split_without_permute", MX,
        "queries = queries.reshape(B, L, self.n_heads, -1).permute(0, 2, 1, 3)",
        "queries = queries.reshape(B, self.n_heads, L, -1)",
        M_ATTN, "head split/merge",
        "the queries are split into heads by a reshape to heads-first, so each query head mixes positions and channels",
        "Reshaping straight to [B, H, L, d] instead of [B, L, H, d] and transposing (queries only).",
        "",
    ),
    (
        "m.silu_on_up", MX,
        "return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))",
        "return self.w2(nn.functional.silu(self.w3(x)) * self.w1(x))",
        M_FFN, "feed-forward",
        "the activation is applied to the up projection and the gate projection is the linear factor",
        "w1 and w3 exchanged in the SwiGLU.",
        "",
    ),
    (
        "m.rms_eps_outside_root", MX,
        "n = torch.rsqrt(xf.square().mean(-1, keepdim=True) + self.eps)",
        "n = 1.0 / (torch.sqrt(xf.square().mean(-1, keepdim=True)) + self.eps)",
        M_NORM, "normalisation",
        "epsilon is added to the root mean square instead of under the square root",
        "The rsqrt rewritten as 1 / (sqrt + eps).",
        "",
    ),
    (
        "m.rms_gain_plus_one", MX,
        "return (self.weight * (xf * n)).to(x.dtype)",
        "return ((1.0 + self.weight) * (xf * n)).to(x.dtype)",
        M_NORM, "normalisation",
        "the norm's gain is used as one plus the stored weight",
        "Gemma's RMSNorm convention (1 + weight) copied into a Llama port.",
        "",
    ),
    (
        "m.rms_stats_input_dtype", MX,
        "xf = x.to(_precise(x.dtype))",
        "xf = x",
        M_NORM, "precision",
        "in 16-bit the mean square and its root are computed in the input precision instead of float32",
        "mx.fast.rms_norm's float32 accumulation not reproduced in the port.",
        "",
    ),
    (
        "m.residual_from_normed", MX,
        "h = x + r",
        "h = self.attention_norm(x) + r",
        M_BLOCK, "residual/norm placement",
        "the attention sublayer's residual adds the normalised input instead of the un-normalised stream",
        "The residual taken after the norm.",
        "",
    ),
    (
        "m.embedding_scaled", MX,
        "h = self.tok_embeddings(inputs)",
        "h = self.tok_embeddings(inputs) * math.sqrt(self.args.hidden_size)",
        M_LM, "embeddings",
        "the token embeddings are multiplied by the square root of the model width",
        "Gemma's embedding normaliser copied into Llama.",
        "",
    ),
    (
        "m.final_norm_skipped", MX,
        "return self.norm(h)",
        "return h",
        M_LM, "normalisation",
        "the final norm of the pre-LN stack is not applied before the output projection",
        "LlamaModel returns the last block's output unnormalised.",
        "",
    ),
    # ---- hf_vit --------------------------------------------------------------------------
    (
        "v.patch_reshape_not_transpose", VT,
        "embeddings = self.projection(pixel_values).flatten(2).transpose(1, 2)",
        "embeddings = self.projection(pixel_values).reshape(batch_size, -1, self.projection.out_channels)",
        V_PATCH, "vit patchify",
        "the channels-first convolution output is reshaped to tokens instead of transposed, so each token mixes channels of several patches",
        "flatten(2).transpose(1, 2) replaced by a reshape to [B, N, D].",
        PATCH_LAYOUT,
    ),
    (
        "v.patch_grid_column_major", VT,
        "embeddings = self.projection(pixel_values).flatten(2).transpose(1, 2)",
        "embeddings = self.projection(pixel_values).transpose(2, 3).flatten(2).transpose(1, 2)",
        V_PATCH, "vit patchify",
        "the patches are ordered column by column over the grid instead of row by row",
        "The grid transposed before flattening (a width/height mix-up).",
        "",
    ),
    (
        "v.cls_without_position", VT,
        "embeddings = embeddings + self.position_embeddings",
        "embeddings[:, 1:] = embeddings[:, 1:] + self.position_embeddings[:, 1:]",
        V_VIT, "vit position embedding",
        "the class token receives no position embedding; only the patch tokens get theirs",
        "Positions added to the patch tokens only.",
        CLS_POS,
    ),
    (
        "v.pos_grid_transposed", VT,
        "embeddings = embeddings + self.position_embeddings",
        "embeddings = embeddings + torch.cat((self.position_embeddings[:, :1], self.position_embeddings[:, 1:].reshape(1, int(self.patch_embeddings.num_patches**0.5), int(self.patch_embeddings.num_patches**0.5), -1).transpose(1, 2).reshape(1, self.patch_embeddings.num_patches, -1)), dim=1)",
        V_VIT, "vit position embedding",
        "the patch position embeddings are read with the grid transposed, so patch (r, c) gets the embedding of (c, r)",
        "A checkpoint conversion that transposes the position grid ((w, h) read as (h, w)).",
        "",
    ),
    (
        "v.cls_appended", VT,
        "embeddings = torch.cat((cls_tokens, embeddings), dim=1)",
        "embeddings = torch.cat((embeddings, cls_tokens), dim=1)",
        V_VIT, "vit class token",
        "the class token is appended after the patch tokens instead of prepended, so positions and the head's token 0 belong to a patch",
        "The concatenation order reversed.",
        "",
    ),
    (
        "v.cls_token_zeroed", VT,
        "cls_tokens = self.cls_token.expand(batch_size, -1, -1)",
        "cls_tokens = torch.zeros_like(self.cls_token).expand(batch_size, -1, -1)",
        V_VIT, "vit class token",
        "the learned class token is replaced by zeros",
        "A port that initialises the class token instead of reading it from the checkpoint.",
        "",
    ),
    (
        "v.scale_by_all_heads", VT,
        "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
        "attention_scores = attention_scores / math.sqrt(self.all_head_size)",
        V_LAYER, "attention scale",
        "the scores are divided by the square root of the model width instead of the head width",
        "all_head_size in place of attention_head_size.",
        VIT_SCALE,
    ),
    (
        "v.head_split_strided", VT,
        "new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)",
        "new_x_shape = x.size()[:-1] + (self.attention_head_size, self.num_attention_heads)",
        V_LAYER, "head split/merge",
        "the heads are split with the head index varying fastest (strided channels), which the merge does not undo, so the output channels are permuted and heads mix projection blocks",
        "The two sizes swapped in transpose_for_scores' view.",
        "",
    ),
    (
        "v.merge_by_reshape", VT,
        "context_layer = context_layer.permute(0, 2, 1, 3).contiguous()",
        "context_layer = context_layer.reshape(context_layer.shape[0], context_layer.shape[2], context_layer.shape[1], -1).contiguous()",
        V_LAYER, "head split/merge",
        "the heads are merged by reshaping instead of transposing, mixing positions and heads",
        "permute replaced by a reshape to the same shape.",
        "",
    ),
    (
        "v.softmax_over_queries", VT,
        "attention_probs = nn.functional.softmax(attention_scores, dim=-1)",
        "attention_probs = nn.functional.softmax(attention_scores, dim=-2)",
        V_LAYER, "attention",
        "the softmax normalises over the queries instead of over the keys",
        "Softmax on the wrong axis.",
        "",
    ),
    (
        "v.mask_minus_10000", VT,
        "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min",
        "extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0",
        V_MASK, "masks",
        "masked keys are lowered by a finite 10000 instead of removed, so a row whose keys are all masked attends by its raw scores instead of uniformly",
        "BERT's old -10000.0 additive mask.",
        MASK_1E4,
    ),
    (
        "v.mask_polarity_inverted", VT,
        "extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min",
        "extended_attention_mask = extended_attention_mask * torch.finfo(dtype).min",
        V_MASK, "masks",
        "the keep-mask is used as a drop-mask: the real tokens are masked and the padding attended",
        "The (1 - mask) inversion forgotten.",
        "",
    ),
    (
        "v.causal_future_only", VT,
        "causal_mask = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]",
        "causal_mask = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) >= seq_ids[None, :, None]",
        V_MASK, "masks",
        "the causal mask is transposed: each query sees itself and the later keys instead of the earlier ones",
        "The comparison reversed in get_extended_attention_mask's causal branch.",
        "",
    ),
    (
        "v.padding_on_queries", VT,
        "extended_attention_mask = attention_mask[:, None, None, :]",
        "extended_attention_mask = attention_mask[:, None, :, None]",
        V_MASK, "masks",
        "the padding mask is laid over the query rows instead of the key columns, so real queries still attend the padded keys",
        "The singleton axis in the wrong place when broadcasting the mask.",
        "",
    ),
    (
        "v.residual_from_normed", VT,
        "hidden_states = attention_output + hidden_states",
        "hidden_states = attention_output + hidden_states_norm",
        V_LAYER, "residual/norm placement",
        "the attention sublayer's residual adds the normalised input instead of the un-normalised stream",
        "The first residual reads layernorm_before's output.",
        "",
    ),
    (
        "v.ffn_residual_normed", VT,
        "layer_output = self.output(layer_output, hidden_states)",
        "layer_output = self.output(layer_output, self.layernorm_after(hidden_states))",
        V_LAYER, "residual/norm placement",
        "the feed-forward sublayer's residual adds the normalised stream instead of the un-normalised one",
        "ViTOutput handed the normed tensor as its residual input.",
        "",
    ),
    (
        "v.gelu_tanh", VT,
        "ACT2FN = {\"gelu\": nn.GELU(), \"gelu_new\": nn.GELU(approximate=\"tanh\"), \"relu\": nn.ReLU()}",
        "ACT2FN = {\"gelu\": nn.GELU(approximate=\"tanh\"), \"gelu_new\": nn.GELU(approximate=\"tanh\"), \"relu\": nn.ReLU()}",
        V_LAYER, "feed-forward",
        "the feed-forward activation is the tanh approximation of GELU instead of the exact GELU",
        "The activation table maps \"gelu\" to the tanh form.",
        "",
    ),
    (
        "v.layer_norm_eps_timm", VT,
        "layer_norm_eps: float = 1e-12",
        "layer_norm_eps: float = 1e-6",
        V_LAYER, "normalisation",
        "every LayerNorm uses epsilon 1e-6 instead of the declared 1e-12",
        "timm's eps in an HF ViT config.",
        "",
    ),
    (
        "v.final_layernorm_skipped", VT,
        "sequence_output = self.layernorm(sequence_output)",
        "sequence_output = sequence_output",
        V_VIT, "normalisation",
        "the final LayerNorm is not applied before the classifier",
        "ViTModel's final layernorm dropped.",
        "",
    ),
    (
        "v.pool_mean_all_tokens", VT,
        "logits = self.classifier(sequence_output[:, 0, :])",
        "logits = self.classifier(sequence_output.mean(dim=1))",
        V_VIT, "pooling",
        "the classifier reads the mean of all tokens (class token included) instead of the class token",
        "Mean pooling over every token.",
        "",
    ),
    (
        "v.embedding_dropout_functional", VT,
        "embeddings = self.dropout(embeddings)",
        "embeddings = nn.functional.dropout(embeddings, p=self.config.hidden_dropout_prob)",
        V_VIT, "dropout",
        "dropout on the embeddings stays active in evaluation (the functional form defaults to training mode)",
        "nn.Dropout replaced by F.dropout.",
        "",
    ),
    (
        "v.key_from_query_projection", VT,
        "key_layer = self.transpose_for_scores(self.key(hidden_states))",
        "key_layer = self.transpose_for_scores(self.query(hidden_states))",
        V_LAYER, "parameters",
        "the keys are computed with the query projection, so the key weights are unused",
        "Copy-paste: self.query in the key line.",
        "",
    ),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    (
        "control.p_scaling_reciprocal", PH,
        "self.scaling = self.head_dim**-0.5",
        "self.scaling = 1.0 / self.head_dim**0.5",
        P_ATTN, "1/sqrt(d) written as a reciprocal: the same scale to rounding.",
    ),
    (
        "control.p_rotate_half_stack", PH,
        "return torch.cat((-x2, x1), dim=-1)",
        "return torch.stack((-x2, x1), dim=-2).flatten(-2)",
        P_ROPE, "Stacking the halves on a new axis before the last and flattening gives the same [-x2, x1] order.",
    ),
    (
        "control.p_gate_up_split", PH,
        "gate, up_states = up_states.chunk(2, dim=-1)",
        "gate, up_states = up_states.split(self.config.intermediate_size, dim=-1)",
        P_FFN, "split by the intermediate size is chunk(2) for a [gate; up] projection of 2F columns.",
    ),
    (
        "control.m_silu_written_out", MX,
        "return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))",
        "return self.w2(self.w1(x) * torch.sigmoid(self.w1(x)) * self.w3(x))",
        M_FFN, "SiLU is x * sigmoid(x).",
    ),
    (
        "control.m_rope_reshape", MX,
        "rx = torch.stack([rx1, rx2], dim=-1).flatten(-2)",
        "rx = torch.stack([rx1, rx2], dim=-1).reshape(*rx1.shape[:-1], self.dims)",
        M_ROPE, "The same interleaving written as a reshape of the stacked pairs.",
    ),
    (
        "control.m_masked_fill", MX,
        "scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)",
        "scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)",
        M_ATTN, "masked_fill of the negated keep-mask is the same selection.",
    ),
    (
        "control.v_scale_multiply", VT,
        "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
        "attention_scores = attention_scores * self.attention_head_size**-0.5",
        V_LAYER, "Multiplying by d^-1/2 instead of dividing by sqrt(d): equal to rounding.",
    ),
    (
        "control.v_merge_transpose", VT,
        "context_layer = context_layer.permute(0, 2, 1, 3).contiguous()",
        "context_layer = context_layer.transpose(1, 2).contiguous()",
        V_LAYER, "transpose(1, 2) is permute(0, 2, 1, 3) for a 4-D tensor.",
    ),
]

# Phase 2 (after the phase-1 freeze): bug id -> (expected codes, class without a code).
PHASE_2: dict[str, tuple[list[str], str]] = {
    # phi3_hf
    "p.qkv_values_read_key_rows": (["attention.value_uses_key_projection", "attention.qkv_order_wrong"], ""),
    "p.gate_up_chunk_swapped": (["ffn.gate_up_swapped"], ""),
    "p.rotate_half_inverted": (["rope.rotation_inverted"], ""),
    "p.rope_table_interleaved": (["rope.table_layout_mismatch"], ""),
    "p.partial_rotary_copied": (["positional.frequency_wrong"], ""),
    "p.rope_theta_other_release": (["positional.base_wrong", "positional.frequency_wrong"], ""),
    "p.derived_positions_restart": (["cache.rope_offset_wrong"], ""),
    "p.cache_keys_prepended": (["cache.keys_prepended"], ""),
    "p.window_one_too_wide": (["mask.sliding_window_wrong"], ""),
    "p.window_not_applied": (["mask.sliding_window_wrong"], ""),
    "p.causal_diagonal_hidden": (["mask.causal_diagonal_hidden", "cache.causal_off_by_one"], ""),
    "p.softmax_float32_literal": (["numerics.float32_island", "numerics.float64_precision_lost"], ""),
    "p.rms_uses_variance": (["layer_norm.rms_wrong_statistics"], ""),
    "p.rms_eps_other_default": (["layer_norm.eps_wrong"], ""),
    "p.scale_by_hidden_size": (["attention.scale_wrong"], ""),
    "p.repeat_kv_tiled": (["attention.kv_heads_tiled"], ""),
    "p.merge_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "p.resid_dropout_always_on": (["dropout.active_in_eval"], ""),
    "p.residual_after_norm": (["blocks.residual_after_norm"], ""),
    "p.final_norm_skipped": (["blocks.final_norm_missing"], ""),
    "p.head_tied_to_embedding": (["model.head_tied_to_embedding"], ""),
    "p.embed_dropout_functional": (["dropout.active_in_eval"], ""),
    # mlx_llama
    "m.rope_traditional_off": (["rope.layout_half_split"], ""),
    "m.rope_sine_sign": (["rope.not_norm_preserving", "rope.not_relative"], ""),
    "m.rope_base_llama3": (["positional.base_wrong", "positional.frequency_wrong"], ""),
    "m.keys_rotated_at_zero": (["cache.rope_offset_wrong"], ""),
    "m.derived_offset_zero": (["cache.rope_offset_wrong"], ""),
    "m.values_cache_gets_keys": (["attention.value_uses_key_projection"], ""),
    "m.cache_returns_buffer": ([], "a KV cache that returns its whole preallocated buffer, so cached steps also attend the empty (zero) slots after the filled ones: no code names attending unfilled cache slots"),
    "m.cache_writes_at_start": (["cache.slots_overlap"], ""),
    "m.causal_string_top_left": (["cache.causal_top_left", "mask.causal_alignment_top_left"], ""),
    "m.array_mask_strict": (["mask.causal_diagonal_hidden", "cache.causal_off_by_one"], ""),
    "m.where_arguments_swapped": (["mask.polarity_inverted"], ""),
    "m.padding_dropped_single_token": (["cache.padding_dropped_in_steps"], ""),
    "m.gqa_keys_tiled": (["attention.kv_heads_tiled"], ""),
    "m.scale_by_model_width": (["attention.scale_wrong"], ""),
    "m.merge_without_permute": (["attention.heads_merged_wrong_order"], ""),
    "m.query_split_without_permute": (["attention.heads_split_wrong_order"], ""),
    "m.silu_on_up": (["ffn.gate_up_swapped"], ""),
    "m.rms_eps_outside_root": (["layer_norm.eps_outside_sqrt"], ""),
    "m.rms_gain_plus_one": (["layer_norm.gain_plus_one"], ""),
    "m.rms_stats_input_dtype": (["numerics.norm_statistics_low_precision"], ""),
    "m.residual_from_normed": (["blocks.residual_after_norm"], ""),
    "m.embedding_scaled": (["embedding.scale_on_embeddings"], ""),
    "m.final_norm_skipped": (["blocks.final_norm_missing"], ""),
    # hf_vit
    "v.patch_reshape_not_transpose": (["vit.patch_order"], ""),
    "v.patch_grid_column_major": (["vit.patch_order"], ""),
    "v.cls_without_position": (["vit.cls_pos_embed_missing"], ""),
    "v.pos_grid_transposed": ([], "the patch position embeddings read with the position grid transposed (patch (r, c) gets the row of (c, r)): no code names a permuted position table"),
    "v.cls_appended": (["vit.pooling_wrong_token"], ""),
    "v.cls_token_zeroed": ([], "the learned class token replaced by zeros (a parameter loaded and never used): no code names an unused class token"),
    "v.scale_by_all_heads": (["attention.scale_wrong"], ""),
    "v.head_split_strided": (["attention.heads_merged_wrong_order"], ""),
    "v.merge_by_reshape": (["attention.heads_merged_wrong_order"], ""),
    "v.softmax_over_queries": (["attention.softmax_axis_wrong"], ""),
    "v.mask_minus_10000": (["mask.added_as_bias", "mask.fully_masked_rows_other"], ""),
    "v.mask_polarity_inverted": (["mask.polarity_inverted"], ""),
    "v.causal_future_only": (["mask.causal_leak"], ""),
    "v.padding_on_queries": (["mask.applied_to_queries"], ""),
    "v.residual_from_normed": (["blocks.residual_after_norm"], ""),
    "v.ffn_residual_normed": (["blocks.residual_after_norm"], ""),
    "v.gelu_tanh": (["ffn.activation_gelu_tanh"], ""),
    "v.layer_norm_eps_timm": (["layer_norm.eps_wrong"], ""),
    "v.final_layernorm_skipped": (["blocks.final_norm_missing"], ""),
    "v.pool_mean_all_tokens": (["vit.pooling_mean_with_cls"], ""),
    "v.embedding_dropout_functional": (["dropout.active_in_eval"], ""),
    "v.key_from_query_projection": (["params.read_from_other_module"], ""),
}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    """The 1-based line number of the one line of ``impl`` whose stripped text is ``stripped``,
    and its indentation."""
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}.py: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line[: len(line) - len(line.lstrip())]


def _row(id_: str, impl: str, original: str, replacement: str, components: list[str]) -> dict[str, Any]:
    number, indent = _locate(impl, original)
    return {
        "id": id_, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
        "original": indent + original, "replacement": indent + replacement,
        "components": list(components),
    }


def bugs() -> list[dict[str, Any]]:
    unknown = set(PHASE_2) - {row[0] for row in BUGS}
    if unknown:
        raise ValueError(f"PHASE_2 names unknown bugs: {sorted(unknown)}")
    out = []
    for id_, impl, original, replacement, components, family, class_, description, report in BUGS:
        codes, without = PHASE_2.get(id_, ([], ""))
        out.append({
            **_row(id_, impl, original, replacement, components),
            "family": family, "class": class_, "description": description,
            "public_report": report, "expected_codes": list(codes), "class_without_code": without,
        })
    return out


def controls() -> list[dict[str, Any]]:
    return [
        {**_row(id_, impl, original, replacement, components), "why_correct": why}
        for id_, impl, original, replacement, components, why in CONTROLS
    ]


def main() -> None:
    for name, rows in (("bugs.json", bugs()), ("controls.json", controls())):
        (HERE / name).write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
