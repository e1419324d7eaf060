"""The built-in decoder-only HuggingFace adapters ``hf.gpt2`` and ``hf.llama`` (SPEC.md §11):
transformers' ``GPT2LMHeadModel`` and ``LlamaForCausalLM``, randomly initialised from small
configs (nothing is downloaded), in eval mode, cut into the pieces §11 names: the causal
self-attention, the block, the whole language model (and Llama's gated MLP), each with
``attn_implementation="eager"`` and ``"sdpa"``.

Masks and caches are transformers' own: ``masking_utils.create_causal_mask`` builds the
causal mask from our key padding (a 2D ``attention_mask``, 1 = attend: our keep polarity)
and the ``DynamicCache`` it is given, as the models build it; ``step`` (SPEC.md §11.6) feeds
the new tokens with a ``DynamicCache`` the way ``generate()`` does, the pieces of layer 0
with their ``layer_idx`` and the models through ``cache=`` / ``use_cache=True``.

GPT-2 stores its linear layers as ``Conv1D`` ([in, out]) and fuses q, k and v into
``c_attn``: the parameter map slices and transposes (``Chunk(dim=1, transposed=True)``).
Llama computes RMSNorm and the RoPE angles in float32 whatever the model's dtype, and its
eager softmax in float32: in float64 its subjects declare those steps as
``Conventions.float32_steps`` (SPEC.md §10.12), and their float64 checks take the island
bound. The eager model in float64 takes no left pad: its float32 softmax turns the mask's
``finfo(float64).min`` into -inf, NaN at a left pad's fully masked rows that the next layer
carries to real tokens (``LLAMA_EAGER_FLOAT64_NOTE``); those calls are Unsupported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from tck.usage import INSTALL

try:  # one clear line from load_adapter when transformers is missing or broken
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    from transformers.cache_utils import DynamicCache
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask
except Exception as err:  # a broken install fails in many ways, not only ImportError
    raise ImportError(
        f"the hf adapters need transformers ({INSTALL['hf']}), and importing it failed: "
        f"{type(err).__name__}: {err}"
    ) from err

from tck.reference import DECODER_CANONICAL, Config, Conventions

from .base import Subject, Unsupported
from .config_space import ConfigSpace, parts_without_bias
from .torch_module import Chunk, ParamMap, TorchEntry, TorchHandle, TorchModuleAdapter

IMPLEMENTATIONS = ("eager", "sdpa")
# A left pad's query has no key at all (SPEC.md §4.4): eager adds finfo.min (finite: the mean
# of V; NaN in float16), sdpa gets a boolean mask. The §11 checks never read those rows.
ROWS = {"eager": "undefined", "sdpa": "undefined"}
LOWER_PRECISION = ("float32", "float16", "bfloat16")

MASK_NOTE = (
    "Masks are built by transformers.masking_utils.create_causal_mask from a 2D attention_mask "
    "(1 = attend, our keep polarity) and the DynamicCache, as the models build them; position "
    "ids are passed as position_ids."
)
CACHE_NOTE = (
    "step() decodes with transformers' DynamicCache: the pieces of layer 0 get cache= and their "
    "layer_idx, the models cache= and use_cache=True, as generate() calls them."
)
ROWS_NOTE = (
    "A query whose keys are all masked (the first pads of a left-padded row) is declared "
    "undefined: eager adds torch.finfo(dtype).min and gives the mean of V (NaN in float16)."
)
LLAMA_FLOAT32_NOTE = (
    "LlamaRMSNorm normalises in float32 (hidden_states.to(torch.float32)), "
    "LlamaRotaryEmbedding computes its angles position_ids.float() * inv_freq in float32, and "
    "eager attention its softmax (softmax(..., dtype=torch.float32)), whatever the model's "
    "dtype: in float64 these steps are declared Conventions.float32_steps (SPEC.md §10.12) and "
    "the float64 checks take the island bound (16 float32 unit roundoffs at the output's scale)."
)
LLAMA_EAGER_FLOAT64_NOTE = (
    "transformers' eager Llama masks with torch.finfo(dtype).min: in float64 (-1.8e308) its "
    "float32 softmax turns that into -inf, so the fully masked query rows of a left pad are "
    "NaN after layer 0 and, as masked keys of layer 1, make its real tokens NaN (sdpa and the "
    "one-layer pieces are unaffected): a float64 eager model of 2+ layers takes no left pad"
)
# SPEC.md §10.12: the steps transformers' Llama family computes in float32 in a float64
# model, by subject (read in modeling_llama.py: LlamaRMSNorm.forward, LlamaRotaryEmbedding
# .forward, eager_attention_forward; sdpa's softmax runs in the query's dtype).
LLAMA_ATTENTION_STEPS = {"eager": ("rope_angles", "softmax"), "sdpa": ("rope_angles",)}


def llama_float32_steps(component: str, implementation: str) -> tuple[str, ...]:
    """``Conventions.float32_steps`` of a Llama-family ``component`` (causal_self_attention,
    decoder_block, causal_lm, gated_ffn) run with ``implementation`` (eager, sdpa, ...)."""
    if component == "gated_ffn":
        return ()
    steps = LLAMA_ATTENTION_STEPS.get(implementation, LLAMA_ATTENTION_STEPS["eager"])
    if component == "causal_self_attention":
        return steps
    return ("norm_statistics", *steps)


def _require(config: Config, model: str, *, gqa: bool) -> None:
    dk, dv, h, d = config.head_dim_k, config.head_dim_v, config.n_heads, config.d_model
    if dk != dv or (model == "GPT2" and dk * h != d):
        raise Unsupported(
            f"{model} cuts hidden_size={d} into {h} heads of one width for queries, keys and "
            f"values: it cannot express d_k={dk}, d_v={dv}"
        )
    if not gqa and config.kv_heads != h:
        raise Unsupported(f"{model} has no grouped-query attention (n_kv_heads={config.kv_heads})")


# ------------------------------------------------------------------------------- GPT-2

# What GPT-2's subjects can be (Subject.supports, SPEC.md §0.6), as _gpt2 enforces it on a
# direct build: heads of d_model / n_heads, no grouped-query attention (n_kv_heads unset:
# one key/value head per query head, §11.2), every bias, the head tied to the token table.
GPT2_SPACE = ConfigSpace(
    fixed={"n_kv_heads": None},
    split_heads=True,
    biases={"attention": True, "attention_out": True, "ffn": True, "norm": True},
    tied=True,
)


def _gpt2(config: Config, implementation: str) -> GPT2LMHeadModel:
    _require(config, "GPT2", gqa=False)
    without = parts_without_bias(config)
    if without:  # SPEC.md §0.5
        raise Unsupported(
            "GPT-2's Conv1D and LayerNorm layers always carry a bias: "
            f"{', '.join(without)}=False is not offered"
        )
    if not config.tie_weights:
        raise Unsupported("GPT2LMHeadModel ties its head to the token table")
    gpt2_config = GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.max_len,
        n_embd=config.d_model,
        n_layer=config.n_layers,
        n_head=config.n_heads,
        n_inner=config.d_ff,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        bos_token_id=None,
        eos_token_id=None,
        attn_implementation=implementation,
    )
    return GPT2LMHeadModel(gpt2_config)


def _conv1d(ours: str, theirs: str, index: int = 0, parts: int = 1) -> ParamMap:
    """A GPT-2 Conv1D ([in, out]) slice as a canonical linear ([out, in])."""
    return {
        f"{ours}weight": Chunk(f"{theirs}weight", index, parts, dim=1, transposed=True),
        f"{ours}bias": Chunk(f"{theirs}bias", index, parts),
    }


def _gpt2_attention_map(ours: str, theirs: str) -> ParamMap:
    mapping: ParamMap = {}
    for index, name in enumerate("qkv"):
        mapping.update(_conv1d(f"{ours}{name}.", f"{theirs}c_attn.", index, 3))
    return {**mapping, **_conv1d(f"{ours}o.", f"{theirs}c_proj.")}


def _gpt2_block_map(ours: str, theirs: str) -> ParamMap:
    return {
        **_gpt2_attention_map(f"{ours}self_attn.", f"{theirs}attn."),
        f"{ours}norm1.weight": f"{theirs}ln_1.weight",
        f"{ours}norm1.bias": f"{theirs}ln_1.bias",
        **_conv1d(f"{ours}ffn.fc1.", f"{theirs}mlp.c_fc."),
        **_conv1d(f"{ours}ffn.fc2.", f"{theirs}mlp.c_proj."),
        f"{ours}norm2.weight": f"{theirs}ln_2.weight",
        f"{ours}norm2.bias": f"{theirs}ln_2.bias",
    }


def _gpt2_model_map(config: Config) -> ParamMap:
    mapping: ParamMap = {
        "embedding.weight": "transformer.wte.weight",
        "pos_embedding.weight": "transformer.wpe.weight",
        "norm.weight": "transformer.ln_f.weight",
        "norm.bias": "transformer.ln_f.bias",
    }
    for i in range(config.n_layers):
        mapping.update(_gpt2_block_map(f"layers.{i}.", f"transformer.h.{i}."))
    return mapping


# ------------------------------------------------------------------------------- Llama


def rope_parameters(conventions: Conventions) -> dict[str, Any]:
    """transformers' ``rope_parameters`` for the declared RoPE base and scaling (SPEC.md §2.3,
    §2.6): ``rope_type`` default, linear or llama3, with the factors each reads."""
    out: dict[str, Any] = {"rope_theta": conventions.pe_base}
    if conventions.rope_scaling == "none":
        return {"rope_type": "default", **out}
    out.update(rope_type=conventions.rope_scaling, factor=conventions.rope_scaling_factor)
    if conventions.rope_scaling == "llama3":
        out.update(
            low_freq_factor=conventions.rope_low_freq_factor,
            high_freq_factor=conventions.rope_high_freq_factor,
            original_max_position_embeddings=conventions.rope_original_max_positions,
        )
    return out


def _llama(
    config: Config, implementation: str, conventions: Conventions | None = None
) -> LlamaForCausalLM:
    """``conventions``: the declared RoPE base and scaling (SPEC.md §2.6) go to LlamaConfig's
    ``rope_parameters``; None keeps LlamaConfig's default (base 10000, unscaled)."""
    _require(config, "Llama", gqa=True)
    rope = {} if conventions is None else {"rope_parameters": rope_parameters(conventions)}
    if config.has_attention_bias != config.has_attention_out_bias:  # SPEC.md §0.5
        return _qwen2(config, implementation, rope)
    llama_config = LlamaConfig(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.kv_heads,
        head_dim=config.head_dim_k,
        max_position_embeddings=config.max_len,
        rms_norm_eps=1e-6,
        attention_bias=config.has_attention_bias,  # SPEC.md §0.5
        mlp_bias=config.has_ffn_bias,
        hidden_act="silu",
        tie_word_embeddings=config.tie_weights,
        attn_implementation=implementation,
        **rope,
    )
    return LlamaForCausalLM(llama_config)


