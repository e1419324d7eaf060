"""Write the sixth blind set's tables (bugs.json, controls.json) from the rows below.

Each row is one line of one implementation replaced by another; ``line`` is computed here from
the implementation as it is (the original must occur exactly once), so the tables and the
files agree at the freeze. Run from anywhere: ``python tests/blind6/make_bugs.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind6"

L, FS, KV = "flash_llama3", "fairseq_encoder", "keras_vit"
ATTN = ["causal_self_attention"]
ROPE = ["rope", "causal_self_attention"]

# id, impl, original, replacement, components, family, class, expected_codes,
# class_without_code, public_report, description
BUGS = [
    # ---- flash_llama3: Llama 3 with a tiled online softmax, GQA, a tuple KV cache
    ("f.llama3_blend_swapped", L,
     "    smoothed = (1 - smooth) * inv_freq / args.rope_factor + smooth * inv_freq",
     "    smoothed = smooth * inv_freq / args.rope_factor + (1 - smooth) * inv_freq",
     ROPE, "rope", "Llama 3.1 RoPE scaling: the blend weights of the middle band swapped (smooth on the scaled frequency)",
     ["positional.frequency_wrong"], "", "",
     "Porting apply_scaling, the weights of the middle band's blend are put the other way round: "
     "the band near the long wavelengths keeps its frequency and the one near the short wavelengths is divided."),
    ("f.llama3_scaling_dropped", L,
     "    return torch.where(is_medium, smoothed, scaled)",
     "    return inv_freq",
     ROPE, "rope", "Llama 3.1's rope_scaling ignored: the unscaled frequencies used where llama3 scaling is declared",
     ["rope.scaling_none"], "", "https://github.com/felafax/felafax/issues/59",
     "The scaled table is computed and thrown away: the function returns the plain base^(-2i/d) frequencies."),
    ("f.rope_theta_llama2", L,
     "    rope_theta: float = 500000.0",
     "    rope_theta: float = 10000.0",
     ROPE, "rope", "RoPE base of Llama 2 (10000) in a Llama 3 model (500000)",
     ["positional.base_wrong"], "", "https://github.com/langchain-ai/langchain/issues/20710",
     "The ModelArgs default carried over from a Llama 2 port: rope_theta 10000 where 500000 is declared."),
    ("f.rope_angles_in_half", L,
     "        freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(x.device)",
     "        freqs = position_ids[..., None].to(x.dtype) * self.inv_freq.to(x.device, x.dtype)",
     ROPE, "precision", "RoPE angles formed in the activations' dtype (float16/bfloat16 positions times frequencies)",
     ["numerics.rope_angles_low_precision"], "", "",
     "The position ids and the frequencies are cast to the input's dtype before the product, as a port "
     "that dislikes float64 does: in 16 bits the angles at large positions lose their fractional part."),
    ("f.rope_keys_not_rotated", L,
     "    k_embed = (k * cos) + (rotate_half(k) * sin)",
     "    k_embed = k",
     ATTN, "rope", "RoPE applied to the queries only",
     ["rope.applied_to_wrong_tensors"], "", "",
     "A refactor of apply_rotary_pos_emb leaves the keys unrotated."),
    ("f.rms_eps_not_passed", L,
     "        self.input_layernorm = LlamaRMSNorm(args.dim, eps=args.norm_eps)",
     "        self.input_layernorm = LlamaRMSNorm(args.dim)",
     ["decoder_block"], "norm", "RMSNorm eps falls back to the class default (1e-6) in one norm where Llama 3's 1e-5 is declared",
     ["layer_norm.eps_wrong"], "", "https://github.com/meta-pytorch/torchtune/issues/290",
     "The first norm of the layer is built without the config's eps and gets LlamaRMSNorm's default 1e-6."),
    ("f.cache_causal_top_left", L,
     "    past_len = kv_len - q_len",
     "    past_len = 0",
     ATTN, "kv_cache", "the causal mask of a cached step built for the new tokens alone (aligned top-left)",
     ["cache.causal_top_left"], "", "",
     "The bias builder forgets the cached keys when it numbers the query rows: a chunk after the "
     "prefill sees the first keys of the cache only."),
    ("f.online_acc_not_rescaled", L,
     "        acc = acc * alpha + p @ v_j",
     "        acc = acc + p @ v_j",
     ATTN, "online_softmax", "online softmax: the output accumulator not rescaled by exp(m_old - m_new) when the running max grows",
     ["attention.weights_not_normalized"], "", "",
     "The accumulated P V of the earlier tiles keeps the old max's scale while the running sum is rescaled."),
    ("f.online_sum_not_rescaled", L,
     "        l_i = l_i * alpha + p.sum(dim=-1, keepdim=True)",
     "        l_i = l_i + p.sum(dim=-1, keepdim=True)",
     ATTN, "online_softmax", "online softmax: the running sum not rescaled when the running max grows",
     ["attention.weights_not_normalized"], "", "",
     "The denominator adds each tile's exponentials computed against different maxima."),
    ("f.ragged_tile_dropped", L,
     "    for start_n in range(0, kv_len, block_n):",
     "    for start_n in range(0, kv_len - block_n + 1, block_n):",
     ATTN, "online_softmax", "the keys of a ragged last tile never visited (the key length assumed a multiple of the tile)",
     [], "keys beyond the last full key tile are never attended (a tiled kernel without a boundary tile)", "",
     "The loop stops at the last full tile, as a kernel written for lengths that are multiples of BLOCK_N: "
     "the trailing keys are dropped, and a call with fewer keys than a tile attends nothing."),
    ("f.gqa_heads_modulo", L,
     "        kv_head = torch.arange(self.num_heads, device=hidden_states.device) // self.num_key_value_groups",
     "        kv_head = torch.arange(self.num_heads, device=hidden_states.device) % self.num_key_value_heads",
     ATTN, "gqa", "GQA: query head h served by key/value head h mod H_kv (tiled) instead of h // group",
     ["attention.kv_heads_tiled"], "", "",
     "The kernel's off_h // group written as a modulo."),
    ("f.scale_log2e_with_exp", L,
     "    q = q.to(acc_dtype) * softmax_scale",
     "    q = q.to(acc_dtype) * (softmax_scale * 1.44269504)",
     ATTN, "attention_scale", "Triton's qk_scale = sm_scale * log2(e) kept while exp (not exp2) is used: scores scaled by 1.4427/sqrt(d)",
     ["attention.scale_wrong"], "", "",
     "Ported from the Triton tutorial, which folds log2(e) into the scale for exp2; this code uses exp."),
    ("f.derived_positions_from_zero", L,
     "            position_ids = torch.arange(past_len, past_len + q_len, device=hidden_states.device)[None].expand(bsz, -1)",
     "            position_ids = torch.arange(q_len, device=hidden_states.device)[None].expand(bsz, -1)",
     ATTN, "kv_cache", "positions derived for a cached step counted from 0, not from the cache length",
     ["cache.rope_offset_wrong"], "", "",
     "Without position ids the new tokens are numbered 0.. in every step: they are rotated as if at the start."),
    ("f.padding_only_at_prefill", L,
     "    if attention_mask is not None:  # [B, kv_len], True = a real token",
     "    if attention_mask is not None and q_len == kv_len:  # [B, kv_len], True = a real token",
     ATTN, "kv_cache", "the key-padding mask applied in the prefill and dropped in cached steps",
     ["cache.padding_dropped_in_steps"], "", "",
     "The padding is only folded into the bias when there is no cache (q_len == kv_len), as code that builds "
     "the padding mask once at prefill does."),
    ("f.swiglu_activation_after_product", L,
     "        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))",
     "        return self.down_proj(F.silu(self.gate_proj(x) * self.up_proj(x)))",
     ["gated_ffn", "decoder_block"], "ffn_activation", "SwiGLU: SiLU applied to gate(x) * up(x) instead of to gate(x)",
     ["ffn.activation_after_gating"], "", "",
     "A parenthesis moved: the activation wraps the product."),
    ("f.residual_from_normed", L,
     "        hidden_states = self.input_layernorm(hidden_states)",
     "        hidden_states = residual = self.input_layernorm(hidden_states)",
     ["decoder_block"], "residual_norm_placement", "pre-norm attention residual taken from the normed input",
     ["blocks.residual_after_norm"], "", "",
     "A chained assignment makes the residual the normalised stream."),
    # ---- fairseq_encoder: time-first, packed in_proj, key_padding_mask True = pad
    ("fs.scale_by_embed_dim", FS,
     "        self.scaling = self.head_dim ** -0.5",
     "        self.scaling = self.embed_dim ** -0.5",
     ["mha", "encoder_layer"], "attention_scale", "queries scaled by 1/sqrt(d_model) instead of 1/sqrt(d_k)",
     ["attention.scale_wrong"], "", "",
     "The scaling computed from the model width."),
    ("fs.values_from_key_slice", FS,
     "        return self._in_proj(value, start=2 * self.embed_dim)",
     "        return self._in_proj(value, start=self.embed_dim, end=2 * self.embed_dim)",
     ["mha", "encoder_layer"], "qkv_projection", "values through the key third of the packed in_proj_weight",
     ["attention.value_uses_key_projection"], "", "",
     "in_proj_v copied from in_proj_k without changing the slice."),
    ("fs.split_batch_first", FS,
     "        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)",
     "        q = q.contiguous().view(bsz * self.num_heads, tgt_len, self.head_dim)",
     ["mha", "encoder_layer"], "time_first", "queries split into heads as if batch-first: the [T, B, C] tensor viewed [B*H, T, d] without the transpose",
     ["attention.heads_split_wrong_order"], "", "",
     "The head split written for batch-first tensors in a time-first module."),
    ("fs.merge_no_transpose", FS,
     "        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)",
     "        attn = attn.contiguous().view(tgt_len, bsz, embed_dim)",
     ["mha", "encoder_layer"], "time_first", "heads merged by a view of [B*H, T, d] as [T, B, C] without the transpose",
     ["attention.heads_merged_wrong_order"], "", "",
     "The transpose back to time-first dropped before the view."),
    ("fs.padding_mask_inverted", FS,
     '            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))',
     '            attn_weights = attn_weights.masked_fill(~key_padding_mask.unsqueeze(1).unsqueeze(2), float("-inf"))',
     ["mha", "encoder_layer"], "mask", "key_padding_mask read as a keep-mask (True = token) where fairseq's True = pad",
     ["mask.polarity_inverted"], "", "",
     "The mask inverted as for a transformers-style attention_mask."),
    ("fs.dropout_in_eval", FS,
     "        x = F.dropout(x, p=self.relu_dropout, training=self.training)",
     "        x = F.dropout(x, p=self.relu_dropout)",
     ["encoder_layer"], "dropout", "functional dropout without training=self.training: active in eval",
     ["dropout.active_in_eval"], "", "https://github.com/pytorch/pytorch/issues/26338",
     "F.dropout defaults to training=True."),
    ("fs.norm_placement_flipped", FS,
     "        if after ^ self.normalize_before:",
     "        if before ^ self.normalize_before:",
     ["encoder_layer", "encoder"], "residual_norm_placement", "maybe_layer_norm's test flipped: a post-norm layer normalises before its sublayers and a pre-norm one after",
     ["blocks.norm_placement_pre", "blocks.norm_placement_post"], "", "",
     "before for after in maybe_layer_norm's XOR."),
    ("fs.final_ln_reads_attn_ln", FS,
     "        x = self.maybe_layer_norm(self.final_layer_norm, x, after=True)",
     "        x = self.maybe_layer_norm(self.self_attn_layer_norm, x, after=True)",
     ["encoder_layer"], "parameters", "the FFN's post-norm computed with the attention norm's parameters",
     ["params.read_from_other_module"], "", "",
     "A copy-paste of the line above it."),
    ("fs.padding_dropped_unless_all_pad", FS,
     "        if encoder_padding_mask is not None and not encoder_padding_mask.any():",
     "        if encoder_padding_mask is not None and not encoder_padding_mask.all():",
     ["encoder"], "mask", "the encoder drops its padding mask unless every token is padding (any/all confused)",
     ["mask.ignored"], "", "",
     "fairseq's shortcut (no pad anywhere: no mask) written with all(): a batch with some padding loses its mask."),
    ("fs.softmax_float32_in_float64", FS,
     "    return F.softmax(x, dim=dim)",
     "    return F.softmax(x, dim=dim, dtype=torch.float32)",
     ["mha", "encoder_layer"], "precision", "the attention softmax always formed in float32, a float64 build included (an undeclared float32 island)",
     ["numerics.float32_island"], "", "",
     "fairseq's own utils.softmax (dtype=torch.float32 for every input) copied over the dtype-aware branch."),
    # ---- keras_vit: NHWC, HWIO kernel, Dense [in, out], time-first nn.MultiheadAttention
    ("kv.nhwc_reshaped_not_permuted", KV,
     "        x = images.permute(0, 3, 1, 2)  # NHWC -> NCHW for torch's conv",
     "        x = images.reshape(batch, channels, height, width)  # NHWC -> NCHW for torch's conv",
     ["patch_embed", "vit"], "vit", "the channels-last image reshaped (not permuted) to NCHW: pixels and channels scrambled",
     [], "a channels-last image reinterpreted as channels-first by a reshape (pixels and channels interleaved)",
     "https://github.com/Selen-Suyue/DensePolicy2D/issues/3",
     "reshape where permute is needed to go from NHWC to NCHW."),
    ("kv.kernel_hw_swapped", KV,
     "        w = self.kernel.permute(3, 2, 0, 1)  # HWIO -> OIHW",
     "        w = self.kernel.permute(3, 2, 1, 0)  # HWIO -> OIHW",
     ["patch_embed", "vit"], "vit", "the HWIO kernel converted to OIWH (all axes reversed): rows and columns of each patch swapped",
     ["vit.patch_kernel_transposed"], "", "https://github.com/voxelmorph/voxelmorph/issues/425",
     "The TF kernel reversed like .T instead of moving only the channel axes."),
    ("kv.grid_column_major", KV,
     "        x = x.permute(0, 2, 3, 1)  # back to channels-last: [B, h, w, D]",
     "        x = x.permute(0, 3, 2, 1)  # back to channels-last: [B, h, w, D]",
     ["patch_embed", "vit"], "vit", "the conv output permuted to [B, w, h, D]: patch tokens in column-major grid order",
     ["vit.patch_order"], "", "",
     "The permutation back to channels-last swaps the grid axes."),
    ("kv.keras_ln_epsilon", KV,
     "        self.norm1 = nn.LayerNorm(projection_dim, eps=1e-6)",
     "        self.norm1 = nn.LayerNorm(projection_dim, eps=1e-3)",
     ["encoder_layer", "vit"], "norm", "Keras LayerNormalization's default epsilon (1e-3) in one norm where 1e-6 is declared",
     ["layer_norm.eps_wrong"], "", "https://github.com/gzuidhof/nn-transfer/pull/3",
     "The Keras default epsilon copied for the first norm of each block."),
    ("kv.causal_keep_mask_as_hidden", KV,
     "        hidden = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).triu(1)",
     "        hidden = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool, device=x.device).tril()",
     ["encoder_layer"], "mask", "a causal keep-mask (True = may attend, SDPA's convention) given to nn.MultiheadAttention, which reads True = hidden",
     ["mask.polarity_inverted", "mask.causal_leak"], "", "",
     "tril() as for SDPA's boolean attn_mask, passed where torch's MultiheadAttention wants the hidden positions."),
    ("kv.pool_with_cls", KV,
     "        representation = representation[:, 1:].mean(dim=1)  # GlobalAveragePooling1D over the patches",
     "        representation = representation.mean(dim=1)  # GlobalAveragePooling1D over the patches",
     ["vit"], "vit", "GlobalAveragePooling1D over every token, the class token included",
     ["vit.pooling_mean_with_cls"], "", "",
     "The Keras example has no class token; the port added one and kept the pooling over all tokens."),
    ("kv.mlp_residual_from_block_input", KV,
     "        return x3 + x2  # layers.Add()",
     "        return x3 + encoded_patches  # layers.Add()",
     ["encoder_layer", "vit"], "residual_norm_placement", "the MLP's residual adds the block input instead of the attention sublayer's output",
     [], "a residual that adds the layer input instead of the previous sublayer's output (the attention output lost)", "",
     "layers.Add() given the wrong tensor."),
    ("kv.keras_gelu_approximate", KV,
     "    return F.gelu(x)  # keras.activations.gelu(x, approximate=False)",
     '    return F.gelu(x, approximate="tanh")  # keras.activations.gelu(x, approximate=False)',
     ["encoder_layer", "vit"], "ffn_activation", "the tanh GELU (Keras 3's gelu default approximate=True) where the exact GELU is declared",
     ["ffn.activation_gelu_tanh"], "", "https://github.com/tinygrad/tinygrad/pull/16162",
     "keras.activations.gelu's approximate default differs between Keras versions; the port picked the tanh form."),
    ("kv.attn_residual_dropped", KV,
     "        x2 = attention_output.transpose(0, 1) + encoded_patches  # layers.Add()",
     "        x2 = attention_output.transpose(0, 1)  # layers.Add()",
     ["encoder_layer", "vit"], "residual_norm_placement", "the attention sublayer's residual missing",
     ["blocks.residual_missing"], "", "",
     "The Add() layer lost its second input."),
]

# id, impl, original, replacement, components, why_correct
CONTROLS = [
    ("control.f.mean_square_product", L,
     "        variance = hidden_states.pow(2).mean(-1, keepdim=True)",
     "        variance = (hidden_states * hidden_states).mean(-1, keepdim=True)",
     ["rms_norm", "decoder_block"], "x * x is x ** 2."),
    ("control.f.tile_of_five", L,
     "    block_n: int = 4  # keys per tile of the online softmax",
     "    block_n: int = 5  # keys per tile of the online softmax",
     ATTN, "the online softmax is exact for any tile size; only the rounding order changes."),
    ("control.f.gqa_repeat_interleave", L,
     "        kv_head = torch.arange(self.num_heads, device=hidden_states.device) // self.num_key_value_groups",
     "        kv_head = torch.arange(self.num_key_value_heads, device=hidden_states.device).repeat_interleave(self.num_key_value_groups)",
     ATTN, "the same index list: each key/value head repeated in place group times."),
    ("control.fs.scale_by_division", FS,
     "        q = q * self.scaling",
     "        q = q / math.sqrt(self.head_dim)",
     ["mha", "encoder_layer"], "dividing by sqrt(d_k) is multiplying by d_k ** -0.5."),
    ("control.fs.merge_by_reshape", FS,
     "        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)",
     "        attn = attn.transpose(0, 1).reshape(tgt_len, bsz, embed_dim)",
     ["mha", "encoder_layer"], "reshape copies when needed: the same merge as contiguous().view()."),
    ("control.kv.tokens_by_flatten", KV,
     "        return x.reshape(batch, -1, x.shape[-1])  # Reshape((-1, D)): the grid row-major",
     "        return x.flatten(1, 2)  # Reshape((-1, D)): the grid row-major",
     ["patch_embed", "vit"], "flattening the grid axes of [B, h, w, D] is the row-major reshape."),
    ("control.kv.functional_layer_norm", KV,
     "        x3 = self.norm2(x2)",
     "        x3 = F.layer_norm(x2, x2.shape[-1:], self.norm2.weight, self.norm2.bias, 1e-6)",
     ["encoder_layer", "vit"], "nn.LayerNorm's forward is this call with its own eps (1e-6)."),
]


def _line(impl: str, original: str) -> int:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i + 1 for i, line in enumerate(lines) if line == original]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {original!r} occurs {len(hits)} times")
    return hits[0]


def tables() -> tuple[list[dict], list[dict]]:
    bugs = []
    for (id_, impl, original, replacement, components, family, klass, codes, without,
         report, description) in BUGS:  # fmt: skip
        bugs.append({
            "id": id_, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": _line(impl, original),
            "original": original, "replacement": replacement, "components": components,
            "family": family, "class": klass, "expected_codes": codes,
            "class_without_code": without, "public_report": report, "description": description,
        })  # fmt: skip
    controls = []
    for id_, impl, original, replacement, components, why in CONTROLS:
        controls.append({
            "id": id_, "impl": impl, "file": f"{FOLDER}/{impl}.py", "line": _line(impl, original),
            "original": original, "replacement": replacement, "components": components,
            "why_correct": why,
        })  # fmt: skip
    return bugs, controls


def main() -> None:
    bugs, controls = tables()
    for name, rows in (("bugs.json", bugs), ("controls.json", controls)):
        (HERE / name).write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", "utf-8")
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
