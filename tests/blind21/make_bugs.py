# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twenty-first blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind21/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind21"

NX = "gptneox_decoder"
DL = "d2l_encoder"
FV = "flash_vit"
N_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
N_BLOCK = ["decoder_block", "causal_lm"]
N_LM = ["causal_lm"]
D_PE = ["sinusoidal_pe"]
D_ATTN = ["mha", "encoder_layer", "encoder"]
D_LAYER = ["encoder_layer", "encoder"]
D_ENC = ["encoder"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_MASK = ["encoder_layer", "encoder"]
V_ENC = ["encoder", "vit"]
V_VIT = ["vit"]

QKV_HEAD_MAJOR = "https://github.com/lablup/mlxcel/pull/928"
ROPE_PAIRING = "https://github.com/raiyanyahya/how-to-train-your-gpt/issues/6"
NEOX_PARALLEL = "https://github.com/TransformerLensOrg/TransformerLens/issues/1644"
UNTIED_HEAD = "https://github.com/pegainfer-project/pegainfer/pull/544"
OWN_KEY_DROPPED = "https://github.com/harvard-edge/cs249r_book/pull/1953"
SDPA_TOP_LEFT = "https://github.com/pytorch/pytorch/issues/144858"
ROPE_OFFSET = "https://github.com/lucidrains/rotary-embedding-torch/issues/11"
MASK_SIGN = "https://github.com/nyu-mll/jiant/pull/465"
SCALE_D_MODEL = "https://github.com/karpathy/ng-video-lecture/pull/6"
SCALE_D_MODEL_VIT = "https://github.com/omihub777/ViT-CIFAR/pull/11"
GELU_TANH = "https://github.com/kyutai-labs/pocket-tts/pull/278"
REPEAT_VS_INTERLEAVE = "https://github.com/line/lighthouse/pull/77"
MASK_REPEAT = "https://github.com/ArrowLuo/CLIP4Clip/issues/22"
MASK_FILL_ZERO = "https://github.com/hyunwoongko/transformer/issues/10"
PE_EXPONENT = "https://github.com/jadore801120/attention-is-all-you-need-pytorch/issues/32"
F_DROPOUT = "https://github.com/pytorch/pytorch/issues/26338"
PATCH_CHANNELS = "https://github.com/gupta-abhay/pytorch-vit/issues/7"
CLS_NO_POS = "https://github.com/labmlai/annotated_deep_learning_paper_implementations/pull/221"
WRONG_TOKEN_HEAD = "https://github.com/deepmodeling/Uni-Mol/issues/293"
RESIDUAL_NORMED = "https://github.com/Howuhh/faster-trajectory-transformer/issues/3"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- gptneox_decoder
    ("n.qkv_split_as_thirds", NX,
     "qkv = qkv.view(bsz, q_len, self.num_attention_heads, 3 * self.head_size)",
     "qkv = qkv.view(bsz, q_len, 3, self.num_attention_heads, self.head_size).transpose(2, 3).reshape(bsz, q_len, self.num_attention_heads, 3 * self.head_size)",
     N_ATTN, "fused projections",
     "the fused q/k/v output is read as three contiguous thirds (all query heads, then all key heads, then all value heads) although its rows are laid out per head (q, k, v of head 0, then of head 1, ...): queries, keys and values are assembled from the wrong channels",
     "A port that reuses GPT-2's flat three-way split of the fused projection on a GPT-NeoX checkpoint, whose query_key_value rows are head-major [q_h | k_h | v_h].",
     QKV_HEAD_MAJOR),
    ("n.rope_freqs_interleaved", NX,
     "emb = torch.cat((freqs, freqs), dim=-1)",
     "emb = torch.repeat_interleave(freqs, 2, dim=-1)",
     N_ATTN, "rope",
     "the rotary angle table is laid out for neighbouring pairs (each frequency repeated twice in place) while the rotation pairs channel i with channel i + d/2: the two members of a rotated pair get different angles, so the rotation is not a rotation by one angle per pair",
     "The adjacent-pair angle layout of RoFormer/GPT-J mixed with GPT-NeoX's rotate_half.",
     ROPE_PAIRING),
    ("n.rope_frequency_exponent", NX,
     "inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, dtype=wide, device=x.device) / self.dim))",
     "inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim // 2, dtype=wide, device=x.device) / self.dim))",
     N_ATTN, "rope",
     "the rotary frequencies use the exponent i/d instead of 2i/d: the frequencies decay half as fast across the pairs, so every pair but the first rotates at the wrong rate",
     "A rewrite of the arange(0, dim, 2) idiom as arange(dim // 2) that forgets the factor 2.",
     ""),
    ("n.rotary_pct_quarter", NX,
     "rotary_pct=1.0,",
     "rotary_pct=0.25,",
     N_ATTN, "rope",
     "only the first quarter of each head's channels is rotated (Pythia's default rotary_pct) in a model that rotates every channel: three quarters of the query and key channels carry no position",
     "A config conversion that keeps GPT-NeoX's default rotary_pct for a checkpoint trained with full rotary.",
     ""),
    ("n.scale_by_hidden_size", NX,
     "self.norm_factor = self.head_size ** -0.5",
     "self.norm_factor = self.hidden_size ** -0.5",
     N_ATTN, "attention scale",
     "the scores are scaled by one over the square root of the model width instead of the head width",
     "The classic d_model-for-d_k slip when the scale is written out by hand.",
     SCALE_D_MODEL),
    ("n.causal_diagonal_hidden", NX,
     "causal_mask = torch.triu(causal_mask, diagonal=past_length + 1)",
     "causal_mask = torch.triu(causal_mask, diagonal=past_length)",
     N_ATTN, "masks",
     "the causal bias also covers the diagonal, so no token attends its own key (and the first token attends nothing)",
     "An off-by-one in the triu diagonal of the additive causal mask.",
     OWN_KEY_DROPPED),
    ("n.causal_mask_ignores_cache", NX,
     "causal_mask = torch.triu(causal_mask, diagonal=past_length + 1)",
     "causal_mask = torch.triu(causal_mask, diagonal=1)",
     N_ATTN, "kv cache",
     "with keys in the cache, the causal mask of a step is laid over the (new tokens x all keys) block from its top-left corner: a new token sees only as many keys as its index within the call, not the cached ones before it",
     "A mask built for the call alone when the cache length is left out of the triu offset.",
     SDPA_TOP_LEFT),
    ("n.cache_keeps_last_call", NX,
     "present = (key, value)",
     "present = (key[..., -q_len:, :], value[..., -q_len:, :])",
     N_ATTN, "kv cache",
     "the cache returned after each call holds only that call's keys and values, not every key so far: later tokens no longer see the earlier ones",
     "An optimisation that returns the new slice as the cache instead of the concatenation.",
     ""),
    ("n.padding_polarity", NX,
     "padding_mask = ~key_padding.bool()[:, None, None, :target_length]",
     "padding_mask = key_padding.bool()[:, None, None, :target_length]",
     N_ATTN, "masks",
     "the key-padding mask is inverted: the real tokens are masked and the padded ones kept",
     "A keep-mask taken for a pad-mask when converting attention_mask to the additive bias.",
     MASK_SIGN),
    ("n.padding_dropped_in_steps", NX,
     "if key_padding is not None:",
     "if key_padding is not None and past_length == 0:",
     N_ATTN, "kv cache",
     "the padding mask is applied in a forward and in the first call but not in later cached calls: tokens decoded after the prompt attend the padded keys",
     "A fast path for decoding steps that skips the padding part of the mask.",
     ""),
    ("n.parallel_residual", NX,
     "use_parallel_residual=False,",
     "use_parallel_residual=True,",
     N_BLOCK, "residual/norm placement",
     "the block computes attention and MLP in parallel from the same input (x + attn(ln1(x)) + mlp(ln2(x))) instead of feeding the MLP the residual stream after attention",
     "A config conversion that keeps GPT-NeoX's default use_parallel_residual=True for a sequential-residual checkpoint.",
     NEOX_PARALLEL),
    ("n.final_norm_skipped", NX,
     "hidden_states = self.final_layer_norm(hidden_states)",
     "hidden_states = hidden_states",
     N_LM, "normalisation",
     "the final LayerNorm of the stack is skipped: the logits are computed from the un-normalised residual stream",
     "A refactor that moved the final norm out of the model and forgot it in the head.",
     ""),
    ("n.gelu_tanh", NX,
     "self.act = nn.GELU()",
     "self.act = nn.GELU(approximate=\"tanh\")",
     N_BLOCK, "feed-forward",
     "the MLP uses the tanh approximation of GELU instead of the exact erf GELU the model declares",
     "hidden_act gelu mapped to gelu_new (tanh) in a conversion.",
     GELU_TANH),
    ("n.logits_from_input_embedding", NX,
     "lm_logits = self.embed_out(hidden_states)",
     "lm_logits = F.linear(hidden_states, self.gpt_neox.embed_in.weight)",
     N_LM, "weight tying",
     "the logits are computed with the input embedding matrix although the model has its own untied output matrix, which is left unused",
     "A head written for tied models reused on an untied one.",
     UNTIED_HEAD),
    ("n.derived_positions_not_offset", NX,
     "position_ids = torch.arange(past_length, past_length + q_len, device=hidden_states.device)",
     "position_ids = torch.arange(q_len, device=hidden_states.device)",
     N_ATTN, "kv cache",
     "when no position ids are given, the new tokens of a cached call are numbered from 0 instead of from the cache's length, so they are rotated at the wrong positions",
     "cache_position forgotten when the position ids are derived.",
     ROPE_OFFSET),
    ("n.rope_angles_low_precision", NX,
     "wide = torch.promote_types(x.dtype, torch.float32)",
     "wide = x.dtype",
     N_ATTN, "precision",
     "in float16 and bfloat16 the rotary frequencies and angles (position times frequency) are formed in the 16-bit dtype, losing most of their digits at large positions",
     "The autocast-disabled float32 angle computation dropped for speed.",
     ""),
    # ---- d2l_encoder
    ("d.valid_lens_tiled_over_heads", DL,
     "valid_lens = torch.repeat_interleave(valid_lens, repeats=self.num_heads, dim=0)",
     "valid_lens = valid_lens.repeat(self.num_heads, *[1] * (valid_lens.dim() - 1))",
     D_ATTN, "masks",
     "the per-sequence mask is tiled over the heads ([m0, m1, m0, m1]) instead of repeated in place ([m0, m0, m1, m1]) while the rows are ordered batch-major: heads of one sequence use another sequence's mask",
     "repeat instead of repeat_interleave for a (batch * heads) layout.",
     REPEAT_VS_INTERLEAVE),
    ("d.lengths_tiled_over_queries", DL,
     "valid_lens = torch.repeat_interleave(valid_lens, shape[1])",
     "valid_lens = valid_lens.repeat(shape[1])",
     D_ATTN, "masks",
     "the per-sequence lengths are tiled over the query rows instead of repeated in place: a query row gets the length of another (sequence, head) row",
     "repeat instead of repeat_interleave when the lengths are spread over the flattened rows.",
     MASK_REPEAT),
    ("d.masked_scores_zero", DL,
     "X = _sequence_mask(X.reshape(-1, shape[-1]), valid_lens, value=-1e6)",
     "X = _sequence_mask(X.reshape(-1, shape[-1]), valid_lens)",
     D_ATTN, "masks",
     "masked scores are set to 0 (the helper's default) instead of a large negative value, so padded keys keep a weight of exp(0) in the softmax",
     "The fill value left to _sequence_mask's default of 0.",
     MASK_FILL_ZERO),
    ("d.keep_mask_polarity", DL,
     "return nn.functional.softmax(X.masked_fill(~valid_lens, -1e6), dim=-1)",
     "return nn.functional.softmax(X.masked_fill(valid_lens, -1e6), dim=-1)",
     D_ATTN, "masks",
     "the boolean mask is applied with the wrong polarity: kept keys are filled and masked keys kept",
     "A keep-mask used as a pad-mask.",
     ""),
    ("d.scale_by_d", DL,
     "scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)",
     "scores = torch.bmm(queries, keys.transpose(1, 2)) / d",
     D_ATTN, "attention scale",
     "the scores are divided by the head width instead of its square root",
     "The sqrt lost in a rewrite of the scale.",
     ""),
    ("d.heads_strided_channels", DL,
     "X = X.reshape(X.shape[0], X.shape[1], self.num_heads, -1)",
     "X = X.reshape(X.shape[0], X.shape[1], -1, self.num_heads).transpose(2, 3)",
     D_ATTN, "head split/merge",
     "the projections are split into heads by taking every H-th channel (channel c to head c mod H) while the merge puts the heads back as contiguous blocks: heads do not correspond to the output projection's columns",
     "The reshape's head and width axes swapped.",
     ""),
    ("d.merge_head_major", DL,
     "X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])",
     "X = X.reshape(self.num_heads, -1, X.shape[1], X.shape[2]).transpose(0, 1)",
     D_ATTN, "head split/merge",
     "the merge reads the (batch * heads) axis as head-major although the split made it batch-major: the heads of different sequences are exchanged",
     "The inverse of transpose_qkv written with the wrong axis order.",
     ""),
    ("d.norm_before_residual", DL,
     "return self.ln(self.dropout(Y) + X)",
     "return self.ln(self.dropout(Y)) + X",
     D_LAYER, "residual/norm placement",
     "the LayerNorm is applied to the sublayer output before the residual add instead of to the sum",
     "A parenthesis moved in AddNorm.",
     ""),
    ("d.ffn_no_activation", DL,
     "return self.dense2(self.relu(self.dense1(X)))",
     "return self.dense2(self.dense1(X))",
     D_LAYER, "feed-forward",
     "the ReLU between the two FFN linears is missing: the FFN is a single linear map",
     "The activation lost when the FFN was inlined.",
     ""),
    ("d.pe_cos_everywhere", DL,
     "P[:, :, 0::2] = torch.sin(X)",
     "P[:, :, 0::2] = torch.cos(X)",
     D_PE, "sinusoidal tables",
     "the even columns of the positional table get the cosine too, so every frequency appears as two identical cosine columns and no sine",
     "A copy-paste of the odd-column line.",
     ""),
    ("d.pe_frequency_exponent", DL,
     "10000, torch.arange(0, num_hiddens, 2, dtype=torch.float64) / num_hiddens)",
     "10000, torch.arange(0, num_hiddens // 2, dtype=torch.float64) / num_hiddens)",
     D_PE, "sinusoidal tables",
     "the table's frequencies use the exponent i/d instead of 2i/d for pair i, so they span only half the intended range of wavelengths",
     "The step of 2 in arange rewritten as a half-length range without doubling.",
     PE_EXPONENT),
    ("d.pe_float32_table", DL,
     "10000, torch.arange(0, num_hiddens, 2, dtype=torch.float64) / num_hiddens)",
     "10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)",
     D_PE, "precision",
     "the table's frequencies are formed in float32 (d2l's own dtype) inside a float64 build: every angle, position times a float32-rounded frequency, carries that rounding, large positions most",
     "d2l's float32 arange kept for the frequency exponents in a float64 build.",
     ""),
    ("d.dropout_in_eval", DL,
     "return self.ln(self.dropout(Y) + X)",
     "return self.ln(nn.functional.dropout(Y, 0.1) + X)",
     D_LAYER, "dropout",
     "the residual dropout is the functional one with its default training=True, so it stays active in evaluation: outputs are random and scaled",
     "nn.Dropout replaced by F.dropout without passing self.training.",
     F_DROPOUT),
    ("d.encoder_blocks_unmasked", DL,
     "X = blk(X, valid_lens)",
     "X = blk(X, None)",
     D_ENC, "masks",
     "the encoder does not pass the mask to its blocks: padded keys are attended in every layer",
     "valid_lens dropped in the stack's loop.",
     ""),
    ("d.causal_diagonal_hidden", DL,
     "keep = keep & torch.ones((num_queries, num_keys), dtype=torch.bool).tril()",
     "keep = keep & torch.ones((num_queries, num_keys), dtype=torch.bool).tril(diagonal=-1)",
     D_ATTN, "masks",
     "the causal mask also hides the diagonal: no query attends its own key and the first attends nothing",
     "An off-by-one in the decoder-style valid lengths (arange(0, L) instead of arange(1, L + 1)).",
     ""),
    ("d.softmax_low_precision", DL,
     "X = X.to(torch.promote_types(X.dtype, torch.float32))",
     "X = X",
     D_ATTN, "precision",
     "in float16 and bfloat16 the masked softmax runs in the 16-bit dtype: the -1e6 fill overflows to -inf in float16 (a fully masked row becomes NaN) and the exponentials are summed in 16 bits",
     "The float32 upcast of the scores removed.",
     ""),
    # ---- flash_vit
    ("v.patch_pixels_channel_last", FV,
     "x = x.permute(0, 2, 4, 1, 3, 5).reshape(B, H // p1, W // p2, C * p1 * p2)",
     "x = x.permute(0, 2, 4, 3, 5, 1).reshape(B, H // p1, W // p2, C * p1 * p2)",
     V_PATCH, "vit patchify",
     "each patch is flattened channel-last ((p1 p2 c)) while the projection's columns are channel-major ((c p1 p2)): pixels meet the wrong weights",
     "The einops pattern's inner order changed to the paper's H x W x C flattening.",
     PATCH_CHANNELS),
    ("v.patch_grid_column_major", FV,
     "x = x.permute(0, 2, 4, 1, 3, 5).reshape(B, H // p1, W // p2, C * p1 * p2)",
     "x = x.permute(0, 4, 2, 1, 3, 5).reshape(B, H // p1, W // p2, C * p1 * p2)",
     V_PATCH, "vit patchify",
     "the patches are ordered column-major over the grid instead of row-major: each patch token sits at the transposed grid position",
     "The grid axes swapped in the rearrange.",
     ""),
    ("v.cls_without_position", FV,
     "x = x + self.pos_embed",
     "x = torch.cat((x[:, :1], x[:, 1:] + self.pos_embed[:, 1:]), dim=1)",
     V_VIT, "vit position embedding",
     "the class token gets no position embedding: only the patch tokens receive their rows",
     "Position embedding added to the patches only.",
     CLS_NO_POS),
    ("v.cls_appended", FV,
     "x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)",
     "x = torch.cat((x, self.cls_token.expand(x.shape[0], -1, -1)), dim=1)",
     V_VIT, "vit class token",
     "the class token is appended after the patches instead of prepended, so the head reads a patch token and the position rows are shifted by one",
     "The concatenation order reversed.",
     ""),
    ("v.pool_last_token", FV,
     "x = x[:, self.num_prefix_tokens:].mean(dim=1) if self.global_pool == \"avg\" else x[:, 0]",
     "x = x[:, self.num_prefix_tokens:].mean(dim=1) if self.global_pool == \"avg\" else x[:, -1]",
     V_VIT, "pooling",
     "the head reads the last token (a patch) instead of the class token",
     "An index slip in forward_head.",
     WRONG_TOKEN_HEAD),
    ("v.qkv_read_per_head", FV,
     "qkv = qkv.reshape(*qkv.shape[:-1], 3, self.num_heads, self.head_dim)  # \"... (three h d) -> ... three h d\"",
     "qkv = qkv.reshape(*qkv.shape[:-1], self.num_heads, 3, self.head_dim).transpose(-3, -2)  # \"... (h three d) -> ... three h d\"",
     V_LAYER, "fused projections",
     "the fused q/k/v output, laid out as three contiguous thirds, is read per head (q, k, v of head 0, then head 1, ...): queries, keys and values are assembled from the wrong channels",
     "GPT-NeoX's head-major reading of a fused projection applied to a thirds-fused Wqkv.",
     QKV_HEAD_MAJOR),
    ("v.scale_by_embed_dim", FV,
     "softmax_scale = 1.0 / math.sqrt(q.shape[-1])",
     "softmax_scale = 1.0 / math.sqrt(self.embed_dim)",
     V_LAYER, "attention scale",
     "the scores are scaled by one over the square root of the model width instead of the head width",
     "d_model used for d_k.",
     SCALE_D_MODEL_VIT),
    ("v.scores_transposed", FV,
     "scores = torch.einsum(\"bthd,bshd->bhts\", q, k * softmax_scale)",
     "scores = torch.einsum(\"bthd,bshd->bhst\", q, k * softmax_scale)",
     V_LAYER, "softmax",
     "the score matrix is written key-major (s, t) and then softmaxed over its last axis: each key's weights over the queries are normalised instead of each query's over the keys",
     "The output subscripts of the einsum swapped.",
     ""),
    ("v.merge_d_major", FV,
     "return self.out_proj(context.reshape(*context.shape[:2], self.embed_dim))  # \"... h d -> ... (h d)\"",
     "return self.out_proj(context.transpose(-2, -1).reshape(*context.shape[:2], self.embed_dim))  # \"... h d -> ... (d h)\"",
     V_LAYER, "head split/merge",
     "the heads are merged as (d h) instead of (h d): the output projection's columns meet interleaved channels of different heads",
     "The rearrange's merge pattern written in the wrong order.",
     ""),
    ("v.residual_stream_normed", FV,
     "return (normed, out) if prenorm else normed",
     "return (normed, normed) if prenorm else normed",
     V_LAYER, "residual/norm placement",
     "the fused op returns the normalised tensor as the residual stream too, so every residual add starts from a normalised stream instead of the raw sum",
     "The prenorm second output taken from the wrong tensor.",
     RESIDUAL_NORMED),
    ("v.final_norm_without_residual", FV,
     "hidden_states, residual, self.norm.weight, self.norm.bias,",
     "hidden_states, None, self.norm.weight, self.norm.bias,",
     V_ENC, "residual/norm placement",
     "the final norm is applied to the last block's MLP output alone, without the residual stream it is to be added to",
     "The residual left out of the last dropout_add_layer_norm.",
     ""),
    ("v.norm2_uses_norm1_params", FV,
     "hidden_states, residual, self.norm2.weight, self.norm2.bias,",
     "hidden_states, residual, self.norm1.weight, self.norm1.bias,",
     V_LAYER, "normalisation",
     "the second norm of each block uses the first norm's gain and shift; the second norm's parameters are unused",
     "A copy-paste of the first fused call.",
     ""),
    ("v.layer_norm_default_eps", FV,
     "normed = F.layer_norm(out, (out.shape[-1],), weight, bias, epsilon)",
     "normed = F.layer_norm(out, (out.shape[-1],), weight, bias)",
     V_LAYER, "normalisation",
     "every norm uses layer_norm's default epsilon 1e-5 instead of the model's 1e-6",
     "The epsilon argument dropped from the written-out fused op.",
     ""),
    ("v.gelu_tanh", FV,
     "self.activation = nn.GELU()",
     "self.activation = nn.GELU(approximate=\"tanh\")",
     V_LAYER, "feed-forward",
     "the MLP uses the tanh approximation of GELU instead of the exact erf GELU",
     "FlashAttention's fused_mlp (gelu_approx) semantics taken for the unfused Mlp.",
     GELU_TANH),
    ("v.padding_polarity", FV,
     "keep = keep & key_padding_mask[:, None, None, :]",
     "keep = keep & ~key_padding_mask[:, None, None, :]",
     V_MASK, "masks",
     "the key-padding mask is inverted: real keys are masked and padded keys kept",
     "flash_attn's key_padding_mask (True = keep) read as a pad-mask.",
     MASK_SIGN),
    ("v.softmax_low_precision", FV,
     "attention = torch.softmax(scores, dim=-1, dtype=torch.promote_types(v.dtype, torch.float32)).to(v.dtype)",
     "attention = torch.softmax(scores, dim=-1, dtype=v.dtype).to(v.dtype)",
     V_LAYER, "precision",
     "in float16 and bfloat16 the softmax is computed in the 16-bit dtype instead of float32",
     "flash_attn's SelfAttention softmax(dtype=v.dtype) kept in a half-precision run.",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.n_rotate_half_stack", NX,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.stack((-x2, x1), dim=-2).flatten(-2)",
     N_ATTN,
     "stacking the two halves on a new axis before the last and flattening gives [-x2, x1] in the same order as the concatenation"),
    ("control.n_norm_factor_sqrt", NX,
     "self.norm_factor = self.head_size ** -0.5",
     "self.norm_factor = 1.0 / math.sqrt(self.head_size)",
     N_ATTN,
     "the same scale written with math.sqrt (equal to the last bit)"),
    ("control.n_softmax_by_hand", NX,
     "attn_weights = F.softmax(attn_scores, dim=-1).to(value.dtype)",
     "attn_weights = (lambda e: e / e.sum(dim=-1, keepdim=True))(torch.exp(attn_scores - attn_scores.amax(dim=-1, keepdim=True))).to(value.dtype)",
     N_ATTN,
     "the max-subtracted softmax written out; a row whose scores are all finfo.min gives exp(0) everywhere and the same uniform row"),
    ("control.d_scale_power", DL,
     "scores = torch.bmm(queries, keys.transpose(1, 2)) / math.sqrt(d)",
     "scores = torch.bmm(queries, keys.transpose(1, 2)) * d ** -0.5",
     D_ATTN,
     "multiplying by d ** -0.5 is dividing by sqrt(d), to rounding"),
    ("control.d_merge_unflatten", DL,
     "X = X.reshape(-1, self.num_heads, X.shape[1], X.shape[2])",
     "X = X.unflatten(0, (-1, self.num_heads))",
     D_ATTN,
     "unflatten splits the (batch * heads) axis batch-major exactly as the reshape does"),
    ("control.d_relu_clamp", DL,
     "return self.dense2(self.relu(self.dense1(X)))",
     "return self.dense2(torch.clamp(self.dense1(X), min=0))",
     D_LAYER,
     "clamping at 0 is the ReLU"),
    ("control.v_unbind_by_index", FV,
     "q, k, v = qkv.unbind(dim=2)",
     "q, k, v = qkv[..., 0, :, :], qkv[..., 1, :, :], qkv[..., 2, :, :]",
     V_LAYER,
     "indexing the 'three' axis (third from the end) takes the same q, k, v slices as unbind(dim=2)"),
    ("control.v_padding_mask_bool", FV,
     "keep = keep & key_padding_mask[:, None, None, :]",
     "keep = keep & key_padding_mask.bool()[:, None, None, :]",
     V_MASK,
     "the keep-mask arrives boolean; .bool() changes nothing (and would turn a 0/1 mask into the same keep-mask)"),
]

