# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the ninth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them.

    python tests/blind9/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind9"

GF = "gptfast_llama"
NG = "nanogpt_kv"
LV = "lucid_vit"
G_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
G_NORM = ["rms_norm", "decoder_block", "causal_lm"]
G_ROPE = ["rope", "causal_self_attention", "decoder_block", "causal_lm"]
N_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
N_FLASH = ["causal_self_attention", "decoder_block"]
V_LAYER = ["encoder_layer", "vit"]

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- gptfast_llama -------------------------------------------------------------------
    (
        "g.rope_freqs_precedence",
        GF,
        "freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2, dtype=torch.float64)[: (n_elem // 2)] / n_elem))",
        "freqs = 1.0 / (base ** torch.arange(0, n_elem, 2, dtype=torch.float64)[: (n_elem // 2)] / n_elem)",
        G_ROPE,
        "rope",
        "the rotary frequencies are computed with the division by the width outside the "
        "exponent, so they are not base^(-2i/d)",
        "a tidy-up of precompute_freqs_cis drops the parentheses around the exponent: "
        "base ** arange / n_elem, operator precedence makes it n_elem / base^(2i)",
        "",
    ),
    (
        "g.rms_statistics_in_half",
        GF,
        "output = self._norm(upcast(x)).type_as(x)",
        "output = self._norm(x).type_as(x)",
        G_NORM,
        "precision",
        "the RMSNorm mean square is computed in the 16-bit input dtype instead of float32",
        "the x.float() upcast is dropped from RMSNorm.forward as redundant under bf16 "
        "autocast; float16 inputs then square and average in float16",
        "",
    ),
    (
        "g.rope_pairs_from_halves",
        GF,
        "xshaped = upcast(x).reshape(*x.shape[:-1], -1, 2)",
        "xshaped = upcast(x).unflatten(-1, (2, -1)).transpose(-1, -2)",
        G_ROPE,
        "rope",
        "the rotated pairs are channels (i, i + d/2) while the model's declared layout, and "
        "its output, pair neighbouring channels",
        "a port from a Hugging Face checkpoint reads the pairs as rotate_half does (two "
        "halves) while apply_rotary_emb still writes them back interleaved",
        "",
    ),
    (
        "g.rope_first_component_sign",
        GF,
        "xshaped[..., 0] * freqs_cis[..., 0] - xshaped[..., 1] * freqs_cis[..., 1],",
        "xshaped[..., 0] * freqs_cis[..., 0] + xshaped[..., 1] * freqs_cis[..., 1],",
        G_ROPE,
        "rope",
        "the real form of the complex rotation has a wrong sign in one component, so the "
        "pair is not rotated (the map is not a rotation and does not preserve length)",
        "rewriting view_as_complex(x) * freqs_cis in real arithmetic, the real part is "
        "written a*cos + b*sin instead of a*cos - b*sin",
        "",
    ),
    (
        "g.rms_eps_outside_sqrt",
        GF,
        "return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)",
        "return x / (torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True)) + self.eps)",
        G_NORM,
        "eps_placement",
        "the RMSNorm epsilon is added to the root mean square instead of inside the square root",
        "rsqrt(mean + eps) replaced by 1 / (sqrt(mean) + eps) when porting to a backend "
        "without rsqrt",
        "",
    ),
    (
        "g.rms_gain_offset_by_one",
        GF,
        "return output * self.weight",
        "return output * (1 + self.weight)",
        G_NORM,
        "norm",
        "the norm gain is applied as one plus the stored weight, although the stored weight "
        "is the gain itself",
        "RMSNorm copied from a Gemma port, where weights are stored as offsets from one, "
        "into a Llama model whose checkpoints store the gain",
        "",
    ),
    (
        "g.cache_keys_one_slot_late",
        GF,
        "k_out.index_copy_(2, input_pos, k_val)",
        "k_out.index_copy_(2, input_pos + 1, k_val)",
        G_ATTN,
        "kv_cache",
        "the cached keys are written one slot after their token's index, so keys, values "
        "and the mask no longer refer to the same tokens",
        "an attempt to reserve slot 0 for a BOS token shifts the key write by one and not "
        "the value write",
        "",
    ),
    (
        "g.ffn_activation_on_up",
        GF,
        "return self.w2(F.silu(self.w1(x)) * self.w3(x))",
        "return self.w2(self.w1(x) * F.silu(self.w3(x)))",
        ["gated_ffn", "decoder_block", "causal_lm"],
        "ffn_gating",
        "the gated FFN activates the up projection instead of the gate projection",
        "w1 and w3 mixed up when renaming to gate/up/down, so SiLU lands on the up branch",
        "",
    ),
    (
        "g.keys_values_split_swapped",
        GF,
        "q, k, v = self.wqkv(x).split([self.dim, kv_size, kv_size], dim=-1)",
        "q, v, k = self.wqkv(x).split([self.dim, kv_size, kv_size], dim=-1)",
        G_ATTN,
        "qkv_projection",
        "the key and value projections are exchanged: keys come from the value weights and "
        "values from the key weights",
        "the fused wqkv is built from a checkpoint in q, v, k order (or split so), the two "
        "equal kv slices swap silently",
        "",
    ),
    (
        "g.gqa_keys_tiled",
        GF,
        "k = k.repeat_interleave(self.n_head // self.n_local_heads, dim=1)",
        "k = k.repeat(1, self.n_head // self.n_local_heads, 1, 1)",
        G_ATTN,
        "gqa",
        "grouped-query attention maps key heads to query heads by tiling (h mod H_kv) "
        "instead of by groups (h // g)",
        "repeat_interleave replaced by repeat for the keys, as a 'faster' expand-based "
        "rewrite does, so query head h reads key head h mod H_kv",
        "https://github.com/onnx/onnx/pull/7274",
    ),
    (
        "g.sdpa_scale_model_width",
        GF,
        "y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)",
        "y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=1.0 / math.sqrt(self.dim))",
        G_ATTN,
        "attention_scale",
        "the attention scores are scaled by 1/sqrt(d_model) instead of 1/sqrt(head width)",
        "an explicit scale= added for a kernel that needs one, computed from the model "
        "width instead of the head dimension",
        "https://github.com/omihub777/ViT-CIFAR/issues/11",
    ),
    (
        "g.heads_merged_without_transpose",
        GF,
        "y = y.transpose(1, 2).contiguous().view(bsz, seqlen, self.n_head * self.head_dim)",
        "y = y.contiguous().view(bsz, seqlen, self.n_head * self.head_dim)",
        G_ATTN,
        "heads",
        "the heads are merged by reshaping [B, H, L, d] to [B, L, H*d] without moving the "
        "head axis back, interleaving positions and heads",
        "the transpose dropped when switching to a kernel that returns [B, L, H, d], while "
        "this one returns [B, H, L, d]",
        "",
    ),
    (
        "g.derived_positions_from_zero",
        GF,
        "positions = input_pos[None].expand(bsz, seqlen)",
        "positions = torch.arange(seqlen, device=input_pos.device)[None].expand(bsz, seqlen)",
        G_ATTN,
        "positions_under_cache",
        "position ids derived by the model for a call are numbered from 0 in every call "
        "instead of after the tokens already cached",
        "the default position ids written for a training forward (arange(seqlen)) reused in "
        "generation, where input_pos should have been used",
        "https://github.com/huggingface/transformers/pull/37403",
    ),
    (
        "g.step_mask_rows_from_call_start",
        GF,
        "mask = self.causal_mask[None, None, input_pos]",
        "mask = self.causal_mask[None, None, input_pos - start]",
        G_ATTN,
        "chunked_prefill",
        "the causal mask of a call on a non-empty cache is built for the call's tokens alone "
        "(rows counted from the call start), so the new tokens cannot see the cached keys "
        "beyond their own index within the call",
        "the mask rows indexed relative to the chunk, as for a prefill, when chunked "
        "prefill was added",
        "https://github.com/pytorch/pytorch/issues/108108",
    ),
    (
        "g.padding_keep_inverted",
        GF,
        "mask = mask & key_padding[:, None, None, :]",
        "mask = mask & ~key_padding[:, None, None, :]",
        G_ATTN,
        "mask_polarity",
        "the key-padding mask is read with the opposite polarity: padding is attended and "
        "real tokens are hidden",
        "the padding mask taken as nn.MultiheadAttention's key_padding_mask convention "
        "(True = pad) while the caller passes True = token",
        "https://github.com/lucidrains/halonet-pytorch/issues/4",
    ),
    (
        "g.rope_on_values_not_keys",
        GF,
        "k = apply_rotary_emb(k, freqs_cis)",
        "v = apply_rotary_emb(v, freqs_cis)",
        G_ATTN,
        "rope",
        "the rotary embedding is applied to the values instead of the keys",
        "a k/v typo in the second apply_rotary_emb call",
        "",
    ),
    (
        "g.lm_head_tied_to_embedding",
        GF,
        "logits = self.output(x)",
        "logits = F.linear(x, self.tok_embeddings.weight)",
        ["causal_lm"],
        "weight_tying",
        "the output projection uses the token embedding matrix although the model has an "
        "untied output head",
        "code shared with a tied GPT-2 model projects with the embedding matrix, leaving "
        "the Llama output weights unused",
        "",
    ),
    (
        "g.layers_share_one_cache",
        GF,
        "x = layer(x, input_pos, freqs_cis, mask, kv_caches[i] if kv_caches is not None else None)",
        "x = layer(x, input_pos, freqs_cis, mask, kv_caches[0] if kv_caches is not None else None)",
        ["causal_lm"],
        "kv_cache",
        "every layer writes and reads the same KV cache, so a layer attends keys and values "
        "another layer wrote",
        "the per-layer cache index lost when the cache was moved out of the layers into a "
        "list passed to forward",
        "",
    ),
    (
        "g.float64_upcast_to_float32",
        GF,
        "return x.float() if x.element_size() < 4 else x",
        "return x.float()",
        ["rms_norm", "rope", "causal_self_attention", "decoder_block", "causal_lm"],
        "precision",
        "steps meant to be upcast for 16-bit inputs are computed in float32 in a float64 "
        "build too (undeclared float32 rounding)",
        "gpt-fast's x.float() kept verbatim: right for bf16, a downcast for float64",
        "",
    ),
    (
        "g.embedding_scaled_by_sqrt_width",
        GF,
        "x = self.tok_embeddings(idx)",
        "x = self.tok_embeddings(idx) * math.sqrt(self.config.dim)",
        ["causal_lm"],
        "embedding_scale",
        "the token embeddings are multiplied by sqrt(d_model) in a model that declares no "
        "embedding scale",
        "the embedding normaliser of Gemma (or of the 2017 Transformer) carried over into a "
        "Llama port",
        "",
    ),
    # ---- nanogpt_kv ----------------------------------------------------------------------
    (
        "n.layernorm_eps_timm",
        NG,
        "return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)",
        "return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-6)",
        ["layer_norm", "decoder_block", "causal_lm"],
        "eps",
        "the LayerNorm epsilon differs from the declared value",
        "eps copied from a timm ViT block (1e-6) into the GPT-2 LayerNorm (1e-5)",
        "",
    ),
    (
        "n.query_key_split_swapped",
        NG,
        "q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)",
        "k, q, v  = self.c_attn(x).split(self.n_embd, dim=2)",
        N_ATTN,
        "qkv_projection",
        "the query and key projections are exchanged: queries come from the key weights and "
        "keys from the query weights",
        "the fused c_attn unpacked in k, q, v order, matching the order of the view lines "
        "below it instead of the checkpoint's q, k, v",
        "",
    ),
    (
        "n.query_heads_view_without_transpose",
        NG,
        "q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)",
        "q = q.view(B, self.n_head, T, C // self.n_head) # (B, nh, T, hs)",
        N_ATTN,
        "heads",
        "the queries are split into heads by a view straight to [B, H, L, d] without the "
        "transpose, mixing positions and heads",
        "the view-then-transpose written as one view to the commented shape",
        "",
    ),
    (
        "n.cache_keys_prepended",
        NG,
        "k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)",
        "k, v = torch.cat((k, past_k), dim=-2), torch.cat((v, past_v), dim=-2)",
        N_ATTN,
        "kv_cache",
        "each call's keys and values are placed before the cached ones instead of after them",
        "the concatenation order flipped when the cache was bolted on (new, past)",
        "",
    ),
    (
        "n.past_length_from_head_axis",
        NG,
        "past_length = past_k.size(-2)",
        "past_length = past_k.size(1)",
        N_ATTN,
        "kv_cache",
        "the number of cached tokens is read from the head axis of the cache tensor, so the "
        "causal mask rows of a cached call are taken at the wrong offset",
        "size(1) copied from a fork whose cache layout is [B, T, nh, hs]",
        "",
    ),
    (
        "n.is_causal_in_cached_steps",
        NG,
        "if attn_mask is None and past_length == 0:",
        "if attn_mask is None:",
        N_FLASH,
        "chunked_prefill",
        "a cached call uses the built-in causal flag, whose mask is aligned to the top left "
        "of the (new tokens x all keys) block, so new tokens do not see the cached keys",
        "the flash path's is_causal=True kept for every call without padding, cached steps "
        "included",
        "https://github.com/pytorch/pytorch/issues/144858",
    ),
    (
        "n.padding_keep_inverted_flash",
        NG,
        "causal = causal & attn_mask[:, None, None, :].bool()",
        "causal = causal & ~attn_mask[:, None, None, :].bool()",
        N_FLASH,
        "mask_polarity",
        "the key-padding mask is applied with the opposite polarity in the SDPA path",
        "the SDPA boolean mask (True = attend) built as if the attention mask said True = pad",
        "https://github.com/pytorch/pytorch/issues/92554",
    ),
    (
        "n.padding_fill_neg_inf",
        NG,
        "att = att.masked_fill(attn_mask[:, None, None, :] == 0, torch.finfo(att.dtype).min)",
        "att = att.masked_fill(attn_mask[:, None, None, :] == 0, float('-inf'))",
        ["causal_lm"],
        "mask_fill",
        "padded keys are filled with -inf, so a query row whose keys are all padding becomes "
        "NaN and the NaN reaches real tokens through the next layer",
        "the padding fill written like nanoGPT's causal fill (-inf) instead of a finite minimum",
        "https://github.com/huggingface/transformers/pull/17306",
    ),
    (
        "n.causal_mask_multiplied",
        NG,
        "att = att.masked_fill(self.bias[:,:,past_length:past_length + T,:S] == 0, float('-inf'))",
        "att = att * self.bias[:,:,past_length:past_length + T,:S]",
        ["causal_lm"],
        "causal_mask",
        "the causal mask multiplies the future scores by zero instead of removing those keys "
        "from the softmax",
        "the tril buffer applied as a multiplicative mask, as on attention probabilities",
        "",
    ),
    (
        "n.scale_model_width",
        NG,
        "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))",
        "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C))",
        ["causal_lm"],
        "attention_scale",
        "the attention scores are scaled by 1/sqrt(d_model) instead of 1/sqrt(head width)",
        "the scale written with the embedding width C, which is in scope",
        "https://github.com/omihub777/ViT-CIFAR/issues/11",
    ),
    (
        "n.softmax_in_input_dtype",
        NG,
        "att = F.softmax(att.float() if half else att, dim=-1).to(v.dtype)",
        "att = torch.exp(att - att.amax(dim=-1, keepdim=True)); att = (att / att.sum(dim=-1, keepdim=True)).to(v.dtype)",
        ["causal_lm"],
        "softmax",
        "the softmax is written out and its exponentials and sum are formed in the 16-bit "
        "input dtype",
        "F.softmax replaced by an explicit exp / sum for an export target, without the "
        "float32 upcast",
        "",
    ),
    (
        "n.mlp_gelu_tanh",
        NG,
        "self.gelu    = nn.GELU()",
        "self.gelu    = nn.GELU(approximate='tanh')",
        ["ffn", "decoder_block", "causal_lm"],
        "ffn_activation",
        "the FFN uses the tanh approximation of GELU where the exact GELU is declared",
        "GPT-2's gelu_new carried into nanoGPT, which uses the exact nn.GELU()",
        "https://github.com/huggingface/candle/pull/900",
    ),
    (
        "n.sdpa_dropout_in_eval",
        NG,
        "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)",
        "y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout, is_causal=True)",
        N_FLASH,
        "dropout",
        "attention dropout stays active in evaluation mode",
        "dropout_p passed unconditionally to F.scaled_dot_product_attention, which "
        "model.eval() does not switch off",
        "https://github.com/karpathy/nanoGPT/pull/240",
    ),
    (
        "n.ffn_sublayer_post_norm",
        NG,
        "x = x + self.mlp(self.ln_2(x))",
        "x = self.ln_2(x + self.mlp(x))",
        ["decoder_block", "causal_lm"],
        "norm_placement",
        "the FFN sublayer normalises after the residual add (post-LN) in a pre-LN block",
        "the block rewritten from a post-LN tutorial for the second sublayer only",
        "",
    ),
    (
        "n.attention_normed_with_ln_2",
        NG,
        "attn_out, present = self.attn(self.ln_1(x), attn_mask=attn_mask, past_kv=past_kv)",
        "attn_out, present = self.attn(self.ln_2(x), attn_mask=attn_mask, past_kv=past_kv)",
        ["decoder_block", "causal_lm"],
        "norm",
        "the attention sublayer is normalised with the FFN sublayer's norm parameters",
        "a copy-paste of the FFN line when the attention call was rewritten to return the cache",
        "",
    ),
    (
        "n.positions_from_zero_in_steps",
        NG,
        "position_ids = torch.arange(past_length, past_length + t, dtype=torch.long, device=device).unsqueeze(0) # shape (1, t)",
        "position_ids = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0) # shape (1, t)",
        ["causal_lm"],
        "positions_under_cache",
        "position ids derived by the model are numbered from 0 in every call instead of "
        "after the cached tokens",
        "nanoGPT's pos = torch.arange(0, t) kept when the KV cache was added",
        "https://github.com/huggingface/transformers/pull/15751",
    ),
    (
        "n.position_embedding_not_added",
        NG,
        "x = self.transformer.drop(tok_emb + pos_emb)",
        "x = self.transformer.drop(tok_emb)",
        ["causal_lm"],
        "positional_encoding",
        "the learned position embedding is computed but never added to the token embeddings",
        "the sum dropped while experimenting with RoPE, the wpe lookup left in place",
        "",
    ),
    (
        "n.weight_tying_commented_out",
        NG,
        "self.transformer.wte.weight = self.lm_head.weight # https://paperswithcode.com/method/weight-tying",
        "# self.transformer.wte.weight = self.lm_head.weight # https://paperswithcode.com/method/weight-tying",
        ["causal_lm"],
        "weight_tying",
        "the token embedding and the output projection are separate matrices in a model "
        "declared tied",
        "the tying line commented out to silence the torch.compile warning quoted above it",
        "https://github.com/karpathy/nanoGPT/pull/21",
    ),
    # ---- lucid_vit -----------------------------------------------------------------------
    (
        "v.patch_flatten_channel_last",
        LV,
        "x = x.permute(0, 2, 4, 1, 3, 5)",
        "x = x.permute(0, 2, 4, 3, 5, 1)",
        ["patch_embed", "vit"],
        "patch_embed",
        "each patch is flattened channel-last (row, column, channel) while the projection "
        "weights are laid out channel-major",
        "vit-pytorch's own '(p1 p2 c)' order restored in the hand-written rearrange, with a "
        "checkpoint converted from a conv weight",
        "",
    ),
    (
        "v.patch_grid_column_major",
        LV,
        "return x.reshape(b, h * w, c * p1 * p2)",
        "return x.transpose(1, 2).reshape(b, h * w, c * p1 * p2)",
        ["patch_embed", "vit"],
        "patch_embed",
        "the patch tokens are ordered column-major over the grid instead of row-major",
        "the rearrange pattern written '(w h)' for '(h w)' when translating einops by hand",
        "",
    ),
    (
        "v.heads_split_without_transpose",
        LV,
        "return t.reshape(b, n, h, hd // h).transpose(1, 2)",
        "return t.reshape(b, h, n, hd // h)",
        V_LAYER,
        "heads",
        "queries, keys and values are split into heads by a reshape straight to [B, H, L, d] "
        "without the transpose",
        "rearrange('b n (h d) -> b h n d') translated as one reshape",
        "",
    ),
    (
        "v.scale_multiplies",
        LV,
        "self.scale = dim_head ** -0.5",
        "self.scale = dim_head ** 0.5",
        V_LAYER,
        "attention_scale",
        "the scores are multiplied by sqrt(head width) instead of divided by it",
        "the minus sign of the exponent lost",
        "",
    ),
    (
        "v.softmax_over_queries",
        LV,
        "self.attend = nn.Softmax(dim = -1)",
        "self.attend = nn.Softmax(dim = -2)",
        V_LAYER,
        "softmax",
        "the attention softmax normalises over the query axis instead of the key axis",
        "dim=-2 typed for the transposed-key axis",
        "",
    ),
    (
        "v.mask_fill_minus_1e9",
        LV,
        "mask_value = -torch.finfo(dots.dtype).max",
        "mask_value = -1e9",
        ["encoder_layer"],
        "mask_fill",
        "the mask fill is a constant that does not fit a 16-bit dtype (it becomes -inf), so "
        "a query row with no key left gives NaN in float16",
        "the finfo-based fill replaced by the familiar -1e9",
        "https://github.com/huggingface/transformers/pull/17306",
    ),
    (
        "v.padding_masks_query_rows",
        LV,
        "dots = dots.masked_fill(~mask[:, None, None, :], mask_value)",
        "dots = dots.masked_fill(~mask[:, None, :, None], mask_value)",
        ["encoder_layer"],
        "padding_mask",
        "the padding mask is applied to query rows instead of key columns, so real tokens "
        "attend padded keys",
        "the mask broadcast as [B, 1, L, 1] instead of [B, 1, 1, L]",
        "https://github.com/pytorch/pytorch/issues/41508",
    ),
    (
        "v.causal_hides_diagonal",
        LV,
        "causal_mask = torch.ones((i, j), device = x.device, dtype = torch.bool).triu(j - i + 1)",
        "causal_mask = torch.ones((i, j), device = x.device, dtype = torch.bool).triu(j - i)",
        ["encoder_layer"],
        "causal_mask",
        "the causal mask also hides the diagonal, so a token does not attend to itself",
        "the '+ 1' of the triu offset dropped",
        "",
    ),
    (
        "v.cls_token_appended",
        LV,
        "x = torch.cat((cls_tokens, x), dim=1)",
        "x = torch.cat((x, cls_tokens), dim=1)",
        ["vit"],
        "class_token",
        "the class token is placed after the patch tokens instead of in front, so the "
        "pooled token 0 is a patch",
        "the concatenation order flipped",
        "",
    ),
    (
        "v.cls_without_position",
        LV,
        "x += self.pos_embedding[:, :(n + 1)]",
        "x[:, 1:] += self.pos_embedding[:, 1:(n + 1)]",
        ["vit"],
        "positional_encoding",
        "the class token does not receive its position-embedding row",
        "positions added to the patches only, as in variants that prepend the class token "
        "after adding positions",
        "",
    ),
    (
        "v.mean_pool_includes_cls",
        LV,
        "x = x.mean(dim = 1) if self.pool == 'mean' else x[:, 0]",
        "x = x.mean(dim = 1)",
        ["vit"],
        "pooling",
        "the representation is the mean over every token, class token included, where the "
        "class token is declared",
        "the pool switch simplified to mean pooling, the vit-pytorch mean including the "
        "class token",
        "https://github.com/lucidrains/vit-pytorch/issues/226",
    ),
    (
        "v.final_norm_dropped",
        LV,
        "return self.norm(x)",
        "return x",
        ["vit"],
        "final_norm",
        "the pre-LN stack ends without its final norm",
        "the final norm moved into mlp_head in an older vit-pytorch version and lost in the merge",
        "",
    ),
    (
        "v.ffn_norm_eps_default",
        LV,
        "nn.LayerNorm(dim, eps = 1e-6),",
        "nn.LayerNorm(dim),",
        V_LAYER,
        "eps",
        "the FFN sublayer's norm uses the default epsilon, not the declared one",
        "vit-pytorch's nn.LayerNorm(dim) (eps 1e-5) kept in one place of a timm-compatible port",
        "",
    ),
    (
        "v.attention_dropout_functional",
        LV,
        "attn = self.dropout(attn)",
        "attn = torch.nn.functional.dropout(attn, p = 0.1)",
        V_LAYER,
        "dropout",
        "attention dropout stays active in evaluation mode",
        "the dropout module replaced by F.dropout, whose training argument defaults to True",
        "https://github.com/rixwew/pytorch-fm/issues/21",
    ),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    (
        "control.g_kv_heads_expand",
        GF,
        "v = v.repeat_interleave(self.n_head // self.n_local_heads, dim=1)",
        "v = v[:, :, None].expand(-1, -1, self.n_head // self.n_local_heads, -1, -1).flatten(1, 2)",
        G_ATTN,
        "expand over a new axis after the head axis, then flatten, repeats each value head in "
        "place, as repeat_interleave does",
    ),
    (
        "control.g_rms_sqrt_division",
        GF,
        "return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)",
        "return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
        G_NORM,
        "dividing by sqrt(mean square + eps) is multiplying by its reciprocal square root",
    ),
    (
        "control.g_merge_reshape",
        GF,
        "y = y.transpose(1, 2).contiguous().view(bsz, seqlen, self.n_head * self.head_dim)",
        "y = y.transpose(1, 2).reshape(bsz, seqlen, self.n_head * self.head_dim)",
        G_ATTN,
        "reshape copies when it must, so it equals contiguous().view() after the transpose",
    ),
    (
        "control.n_scale_division",
        NG,
        "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))",
        "att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))",
        ["causal_lm"],
        "dividing by sqrt(head width) is multiplying by its reciprocal",
    ),
    (
        "control.n_causal_bool",
        NG,
        "causal = self.bias[:, :, past_length:past_length + T, :S] != 0",
        "causal = self.bias[:, :, past_length:past_length + T, :S].bool()",
        N_FLASH,
        "the tril buffer holds only 0 and 1, so .bool() and != 0 give the same keep-mask",
    ),
    (
        "control.n_gelu_none",
        NG,
        "self.gelu    = nn.GELU()",
        "self.gelu    = nn.GELU(approximate='none')",
        ["ffn", "decoder_block", "causal_lm"],
        "approximate='none' is nn.GELU's default, the exact erf GELU",
    ),
    (
        "control.v_split_unflatten",
        LV,
        "return t.reshape(b, n, h, hd // h).transpose(1, 2)",
        "return t.unflatten(-1, (h, hd // h)).permute(0, 2, 1, 3)",
        V_LAYER,
        "unflatten of the last axis into (h, d) then moving h forward is the same split",
    ),
    (
        "control.v_scores_einsum",
        LV,
        "dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale",
        "dots = torch.einsum('bhid,bhjd->bhij', q, k) * self.scale",
        V_LAYER,
        "the einsum contracts the head width of q and k exactly as q @ k^T",
    ),
]


