"""A ready ``nn.Module`` instance as the implementation, checked with its own weights:

    tck run --adapter mypkg.models:trained_encoder_layer [--component C] [--map MAP.json]

``load_adapter`` hands an ``nn.Module`` instance here. Its configuration is read from the
instance, never assumed: width, heads, d_ff, LayerNorm eps, norm placement, activation and
biases (SPEC.md §0.5), and every build is a deep copy of it (the suite reads its canonical
parameters with ``params`` and never writes them: ``load`` is ``Unsupported``, so checks that
need other parameters skip and say so). Recognised without a map:

- ``torch.nn.TransformerEncoderLayer`` (``encoder_layer``, with PyTorch's fast path off and,
  where it can run, on; its ``self_attn`` as ``mha``), ``torch.nn.MultiheadAttention``
  (``mha``), ``torch.nn.LayerNorm`` (``layer_norm``);
- transformers' ``BertLayer`` and ``ViTLayer`` (``encoder_layer`` and their ``mha``), with the
  attention implementation their config names;
- transformers' decoder models ``LlamaForCausalLM``, ``MistralForCausalLM``,
  ``Qwen2ForCausalLM``, ``GPT2LMHeadModel`` (hf_decoder's subjects: ``causal_lm`` and the
  pieces of layer 0) and their layers (``decoder_block``, ``causal_self_attention``,
  ``gated_ffn``), a layer in a shell model of its config that computes the rotary position
  embeddings the layer takes from its model.

Any other module needs ``--component C`` (the component it computes) and, for the checks
that compare with the oracle, ``--map MAP.json`` naming its parameters. The map is the one
``onnx:FILE`` takes (``param_map``: one schema, one parser), with the module's parameter
names::

    {"params": {"self_attn.q.weight": "attn.wq.weight",
                "self_attn.q.bias": null,                          (absent: reads as zeros)
                "self_attn.k.weight": {"name": "attn.wqkv", "slice": [0, 64, 128]},
                "ffn.fc1.weight": {"name": "mlp.w1", "permute": [1, 0]}, ...},
     "config": {"n_heads": 4},                      (what the module's attributes lack)
     "conventions": {"norm_placement": "pre", "eps": 1e-6},
     "inputs": {"key_padding": "pad_mask"},         (keyword names of the module's forward)
     "masks": "ignore"}                             (True = masked; default "keep")

The first input of the component goes positionally (``x``; ``query``, ``key``, ``value``),
the others by keyword (the map's name, or the canonical one if ``forward`` takes it); an
input the module cannot take makes that call ``Unsupported``. Without a map the checks that
need no parameters still run (padding, batching, causal no-leak, determinism, shapes).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tck.reference import (
    COMPONENTS,
    Config,
    Conventions,
    canonical_conventions,
    param_shapes,
    record,
    select,
)

from .base import INPUTS, Unsupported
from .config_space import ConfigSpace
from .param_map import Ref, masks_ignore, read_map, refs
from .pretrained import _activation, _AsIs
from .torch_module import ABSENT, Param, ParamRef, TorchEntry, TorchHandle, TorchModuleAdapter

CONFIG_ATTRS = {  # Config field -> attribute names modules commonly use for it
    "d_model": ("d_model", "embed_dim", "hidden_size", "dim", "n_embd", "model_dim"),
    "n_heads": ("n_heads", "num_heads", "nhead", "num_attention_heads", "n_head", "heads"),
    "d_ff": ("d_ff", "dim_feedforward", "intermediate_size", "ffn_dim", "hidden_dim"),
    "n_kv_heads": ("n_kv_heads", "num_key_value_heads", "num_kv_heads", "n_kv_head"),
    "n_layers": ("n_layers", "num_hidden_layers", "n_layer", "num_layers", "depth"),
    "vocab_size": ("vocab_size", "n_vocab", "num_embeddings"),
    "max_len": ("max_len", "max_position_embeddings", "n_positions", "block_size", "max_seq_len"),
}
# What a model's forward may return besides the output tensor: a transformers ModelOutput
# (a mapping) or a tuple whose first item is the output. The output's field, per component.
OUTPUT_FIELDS = {name: ("logits",) for name in select("logits")}
HIDDEN_FIELDS = ("last_hidden_state", "hidden_states", "output")
EPS_ATTRS = ("eps", "layer_norm_eps", "norm_eps", "layernorm_eps")
TORCH_ACTIVATIONS = {1: "relu", 2: "gelu"}  # TransformerEncoderLayer.activation_relu_or_gelu


class InstanceError(Exception):
    """The instance cannot be checked as given; the message says why and what to do."""


def _read_map(path: str | None) -> dict[str, Any] | None:
    return read_map(path, error=InstanceError)


class InstanceAdapter(_AsIs, TorchModuleAdapter):
    """Subjects copied from one instance; ``load`` refused (its weights are the ones checked).
    Without a parameter map, ``params`` and ``grad`` are Unsupported with the reason."""

    unmapped: frozenset[str] = frozenset()

    def params(self, handle: TorchHandle) -> dict[str, Any]:
        self._require_map(handle)
        return super().params(handle)

    def grad(self, handle: TorchHandle, inputs: Any, cotangent: Any) -> dict[str, Any]:
        self._require_map(handle)
        return super().grad(handle, inputs, cotangent)

    def _require_map(self, handle: TorchHandle) -> None:
        if handle.subject.name in self.unmapped:
            raise Unsupported(
                f"{self.name}: no parameter map for {type(handle.module).__name__}, so the "
                "checks that compare with the oracle skip; give one with --map MAP.json"
            )


# -------------------------------------------------------------------------- recognisers


def _torch_encoder_layer(m: nn.TransformerEncoderLayer, label: str) -> list[TorchEntry]:
    from . import torch_nn

    sa = m.self_attn
    _require_plain_mha(sa, label)
    d, h, d_ff = sa.embed_dim, sa.num_heads, m.linear1.out_features
    bias = m.linear1.bias is not None
    if m.norm1.eps != m.norm2.eps:
        raise InstanceError(f"{label}: norm1.eps={m.norm1.eps} != norm2.eps={m.norm2.eps}")
    act = TORCH_ACTIVATIONS.get(getattr(m, "activation_relu_or_gelu", 0))
    if act is None and isinstance(m.activation, nn.GELU):
        act = "gelu_tanh" if m.activation.approximate == "tanh" else "gelu"
    if act is None and isinstance(m.activation, nn.ReLU):
        act = "relu"
    if act is None:
        raise InstanceError(
            f"{label}: the activation {m.activation!r} is not one tck checks (relu, gelu, "
            "gelu_tanh)"
        )
    fixed = {"d_model": d, "n_heads": h, "d_ff": d_ff, "bias": bias}
    conv = {"norm_placement": "pre" if m.norm_first else "post", "activation": act}
    conv["eps"] = float(m.norm1.eps)
    seq_first = not sa.batch_first

    def layer_map(config: Config) -> dict[str, ParamRef]:
        mapping: dict[str, ParamRef] = dict(torch_nn._encoder_layer_map(config))
        if not bias:  # bias=False drops the LayerNorm biases too: zeros, as §0.2 reads them
            mapping.update({"norm1.bias": ABSENT, "norm2.bias": ABSENT})
        return mapping

    def forward(fast: bool) -> Any:
        inner = torch_nn._encoder_layer_forward(fast_path=fast)

        def call(
            module: nn.Module,
            x: torch.Tensor,
            key_padding: torch.Tensor | None = None,
            attn_mask: torch.Tensor | None = None,
            causal: bool = False,
        ) -> torch.Tensor:
            if not seq_first:
                return inner(module, x, key_padding, attn_mask, causal)
            # the module wants (L, B, D); the boundary speaks (B, L, D)
            out = inner(module, x.transpose(0, 1), key_padding, attn_mask, causal)
            return out.transpose(0, 1)

        return call

    note = f"{label}: nn.TransformerEncoderLayer as built" + (" (batch_first=False)" * seq_first)
    entries = [
        TorchEntry(
            "encoder_layer",
            name="encoder_layer[slow_path]",
            make=lambda c: copy.deepcopy(m),
            forward=forward(False),
            param_map=layer_map,
            conventions=Conventions(**conv),
            config=fixed,
            notes=(note, torch_nn.SLOW_PATH_NOTE, torch_nn.MHA_MASK_NOTE),
        )
    ]
    if sa.batch_first and bias and h % 2 == 0:  # where PyTorch's fast path can run
        entries.append(
            dataclasses.replace(
                entries[0],
                name="encoder_layer[fast_path]",
                forward=forward(True),
                conventions=Conventions(**conv, fully_masked_rows="nan"),
                notes=(note, torch_nn.FAST_PATH_NOTE, torch_nn.MHA_MASK_NOTE),
            )
        )
    mha = _torch_mha(sa, f"{label}.self_attn")[0]
    entries.append(dataclasses.replace(mha, make=lambda c: copy.deepcopy(m.self_attn)))
    return entries


def _require_plain_mha(sa: nn.MultiheadAttention, label: str) -> None:
    if not sa._qkv_same_embed_dim or sa.bias_k is not None or sa.add_zero_attn:
        raise InstanceError(
            f"{label}: kdim/vdim, add_bias_kv or add_zero_attn are not the canonical multi-head "
            "attention (SPEC.md §3)"
        )


def _torch_mha(m: nn.MultiheadAttention, label: str) -> list[TorchEntry]:
    from . import torch_nn

    _require_plain_mha(m, label)
    bias = m.in_proj_bias is not None
    fixed = {"d_model": m.embed_dim, "n_heads": m.num_heads, "bias": bias}
    extra = () if m.batch_first else ("batch_first=False: (L, B, D) tensors.",)
    return [
        TorchEntry(
            "mha",
            make=lambda c: copy.deepcopy(m),
            forward=torch_nn._mha_forward(seq_first=not m.batch_first),
            param_map=torch_nn._mha_map,
            config=fixed,
            notes=(f"{label}: nn.MultiheadAttention", torch_nn.MHA_ROWS_NOTE, *extra),
        )
    ]


def _torch_layer_norm(m: nn.LayerNorm, label: str) -> list[TorchEntry]:
    if len(m.normalized_shape) != 1 or not m.elementwise_affine:
        raise InstanceError(
            f"{label}: LayerNorm{tuple(m.normalized_shape)} with elementwise_affine="
            f"{m.elementwise_affine}: tck checks a LayerNorm over the last axis with its gain"
        )
    mapping: dict[str, ParamRef] = {"weight": "weight", "bias": "bias"}
    if m.bias is None:
        mapping["bias"] = ABSENT
    return [
        TorchEntry(
            "layer_norm",
            make=lambda c: copy.deepcopy(m),
            forward=lambda module, x: module(x),
            param_map=mapping,
            conventions=Conventions(eps=float(m.eps)),
            config={"d_model": int(m.normalized_shape[0])},
            notes=(f"{label}: nn.LayerNorm(eps={m.eps})",),
        )
    ]


def _hf_layer(m: nn.Module, label: str, kind: str) -> list[TorchEntry]:
    """transformers' BertLayer or ViTLayer: hf.bert's / hf.vit's subjects on a shell that holds
    a copy of this layer where their forwards look (``encoder.layer[0]``, ``vit.layers[0]``)."""
    from . import hf

    config = m.attention.self.config if kind == "bert" else m.attention.config
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl not in hf.IMPLEMENTATIONS:
        raise InstanceError(
            f"{label}: attn_implementation={impl!r}; tck checks {', '.join(hf.IMPLEMENTATIONS)}"
        )
    fixed = {
        "d_model": config.hidden_size,
        "n_heads": config.num_attention_heads,
        "d_ff": config.intermediate_size,
    }
    if kind == "vit":  # SPEC.md §0.5: qkv_bias switches q, k, v alone; o keeps its bias
        fixed.update(attention_bias=bool(getattr(config, "qkv_bias", True)))
        fixed.update(attention_out_bias=True)
    try:
        act = _activation(config.hidden_act, Path(label))
    except Exception as err:  # pretrained.ModelError
        raise InstanceError(str(err)) from None
    conv = {"eps": float(config.layer_norm_eps), "activation": act}
    base = hf.bert if kind == "bert" else hf.vit

    def shell(c: Config) -> nn.Module:
        outer, inner = nn.Module(), nn.Module()
        outer.config = config
        if kind == "bert":
            outer.encoder = inner
            inner.layer = nn.ModuleList([copy.deepcopy(m)])
        else:
            outer.vit = inner
            inner.layers = nn.ModuleList([copy.deepcopy(m)])
        return outer

    entries = []
    for name in (f"encoder_layer[{impl}]", f"mha[{impl}]"):
        entry = base._entries[name]
        conventions = entry.conventions
        if entry.component == "encoder_layer" and conventions is not None:
            conventions = dataclasses.replace(conventions, **conv)
        entries.append(
            dataclasses.replace(
                entry,
                make=shell,
                conventions=conventions,
                config=fixed,
                notes=(f"{label}: {type(m).__name__} with its own weights", *entry.notes),
            )
        )
    return entries


# transformers' decoder-only families: the module defining them, the model class and the
# layer class; recognised by class, from modules already imported (m is one of them).
HF_DECODERS = {
    "llama": ("transformers.models.llama.modeling_llama", "LlamaForCausalLM", "LlamaDecoderLayer"),
    "mistral": (
        "transformers.models.mistral.modeling_mistral",
        "MistralForCausalLM",
        "MistralDecoderLayer",
    ),
    "qwen2": ("transformers.models.qwen2.modeling_qwen2", "Qwen2ForCausalLM", "Qwen2DecoderLayer"),
    "gpt2": ("transformers.models.gpt2.modeling_gpt2", "GPT2LMHeadModel", "GPT2Block"),
}
# hf_decoder's subjects a model offers (the pieces of its layer 0 and itself), and a layer
LAYER_COMPONENTS = ("gated_ffn", "causal_self_attention", "decoder_block")


def _hf_decoder_kind(m: nn.Module) -> tuple[str, bool] | None:
    """(family, whether ``m`` is the whole model) for transformers' decoder models and layers."""
    for family, (module, model_class, layer_class) in HF_DECODERS.items():
        loaded = sys.modules.get(module)
        if loaded is None:
            continue
        if isinstance(m, getattr(loaded, model_class)):
            return family, True
        if isinstance(m, getattr(loaded, layer_class)):
            return family, False
    return None