# Phase 2: bug id -> (expected codes, class without a code); empty until the phase-1 freeze.
PHASE_2: dict[str, tuple[list[str], str]] = {
    # gptneox_decoder
    "n.qkv_split_as_thirds": (["attention.qkv_order_wrong"], ""),
    "n.rope_freqs_interleaved": (["rope.table_layout_mismatch"], ""),
    "n.rope_frequency_exponent": (["positional.frequency_wrong"], ""),
    "n.rotary_pct_quarter": ([], "partial rotary: only a fraction (the first quarter) of each head's query and key channels is rotated where the model rotates all of them; the other channels carry no position"),
    "n.scale_by_hidden_size": (["attention.scale_wrong"], ""),
    "n.causal_diagonal_hidden": (["mask.causal_diagonal_hidden", "cache.causal_off_by_one"], ""),
    "n.causal_mask_ignores_cache": (["cache.causal_top_left", "mask.causal_alignment_top_left"], ""),
    "n.cache_keeps_last_call": (["cache.ignored"], ""),
    "n.padding_polarity": (["mask.polarity_inverted"], ""),
    "n.padding_dropped_in_steps": (["cache.padding_dropped_in_steps"], ""),
    "n.parallel_residual": (["blocks.branch_from_layer_input"], ""),
    "n.final_norm_skipped": (["blocks.final_norm_missing"], ""),
    "n.gelu_tanh": (["ffn.activation_gelu_tanh"], ""),
    "n.logits_from_input_embedding": (["model.head_tied_to_embedding", "params.read_from_other_module"], ""),
    "n.derived_positions_not_offset": (["cache.rope_offset_wrong"], ""),
    "n.rope_angles_low_precision": (["numerics.rope_angles_low_precision"], ""),
    # d2l_encoder
    "d.valid_lens_tiled_over_heads": (["batch.rows_interact", "batch.padded_rows_differ"], ""),
    "d.lengths_tiled_over_queries": (["batch.rows_interact", "batch.padded_rows_differ"], ""),
    "d.masked_scores_zero": (["mask.added_as_bias"], ""),
    "d.keep_mask_polarity": (["mask.polarity_inverted"], ""),
    "d.scale_by_d": (["attention.scale_wrong"], ""),
    "d.heads_strided_channels": (["attention.heads_split_wrong_order"], ""),
    "d.merge_head_major": (["attention.heads_merged_wrong_order", "batch.rows_interact"], ""),
    "d.norm_before_residual": (["blocks.norm_on_branch"], ""),
    "d.ffn_no_activation": (["ffn.activation_wrong"], ""),
    "d.pe_cos_everywhere": (["positional.pair_function_repeated"], ""),
    "d.pe_frequency_exponent": (["positional.frequency_wrong"], ""),
    "d.pe_float32_table": (["numerics.float32_island", "numerics.float64_precision_lost"], ""),
    "d.dropout_in_eval": (["dropout.active_in_eval"], ""),
    "d.encoder_blocks_unmasked": (["mask.ignored"], ""),
    "d.causal_diagonal_hidden": (["mask.causal_diagonal_hidden"], ""),
    "d.softmax_low_precision": (["numerics.softmax_low_precision", "numerics.fill_value_overflow", "numerics.overflow", "mask.fully_masked_rows_nan"], ""),
    # flash_vit
    "v.patch_pixels_channel_last": (["vit.patch_flatten_order"], ""),
    "v.patch_grid_column_major": (["vit.patch_order"], ""),
    "v.cls_without_position": (["vit.cls_pos_embed_missing"], ""),
    "v.cls_appended": (["vit.pooling_wrong_token", "vit.pos_embed_transformed"], ""),
    "v.pool_last_token": (["vit.pooling_wrong_token"], ""),
    "v.qkv_read_per_head": (["attention.qkv_order_wrong"], ""),
    "v.scale_by_embed_dim": (["attention.scale_wrong"], ""),
    "v.scores_transposed": (["attention.softmax_axis_wrong"], ""),
    "v.merge_d_major": (["attention.heads_merged_wrong_order"], ""),
    "v.residual_stream_normed": (["blocks.residual_after_norm"], ""),
    "v.final_norm_without_residual": (["blocks.residual_missing"], ""),
    "v.norm2_uses_norm1_params": (["params.read_from_other_module"], ""),
    "v.layer_norm_default_eps": (["layer_norm.eps_wrong"], ""),
    "v.gelu_tanh": (["ffn.activation_gelu_tanh"], ""),
    "v.padding_polarity": (["mask.polarity_inverted"], ""),
    "v.softmax_low_precision": (["numerics.softmax_low_precision"], ""),
}


