# ruff: noqa: E501  (the rows quote the implementations' lines verbatim)
"""Write bugs.json and controls.json of the fourteenth blind set from the rows below.

Each row names one line of one implementation by its stripped text (which must occur exactly
once there) and the stripped replacement; the line number and the indentation are taken from
the frozen implementation files, so the JSON tables always match them. Phase 2 fills each
bug's expected codes (or its class without a code) through the PHASE_2 table only.

    python tests/blind14/make_bugs.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind14"

NG = "nnmha_gpt"
DB = "distilbert_encoder"
TV = "torchnn_vit"
N_ATTN = ["causal_self_attention", "decoder_block", "causal_lm"]
N_BLOCK = ["decoder_block", "causal_lm"]
N_LM = ["causal_lm"]
D_PE = ["sinusoidal_pe"]
D_MHA = ["mha", "encoder_layer", "encoder"]
D_LAYER = ["encoder_layer", "encoder"]
D_ENC = ["encoder"]
V_PATCH = ["patch_embed", "vit"]
V_LAYER = ["encoder_layer", "encoder", "vit"]
V_MASK = ["encoder_layer", "encoder"]
V_STACK = ["encoder", "vit"]
V_VIT = ["vit"]

MASK_REVERSED = "https://github.com/lucidrains/halonet-pytorch/issues/4"
KPM_POLARITY = "https://github.com/mlwithme/TransformerTranslation/issues/2"
SDPA_CAUSAL_KV = "https://github.com/pytorch/pytorch/issues/144858"
GPT2_EXACT_GELU = "https://github.com/nntile/nntile/pull/370"
F_DROPOUT_TRAINING = "https://github.com/BogiHsu/Tacotron2-PyTorch/issues/8"
HEAD_NOT_TIED = "https://github.com/huggingface/transformers/pull/43429"
PAST_POSITIONS = "https://github.com/huggingface/transformers/pull/15751"
EPS_MISMATCH = "https://github.com/huggingface/candle/pull/271"
PE_PAIR_FREQUENCY = "https://github.com/jadore801120/attention-is-all-you-need-pytorch/issues/32"
SCALE_MODEL_WIDTH = "https://github.com/omihub777/ViT-CIFAR/pull/11"
DISTILBERT_INF_NAN = "https://github.com/huggingface/transformers/pull/15326"
MASK_BY_ZEROS = "https://github.com/georg-wolflein/good-features/pull/1"
MASKED_FILL_NOT_INPLACE = "https://github.com/lucidrains/flamingo-pytorch/issues/10"
MERGE_NO_TRANSPOSE = "https://github.com/meta-pytorch/opacus/pull/825"
RESHAPE_NOT_PERMUTE = "https://github.com/zzr-idam/UVM-Net/issues/6"
CLS_NO_POSITION = "https://github.com/labmlai/annotated_deep_learning_paper_implementations/pull/221"
BATCH_FIRST_MISSING = "https://github.com/om-ai-lab/OmDet/issues/19"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  description, public_report)
BUGS: list[tuple[str, str, str, str, list[str], str, str, str, str]] = [
    # ---- nnmha_gpt
    ("n.causal_diagonal_masked", NG,
     "return torch.ones(n_new, n_total, dtype=torch.bool, device=device).triu(n_total - n_new + 1)",
     "return torch.ones(n_new, n_total, dtype=torch.bool, device=device).triu(n_total - n_new)",
     N_ATTN, "masks",
     "the causal mask also hides each query's own key: token t attends keys 0 .. t-1 only, and the first token of a sequence attends no key at all",
     "The triu offset of the boolean attn_mask is one too small, so the diagonal is masked as well as the future.", ""),
    ("n.causal_mask_top_left", NG,
     "return torch.ones(n_new, n_total, dtype=torch.bool, device=device).triu(n_total - n_new + 1)",
     "return torch.ones(n_new, n_total, dtype=torch.bool, device=device).triu(1)",
     N_ATTN, "kv cache",
     "in cached steps the causal mask is aligned to the top-left corner of the (new, total) block: new query i sees keys 0 .. i of the whole sequence instead of every cached key and the new keys up to itself",
     "The mask is built as if the new queries started the sequence (triu(1)); a full forward is unchanged.", ""),
    ("n.attn_mask_keep_polarity", NG,
     "return torch.ones(n_new, n_total, dtype=torch.bool, device=device).triu(n_total - n_new + 1)",
     "return torch.ones(n_new, n_total, dtype=torch.bool, device=device).triu(n_total - n_new + 1).logical_not()",
     N_ATTN, "mask conventions of torch.nn",
     "the causal mask is given with the keep polarity (True = may attend) where torch.nn reads True as not allowed: each query attends only the keys after it, and the last query none",
     "A port from code whose boolean masks mean 'keep' negates the mask for nn.MultiheadAttention.", MASK_REVERSED),
    ("n.key_padding_keep_mask", NG,
     "key_padding_mask = None if pad is None else ~pad",
     "key_padding_mask = None if pad is None else pad",
     N_ATTN, "mask conventions of torch.nn",
     "the key padding mask is handed over with the keep polarity: real tokens are masked as padding and the padding positions are attended",
     "The keep-mask (True = a real token) is passed as key_padding_mask, where True means a pad.", KPM_POLARITY),
    ("n.no_key_rows_any", NG,
     "no_key = (mask.unsqueeze(0) | key_padding_mask.unsqueeze(1)).all(dim=-1)",
     "no_key = (mask.unsqueeze(0) | key_padding_mask.unsqueeze(1)).any(dim=-1)",
     N_ATTN, "masks",
     "with a padding mask, every query row that has any masked key (a future key or a pad) is set to zero after attention, not only the rows that have no key left",
     "all() became any() in the rows zeroed after nn.MultiheadAttention.", ""),
    ("n.cache_not_used", NG,
     "kv = h if past_h is None else torch.cat([past_h, h], dim=1)",
     "kv = h",
     N_ATTN, "kv cache",
     "the cache is not used: each step attends only the new tokens' own keys and values, and the cache passed on never holds the earlier tokens",
     "The cached hidden states are dropped instead of concatenated with the new ones.", ""),
    ("n.cache_prepended", NG,
     "kv = h if past_h is None else torch.cat([past_h, h], dim=1)",
     "kv = h if past_h is None else torch.cat([h, past_h], dim=1)",
     N_ATTN, "kv cache",
     "the new tokens' hidden states (hence their keys and values) are put before the cached ones, so the bottom-right causal mask and the padding mask laid over the keys by index refer to the wrong keys",
     "torch.cat with its two operands in the wrong order.", ""),
    ("n.is_causal_hint", NG,
     "y, _ = self.attn(h, kv, kv, key_padding_mask=key_padding_mask, attn_mask=mask, need_weights=False)",
     "y, _ = self.attn(h, kv, kv, key_padding_mask=key_padding_mask, attn_mask=mask, need_weights=False, is_causal=True)",
     N_ATTN, "fused fast paths",
     "the causal hint makes the attention (without a padding mask) drop the explicit mask and use the fused kernel's own causal mask, which is aligned top-left: in cached steps the new queries see keys 0 .. i of the whole sequence instead of the cached keys and themselves",
     "An 'optimisation' passing is_causal=True beside the bottom-right attn_mask; nn.MultiheadAttention then gives SDPA is_causal instead of the mask.", SDPA_CAUSAL_KV),
    ("n.one_head", NG,
     "self.attn = nn.MultiheadAttention(n_embd, n_head, dropout=0.0, bias=True, batch_first=True)",
     "self.attn = nn.MultiheadAttention(n_embd, 1, dropout=0.0, bias=True, batch_first=True)",
     N_ATTN, "head split/merge",
     "attention is computed as a single head over the whole model width instead of n_heads heads of width D / n_heads (one softmax over full-width scores, scaled by 1/sqrt(D))",
     "The head count is not passed to nn.MultiheadAttention.", ""),
    ("n.attn_input_unnormed", NG,
     "a, present = self.attn(self.ln_1(x), past_h, pad)",
     "a, present = self.attn(x, past_h, pad)",
     N_BLOCK, "residual/norm placement",
     "the first sublayer's pre-norm is skipped: attention reads the raw residual stream and the first norm's parameters are unused",
     "ln_1 dropped from the attention input (and so from the cached hidden states).", ""),
    ("n.mlp_residual_dropped", NG,
     "x = x + self.mlp(self.ln_2(x))",
     "x = self.mlp(self.ln_2(x))",
     N_BLOCK, "residual/norm placement",
     "the feed-forward sublayer's residual connection is dropped: the block outputs the feed-forward output alone",
     "The residual add of the second sublayer is lost in a refactor.", ""),
    ("n.mlp_reads_ln_1", NG,
     "x = x + self.mlp(self.ln_2(x))",
     "x = x + self.mlp(self.ln_1(x))",
     N_BLOCK, "normalisation",
     "the second sublayer is normalised with the first norm's gain and bias (ln_1 instead of ln_2); the second norm's parameters are unused",
     "Copy-paste of the first sublayer's line.", ""),
    ("n.gelu_exact", NG,
     "self.act = nn.GELU(approximate=\"tanh\")",
     "self.act = nn.GELU()",
     N_BLOCK, "feed-forward",
     "the feed-forward activation is the exact erf GELU where GPT-2's tanh approximation is declared",
     "nn.GELU's default (exact) instead of approximate='tanh'.", GPT2_EXACT_GELU),
    ("n.mlp_dropout_always", NG,
     "return self.dropout(self.c_proj(self.act(self.c_fc(x))))",
     "return nn.functional.dropout(self.c_proj(self.act(self.c_fc(x))), 0.1)",
     N_BLOCK, "dropout",
     "dropout is active in evaluation: functional dropout, whose training flag defaults to True, is applied to the feed-forward output",
     "The dropout module replaced by F.dropout without training=self.training.", F_DROPOUT_TRAINING),
    ("n.lm_head_untied", NG,
     "self.lm_head.weight = self.wte.weight  # tied",
     "self.lm_head.weight = nn.Parameter(self.wte.weight.clone())  # tied",
     N_LM, "weight tying",
     "the output projection is a separate copy of the embedding matrix instead of the same tensor: the logits use a matrix that no longer follows the token embedding",
     "The tie made with a clone, so the head keeps its own (initial) values.", HEAD_NOT_TIED),
    ("n.positions_from_ids", NG,
     "x = self.drop(self.wte(idx) + self.wpe(position_ids))",
     "x = self.drop(self.wte(idx) + self.wpe(idx))",
     N_LM, "embeddings",
     "the learned position table is indexed by the token ids instead of the position ids",
     "wpe looked up with the input ids.", ""),
    ("n.positions_restart", NG,
     "position_ids = torch.arange(past_len, past_len + n, device=idx.device).unsqueeze(0).expand(B, n)",
     "position_ids = torch.arange(0, n, device=idx.device).unsqueeze(0).expand(B, n)",
     N_LM, "kv cache",
     "the positions the model derives for a cached step restart at 0 instead of continuing after the cached tokens",
     "The past length is not added to the derived position ids.", PAST_POSITIONS),
    ("n.final_norm_dropped", NG,
     "logits = self.lm_head(self.ln_f(x))",
     "logits = self.lm_head(x)",
     N_LM, "residual/norm placement",
     "the final norm of the pre-LN stack is skipped before the output projection",
     "ln_f not applied.", ""),
    ("n.logits_float32", NG,
     "logits = self.lm_head(self.ln_f(x))",
     "logits = self.lm_head(self.ln_f(x)).float()",
     N_LM, "precision",
     "the logits are rounded to float32 in a float64 build (a float32 cast of the output)",
     "A .float() on the logits, as generation code writes it.", ""),
    ("n.ln_eps_bert", NG,
     "def __init__(self, vocab_size, block_size, n_embd, n_head, n_inner, n_layer, eps=1e-5):",
     "def __init__(self, vocab_size, block_size, n_embd, n_head, n_inner, n_layer, eps=1e-12):",
     N_LM, "normalisation",
     "the model's norms use epsilon 1e-12 instead of the declared 1e-5",
     "A BERT default copied into the GPT constructor.", EPS_MISMATCH),
    # ---- distilbert_encoder
    ("d.pe_cos_on_even", DB,
     "out[:, 0::2] = torch.as_tensor(np.sin(position_enc[:, 0::2]), dtype=out.dtype)",
     "out[:, 0::2] = torch.as_tensor(np.cos(position_enc[:, 0::2]), dtype=out.dtype)",
     D_PE, "sinusoidal tables",
     "the sinusoidal table has cosines in the even columns as well as the odd ones (no sine anywhere)",
     "np.sin became np.cos in the even columns.", ""),
    ("d.pe_frequency_per_column", DB,
     "position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])",
     "position_enc = np.array([[pos / np.power(10000, 2 * j / dim) for j in range(dim)] for pos in range(n_pos)])",
     D_PE, "sinusoidal tables",
     "the sinusoidal frequencies are computed per column (exponent 2j/d) instead of per sine/cosine pair (2 floor(j/2)/d): the two members of a pair have different frequencies and the high columns are far too slow",
     "The j // 2 of the pair index dropped.", PE_PAIR_FREQUENCY),
    ("d.pe_float32_table", DB,
     "out[:, 1::2] = torch.as_tensor(np.cos(position_enc[:, 1::2]), dtype=out.dtype)",
     "out[:, 1::2] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))",
     D_PE, "precision",
     "the cosine columns of the table are rounded to float32 in a float64 build",
     "torch.FloatTensor (float32) instead of the table's dtype.", ""),
    ("d.pe_positions_from_one", DB,
     "position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])",
     "position_enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(1, n_pos + 1)])",
     D_PE, "sinusoidal tables",
     "row p of the table holds the encoding of position p + 1",
     "Positions counted from 1.", ""),
    ("d.scale_model_width", DB,
     "q = q / math.sqrt(dim_per_head)  # (bs, n_heads, q_length, dim_per_head)",
     "q = q / math.sqrt(self.dim)  # (bs, n_heads, q_length, dim_per_head)",
     D_MHA, "attention scale",
     "the scores are scaled by 1/sqrt(d_model) instead of 1/sqrt(head width)",
     "The model width in place of the head width.", SCALE_MODEL_WIDTH),
    ("d.scale_twice", DB,
     "scores = torch.matmul(q, k.transpose(2, 3))  # (bs, n_heads, q_length, k_length)",
     "scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(dim_per_head)  # (bs, n_heads, q_length, k_length)",
     D_MHA, "attention scale",
     "the scores are scaled twice (by 1/d_head instead of 1/sqrt(d_head)): the query is already divided and the product is divided again",
     "A 'fix' scaling the product as the paper writes it, without removing the query scaling.", ""),
    ("d.mask_polarity", DB,
     "mask = (mask == 0).view(mask_reshp).expand_as(scores)  # (bs, n_heads, q_length, k_length)",
     "mask = (mask == 1).view(mask_reshp).expand_as(scores)  # (bs, n_heads, q_length, k_length)",
     D_MHA, "masks",
     "the padding mask is inverted: real tokens are masked and the pads attended",
     "== 0 became == 1.", ""),
    ("d.mask_fill_float32_tensor", DB,
     "scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)",
     "scores = scores.masked_fill(mask, torch.tensor(torch.finfo(scores.dtype).min))",
     D_MHA, "precision",
     "the fill value is made a float32 tensor: the float64 minimum overflows to -inf, so a query row whose keys are all masked comes out NaN instead of the declared uniform average (other rows unchanged)",
     "torch.tensor() around finfo(dtype).min creates a float32 scalar.", DISTILBERT_INF_NAN),
    ("d.mask_fill_zero", DB,
     "scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)",
     "scores = scores.masked_fill(mask, 0.0)",
     D_MHA, "masks",
     "the masked scores are set to 0 instead of a very negative value: padded keys keep a weight of exp(0) in the softmax",
     "The fill value 0.", MASK_BY_ZEROS),
    ("d.mask_not_assigned", DB,
     "scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)",
     "scores.masked_fill(mask, torch.finfo(scores.dtype).min)",
     D_MHA, "masks",
     "the masking has no effect (an out-of-place fill whose result is discarded): padded keys are attended",
     "masked_fill's result not assigned.", MASKED_FILL_NOT_INPLACE),
    ("d.softmax_query_axis", DB,
     "weights = nn.functional.softmax(scores, dim=-1)  # (bs, n_heads, q_length, k_length)",
     "weights = nn.functional.softmax(scores, dim=-2)  # (bs, n_heads, q_length, k_length)",
     D_MHA, "attention softmax",
     "the softmax normalises over the queries instead of over the keys",
     "dim=-2 instead of -1.", ""),
    ("d.split_heads_no_transpose", DB,
     "return x.view(bs, -1, self.n_heads, dim_per_head).transpose(1, 2)",
     "return x.view(bs, self.n_heads, -1, dim_per_head)",
     D_MHA, "head split/merge",
     "the heads are split by viewing [B, L, D] directly as [B, H, L, d]: each 'head' is a block of consecutive positions' channels, mixing positions and heads",
     "view into the final layout without the transpose.", ""),
    ("d.merge_heads_no_transpose", DB,
     "return x.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * dim_per_head)",
     "return x.contiguous().view(bs, -1, self.n_heads * dim_per_head)",
     D_MHA, "head split/merge",
     "the heads are merged without moving the head axis next to the channels: the output rows mix positions of one head instead of the heads of one position",
     "unshape without the transpose.", MERGE_NO_TRANSPOSE),
    ("d.value_from_key_proj", DB,
     "v = shape(self.v_lin(value))  # (bs, n_heads, k_length, dim_per_head)",
     "v = shape(self.k_lin(value))  # (bs, n_heads, k_length, dim_per_head)",
     D_MHA, "attention projections",
     "the values are computed with the key projection; the value projection is unused",
     "Copy-paste of the key line.", ""),
    ("d.sa_residual_dropped", DB,
     "sa_output = self.sa_layer_norm(sa_output + x)  # (bs, seq_length, dim)",
     "sa_output = self.sa_layer_norm(sa_output)  # (bs, seq_length, dim)",
     D_LAYER, "residual/norm placement",
     "the attention sublayer's residual connection is dropped: the first norm normalises the attention output alone",
     "+ x lost.", ""),
    ("d.ffn_residual_from_input", DB,
     "ffn_output = self.output_layer_norm(ffn_output + sa_output)  # (bs, seq_length, dim)",
     "ffn_output = self.output_layer_norm(ffn_output + x)  # (bs, seq_length, dim)",
     D_LAYER, "residual/norm placement",
     "the second residual adds the layer's input instead of the first sublayer's (normalised) output",
     "The wrong tensor on the residual branch.", ""),
    ("d.gelu_tanh", DB,
     "self.activation = nn.GELU()",
     "self.activation = nn.GELU(approximate=\"tanh\")",
     D_LAYER, "feed-forward",
     "the feed-forward activation is the tanh approximation of GELU where exact GELU is declared",
     "gelu_new where DistilBERT uses gelu.", ""),
    ("d.ln_eps_default", DB,
     "self.sa_layer_norm = nn.LayerNorm(normalized_shape=config.dim, eps=1e-12)",
     "self.sa_layer_norm = nn.LayerNorm(normalized_shape=config.dim)",
     D_LAYER, "normalisation",
     "the first norm uses torch's default epsilon 1e-5 instead of the declared 1e-12",
     "eps dropped from one LayerNorm.", ""),
    ("d.ffn_dropout_always", DB,
     "x = self.dropout(x)",
     "x = nn.functional.dropout(x, p=0.1)",
     D_LAYER, "dropout",
     "dropout is active in evaluation on the feed-forward output (functional dropout with its default training=True)",
     "The module call replaced by F.dropout.", ""),
    ("d.layers_read_stack_input", DB,
     "layer_outputs = layer_module(x=hidden_state, attn_mask=attn_mask)",
     "layer_outputs = layer_module(x=x, attn_mask=attn_mask)",
     D_ENC, "stacks",
     "every layer of the stack reads the stack's input instead of the previous layer's output, so only the last layer's computation reaches the output",
     "The loop variable not threaded through.", ""),
    # ---- torchnn_vit
    ("v.patches_reshaped", TV,
     "patches = patches.transpose(1, 2)  # [B, N, C * p * p], patches in row-major order",
     "patches = patches.reshape(patches.size(0), -1, patches.size(1))  # [B, N, C * p * p], patches in row-major order",
     V_PATCH, "vit patchify",
     "the unfolded [B, C p p, N] tensor is reshaped instead of transposed to [B, N, C p p]: each patch vector is a mix of values from several patches",
     "reshape where the axes must be swapped.", RESHAPE_NOT_PERMUTE),
    ("v.patches_overlap", TV,
     "self.unfold = nn.Unfold(kernel_size=patch_size, stride=patch_size)",
     "self.unfold = nn.Unfold(kernel_size=patch_size)",
     V_PATCH, "vit patchify",
     "the patches are cut with stride 1 (overlapping windows, many more patches) instead of stride equal to the patch size",
     "nn.Unfold's default stride.", ""),
    ("v.image_transposed", TV,
     "patches = self.unfold(images)  # [B, C * p * p, N], columns in (c, i, j) order",
     "patches = self.unfold(images.transpose(2, 3))  # [B, C * p * p, N], columns in (c, i, j) order",
     V_PATCH, "vit patchify",
     "the image's height and width are exchanged before cutting: patches come in column-major order and each patch's pixels are transposed",
     "An HWC/CHW conversion leaves H and W swapped.", ""),
    ("v.pos_embed_dropped", TV,
     "x = self.pos_drop(x + self.pos_embed)",
     "x = self.pos_drop(x)",
     V_VIT, "vit position embedding",
     "the learned position table is not added",
     "The position embedding lost.", ""),
    ("v.cls_no_position", TV,
     "x = self.pos_drop(x + self.pos_embed)",
     "x = self.pos_drop(torch.cat((x[:, :1], x[:, 1:] + self.pos_embed[:, 1:]), dim=1))",
     V_VIT, "vit class token",
     "the class token gets no position embedding (row 0 of the table unused); only the patches get theirs",
     "As when the table is added before the class token is concatenated.", CLS_NO_POSITION),
    ("v.cls_appended", TV,
     "x = torch.cat((cls, x), dim=1)",
     "x = torch.cat((x, cls), dim=1)",
     V_VIT, "vit class token",
     "the class token is appended after the patches instead of prepended: every position row is off by one and the head reads the first patch's token",
     "torch.cat operands exchanged.", ""),
    ("v.mean_pool", TV,
     "return self.head(x[:, 0])",
     "return self.head(x.mean(dim=1))",
     V_VIT, "pooling",
     "the head is fed the mean over all tokens instead of the class token",
     "Mean pooling where class-token pooling is declared.", ""),
    ("v.pos_dropout_always", TV,
     "x = self.pos_drop(x + self.pos_embed)",
     "x = nn.functional.dropout(x + self.pos_embed, p=0.1)",
     V_VIT, "dropout",
     "dropout is active in evaluation on the embedded tokens (functional dropout with its default training=True)",
     "The module call replaced by F.dropout.", ""),
    ("v.post_ln", TV,
     "layer_norm_eps=EPS, batch_first=True, norm_first=True,",
     "layer_norm_eps=EPS, batch_first=True, norm_first=False,",
     V_LAYER, "residual/norm placement",
     "the layers normalise after each residual add (post-LN) where pre-LN is declared",
     "norm_first left at torch's default.", ""),
    ("v.batch_first_false", TV,
     "layer_norm_eps=EPS, batch_first=True, norm_first=True,",
     "layer_norm_eps=EPS, batch_first=False, norm_first=True,",
     V_LAYER, "torch.nn batch_first",
     "the layers read [B, L, D] as [L, B, D]: attention runs across the batch (each position attends the same position of the other examples) instead of along the sequence",
     "batch_first missing in a port from the sequence-first API.", BATCH_FIRST_MISSING),
    ("v.activation_relu", TV,
     "d_model, n_heads, dim_feedforward=d_ff, dropout=0.0, activation=\"gelu\",",
     "d_model, n_heads, dim_feedforward=d_ff, dropout=0.0, activation=\"relu\",",
     V_LAYER, "feed-forward",
     "the feed-forward activation is ReLU where exact GELU is declared",
     "nn.TransformerEncoderLayer's default activation.", ""),
    ("v.key_padding_unnegated", TV,
     "src_key_padding_mask = None if key_padding is None else ~torch.as_tensor(key_padding, dtype=torch.bool)",
     "src_key_padding_mask = None if key_padding is None else torch.as_tensor(key_padding, dtype=torch.bool)",
     V_MASK, "mask conventions of torch.nn",
     "the key padding keep-mask is handed to torch.nn unnegated: real tokens are masked and the pads attended",
     "The ~ lost in the mask conversion.", KPM_POLARITY),
    ("v.causal_mask_inverted", TV,
     "mask = nn.Transformer.generate_square_subsequent_mask(x.size(1), dtype=torch.bool)",
     "mask = ~nn.Transformer.generate_square_subsequent_mask(x.size(1), dtype=torch.bool)",
     V_MASK, "mask conventions of torch.nn",
     "the causal mask is inverted (negated as if it were a keep-mask): each query attends only the keys after it, and the last query none",
     "A keep-mask habit applied to torch.nn's mask.", ""),
    ("v.final_norm_eps", TV,
     "return nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(d_model, eps=EPS), enable_nested_tensor=False)",
     "return nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)",
     V_STACK, "normalisation",
     "the final norm uses torch's default epsilon 1e-5 instead of the declared 1e-6",
     "eps not passed to the encoder's norm.", ""),
    ("v.cls_float32", TV,
     "cls = self.cls_token.expand(x.size(0), -1, -1)",
     "cls = self.cls_token.float().expand(x.size(0), -1, -1)",
     V_VIT, "precision",
     "the class token is rounded to float32 in a float64 build",
     "A .float() on the class token.", ""),
]

# (id, impl, original (stripped), replacement (stripped), components, why_correct)
CONTROLS: list[tuple[str, str, str, str, list[str], str]] = [
    ("control.no_key_rows_where", NG,
     "y = y.masked_fill(no_key.unsqueeze(-1), 0.0)",
     "y = torch.where(no_key.unsqueeze(-1), torch.zeros_like(y), y)",
     N_ATTN, "torch.where with zeros selects exactly what masked_fill with 0 writes."),
    ("control.need_weights_true", NG,
     "y, _ = self.attn(h, kv, kv, key_padding_mask=key_padding_mask, attn_mask=mask, need_weights=False)",
     "y, _ = self.attn(h, kv, kv, key_padding_mask=key_padding_mask, attn_mask=mask, need_weights=True)",
     N_ATTN, "need_weights only makes nn.MultiheadAttention also return the averaged weights (on its explicit path); the output is the same attention."),
    ("control.positions_repeat", NG,
     "position_ids = torch.arange(past_len, past_len + n, device=idx.device).unsqueeze(0).expand(B, n)",
     "position_ids = torch.arange(past_len, past_len + n, device=idx.device).repeat(B, 1)",
     N_LM, "repeat copies the same row B times; expand views it B times."),
    ("control.last_layer_output", DB,
     "hidden_state = layer_outputs[-1]",
     "hidden_state = layer_outputs[0]",
     D_ENC, "each layer returns a one-element tuple, so index 0 is index -1."),
    ("control.q_scale_power", DB,
     "q = q / math.sqrt(dim_per_head)  # (bs, n_heads, q_length, dim_per_head)",
     "q = q * dim_per_head ** -0.5  # (bs, n_heads, q_length, dim_per_head)",
     D_MHA, "the same scale written as a multiplication by d ** -0.5 (equal to rounding)."),
    ("control.mask_not_one", DB,
     "mask = (mask == 0).view(mask_reshp).expand_as(scores)  # (bs, n_heads, q_length, k_length)",
     "mask = (mask != 1).view(mask_reshp).expand_as(scores)  # (bs, n_heads, q_length, k_length)",
     D_MHA, "the attention mask holds only 0 and 1, so != 1 marks the same positions as == 0."),
    ("control.cls_slice", TV,
     "return self.head(x[:, 0])",
     "return self.head(x[:, :1]).squeeze(1)",
     V_VIT, "the head applied to the class token kept as a length-1 axis, which is then removed."),
    ("control.patches_permute", TV,
     "patches = patches.transpose(1, 2)  # [B, N, C * p * p], patches in row-major order",
     "patches = patches.permute(0, 2, 1)  # [B, N, C * p * p], patches in row-major order",
     V_PATCH, "permute(0, 2, 1) of a 3-D tensor is transpose(1, 2)."),
]

# Phase 2: bug id -> (expected_codes, class_without_code); empty in phase 1.
PHASE_2: dict[str, tuple[list[str], str]] = {}


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {stripped!r} occurs {len(hits)} times")
    line = lines[hits[0]]
    return hits[0] + 1, line[: len(line) - len(line.lstrip())]


def main() -> None:
    bugs: list[dict[str, Any]] = []
    for bid, impl, original, replacement, comps, family, klass, desc, report in BUGS:
        number, indent = _locate(impl, original)
        codes, without = PHASE_2.get(bid, ([], ""))
        bugs.append({
            "id": bid, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": indent + original, "replacement": indent + replacement,
            "components": comps, "family": family, "class": klass, "description": desc,
            "public_report": report, "expected_codes": codes, "class_without_code": without,
        })
    controls: list[dict[str, Any]] = []
    for cid, impl, original, replacement, comps, why in CONTROLS:
        number, indent = _locate(impl, original)
        controls.append({
            "id": cid, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": number,
            "original": indent + original, "replacement": indent + replacement,
            "components": comps, "why_correct": why,
        })
    (HERE / "bugs.json").write_text(json.dumps(bugs, indent=1) + "\n", encoding="utf-8")
    (HERE / "controls.json").write_text(json.dumps(controls, indent=1) + "\n", encoding="utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