def _hf_decoder_reading(
    config: Any, family: str, label: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Config fields and Conventions a transformers decoder config declares, read as
    ``tck run --model`` reads a checkpoint's config.json (SPEC.md §0.5, §2.6, §4.5, §11)."""
    if family == "gpt2":
        fixed = {
            "d_model": config.n_embd,
            "n_heads": config.n_head,
            "d_ff": config.n_inner or 4 * config.n_embd,  # GPT2MLP: n_inner, or 4 * n_embd
            "n_layers": config.n_layer,
            "vocab_size": config.vocab_size,
            "max_len": config.n_positions,
            "n_kv_heads": config.n_head,  # no grouped-query attention (SPEC.md §11.2)
        }
        try:
            act = _activation(config.activation_function, Path(label))
        except Exception as err:  # pretrained.ModelError
            raise InstanceError(str(err)) from None
        return fixed, {"eps": float(config.layer_norm_epsilon), "activation": act}
    from .checkpoint_config import GATE_ACTIVATIONS

    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    fixed = {
        "d_model": config.hidden_size,
        "n_heads": heads,
        "d_ff": config.intermediate_size,
        "n_layers": config.num_hidden_layers,
        "vocab_size": config.vocab_size,
        "max_len": config.max_position_embeddings,
        "n_kv_heads": config.num_key_value_heads or heads,
        "tie_weights": bool(config.tie_word_embeddings),
    }
    if head_dim * heads != config.hidden_size:  # heads wider or narrower than D/H
        fixed.update(d_k=head_dim, d_v=head_dim)
    if family == "qwen2":  # Qwen2Attention and Qwen2MLP: q, k, v biased; o and the MLP not
        fixed.update(attention_bias=True, attention_out_bias=False, ffn_bias=False)
    else:
        fixed.update(
            attention_bias=bool(getattr(config, "attention_bias", False)),
            ffn_bias=bool(getattr(config, "mlp_bias", False)),
        )
    if config.hidden_act not in GATE_ACTIVATIONS:
        raise InstanceError(
            f"{label}: hidden_act={config.hidden_act!r}; tck checks the gate activations "
            f"{', '.join(GATE_ACTIVATIONS)}"
        )
    conv: dict[str, Any] = {
        "eps": float(config.rms_norm_eps),
        "gate_activation": GATE_ACTIVATIONS[config.hidden_act],
        **_rope_conventions(dict(config.rope_parameters or {}), label),
    }
    if family == "mistral":
        conv["sliding_window"] = config.sliding_window  # None: every earlier key (SPEC.md §4.5)
    return fixed, conv


def _rope_conventions(rope: dict[str, Any], label: str) -> dict[str, Any]:
    """transformers' ``rope_parameters`` as Conventions (SPEC.md §2.3, §2.6): the inverse of
    ``hf_decoder.rope_parameters``."""
    kind = rope.get("rope_type", "default")
    conv: dict[str, Any] = {"pe_base": float(rope.get("rope_theta", 10000.0))}
    if kind == "default":
        return conv
    if kind not in ("linear", "llama3"):
        raise InstanceError(
            f"{label}: rope_type={kind!r}; tck checks RoPE unscaled, linear or llama3 "
            "(SPEC.md §2.6)"
        )
    conv.update(rope_scaling=kind, rope_scaling_factor=float(rope["factor"]))
    if kind == "llama3":
        conv.update(
            rope_low_freq_factor=float(rope["low_freq_factor"]),
            rope_high_freq_factor=float(rope["high_freq_factor"]),
            rope_original_max_positions=int(rope["original_max_position_embeddings"]),
        )
    return conv


def _hf_decoder(m: nn.Module, label: str, family: str, whole: bool) -> list[TorchEntry]:
    """A transformers decoder model (all of hf_decoder's subjects: the pieces of its layer 0
    and the model) or one of its layers (the pieces of that layer), with its own config and
    weights. A layer is copied into a shell model of its config, with the rotary embedding
    that model computes for it (``model.rotary_emb``): the position embeddings transformers'
    decoder layers take from their model instead of computing them."""
    from . import hf_decoder

    attention = None if whole else (m.attn if family == "gpt2" else m.self_attn)
    config = m.config if whole else attention.config
    impl = getattr(config, "_attn_implementation", None) or "eager"
    if impl not in hf_decoder.IMPLEMENTATIONS:
        raise InstanceError(
            f"{label}: attn_implementation={impl!r}; tck checks "
            f"{', '.join(hf_decoder.IMPLEMENTATIONS)}: build it with attn_implementation='eager'"
        )
    fixed, conv = _hf_decoder_reading(config, family, label)
    # the longest sequence its position table (GPT-2) or config takes (SPEC.md §0.6)
    space = ConfigSpace(fixed=fixed, max_len=fixed.pop("max_len"))
    base = hf_decoder.gpt2 if family == "gpt2" else hf_decoder.llama

    def shell(c: Config) -> nn.Module:
        """A model of the layer's config whose layer 0 is a copy of the layer."""
        outer, inner = nn.Module(), nn.Module()
        outer.config = config
        layer = copy.deepcopy(m)
        # the shell's layer 0: its cache slot is the one DynamicCache.get_seq_length() reads
        (layer.attn if family == "gpt2" else layer.self_attn).layer_idx = 0
        layers = nn.ModuleList([layer])
        if family == "gpt2":
            outer.transformer, inner.h = inner, layers
        else:
            defining = sys.modules[type(m).__module__]
            prefix = type(m).__name__.removesuffix("DecoderLayer")
            outer.model, inner.layers = inner, layers
            inner.rotary_emb = getattr(defining, f"{prefix}RotaryEmbedding")(config)
        return outer

    components = hf_decoder_components(whole)
    entries = []
    for entry in base._entries.values():
        if entry.name != f"{entry.component}[{impl}]" and entry.name is not None:
            continue
        if entry.component not in components:
            continue
        conventions = entry.conventions
        if conventions is not None:
            conventions = dataclasses.replace(conventions, **conv)
        entries.append(
            dataclasses.replace(
                entry,
                make=(lambda c: copy.deepcopy(m)) if whole else shell,
                conventions=conventions,
                config=fixed,
                supports=space,
                notes=(
                    f"{label}: {type(m).__name__} with its own config and weights",
                    *entry.notes,
                ),
            )
        )
    return entries


def hf_decoder_components(whole: bool) -> tuple[str, ...]:
    """The components a transformers decoder model (``whole``) or layer is checked as."""
    return (*LAYER_COMPONENTS, "causal_lm") if whole else LAYER_COMPONENTS


def _recognise(m: nn.Module, label: str) -> list[TorchEntry] | None:
    if isinstance(m, nn.TransformerEncoderLayer):
        return _torch_encoder_layer(m, label)
    if isinstance(m, nn.MultiheadAttention):
        return _torch_mha(m, label)
    if isinstance(m, nn.LayerNorm):
        return _torch_layer_norm(m, label)
    for kind, module, cls in (
        ("bert", "transformers.models.bert.modeling_bert", "BertLayer"),
        ("vit", "transformers.models.vit.modeling_vit", "ViTLayer"),
    ):
        loaded = sys.modules.get(module)  # imported already if m is one
        if loaded is not None and isinstance(m, getattr(loaded, cls)):
            return _hf_layer(m, label, kind)
    decoder = _hf_decoder_kind(m)
    if decoder is not None:
        return _hf_decoder(m, label, *decoder)
    return None


# ------------------------------------------------------------------- any other module


def _read_config(m: nn.Module, mapping: dict[str, Any] | None) -> dict[str, Any]:
    """Config fields from the module's attributes (or its ``config``), then the map's."""
    sources = [m, getattr(m, "config", None)]
    fixed: dict[str, Any] = {}
    for field, names in CONFIG_ATTRS.items():
        for source in sources:
            value = next(
                (getattr(source, n) for n in names if isinstance(getattr(source, n, None), int)),
                None,
            )
            if value is not None and not isinstance(value, bool):
                fixed[field] = value
                break
    fixed.update((mapping or {}).get("config", {}))
    return fixed


def _ref(ref: Ref | None) -> ParamRef:
    """The torch adapter's reference of one map entry (``Ref``; None: absent)."""
    if ref is None:
        return ABSENT
    if ref == Ref(ref.name):
        return ref.name
    return Param(ref.name, slice=ref.slice, permute=ref.permute, shape=ref.shape)


def _generic(
    m: nn.Module, label: str, component: str, mapping: dict[str, Any] | None
) -> tuple[list[TorchEntry], bool]:
    fixed = _read_config(m, mapping)
    try:
        config = Config(**fixed)
    except (TypeError, ValueError) as err:
        raise InstanceError(f"{label}: the config read from it is not a Config: {err}") from None
    first = record(component).inputs[0]  # token ids or images in: the width is in a table
    if first.kind not in ("ids", "tokens") and "C" not in first.dims and "d_model" not in fixed:
        raise InstanceError(
            f"{label}: its width is not an attribute tck knows "
            f"({', '.join(CONFIG_ATTRS['d_model'])}); give it in the map: --map MAP.json "
            'with {"config": {"d_model": ...}}'
        )
    try:
        conv = {
            **canonical_conventions(component).to_dict(),
            **_read_eps(m),
            **(mapping or {}).get("conventions", {}),
        }
        conventions = Conventions(**conv)
    except (TypeError, ValueError) as err:
        raise InstanceError(f"{label}: the map's conventions are not Conventions: {err}") from None
    params = (mapping or {}).get("params")
    param_map: dict[str, ParamRef] = {}
    if params:
        shapes = param_shapes(component, config, conventions)
        unknown = sorted(set(params) - set(shapes))
        if unknown:
            raise InstanceError(
                f"--map names {unknown}, which are not canonical parameters of {component} "
                f"({', '.join(shapes)})"
            )
        param_map = {k: _ref(v) for k, v in refs(mapping).items()}
        own = dict(m.named_parameters())
        absent = sorted({r if isinstance(r, str) else r.name for r in param_map.values()
                         if not isinstance(r, type(ABSENT))} - set(own))  # fmt: skip
        if absent:
            raise InstanceError(f"--map names parameters {label} lacks: {absent[:4]}")
        lacking = sorted(set(shapes) - set(param_map))
        if lacking:
            raise InstanceError(
                f"--map lacks canonical parameters {lacking[:4]} of {component} (null: absent)"
            )
    first, optional = INPUTS[component]
    bound = {**{k: k for k in optional}, **(mapping or {}).get("inputs", {})}
    takes = _keywords(m)
    ignore = masks_ignore(mapping)

    def forward(module: nn.Module, **inputs: Any) -> Any:
        args = [inputs.pop(k) for k in first]
        kwargs = {}
        for name, value in inputs.items():
            keyword = bound.get(name)
            if keyword is None or (takes is not None and keyword not in takes):
                raise Unsupported(
                    f"{label} takes no {name} (its forward has no {keyword or name!r}); bind it "
                    'in the map: {"inputs": {"' + name + '": "its_keyword"}}'
                )
            if ignore and isinstance(value, torch.Tensor) and value.dtype == torch.bool:
                value = ~value
            kwargs[keyword] = value
        return _output(module(*args, **kwargs), component, label)

    sizes = ", ".join(f"{k}={v}" for k, v in fixed.items())
    entry = TorchEntry(
        component,
        make=lambda c: copy.deepcopy(m),
        forward=forward,
        param_map=param_map or {},
        conventions=conventions,
        config=fixed,
        notes=(f"{label}: {type(m).__name__} as built, its own weights ({sizes})",),
    )
    return [entry], not param_map


def _output(out: Any, component: str, label: str) -> torch.Tensor:
    """The component's output tensor from what the module returned: the tensor itself, the
    ``logits`` (models) or ``last_hidden_state`` (layers) of a transformers ``ModelOutput`` or
    any mapping, or the first item of a tuple. Anything else is an error in the kit's words
    (it is this adapter that cannot read the output, not the model that is wrong)."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "keys"):  # ModelOutput is an OrderedDict
        for field in (*OUTPUT_FIELDS.get(component, ()), *HIDDEN_FIELDS):
            value = out.get(field) if hasattr(out, "get") else None
            if isinstance(value, torch.Tensor):
                return value
        raise TypeError(
            f"tck's instance adapter: {label} returned a {type(out).__name__} with "
            f"{sorted(out.keys())}, none of which is the {component} output tck knows "
            f"({', '.join((*OUTPUT_FIELDS.get(component, ()), *HIDDEN_FIELDS))}); wrap the "
            "module so that forward returns the output tensor"
        )
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    raise TypeError(
        f"tck's instance adapter: {label} returned a {type(out).__name__}, not a tensor; wrap "
        "the module so that forward returns the output tensor"
    )


def _read_eps(m: nn.Module) -> dict[str, Any]:
    for source in (m, getattr(m, "config", None)):
        for name in EPS_ATTRS:
            value = getattr(source, name, None)
            if isinstance(value, float):
                return {"eps": value}
    return {}


def _keywords(m: nn.Module) -> set[str] | None:
    try:
        params = inspect.signature(m.forward).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


# --------------------------------------------------------------------------- the adapter


def adapt(
    module: nn.Module,
    spec: str,
    component: str | None = None,
    map_path: str | None = None,
) -> InstanceAdapter:
    """The adapter of one instance: ``component`` names what it computes and ``map_path``
    its parameters (``tck run --component C --map MAP.json``)."""
    component = component or None
    mapping = _read_map(map_path)
    if component is not None and component not in COMPONENTS:
        raise InstanceError(
            f"--component {component!r} is not a component; choose one of {', '.join(COMPONENTS)}"
        )
    label = spec
    entries = None if mapping else _recognise(module, label)
    unmapped = False
    if entries is not None:
        offered = {e.component for e in entries}
        if component is not None and component not in offered:
            raise InstanceError(
                f"{label} is a {type(module).__name__}: tck checks it as "
                f"{' and '.join(sorted(offered))}, not {component}"
            )
        entries = [e for e in entries if component is None or e.component == component]
    else:
        if component is None:
            raise InstanceError(
                f"{label} is a {type(module).__name__}, which tck does not recognise: name what "
                "it computes with --component C (e.g. encoder_layer), and its parameters with "
                "--map MAP.json for the oracle checks"
            )
        entries, unmapped = _generic(module, label, component, mapping)
    adapter = InstanceAdapter(label, entries)
    adapter.fixed = {}  # each entry fixes its own config (Subject.config): _AsIs checks none
    adapter.folder = Path(label.replace("/", "_"))
    if unmapped:
        adapter.unmapped = frozenset(e.name or e.component for e in entries)
    return adapter


__all__ = ["InstanceAdapter", "InstanceError", "adapt"]
