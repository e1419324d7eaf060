# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the twenty-third blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind23/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind23"

PK = "packed_decoder"
PG = "pegasus_seq2seq"
MM = "mmpretrain_vit"
P_NORM = ["rms_norm", "decoder_block", "causal_lm"]
P_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
P_BLOCK = ["decoder_block", "causal_lm"]
P_LM = ["causal_lm"]
G_PE = ["sinusoidal_pe", "seq2seq"]
G_ALL = ["mha", "encoder_layer", "decoder_layer", "encoder", "decoder", "seq2seq"]
G_LAYERS = ["encoder_layer", "decoder_layer", "encoder", "decoder", "seq2seq"]
G_CAUSAL = ["encoder_layer", "decoder_layer", "encoder", "decoder", "seq2seq"]
G_COMBINED = ["encoder_layer", "decoder_layer", "encoder", "decoder"]
G_ENC_LAYER = ["encoder_layer", "encoder", "seq2seq"]
G_DEC_LAYER = ["decoder_layer", "decoder", "seq2seq"]
G_ENC = ["encoder", "seq2seq"]
G_S2S = ["seq2seq"]
M_PATCH = ["patch_embed", "vit"]
M_LAYER = ["encoder_layer", "encoder", "vit"]
M_MASK = ["encoder_layer", "encoder"]
M_ENC = ["encoder", "vit"]
M_VIT = ["vit"]
M_DROP = ["encoder_layer", "vit"]

