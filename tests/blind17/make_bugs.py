# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the seventeenth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind17/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind17"

SC = "starcoder2_decoder"
NM = "opennmt_seq2seq"
JV = "jeonsworld_vit"
S_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
S_BLOCK = ["decoder_block", "causal_lm"]
S_LM = ["causal_lm"]
N_PE = ["sinusoidal_pe", "seq2seq"]
N_ALL = ["mha", "encoder_layer", "decoder_layer", "encoder", "decoder", "seq2seq"]
N_LAYERS = ["encoder_layer", "decoder_layer", "encoder", "decoder", "seq2seq"]
N_ENC = ["encoder_layer", "encoder", "seq2seq"]
N_DEC = ["decoder_layer", "decoder", "seq2seq"]
N_S2S = ["seq2seq"]
J_PATCH = ["patch_embed", "vit"]
J_LAYER = ["encoder_layer", "encoder", "vit"]
J_VIT = ["vit"]

GQA_TILE = "https://github.com/onnx/onnx/pull/7274"
ROPE_TABLE = "https://github.com/huggingface/transformers/issues/40462"
WINDOW_EXTRA_KEY = "https://github.com/ml-explore/mlx-lm/pull/390"
MASKED_ROW_NAN = "https://github.com/tracel-ai/burn/pull/4697"
EXACT_GELU_ON_TANH = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/pull/4661"
TANH_GELU_ON_EXACT = "https://github.com/NVIDIA/TensorRT-Model-Connect/issues/663"
SCALE_BY_WIDTH = "https://github.com/karpathy/ng-video-lecture/pull/6"
MERGE_NO_PERMUTE = "https://github.com/jsbaan/transformer-from-scratch/pull/6"
SPLIT_BY_VIEW = "https://github.com/hyunwoongko/transformer/issues/15"
HALF_FILL = "https://github.com/facebookresearch/fairseq/issues/3575"
F_DROPOUT = "https://github.com/pytorch/pytorch/issues/26338"
CLS_POS = "https://github.com/labmlai/annotated_deep_learning_paper_implementations/pull/221"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- starcoder2_decoder
    ("s.repeat_kv_tiled", SC,
     "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
     "hidden_states = hidden_states[:, None, :, :, :].expand(batch, n_rep, num_key_value_heads, slen, head_dim)",
     S_ATTN, "grouped-query attention",
     "the key/value heads are tiled across the query heads instead of repeated in place: query head h is served by key/value head h mod H_kv rather than h // (H/H_kv)",
     "repeat_kv rewritten with the new axis before the key/value heads (a tile, as an ONNX or einops port writes it), so each group of query heads reads the wrong key/value head",
     GQA_TILE),
    ("s.rotate_half_sign", SC,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.cat((x2, -x1), dim=-1)",
     S_ATTN, "rope",
     "RoPE rotates every pair by the negative angle (the sine term has the wrong sign): queries and keys are rotated clockwise instead of counter-clockwise",
     "rotate_half with the signs of its two halves swapped, as a hand port of the rotation matrix writes it",
     ""),
    ("s.rope_table_repeat_interleave", SC,
     "emb = torch.cat((freqs, freqs), dim=-1)",
     "emb = freqs.repeat_interleave(2, dim=-1)",
     S_ATTN, "rope",
     "the RoPE cos/sin table is laid out for adjacent pairs (each frequency repeated twice in place) while the rotation pairs channel i with channel i + d/2: channels get the angles of other pairs, so the rotation is no longer a rotation of the pairs it mixes",
     "the frequency table built with repeat_interleave (the interleaved layout) under a half-split rotate_half, the 'fix' proposed for HF's RoPE",
     ROPE_TABLE),
    ("s.rope_theta_converted", SC,
     "rope_theta: float = 10000.0",
     "rope_theta: float = 100000.0",
     S_ATTN, "rope",
     "RoPE frequency base 100000 instead of the declared 10000: every rotation frequency is wrong",
     "the config default copied from a larger StarCoder2 checkpoint (rope_theta 1e5) into the small model declared with base 10000",
     ""),
    ("s.sliding_window_off_by_one", SC,
     "hidden = hidden | (key_position[None, :] <= cache_position[:, None] - sliding_window)",
     "hidden = hidden | (key_position[None, :] < cache_position[:, None] - sliding_window)",
     S_ATTN, "masks",
     "the sliding window keeps w + 1 keys (own included) instead of w: the key exactly w positions back stays visible",
     "the window comparison written with < instead of <=",
     WINDOW_EXTRA_KEY),
    ("s.padding_mask_polarity", SC,
     "padding_mask = attention_mask[:, None, None, :] == 0",
     "padding_mask = attention_mask[:, None, None, :] == 1",
     S_ATTN, "masks",
     "the 2-D attention mask is read with the wrong polarity: real tokens are hidden and padding is attended",
     "the padding test written against 1 (keep) instead of 0 (pad) when the mask is filled",
     ""),
    ("s.causal_diagonal_hidden", SC,
     "hidden = key_position[None, :] > cache_position[:, None]",
     "hidden = key_position[None, :] >= cache_position[:, None]",
     S_ATTN, "masks",
     "the causal mask also hides the diagonal: a token cannot attend to its own key (and the first token has no key at all)",
     "the causal comparison written >= instead of >",
     ""),
    ("s.cache_position_not_offset", SC,
     "cache_position = torch.arange(past_key_values_length, target_length)",
     "cache_position = torch.arange(query_length)",
     S_ATTN, "kv cache",
     "with cached keys the causal mask of the new tokens is aligned to the first key instead of the last: new query i sees keys 0..i instead of keys up to past + i",
     "the query positions of the mask counted from 0 within the call, forgetting the cache length",
     ""),
    ("s.cache_keys_prepended", SC,
     "key_states = torch.cat([past_key_value[0], key_states], dim=-2)",
     "key_states = torch.cat([key_states, past_key_value[0]], dim=-2)",
     S_ATTN, "kv cache",
     "the new keys are put before the cached keys while the values stay in order: keys and values no longer correspond, and the mask over key index hides the wrong keys",
     "the key concatenation written in the wrong order (the value line is right)",
     ""),
    ("s.scaling_hidden_size", SC,
     "self.scaling = self.head_dim ** -0.5",
     "self.scaling = config.hidden_size ** -0.5",
     S_ATTN, "attention scale",
     "scores scaled by 1/sqrt(D) (the model width) instead of 1/sqrt(d_k) (the head width)",
     "the scaling computed from hidden_size, as single-head code writes it",
     ""),
    ("s.softmax_in_float32", SC,
     "softmax_dtype = torch.promote_types(query_states.dtype, torch.float32)",
     "softmax_dtype = torch.float32",
     S_ATTN, "precision",
     "the softmax is computed in float32 even in a float64 build: the probabilities are rounded to float32 (float64 precision lost in an undeclared float32 step), and the float64 mask fill (finfo(float64).min) overflows to -inf in float32, so a query row with no visible key becomes NaN",
     "HF's eager attention line (softmax(dtype=torch.float32)) kept verbatim in a model built in float64",
     ""),
    ("s.gelu_exact", SC,
     "self.act = lambda t: F.gelu(t, approximate=\"tanh\")  # ACT2FN[\"gelu_pytorch_tanh\"]",
     "self.act = lambda t: F.gelu(t)  # ACT2FN[\"gelu_pytorch_tanh\"]",
     S_BLOCK, "feed-forward",
     "the MLP uses the exact erf GELU where the model (and its declaration) uses the tanh approximation",
     "ACT2FN's 'gelu_pytorch_tanh' replaced by plain F.gelu during a port",
     EXACT_GELU_ON_TANH),
    ("s.mlp_reads_residual", SC,
     "hidden_states = self.mlp(hidden_states)",
     "hidden_states = self.mlp(residual)",
     S_BLOCK, "residual/norm placement",
     "the MLP sublayer is fed the un-normalised residual stream: its pre-norm is computed and then bypassed",
     "the MLP called on the residual variable instead of the normalised hidden states",
     ""),
    ("s.head_untied", SC,
     "self.lm_head.weight = self.model.embed_tokens.weight",
     "self.lm_head.weight = nn.Parameter(self.model.embed_tokens.weight.clone())",
     S_LM, "weight tying",
     "the output projection is a copy of the embedding made at construction, not the embedding itself: loading the embedding leaves the head at its initial values (tie broken)",
     "tie_word_embeddings implemented with clone() (a separate parameter) instead of sharing the tensor",
     ""),
    ("s.heads_merged_without_transpose", SC,
     "attn_output = attn_output.transpose(1, 2).contiguous()",
     "attn_output = attn_output.contiguous()",
     S_ATTN, "head split/merge",
     "the heads are merged from the [B, H, L, d] layout without moving the head axis next to the width: each output row mixes several positions of one head",
     "the transpose before the reshape dropped when the attention backend was swapped",
     ""),
    ("s.mask_fill_neg_inf", SC,
     "min_dtype = torch.finfo(dtype).min",
     "min_dtype = float(\"-inf\")",
     S_ATTN, "masks",
     "the mask uses -inf instead of the dtype's minimum: a query row with no visible key (a left pad) becomes NaN instead of a uniform average, and in a stack that NaN reaches the real rows through the padded values (0 * NaN)",
     "the additive mask filled with -inf, as older mask helpers did",
     MASKED_ROW_NAN),
    ("s.embeddings_scaled", SC,
     "inputs_embeds = self.embed_tokens(input_ids)",
     "inputs_embeds = self.embed_tokens(input_ids) * math.sqrt(self.config.hidden_size)",
     S_LM, "embeddings",
     "the token embeddings are multiplied by sqrt(D) although the model declares no embedding scale",
     "Gemma's normaliser copied into a model that has none",
     ""),
    # ---- opennmt_seq2seq
    ("n.pe_div_sign", NM,
     "div_term = torch.exp((torch.arange(0, dim, 2, dtype=torch.float64) * -(math.log(10000.0) / dim)))",
     "div_term = torch.exp((torch.arange(0, dim, 2, dtype=torch.float64) * (math.log(10000.0) / dim)))",
     N_PE, "sinusoidal tables",
     "the sinusoidal frequencies are 10000^(+2i/d) instead of 10000^(-2i/d): the exponent's sign is lost, so frequencies grow with the channel",
     "the minus sign of the div_term exponent dropped",
     ""),
    ("n.pe_freqs_float32", NM,
     "div_term = torch.exp((torch.arange(0, dim, 2, dtype=torch.float64) * -(math.log(10000.0) / dim)))",
     "div_term = torch.exp((torch.arange(0, dim, 2, dtype=torch.float) * -(math.log(10000.0) / dim)))",
     N_PE, "precision",
     "the sinusoidal frequencies are computed in float32 (OpenNMT's dtype=torch.float) in a float64 build: the table's angles carry float32 rounding, an undeclared float32 step",
     "the original OpenNMT line kept (dtype=torch.float) while the rest of the table is float64",
     ""),
    ("n.seq_first_by_view", NM,
     "memory_bank = self.encoder(src_emb.transpose(0, 1).contiguous(), src_pad_mask)",
     "memory_bank = self.encoder(src_emb.view(src_emb.size(1), src_emb.size(0), -1), src_pad_mask)",
     N_S2S, "layouts",
     "the sequence-first embeddings are reinterpreted as batch-first by a view instead of a transpose: tokens of different sentences are mixed into one sequence",
     "the seq-first to batch-first change written as a view of the swapped sizes",
     ""),
    ("n.scale_model_dim", NM,
     "query = query / math.sqrt(dim_per_head)",
     "query = query / math.sqrt(self.model_dim)",
     N_ALL, "attention scale",
     "queries scaled by 1/sqrt(D) (the model width) instead of 1/sqrt(d_k) (the head width)",
     "the scale taken from model_dim instead of dim_per_head",
     SCALE_BY_WIDTH),
    ("n.src_pad_mask_inverted", NM,
     "src_pad_mask = src.transpose(0, 1).eq(self.padding_idx).unsqueeze(1)  # [B, 1, src_len]",
     "src_pad_mask = src.transpose(0, 1).ne(self.padding_idx).unsqueeze(1)  # [B, 1, src_len]",
     N_S2S, "masks",
     "the source padding mask has the wrong polarity: the real source tokens are hidden from the encoder and from cross-attention, the pads are attended",
     "eq written ne when the mask's convention (True = hide) was confused with a keep-mask",
     ""),
    ("n.future_mask_diagonal", NM,
     "future_mask = torch.triu(torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=inputs.device), 1)",
     "future_mask = torch.triu(torch.ones(tgt_len, tgt_len, dtype=torch.bool, device=inputs.device), 0)",
     N_DEC, "masks",
     "the decoder's future mask also hides the diagonal: a target token cannot attend to itself (the first one to nothing)",
     "triu's diagonal offset 1 written 0",
     ""),
    ("n.cross_attention_query_unnormed", NM,
     "mid, attns = self.context_attn(memory_bank, memory_bank, query_norm, mask=src_pad_mask)",
     "mid, attns = self.context_attn(memory_bank, memory_bank, query, mask=src_pad_mask)",
     N_DEC, "residual/norm placement",
     "the cross-attention queries come from the un-normalised residual stream: the second pre-norm is computed and bypassed",
     "the context attention called with the residual variable instead of its normalised copy",
     ""),
    ("n.ffn_norm_skipped", NM,
     "inter = self.dropout_1(self.relu(self.w_1(self.layer_norm(x))))",
     "inter = self.dropout_1(self.relu(self.w_1(x)))",
     N_LAYERS, "normalisation",
     "the feed-forward sublayer has no pre-norm: its input is the raw residual stream",
     "the feed-forward's own layer_norm dropped, as a post-LN rewrite of PositionwiseFeedForward does",
     ""),
    ("n.ffn_gelu", NM,
     "self.relu = nn.ReLU()",
     "self.relu = nn.GELU()",
     N_LAYERS, "feed-forward",
     "the feed-forward activation is GELU where the model declares ReLU",
     "pos_ffn_activation_fn's gelu wired in for a ReLU model",
     ""),
    ("n.encoder_final_norm_missing", NM,
     "out = self.layer_norm(out)",
     "out = out",
     ["encoder", "seq2seq"], "residual/norm placement",
     "the pre-LN encoder stack ends without its final layer norm",
     "the encoder's closing layer_norm removed (a post-LN habit)",
     ""),
    ("n.unshape_without_transpose", NM,
     "return x.transpose(1, 2).contiguous().view(batch_size, -1, head_count * dim_per_head)",
     "return x.contiguous().view(batch_size, -1, head_count * dim_per_head)",
     N_ALL, "head split/merge",
     "the heads are merged without moving the head axis back next to the width: output rows mix positions of one head",
     "unshape's transpose lost",
     MERGE_NO_PERMUTE),
    ("n.shape_by_view", NM,
     "return x.view(batch_size, -1, head_count, dim_per_head).transpose(1, 2)",
     "return x.view(batch_size, head_count, -1, dim_per_head)",
     N_ALL, "head split/merge",
     "the heads are split by viewing [B, L, D] as [B, H, L, d] directly: each head holds slices of different positions, not one slice of every position",
     "shape written as one view to the target layout, skipping the transpose",
     SPLIT_BY_VIEW),
    ("n.scores_in_half", NM,
     "scores = query_key.to(torch.promote_types(query_key.dtype, torch.float32))",
     "scores = query_key",
     N_ALL, "precision",
     "the scores stay in the input dtype: in float16 the -1e18 fill does not fit the dtype (masked_fill overflows) and the softmax runs in half precision",
     "OpenNMT's scores.float() dropped in a half-precision cleanup",
     HALF_FILL),
    ("n.generator_log_softmax", NM,
     "return self.generator(dec_out)",
     "return torch.log_softmax(self.generator(dec_out), dim=-1)",
     N_S2S, "logits",
     "the model returns log-probabilities (log_softmax of the logits) instead of logits",
     "OpenNMT's generator (Linear + LogSoftmax) kept whole",
     ""),
    ("n.tgt_embedding_untied", NM,
     "tgt_emb.word_lut.weight = src_emb.word_lut.weight  # share_embeddings",
     "tgt_emb.word_lut.weight = nn.Parameter(src_emb.word_lut.weight.clone())  # share_embeddings",
     N_S2S, "weight tying",
     "the target embedding is a construction-time copy of the source table, not the shared table: after loading, the target tokens are embedded with the initial values",
     "share_embeddings implemented with clone()",
     ""),
    ("n.dropout_functional", NM,
     "out = self.dropout(context) + inputs",
     "out = F.dropout(context, 0.1) + inputs",
     N_ENC, "dropout",
     "dropout on the encoder's attention output is active in evaluation mode (the functional form ignores eval)",
     "nn.Dropout replaced by F.dropout without training=self.training",
     F_DROPOUT),
    # ---- jeonsworld_vit
    ("j.scale_all_head_size", JV,
     "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
     "attention_scores = attention_scores / math.sqrt(self.all_head_size)",
     J_LAYER, "attention scale",
     "scores divided by sqrt(D) (all heads' width) instead of sqrt(d_k) (one head's width)",
     "all_head_size written for attention_head_size",
     SCALE_BY_WIDTH),
    ("j.softmax_over_queries", JV,
     "self.softmax = Softmax(dim=-1)",
     "self.softmax = Softmax(dim=-2)",
     J_LAYER, "softmax",
     "the softmax normalises over the queries (dim -2) instead of over the keys",
     "Softmax's dim written -2",
     ""),
    ("j.split_heads_by_reshape", JV,
     "return x.permute(0, 2, 1, 3)",
     "return x.reshape(x.size(0), self.num_attention_heads, -1, self.attention_head_size)",
     J_LAYER, "head split/merge",
     "the heads are split by reshaping [B, L, H, d] to [B, H, L, d] instead of permuting: each head holds slices of several positions",
     "transpose_for_scores' permute replaced by a reshape",
     ""),
    ("j.merge_heads_wrong_permute", JV,
     "context_layer = context_layer.permute(0, 2, 1, 3).contiguous()",
     "context_layer = context_layer.permute(0, 2, 3, 1).contiguous()",
     J_LAYER, "head split/merge",
     "the heads are merged in the wrong order: the output width is laid out channel-major across heads (d, H) instead of head-major (H, d)",
     "the merge permute written (0, 2, 3, 1)",
     ""),
    ("j.gelu_tanh", JV,
     "self.act_fn = ACT2FN[\"gelu\"]",
     "self.act_fn = lambda x: torch.nn.functional.gelu(x, approximate=\"tanh\")",
     J_LAYER, "feed-forward",
     "the MLP uses the tanh approximation of GELU where the model declares the exact erf GELU",
     "flax's nn.gelu default (approximate) carried into the PyTorch port",
     TANH_GELU_ON_EXACT),
    ("j.cls_without_position", JV,
     "embeddings = x + self.position_embeddings",
     "embeddings = torch.cat((x[:, :1], x[:, 1:] + self.position_embeddings[:, 1:]), dim=1)",
     J_VIT, "vit position embedding",
     "the class token receives no position embedding (row 0 of the table is never added); the patches get theirs",
     "position embeddings added to the patch tokens only, as code that keeps the class token apart does",
     CLS_POS),
    ("j.cls_appended", JV,
     "x = torch.cat((cls_tokens, x), dim=1)",
     "x = torch.cat((x, cls_tokens), dim=1)",
     J_VIT, "vit class token",
     "the class token is appended after the patches instead of prepended: the head reads the first patch token, and the position rows are shifted by one",
     "the concatenation order reversed",
     ""),
    ("j.pooling_mean", JV,
     "logits = self.head(x[:, 0])",
     "logits = self.head(x.mean(dim=1))",
     J_VIT, "pooling",
     "the head reads the mean over all tokens, the class token included, instead of the class token",
     "the classifier='gap' pooling used on a token-classifier model",
     ""),
    ("j.patch_tokens_by_reshape", JV,
     "x = x.transpose(-1, -2)",
     "x = x.reshape(x.shape[0], -1, x.shape[1])",
     J_PATCH, "vit patchify",
     "the [B, D, N] patch map is reshaped to [B, N, D] instead of transposed: each token mixes channels of different patches",
     "the transpose written as a reshape",
     ""),
    ("j.patch_grid_column_major", JV,
     "x = x.flatten(2)",
     "x = x.transpose(-1, -2).flatten(2)",
     J_PATCH, "vit patchify",
     "the patch grid is flattened column by column (W before H) instead of row by row: patch (r, c) becomes token c * (H/p) + r",
     "the spatial axes swapped before flatten, as an NHWC port does",
     ""),
    ("j.encoder_norm_missing", JV,
     "encoded = self.encoder_norm(hidden_states)",
     "encoded = hidden_states",
     ["encoder", "vit"], "residual/norm placement",
     "the pre-LN encoder stack ends without its final layer norm",
     "encoder_norm skipped",
     ""),
    ("j.ffn_reads_residual", JV,
     "x = self.ffn(x)",
     "x = self.ffn(h)",
     J_LAYER, "residual/norm placement",
     "the MLP is fed the un-normalised residual stream: ffn_norm is computed and bypassed",
     "the MLP called on the saved residual h",
     ""),
    ("j.ffn_uses_attention_norm", JV,
     "x = self.ffn_norm(x)",
     "x = self.attention_norm(x)",
     J_LAYER, "normalisation",
     "the MLP sublayer is normalised with the attention sublayer's norm parameters (gain and shift) instead of its own",
     "copy-paste of the attention branch's norm call",
     ""),
    ("j.attention_norm_eps", JV,
     "self.attention_norm = LayerNorm(config.hidden_size, eps=1e-6)",
     "self.attention_norm = LayerNorm(config.hidden_size)",
     J_LAYER, "normalisation",
     "the attention sublayer's LayerNorm epsilon is 1e-5 (PyTorch's default) instead of the declared 1e-6",
     "the eps argument dropped from one LayerNorm",
     ""),
    ("j.embedding_dropout_functional", JV,
     "embeddings = self.dropout(embeddings)",
     "embeddings = torch.nn.functional.dropout(embeddings, p=0.1)",
     J_VIT, "dropout",
     "dropout on the embeddings is active in evaluation mode (the functional form ignores eval)",
     "the Dropout module replaced by F.dropout without training=self.training",
     F_DROPOUT),
    ("j.value_from_key", JV,
     "value_layer = self.transpose_for_scores(mixed_value_layer)",
     "value_layer = self.transpose_for_scores(mixed_key_layer)",
     J_LAYER, "attention projections",
     "the values are the keys: the value projection is computed and never used, the key projection's output is averaged instead",
     "copy-paste of the key line",
     ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.s_scaling_reciprocal", SC,
     "self.scaling = self.head_dim ** -0.5",
     "self.scaling = 1.0 / math.sqrt(self.head_dim)",
     S_ATTN, "the same 1/sqrt(d_k), computed by a division"),
    ("control.s_rotate_half_stack", SC,
     "return torch.cat((-x2, x1), dim=-1)",
     "return torch.stack((-x2, x1), dim=-2).flatten(-2)",
     S_ATTN, "stacking the halves on a new axis before the last and flattening gives the same [-x2, x1] concatenation"),
    ("control.s_repeat_kv_interleave", SC,
     "hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)",
     "return torch.repeat_interleave(hidden_states, n_rep, dim=1)",
     S_ATTN, "repeat_interleave on the head axis repeats each key/value head in place, exactly what expand + reshape does"),
    ("control.n_cos_as_shifted_sin", NM,
     "pe[:, 1::2] = torch.cos(position * div_term)",
     "pe[:, 1::2] = torch.sin(position * div_term + math.pi / 2)",
     N_PE, "cos(a) = sin(a + pi/2); the difference is float64 rounding (about 1e-13 at position 511)"),
    ("control.n_scale_multiply", NM,
     "query = query / math.sqrt(dim_per_head)",
     "query = query * dim_per_head ** -0.5",
     N_ALL, "the same 1/sqrt(d_k), as a multiplication"),
    ("control.n_dec_mask_plain_or", NM,
     "dec_mask = torch.gt(tgt_pad_mask | future_mask, 0)",
     "dec_mask = tgt_pad_mask | future_mask",
     N_DEC, "the OR of two boolean masks is already boolean; gt(., 0) changes nothing"),
    ("control.j_cls_repeat", JV,
     "cls_tokens = self.cls_token.expand(B, -1, -1)",
     "cls_tokens = self.cls_token.repeat(B, 1, 1)",
     J_VIT, "repeat copies the class token B times, the same values as expand's view"),
    ("control.j_flatten_by_reshape", JV,
     "x = x.flatten(2)",
     "x = x.reshape(x.shape[0], x.shape[1], -1)",
     J_PATCH, "flatten(2) of [B, D, h, w] is this reshape to [B, D, h*w], row-major"),
]

