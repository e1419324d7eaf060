"""The component record: everything the suite knows about one SPEC component, in one place.

In the spirit of PyTorch's ``OpInfo`` (torch/testing/_internal/opinfo/core.py): one frozen
record per component holds what used to be re-typed per component across the code base --
its inputs and output, how its oracle is called, how its inputs are made, the convention
fields its output depends on, its diagnosis area, its tolerance classes, its parameter
layout, its FLOP formula, its family's canonical conventions and the clauses an
oracle-equality pass vouches for. The tables elsewhere (``tck.adapters.INPUTS``,
``tck.reference.expected``, ``inputs.make_inputs``, ``harness.FIELDS``, ``tolerance``,
``params.param_shapes``, ``costs.flops``, ...) read from ``RECORDS``.

Adding a component means adding one ``Component`` to ``RECORDS`` (below), its SPEC clause,
its oracle function, and its checks.

This module imports only ``tck.reference`` modules, and nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import costs, oracle, params
from .conventions import CANONICAL, Config, Conventions

Arrays = Mapping[str, np.ndarray]
Shapes = dict[str, tuple[int, ...]]

# What each input is, for the input builder (tck.reference.inputs.make_inputs):
#   normal       float64 standard normal (times Shape.magnitude), dims below
#   ids          int64 token ids in [0, vocab_size), dims below
#   tokens       int64 token ids that avoid Config.padding_idx, and hold it past each row's
#                length (``lengths``) when the shape is masked (seq2seq: §1.3, §8.1)
#   positions    int64 0 .. L-1, dims ("L",)
#   key_padding  bool keep [B, L]: True for the first lengths[b] positions (``lengths``)
#   keep_mask    bool keep [B, 1, 1, Lk]: a key-padding mask in the attention core's form
#   attn_mask    bool keep [Lq, Lk] (checks make their own; the builder never does)
#   position_ids int64 [B, L] (§11.7; checks make their own; the builder never does)
#   causal       a 0-d bool array, "apply your own causal mask"
INPUT_KINDS = (
    "normal",
    "ids",
    "tokens",
    "positions",
    "key_padding",
    "keep_mask",
    "attn_mask",
    "position_ids",
    "causal",
)
# When the builder makes an input: always; when the shape is masked; when it is masked and
# gives row lengths (the decoder-only family runs unpadded otherwise); when the shape is
# causal; never (an optional input only checks pass).
WHEN = ("always", "masked", "padded", "causal", "never")
# Row lengths of a padding mask over a length L: "key" is Shape.key_lengths(L) (first row
# full, later rows shorter, or the shape's own lengths); "target" is max(1, L - b) for row b.
LENGTHS = ("key", "target")
# Symbols in ``dims``: B batch, H n_heads, Lq query/target length, Lk key/source length,
# D d_model, dk head_dim_k, dv head_dim_v, C channels, S image_size.
DIMS = ("B", "H", "Lq", "Lk", "D", "dk", "dv", "C", "S")

LEVELS = ("op", "layer", "stack", "model")
FAMILIES = ("transformer", "vit", "decoder-only")
AREAS = (
    "embedding",
    "positional",
    "rope",
    "attention",
    "layer_norm",
    "ffn",
    "blocks",
    "model",
    "vit",
)
# Forward tolerance classes (tck.reference.tolerance.K_BY_CLASS): one op, or a composite
# (a layer, a stack, a model, and the table lookups measured with them).
TOLERANCES = ("op", "composite")
# Gradient tolerance classes (tolerance.K_GRAD_*): by what is differentiated.
GRADIENT_CLASSES = ("value", "key", "query", "other")
# Tags that select a component for one group of checks or tools.
TAGS = (
    "kv_cache",  # decodes incrementally, Adapter.step (§11.6)
    "bench",  # tck bench times it: a FLOP formula and a sequence axis (§10.4)
    "batched",  # §10.2 batch independence checks it
    "norm_first",  # a layer or stack whose norm placement decides where outliers land
    # What a component is, for the checks and the diagnosis that treat a kind of component:
    "attention",  # an attention op whose scores checks probe directly (§3.1, §3.3)
    "heads",  # its first input is already split into heads, [B, H, L, d] (§2.3, §3.1)
    "qkv",  # separate query, key and value [B, L, D]: self-attention passes one tensor (§3.3)
    "norm",  # a normalisation op (§5.1, §5.3, §5.4)
    "centres",  # subtracts each row's mean (LayerNorm §5.1; RMSNorm §5.3 does not)
    "positional",  # a positional-encoding op, a function of integer positions (§2)
    "images",  # takes images [B, C, S, S] (§9.1)
    "self_attention",  # a layer or stack whose one sequence is its queries and keys (§7.1)
    "cross_attention",  # a layer or stack that also attends to a memory (§7.2)
    "masks",  # takes a key mask of its own (its field key_mask): the §4 mask checks
    "causal_target",  # a decoder's target side: causal in every call (§7.2, §8.1)
    "no_gradients",  # nothing to differentiate: integer inputs, no parameters (§10.9)
    "fixed_magnitude",  # ids or images in: §10.11's magnitude sweep does not scale them
    "token_ids",  # token ids looked up in a table: §1.1's out-of-range refusal
    "max_len",  # its positions are bounded by Config.max_len (§2.2)
    "large_inputs",  # §10.7's large-magnitude stress runs on it (softmax, norm statistics)
    "logits",  # its output is logits over a vocabulary or classes (§8.3, §9.5, §11.5)
    "l2_norm",  # divides a row by its L2 norm, one scalar gain: output norm |g| (§5.4)
    # its oracle is hidden states then one head at every position (oracle.causal_lm with
    # head=False, then oracle.causal_lm_logits): a long call is compared in position chunks
    "head_per_position",
)


@dataclass(frozen=True)
class Input:
    """One input of a component, as adapters receive it (``tck.adapters.INPUTS``)."""

    name: str
    kind: str  # one of INPUT_KINDS
    dims: tuple[str, ...] = ()  # symbols of DIMS (normal, ids, tokens, key_padding, positions)
    optional: bool = False
    when: str = "always"  # one of WHEN: when the input builder makes it
    lengths: str = "key"  # key_padding and tokens: one of LENGTHS

    def __post_init__(self) -> None:
        problems = [
            f"{what} {value!r} is not one of {choices}"
            for what, value, choices in (
                ("kind", self.kind, INPUT_KINDS),
                ("when", self.when, WHEN),
                ("lengths", self.lengths, LENGTHS),
            )
            if value not in choices
        ]
        problems += [f"dim {d!r} is not one of {DIMS}" for d in self.dims if d not in DIMS]
        if problems:
            raise ValueError(f"input {self.name!r}: " + "; ".join(problems))


OracleCall = Callable[[Arrays, Arrays, Config, Conventions], np.ndarray]
Layout = Callable[[Config, Conventions], Shapes]
# (config, batch, seq_len, tgt_len, causal) -> forward FLOPs (§10.4)
# (config, batch, seq_len, tgt_len, causal, conventions) -> FLOPs; conventions matter only
# where they change the matrix products (a decoder block's gated or plain FFN, §11.4)
Cost = Callable[[Config, int, int, int, bool, Conventions], float]
# (config, conventions, dropout) -> the torch reference module (tck.reference.model)
Module = Callable[[Config, Conventions, float], Any]
# (inputs, config) -> the output's shape (SPEC.md §10.6)
OutputShape = Callable[[Arrays, Config], tuple[int, ...]]


@dataclass(frozen=True, kw_only=True)
class Component:
    """Everything the suite knows about one SPEC component (built with keywords only)."""

    name: str
    level: str  # one of LEVELS: an op, a layer, a stack of layers, a whole model
    family: str  # one of FAMILIES: whose canonical conventions apply (SPEC.md §0.3)
    clauses: tuple[str, ...]  # what an oracle-equality pass vouches for (SPEC.md sections)
    inputs: tuple[Input, ...]  # in the order the builder draws them
    output: str  # the output's shape, in words
    oracle: OracleCall  # (inputs, params, config, conventions) -> float64 output
    # (config, conventions) -> canonical parameter shapes (SPEC.md §0.2): a function of
    # tck.reference.params
    layout: Layout
    # (config, conventions, dropout) -> the torch reference module, float32 until
    # tck.reference.model.build casts it (the only place torch is imported, when called)
    module: Module
    fields: tuple[str, ...] = ()  # convention fields the output depends on (diagnosis order)
    area: str = "blocks"  # the diagnosis area: "{area}.oracle_mismatch"
    tolerance: str = "op"  # forward tolerance class, one of TOLERANCES
    # gradient tolerance class by what is differentiated (an input name, or a canonical
    # parameter name without "params."), and the class of everything else
    gradients: tuple[tuple[str, str], ...] = ()
    gradient_default: str = "other"
    # the reduced-precision quantities it forms (SPEC.md §10.10), in the order the diagnosis
    # tries them; None: not known, try them all
    quantities: tuple[str, ...] | None = None
    cost: Cost | None = None  # analytic FLOPs (SPEC.md §10.4), None where not a matmul
    # the §10.6 output shape for given inputs; None: the first input's shape
    output_shape: OutputShape | None = None
    tags: frozenset[str] = frozenset()  # of TAGS
    # the input that masks its keys, where a check may pass any mask (SPEC.md §4.1); set
    # exactly when it carries the tag "masks"
    key_mask: str | None = None

    def __post_init__(self) -> None:
        problems = [
            f"{what} {value!r} is not one of {choices}"
            for what, value, choices in (
                ("level", self.level, LEVELS),
                ("family", self.family, FAMILIES),
                ("area", self.area, AREAS),
                ("tolerance", self.tolerance, TOLERANCES),
                ("gradient_default", self.gradient_default, GRADIENT_CLASSES),
            )
            if value not in choices
        ]
        problems += [
            f"gradient class {k!r}" for _, k in self.gradients if k not in GRADIENT_CLASSES
        ]
        problems += [f"tag {t!r} is not one of {TAGS}" for t in self.tags if t not in TAGS]
        if ("masks" in self.tags) != (self.key_mask is not None):
            problems.append('the tag "masks" and the field key_mask go together')
        names = [i.name for i in self.inputs]
        if self.key_mask is not None and self.key_mask not in names:
            problems.append(f"key_mask {self.key_mask!r} is not one of its inputs {names}")
        if len(set(names)) != len(names):
            problems.append(f"inputs repeat a name: {names}")
        if not self.clauses:
            problems.append("no clauses")
        if problems:
            raise ValueError(f"component record {self.name!r}: " + "; ".join(problems))

    def has(self, tag: str) -> bool:
        """Whether the record carries ``tag`` (one of TAGS; a ValueError otherwise)."""
        if tag not in TAGS:
            raise ValueError(f"unknown tag {tag!r}; the tags are: {', '.join(TAGS)}")
        return tag in self.tags

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs if not i.optional)

    @property
    def optional(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs if i.optional)

    @property
    def canonical(self) -> Conventions:
        """The canonical conventions of the component's family (SPEC.md §0.3)."""
        return {
            "transformer": CANONICAL,
            "vit": params.VIT_CANONICAL,
            "decoder-only": params.DECODER_CANONICAL,
        }[self.family]

    def shape_of(self, inputs: Arrays, config: Config) -> tuple[int, ...]:
        """The output shape SPEC.md §10.6 gives for ``inputs``."""
        if self.output_shape is not None:
            return tuple(self.output_shape(inputs, config))
        return tuple(np.shape(inputs[self.inputs[0].name]))

    def gradient_class(self, grad_of: str) -> str:
        """The tolerance class of the gradient with respect to ``grad_of`` (an input name
        such as ``"k"`` or ``"params.v.weight"``)."""
        return dict(self.gradients).get(grad_of.removeprefix("params."), self.gradient_default)


