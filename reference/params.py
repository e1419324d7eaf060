"""Canonical parameters: one flat dict ``name -> np.ndarray`` per component (SPEC.md §0.2).

Linear layers use the nn.Linear layout, ``weight`` is ``[out, in]`` and ``y = x @ W.T + b``.
Nested components join names with dots: ``layers.0.self_attn.q.weight``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .conventions import Config, Conventions

Params = dict[str, np.ndarray]
Shapes = dict[str, tuple[int, ...]]

# COMPONENTS and DECODER_ONLY are read from the component records
# (tck.reference.components), which point back here for each parameter layout; see the
# module __getattr__ at the end.

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
    return _record(component).canonical


def _record(component: str):
    from .components import record  # the records point back here: imported when called

    return record(component)


def _linear(prefix: str, n_out: int, n_in: int, bias: bool) -> Shapes:
    shapes: Shapes = {f"{prefix}weight": (n_out, n_in)}
    if bias:
        shapes[f"{prefix}bias"] = (n_out,)
    return shapes


def _norm(prefix: str, d: int, conventions: Conventions, bias: bool) -> Shapes:
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
        **_linear(f"{prefix}o.", c.d_model, hv, c.has_attention_out_bias),
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
        **_linear(f"{prefix}q.", hq, c.d_model, c.has_attention_bias),
        **_linear(f"{prefix}k.", hk, c.d_model, c.has_attention_bias),
        **_linear(f"{prefix}v.", hv, c.d_model, c.has_attention_bias),
        **_linear(f"{prefix}o.", c.d_model, c.n_heads * c.head_dim_v, c.has_attention_out_bias),
    }


def _gated_ffn(prefix: str, c: Config) -> Shapes:
    """§11.3: down(act(gate(x)) * up(x))."""
    return {
        **_linear(f"{prefix}gate.", c.d_ff, c.d_model, c.has_ffn_bias),
        **_linear(f"{prefix}up.", c.d_ff, c.d_model, c.has_ffn_bias),
        **_linear(f"{prefix}down.", c.d_model, c.d_ff, c.has_ffn_bias),
    }


def _decoder_block(prefix: str, c: Config, conv: Conventions) -> Shapes:
    """§11.4: causal self-attention (norm1), then the FFN (norm2)."""
    ffn = _gated_ffn if conv.ffn_kind == "gated" else _ffn
    return {
        **_causal_self_attention(f"{prefix}self_attn.", c),
        **_norm(f"{prefix}norm1.", c.d_model, conv, c.norm_bias),
        **ffn(f"{prefix}ffn.", c),
        **_norm(f"{prefix}norm2.", c.d_model, conv, c.norm_bias),
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
    rec = _record(component)
    return rec.layout(config, conventions or rec.canonical)


# ---------------------------------------------------------------- one layout per component
# Each component record (tck.reference.components) points to one of these.


def no_params(c: Config, conv: Conventions) -> Shapes:
    """sinusoidal_pe, rope, attention: nothing to learn."""
    return {}


def embedding_layout(c: Config, conv: Conventions) -> Shapes:
    return {"weight": (c.vocab_size, c.d_model)}


def mha_layout(c: Config, conv: Conventions) -> Shapes:
    return _mha("", c)


def layer_norm_layout(c: Config, conv: Conventions) -> Shapes:
    d = c.d_model
    return {"weight": (d,), "bias": (d,)} if c.norm_bias else {"weight": (d,)}


def rms_norm_layout(c: Config, conv: Conventions) -> Shapes:
    return {"weight": (c.d_model,)}


def scale_norm_layout(c: Config, conv: Conventions) -> Shapes:
    """§5.4: one scalar gain g, stored as weight [1]."""
    return {"weight": (1,)}


def ffn_layout(c: Config, conv: Conventions) -> Shapes:
    return _ffn("", c)


def encoder_layer_layout(c: Config, conv: Conventions) -> Shapes:
    return _encoder_layer("", c, conv)


def decoder_layer_layout(c: Config, conv: Conventions) -> Shapes:
    return _decoder_layer("", c, conv)


def encoder_layout(c: Config, conv: Conventions) -> Shapes:
    return _stack("", c, conv, c.n_layers, _encoder_layer)


def decoder_layout(c: Config, conv: Conventions) -> Shapes:
    return _stack("", c, conv, c.n_decoder_layers, _decoder_layer)


def seq2seq_layout(c: Config, conv: Conventions) -> Shapes:
    d = c.d_model
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


def causal_self_attention_layout(c: Config, conv: Conventions) -> Shapes:
    return _causal_self_attention("", c)


def gated_ffn_layout(c: Config, conv: Conventions) -> Shapes:
    return _gated_ffn("", c)


def decoder_block_layout(c: Config, conv: Conventions) -> Shapes:
    return _decoder_block("", c, conv)


def causal_lm_layout(c: Config, conv: Conventions) -> Shapes:
    return _causal_lm(c, conv)


def _patch(c: Config) -> Shapes:
    return {
        "patch_embed.weight": (c.d_model, c.channels, c.patch_size, c.patch_size),
        "patch_embed.bias": (c.d_model,),
    }


def patch_embed_layout(c: Config, conv: Conventions) -> Shapes:
    return {name.removeprefix("patch_embed."): shape for name, shape in _patch(c).items()}


def vit_layout(c: Config, conv: Conventions) -> Shapes:
    d = c.d_model
    return {
        **_patch(c),
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
    from .components import record  # the record reads this module's layouts: import late

    rec = record(component)
    table_op = rec.has("token_ids") and rec.level == "op"  # the embedding table (§1.1)
    rng = np.random.default_rng(seed)
    params: Params = {}
    for name, shape in param_shapes(component, config, conventions).items():
        *path, leaf = name.split(".")
        is_norm = rec.has("norm") or any(p.startswith("norm") for p in path)
        # Tables that are looked up or added, not multiplied: unit variance.
        is_table = leaf in ("cls_token", "pos_embed") or (
            leaf == "weight"
            and (
                table_op
                or path[-1:]
                in (["embedding"], ["src_embedding"], ["tgt_embedding"], ["pos_embedding"])
            )
        )
        if leaf == "bias":
            value = 0.1 * rng.standard_normal(shape)
        elif is_norm:
            value = 1.0 + 0.1 * rng.standard_normal(shape)
            if rec.has("l2_norm"):  # §5.4: near the paper's sqrt(D), so entries stay O(1)
                value = value * np.sqrt(config.d_model)
        elif is_table or len(shape) < 2:
            value = rng.standard_normal(shape)
        else:  # a linear or conv weight: std 1/sqrt(fan_in) keeps activations O(1)
            value = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        params[name] = value.astype(np.float64)
    if config.padding_idx is not None:
        for name in ("weight", "embedding.weight", "src_embedding.weight", "tgt_embedding.weight"):
            if rec.has("token_ids") and name in params:
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


def __getattr__(name: str):
    """COMPONENTS and DECODER_ONLY, from the component records (read when first used: the
    records import this module for their parameter layouts)."""
    if name in ("COMPONENTS", "DECODER_ONLY"):
        from . import components

        return (
            components.COMPONENTS if name == "COMPONENTS" else components.of_family("decoder-only")
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