# Phase 2: bug id -> (expected codes, class without code). Empty in phase 1.
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, original: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == original]
    if len(hits) != 1:
        raise ValueError(f"{impl}.py: {original!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line[: len(line) - len(line.lstrip())]


def bug_rows() -> list[dict[str, Any]]:
    rows = []
    for bug_id, impl, original, replacement, components, family, cls, description, report in BUGS:
        number, indent = _locate(impl, original)
        codes, without = PHASE_2.get(bug_id, ([], ""))
        rows.append({
            "id": bug_id, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": indent + original, "replacement": indent + replacement,
            "components": components, "family": family, "class": cls,
            "description": description, "public_report": report,
            "expected_codes": codes, "class_without_code": without,
        })
    return rows


def control_rows() -> list[dict[str, Any]]:
    rows = []
    for control_id, impl, original, replacement, components, why in CONTROLS:
        number, indent = _locate(impl, original)
        rows.append({
            "id": control_id, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": indent + original, "replacement": indent + replacement,
            "components": components, "why_correct": why,
        })
    return rows


def main() -> None:
    unknown = set(PHASE_2) - {b[0] for b in BUGS}
    if unknown:
        raise ValueError(f"PHASE_2 names unknown bugs: {sorted(unknown)}")
    for name, rows in (("bugs.json", bug_rows()), ("controls.json", control_rows())):
        (HERE / name).write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