# ---------------------------------------------------------------------------- oracle calls


def _flag(inputs: Arrays, name: str) -> bool:
    return bool(np.asarray(inputs[name])) if name in inputs else False


def self_keep(inputs: Arrays, length: int, conventions: Conventions):
    """§4.1: the self-attention keep-mask from key_padding, attn_mask and causal."""
    return oracle.combine_keep_masks(
        length,
        length,
        key_padding=inputs.get("key_padding"),
        attn_mask=inputs.get("attn_mask"),
        causal=_flag(inputs, "causal"),
        alignment=conventions.causal_alignment,
    )


def memory_keep(inputs: Arrays, lq: int, lk: int):
    return oracle.combine_keep_masks(lq, lk, key_padding=inputs.get("memory_key_padding"))


def _sinusoidal_pe(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
    positions = np.asarray(inputs["positions"])
    table = oracle.sinusoidal_pe(
        int(positions.max()) + 1, c.d_model, base=conv.pe_base, layout=conv.pe_layout
    )
    return table[positions]


def _attention(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
    q, k = inputs["q"], inputs["k"]
    keep = inputs.get("keep_mask")
    if _flag(inputs, "causal"):
        causal = oracle.causal_keep_mask(q.shape[-2], k.shape[-2], conv.causal_alignment)
        keep = causal if keep is None else keep & causal
    return oracle.scaled_dot_product_attention(
        q, k, inputs["v"], keep, fully_masked_rows=conv.fully_masked_rows
    )


def _mha(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
    query, key = inputs["query"], inputs["key"]
    keep = oracle.combine_keep_masks(
        query.shape[1],
        key.shape[1],
        key_padding=inputs.get("key_padding"),
        attn_mask=inputs.get("attn_mask"),
        causal=_flag(inputs, "causal"),
        alignment=conv.causal_alignment,
    )
    return oracle.multi_head_attention(
        query, key, inputs["value"], p, n_heads=c.n_heads, keep_mask=keep, conventions=conv
    )


def _layer_norm(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
    return oracle.layer_norm(
        inputs["x"],
        p["weight"],
        p.get("bias"),  # absent: Config.norm_bias=False
        eps=conv.eps,
        eps_placement=conv.eps_placement,
        variance=conv.variance,
    )


def _encoder_layer(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
    x = inputs["x"]
    keep = self_keep(inputs, x.shape[1], conv)
    return oracle.encoder_layer(x, p, n_heads=c.n_heads, keep_mask=keep, conventions=conv)


def _encoder(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
    x = inputs["x"]
    keep = self_keep(inputs, x.shape[1], conv)
    query_keep = inputs.get("key_padding")  # self-attention: queries are the keys
    return oracle.encoder(x, p, c, keep_mask=keep, query_keep=query_keep, conventions=conv)


def _decoder_masks(inputs: Arrays, conv: Conventions):
    x, memory = inputs["x"], inputs["memory"]
    return self_keep(inputs, x.shape[1], conv), memory_keep(inputs, x.shape[1], memory.shape[1])


def _decoder_layer(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
    keep, mem_keep = _decoder_masks(inputs, conv)
    return oracle.decoder_layer(
        inputs["x"],
        inputs["memory"],
        p,
        n_heads=c.n_heads,
        self_keep_mask=keep,
        memory_keep_mask=mem_keep,
        conventions=conv,
    )


def _decoder(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
    keep, mem_keep = _decoder_masks(inputs, conv)
    return oracle.decoder(
        inputs["x"],
        inputs["memory"],
        p,
        c,
        self_keep_mask=keep,
        memory_keep_mask=mem_keep,
        conventions=conv,
    )


def decoder_only(
    component: str,
    inputs: Arrays,
    params: Arrays,
    config: Config,
    conventions: Conventions,
    causal_keep: np.ndarray | None = None,
    key_positions: np.ndarray | None = None,
) -> np.ndarray:
    """§11: the decoder-only components; ``causal_keep`` (L, L) replaces the causal triangle
    and ``key_positions`` (B, L) the keys' position ids under RoPE (only the diagnosis of
    cached decoding passes them)."""
    common = {
        "key_padding": inputs.get("key_padding"),
        "positions": inputs.get("positions"),
        "causal_keep": causal_keep,
        "key_positions": key_positions,
        "conventions": conventions,
    }
    if component == "causal_lm":
        return oracle.causal_lm(inputs["ids"], params, config, **common)
    fn = (
        oracle.causal_self_attention
        if component == "causal_self_attention"
        else oracle.decoder_block
    )
    return fn(inputs["x"], params, n_heads=config.n_heads, n_kv_heads=config.kv_heads, **common)


def _decoder_only(component: str) -> OracleCall:
    def call(inputs: Arrays, p: Arrays, c: Config, conv: Conventions) -> np.ndarray:
        return decoder_only(component, inputs, p, c, conv)

    call.__name__ = f"_{component}"
    return call


# ---------------------------------------------------------------------------- costs (§10.4)


def _enc_layer_flops(c: Config, batch: int, seq: int, causal: bool) -> float:
    return costs.mha_flops(c, batch, seq, causal=causal) + costs.ffn_flops(c, batch, seq)


def _dec_layer_flops(c: Config, batch: int, seq: int, tgt: int) -> float:
    return (
        costs.mha_flops(c, batch, tgt, causal=True)
        + costs.mha_flops(c, batch, tgt, seq)
        + costs.ffn_flops(c, batch, tgt)
    )


def _seq2seq_flops(
    c: Config, batch: int, seq: int, tgt: int, causal: bool, conv: Conventions
) -> float:
    logits = costs.linear_flops(batch, tgt, c.d_model, c.vocab_size)
    return (
        c.n_layers * _enc_layer_flops(c, batch, seq, causal)
        + c.n_decoder_layers * _dec_layer_flops(c, batch, seq, tgt)
        + logits
    )


def _vit_flops(c: Config, batch: int, seq: int, tgt: int, causal: bool, conv: Conventions) -> float:
    tokens = c.n_patches + 1
    patches = costs.linear_flops(batch, c.n_patches, c.channels * c.patch_size**2, c.d_model)
    layer = costs.mha_flops(c, batch, tokens) + costs.ffn_flops(c, batch, tokens)
    return patches + c.n_layers * layer + costs.linear_flops(batch, 1, c.d_model, c.n_classes)


def _patches_shape(inputs: Arrays, c: Config) -> tuple[int, ...]:
    b, _, h, w = np.shape(inputs["images"])
    return (b, (h // c.patch_size) * (w // c.patch_size), c.d_model)


def _model():
    from . import model  # torch: imported when a module is built, never by the oracle side

    return model


# ---------------------------------------------------------------------------- the records

_X = Input("x", "normal", ("B", "Lq", "D"))
_KEY_PADDING = Input("key_padding", "key_padding", ("B", "Lq"), optional=True, when="masked")
_ATTN_MASK = Input("attn_mask", "attn_mask", optional=True, when="never")
_CAUSAL = Input("causal", "causal", optional=True, when="causal")
_SELF = (_X, _KEY_PADDING, _ATTN_MASK, _CAUSAL)  # encoder layer and stack
_CROSS = (  # decoder layer and stack: always causal
    _X,
    Input("memory", "normal", ("B", "Lk", "D")),
    Input(
        "key_padding", "key_padding", ("B", "Lq"), optional=True, when="masked", lengths="target"
    ),
    Input("memory_key_padding", "key_padding", ("B", "Lk"), optional=True, when="masked"),
    Input("causal", "causal", optional=True),
)
# §11 decoder-only: one input, always causal; key padding only when a shape gives lengths
_DECODER_ONLY_TAIL = (
    Input("key_padding", "key_padding", ("B", "Lq"), optional=True, when="padded"),
    Input("positions", "position_ids", optional=True, when="never"),
)
_IMAGES = Input("images", "normal", ("B", "C", "S", "S"))

_NORM = ("eps_placement", "variance", "eps")
_LAYER = ("norm_placement", "activation", *_NORM)  # what every layer's output depends on
_STACK = ("norm_placement", "final_norm", "activation", *_NORM)  # a layer, and the end
# §11.1: RoPE or not, and how; the sliding window of its causal mask (§4.5)
_DECODER_ATTENTION = ("positions", "rope_layout", "pe_base", "sliding_window", "rope_scaling")
_NORMED = ("norm_statistics", "softmax")
# a decoder's attention: its softmax, and RoPE's angles where it rotates (§11.1)
_DECODER_ATTENDED = ("softmax", "rope_angles")
_DECODER_NORMED = ("norm_statistics", *_DECODER_ATTENDED)
_ELEMENTWISE = (("weight", "value"), ("bias", "value"))  # a scale or a lookup per element


def _records() -> tuple[Component, ...]:
    return (
        Component(
            name="embedding",
            level="op",
            family="transformer",
            clauses=("1.1",),
            inputs=(Input("ids", "ids", ("B", "Lq")),),
            output="[B, L, D] the table rows (no scale: §1.2 is checked on seq2seq)",
            oracle=lambda i, p, c, conv: oracle.embedding(i["ids"], p["weight"]),
            layout=params.embedding_layout,
            module=lambda c, conv, d: _model().Embedding(c.vocab_size, c.d_model, c.padding_idx),
            area="embedding",
            tolerance="composite",
            gradients=_ELEMENTWISE,
            output_shape=lambda i, c: (*np.shape(i["ids"]), c.d_model),
            tags=frozenset({"fixed_magnitude", "token_ids"}),
        ),
        Component(
            name="sinusoidal_pe",
            level="op",
            family="transformer",
            clauses=("2.1",),
            inputs=(Input("positions", "positions", ("Lq",)),),
            output="[L, D] the encoding at each position",
            oracle=_sinusoidal_pe,
            layout=params.no_params,
            module=lambda c, conv, d: _model().SinusoidalPE(c, conv),
            fields=("pe_layout", "pe_base"),
            area="positional",
            output_shape=lambda i, c: (len(i["positions"]), c.d_model),
            tags=frozenset({"positional", "no_gradients", "max_len"}),
        ),
        Component(
            name="rope",
            level="op",
            family="transformer",
            clauses=("2.3",),
            inputs=(
                Input("x", "normal", ("B", "H", "Lq", "dk")),
                Input("positions", "positions", ("Lq",)),
            ),
            output="[B, H, L, d] x rotated",
            oracle=lambda i, p, c, conv: oracle.rope(
                i["x"],
                i["positions"],
                layout=conv.rope_layout,
                frequencies=oracle.rope_frequencies_of(np.shape(i["x"])[-1], conv),  # §2.6
            ),
            layout=params.no_params,
            module=lambda c, conv, d: _model().RoPE(conv),
            fields=("rope_layout", "pe_base", "rope_scaling"),
            area="rope",
            quantities=("rope_angles",),
            tags=frozenset({"positional", "heads"}),
        ),
        Component(
            name="attention",
            level="op",
            family="transformer",
            clauses=("3.1", "4.1", "4.2", "4.3"),
            inputs=(
                Input("q", "normal", ("B", "H", "Lq", "dk")),
                Input("k", "normal", ("B", "H", "Lk", "dk")),
                Input("v", "normal", ("B", "H", "Lk", "dv")),
                Input("keep_mask", "keep_mask", ("B", "Lk"), optional=True, when="masked"),
                _CAUSAL,
            ),
            output="[B, H, Lq, dv]",
            oracle=_attention,
            layout=params.no_params,
            module=lambda c, conv, d: _model().Attention(conv.fully_masked_rows),
            fields=("fully_masked_rows", "causal_alignment"),
            area="attention",
            gradients=(("v", "value"), ("k", "key"), ("q", "query")),
            quantities=("softmax",),
            cost=lambda c, b, n, t, causal, conv: costs.attention_flops(
                b, c.n_heads, n, n, c.head_dim_k, c.head_dim_v, causal=causal
            ),
            tags=frozenset({"bench", "batched", "attention", "heads", "masks", "large_inputs"}),
            key_mask="keep_mask",
            output_shape=lambda i, c: (*np.shape(i["q"])[:-1], np.shape(i["v"])[-1]),
        ),
        Component(
            name="mha",
            level="op",
            family="transformer",
            clauses=("3.3", "3.4", "3.5", "4.2"),
            inputs=(
                Input("query", "normal", ("B", "Lq", "D")),
                Input("key", "normal", ("B", "Lk", "D")),
                Input("value", "normal", ("B", "Lk", "D")),
                Input("key_padding", "key_padding", ("B", "Lk"), optional=True, when="masked"),
                _ATTN_MASK,
                _CAUSAL,
            ),
            output="[B, Lq, D]",
            oracle=_mha,
            layout=params.mha_layout,
            module=lambda c, conv, d: _model().MultiHeadAttention(c, conv),
            fields=("fully_masked_rows", "causal_alignment"),
            area="attention",
            gradients=(
                *((n, "value") for n in ("value", "v.weight", "v.bias", "o.weight", "o.bias")),
                *((n, "key") for n in ("key", "k.weight", "k.bias")),
            ),
            gradient_default="query",
            quantities=("softmax",),
            cost=lambda c, b, n, t, causal, conv: costs.mha_flops(c, b, n, causal=causal),
            tags=frozenset({"bench", "batched", "attention", "qkv", "masks", "large_inputs"}),
            key_mask="key_padding",
        ),
        Component(
            name="layer_norm",
            level="op",
            family="transformer",
            clauses=("5.1",),
            inputs=(_X,),
            output="[B, L, D]",
            oracle=_layer_norm,
            layout=params.layer_norm_layout,
            module=lambda c, conv, d: _model().LayerNorm(
                c.d_model, conv.eps, conv.eps_placement, conv.variance, c.norm_bias
            ),
            fields=_NORM,
            area="layer_norm",
            gradients=_ELEMENTWISE,
            quantities=("norm_statistics",),
            tags=frozenset({"norm", "centres", "large_inputs"}),
        ),
        Component(
            name="rms_norm",
            level="op",
            family="transformer",
            clauses=("5.3",),
            inputs=(_X,),
            output="[B, L, D]",
            oracle=lambda i, p, c, conv: oracle.rms_norm(i["x"], p["weight"], eps=conv.eps),
            layout=params.rms_norm_layout,
            module=lambda c, conv, d: _model().RMSNorm(c.d_model, conv.eps),
            fields=("eps",),
            area="layer_norm",
            gradients=_ELEMENTWISE,
            quantities=("norm_statistics",),
            tags=frozenset({"norm", "large_inputs"}),
        ),
        Component(
            name="scale_norm",
            level="op",
            family="transformer",
            clauses=("5.4",),
            inputs=(_X,),
            output="[B, L, D]",
            oracle=lambda i, p, c, conv: oracle.scale_norm(i["x"], p["weight"], eps=conv.eps),
            layout=params.scale_norm_layout,
            module=lambda c, conv, d: _model().ScaleNorm(c.d_model, conv.eps),
            fields=("eps",),
            area="layer_norm",
            quantities=("norm_statistics",),
            tags=frozenset({"norm", "l2_norm", "large_inputs"}),
        ),
        Component(
            name="ffn",
            level="op",
            family="transformer",
            clauses=("6.1",),
            inputs=(_X,),
            output="[B, L, D]",
            oracle=lambda i, p, c, conv: oracle.feed_forward(i["x"], p, activation=conv.activation),
            layout=params.ffn_layout,
            module=lambda c, conv, d: _model().FeedForward(c, conv),
            fields=("activation",),
            area="ffn",
            cost=lambda c, b, n, t, causal, conv: costs.ffn_flops(c, b, n),
            tags=frozenset({"bench", "batched", "large_inputs"}),
        ),
        Component(
            name="activation",
            level="op",
            family="transformer",
            clauses=("6.3",),
            inputs=(_X,),
            output="[B, L, D]",
            oracle=lambda i, p, c, conv: oracle.activation(i["x"], name=conv.activation),
            layout=params.no_params,
            module=lambda c, conv, d: _model().Activation(conv),
            fields=("activation",),
            area="ffn",
        ),
        Component(
            name="encoder_layer",
            level="layer",
            family="transformer",
            clauses=("7.1",),
            inputs=_SELF,
            output="[B, L, D]",
            oracle=_encoder_layer,
            layout=params.encoder_layer_layout,
            module=lambda c, conv, d: _model().EncoderLayer(c, conv, d),
            fields=(*_LAYER, "fully_masked_rows"),
            tolerance="composite",
            quantities=_NORMED,
            cost=lambda c, b, n, t, causal, conv: _enc_layer_flops(c, b, n, causal),
            tags=frozenset(
                {"bench", "batched", "norm_first", "self_attention", "masks", "large_inputs"}
            ),
            key_mask="key_padding",
        ),
        Component(
            name="decoder_layer",
            level="layer",
            family="transformer",
            clauses=("7.2",),
            inputs=_CROSS,
            output="[B, Lt, D]",
            oracle=_decoder_layer,
            layout=params.decoder_layer_layout,
            module=lambda c, conv, d: _model().DecoderLayer(c, conv, d),
            fields=(*_LAYER, "fully_masked_rows"),
            tolerance="composite",
            quantities=_NORMED,
            cost=lambda c, b, n, t, causal, conv: _dec_layer_flops(c, b, n, t),
            tags=frozenset(
                {
                    "bench",
                    "batched",
                    "norm_first",
                    "cross_attention",
                    "masks",
                    "causal_target",
                    "large_inputs",
                }
            ),
            key_mask="memory_key_padding",
        ),
        Component(
            name="encoder",
            level="stack",
            family="transformer",
            clauses=("7.3",),
            inputs=_SELF,
            output="[B, L, D]",
            oracle=_encoder,
            layout=params.encoder_layout,
            module=lambda c, conv, d: _model().Encoder(c, conv, d),
            fields=(*_STACK, "fully_masked_rows", "padded_query_rows"),
            tolerance="composite",
            quantities=_NORMED,
            cost=lambda c, b, n, t, causal, conv: c.n_layers * _enc_layer_flops(c, b, n, causal),
            tags=frozenset(
                {"bench", "batched", "norm_first", "self_attention", "masks", "large_inputs"}
            ),
            key_mask="key_padding",
        ),
        Component(
            name="decoder",
            level="stack",
            family="transformer",
            clauses=("7.3",),
            inputs=_CROSS,
            output="[B, Lt, D]",
            oracle=_decoder,
            layout=params.decoder_layout,
            module=lambda c, conv, d: _model().Decoder(c, conv, d),
            fields=(*_STACK, "fully_masked_rows"),
            tolerance="composite",
            quantities=_NORMED,
            cost=lambda c, b, n, t, causal, conv: c.n_decoder_layers * _dec_layer_flops(c, b, n, t),
            tags=frozenset(
                {"bench", "batched", "norm_first", "cross_attention", "masks", "causal_target"}
            ),
            key_mask="memory_key_padding",
        ),
        Component(
            name="seq2seq",
            level="model",
            family="transformer",
            clauses=("8.1", "8.3"),
            inputs=(
                Input("src_ids", "tokens", ("B", "Lk")),
                Input("tgt_ids", "tokens", ("B", "Lq"), lengths="target"),
            ),
            output="[B, Lt, V] logits",
            oracle=lambda i, p, c, conv: oracle.seq2seq(
                i["src_ids"], i["tgt_ids"], p, c, conventions=conv
            ),
            layout=params.seq2seq_layout,
            module=lambda c, conv, d: _model().Seq2Seq(c, conv, d),
            fields=("embedding_scale", "pe_layout", *_STACK),
            area="model",
            tolerance="composite",
            quantities=_NORMED,
            cost=_seq2seq_flops,
            tags=frozenset({"bench", "batched", "causal_target", "token_ids", "max_len", "logits"}),
            output_shape=lambda i, c: (*np.shape(i["tgt_ids"]), c.vocab_size),
        ),
        Component(
            name="patch_embed",
            level="op",
            family="vit",
            clauses=("9.1",),
            inputs=(_IMAGES,),
            output="[B, N_p, D]",
            oracle=lambda i, p, c, conv: oracle.patch_embed(
                i["images"], p["weight"], p["bias"], patch_size=c.patch_size
            ),
            layout=params.patch_embed_layout,
            module=lambda c, conv, d: _model().PatchEmbedding(c.channels, c.d_model, c.patch_size),
            area="vit",
            tolerance="composite",
            output_shape=_patches_shape,
            tags=frozenset({"images", "fixed_magnitude"}),
        ),
        Component(
            name="vit",
            level="model",
            family="vit",
            clauses=("9.2", "9.3", "9.4", "9.5"),
            inputs=(_IMAGES,),
            output="[B, n_classes] logits",
            oracle=lambda i, p, c, conv: oracle.vit(i["images"], p, c, conventions=conv),
            layout=params.vit_layout,
            module=lambda c, conv, d: _model().ViT(c, conv, d),
            fields=("pooling", *_STACK),
            area="vit",
            tolerance="composite",
            quantities=_NORMED,
            cost=_vit_flops,
            tags=frozenset({"batched", "images", "fixed_magnitude", "logits"}),
            output_shape=lambda i, c: (np.shape(i["images"])[0], c.n_classes),
        ),
        # §11 decoder-only models
        Component(
            name="causal_self_attention",
            level="op",
            family="decoder-only",
            clauses=("11.1",),
            inputs=(_X, *_DECODER_ONLY_TAIL),
            output="[B, L, D]",
            oracle=_decoder_only("causal_self_attention"),
            layout=params.causal_self_attention_layout,
            module=lambda c, conv, d: _model().CausalSelfAttention(c, conv),
            fields=(*_DECODER_ATTENTION, "fully_masked_rows"),
            area="attention",
            cost=lambda c, b, n, t, causal, conv: costs.causal_self_attention_flops(c, b, n),
            tags=frozenset({"bench", "kv_cache"}),
            quantities=_DECODER_ATTENDED,
        ),
        Component(
            name="gated_ffn",
            level="op",
            family="decoder-only",
            clauses=("11.3",),
            inputs=(_X,),
            output="[B, L, D]",
            oracle=lambda i, p, c, conv: oracle.gated_feed_forward(
                i["x"], p, activation=conv.gate_activation
            ),
            layout=params.gated_ffn_layout,
            module=lambda c, conv, d: _model().GatedFeedForward(c, conv),
            fields=("gate_activation",),
            area="ffn",
            cost=lambda c, b, n, t, causal, conv: costs.gated_ffn_flops(c, b, n),
            tags=frozenset({"bench"}),
        ),
        Component(
            name="decoder_block",
            level="layer",
            family="decoder-only",
            clauses=("11.4",),
            inputs=(_X, *_DECODER_ONLY_TAIL),
            output="[B, L, D]",
            oracle=_decoder_only("decoder_block"),
            layout=params.decoder_block_layout,
            module=lambda c, conv, d: _model().DecoderBlock(c, conv, d),
            fields=(
                "norm_placement",
                "activation",
                "gate_activation",
                *_NORM,
                *_DECODER_ATTENTION,
            ),
            tolerance="composite",
            cost=lambda c, b, n, t, causal, conv: costs.decoder_block_flops(c, b, n, conv),
            tags=frozenset({"bench", "kv_cache"}),
            quantities=_DECODER_NORMED,
        ),
        Component(
            name="causal_lm",
            level="model",
            family="decoder-only",
            clauses=("11.5",),
            inputs=(Input("ids", "ids", ("B", "Lq")), *_DECODER_ONLY_TAIL),
            output="[B, L, V] logits",
            oracle=_decoder_only("causal_lm"),
            layout=params.causal_lm_layout,
            module=lambda c, conv, d: _model().CausalLM(c, conv, d),
            fields=(
                "norm_placement",
                "final_norm",
                "activation",
                "gate_activation",
                *_NORM,
                *_DECODER_ATTENTION,
                "embedding_scale",
            ),
            area="model",
            tolerance="composite",
            tags=frozenset({"kv_cache", "logits", "head_per_position"}),
            output_shape=lambda i, c: (*np.shape(i["ids"]), c.vocab_size),
            quantities=_DECODER_NORMED,
        ),
    )


RECORDS: dict[str, Component] = {r.name: r for r in _records()}
COMPONENTS: tuple[str, ...] = tuple(RECORDS)


def record(component: str) -> Component:
    """The record of ``component``; a ValueError that names the known ones otherwise."""
    try:
        return RECORDS[component]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown component {component!r}; the components are: {', '.join(COMPONENTS)}"
        ) from None


def tagged(tag: str) -> tuple[str, ...]:
    """The components that carry ``tag`` (one of TAGS), in SPEC order."""
    if tag not in TAGS:
        raise ValueError(f"unknown tag {tag!r}; the tags are: {', '.join(TAGS)}")
    return tuple(name for name, r in RECORDS.items() if tag in r.tags)


def select(*tags: str, family: str | None = None, level: str | None = None) -> tuple[str, ...]:
    """The components that carry every one of ``tags`` and, when given, are of ``family``
    and at ``level``, in SPEC order."""
    return tuple(
        name
        for name, r in RECORDS.items()
        if all(r.has(t) for t in tags) and family in (None, r.family) and level in (None, r.level)
    )


def of_family(family: str) -> tuple[str, ...]:
    """The components of ``family`` (one of FAMILIES), in SPEC order."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; the families are: {', '.join(FAMILIES)}")
    return tuple(name for name, r in RECORDS.items() if r.family == family)
