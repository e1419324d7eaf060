"""Canonical parameters: one flat dict ``name -> np.ndarray`` per component (SPEC.md §0.2).

Linear layers use the nn.Linear layout, ``weight`` is ``[out, in]`` and ``y = x @ W.T + b``.
Nested components join names with dots: ``layers.0.self_attn.q.weight``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .conventions import CANONICAL, Config, Conventions

Params = dict[str, np.ndarray]
Shapes = dict[str, tuple[int, ...]]

COMPONENTS: tuple[str, ...] = (
    "embedding",
    "sinusoidal_pe",
    "rope",
    "attention",
    "mha",
    "layer_norm",
    "rms_norm",
    "ffn",
    "encoder_layer",
    "decoder_layer",
    "encoder",
    "decoder",
    "seq2seq",
    "patch_embed",
    "vit",
    # §11 decoder-only models
    "causal_self_attention",
    "gated_ffn",
    "decoder_block",
    "causal_lm",
)

DECODER_ONLY: tuple[str, ...] = ("causal_self_attention", "gated_ffn", "decoder_block", "causal_lm")

# The ViT paper's choices (pre-LN, exact GELU) are canonical for the ViT family; everything
# else follows "Attention Is All You Need" (SPEC.md §0.3, §9.4).
VIT_CANONICAL = Conventions(norm_placement="pre", activation="gelu")
# GPT-2's choices are canonical for the decoder-only family (SPEC.md §11): pre-LN, LayerNorm,
# tanh GELU, learned positions, no sqrt(d_model) scale. Llama declares RMSNorm, RoPE and the
# gated FFN as conventions.
DECODER_CANONICAL = Conventions(
    norm_placement="pre", activation="gelu_tanh", embedding_scale="none", positions="learned"
)


def canonical_conventions(component: str) -> Conventions:
    """The canonical conventions of a component's family (SPEC.md §0.3)."""
    _check_component(component)
    if component in DECODER_ONLY:
        return DECODER_CANONICAL
    return VIT_CANONICAL if component in ("vit", "patch_embed") else CANONICAL


def _check_component(component: str) -> None:
    if component not in COMPONENTS:
        raise ValueError(
            f"unknown component {component!r}; the components are: {', '.join(COMPONENTS)}"
        )


def _linear(prefix: str, n_out: int, n_in: int, bias: bool) -> Shapes:
    shapes: Shapes = {f"{prefix}weight": (n_out, n_in)}
    if bias:
        shapes[f"{prefix}bias"] = (n_out,)
    return shapes


def _norm(prefix: str, d: int, conventions: Conventions, bias: bool = True) -> Shapes:
    shapes: Shapes = {f"{prefix}weight": (d,)}
    if conventions.norm_kind == "layer_norm" and bias:
        shapes[f"{prefix}bias"] = (d,)
    return shapes


def _mha(prefix: str, c: Config) -> Shapes:
    hk, hv = c.n_heads * c.head_dim_k, c.n_heads * c.head_dim_v
    return {
        **_linear(f"{prefix}q.", hk, c.d_model, c.has_attention_bias),
        **_linear(f"{prefix}k.", hk, c.d_model, c.has_attention_bias),
        **_linear(f"{prefix}v.", hv, c.d_model, c.has_attention_bias),
        **_linear(f"{prefix}o.", c.d_model, hv, c.has_attention_bias),
    }


def _ffn(prefix: str, c: Config) -> Shapes:
    return {
        **_linear(f"{prefix}fc1.", c.d_ff, c.d_model, c.has_ffn_bias),
        **_linear(f"{prefix}fc2.", c.d_model, c.d_ff, c.has_ffn_bias),
    }


def _causal_self_attention(prefix: str, c: Config) -> Shapes:
    """§11.1, §11.2: query heads n_heads, key/value heads kv_heads."""
    hq, hk, hv = c.n_heads * c.head_dim_k, c.kv_heads * c.head_dim_k, c.kv_heads * c.head_dim_v
    return {
        **_linear(f"{prefix}q.", hq, c.d_model, c.bias),
        **_linear(f"{prefix}k.", hk, c.d_model, c.bias),
        **_linear(f"{prefix}v.", hv, c.d_model, c.bias),
        **_linear(f"{prefix}o.", c.d_model, c.n_heads * c.head_dim_v, c.bias),
    }