PACK_LEAK = "https://github.com/hiyouga/LlamaFactory/pull/4224"
POS_RESTART = "https://github.com/huggingface/transformers/pull/32875"
GQA_TILE = "https://github.com/onnx/onnx/pull/7274"
SCALE_DIM = "https://github.com/lucidrains/vit-pytorch/issues/65"
SCALE_CHANNELS = "https://github.com/karpathy/ng-video-lecture/pull/6"
RMS_FP16 = "https://github.com/pytorch/pytorch/pull/133085"
SWIGLU_ORDER = "https://github.com/ml-explore/mlx-lm/pull/767"
RESIDUAL_NORMED = "https://github.com/Howuhh/faster-trajectory-transformer/issues/3"
FINFO_SUM = "https://github.com/NVIDIA-NeMo/Automodel/pull/2658"
MERGE_NO_PERMUTE = "https://github.com/jsbaan/transformer-from-scratch/pull/6"
MERGE_NO_PERMUTE_2 = "https://github.com/ajhalthor/Transformer-Neural-Network/issues/1"
DROPOUT_TRAINING = "https://github.com/BogiHsu/Tacotron2-PyTorch/issues/8"
CLS_POS = "https://github.com/labmlai/annotated_deep_learning_paper_implementations/pull/221"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- packed_decoder
    ("p.unpad_indices_transposed", PK,
     "indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()",
     "indices = torch.nonzero(attention_mask.t().flatten(), as_tuple=False).flatten()",
     P_ATTN, "layouts",
     "With padding, the packed row gathers the wrong tokens: the flat indices of the real tokens are counted on the length-major (transposed) keep-mask but used on the batch-major flattened batch, so tokens of the wrong rows and positions are packed into each sequence and the outputs are scattered back to those wrong places; an unpadded batch is unaffected.",
     "unpad_input counts the kept positions on attention_mask.t() (a [L, B] layout left over from a seq-first caller) while gathering from hidden_states.reshape(B * L, ...).",
     ""),
    ("p.mask_no_sequence_boundary", PK,
     "return same_sequence & (pos_k[None, :] <= pos_q[:, None])",
     "return pos_k[None, :] <= pos_q[:, None]",
     P_ATTN, "masks",
     "The packed mask loses its block-diagonal structure: a query attends not only to the earlier keys of its own sequence but to every key of every other sequence in the pack whose in-sequence position is not after its own, so different rows of the batch attend to each other.",
     "The mask keeps the per-sequence causal comparison but drops the same-sequence term: packed examples cross-contaminate.",
     PACK_LEAK),
    ("p.causal_diagonal_excluded", PK,
     "return same_sequence & (pos_k[None, :] <= pos_q[:, None])",
     "return same_sequence & (pos_k[None, :] < pos_q[:, None])",
     P_ATTN, "masks",
     "The causal comparison is strict: a token never attends to its own key, only to strictly earlier ones, and the first token of every sequence has no key at all (its score row is all -inf and its softmax NaN).",
     "`<` written for `<=` in the varlen causal mask.",
     ""),
    ("p.step_mask_top_left", PK,
     "pos_q = torch.arange(seq_q.numel()) - cu_seqlens_q.long()[:-1][seq_q] + (seqlens_k - seqlens_q)[seq_q]",
     "pos_q = torch.arange(seq_q.numel()) - cu_seqlens_q.long()[:-1][seq_q]",
     P_ATTN, "kv cache",
     "When keys outnumber queries (a cached step), the queries' positions are counted from 0 instead of from the number of cached keys: the step's causal mask is aligned top-left, so the i-th new token sees only keys 0..i of its sequence instead of every cached key and the new ones up to itself. A full forward is unaffected.",
     "The bottom-right offset (seqlens_k - seqlens_q) of flash-attn's causal varlen convention is dropped from the query positions.",
     ""),
    ("p.positions_not_offset_by_cache", PK,
     "return local + past_lengths[seq]",
     "return local",
     P_ATTN, "kv cache",
     "In cached decoding the RoPE positions of the new tokens restart at 0 in every call instead of continuing after the tokens the sequence has already cached, so new queries and keys are rotated at the wrong positions relative to the cached keys. A full forward is unaffected.",
     "position_ids_from_cu_seqlens forgets the per-sequence cache lengths.",
     ""),
    ("p.positions_not_restarted", PK,
     "local = torch.arange(seq.numel(), device=cu_seqlens.device) - cu_seqlens.long()[:-1][seq]",
     "local = torch.arange(seq.numel(), device=cu_seqlens.device)",
     P_ATTN, "rope",
     "Positions are each token's index in the packed row instead of restarting at 0 in every sequence: the second and later sequences of a pack are rotated at positions shifted by the lengths of the sequences packed before them. RoPE's relative property hides it in a full forward, but in cached decoding the shift of a sequence differs from call to call, so its new tokens are rotated inconsistently with its cached keys.",
     "The packed position ids run 0 .. total-1 over the whole pack (no reset at cu_seqlens boundaries).",
     POS_RESTART),
    ("p.gqa_heads_tiled", PK,
     "k, v = torch.repeat_interleave(k, n_rep, dim=1), torch.repeat_interleave(v, n_rep, dim=1)",
     "k, v = k.repeat(1, n_rep, 1), v.repeat(1, n_rep, 1)",
     P_ATTN, "grouped-query attention",
     "The key/value heads are tiled across the query heads (query head h served by key/value head h mod H_kv) instead of each being repeated in place for its group (head h served by h // g).",
     "repeat (tile) written for repeat_interleave when expanding the 2 key/value heads to 4 query heads.",
     GQA_TILE),
    ("p.scale_model_width", PK,
     "out = varlen_attention(xq, keys, values, batch.cu_seqlens_q, batch.cu_seqlens_k, self.head_dim ** -0.5)",
     "out = varlen_attention(xq, keys, values, batch.cu_seqlens_q, batch.cu_seqlens_k, (self.n_heads * self.head_dim) ** -0.5)",
     P_ATTN, "attention scale",
     "The attention scores are scaled by 1/sqrt(d_model) (the width of all heads together) instead of 1/sqrt(head_dim).",
     "softmax_scale passed as the model width's inverse square root.",
     SCALE_DIM),
    ("p.rotate_half_sign", PK,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.cat((x2, -x1), dim=-1)",
     P_ATTN, "rope",
     "rotate_half negates the wrong half, so every (i, i + d/2) pair of queries and keys is rotated by -theta instead of +theta: the rotation runs in the opposite direction.",
     "The sign of rotate_half moved to the first half.",
     ""),
    ("p.rmsnorm_eps_outside_sqrt", PK,
     "h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)",
     "h = h / (torch.sqrt(h.pow(2).mean(-1, keepdim=True)) + self.eps)",
     P_NORM, "normalisation",
     "RMSNorm adds epsilon to the root mean square, outside the square root, instead of to the mean square inside it.",
     "x / (rms + eps) written for x * rsqrt(ms + eps).",
     ""),
    ("p.rmsnorm_statistics_in_half", PK,
     "h = x.to(torch.promote_types(x.dtype, torch.float32))",
     "h = x",
     P_NORM, "precision",
     "In float16 and bfloat16 the RMSNorm mean square and its reciprocal root are computed in the input's half precision instead of at least float32 (float32 and float64 builds are unaffected).",
     "The upcast of the norm's input is dropped (an 'optimisation' that saves a cast).",
     RMS_FP16),
    ("p.swiglu_gate_up_swapped", PK,
     "return self.w2(F.silu(self.w1(x)) * self.w3(x))",
     "return self.w2(self.w1(x) * F.silu(self.w3(x)))",
     P_BLOCK, "feed-forward",
     "SiLU is applied to the up projection (w3) and the gate projection (w1) is left linear: the gate and up roles of SwiGLU are exchanged.",
     "The activation moved to the other factor of the gated product.",
     SWIGLU_ORDER),
    ("p.residual_from_normed_input", PK,
     "h = x + attn_out",
     "h = self.attention_norm(x) + attn_out",
     P_BLOCK, "residual/norm placement",
     "The attention sublayer's residual adds the RMS-normalised input instead of the block's raw input.",
     "The residual branch reads the normed tensor.",
     RESIDUAL_NORMED),
    ("p.cache_keys_prepended", PK,
     "keys = [torch.cat([past, new], dim=0) for past, new in zip(layer_cache[0], new_k)]",
     "keys = [torch.cat([new, past], dim=0) for past, new in zip(layer_cache[0], new_k)]",
     P_ATTN, "kv cache",
     "In a cached step each sequence's new keys are placed before its cached keys while its values stay in order, so keys and values no longer correspond (and the causal mask's key positions point at the wrong keys). A full forward is unaffected.",
     "torch.cat([new, past]) for the keys only.",
     ""),
    ("p.layers_share_first_cache", PK,
     "h, layer_cache = layer(h, batch, None if cache is None else cache[i])",
     "h, layer_cache = layer(h, batch, None if cache is None else cache[0])",
     P_LM, "kv cache",
     "In cached decoding every layer reads the first layer's cached keys and values instead of its own, so layers after the first attend to another layer's keys and values. A full forward is unaffected.",
     "The per-layer cache indexed with 0 instead of the layer's index.",
     ""),
    ("p.head_tied_to_embedding", PK,
     "return self.output(h), new_cache",
     "return F.linear(h, self.tok_embeddings.weight), new_cache",
     P_LM, "weight tying",
     "The logits are computed with the token-embedding matrix instead of the model's own untied output head, whose weight is unused.",
     "A tied-head habit carried into an untied checkpoint.",
     ""),
    # ---- pegasus_seq2seq
    ("g.pe_exponent_not_paired", PG,
     "[[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)]",
     "[[pos / np.power(10000, 2 * j / dim) for j in range(dim)] for pos in range(n_pos)]",
     G_PE, "sinusoidal tables",
     "The angle of column j uses the exponent 2j/d instead of 2*floor(j/2)/d; since the sines read the even columns and the cosines the odd ones, the sines rotate at 10000^(-4i/d) and the cosines at 10000^(-(4i+2)/d): every frequency but the first is wrong and a sine and its cosine no longer share a frequency.",
     "The j // 2 pairing of the XLM table dropped.",
     ""),
    ("g.pe_table_float32", PG,
     "out[:, 0:sentinel] = torch.tensor(np.sin(position_enc[:, 0::2]), dtype=torch.float64)",
     "out[:, 0:sentinel] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))",
     G_PE, "precision",
     "The sine half of the sinusoidal table is rounded to float32 in a float64 build (the cosine half stays float64).",
     "HF's torch.FloatTensor restored on one half of the table.",
     ""),
    ("g.positions_start_at_one", PG,
     "positions = torch.arange(past_key_values_length, past_key_values_length + seq_len, dtype=torch.long)",
     "positions = torch.arange(past_key_values_length + 1, past_key_values_length + seq_len + 1, dtype=torch.long)",
     G_S2S, "sinusoidal tables",
     "The positions of source and target tokens start at 1 instead of 0, so every token is given the next position's sinusoid.",
     "fairseq's padding_idx + 1 position offset carried into Pegasus, which has none.",
     ""),
    ("g.encoder_embed_scale_missing", PG,
     "self.embed_scale = math.sqrt(embed_dim) if config.scale_embedding else 1.0",
     "self.embed_scale = 1.0",
     G_S2S, "embeddings",
     "The encoder's token embeddings are not multiplied by sqrt(d_model) (the decoder's still are).",
     "scale_embedding ignored in the encoder.",
     ""),
    ("g.scaling_model_width", PG,
     "self.scaling = self.head_dim ** -0.5",
     "self.scaling = self.embed_dim ** -0.5",
     G_ALL, "attention scale",
     "The query is scaled by 1/sqrt(d_model) instead of 1/sqrt(head_dim) before the score matmul.",
     "scaling computed from embed_dim.",
     SCALE_CHANNELS),
    ("g.causal_mask_sees_next", PG,
     "mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)",
     "mask.masked_fill_(mask_cond < (mask_cond + 2).view(mask.size(-1), 1), 0)",
     G_CAUSAL, "masks",
     "The causal mask opens one key too many: query i may attend key i + 1, so every position sees the next token.",
     "An off-by-one in _make_causal_mask's comparison.",
     ""),
    ("g.padding_mask_polarity", PG,
     "inverted_mask = 1.0 - expanded_mask",
     "inverted_mask = expanded_mask",
     G_ALL, "masks",
     "The padding keep-mask is not inverted before it becomes the additive bias: real tokens get finfo.min and padding tokens 0 (the mask's polarity is inverted).",
     "_expand_mask forgets the 1 - mask.",
     ""),
    ("g.masks_summed_overflow", PG,
     "combined_attention_mask = combined_attention_mask.masked_fill(expanded_attn_mask.bool(), torch.finfo(dtype).min)",
     "combined_attention_mask = combined_attention_mask + expanded_attn_mask",
     G_COMBINED, "masks",
     "The causal and padding biases are added instead of combined: where both mask a key the bias is 2 * finfo.min, which overflows to -inf. A query row with some allowed key is unchanged, but a row whose keys are all masked (a left pad under the causal mask) is no longer the declared uniform average over every key: the doubly masked keys drop out of it, and a row whose keys are all doubly masked is NaN.",
     "The two finfo.min planes summed.",
     FINFO_SUM),
    ("g.cross_attention_mask_dropped", PG,
     "hidden_states = self.encoder_attn(hidden_states=hidden_states, key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask)",
     "hidden_states = self.encoder_attn(hidden_states=hidden_states, key_value_states=encoder_hidden_states, attention_mask=None)",
     G_DEC_LAYER, "masks",
     "Cross-attention ignores the source padding mask: decoder queries attend padded encoder positions.",
     "encoder_attention_mask not passed to encoder_attn.",
     ""),
    ("g.encoder_final_norm_missing", PG,
     "hidden_states = self.layer_norm(hidden_states)  # the encoder's final layer_norm",
     "hidden_states = hidden_states  # the encoder's final layer_norm",
     G_ENC, "residual/norm placement",
     "The encoder stack's final LayerNorm is not applied (its parameters are unused): the memory is the last layer's un-normalised residual stream.",
     "The encoder's closing layer_norm removed.",
     ""),
    ("g.encoder_attention_uses_ffn_norm", PG,
     "hidden_states = self.self_attn_layer_norm(hidden_states)  # encoder self-attention block",
     "hidden_states = self.final_layer_norm(hidden_states)  # encoder self-attention block",
     G_ENC_LAYER, "normalisation",
     "The encoder layer's attention sublayer is normalised with the feed-forward sublayer's LayerNorm parameters instead of its own, which are unused.",
     "final_layer_norm copy-pasted into the attention block.",
     ""),
    ("g.decoder_ffn_residual_after_norm", PG,
     "hidden_states = self.final_layer_norm(hidden_states)  # decoder feed-forward block",
     "hidden_states = residual = self.final_layer_norm(hidden_states)  # decoder feed-forward block",
     G_DEC_LAYER, "residual/norm placement",
     "In the decoder layer's feed-forward sublayer the residual is taken after the LayerNorm, so the normalised input is added back instead of the un-normalised stream.",
     "residual re-bound to the normed tensor.",
     RESIDUAL_NORMED),
    ("g.activation_config_default", PG,
     'activation_function: str = "relu"',
     'activation_function: str = "gelu"',
     G_LAYERS, "feed-forward",
     "The FFN activation is exact GELU instead of ReLU.",
     "The configuration's default activation (gelu) differs from the checkpoints' (relu) and the conversion does not set it.",
     ""),
    ("g.heads_merged_without_transpose", PG,
     "attn_output = attn_output.transpose(1, 2)",
     "attn_output = attn_output.view(bsz, tgt_len, self.num_heads, self.head_dim)",
     G_ALL, "head split/merge",
     "The heads are merged without moving the head axis behind the sequence axis: the [B, H, T, d] output is reinterpreted as [B, T, H, d], mixing positions and heads before the output projection.",
     "A view where a transpose is needed.",
     MERGE_NO_PERMUTE),
    ("g.softmax_over_queries", PG,
     "attn_weights = F.softmax(attn_weights, dim=-1, dtype=upcast).to(value_states.dtype)",
     "attn_weights = F.softmax(attn_weights, dim=1, dtype=upcast).to(value_states.dtype)",
     G_ALL, "softmax",
     "The softmax normalises over the query axis instead of the key axis.",
     "dim=1 of the [B*H, T, S] scores.",
     ""),
    ("g.attention_dropout_in_eval", PG,
     "attn_probs = F.dropout(attn_weights, p=self.dropout, training=self.training)",
     "attn_probs = F.dropout(attn_weights, p=self.dropout)",
     G_ALL, "dropout",
     "Dropout on the attention probabilities is active in evaluation mode (functional dropout's training flag left at its default, True).",
     "training=self.training dropped.",
     DROPOUT_TRAINING),
    ("g.lm_head_untied_copy", PG,
     "self.lm_head.weight = self.shared.weight",
     "self.lm_head.weight = nn.Parameter(self.shared.weight.detach().clone())",
     G_S2S, "weight tying",
     "The output projection is a copy of the embedding made at construction instead of the same tensor: once weights are loaded or trained the logits use a stale matrix, and the model holds an extra V x D parameter.",
     "Tying replaced by a clone.",
     ""),
    ("g.value_from_key_projection", PG,
     "value_states = self._shape(self.v_proj(v_input), -1, bsz)",
     "value_states = self._shape(self.k_proj(v_input), -1, bsz)",
     G_ALL, "projections",
     "The values are computed with the key projection instead of the value projection, whose weights are unused.",
     "k_proj copy-pasted into the value line.",
     ""),
    # ---- mmpretrain_vit
    ("m.patch_tokens_reshaped", MM,
     "x = x.flatten(2).transpose(1, 2)",
     "x = x.flatten(2).reshape(x.shape[0], -1, self.embed_dims)",
     M_PATCH, "vit patchify",
     "The conv output [B, D, N] is reshaped to [B, N, D] instead of transposed, so each token takes D consecutive values of the channel-major buffer, mixing channels and patches.",
     "reshape for transpose after flatten(2).",
     ""),
    ("m.patch_grid_column_major", MM,
     "x = x.flatten(2).transpose(1, 2)",
     "x = x.transpose(2, 3).flatten(2).transpose(1, 2)",
     M_PATCH, "vit patchify",
     "The patch tokens are ordered column by column over the grid instead of row by row.",
     "The feature map's H and W axes swapped before flattening.",
     ""),
    ("m.cls_token_appended", MM,
     "x = torch.cat((cls_token, x), dim=1)",
     "x = torch.cat((x, cls_token), dim=1)",
     M_VIT, "vit class token",
     "The class token is appended after the patch tokens instead of prepended: the first position embedding goes to the first patch, and the head reads the first patch token.",
     "Concatenation order reversed.",
     ""),
    ("m.cls_without_position", MM,
     "x = x + resize_pos_embed(self.pos_embed, self.patch_resolution, patch_resolution, mode=self.interpolate_mode, num_extra_tokens=self.num_extra_tokens)",
     "x = torch.cat((x[:, :1], x[:, 1:] + self.pos_embed[:, 1:]), dim=1)",
     M_VIT, "vit position embedding",
     "The class token receives no position embedding: only the patch tokens get theirs, and pos_embed's row 0 is unused.",
     "Position embedding added to the patch tokens only.",
     CLS_POS),
    ("m.pooling_mean_all_tokens", MM,
     "return x[:, 0]",
     "return x.mean(dim=1)",
     M_VIT, "pooling",
     "The image representation is the mean over all tokens, class token included, instead of the class token.",
     "out_type 'cls_token' computed as a global average.",
     ""),
    ("m.final_norm_never_applied", MM,
     "if i == len(self.layers) - 1 and self.final_norm:",
     "if i == len(self.layers) and self.final_norm:",
     M_ENC, "residual/norm placement",
     "The final LayerNorm is never applied (an off-by-one in the last-layer test): the encoder's output is the last layer's un-normalised stream.",
     "len(self.layers) for len(self.layers) - 1.",
     ""),
    ("m.final_norm_every_layer", MM,
     "if i == len(self.layers) - 1 and self.final_norm:",
     "if self.final_norm:",
     M_ENC, "residual/norm placement",
     "The final LayerNorm is applied after every layer instead of only after the last one, so intermediate layers' outputs are normalised before the next layer.",
     "The last-layer test dropped.",
     ""),
    ("m.qkv_split_heads_first", MM,
     "qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dims).permute(2, 0, 3, 1, 4)",
     "qkv = self.qkv(x).reshape(B, N, self.num_heads, 3, self.head_dims).permute(3, 0, 2, 1, 4)",
     M_LAYER, "fused projections",
     "The fused qkv output is split as (heads, 3, head_dims) instead of (3, heads, head_dims): queries, keys and values are read from interleaved per-head slices, not from the q, k and v thirds of the fused weight.",
     "The (3, heads) reshape order swapped.",
     ""),
    ("m.heads_merged_without_transpose", MM,
     "x = x.transpose(1, 2).reshape(B, N, self.embed_dims)",
     "x = x.reshape(B, N, self.embed_dims)",
     M_LAYER, "head split/merge",
     "The heads are merged by reshaping [B, heads, N, head_dims] straight to [B, N, D] without the transpose, mixing positions and heads.",
     "transpose(1, 2) dropped.",
     MERGE_NO_PERMUTE_2),
    ("m.scale_reciprocal_confused", MM,
     "scale = scale or query.size(-1) ** 0.5",
     "scale = scale or query.size(-1) ** -0.5",
     M_LAYER, "attention scale",
     "The scores are divided by 1/sqrt(d) (multiplied by sqrt(d)) instead of divided by sqrt(d).",
     "The pyimpl's divisor confused with MultiheadAttention's multiplier head_dims ** -0.5.",
     ""),
    ("m.mask_polarity", MM,
     'attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(~attn_mask, -float("inf"))',
     'attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(attn_mask, -float("inf"))',
     M_MASK, "masks",
     "The boolean keep-mask becomes the additive bias with the wrong polarity: keys that may be attended get -inf and masked keys 0.",
     "The ~ dropped.",
     ""),
    ("m.ffn_identity_normalised", MM,
     "x = self.ffn(self.ln2(x), identity=x)",
     "x = self.ffn(self.ln2(x))",
     M_LAYER, "residual/norm placement",
     "The feed-forward sublayer's residual is the normalised input (FFN's identity defaults to its own input) instead of the un-normalised stream.",
     "identity=x not passed to mmcv's FFN.",
     RESIDUAL_NORMED),
    ("m.attention_post_norm", MM,
     "x = x + self.attn(self.ln1(x), attn_mask=attn_mask)",
     "x = self.ln1(x + self.attn(x, attn_mask=attn_mask))",
     M_LAYER, "residual/norm placement",
     "The attention sublayer is in post-LN form (attention on the raw stream, LayerNorm after the residual add) in a pre-LN model.",
     "A post-norm line from another backbone.",
     ""),
    ("m.act_cfg_not_forwarded", MM,
     'dropout_layer=dict(type="DropPath", drop_prob=drop_path_rate), act_cfg=act_cfg)',
     'dropout_layer=dict(type="DropPath", drop_prob=drop_path_rate))',
     M_LAYER, "feed-forward",
     "The FFN activation is ReLU instead of GELU: the layer's act_cfg is not passed to FFN, whose default is ReLU.",
     "act_cfg dropped from the FFN's config.",
     ""),
    ("m.norm_eps_not_forwarded", MM,
     "layer = NORM_LAYERS[layer_type](num_features, **cfg_)",
     "layer = NORM_LAYERS[layer_type](num_features)",
     M_LAYER, "normalisation",
     "Every LayerNorm is built with PyTorch's default epsilon 1e-5 instead of the configured 1e-6.",
     "build_norm_layer drops the cfg's keyword arguments.",
     ""),
    ("m.proj_dropout_functional", MM,
     "x = self.out_drop(self.proj_drop(x))",
     "x = self.out_drop(F.dropout(x, self.proj_drop.p))",
     M_DROP, "dropout",
     "Dropout after the attention output projection is active in evaluation mode (functional dropout's training flag left at its default, True).",
     "nn.Dropout module replaced by F.dropout without training=self.training.",
     DROPOUT_TRAINING),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.p.repeat_kv_expand", PK,
     "k, v = torch.repeat_interleave(k, n_rep, dim=1), torch.repeat_interleave(v, n_rep, dim=1)",
     "k, v = (t[:, :, None, :].expand(t.shape[0], t.shape[1], n_rep, t.shape[2]).reshape(t.shape[0], -1, t.shape[2]) for t in (k, v))",
     P_ATTN,
     "Meta's repeat_kv (expand a new axis after the heads, then reshape) repeats each key/value head in place, exactly as repeat_interleave does."),
    ("control.p.rotate_half_stack", PK,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.stack((-x2, x1), dim=-2).flatten(-2)",
     P_ATTN,
     "Stacking the two halves on a new second-to-last axis and flattening it lays them out as (-x2, x1), the same tensor as the concatenation."),
    ("control.p.rmsnorm_divide_sqrt", PK,
     "h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)",
     "h = h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)",
     P_NORM,
     "Dividing by the square root of (mean square + eps) is multiplying by its reciprocal square root; eps stays inside the root."),
    ("control.g.scaling_reciprocal_sqrt", PG,
     "self.scaling = self.head_dim ** -0.5",
     "self.scaling = 1.0 / math.sqrt(self.head_dim)",
     G_ALL,
     "1 / sqrt(head_dim) is head_dim ** -0.5."),
    ("control.g.expand_mask_eq_zero", PG,
     "inverted_mask = 1.0 - expanded_mask",
     "inverted_mask = (expanded_mask == 0).to(dtype)",
     G_ALL,
     "For a 0/1 mask, (mask == 0) is 1 exactly where 1 - mask is 1, and 0 elsewhere."),
    ("control.g.merge_permute", PG,
     "attn_output = attn_output.transpose(1, 2)",
     "attn_output = attn_output.permute(0, 2, 1, 3)",
     G_ALL,
     "permute(0, 2, 1, 3) of a 4-D tensor is transpose(1, 2)."),
    ("control.m.cls_token_repeat", MM,
     "cls_token = self.cls_token.expand(B, -1, -1)",
     "cls_token = self.cls_token.repeat(B, 1, 1)",
     M_VIT,
     "repeat copies the class token B times where expand broadcasts it; the values are the same."),
    ("control.m.cls_token_select", MM,
     "return x[:, 0]",
     "return x.select(1, 0)",
     M_VIT,
     "select(1, 0) is indexing position 0 of axis 1, the class token."),
]

# Phase 2 only: bug id -> (expected codes, class without code)
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {stripped!r} occurs {len(hits)} times")
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
    for bug_id, impl, original, replacement, components, family, klass, description, report in BUGS:
        codes, without = PHASE_2.get(bug_id, ([], ""))
        bugs.append({
            "id": bug_id, **_row(impl, original, replacement), "components": components,
            "family": family, "class": klass, "description": description,
            "public_report": report, "expected_codes": codes, "class_without_code": without,
        })
    controls = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        controls.append({
            "id": control_id, **_row(impl, original, replacement), "components": components,
            "why_correct": why,
        })
    (HERE / "bugs.json").write_text(json.dumps(bugs, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(controls, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