def _qwen2(config: Config, implementation: str, rope: dict[str, Any]) -> nn.Module:
    """Qwen2: Llama's block with biases on q, k and v but not on o, and none in the MLP
    (transformers' Qwen2Attention and Qwen2MLP): the one layout with the q/k/v bias apart
    from the output projection's (SPEC.md §0.5) that transformers builds for this family."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if not config.has_attention_bias or config.has_attention_out_bias or config.has_ffn_bias:
        raise Unsupported(
            "LlamaConfig.attention_bias switches q, k, v and o together, and Qwen2 has biases on "
            "q, k, v only with none in the MLP: attention_bias="
            f"{config.has_attention_bias}, attention_out_bias={config.has_attention_out_bias}, "
            f"ffn_bias={config.has_ffn_bias} is not offered"
        )
    qwen2_config = Qwen2Config(
        vocab_size=config.vocab_size,
        hidden_size=config.d_model,
        intermediate_size=config.d_ff,
        num_hidden_layers=config.n_layers,
        num_attention_heads=config.n_heads,
        num_key_value_heads=config.kv_heads,
        head_dim=config.head_dim_k,
        max_position_embeddings=config.max_len,
        rms_norm_eps=1e-6,
        hidden_act="silu",
        use_sliding_window=False,
        tie_word_embeddings=config.tie_weights,
        attn_implementation=implementation,
        **rope,
    )
    return Qwen2ForCausalLM(qwen2_config)


def _linear(ours: str, theirs: str, bias: bool) -> ParamMap:
    mapping: ParamMap = {f"{ours}weight": f"{theirs}weight"}
    if bias:
        mapping[f"{ours}bias"] = f"{theirs}bias"
    return mapping


def _llama_attention_map(
    ours: str, theirs: str, bias: bool, out_bias: bool | None = None
) -> ParamMap:
    """q, k, v (``bias``) and o (``out_bias``, default ``bias``; SPEC.md §0.5)."""
    mapping: ParamMap = {}
    for name in "qkvo":
        has = bias if name != "o" or out_bias is None else out_bias
        mapping.update(_linear(f"{ours}{name}.", f"{theirs}{name}_proj.", has))
    return mapping


def _llama_mlp_map(ours: str, theirs: str, bias: bool) -> ParamMap:
    return {
        **_linear(f"{ours}gate.", f"{theirs}gate_proj.", bias),
        **_linear(f"{ours}up.", f"{theirs}up_proj.", bias),
        **_linear(f"{ours}down.", f"{theirs}down_proj.", bias),
    }


def _llama_block_map(ours: str, theirs: str, config: Config) -> ParamMap:
    return {
        **_llama_attention_map(
            f"{ours}self_attn.",
            f"{theirs}self_attn.",
            config.has_attention_bias,
            config.has_attention_out_bias,
        ),
        f"{ours}norm1.weight": f"{theirs}input_layernorm.weight",
        **_llama_mlp_map(f"{ours}ffn.", f"{theirs}mlp.", config.has_ffn_bias),
        f"{ours}norm2.weight": f"{theirs}post_attention_layernorm.weight",
    }


def _llama_model_map(config: Config) -> ParamMap:
    mapping: ParamMap = {
        "embedding.weight": "model.embed_tokens.weight",
        "norm.weight": "model.norm.weight",
    }
    for i in range(config.n_layers):
        mapping.update(_llama_block_map(f"layers.{i}.", f"model.layers.{i}.", config))
    if not config.tie_weights:
        mapping["lm_head.weight"] = "lm_head.weight"
    return mapping


# ------------------------------------------------------------------------ calling them


def _positions(x: Tensor, positions: Tensor | None, past: int) -> Tensor:
    b, n = x.shape[:2]
    if positions is None:
        return torch.arange(past, past + n, device=x.device).expand(b, n)
    return positions


def _causal_mask(m: nn.Module, x: Tensor, key_padding, positions, cache) -> Any:
    """The mask transformers' model builds for these tokens (x: embeddings [B, n, D]): with
    a sliding window when layer 0 has one (Mistral's ``sliding_window``, SPEC.md §4.5)."""
    return _mask_function(m.config)(
        config=m.config,
        inputs_embeds=x,
        attention_mask=None if key_padding is None else key_padding.long(),
        cache=cache,
        position_ids=positions,
    )


def _mask_function(config: Any) -> Callable[..., Any]:
    """How transformers masks layer 0 of a model with this config: MistralModel windows
    every layer when ``sliding_window`` is set; models with ``layer_types`` (Qwen2) follow
    the first layer's type."""
    types = getattr(config, "layer_types", None)
    if types:
        sliding = types[0] == "sliding_attention"
    else:
        sliding = getattr(config, "sliding_window", None) is not None
    return create_sliding_window_causal_mask if sliding else create_causal_mask


def _piece(call: Callable[..., Tensor]) -> tuple[Callable[..., Tensor], Callable[..., Any]]:
    """forward and step of a piece of layer 0, from ``call(m, x, mask, positions, cache)``."""

    def forward(m, x, key_padding=None, positions=None):
        positions = _positions(x, positions, 0)
        return call(m, x, _causal_mask(m, x, key_padding, positions, None), positions, None)

    def step(m, cache, x, key_padding=None, positions=None):
        cache = DynamicCache(config=m.config) if cache is None else cache
        positions = _positions(x, positions, cache.get_seq_length())
        mask = _causal_mask(m, x, key_padding, positions, cache)
        return call(m, x, mask, positions, cache), cache

    return forward, step


def _refuse_nan_padding(m: nn.Module, key_padding: Tensor | None) -> None:
    """Unsupported: a left pad in a float64 eager Llama-family model of two layers or more
    (``LLAMA_EAGER_FLOAT64_NOTE``: transformers returns NaN at its real tokens there)."""
    if (
        key_padding is not None
        and m.dtype == torch.float64
        and m.config._attn_implementation == "eager"
        and m.config.num_hidden_layers > 1
        and not bool(key_padding[:, 0].all())  # a row whose first key is a pad
    ):
        raise Unsupported(LLAMA_EAGER_FLOAT64_NOTE)


def _model(
    guard: Callable[[nn.Module, Tensor | None], None] | None = None,
) -> tuple[Callable[..., Tensor], Callable[..., Any]]:
    """forward and step of a whole model; ``guard(m, key_padding)`` refuses inputs first."""

    def forward(m, ids, key_padding=None, positions=None):
        if guard is not None:
            guard(m, key_padding)
        mask = None if key_padding is None else key_padding.long()
        return m(input_ids=ids, attention_mask=mask, position_ids=positions).logits

    def step(m, cache, ids, key_padding=None, positions=None):
        if guard is not None:
            guard(m, key_padding)
        mask = None if key_padding is None else key_padding.long()
        out = m(
            input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True
        )
        return out.logits, out.cache

    return forward, step


def _gpt2_attention(m, x, mask, positions, cache):
    return m.transformer.h[0].attn(x, cache=cache, attention_mask=mask)[0]


def _gpt2_block(m, x, mask, positions, cache):
    return m.transformer.h[0](x, cache, mask, position_ids=positions)


def _llama_attention(m, x, mask, positions, cache):
    rotary = m.model.rotary_emb(x, position_ids=positions)
    layer = m.model.layers[0]
    return layer.self_attn(x, position_embeddings=rotary, attention_mask=mask, cache=cache)[0]


def _llama_block(m, x, mask, positions, cache):
    rotary = m.model.rotary_emb(x, position_ids=positions)
    layer = m.model.layers[0]
    return layer(
        x, attention_mask=mask, position_ids=positions, cache=cache, position_embeddings=rotary
    )


def _one_layer(make: Callable[[Config, str], nn.Module], impl: str) -> Callable[[Config], Any]:
    return lambda config: make(dataclasses.replace(config, n_layers=1), impl)


class _DecoderAdapter(TorchModuleAdapter):
    """TorchModuleAdapter whose float32-only subjects say why they skip float64."""

    def __init__(self, name: str, entries: list[TorchEntry], float32_note: str = ""):
        super().__init__(name, entries)
        self.float32_note = float32_note

    def build(
        self,
        subject: Subject,
        config: Config,
        *,
        seed: int,
        dtype: str = "float64",
        device: str = "cpu",
    ) -> TorchHandle:
        if dtype not in self.dtypes(subject):
            raise Unsupported(
                f"{subject.name} runs in {', '.join(self.dtypes(subject))}: {self.float32_note}"
            )
        return super().build(subject, config, seed=seed, dtype=dtype, device=device)


def _gpt2_entries() -> list[TorchEntry]:
    gpt2 = DECODER_CANONICAL  # GPT-2 is the family's canonical: LayerNorm eps 1e-5, gelu_new
    entries = []
    for impl in IMPLEMENTATIONS:
        conv = dataclasses.replace(gpt2, fully_masked_rows=ROWS[impl])
        notes = (MASK_NOTE, CACHE_NOTE, ROWS_NOTE)
        attention_forward, attention_step = _piece(_gpt2_attention)
        block_forward, block_step = _piece(_gpt2_block)
        model_forward, model_step = _model()
        entries += [
            TorchEntry(
                "causal_self_attention",
                name=f"causal_self_attention[{impl}]",
                make=_one_layer(_gpt2, impl),
                forward=attention_forward,
                step=attention_step,
                derives_positions=True,  # from the cache length: SPEC.md §11.9
                supports=GPT2_SPACE,
                param_map=_gpt2_attention_map("", "transformer.h.0.attn."),
                holds=lambda m: m.transformer.h[0].attn,
                conventions=conv,
                notes=("GPT2Attention of layer 0 (fused c_attn, c_proj).", *notes),
            ),
            TorchEntry(
                "decoder_block",
                name=f"decoder_block[{impl}]",
                make=_one_layer(_gpt2, impl),
                forward=block_forward,
                step=block_step,
                derives_positions=True,  # from the cache length: SPEC.md §11.9
                supports=GPT2_SPACE,
                param_map=_gpt2_block_map("", "transformer.h.0."),
                holds=lambda m: m.transformer.h[0],
                conventions=conv,
                notes=("GPT2Block of layer 0: pre-LN, gelu_new (tanh GELU).", *notes),
            ),
            TorchEntry(
                "causal_lm",
                name=f"causal_lm[{impl}]",
                make=lambda c, impl=impl: _gpt2(c, impl),
                forward=model_forward,
                step=model_step,
                derives_positions=True,  # from the cache length: SPEC.md §11.9
                supports=GPT2_SPACE,
                param_map=_gpt2_model_map,
                conventions=conv,
                notes=(
                    "GPT2LMHeadModel: wte + wpe (learned positions), blocks, ln_f, head tied "
                    "to wte.",
                    *notes,
                ),
            ),
        ]
    return entries


# The Llama family's declared choices (SPEC.md §11): RMSNorm, RoPE half-split, SwiGLU.
LLAMA_CONVENTIONS = dataclasses.replace(
    DECODER_CANONICAL,
    norm_kind="rms_norm",
    eps=1e-6,
    positions="rope",
    rope_layout="half_split",
    ffn_kind="gated",
)


def _islands(conventions: Conventions, component: str, implementation: str) -> Conventions:
    steps = llama_float32_steps(component, implementation)
    return dataclasses.replace(conventions, float32_steps=steps)


LLAMA_NOTES = (LLAMA_FLOAT32_NOTE, MASK_NOTE, CACHE_NOTE, ROWS_NOTE)


def _llama_attention_entry(
    name: str,
    make: Callable[[Config], nn.Module],
    conventions: Conventions,
    implementation: str,
    what: str,
) -> TorchEntry:
    """causal_self_attention: layer 0's LlamaAttention of the model ``make`` builds."""
    forward, step = _piece(_llama_attention)
    return TorchEntry(
        "causal_self_attention",
        name=name,
        make=make,
        forward=forward,
        step=step,
        derives_positions=True,  # from the cache length: SPEC.md §11.9
        param_map=lambda c: _llama_attention_map(
            "", "model.layers.0.self_attn.", c.has_attention_bias, c.has_attention_out_bias
        ),
        holds=lambda m: m.model.layers[0].self_attn,
        conventions=_islands(conventions, "causal_self_attention", implementation),
        notes=(what, *LLAMA_NOTES),
    )


def _llama_lm_entry(
    name: str,
    make: Callable[[Config], nn.Module],
    conventions: Conventions,
    implementation: str,
    what: str,
) -> TorchEntry:
    """causal_lm: the whole LlamaForCausalLM ``make`` builds."""
    forward, step = _model(_refuse_nan_padding)
    return TorchEntry(
        "causal_lm",
        name=name,
        make=make,
        forward=forward,
        step=step,
        derives_positions=True,  # from the cache length: SPEC.md §11.9
        param_map=_llama_model_map,
        conventions=_islands(conventions, "causal_lm", implementation),
        notes=(what, *LLAMA_NOTES),
    )


def _llama_entries() -> list[TorchEntry]:
    llama = LLAMA_CONVENTIONS
    entries = [
        TorchEntry(
            "gated_ffn",
            make=_one_layer(_llama, "eager"),
            forward=lambda m, x: m.model.layers[0].mlp(x),
            param_map=lambda c: _llama_mlp_map("", "model.layers.0.mlp.", c.has_ffn_bias),
            holds=lambda m: m.model.layers[0].mlp,
            conventions=llama,
            notes=("LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x)).",),
        )
    ]
    for impl in IMPLEMENTATIONS:
        conv = dataclasses.replace(llama, fully_masked_rows=ROWS[impl])
        block_forward, block_step = _piece(_llama_block)
        entries += [
            _llama_attention_entry(
                f"causal_self_attention[{impl}]",
                _one_layer(_llama, impl),
                conv,
                impl,
                "LlamaAttention of layer 0, with the model's LlamaRotaryEmbedding (RoPE "
                "rotate_half: half-split pairs) and repeat_kv (grouped-query).",
            ),
            TorchEntry(
                "decoder_block",
                name=f"decoder_block[{impl}]",
                make=_one_layer(_llama, impl),
                forward=block_forward,
                step=block_step,
                derives_positions=True,  # from the cache length: SPEC.md §11.9
                param_map=lambda c: _llama_block_map("", "model.layers.0.", c),
                holds=lambda m: m.model.layers[0],
                conventions=_islands(conv, "decoder_block", impl),
                notes=("LlamaDecoderLayer of layer 0: pre-RMSNorm, SwiGLU MLP.", *LLAMA_NOTES),
            ),
            _llama_lm_entry(
                f"causal_lm[{impl}]",
                lambda c, impl=impl: _llama(c, impl),
                conv,
                impl,
                "LlamaForCausalLM: embed_tokens, RoPE in every attention, blocks, final "
                "RMSNorm, lm_head (tied to embed_tokens when Config.tie_weights).",
            ),
        ]
    return entries + _llama_rope_scaling_entries()


# SPEC.md §2.6 on hf.llama: LlamaRotaryEmbedding's scaled frequencies, at sizes where the
# scaling moves the output (an original context of 32 positions puts most of a head's
# wavelengths past it).
LLAMA_LINEAR = {"rope_scaling": "linear", "rope_scaling_factor": 2.0}
LLAMA3_SCALED = {
    "pe_base": 500000.0,
    "rope_scaling": "llama3",
    "rope_scaling_factor": 8.0,
    "rope_low_freq_factor": 1.0,
    "rope_high_freq_factor": 4.0,
    "rope_original_max_positions": 32,
}


def _llama_rope_scaling_entries() -> list[TorchEntry]:
    impl = "sdpa"
    base = dataclasses.replace(LLAMA_CONVENTIONS, fully_masked_rows=ROWS[impl])
    linear = dataclasses.replace(base, **LLAMA_LINEAR)
    llama3 = dataclasses.replace(base, **LLAMA3_SCALED)
    return [
        _llama_attention_entry(
            f"causal_self_attention[{impl},linear]",
            lambda c: _llama(dataclasses.replace(c, n_layers=1), impl, linear),
            linear,
            impl,
            "LlamaAttention with rope_parameters rope_type='linear', factor 2 (SPEC.md "
            "§2.6): every RoPE frequency divided by 2.",
        ),
        _llama_lm_entry(
            f"causal_lm[{impl},llama3]",
            lambda c: _llama(c, impl, llama3),
            llama3,
            impl,
            "LlamaForCausalLM with rope_parameters rope_type='llama3' (factor 8, "
            "low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 32, "
            "rope_theta 500000; SPEC.md §2.6).",
        ),
    ]


gpt2 = _DecoderAdapter("hf.gpt2", _gpt2_entries())
llama = _DecoderAdapter("hf.llama", _llama_entries(), LLAMA_EAGER_FLOAT64_NOTE)