def _locate(impl: str, original: str, row_id: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == original]
    if len(hits) != 1:
        raise SystemExit(f"{row_id}: {len(hits)} lines of {impl}.py read {original!r}")
    line = lines[hits[0]]
    return hits[0] + 1, line[: len(line) - len(line.lstrip())]


def tables() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bugs = []
    for bug_id, impl, original, replacement, components, family, klass, desc, report in BUGS:
        number, indent = _locate(impl, original, bug_id)
        bugs.append(
            {
                "id": bug_id,
                "impl": impl,
                "file": f"{FOLDER}/{impl}.py",
                "line": number,
                "original": indent + original,
                "replacement": indent + replacement,
                "components": components,
                "family": family,
                "class": klass,
                "description": desc,
                "public_report": report,
                "expected_codes": list(PHASE_2.get(bug_id, ([], ""))[0]),
                "class_without_code": PHASE_2.get(bug_id, ([], ""))[1],
            }
        )
    controls = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        number, indent = _locate(impl, original, control_id)
        controls.append(
            {
                "id": control_id,
                "impl": impl,
                "file": f"{FOLDER}/{impl}.py",
                "line": number,
                "original": indent + original,
                "replacement": indent + replacement,
                "components": components,
                "why_correct": why,
            }
        )
    return bugs, controls


