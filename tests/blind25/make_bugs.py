# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twenty-fifth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind25/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind25"

TG = "tinygrad_llama"
KH = "kerashub_encoder"
SV = "sequential_vit"
TG_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
TG_NORM = ["rms_norm", "decoder_block", "causal_lm"]
TG_FFN = ["gated_ffn", "decoder_block", "causal_lm"]
TG_BLOCK = ["decoder_block", "causal_lm"]
TG_LM = ["causal_lm"]
K_MHA = ["mha", "encoder_layer", "encoder"]
K_ONLY_MHA = ["mha"]
K_LAYER = ["encoder_layer", "encoder"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_MASK = ["encoder_layer", "encoder"]
V_VIT = ["vit"]

ZUPPICHINI_SCALE_AFTER_SOFTMAX = "https://github.com/FrancescoSaverioZuppichini/ViT/issues/5"
ZUPPICHINI_SCALE_EMB_SIZE = "https://github.com/FrancescoSaverioZuppichini/ViT/issues/1"
VIT_SOFTMAX_AXIS = "https://github.com/nerminnuraydogan/vision-transformer/issues/1"
SCALE_BY_EMBED_SIZE = "https://github.com/aladdinpersson/Machine-Learning-Collection/issues/65"
KERAS_MASK_POLARITY = "https://github.com/tensorflow/text/pull/894"
GQA_TILE_ORDER = "https://github.com/onnx/onnx/pull/7274"
RMS_EPS_PLACEMENT = "https://github.com/EleutherAI/gpt-neox/pull/1342"
RMS_VARIANCE = "https://github.com/keras-team/keras/pull/22393"
KERAS_HUB_EPS_NOT_PASSED = "https://github.com/keras-team/keras-hub/pull/133"
MEAN_POOL_WITH_CLS = "https://github.com/lucidrains/vit-pytorch/issues/226"
PRE_LN_RESIDUAL_COPY = "https://github.com/pytorch/pytorch/issues/61165"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- tinygrad_llama
    ("tg.rope_sin_negated", TG,
     "return torch.stack([torch.cos(freqs), torch.sin(freqs)], dim=-1).reshape(1, end, 1, dim // 2, 2).to(dtype)",
     "return torch.stack([torch.cos(freqs), -torch.sin(freqs)], dim=-1).reshape(1, end, 1, dim // 2, 2).to(dtype)",
     TG_ATTN, "rope",
     "Each pair of query and key channels is rotated by minus its angle: the scores still depend only on the distance between tokens, but with the sign of the distance reversed.",
     "A port that builds the (cos, sin) table for a complex multiplication written as multiplication by the conjugate negates the sine, so every rotation turns the other way.",
     ""),
    ("tg.rope_freqs_step_one", TG,
     "freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[:(dim // 2)] / dim))",
     "freqs = 1.0 / (theta ** (torch.arange(0, dim, 1, dtype=torch.float64)[:(dim // 2)] / dim))",
     TG_ATTN, "rope",
     "The rotary frequencies use exponents i/d instead of 2i/d for pair i, so every pair after the first rotates faster than it should (the spectrum covers only half the decades).",
     "Rewriting `arange(0, dim, 2)[:dim // 2]` as a plain range with the slice kept (the slice hides the missing step) halves every frequency exponent.",
     ""),
    ("tg.rope_keys_unrotated", TG,
     "xk_out = complex_mult(xk, c, d)",
     "xk_out = xk",
     TG_ATTN, "rope",
     "Only the queries are rotated; the keys keep their unrotated channels, so the scores depend on the query's absolute position instead of the distance to the key.",
     "A refactor that fuses the rotation into the query path (or rotates the keys once when they enter a cache that this code path then bypasses) leaves the keys unrotated.",
     ""),
    ("tg.repeat_kv_tiled", TG,
     "return x.repeat(1, 1, 1, n_rep).reshape(bs, seqlen, n_kv_heads * n_rep, head_dim)",
     "return x.repeat(1, 1, n_rep, 1).reshape(bs, seqlen, n_kv_heads * n_rep, head_dim)",
     TG_ATTN, "grouped-query attention",
     "The key/value heads are tiled (kv0, kv1, kv0, kv1) instead of repeated in groups (kv0, kv0, kv1, kv1), so query head h attends with key/value head h mod H_kv instead of h // (H / H_kv).",
     "tinygrad's own NOTE warns that `x.repeat((1, 1, n_rep, 1))` differs; a port replacing the repeat with the 'obvious' tile (or an ONNX Tile) pairs query heads with the wrong key/value head.",
     GQA_TILE_ORDER),
    ("tg.causal_diagonal_hidden", TG,
     "return torch.full((1, 1, seqlen, start_pos + seqlen), float(\"-inf\"), dtype=dtype).triu(start_pos + 1) if seqlen > 1 else None",
     "return torch.full((1, 1, seqlen, start_pos + seqlen), float(\"-inf\"), dtype=dtype).triu(start_pos) if seqlen > 1 else None",
     TG_ATTN, "masks",
     "The causal mask also hides each token's own key (the diagonal), so a token attends only strictly earlier tokens; the first token of a fresh multi-token call has no key left and its row becomes NaN.",
     "The classic off-by-one in `triu(start_pos + 1)`: dropping the `+ 1` (or using `triu(1)` semantics for a lower mask) masks the diagonal too.",
     ""),
    ("tg.causal_top_left_in_chunks", TG,
     "return torch.full((1, 1, seqlen, start_pos + seqlen), float(\"-inf\"), dtype=dtype).triu(start_pos + 1) if seqlen > 1 else None",
     "return torch.full((1, 1, seqlen, start_pos + seqlen), float(\"-inf\"), dtype=dtype).triu(1) if seqlen > 1 else None",
     TG_ATTN, "kv cache",
     "When a chunk of several tokens follows a cache, the causal mask is aligned to the top-left corner of the [new tokens x all keys] block: new token i sees only the first i + 1 keys (old cached keys), not the cache plus the new tokens up to itself. Only cached multi-token calls change.",
     "Building the mask as if there were no cache (the prompt-only `triu(1)`) works for the prompt and for one-token decoding, so the bug only shows with chunked prefill or speculative decoding.",
     ""),
    ("tg.cache_written_at_start", TG,
     "cache_kv[:, :, start_pos:start_pos + seqlen, :, :] = torch.stack([xk, xv])",
     "cache_kv[:, :, :seqlen, :, :] = torch.stack([xk, xv])",
     TG_ATTN, "kv cache",
     "Each call writes its new keys and values at the start of the preallocated cache instead of after the cached tokens, overwriting the oldest entries; the slots between are left as zeros, so decoded tokens attend zero keys and lose the earlier context.",
     "Porting `cache_kv.shrink((None, None, (start_pos, start_pos + seqlen), None, None)).assign(...)` to slicing and dropping the start offset.",
     ""),
    ("tg.values_from_key_cache", TG,
     "values = cache_kv[1].narrow(1, 0, start_pos + seqlen)",
     "values = cache_kv[0].narrow(1, 0, start_pos + seqlen)",
     TG_ATTN, "kv cache",
     "The values are read from the key slot of the stacked cache buffer, so attention averages the (rotated) keys instead of the values.",
     "A copy-paste of the keys line that forgets to change the index of the single `[2, ...]` cache tensor (tinygrad moved to one tensor for keys and values).",
     ""),
    ("tg.rms_eps_outside_sqrt", TG,
     "return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps)",
     "return x / (torch.sqrt(x.square().mean(-1, keepdim=True)) + self.eps)",
     TG_NORM, "normalisation",
     "The RMSNorm epsilon is added to the root mean square instead of to the mean square inside the square root (x / (rms + eps) instead of x / sqrt(ms + eps)); it differs visibly for small inputs.",
     "The RMSNorm paper's formula puts eps outside the root; code written from the paper instead of from Meta's llama does so.",
     RMS_EPS_PLACEMENT),
    ("tg.rms_centered_variance", TG,
     "return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps)",
     "return x * torch.rsqrt(x.var(-1, keepdim=True, unbiased=False) + self.eps)",
     TG_NORM, "normalisation",
     "The RMSNorm divides by the standard deviation around the mean (the centred variance) instead of the root mean square, as a LayerNorm without the mean subtraction would.",
     "Writing the statistic as 'variance' (as transformers' LlamaRMSNorm names its mean of squares) and then computing a real variance.",
     RMS_VARIANCE),
    ("tg.rms_stats_input_dtype", TG,
     "x = self._norm(at_least_float32(x)).to(x.dtype)",
     "x = self._norm(x)",
     TG_NORM, "precision",
     "In float16 and bfloat16 the mean of squares and its reciprocal root are formed in the input's 16-bit type instead of at least float32 (float64 runs do not change).",
     "Dropping tinygrad's `x.float()` ... `.cast(x.dtype)` around the norm to save a cast.",
     ""),
    ("tg.silu_on_up_projection", TG,
     "w1 = nn.functional.silu(self.w1(x))",
     "w1 = nn.functional.silu(self.w3(x))",
     TG_FFN, "feed-forward",
     "The SiLU gate is computed from the up projection (w3) instead of the gate projection (w1), so the FFN computes silu(x W3) * (x W3) and the gate weight w1 is never used.",
     "Meta's naming (w1 gate, w3 up, w2 down) against transformers' (gate_proj, up_proj, down_proj): a converter or a hand port that swaps w1 and w3 in one place.",
     ""),
    ("tg.scale_by_model_width", TG,
     "qk = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)",
     "qk = q @ k.transpose(-2, -1) / ((q.shape[1] * q.shape[-1]) ** 0.5)",
     TG_ATTN, "attention scale",
     "The scores are divided by sqrt(H * d_head), the square root of the model width, instead of sqrt(d_head).",
     "Using the model dimension (`dim`) instead of the head dimension for the softmax temperature, a common porting slip.",
     SCALE_BY_EMBED_SIZE),
    ("tg.embedding_scaled", TG,
     "h = self.tok_embeddings(tokens)",
     "h = self.tok_embeddings(tokens) * (self.tok_embeddings.embedding_dim ** 0.5)",
     TG_LM, "embedding",
     "The token embeddings are multiplied by sqrt(D) before the first block, a scale this model does not have.",
     "Copying Gemma's (or the original Transformer's) `normalizer = hidden_size ** 0.5` into a llama port.",
     ""),
    ("tg.attention_residual_from_norm", TG,
     "h = x + attn",
     "h = self.attention_norm(x) + attn",
     TG_BLOCK, "residual/norm placement",
     "The attention residual adds the normalised input instead of the raw block input, so the residual stream is renormalised at every block.",
     "A refactor that names the normalised input `x` (`x = self.attention_norm(x)`) before the residual, then keeps adding it.",
     PRE_LN_RESIDUAL_COPY),
    ("tg.ffn_post_norm", TG,
     "return (h + self.feed_forward(self.ffn_norm(h))), cache_kv",
     "return self.ffn_norm(h + self.feed_forward(h)), cache_kv",
     TG_BLOCK, "residual/norm placement",
     "The feed-forward sublayer is post-norm: the FFN reads the un-normalised stream and the norm is applied after the residual add, while the attention sublayer stays pre-norm.",
     "Mixing a post-LN block (original Transformer, BERT) into a pre-LN llama while porting one sublayer at a time.",
     ""),
    ("tg.final_norm_skipped", TG,
     "logits = self.output(self.norm(h))",
     "logits = self.output(h)",
     TG_LM, "residual/norm placement",
     "The final RMSNorm before the output projection is skipped; the logits are computed from the raw residual stream.",
     "Splitting the model into a backbone and a head during a port and forgetting which of them owns the final norm.",
     ""),
    ("tg.positions_restart_each_call", TG,
     "return freqs_cis.narrow(1, start_pos, seqlen)",
     "return freqs_cis.narrow(1, 0, seqlen)",
     TG_ATTN, "kv cache",
     "When the model numbers the tokens itself, each call takes rotary angles from position 0 instead of from its start position, so tokens decoded after a cache get the angles of positions 0, 1, ...",
     "tinygrad's `freqs_cis.shrink((None, (start_pos, start_pos + seqlen), ...))` ported as a slice from the start.",
     ""),
    ("tg.heads_merged_without_transpose", TG,
     "attn = attn.transpose(1, 2).reshape(bsz, seqlen, -1)",
     "attn = attn.reshape(bsz, seqlen, -1)",
     TG_ATTN, "head split/merge",
     "The attention output [B, H, L, d] is reshaped to [B, L, H*d] without first moving the head axis after the sequence axis, mixing tokens and heads in the merged rows.",
     "Dropping the transpose (tinygrad's `attn.transpose(1, 2)`) when the tensor is already 'contiguous'.",
     ""),
    ("k.scale_by_hidden_dim", KH,
     "self._inverse_sqrt_key_dim = 1.0 / math.sqrt(float(self._key_dim))",
     "self._inverse_sqrt_key_dim = 1.0 / math.sqrt(float(hidden_dim))",
     K_MHA, "attention scale",
     "The query is scaled by 1/sqrt(model width) instead of 1/sqrt(key_dim), the per-head width.",
     "Confusing Keras' `key_dim` (the size of each head) with the layer's total width when porting to a framework that takes `embed_dim`.",
     SCALE_BY_EMBED_SIZE),
    ("k.query_not_scaled", KH,
     "query = query * self._inverse_sqrt_key_dim",
     "query = query",
     K_MHA, "attention scale",
     "The 1/sqrt(key_dim) scaling of the query is dropped; the softmax sees unscaled dot products.",
     "Keras' comment suggests folding the scalar into the query kernel for XLA; a converter that assumes it was folded into the checkpoint and removes it here.",
     ""),
    ("k.scores_keys_by_queries", KH,
     "self._dot_product_equation = \"aecd,abcd->acbe\"",
     "self._dot_product_equation = \"aecd,abcd->aceb\"",
     K_MHA, "softmax",
     "The score tensor is laid out [B, N, S, T] (keys by queries) instead of [B, N, T, S], so the softmax over the last axis normalises over the queries for each key, and the combine einsum reads it as if it were [B, N, T, S] (shapes fail when T != S).",
     "Hand-editing the einsum strings of Keras' `_build_attention_equation` and swapping the output's last two letters.",
     VIT_SOFTMAX_AXIS),
    ("k.mask_adder_inverted", KH,
     "adder = (1.0 - mask.to(inputs.dtype)) * _large_negative_number(inputs.dtype)",
     "adder = mask.to(inputs.dtype) * _large_negative_number(inputs.dtype)",
     K_MHA, "masks",
     "The large negative number is added where the mask is True (the keys that may be attended) instead of where it is False: attention goes to the padding and the masked-out keys.",
     "Keras masks mean 'attend where 1'; code written for the TensorFlow tutorial's 'mask where 1' convention inverts them.",
     KERAS_MASK_POLARITY),
    ("k.padding_mask_over_queries", KH,
     "mask = mask[:, None, :].bool()  # [B, 1, S]: the same keys for every query",
     "mask = mask[:, :, None].bool()  # [B, 1, S]: the same keys for every query",
     K_LAYER, "masks",
     "The padding mask is expanded over the keys instead of over the queries ([B, S, 1]): padded query rows are masked whole and the real rows still attend the padded keys.",
     "keras-hub's `merge_padding_and_attention_mask` uses `expand_dims(padding_mask, axis=1)`; a port that expands the wrong axis.",
     ""),
    ("k.mha_causal_inverted", KH,
     "return torch.greater_equal(row_index, col_index)",
     "return torch.less_equal(row_index, col_index)",
     K_ONLY_MHA, "masks",
     "The MultiHeadAttention's own causal mask keeps the upper triangle (key index >= query index) instead of the lower one: each query attends itself and the future.",
     "Writing Keras' cumsum-based `_compute_causal_mask` comparison the wrong way round.",
     ""),
    ("k.layer_causal_diagonal_hidden", KH,
     "mask = i >= j",
     "mask = i > j",
     K_LAYER, "masks",
     "The layer's causal mask hides the diagonal: a token cannot attend itself, and the first query has no key left.",
     "Using a strict comparison in keras-hub's `compute_causal_mask`.",
     ""),
    ("k.padding_or_causal", KH,
     "self_attention_mask = causal_mask if self_attention_mask is None else self_attention_mask & causal_mask",
     "self_attention_mask = causal_mask if self_attention_mask is None else self_attention_mask | causal_mask",
     K_LAYER, "masks",
     "The padding mask and the causal mask are combined with OR instead of AND, so a key is attended when either allows it: padded keys in the past and future real keys leak.",
     "keras-hub merges masks with `ops.minimum`; a port to boolean masks that picks the wrong operator.",
     ""),
    ("k.layernorm_epsilon_not_passed", KH,
     "self._self_attention_layer_norm = nn.LayerNorm(hidden_dim, eps=self.layer_norm_epsilon)",
     "self._self_attention_layer_norm = nn.LayerNorm(hidden_dim)",
     K_LAYER, "normalisation",
     "The attention sublayer's LayerNorm uses the framework's default epsilon 1e-5 instead of the configured 1e-12 (BERT's); the feed-forward norm keeps 1e-12.",
     "keras-hub once forgot to pass `layer_norm_epsilon` to the sublayers' norms.",
     KERAS_HUB_EPS_NOT_PASSED),
    ("k.ffn_residual_from_layer_input", KH,
     "residual = x  # feedforward",
     "residual = inputs  # feedforward",
     K_LAYER, "residual/norm placement",
     "The feed-forward residual adds the layer's input instead of the attention sublayer's (normalised) output, so the attention result reaches the output only through the FFN.",
     "Reusing the `inputs` name for the second residual when copying the first block.",
     ""),
    ("k.attention_dropout_in_eval", KH,
     "final_attn_scores = self._dropout_layer(attention_scores)",
     "final_attn_scores = nn.functional.dropout(attention_scores, p=0.1, training=training is not False)",
     K_MHA, "dropout",
     "Dropout on the attention weights is active at evaluation time: Keras' `training=None` (meaning 'inference unless told otherwise') is read as 'training'.",
     "Porting Keras' `training` argument semantics to torch's functional dropout.",
     ""),
    ("k.activation_gelu_default", KH,
     "def __init__(self, intermediate_dim, num_heads, hidden_dim, dropout=0, activation=\"relu\", layer_norm_epsilon=1e-05, normalize_first=False, use_bias=True, ffn_bias=True):",
     "def __init__(self, intermediate_dim, num_heads, hidden_dim, dropout=0, activation=\"gelu\", layer_norm_epsilon=1e-05, normalize_first=False, use_bias=True, ffn_bias=True):",
     K_LAYER, "feed-forward",
     "The feed-forward activation is the exact GELU instead of ReLU (the default changed to BERT's activation).",
     "keras-hub's BERT passes `activation=gelu`; making it the layer's default changes every other user of the layer.",
     ""),
    ("k.dense_activation_never_applied", KH,
     "if self.activation is not None:",
     "if self.activation is None:",
     K_LAYER, "feed-forward",
     "The intermediate Dense layer never applies its activation, so the feed-forward network is two stacked linear maps.",
     "An inverted guard in a hand-written Dense port.",
     ""),
    ("k.ffn_post_norm_skipped", KH,
     "if not self.normalize_first:  # post-LN feedforward",
     "if self.normalize_first:  # post-LN feedforward",
     K_LAYER, "residual/norm placement",
     "The post-residual LayerNorm of the feed-forward sublayer is never applied: the layer returns the un-normalised sum while the attention sublayer stays post-norm.",
     "Inverting one of the four `normalize_first` guards when copying the attention block's code into the feed-forward block.",
     ""),
    ("k.value_projected_from_key", KH,
     "value = self._value_dense(value)",
     "value = self._value_dense(key)",
     K_ONLY_MHA, "projections",
     "The value projection is applied to the key input instead of the value input (identical in self-attention, wrong when key and value differ).",
     "A copy-paste of the key line; self-attention tests never notice because key and value are the same tensor.",
     ""),
    # ---- sequential_vit
    ("v.scale_after_softmax", SV,
     "att = F.softmax(energy / scaling, dim=-1, dtype=torch.promote_types(energy.dtype, torch.float32)).to(energy.dtype)",
     "att = (F.softmax(energy, dim=-1, dtype=torch.promote_types(energy.dtype, torch.float32)) / scaling).to(energy.dtype)",
     V_LAYER, "attention scale",
     "The scale is applied after the softmax: the unscaled scores are normalised and the attention weights are then divided by sqrt(d_head), so each row sums to 1/sqrt(d_head).",
     "The tutorial's own slip (`att = F.softmax(energy, dim=-1) / scaling`), reported on its repository.",
     ZUPPICHINI_SCALE_AFTER_SOFTMAX),
    ("v.scale_by_emb_size", SV,
     "scaling = (self.emb_size // self.num_heads) ** (1 / 2)",
     "scaling = self.emb_size ** (1 / 2)",
     V_LAYER, "attention scale",
     "The scores are divided by sqrt(emb_size), the model width, instead of sqrt(d_head).",
     "The tutorial's first version scaled by `emb_size ** (1/2)`; its author later noted it should be the head size.",
     ZUPPICHINI_SCALE_EMB_SIZE),
    ("v.softmax_over_queries", SV,
     "att = F.softmax(energy / scaling, dim=-1, dtype=torch.promote_types(energy.dtype, torch.float32)).to(energy.dtype)",
     "att = F.softmax(energy / scaling, dim=-2, dtype=torch.promote_types(energy.dtype, torch.float32)).to(energy.dtype)",
     V_LAYER, "softmax",
     "The softmax normalises over the query axis instead of the key axis, so each key's column sums to one and the rows do not.",
     "Choosing the softmax axis by position (`dim=2` on a [b, h, q, k] tensor) in a notebook.",
     VIT_SOFTMAX_AXIS),
    ("v.mask_fill_inverted", SV,
     "energy = energy.masked_fill(~mask, fill_value)",
     "energy = energy.masked_fill(mask, fill_value)",
     V_MASK, "masks",
     "The fill goes where the keep-mask is True: real keys are hidden and the padding attended.",
     "Passing a keep-mask to code that expects a pad-mask (or the reverse).",
     ""),
    ("v.mask_fill_result_dropped", SV,
     "energy = energy.masked_fill(~mask, fill_value)",
     "energy.masked_fill(~mask, fill_value)",
     V_MASK, "masks",
     "The out-of-place `masked_fill` result is discarded, so the mask has no effect: padded keys are attended like real ones.",
     "The tutorial's own line calls `energy.mask_fill(...)` without assigning the result.",
     ""),
    ("v.split_heads_without_permute", SV,
     "return x.view(b, n, h, -1).permute(0, 2, 1, 3)",
     "return x.view(b, h, n, -1)",
     V_LAYER, "head split/merge",
     "The projected [B, N, D] tensor is viewed straight as [B, H, N, d] without moving the head axis, so each head's 'tokens' are slices of several tokens' channels.",
     "Replacing einops' `rearrange(x, 'b n (h d) -> b h n d')` by a single view in the target shape.",
     ""),
    ("v.merge_heads_without_permute", SV,
     "return x.permute(0, 2, 1, 3).reshape(b, n, h * d)",
     "return x.reshape(b, n, h * d)",
     V_LAYER, "head split/merge",
     "The heads [B, H, N, d] are merged by reshaping to [B, N, H*d] without first moving the head axis after the token axis.",
     "Replacing einops' `rearrange(out, 'b h n d -> b n (h d)')` by a reshape alone.",
     ""),
    ("v.patches_reshaped_not_transposed", SV,
     "return x.flatten(2).transpose(1, 2)",
     "return x.flatten(2).reshape(x.shape[0], -1, x.shape[1])",
     V_PATCH, "patchify",
     "The conv output [B, D, N] is reinterpreted as [B, N, D] by a reshape instead of a transpose, so each 'patch token' mixes channels of several patches.",
     "Writing einops' `Rearrange('b e (h) (w) -> b (h w) e')` as a reshape.",
     ""),
    ("v.patches_column_major", SV,
     "return x.flatten(2).transpose(1, 2)",
     "return x.transpose(2, 3).flatten(2).transpose(1, 2)",
     V_PATCH, "patchify",
     "The patch tokens are enumerated column by column (width-major) instead of row by row, so the position table's rows meet other patches.",
     "Writing the grid axes of `'b e (h) (w) -> b (h w) e'` as `(w h)`.",
     ""),
    ("v.cls_token_appended", SV,
     "x = torch.cat([cls_tokens, x], dim=1)",
     "x = torch.cat([x, cls_tokens], dim=1)",
     V_VIT, "class token",
     "The class token is appended after the patches instead of prepended: the head reads the first patch's token, and the position rows are shifted by one.",
     "Swapping the concatenation order in the port.",
     ""),
    ("v.mean_pool_with_cls", SV,
     "return x[:, 0]",
     "return x.mean(dim=1)",
     V_VIT, "pooling",
     "The head reads the mean of all tokens, the class token included, instead of the class token.",
     "The tutorial's own head (`Reduce('b n e -> b e', reduction='mean')`) averages every token.",
     MEAN_POOL_WITH_CLS),
    ("v.cls_without_position", SV,
     "x += self.positions",
     "x[:, 1:] += self.positions[1:]",
     V_VIT, "position embedding",
     "The class token gets no position row (row 0 of the table is never added); the patches get rows 1..N as they should.",
     "Treating the class token as position-free, as in DeiT-III's layout, while keeping an N + 1 row table.",
     ""),
    ("v.gelu_tanh", SV,
     "nn.GELU(),",
     "nn.GELU(approximate=\"tanh\"),",
     V_LAYER, "feed-forward",
     "The MLP uses the tanh approximation of GELU instead of the exact erf GELU.",
     "Copying the activation from a GPT-2 style model (`gelu_new`).",
     ""),
    ("v.attention_dropout_in_eval", SV,
     "att = self.att_drop(att)",
     "att = F.dropout(att, p=0.1)",
     V_LAYER, "dropout",
     "The attention weights are dropped out at evaluation time: the functional dropout defaults to training=True and ignores the module's eval mode.",
     "Replacing the `nn.Dropout` module by `F.dropout` without passing `training=self.training`.",
     ""),
    ("v.residual_from_norm", SV,
     "res = x",
     "res = self.fn[0](x)",
     V_LAYER, "residual/norm placement",
     "Each residual adds the sublayer's normalised input (the LayerNorm output) instead of the raw input.",
     "A refactor that takes the skip connection after the first module of the wrapped `nn.Sequential`.",
     PRE_LN_RESIDUAL_COPY),
    ("v.head_norm_eps", SV,
     "nn.LayerNorm(emb_size, eps=eps), nn.Linear(emb_size, n_classes))",
     "nn.LayerNorm(emb_size, eps=1e-6), nn.Linear(emb_size, n_classes))",
     V_VIT, "normalisation",
     "The final LayerNorm (in the classification head) uses epsilon 1e-6 instead of the model's 1e-5; the blocks keep 1e-5.",
     "Copying timm's `partial(nn.LayerNorm, eps=1e-6)` into one norm while porting.",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.tg_scale_by_reciprocal", TG,
     "qk = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)",
     "qk = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5)",
     TG_ATTN, "Multiplying the scores by 1/sqrt(d) equals dividing them by sqrt(d)."),
    ("control.tg_repeat_kv_expand", TG,
     "return x.repeat(1, 1, 1, n_rep).reshape(bs, seqlen, n_kv_heads * n_rep, head_dim)",
     "return x[:, :, :, None, :].expand(bs, seqlen, n_kv_heads, n_rep, head_dim).reshape(bs, seqlen, n_kv_heads * n_rep, head_dim)",
     TG_ATTN, "Meta's `repeat_kv` (expand a new axis after the kv heads) gives the same grouped order (kv0, kv0, kv1, kv1) as tinygrad's repeat on the last axis."),
    ("control.tg_mask_masked_fill", TG,
     "return torch.full((1, 1, seqlen, start_pos + seqlen), float(\"-inf\"), dtype=dtype).triu(start_pos + 1) if seqlen > 1 else None",
     "return torch.zeros((1, 1, seqlen, start_pos + seqlen), dtype=dtype).masked_fill(torch.ones(seqlen, start_pos + seqlen, dtype=torch.bool).triu(start_pos + 1), float(\"-inf\")) if seqlen > 1 else None",
     TG_ATTN, "The same additive mask (0 on and below the shifted diagonal, -inf above) built by filling a zero tensor."),
    ("control.k_scale_power", KH,
     "self._inverse_sqrt_key_dim = 1.0 / math.sqrt(float(self._key_dim))",
     "self._inverse_sqrt_key_dim = float(self._key_dim) ** -0.5",
     K_MHA, "The same reciprocal square root of the head width."),
    ("control.k_merge_masks_and", KH,
     "return torch.minimum(mask, attention_mask)",
     "return mask & attention_mask",
     K_LAYER, "For boolean masks the elementwise minimum is the logical AND."),
    ("control.k_dense_einsum", KH,
     "x = torch.matmul(inputs, self.kernel)",
     "x = torch.einsum(\"...i,io->...o\", inputs, self.kernel)",
     K_LAYER, "The same product of the inputs with the [in, out] kernel, written as an einsum."),
    ("control.v_merge_heads_transpose_flatten", SV,
     "return x.permute(0, 2, 1, 3).reshape(b, n, h * d)",
     "return x.transpose(1, 2).flatten(2)",
     V_LAYER, "Moving the head axis after the token axis and flattening the last two axes is the same merge."),
    ("control.v_cls_repeat", SV,
     "cls_tokens = self.cls_token.expand(b, -1, -1)  # repeat(self.cls_token, '() n e -> b n e', b=b)",
     "cls_tokens = self.cls_token.repeat(b, 1, 1)",
     V_VIT, "Repeating the class token over the batch gives the same tensor as expanding it."),
]

# Phase 2 only: bug id -> (expected codes, class without a code).
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bugs = []
    for bug_id, impl, original, replacement, components, family, cls, description, report in BUGS:
        number, line = _locate(impl, original)
        codes, without = PHASE_2.get(bug_id, ([], ""))
        bugs.append({
            "id": bug_id, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": line, "replacement": _indent(line) + replacement,
            "components": components, "family": family, "class": cls,
            "description": description, "public_report": report,
            "expected_codes": codes, "class_without_code": without,
        })
    controls = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        number, line = _locate(impl, original)
        controls.append({
            "id": control_id, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": line, "replacement": _indent(line) + replacement,
            "components": components, "why_correct": why,
        })
    return bugs, controls


def main() -> None:
    bugs, controls = build()
    for name, rows in (("bugs.json", bugs), ("controls.json", controls)):
        (HERE / name).write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