def _gated_ffn(prefix: str, c: Config) -> Shapes:
    """§11.3: down(act(gate(x)) * up(x))."""
    return {
        **_linear(f"{prefix}gate.", c.d_ff, c.d_model, c.bias),
        **_linear(f"{prefix}up.", c.d_ff, c.d_model, c.bias),
        **_linear(f"{prefix}down.", c.d_model, c.d_ff, c.bias),
    }


def _decoder_block(prefix: str, c: Config, conv: Conventions) -> Shapes:
    """§11.4: causal self-attention (norm1), then the FFN (norm2)."""
    ffn = _gated_ffn if conv.ffn_kind == "gated" else _ffn
    return {
        **_causal_self_attention(f"{prefix}self_attn.", c),
        **_norm(f"{prefix}norm1.", c.d_model, conv),
        **ffn(f"{prefix}ffn.", c),
        **_norm(f"{prefix}norm2.", c.d_model, conv),
    }


def _causal_lm(c: Config, conv: Conventions) -> Shapes:
    """§11.5: token table, learned positions (unless RoPE), blocks, final norm, head."""
    shapes: Shapes = {"embedding.weight": (c.vocab_size, c.d_model)}
    if conv.positions == "learned":
        shapes["pos_embedding.weight"] = (c.max_len, c.d_model)
    shapes.update(_stack("", c, conv, c.n_layers, _decoder_block))
    if not c.tie_weights:
        shapes["lm_head.weight"] = (c.vocab_size, c.d_model)
    return shapes


def _encoder_layer(prefix: str, c: Config, conv: Conventions) -> Shapes:
    return {
        **_mha(f"{prefix}self_attn.", c),
        **_norm(f"{prefix}norm1.", c.d_model, conv, c.norm_bias),
        **_ffn(f"{prefix}ffn.", c),
        **_norm(f"{prefix}norm2.", c.d_model, conv, c.norm_bias),
    }


def _decoder_layer(prefix: str, c: Config, conv: Conventions) -> Shapes:
    return {
        **_mha(f"{prefix}self_attn.", c),
        **_norm(f"{prefix}norm1.", c.d_model, conv, c.norm_bias),
        **_mha(f"{prefix}cross_attn.", c),
        **_norm(f"{prefix}norm2.", c.d_model, conv, c.norm_bias),
        **_ffn(f"{prefix}ffn.", c),
        **_norm(f"{prefix}norm3.", c.d_model, conv, c.norm_bias),
    }


def has_final_norm(conventions: Conventions) -> bool:
    """§7.3: a pre-LN stack ends with a norm, a post-LN one does not; final_norm='always'
    or 'never' overrides that."""
    if conventions.final_norm != "pre_only":
        return conventions.final_norm == "always"
    return conventions.norm_placement == "pre"


def _stack(prefix: str, c: Config, conv: Conventions, n_layers: int, layer) -> Shapes:
    shapes: Shapes = {}
    for i in range(n_layers):
        shapes.update(layer(f"{prefix}layers.{i}.", c, conv))
    if has_final_norm(conv):
        shapes.update(_norm(f"{prefix}norm.", c.d_model, conv, c.norm_bias))
    return shapes