def _locate(impl: str, original: str, replacement: str, row_id: str) -> tuple[int, str, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == original]
    if len(hits) != 1:
        raise ValueError(f"{row_id}: {original!r} occurs {len(hits)} times in {impl}.py")
    line = lines[hits[0]]
    indent = line[: len(line) - len(line.lstrip())]
    return hits[0] + 1, line, indent + replacement


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bugs = []
    for bug_id, impl, original, replacement, components, family, cls, description, report in BUGS:
        line, full, patched = _locate(impl, original, replacement, bug_id)
        codes, without = PHASE_2.get(bug_id, ([], ""))
        bugs.append({
            "id": bug_id,
            "impl": impl,
            "file": f"{FOLDER}/{impl}.py",
            "line": line,
            "original": full,
            "replacement": patched,
            "components": components,
            "family": family,
            "class": cls,
            "description": description,
            "public_report": report,
            "expected_codes": list(codes),
            "class_without_code": without,
        })  # fmt: skip
    controls = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        line, full, patched = _locate(impl, original, replacement, control_id)
        controls.append({
            "id": control_id,
            "impl": impl,
            "file": f"{FOLDER}/{impl}.py",
            "line": line,
            "original": full,
            "replacement": patched,
            "components": components,
            "why_correct": why,
        })  # fmt: skip
    return bugs, controls


def main() -> None:
    unknown = sorted(set(PHASE_2) - {b[0] for b in BUGS})
    if unknown:
        raise ValueError(f"PHASE_2 names unknown bugs: {unknown}")
    bugs, controls = build()
    for name, rows in (("bugs.json", bugs), ("controls.json", controls)):
        (HERE / name).write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
