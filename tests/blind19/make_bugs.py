# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the nineteenth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind19/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind19"

ML = "meta_llama"
XT = "xtransformers_encoder"
AV = "mae_vit"
M_NORM = ["rms_norm", "decoder_block", "causal_lm"]
M_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
M_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
M_BLOCK = ["decoder_block", "causal_lm"]
M_LM = ["causal_lm"]
X_SN = ["scale_norm"]
X_ATTN = ["mha", "encoder_layer", "encoder"]
X_LAYER = ["encoder_layer", "encoder"]
X_ENC = ["encoder"]
X_MHA = ["mha"]
A_PATCH = ["patch_embed", "vit"]
A_LAYER = ["encoder_layer", "encoder", "vit"]
A_STACK = ["encoder", "vit"]
A_VIT = ["vit"]

MASK_START_POS = "https://github.com/meta-llama/llama/pull/177"
MASK_SQUARE_IN_CACHE = "https://github.com/meta-llama/llama/issues/899"
GQA_TILED = "https://github.com/onnx/onnx/pull/7274"
ROPE_THETA = "https://github.com/google-deepmind/penzai/pull/102"
RMS_EPS = "https://github.com/meta-llama/llama/issues/771"
FP16_FILL = "https://github.com/facebookresearch/fairseq/issues/3575"
CAUSAL_TOP_LEFT = "https://github.com/pytorch/pytorch/issues/103082"
SCALE_MODEL_WIDTH = "https://github.com/lucidrains/vit-pytorch/issues/65"
MERGE_NO_PERMUTE = "https://github.com/jsbaan/transformer-from-scratch/pull/6"
SPLIT_NO_PERMUTE = "https://github.com/reczoo/FuxiCTR/issues/30"
F_DROPOUT = "https://github.com/BogiHsu/Tacotron2-PyTorch/issues/8"
MEAN_WITH_CLS = "https://github.com/lucidrains/vit-pytorch/issues/226"
TOKENS_RESHAPED = "https://github.com/tianrun-chen/SAM-Adapter-PyTorch/issues/134"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- meta_llama
    ("m.block_norm_eps_default", ML,
     "self.attention_norm = RMSNorm(args.dim, eps=args.norm_eps)",
     "self.attention_norm = RMSNorm(args.dim)",
     M_BLOCK, "normalisation",
     "the attention sublayer's RMSNorm adds 1e-6 under the square root instead of the declared 1e-5: a wrong epsilon",
     "A refactor drops the `eps=args.norm_eps` keyword of the attention norm, so it falls back to RMSNorm's default 1e-6 (Llama 1's value) while the FFN norm keeps Llama 2's 1e-5.",
     RMS_EPS),
    ("m.rope_table_float32", ML,
     "real = torch.float64 if dtype == torch.float64 else torch.float32",
     "real = torch.float32",
     M_ATTN, "precision",
     "the rotary angles and their cos/sin (the complex table) are computed in float32 even in a float64 model, so queries and keys are rotated in float32 there: float64 precision lost in an undeclared float32 step",
     "Meta's `precompute_freqs_cis` builds a complex64 table; a port that keeps it for every dtype rotates a float64 model's queries and keys through float32.",
     ""),
    ("m.rms_statistics_in_half", ML,
     "output = self._norm(x.float()).type_as(x)",
     "output = self._norm(x).type_as(x)",
     M_NORM, "precision",
     "the RMSNorm statistics (the mean of squares and its reciprocal square root) are computed in the 16-bit input dtype instead of float32, so the squares of large inputs overflow and the statistics are rounded to half precision",
     "An optimisation removes Meta's `.float()` before `_norm` to save a cast.",
     ""),
    ("m.rope_queries_conjugate", ML,
     "xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)",
     "xq_out = torch.view_as_real(xq_ * freqs_cis.conj()).flatten(3)",
     M_ATTN, "rope",
     "queries are rotated by minus their angle while keys are rotated by plus theirs, so a score depends on the sum of the two positions, not on their difference",
     "A copy-paste from an inverse-rotation helper multiplies the queries by the conjugate table.",
     ""),
    ("m.rope_theta_llama3", ML,
     "rope_theta: float = 10000.0",
     "rope_theta: float = 500000.0",
     M_ATTN, "rope",
     "the rotary frequencies use base 500000 instead of the declared 10000, so every pair rotates at the wrong frequency",
     "A Llama-3 default pasted into a Llama-2 port: the RoPE base changes from 10000 to 500000.",
     ROPE_THETA),
    ("m.cache_rope_not_offset", ML,
     "freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]",
     "freqs_cis = self.freqs_cis[:seqlen]",
     M_LM, "kv cache",
     "in cached decoding the new tokens are rotated at positions 0..n-1 of the call instead of their positions after the cached tokens",
     "The model slices the rotary table from 0 for every call, forgetting `start_pos`; a full forward is unchanged, every cached step is rotated at the wrong position.",
     ""),
    ("m.cache_written_at_zero", ML,
     "self.cache_k[:bsz, start_pos : start_pos + seqlen] = xk",
     "self.cache_k[:bsz, :seqlen] = xk",
     M_ATTN, "kv cache",
     "in cached decoding the new keys overwrite the first cache slots instead of being stored after the cached ones, so later tokens read stale or missing keys",
     "The key cache is written at index 0 on every call (`start_pos` dropped from the slice) while the value cache is written correctly.",
     ""),
    ("m.mask_triu_start_pos", ML,
     "mask = torch.triu(mask, diagonal=1)",
     "mask = torch.triu(mask, diagonal=start_pos + 1)",
     M_ATTN, "masks",
     "when a chunk of several tokens is fed on a non-empty cache, the chunk's own causal triangle is shifted by the cache length, so tokens of the chunk see later tokens of the same chunk (future leak in chunked decoding)",
     "The Llama-1 form `triu(mask, diagonal=start_pos + 1)` kept after the `hstack` widening was added: the offset is applied twice.",
     MASK_START_POS),
    ("m.mask_not_widened", ML,
     "mask = torch.hstack([torch.zeros((seqlen, start_pos), device=h.device), mask]).type_as(h)",
     "mask = mask.type_as(h)",
     M_ATTN, "kv cache",
     "a chunk of several new tokens on a non-empty cache gets a square (n, n) causal mask that does not cover the cached keys, so the scores of a chunked step cannot be masked (shape error)",
     "The `hstack` with zeros for the cached keys is dropped; the square mask is added to the (n, T) scores.",
     MASK_SQUARE_IN_CACHE),
    ("m.mask_diagonal_hidden", ML,
     "mask = torch.triu(mask, diagonal=1)",
     "mask = torch.triu(mask, diagonal=0)",
     M_ATTN, "masks",
     "the causal mask also hides the diagonal, so a token cannot attend to itself (and the first token has no key at all)",
     "An off-by-one in the `triu` diagonal.",
     ""),
    ("m.padding_polarity", ML,
     "pad = torch.zeros(key_padding.shape, dtype=h.dtype).masked_fill(~key_padding, torch.finfo(h.dtype).min)",
     "pad = torch.zeros(key_padding.shape, dtype=h.dtype).masked_fill(key_padding, torch.finfo(h.dtype).min)",
     M_ATTN, "masks",
     "the key-padding keep-mask is read inverted: real tokens are masked and padding is attended",
     "The keep-mask (True = token) is taken for a pad mask (True = pad) when building the additive padding bias.",
     ""),
    ("m.repeat_kv_tiled", ML,
     ".reshape(bs, slen, n_kv_heads * n_rep, head_dim)",
     ".transpose(2, 3).reshape(bs, slen, n_kv_heads * n_rep, head_dim)",
     M_ATTN, "grouped-query attention",
     "the key/value heads are repeated as whole blocks (kv0, kv1, kv0, kv1) instead of each one n_rep times in a row (kv0, kv0, kv1, kv1), so query heads are paired with the wrong key/value head",
     "`repeat_kv` rewritten as a tile (`repeat`) instead of `repeat_interleave` along the head axis.",
     GQA_TILED),
    ("m.scale_model_width", ML,
     "scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)",
     "scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.n_local_heads * self.head_dim)",
     M_ATTN, "attention scale",
     "the attention scores are divided by the square root of the model width instead of the head width",
     "The score scale written with the model dimension (`n_heads * head_dim`) instead of `head_dim`.",
     ""),
    ("m.swiglu_gate_on_w3", ML,
     "return self.w2(F.silu(self.w1(x)) * self.w3(x))",
     "return self.w2(F.silu(self.w3(x)) * self.w1(x))",
     M_FFN, "feed-forward",
     "the SiLU is applied to the up projection and the gate projection is the linear factor: gate and up exchanged",
     "A checkpoint conversion swaps `w1` (gate) and `w3` (up), so SiLU acts on the wrong projection.",
     ""),
    ("m.ffn_residual_from_norm", ML,
     "out = h + self.feed_forward(self.ffn_norm(h))",
     "out = self.ffn_norm(h) + self.feed_forward(self.ffn_norm(h))",
     M_BLOCK, "residual/norm placement",
     "the FFN sublayer's residual adds the normalised input instead of the un-normalised stream",
     "A refactor that names `ffn_norm(h)` once reuses it for the residual branch too.",
     ""),
    ("m.output_reads_embedding", ML,
     "output = _up(self.output(h))",
     "output = _up(F.linear(h, self.tok_embeddings.weight))",
     M_LM, "weight tying",
     "the logits are computed with the token-embedding matrix although the model's output projection is a separate (untied) matrix",
     "A port from a tied model (GPT-2 style) computes the logits with the embedding table, leaving `output` unused.",
     ""),
    ("m.embedding_scaled", ML,
     "h = self.tok_embeddings(tokens)",
     "h = self.tok_embeddings(tokens) * math.sqrt(self.params.dim)",
     M_LM, "embeddings",
     "the token embeddings are multiplied by sqrt(d_model) although the model declares no embedding scale",
     "A Gemma/2017-style embedding scale pasted into a Llama port.",
     ""),
    # ---- xtransformers_encoder
    ("x.scalenorm_rms", XT,
     "norm = torch.norm(x, dim = -1, keepdim = True)",
     "norm = torch.norm(x, dim = -1, keepdim = True) * x.shape[-1] ** -0.5",
     X_SN, "normalisation",
     "ScaleNorm divides by the root mean square instead of the L2 norm, so every output is sqrt(d) times too large",
     "x-transformers' own `* self.scale` (dim ** -0.5) kept while the gain was converted to the paper's sqrt(d) initialisation: the sqrt(d) factor counted twice.",
     ""),
    ("x.scalenorm_eps_added", XT,
     "return x / norm.clamp(min = self.eps) * self.g",
     "return x / (norm + self.eps) * self.g",
     X_SN, "normalisation",
     "ScaleNorm adds epsilon to the norm instead of clamping the norm from below at epsilon",
     "The clamp replaced by the LayerNorm-style `norm + eps`.",
     ""),
    ("x.mask_polarity", XT,
     "dots.masked_fill_(~input_mask, mask_value)",
     "dots.masked_fill_(input_mask, mask_value)",
     X_ATTN, "masks",
     "the key-padding keep-mask is applied inverted: real keys are masked and padded keys attended",
     "The `~` dropped in a port from a pad-mask convention (True = pad) to x-transformers' keep-mask (True = keep).",
     ""),
    ("x.mask_value_1e9", XT,
     "return -torch.finfo(tensor.dtype).max",
     "return -1e9",
     X_ATTN, "precision",
     "the masking fill value is a fixed -1e9, which does not fit in float16: filling a float16 score tensor with it fails",
     "`max_neg_value` replaced by the tutorial constant -1e9.",
     FP16_FILL),
    ("x.causal_top_left", XT,
     "causal_mask = torch.ones((i, j), dtype = torch.bool, device = dots.device).triu(j - i + 1)",
     "causal_mask = torch.ones((i, j), dtype = torch.bool, device = dots.device).triu(1)",
     X_MHA, "masks",
     "when the query block is shorter than the key block, the causal triangle is aligned at the top-left instead of the bottom-right the implementation declares, so query i sees keys 0..i instead of 0..i + (Lk - Lq)",
     "The `j - i` offset of x-transformers' causal mask dropped (the square-mask form).",
     CAUSAL_TOP_LEFT),
    ("x.causal_diagonal_hidden", XT,
     "causal_mask = torch.ones((i, j), dtype = torch.bool, device = dots.device).triu(j - i + 1)",
     "causal_mask = torch.ones((i, j), dtype = torch.bool, device = dots.device).triu(j - i)",
     X_ATTN, "masks",
     "the causal mask also hides the diagonal, so a query cannot attend to its own key",
     "An off-by-one in the `triu` offset.",
     ""),
    ("x.mask_on_queries", XT,
     "input_mask = input_mask[:, None, None, :]",
     "input_mask = input_mask[:, None, :, None]",
     X_ATTN, "masks",
     "the key-padding mask is broadcast along the query axis instead of the key axis: padded query rows are masked out entirely while padded keys stay visible",
     "The two singleton axes of the mask broadcast swapped.",
     ""),
    ("x.scale_model_width", XT,
     "self.scale = dim_head ** -0.5",
     "self.scale = dim ** -0.5",
     X_ATTN, "attention scale",
     "the attention scores are scaled by 1/sqrt(model width) instead of 1/sqrt(head width)",
     "The scale written with `dim` instead of `dim_head`, as early vit-pytorch did.",
     SCALE_MODEL_WIDTH),
    ("x.split_heads_no_permute", XT,
     "q, k, v = map(lambda t: t.reshape(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3), (q, k, v))",
     "q, k, v = map(lambda t: t.reshape(t.shape[0], h, t.shape[1], -1), (q, k, v))",
     X_ATTN, "head split/merge",
     "the heads are split by reshaping (b, n, h*d) straight to (b, h, n, d) without moving the head axis, so each 'head' mixes positions and channels of different tokens",
     "einops' `rearrange('b n (h d) -> b h n d')` replaced by a single reshape.",
     SPLIT_NO_PERMUTE),
    ("x.merge_heads_no_permute", XT,
     "out = out.permute(0, 2, 1, 3).reshape(out.shape[0], out.shape[2], -1)",
     "out = out.reshape(out.shape[0], out.shape[2], -1)",
     X_ATTN, "head split/merge",
     "the heads are merged by reshaping (b, h, n, d) straight to (b, n, h*d) without moving the head axis back, so token rows mix several tokens of one head",
     "einops' `rearrange('b h n d -> b n (h d)')` replaced by a single reshape.",
     MERGE_NO_PERMUTE),
    ("x.softmax_over_queries", XT,
     "attn = dots.softmax(dim = -1)",
     "attn = dots.softmax(dim = -2)",
     X_ATTN, "softmax",
     "the attention softmax normalises over the queries instead of over the keys",
     "A wrong axis in the softmax after a layout change.",
     ""),
    ("x.gelu_tanh", XT,
     "project_in = nn.Sequential(nn.Linear(dim, inner_dim), nn.GELU())",
     "project_in = nn.Sequential(nn.Linear(dim, inner_dim), nn.GELU(approximate = 'tanh'))",
     X_LAYER, "feed-forward",
     "the FFN uses the tanh approximation of GELU instead of the exact GELU",
     "A port from a GPT-2 style block takes its `gelu_new`.",
     ""),
    ("x.sublayer_norms_skipped", XT,
     "self.pre_norm = True",
     "self.pre_norm = False",
     X_LAYER, "residual/norm placement",
     "the sublayers' norms are never applied (neither before the sublayer nor after the residual add)",
     "The pre-norm flag turned off without the post-norm branch x-transformers has, so no layer norm runs inside the layers.",
     ""),
    ("x.residual_from_norm", XT,
     "x = norm(x)",
     "x = residual = norm(x)",
     X_LAYER, "residual/norm placement",
     "each sublayer's residual adds the normalised input instead of the un-normalised stream",
     "The residual taken after the norm in a refactor of the layer loop.",
     ""),
    ("x.final_norm_dropped", XT,
     "x = self.final_norm(x)",
     "return x  # the final norm left to the caller",
     X_ENC, "residual/norm placement",
     "the pre-norm stack returns without its final norm",
     "The encoder returns before `final_norm`, expecting the wrapper to normalise.",
     ""),
    ("x.attention_dropout_functional", XT,
     "attn = self.dropout(attn)",
     "attn = F.dropout(attn, p = 0.1)",
     X_ATTN, "dropout",
     "dropout on the attention weights stays active in evaluation mode (functional dropout with its training flag left at True)",
     "The dropout module replaced by `F.dropout` without `training = self.training`.",
     F_DROPOUT),
    ("x.keys_from_queries", XT,
     "k = self.to_k(kv_input)",
     "k = self.to_k(x)",
     X_MHA, "attention inputs",
     "the keys are projected from the query input instead of the key/context input",
     "A copy-paste of the query line for the keys; self-attention is unchanged, attention over another sequence is wrong.",
     ""),
    # ---- mae_vit
    ("a.patch_tokens_reshaped", AV,
     "x = self.proj(x).flatten(2).transpose(1, 2)  # BCHW -> BNC",
     "x = self.proj(x).flatten(2).reshape(B, -1, self.proj.out_channels)  # BCHW -> BNC",
     A_PATCH, "vit patchify",
     "the (B, D, N) convolution output is reshaped to (B, N, D) instead of transposed, so each token holds values of several patches and channels",
     "`transpose(1, 2)` replaced by a reshape to the same shape.",
     TOKENS_RESHAPED),
    ("a.patch_grid_column_major", AV,
     "x = self.proj(x).flatten(2).transpose(1, 2)  # BCHW -> BNC",
     "x = self.proj(x).transpose(2, 3).flatten(2).transpose(1, 2)  # BCHW -> BNC",
     A_PATCH, "vit patchify",
     "the patch grid is flattened column by column instead of row by row, so the tokens come in the wrong order",
     "An (H, W) / (W, H) confusion when flattening the grid.",
     ""),
    ("a.qkv_q_k_swapped", AV,
     "q, k, v = qkv[0], qkv[1], qkv[2]",
     "k, q, v = qkv[0], qkv[1], qkv[2]",
     A_LAYER, "fused projections",
     "the fused qkv projection's first third is used as keys and the second as queries: queries and keys exchanged",
     "A checkpoint conversion that packs the fused weight as (k, q, v).",
     ""),
    ("a.qkv_per_head_layout", AV,
     "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)",
     "qkv = self.qkv(x).reshape(B, N, self.num_heads, 3, C // self.num_heads).permute(3, 0, 2, 1, 4)",
     A_LAYER, "layouts",
     "the fused qkv output is split as if its columns were grouped per head (q, k, v of head 0, then head 1, ...) instead of q | k | v blocks",
     "A Megatron-style per-head qkv layout read from a timm-style fused weight.",
     ""),
    ("a.heads_and_tokens_swapped", AV,
     "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)",
     "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 1, 3, 4)",
     A_LAYER, "head split/merge",
     "after the split the token axis and the head axis are not exchanged, so attention runs across heads within a token instead of across tokens within a head",
     "A wrong `permute` order after reshaping the fused qkv.",
     ""),
    ("a.merge_heads_no_transpose", AV,
     "x = (attn @ v).transpose(1, 2).reshape(B, N, C)",
     "x = (attn @ v).reshape(B, N, C)",
     A_LAYER, "head split/merge",
     "the heads are merged by reshaping (B, h, N, d) straight to (B, N, C) without moving the head axis back",
     "The `transpose(1, 2)` before the merge dropped.",
     MERGE_NO_PERMUTE),
    ("a.cls_without_position", AV,
     "x = x + self.pos_embed",
     "x = torch.cat((x[:, :1], x[:, 1:] + self.pos_embed[:, 1:]), dim=1)",
     A_VIT, "vit position embedding",
     "the class token gets no position embedding (only the patch tokens get theirs)",
     "The position table added to the patch tokens only, as in models that add positions before prepending the class token.",
     ""),
    ("a.cls_appended", AV,
     "x = torch.cat((cls_tokens, x), dim=1)",
     "x = torch.cat((x, cls_tokens), dim=1)",
     A_VIT, "vit class token",
     "the class token is appended after the patch tokens instead of prepended, so every token is at another position and the pooling drops a patch token and keeps the class token",
     "The concatenation order reversed.",
     ""),
    ("a.mean_pool_with_cls", AV,
     "x = x[:, 1:, :]  # without the class token",
     "x = x[:, :, :]  # every token, the class token too",
     A_VIT, "pooling",
     "the global average pool includes the class token instead of averaging the patch tokens only",
     "The class token not sliced off before the mean.",
     MEAN_WITH_CLS),
    ("a.pool_first_token", AV,
     "outcome = self.fc_norm(x).mean(dim=1)",
     "outcome = self.fc_norm(x)[:, 0]",
     A_VIT, "pooling",
     "the representation is the first patch token instead of the mean of the patch tokens",
     "The class-token branch's `[:, 0]` applied to the sliced tokens of the global-pool branch.",
     ""),
    ("a.mlp_relu", AV,
     "self.act = act_layer()",
     "self.act = nn.ReLU()",
     A_LAYER, "feed-forward",
     "the MLP uses ReLU instead of the exact GELU",
     "The activation hard-coded to ReLU in a refactor of `Mlp`.",
     ""),
    ("a.layer_norm_eps_default", AV,
     "norm_layer=partial(nn.LayerNorm, eps=1e-6), global_pool=True):",
     "norm_layer=nn.LayerNorm, global_pool=True):",
     A_STACK, "normalisation",
     "the LayerNorms use epsilon 1e-5 instead of the declared 1e-6",
     "The `partial(..., eps=1e-6)` dropped: `nn.LayerNorm`'s default 1e-5.",
     ""),
    ("a.pos_dropout_functional", AV,
     "x = self.pos_drop(x)",
     "x = nn.functional.dropout(x, p=0.1)",
     A_VIT, "dropout",
     "dropout after the position embedding stays active in evaluation mode",
     "The module replaced by functional dropout without `training=self.training`.",
     F_DROPOUT),
    ("a.attention_residual_from_norm", AV,
     "x = x + self.drop_path(self.attn(self.norm1(x), mask))",
     "x = self.norm1(x) + self.drop_path(self.attn(self.norm1(x), mask))",
     A_LAYER, "residual/norm placement",
     "the attention sublayer's residual adds the normalised input instead of the un-normalised stream",
     "The residual written from the normed tensor.",
     ""),
    ("a.mlp_post_norm", AV,
     "x = x + self.drop_path(self.mlp(self.norm2(x)))",
     "x = self.norm2(x + self.drop_path(self.mlp(x)))",
     A_LAYER, "residual/norm placement",
     "the MLP sublayer is post-norm (norm after the residual add) while the attention sublayer is pre-norm",
     "A line copied from a post-LN (BERT-style) block.",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.silu_by_sigmoid", ML,
     "return self.w2(F.silu(self.w1(x)) * self.w3(x))",
     "return self.w2(self.w1(x) * torch.sigmoid(self.w1(x)) * self.w3(x))",
     M_FFN, "SiLU(z) = z * sigmoid(z); the gate is the same projection."),
    ("control.scale_by_reciprocal", ML,
     "scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(self.head_dim)",
     "scores = torch.matmul(xq, keys.transpose(2, 3)) * self.head_dim ** -0.5",
     M_ATTN, "Dividing by sqrt(d) and multiplying by d ** -0.5 are the same scale."),
    ("control.repeat_kv_unsqueeze", ML,
     "x[:, :, :, None, :]",
     "x.unsqueeze(3)",
     M_ATTN, "`x[:, :, :, None, :]` and `x.unsqueeze(3)` insert the same axis."),
    ("control.scalenorm_linalg", XT,
     "norm = torch.norm(x, dim = -1, keepdim = True)",
     "norm = torch.linalg.vector_norm(x, dim = -1, keepdim = True)",
     X_SN, "`torch.linalg.vector_norm` is the L2 norm `torch.norm` computes (its documented replacement)."),
    ("control.split_heads_view_transpose", XT,
     "q, k, v = map(lambda t: t.reshape(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3), (q, k, v))",
     "q, k, v = map(lambda t: t.view(t.shape[0], t.shape[1], h, -1).transpose(1, 2), (q, k, v))",
     X_ATTN, "view + transpose(1, 2) is the same split as reshape + permute(0, 2, 1, 3)."),
    ("control.scores_by_matmul", XT,
     "dots = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale",
     "dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale",
     X_ATTN, "The einsum is q @ k^T per batch and head."),
    ("control.patch_tokens_permute", AV,
     "x = self.proj(x).flatten(2).transpose(1, 2)  # BCHW -> BNC",
     "x = self.proj(x).permute(0, 2, 3, 1).reshape(B, -1, self.proj.out_channels)  # BCHW -> BNC",
     A_PATCH, "Moving channels last and flattening the grid row-major gives the same (B, N, D) tokens."),
    ("control.qkv_unbind", AV,
     "q, k, v = qkv[0], qkv[1], qkv[2]",
     "q, k, v = qkv.unbind(0)",
     A_LAYER, "`unbind(0)` returns qkv[0], qkv[1], qkv[2] (timm's later form)."),
]

# Phase 2: bug id -> (expected codes, class without a code). Empty until phase 2.
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, original: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == original]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {original!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line[: len(line) - len(line.lstrip())]


def _row(impl: str, original: str, replacement: str) -> dict[str, Any]:
    number, indent = _locate(impl, original)
    return {
        "impl": impl,
        "file": f"{FOLDER}/{impl}.py",
        "line": number,
        "original": indent + original,
        "replacement": indent + replacement,
    }


def main() -> None:
    bugs = []
    for bid, impl, orig, repl, comps, family, klass, desc, report in BUGS:
        codes, without = PHASE_2.get(bid, ([], ""))
        bugs.append({
            "id": bid, **_row(impl, orig, repl), "components": comps, "family": family,
            "class": klass, "description": desc, "public_report": report,
            "expected_codes": codes, "class_without_code": without,
        })
    controls = []
    for cid, impl, orig, repl, comps, why in CONTROLS:
        controls.append({"id": cid, **_row(impl, orig, repl), "components": comps, "why_correct": why})
    (HERE / "bugs.json").write_text(json.dumps(bugs, indent=1) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(controls, indent=1) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