def param_shapes(component: str, config: Config, conventions: Conventions | None = None) -> Shapes:
    """Canonical parameter names and shapes of ``component`` (SPEC.md §0.2 and each clause)."""
    _check_component(component)
    c, conv = config, conventions or canonical_conventions(component)
    d = c.d_model
    if component == "embedding":
        return {"weight": (c.vocab_size, d)}
    if component in ("sinusoidal_pe", "rope", "attention"):
        return {}
    if component == "mha":
        return _mha("", c)
    if component == "layer_norm":
        return {"weight": (d,), "bias": (d,)} if c.norm_bias else {"weight": (d,)}
    if component == "rms_norm":
        return {"weight": (d,)}
    if component == "ffn":
        return _ffn("", c)
    if component == "encoder_layer":
        return _encoder_layer("", c, conv)
    if component == "decoder_layer":
        return _decoder_layer("", c, conv)
    if component == "encoder":
        return _stack("", c, conv, c.n_layers, _encoder_layer)
    if component == "decoder":
        return _stack("", c, conv, c.n_decoder_layers, _decoder_layer)
    if component == "seq2seq":
        if c.tie_weights:
            embeddings: Shapes = {"embedding.weight": (c.vocab_size, d)}
        else:
            embeddings = {
                "src_embedding.weight": (c.vocab_size, d),
                "tgt_embedding.weight": (c.vocab_size, d),
                "generator.weight": (c.vocab_size, d),
            }
        return {
            **embeddings,
            **_stack("encoder.", c, conv, c.n_layers, _encoder_layer),
            **_stack("decoder.", c, conv, c.n_decoder_layers, _decoder_layer),
        }
    if component == "causal_self_attention":
        return _causal_self_attention("", c)
    if component == "gated_ffn":
        return _gated_ffn("", c)
    if component == "decoder_block":
        return _decoder_block("", c, conv)
    if component == "causal_lm":
        return _causal_lm(c, conv)
    patch = {
        "patch_embed.weight": (d, c.channels, c.patch_size, c.patch_size),
        "patch_embed.bias": (d,),
    }
    if component == "patch_embed":
        return {name.removeprefix("patch_embed."): shape for name, shape in patch.items()}
    # vit
    return {
        **patch,
        "cls_token": (1, 1, d),
        "pos_embed": (1, c.n_patches + 1, d),
        **_stack("encoder.", c, conv, c.n_layers, _encoder_layer),
        "head.weight": (c.n_classes, d),
        **({"head.bias": (c.n_classes,)} if c.head_bias else {}),
    }


def param_count(component: str, config: Config, conventions: Conventions | None = None) -> int:
    """Number of trainable scalars (SPEC.md §10.3); a tied matrix counts once."""
    return sum(int(np.prod(s)) for s in param_shapes(component, config, conventions).values())


def init_params(
    component: str,
    config: Config,
    conventions: Conventions | None = None,
    *,
    seed: int = 0,
) -> Params:
    """Random canonical parameters, float64, deterministic in ``seed``.

    Values are chosen so that bugs show: norm gains are not all one, biases are not zero,
    and linear weights have std 1/sqrt(fan_in) so activations stay O(1) through a stack.
    """
    rng = np.random.default_rng(seed)
    params: Params = {}
    for name, shape in param_shapes(component, config, conventions).items():
        *path, leaf = name.split(".")
        is_norm = component in ("layer_norm", "rms_norm") or any(p.startswith("norm") for p in path)
        # Tables that are looked up or added, not multiplied: unit variance.
        is_table = leaf in ("cls_token", "pos_embed") or (
            leaf == "weight"
            and (
                component == "embedding"
                or path[-1:]
                in (["embedding"], ["src_embedding"], ["tgt_embedding"], ["pos_embedding"])
            )
        )
        if leaf == "bias":
            value = 0.1 * rng.standard_normal(shape)
        elif is_norm:
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif is_table or len(shape) < 2:
            value = rng.standard_normal(shape)
        else:  # a linear or conv weight: std 1/sqrt(fan_in) keeps activations O(1)
            value = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        params[name] = value.astype(np.float64)
    if config.padding_idx is not None:
        for name in ("weight", "embedding.weight", "src_embedding.weight", "tgt_embedding.weight"):
            if component in ("embedding", "seq2seq") and name in params:
                params[name][config.padding_idx] = 0.0  # §1.3: the padding row starts at zero
    return params


def subparams(params: Mapping[str, np.ndarray], prefix: str) -> Params:
    """The entries under ``prefix`` (a dotted path ending in '.'), with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in params.items() if k.startswith(prefix)}


def check_params(
    component: str,
    params: Mapping[str, np.ndarray],
    config: Config,
    conventions: Conventions | None = None,
) -> None:
    """Raise ValueError naming every missing, unexpected or mis-shaped parameter."""
    expected = param_shapes(component, config, conventions)
    problems = [f"missing {k} {expected[k]}" for k in expected if k not in params]
    problems += [f"unexpected {k}" for k in params if k not in expected]
    problems += [
        f"{k} has shape {tuple(np.shape(params[k]))}, expected {s}"
        for k, s in expected.items()
        if k in params and tuple(np.shape(params[k])) != s
    ]
    if problems:
        raise ValueError(
            f"parameters do not match the canonical layout of {component!r} (SPEC.md §0.2): "
            + "; ".join(problems)
        )