# Phase 2 (after the phase-1 freeze): bug id -> (expected codes, class without a code).
PHASE_2: dict[str, tuple[list[str], str]] = {
    "g.rope_freqs_precedence": (["positional.frequency_wrong"], ""),
    "g.rms_statistics_in_half": (["numerics.norm_statistics_low_precision"], ""),
    "g.rope_pairs_from_halves": (["rope.layout_half_split"], ""),
    "g.rope_first_component_sign": (["rope.not_norm_preserving"], ""),
    "g.rms_eps_outside_sqrt": (["layer_norm.eps_outside_sqrt"], ""),
    "g.rms_gain_offset_by_one": (["layer_norm.gain_plus_one"], ""),
    "g.cache_keys_one_slot_late": (
        [],
        "the cached keys are stored at slots offset from their values and from the mask's "
        "columns (keys written one index late), so each key is paired with another token's "
        "value and padding bit",
    ),
    "g.ffn_activation_on_up": (["ffn.gate_up_swapped"], ""),
    "g.keys_values_split_swapped": (["attention.qkv_order_wrong"], ""),
    "g.gqa_keys_tiled": (["attention.kv_heads_tiled"], ""),
    "g.sdpa_scale_model_width": (["attention.scale_wrong"], ""),
    "g.heads_merged_without_transpose": (["attention.heads_merged_wrong_order"], ""),
    "g.derived_positions_from_zero": (
        ["cache.rope_offset_wrong", "cache.position_offset_wrong"],
        "",
    ),
    "g.step_mask_rows_from_call_start": (
        ["cache.causal_top_left", "mask.causal_alignment_top_left"],
        "",
    ),
    "g.padding_keep_inverted": (["mask.polarity_inverted"], ""),
    "g.rope_on_values_not_keys": (["rope.applied_to_wrong_tensors"], ""),
    "g.lm_head_tied_to_embedding": (["model.head_tied_to_embedding"], ""),
    "g.layers_share_one_cache": (["cache.layers_share_pool"], ""),
    "g.float64_upcast_to_float32": (
        ["numerics.float32_island", "numerics.float64_precision_lost"],
        "",
    ),
    "g.embedding_scaled_by_sqrt_width": (["embedding.scale_on_embeddings"], ""),
    "n.layernorm_eps_timm": (["layer_norm.eps_wrong"], ""),
    "n.query_key_split_swapped": (["attention.qkv_order_wrong"], ""),
    "n.query_heads_view_without_transpose": (["attention.heads_split_wrong_order"], ""),
    "n.cache_keys_prepended": (["cache.keys_prepended"], ""),
    "n.past_length_from_head_axis": (
        [],
        "a cached call's causal mask is offset by a wrong count of cached tokens (read from "
        "another axis of the cache), neither aligned top-left nor off by one: new tokens lose "
        "cached keys or see keys after them depending on the true cache length",
    ),
    "n.is_causal_in_cached_steps": (
        ["cache.causal_top_left", "mask.causal_alignment_top_left"],
        "",
    ),
    "n.padding_keep_inverted_flash": (["mask.polarity_inverted"], ""),
    "n.padding_fill_neg_inf": (["mask.fully_masked_rows_nan"], ""),
    "n.causal_mask_multiplied": (["mask.causal_leak", "mask.added_as_bias"], ""),
    "n.scale_model_width": (["attention.scale_wrong"], ""),
    "n.softmax_in_input_dtype": (["numerics.softmax_low_precision"], ""),
    "n.mlp_gelu_tanh": (["ffn.activation_gelu_tanh"], ""),
    "n.sdpa_dropout_in_eval": (["dropout.active_in_eval"], ""),
    "n.ffn_sublayer_post_norm": (["blocks.norm_placement_post"], ""),
    "n.attention_normed_with_ln_2": (["params.read_from_other_module"], ""),
    "n.positions_from_zero_in_steps": (
        ["cache.position_offset_wrong", "cache.rope_offset_wrong"],
        "",
    ),
    "n.position_embedding_not_added": (["positional.positions_ignored"], ""),
    "n.weight_tying_commented_out": (["model.head_not_tied"], ""),
    "v.patch_flatten_channel_last": (["vit.patch_flatten_order"], ""),
    "v.patch_grid_column_major": (["vit.patch_order"], ""),
    "v.heads_split_without_transpose": (["attention.heads_split_wrong_order"], ""),
    "v.scale_multiplies": (["attention.scale_inverted"], ""),
    "v.softmax_over_queries": (["attention.softmax_axis_wrong"], ""),
    "v.mask_fill_minus_1e9": (["numerics.fill_value_overflow"], ""),
    "v.padding_masks_query_rows": (["mask.applied_to_queries"], ""),
    "v.causal_hides_diagonal": (["mask.causal_diagonal_hidden"], ""),
    "v.cls_token_appended": (["vit.pooling_wrong_token"], ""),
    "v.cls_without_position": (["vit.cls_pos_embed_missing"], ""),
    "v.mean_pool_includes_cls": (["vit.pooling_mean_with_cls"], ""),
    "v.final_norm_dropped": (["blocks.final_norm_missing"], ""),
    "v.ffn_norm_eps_default": (["layer_norm.eps_wrong"], ""),
    "v.attention_dropout_functional": (["dropout.active_in_eval"], ""),
}


def main() -> None:
    bugs, controls = tables()
    for name, rows in (("bugs.json", bugs), ("controls.json", controls)):
        text = json.dumps(rows, indent=1, ensure_ascii=False) + "\n"
        (HERE / name).write_text(text, encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
