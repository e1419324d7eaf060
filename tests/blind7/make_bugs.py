# fmt: off
# ruff: noqa: E501  (the tables quote source lines verbatim)
"""Write bugs.json and controls.json of the seventh blind set from the rows below.

Each row names its implementation, the stripped text of the one line it replaces (which must
occur exactly once, stripped, in the implementation) and the stripped replacement; the line
number, the exact original line and the indented replacement are computed here from the
implementation file, so the tables always match the frozen files.

    python tests/blind7/make_bugs.py          # rewrite the JSON tables
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
FOLDER = "tests/blind7"

G = "hf_gpt2"
M = "mistral_ref"
B = "paper_bert"
G_ALL = ["causal_self_attention", "decoder_block", "causal_lm"]
G_BLOCK = ["decoder_block", "causal_lm"]
G_LM = ["causal_lm"]
M_ATTN = ["causal_self_attention", "decoder_block"]
M_ROPE = ["rope", "causal_self_attention", "decoder_block"]
M_NORM = ["rms_norm", "decoder_block"]
M_FFN = ["gated_ffn", "decoder_block"]
M_BLOCK = ["decoder_block"]
B_LAYERS = ["encoder_layer", "encoder"]
B_NORM = ["layer_norm", "encoder_layer", "encoder"]
HF = "https://github.com/huggingface/transformers"

# (id, impl, original (stripped), replacement (stripped), components, family, class,
#  public_report, description)
BUGS = [
    # ---- hf_gpt2 ----
    ("g.split_heads_reshape_not_permute", G,
     "return tensor.permute(0, 2, 1, 3)  # (batch, head, seq_length, head_features)",
     "return tensor.reshape(tensor.size(0), num_heads, -1, attn_head_size)  # (batch, head, seq_length, head_features)",
     G_ALL, "heads",
     "head split by reshaping [B, T, H, d] straight to [B, H, T, d] instead of transposing: "
     "each head's rows mix positions and channels of other heads",
     "https://github.com/reczoo/FuxiCTR/issues/30",
     "_split_heads reshapes the [B, T, H, d] view to [B, H, T, d] instead of permuting, as "
     "tutorials that drop the transpose do"),
    ("g.causal_slice_top_left", G,
     "causal_mask = self.bias[:, :, key_length - query_length : key_length, :key_length]",
     "causal_mask = self.bias[:, :, :query_length, :key_length]",
     G_ALL, "kv_cache",
     "causal mask for a call on a non-empty cache aligned top-left (rows 0..n-1 of the "
     "square mask) instead of at the cache offset: new tokens cannot see most cached keys",
     "https://github.com/huggingface/candle/pull/3743",
     "the registered causal buffer is sliced from row 0 instead of from key_length - "
     "query_length, as a port that never ran with layer_past writes it"),
    ("g.scale_by_model_width", G,
     "[], value.size(-1) ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device",
     "[], self.embed_dim ** 0.5, dtype=attn_weights.dtype, device=attn_weights.device",
     G_ALL, "attention_scale",
     "attention scores divided by sqrt of the model width instead of sqrt of the head "
     "width (softmax temperature wrong)",
     "",
     "the score scale reads the embedding width instead of value.size(-1)"),
    ("g.exact_gelu_for_gelu_new", G,
     "self.act = gelu_new",
     "self.act = nn.functional.gelu",
     G_BLOCK, "ffn_activation",
     "exact (erf) GELU used where the model's FFN activation is the tanh approximation",
     "https://github.com/kyutai-labs/pocket-tts/pull/278",
     "the MLP's activation swapped for torch's default (exact) GELU when tidying up the "
     "custom gelu_new"),
    ("g.final_norm_dropped", G,
     "hidden_states = self.ln_f(hidden_states)",
     "hidden_states = hidden_states  # ln_f is applied by the head",
     G_LM, "norm",
     "the final norm of a pre-LN stack not applied before the output head",
     "",
     "ln_f skipped in GPT2Model.forward, believing the head applies it"),
    ("g.mlp_residual_from_normed", G,
     "hidden_states = residual + feed_forward_hidden_states",
     "hidden_states = hidden_states + feed_forward_hidden_states",
     G_BLOCK, "residual",
     "residual connection taken from the normalised sublayer input instead of the "
     "un-normalised residual stream",
     "",
     "the MLP residual adds the ln_2 output (the variable was reused) instead of the saved "
     "residual"),
    ("g.derived_positions_not_offset", G,
     "position_ids = torch.arange(past_length, input_shape[-1] + past_length, dtype=torch.long)",
     "position_ids = torch.arange(0, input_shape[-1], dtype=torch.long)",
     G_LM, "positions",
     "position ids derived for new tokens numbered from 0 instead of after the cached tokens",
     "",
     "the default position ids ignore past_length, so every cached step reuses positions "
     "0..n-1"),
    ("g.layer_past_order_swapped", G,
     "past_key, past_value = layer_past",
     "past_value, past_key = layer_past",
     G_ALL, "kv_cache",
     "cached keys and values read back in swapped order (the cache's tuple layout "
     "misread): cached keys used as values and cached values as keys",
     "",
     "layer_past unpacked as (value, key), as code written against another cache layout "
     "reads it"),
    ("g.lm_head_not_tied", G,
     "self.lm_head.weight = self.transformer.wte.weight  # tie_weights()",
     "pass  # tie_weights() is called by post_init()",
     G_LM, "weight_tying",
     "output projection not tied to the token embedding although the model declares tied "
     "weights: a separate, untrained head matrix produces the logits",
     "https://github.com/huggingface/transformers/pull/43429",
     "the explicit tie is removed, relying on a post_init that this port never calls"),
    ("g.padding_mask_on_query_axis", G,
     "attention_mask = attention_mask[:, None, None, :]",
     "attention_mask = attention_mask[:, None, :, None]",
     G_ALL, "mask",
     "padding mask broadcast over the query axis instead of the key axis: padded keys "
     "stay visible (a per-row constant shift changes nothing)",
     "",
     "the [B, T] mask expanded to [B, 1, T, 1] instead of [B, 1, 1, T]"),
    ("g.padding_mask_inverted", G,
     "return (1.0 - attention_mask) * torch.finfo(dtype).min",
     "return attention_mask * torch.finfo(dtype).min",
     G_ALL, "mask",
     "padding keep-mask polarity inverted: real tokens masked, padding attended",
     "",
     "the additive mask built as if the input marked padding with 1 (a fairseq-style "
     "key_padding_mask) while it marks tokens with 1"),
    ("g.position_ids_dropped", G,
     "position_ids=position_ids, use_cache=use_cache,",
     "position_ids=None, use_cache=use_cache,",
     G_LM, "positions",
     "caller's position ids ignored: learned positions counted from the first slot, so a "
     "left-padded row's real tokens are shifted by the number of pads",
     f"{HF}/issues/21080",
     "GPT2LMHeadModel does not forward position_ids to the transformer"),
    # ---- mistral_ref ----
    ("m.rope_exponent_half_width", M,
     "freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64)[: (dim // 2)] / dim))",
     "freqs = 1.0 / (theta ** (torch.arange(0, dim // 2, dtype=torch.float64) / dim))",
     M_ROPE, "rope",
     "RoPE inverse frequencies computed with exponent i/d instead of 2i/d (step of the "
     "arange dropped): every pair rotates at the wrong frequency",
     "https://github.com/rasbt/LLMs-from-scratch/issues/410",
     "precompute_freqs_cis's arange written without its step of 2"),
    ("m.rope_theta_llama_default", M,
     "rope_theta: float = 1000000.0",
     "rope_theta: float = 10000.0",
     M_ATTN, "rope",
     "RoPE base (theta) of another model version used: 1e4 where the model is configured "
     "for 1e6",
     "",
     "ModelArgs keeps Llama's default rope_theta, so the attention rotates with base 1e4 "
     "while the checkpoint (and the standalone rope table) uses 1e6"),
    ("m.keys_not_rotated", M,
     "xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)",
     "xk_out = torch.view_as_real(xk_).flatten(3)",
     M_ATTN, "rope",
     "rotary embedding applied to the queries only; keys left unrotated",
     "",
     "apply_rotary_emb multiplies only the queries by freqs_cis"),
    ("m.gqa_tiled_not_interleaved", M,
     "keys = torch.repeat_interleave(keys, repeats=repeats, dim=2)",
     "keys = keys.repeat(1, 1, repeats, 1)",
     M_ATTN, "gqa",
     "grouped-query key heads tiled (query head h served by key head h mod H_kv) instead "
     "of repeated in place (h // g)",
     "https://github.com/onnx/onnx/pull/7274",
     "repeat_kv's key expansion written with Tensor.repeat (tile); the values keep "
     "repeat_interleave"),
    ("m.sliding_window_one_too_wide", M,
     "mask = torch.triu(mask, diagonal=start_pos - sliding_window + 1)",
     "mask = torch.triu(mask, diagonal=start_pos - sliding_window)",
     M_ATTN, "sliding_window",
     "sliding window one key too wide: a query sees w + 1 keys instead of w",
     f"{HF}/issues/29623",
     "the band written as mistral-src's first one-file reference wrote it, "
     "triu(diagonal=-sliding_window)"),
    ("m.causal_not_offset_by_cache", M,
     "mask = torch.tril(mask, diagonal=start_pos)",
     "mask = torch.tril(mask, diagonal=0)",
     M_ATTN, "kv_cache",
     "causal mask of a call on a non-empty cache aligned top-left instead of offset by the "
     "cache length: a chunk's queries cannot see most cached keys",
     "https://github.com/huggingface/candle/pull/3743",
     "the causal band is built as for a fresh sequence, ignoring start_pos"),
    ("m.cache_only_new_keys", M,
     "keys = cache.cache_k[:bsz, : start_pos + seqlen]",
     "keys = cache.cache_k[:bsz, start_pos : start_pos + seqlen]",
     M_ATTN, "kv_cache",
     "cached keys written but never read back: each step attends only its own new keys "
     "(against all cached values)",
     "",
     "the keys are read from the cache starting at start_pos, the slice that was just "
     "written"),
    ("m.derived_positions_from_zero", M,
     "freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]",
     "freqs_cis = self.freqs_cis[:seqlen]",
     M_ATTN, "positions",
     "positions of new tokens derived from 0 instead of from the cache length when none "
     "are given (RoPE angles of a step restart at 0)",
     "",
     "the RoPE table sliced from 0 instead of from start_pos"),
    ("m.rms_uses_variance", M,
     "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
     "return x * torch.rsqrt(x.var(-1, keepdim=True) + self.eps)",
     M_NORM, "norm",
     "RMSNorm computed with the (mean-subtracted, unbiased) variance instead of the mean "
     "square",
     "https://github.com/allenai/OLMo/issues/281",
     "the mean square written as torch's var(), which centres and divides by D - 1"),
    ("m.rms_weight_offset", M,
     "return output * self.weight",
     "return output * (1 + self.weight)",
     M_NORM, "norm",
     "norm gain applied as (1 + weight), a zero-centred-gain convention of another model "
     "family, to weights stored as the gain itself",
     "https://github.com/linkedin/Liger-Kernel/issues/74",
     "Gemma's RMSNorm gain convention copied into a Mistral-style RMSNorm"),
    ("m.rms_statistics_in_half", M,
     "output = self._norm(_upcast(x)).type_as(x)",
     "output = self._norm(x).type_as(x)",
     M_NORM, "precision",
     "norm statistics (mean square) computed in the 16-bit input dtype instead of float32: "
     "squares overflow or lose precision",
     "https://github.com/pytorch/pytorch/pull/134106",
     "the .float() upcast before the norm statistics dropped"),
    ("m.swiglu_gate_up_swapped", M,
     "return self.w2(F.silu(self.w1(x)) * self.w3(x))",
     "return self.w2(F.silu(self.w3(x)) * self.w1(x))",
     M_FFN, "ffn_activation",
     "gated FFN activates the up projection and multiplies by the gate projection "
     "(gate and up roles swapped)",
     "",
     "w1 and w3 read the wrong way round, as in a checkpoint conversion that mislabels them"),
    ("m.ffn_residual_from_block_input", M,
     "out = h + r",
     "out = x + r",
     M_BLOCK, "residual",
     "second residual adds the block input instead of the stream after the attention "
     "residual: the attention output is lost from the block output",
     "",
     "the FFN residual written with x (the block input) instead of h"),
    # ---- paper_bert ----
    ("b.layernorm_eps_outside_sqrt", B,
     "x = (x - u) / torch.sqrt(s + self.variance_epsilon)",
     "x = (x - u) / (torch.sqrt(s) + self.variance_epsilon)",
     B_NORM, "norm",
     "LayerNorm epsilon added to the standard deviation instead of inside the square root",
     "",
     "BertLayerNorm divides by std + eps, the Annotated Transformer's form"),
    ("b.layernorm_unbiased_variance", B,
     "s = (x - u).pow(2).mean(-1, keepdim=True)",
     "s = x.var(-1, keepdim=True)",
     B_NORM, "norm",
     "LayerNorm variance computed unbiased (divided by D - 1) instead of biased (D)",
     "",
     "the variance written with torch's var(), whose default is unbiased"),
    ("b.gelu_tanh_for_erf", B,
     "self.intermediate_act_fn = gelu",
     'self.intermediate_act_fn = lambda x: nn.functional.gelu(x, approximate="tanh")',
     B_LAYERS, "ffn_activation",
     "tanh-approximate GELU used where the model's activation is exact (erf) GELU",
     "https://github.com/dmlc/gluon-nlp/issues/1203",
     "the activation replaced by the tanh approximation (HF's gelu_new / later TF BERT)"),
    ("b.mask_polarity_inverted", B,
     "extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0",
     "extended_attention_mask = extended_attention_mask * -10000.0",
     B_LAYERS, "mask",
     "padding keep-mask polarity inverted: real tokens masked, padding attended",
     "",
     "the additive mask computed as if the mask marked padding with 1"),
    ("b.qkv_value_key_swapped", B,
     "mixed_query_layer, mixed_key_layer, mixed_value_layer = self.qkv(hidden_states).chunk(3, dim=-1)",
     "mixed_query_layer, mixed_value_layer, mixed_key_layer = self.qkv(hidden_states).chunk(3, dim=-1)",
     B_LAYERS, "weight_layout",
     "fused qkv projection split in the wrong order (key and value thirds swapped)",
     "",
     "the fused projection's thirds unpacked as q, v, k"),
    ("b.qkv_per_head_interleaved", B,
     "mixed_query_layer, mixed_key_layer, mixed_value_layer = self.qkv(hidden_states).chunk(3, dim=-1)",
     "mixed_query_layer, mixed_key_layer, mixed_value_layer = (t.flatten(2) for t in self.qkv(hidden_states).unflatten(-1, (self.num_attention_heads, 3 * self.attention_head_size)).chunk(3, dim=-1))",
     B_LAYERS, "weight_layout",
     "fused qkv weight read with a per-head interleaved layout ([q_h, k_h, v_h] per head) "
     "while it is stored blocked ([Q | K | V])",
     "https://github.com/awslabs/slapo/pull/46",
     "the fused output cut per head, Megatron-style, on a blocked checkpoint"),
    ("b.scale_by_head_dim_not_sqrt", B,
     "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
     "attention_scores = attention_scores / self.attention_head_size",
     B_LAYERS, "attention_scale",
     "attention scores divided by the head width instead of its square root",
     "",
     "the scale written as 1/d (muP style) instead of 1/sqrt(d)"),
    ("b.ffn_residual_from_layer_input", B,
     "layer_output = self.output(intermediate_output, attention_output)",
     "layer_output = self.output(intermediate_output, hidden_states)",
     B_LAYERS, "residual",
     "FFN sublayer's residual adds the layer input instead of the attention sublayer's "
     "output",
     "",
     "BertOutput is given the layer input as its residual"),
    ("b.attention_norm_before_add", B,
     "hidden_states = self.LayerNorm(hidden_states + input_tensor)",
     "hidden_states = self.LayerNorm(hidden_states) + input_tensor",
     B_LAYERS, "norm_placement",
     "attention sublayer's norm applied to the sublayer output before the residual add "
     "instead of after it (the residual stream left un-normalised)",
     "",
     "BertSelfOutput normalises the attention output and then adds the residual"),
    ("b.attention_dropout_in_eval", B,
     "attention_probs = self.dropout(attention_probs)",
     "attention_probs = nn.functional.dropout(attention_probs, p=0.1)",
     B_LAYERS, "dropout",
     "dropout active in evaluation mode (functional dropout without training=self.training)",
     "https://github.com/BogiHsu/Tacotron2-PyTorch/issues/8",
     "the attention dropout module replaced by F.dropout, whose training flag defaults to "
     "True"),
    ("b.heads_merged_dim_major", B,
     "context_layer = context_layer.permute(0, 2, 1, 3).contiguous()",
     "context_layer = context_layer.permute(0, 2, 3, 1).contiguous()",
     B_LAYERS, "heads",
     "heads merged in the wrong order (channel-major: [B, L, d, H] flattened) before the "
     "output projection",
     "",
     "the merge permutes to [B, L, d, H] instead of [B, L, H, d]"),
]

# (id, impl, original, replacement, components, why_correct)
CONTROLS = [
    ("control.g.chunk_for_split", G,
     "query, key, value = self.c_attn(hidden_states).split(self.split_size, dim=2)",
     "query, key, value = self.c_attn(hidden_states).chunk(3, dim=2)",
     G_ALL, "split into equal thirds of width D is chunk(3)"),
    ("control.g.merge_by_transpose", G,
     "tensor = tensor.permute(0, 2, 1, 3).contiguous()",
     "tensor = tensor.transpose(1, 2).contiguous()",
     G_ALL, "permute(0, 2, 1, 3) of a 4-D tensor is transpose(1, 2)"),
    ("control.m.repeat_kv_expand", M,
     "values = torch.repeat_interleave(values, repeats=repeats, dim=2)",
     "values = values[:, :, :, None, :].expand(-1, -1, -1, repeats, -1).flatten(2, 3)",
     M_ATTN, "expand on a new axis after the head axis and flatten is repeat_interleave"),
    ("control.m.square_by_product", M,
     "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)",
     "return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)",
     M_NORM, "x * x is x.pow(2)"),
    ("control.m.scale_by_rsqrt", M,
     "self.scale = self.head_dim ** -0.5",
     "self.scale = 1.0 / math.sqrt(self.head_dim)",
     M_ATTN, "the same number"),
    ("control.b.scale_by_power", B,
     "attention_scores = attention_scores / math.sqrt(self.attention_head_size)",
     "attention_scores = attention_scores * self.attention_head_size ** -0.5",
     B_LAYERS, "multiplying by d ** -0.5 is dividing by sqrt(d)"),
    ("control.b.softmax_method", B,
     "attention_probs = nn.Softmax(dim=-1)(attention_scores)",
     "attention_probs = attention_scores.softmax(dim=-1)",
     B_LAYERS, "the module and the method call the same softmax over the keys"),
]


def _locate(impl: str, stripped: str) -> tuple[int, str]:
    lines = (HERE / f"{impl}.py").read_text(encoding="utf-8").split("\n")
    hits = [i for i, line in enumerate(lines) if line.strip() == stripped]
    if len(hits) != 1:
        raise ValueError(f"{impl}: {stripped!r} occurs {len(hits)} times")
    return hits[0] + 1, lines[hits[0]]


def _row(ident, impl, original, replacement, components):
    line, exact = _locate(impl, original)
    indent = exact[: len(exact) - len(exact.lstrip())]
    return {
        "id": ident,
        "impl": impl,
        "file": f"{FOLDER}/{impl}.py",
        "line": line,
        "original": exact,
        "replacement": indent + replacement,
        "components": list(components),
    }


def tables() -> tuple[list[dict], list[dict]]:
    frozen = {}
    path = HERE / "bugs.json"
    if path.is_file():  # phase 2 fills these two fields by hand; keep them
        frozen = {b["id"]: b for b in json.loads(path.read_text(encoding="utf-8"))}
    bugs = []
    for ident, impl, orig, repl, comps, family, klass, report, desc in BUGS:
        row = _row(ident, impl, orig, repl, comps)
        row |= {
            "family": family,
            "class": klass,
            "expected_codes": frozen.get(ident, {}).get("expected_codes", []),
            "class_without_code": frozen.get(ident, {}).get("class_without_code", ""),
            "public_report": report,
            "description": desc,
        }
        bugs.append(row)
    controls = []
    for ident, impl, orig, repl, comps, why in CONTROLS:
        controls.append(_row(ident, impl, orig, repl, comps) | {"why_correct": why})
    return bugs, controls


def main() -> None:
    bugs, controls = tables()
    (HERE / "bugs.json").write_text(json.dumps(bugs, indent=1, ensure_ascii=False) + "\n", "utf-8")
    (HERE / "controls.json").write_text(
        json.dumps(controls, indent=1, ensure_ascii=False) + "\n", "utf-8"
    )
    print(f"{len(bugs)} bugs, {len(controls)} controls")


if __name__ == "__main__":
    main()
