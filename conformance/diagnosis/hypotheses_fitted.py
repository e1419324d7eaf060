"""Hypotheses by class for pieces that whole models hold: the position table, the FFN's
activation, the ViT's patch kernel and class token, one parameter read from a sibling module.

Each is read off the oracle's pieces (``tck.reference.variants.reaches``) or the canonical
parameter layout (``tck.reference.params``), so every component that holds the piece gets
it, from the op to the whole model (an encoder-decoder, a causal LM, a ViT), with no list of
components:

- **The positional base of any component with a position table or RoPE**
  (``positional.base_wrong``): the base is solved for wherever the oracle runs
  ``sinusoidal_pe`` or ``rope``, whether or not the component's record lists ``pe_base`` as
  one of its fields (a seq2seq model builds the sinusoidal table inside).
- **The inverse frequencies' exponent stepped wrong** (``positional.frequency_wrong``): a
  solved base equal to the declared one squared or square-rooted is the exponent ``i/d``
  for ``2i/d`` (``arange(0, d // 2) / d``) or ``4i/d``, not another base.
- **A sinusoidal table with the wrong function on a member of each pair**: sine on both
  members or cosine on both (``positional.pair_function_repeated``: the encoding of p + k is
  then no fixed linear map of p's), or cosine on the even members and sine on the odd
  (``positional.sin_cos_swapped``); its exponent taken per feature (``j/d``,
  ``positional.frequency_wrong``); its rows read at ``p + k``
  (``positional.position_offset``), where no ``positions`` input can be shifted; the table
  added to one stream of an encoder-decoder and not the other
  (``positional.positions_ignored``).
- **An FFN activation that is none of the declared ones** (``ffn.activation_wrong``):
  parameterised families are solved for, x * sigmoid(a x) (SiLU at a = 1, QuickGELU at a =
  1.702), the tanh GELU with a cubic coefficient c (0.044715 in gelu_new) or a factor k,
  ReLU(x)^p (squared ReLU at p = 2), and the erf GELU 0.5 x (1 + erf(a x)) (exact at a =
  1/sqrt(2), ``erf(x / 2)`` at a = 0.5); the message names the fitted function. In a plain
  FFN (§6.1) and in a gated one's gate (§11.3).
- **The activation after the output projection** (``ffn.activation_misplaced``):
  ``act(fc2(fc1(x)))`` for ``fc2(act(fc1(x)))``.
- **The patch kernel transposed within each patch** (``vit.patch_kernel_transposed``): the
  kernel's rows and columns swapped (an einsum ``dcqp`` for ``dcpq``, a ``weight.transpose(2,
  3)``), wherever the parameters hold a square ``patch_embed.weight``.
- **The image's channels in another order** (``vit.channel_order_wrong``): RGB read as BGR
  (``pixel_values.flip(1)``) or any other order of up to four channels, as the kernel's
  input channels read in the inverse order.
- **The class token appended after the patches** (``vit.pooling_wrong_token``): the position
  table added to the tokens in their new order, so token 0, the pooled one, is a patch
  (under mean pooling, ``vit.pooling_mean_with_cls``: the mean counts the class token).
- **One parameter of a module read from a sibling module** (``params.read_from_other_module``):
  a query bias taken from the key projection, a norm's shift from the other norm; the
  whole-module case is ``hypotheses_more.other_module_hypotheses``.

Every hypothesis is an ``Alternative`` judged by the rules of ``alternatives.fits``; a solved
value is evidence only where it also holds on a second call (``explain``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tck.reference import oracle, record
from tck.reference.catalogue import convention_code
from tck.reference.codes import code as registered
from tck.reference.variants import reaches

from .alternatives import Alternative
from .hypotheses_more import _OWN_CODES
from .hypotheses_solved import (
    LOG_RANGES,
    Evaluate,
    float32_constant,
    held_in_float32,
    max_distance,
    solve_log,
)

# The families already tried without a fit, per subject object and dtype, in this process: a
# subject's bug is the same in every check, so a family that explained none of a failing
# comparison is not solved again for each later check (an encoder-decoder pays ~10 s per
# family otherwise). The subject is held, so that its id is not reused.
_UNFIT: dict[int, tuple[Any, set[tuple[str, str]]]] = {}


def once_per_subject(
    subject: Any, dtype: str, family: str, candidates: Iterator[Alternative]
) -> Iterator[Alternative]:
    """``candidates``, unless ``family`` already failed on ``subject`` in ``dtype``; a
    candidate the consumer took ends the iteration, so resuming after one means it failed."""
    _, failed = _UNFIT.setdefault(id(subject), (subject, set()))
    if (family, dtype) in failed:
        return
    yield from candidates
    failed.add((family, dtype))


# ------------------------------------------------------------------ positional encodings

# A solved base b' = b ** k of the declared b with k one of these is the frequencies'
# exponent scaled by k (i/d for 2i/d: k = 1/2; 4i/d: k = 2), since b' ** (-2i/d) = b **
# (-2ki/d). Other ratios (1e6 for 1e4 is k = 1.5) stay a base: bases in use are powers of
# ten, and any of them is some power of another.
EXPONENT_FACTORS = (0.5, 2.0)
# How close k must be: the solved base is refined to ~1e-12 relatively in float64; over
# ln(b) >= ln(10) that moves k by less than 1e-6. Under a lower dtype's bound the fit carries
# that dtype's rounding of the angles (float32 at positions near 8191: a base 100 solved as
# 100.005, k off by 1.1e-5), hence the looser LOWER_EXPONENT_RTOL; the factors tried (0.5,
# 2, d / (d - 2)) lie far further apart than either.
EXPONENT_RTOL = 1e-5
LOWER_EXPONENT_RTOL = 1e-4


def exponent_factor(
    declared: float, solved: float, width: int | None = None, rtol: float = EXPONENT_RTOL
) -> float | None:
    """k where ``solved`` is ``declared ** k`` for k in ``EXPONENT_FACTORS`` or, given the
    table's ``width`` d, for k = d / (d - 2): the exponents spaced over d/2 - 1 steps instead
    of d/2 (tensor2tensor's ``get_timing_signal_1d`` and flax's ``sinusoidal_init`` divide
    log(base) by ``num_timescales - 1``), since b^(-i / (d/2 - 1)) = (b^(d/(d-2)))^(-2i/d).
    Else None. Without the width no such k is named: the ratio of two powers of ten (1e6 for
    1e4: k = 1.5) is d / (d - 2) for some d (6), and only the subject's own d tells them
    apart; where even that collides (a head width of 6), a round solved base (two
    significant digits) is read as another base, which someone typed."""
    if declared <= 1.0 or solved <= 1.0:
        return None
    k = math.log(solved) / math.log(declared)
    typed = math.isclose(float(f"{solved:.2g}"), solved, rel_tol=EXPONENT_RTOL)
    spaced = (width / (width - 2),) if width is not None and width > 4 and not typed else ()
    factors = EXPONENT_FACTORS + spaced
    return next((f for f in factors if math.isclose(k, f, rel_tol=rtol)), None)


def table_width(component: str, config: Any) -> int | None:
    """The d of ``component``'s frequency table: the head width where it rotates (§2.3),
    d_model where it adds a sinusoidal table (§2.1), else None."""
    if reaches(component, "rope"):
        return int(config.d_k or config.d_model // config.n_heads)
    if reaches(component, "sinusoidal_pe"):
        return int(config.d_model)
    return None


def exponent_message(declared: float, solved: float, k: float) -> str:
    if k in EXPONENT_FACTORS:
        step, code = {
            0.5: ("i/d", "arange(0, d // 2) / d"),
            2.0: ("4i/d", "arange(0, 2 d, 4) / d"),
        }[k]
        how = f"the exponent steps by {k:g} times the spec's"
    else:
        step, code = "i/(d/2 - 1)", "arange(0, d // 2) / (d // 2 - 1)"
        how = (
            "the exponent is spaced over d/2 - 1 steps instead of d/2, as tensor2tensor's "
            "timing signal and flax's sinusoidal_init space it"
        )
    return (
        f"the inverse frequencies are base^(-{step}) ({code} for arange(0, d, 2) / d) instead "
        f"of base^(-2i/d): {how} (solved for: the table is a geometric one with base "
        f"{solved:.6g}, the declared {declared:g} to the power {k:.6g}; SPEC.md §2.1, §2.3)"
    )


# A base solved within this relative distance of the declared one is no base a model is
# given (real ones differ by powers of ten: 1e4, 5e5, 1e6): the fit absorbs rounding of the
# angles, formed at a lower precision than the subject's.
NEAR_BASE_RTOL = 1e-3


def base_alternative(
    field: str,
    declared: float,
    value: float,
    solved: bool = True,
    width: int | None = None,
    compared_in: str = "float64",
) -> Alternative:
    """The base ``value`` (solved for, or one of the catalogue's) named: an exponent stepped
    or spaced wrong over a table of ``width`` (``exponent_factor``), another base, or, solved
    within ``NEAR_BASE_RTOL`` of the declared one, angles formed at a lower precision (in a
    subject compared in ``compared_in``)."""
    if solved and math.isclose(value, declared, rel_tol=NEAR_BASE_RTOL):
        lower = "float32" if compared_in == "float64" else "a 16-bit dtype"
        return Alternative(
            registered(
                "numerics.float64_precision_lost"
                if compared_in == "float64"
                else "numerics.rope_angles_low_precision"
            ),
            f"behaves as {field}={value:.9g} (solved for), {abs(value / declared - 1):.2g} "
            f"from the declared {declared!r}: no base a model is given, the position angles "
            f"carry the rounding of {lower} (frequencies or angles formed, or their cos and "
            f"sin kept, in {lower} in a subject compared in {compared_in}); form them in the "
            "subject's dtype, or declare the step (float32_steps, SPEC.md §2.3, §10.12)",
            conventions={field: value},
        )
    rtol = EXPONENT_RTOL if compared_in == "float64" else LOWER_EXPONENT_RTOL
    k = exponent_factor(declared, value, width, rtol)
    if k is not None:
        return Alternative(
            registered("positional.frequency_wrong"),
            exponent_message(declared, value, k),
            conventions={field: value},
        )
    how = " (solved for: the value under which the oracle comes closest to the output)"
    return Alternative(
        registered("positional.base_wrong"),
        f"behaves as {field}={value:.6g}{how if solved else ''}, but the adapter declares "
        f"{field}={declared!r}",
        conventions={field: value},
    )


def positional_base_hypotheses(
    component: str,
    config: Any,
    conventions: Any,
    evaluate: Evaluate,
    test: np.ndarray,
    compared_in: str = "float64",
) -> Iterator[Alternative]:
    """The positional base solved for in a component whose oracle builds a sinusoidal table
    or rotates, when its record does not list ``pe_base`` (those get
    ``hypotheses_solved.solved_hypotheses``)."""
    if "pe_base" in record(component).fields:
        return
    if not (reaches(component, "sinusoidal_pe") or reaches(component, "rope")):
        return
    declared = float(conventions.pe_base)

    def make(value: float) -> Alternative:
        return Alternative("", "", conventions={"pe_base": value})

    value = solve_log(make, evaluate, test, LOG_RANGES["pe_base"])
    if value is None or math.isclose(value, declared, rel_tol=1e-6):
        return
    width = table_width(component, config)
    yield base_alternative("pe_base", declared, value, width=width, compared_in=compared_in)


# (function of the even member, function of the odd member) of each pair, besides (sin, cos)
_PAIR_FUNCTIONS = {
    ("sin", "sin"): "positional.pair_function_repeated",
    ("cos", "cos"): "positional.pair_function_repeated",
    ("cos", "sin"): "positional.sin_cos_swapped",
}


def _sinusoidal_pe_with(even: str, odd: str) -> Callable[..., np.ndarray]:
    """§2.1 with ``even`` and ``odd`` (np.sin or np.cos by name) on the members of a pair."""
    functions = {"sin": np.sin, "cos": np.cos}

    def sinusoidal_pe(
        length: int,
        d_model: int,
        *,
        base: float = 10000.0,
        layout: str = "interleaved",
        max_len: int | None = None,
    ) -> np.ndarray:
        table = oracle.sinusoidal_pe(length, d_model, base=base, layout=layout, max_len=max_len)
        angles = np.arange(length, dtype=np.float64)[:, None] * (
            base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)
        )
        first, second = functions[even](angles), functions[odd](angles)
        if layout == "interleaved":
            table[:, 0::2], table[:, 1::2] = first, second
        else:
            table[:, : d_model // 2], table[:, d_model // 2 :] = first, second
        return table

    return sinusoidal_pe


def _sinusoidal_pe_rule(
    exponent: Callable[[np.ndarray, int], np.ndarray], offset: int = 0
) -> Callable[..., np.ndarray]:
    """§2.1 with column j of the table (in interleaved order: sine at even j, cosine at odd j)
    turning at base^(-exponent(j, d)) (the spec's: 2 floor(j / 2) / d) at positions
    p + ``offset``; the concatenated layout then moves the sines to the first half."""

    def sinusoidal_pe(
        length: int,
        d_model: int,
        *,
        base: float = 10000.0,
        layout: str = "interleaved",
        max_len: int | None = None,
    ) -> np.ndarray:
        oracle.sinusoidal_pe(length, d_model, base=base, layout=layout, max_len=max_len)  # checks
        j = np.arange(d_model)
        positions = np.arange(length, dtype=np.float64)[:, None] + offset  # (L, 1)
        angles = positions * base ** (-exponent(j, d_model))  # (L, d)
        table = np.where(j % 2 == 0, np.sin(angles), np.cos(angles))
        if layout == "concatenated":
            table = np.concatenate([table[:, 0::2], table[:, 1::2]], axis=1)
        return table

    return sinusoidal_pe


def _spec_exponent(j: np.ndarray, d: int) -> np.ndarray:
    return 2 * (j // 2) / d


# Exponent rules of the sinusoidal table besides the spec's 2 floor(j/2) / d, each a one-line
# slip in the code that builds it: (rule, words). A rule that is the spec's at another base
# (tensor2tensor's log(base) / (d/2 - 1) step is base^(d / (d - 2))) is the solved base's
# (positional_base_hypotheses), not listed here.
PE_EXPONENT_RULES: tuple[tuple[Callable[[np.ndarray, int], np.ndarray], str], ...] = (
    (
        lambda j, d: j / d,
        "j / d for every feature j instead of 2 floor(j/2) / d per pair (the exponent taken "
        "per feature: each cosine turns at the next pair's frequency, not its sine's)",
    ),
)
# Positions p + k where the table is indexed: a padding offset carried over (fairseq and BART
# number positions from padding_idx + 1 or 2), an index off by one.
PE_TABLE_OFFSETS = (1, 2, -1)


def pe_rule_hypotheses(component: str) -> Iterator[Alternative]:
    """The sinusoidal table built with another exponent rule, or read at positions p + k, in
    every component whose oracle builds the table (a model, a stack or a layer that numbers
    its own positions, where no ``positions`` input can be shifted)."""
    if not reaches(component, "sinusoidal_pe"):
        return
    for rule, words in PE_EXPONENT_RULES:
        yield Alternative(
            registered("positional.frequency_wrong"),
            f"the output is the spec's with the sinusoidal table's frequency exponent {words} "
            "(SPEC.md §2.1)",
            pieces={"sinusoidal_pe": _sinusoidal_pe_rule(rule)},
        )
    for offset in PE_TABLE_OFFSETS:
        yield Alternative(
            registered("positional.position_offset"),
            f"the output is the spec's with the sinusoidal table read at position p "
            f"{offset:+d}: positions are counted from {offset} instead of 0 (an offset such as "
            "BART's and fairseq's padding offset carried into a model that has none, or an "
            "index off by one; SPEC.md §2.1)",
            pieces={"sinusoidal_pe": _sinusoidal_pe_rule(_spec_exponent, offset)},
        )


def _embedded_without(
    stream: int, part: str = "table"
) -> Callable[[], dict[str, Callable[..., np.ndarray]]]:
    """§8.1's ``embed_tokens`` without its sinusoidal table (``part="table"``) or without its
    sqrt(d_model) scale (``part="scale"``) on its ``stream``-th call (0: the source tokens,
    1: the target's), built anew for each evaluation (it counts its calls)."""

    def pieces() -> dict[str, Callable[..., np.ndarray]]:
        calls = [0]

        def embed_tokens(ids: Any, weight: Any, config: Any, conventions: Any) -> np.ndarray:
            calls[0] += 1
            if calls[0] - 1 != stream:
                return oracle.embed_tokens(ids, weight, config, conventions)
            if part == "scale":
                unscaled = dataclasses.replace(conventions, embedding_scale="none")
                return oracle.embed_tokens(ids, weight, config, unscaled)
            scale, _ = oracle.embedding_scale(config.d_model, conventions)
            return oracle.embedding(ids, weight, scale=scale)

        return {"embed_tokens": embed_tokens}

    return pieces


def pe_stream_hypotheses(component: str) -> Iterator[Alternative]:
    """The sinusoidal table added to one stream of an encoder-decoder and not the other
    (the target's positional encoding forgotten in ``decode``, or the source's in
    ``encode``), wherever the oracle embeds tokens with the table (§8.1)."""
    if not reaches(component, "embed_tokens"):
        return
    for stream, tokens in enumerate(("source", "target")):
        yield Alternative(
            registered("positional.positions_ignored"),
            f"the output is the spec's with no positional encoding on the {tokens} tokens (the "
            f"other stream has it): the {tokens} embeddings carry no position, so that stream "
            "is a bag of tokens to attention (SPEC.md §8.1, §2.1)",
            pieces=_embedded_without(stream),
        )


def embedding_scale_stream_hypotheses(component: str, conventions: Any) -> Iterator[Alternative]:
    """The sqrt(d_model) embedding scale left off one stream of an encoder-decoder (the
    ``embed_scale`` of the source or the target forgotten), where the declared conventions
    scale the embeddings (§1.2, §8.1)."""
    if not reaches(component, "embed_tokens"):
        return
    if getattr(conventions, "embedding_scale", None) != "emb":
        return
    for stream, tokens in enumerate(("source", "target")):
        yield Alternative(
            convention_code("embedding_scale", "none"),
            f"the output is the spec's with the {tokens} embeddings not multiplied by "
            "sqrt(d_model) (the other stream is): the token vectors of that stream are "
            "sqrt(d_model) times too small beside the positional table (SPEC.md §1.2, §8.1)",
            pieces=_embedded_without(stream, "scale"),
        )


def pe_function_hypotheses(component: str) -> Iterator[Alternative]:
    """The sinusoidal table with sine on both members of a pair, cosine on both, or the two
    swapped, in every component whose oracle builds the table; then its exponent rule and
    position offset (``pe_rule_hypotheses``)."""
    if not reaches(component, "sinusoidal_pe"):
        return
    yield from pe_stream_hypotheses(component)
    yield from pe_rule_hypotheses(component)
    for (even, odd), code in _PAIR_FUNCTIONS.items():
        consequence = (
            "the pair is no longer a rotation of one angle, so the encoding of p + k is not a "
            "fixed linear map of p's"
            if even == odd
            else "each pair's two members are exchanged"
        )
        yield Alternative(
            registered(code),
            f"the output is the spec's with the sinusoidal table holding {even} on the first "
            f"member of each pair and {odd} on the second (PE[p, 2i] = {even}, PE[p, 2i+1] = "
            f"{odd}; the spec: sin, cos): {consequence} (SPEC.md §2.1, §2.2)",
            pieces={"sinusoidal_pe": _sinusoidal_pe_with(even, odd)},
        )


# ------------------------------------------------------------------ the FFN's activation


def _sigmoid_scaled(a: float) -> Callable[[np.ndarray], np.ndarray]:
    def act(x: np.ndarray) -> np.ndarray:  # x * sigmoid(a x), written to not overflow
        x = np.asarray(x, dtype=np.float64)
        return x * 0.5 * (1.0 + np.tanh(0.5 * a * x))

    return act


def _gelu_tanh_with(c: float) -> Callable[[np.ndarray], np.ndarray]:
    def act(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + c * x**3)))

    return act


def _gelu_tanh_factor(k: float) -> Callable[[np.ndarray], np.ndarray]:
    def act(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return 0.5 * x * (1.0 + np.tanh(k * (x + 0.044715 * x**3)))

    return act


def _relu_power(p: float) -> Callable[[np.ndarray], np.ndarray]:
    def act(x: np.ndarray) -> np.ndarray:
        return np.maximum(np.asarray(x, dtype=np.float64), 0.0) ** p

    return act


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_erf_scaled(a: float) -> Callable[[np.ndarray], np.ndarray]:
    def act(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return 0.5 * x * (1.0 + _ERF(a * x))

    return act


def _named_erf(a: float) -> str:
    known = {0.5: "erf(x / 2)", 1.0: "erf(x)", 1.0 / math.sqrt(math.pi): "erf(x / sqrt(pi))"}
    name = next((n for v, n in known.items() if math.isclose(a, v, rel_tol=2e-3)), "")
    return (
        f"0.5 x (1 + erf({a:.4g} x))"
        + (f" ({name})" if name else "")
        + f", the erf GELU with its argument scaled by {a:.4g} where exact GELU's is "
        f"1/sqrt(2) = {1 / math.sqrt(2):.4g}"
    )


def _named_sigmoid(a: float) -> str:
    known = {1.0: "SiLU / swish", 1.702: "QuickGELU, CLIP's approximation of GELU"}
    name = next((n for v, n in known.items() if math.isclose(a, v, rel_tol=2e-3)), "")
    return f"x * sigmoid({a:.4g} x)" + (f" ({name})" if name else "")


def _named_tanh(c: float) -> str:
    return (
        f"0.5 x (1 + tanh(sqrt(2/pi) (x + {c:.4g} x^3))), the tanh GELU with cubic "
        f"coefficient {c:.4g} (gelu_new's is 0.044715)"
    )


def _named_factor(k: float) -> str:
    return (
        f"0.5 x (1 + tanh({k:.10g} (x + 0.044715 x^3))), the tanh GELU with its factor "
        f"sqrt(2/pi) = {SQRT_2_OVER_PI!r} written as {k:.10g}"
    )


def _named_power(p: float) -> str:
    return f"max(x, 0)^{p:.4g}" + (" (squared ReLU)" if math.isclose(p, 2.0, rel_tol=2e-3) else "")


SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# (family, its log search range, its namer); the ranges hold every member in use (a = 1 and
# 1.702, c = 0.044715, k = sqrt(2/pi), p = 2) with room either side. The factor k: a
# literal with too few digits in its place (Megatron's fused bias-GELU writes 0.79788456,
# 1e-10 off) changes a float64 output by about that much, which only a solved k names.
ACTIVATION_FAMILIES: tuple[tuple[Callable[[float], Any], tuple[float, float], Any], ...] = (
    (_sigmoid_scaled, (math.log(0.05), math.log(50.0)), _named_sigmoid),
    (_gelu_tanh_with, (math.log(1e-4), math.log(20.0)), _named_tanh),
    (_gelu_tanh_factor, (math.log(0.1), math.log(10.0)), _named_factor),
    (_relu_power, (math.log(0.2), math.log(5.0)), _named_power),
    (_gelu_erf_scaled, (math.log(0.1), math.log(10.0)), _named_erf),
)
# The constants of the tanh GELU, which a float64 subject may hold as float32 numbers (an
# exported graph's float attribute): a solved value that is one, within float32's rounding
# of the constant, is the constant held in float32, not another activation.
GELU_CONSTANTS = {_gelu_tanh_with: ("the tanh GELU's cubic coefficient", 0.044715)}
GELU_CONSTANTS[_gelu_tanh_factor] = ("the tanh GELU's factor sqrt(2/pi)", SQRT_2_OVER_PI)


def _plain_ffn_with(act: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """§6.1 with ``act`` in place of the declared activation."""

    def feed_forward(x: Any, params: Any, *, activation: str = "relu") -> np.ndarray:
        return oracle.linear(act(oracle.linear(x, params, "fc1.")), params, "fc2.")

    return feed_forward


def _gated_ffn_with(act: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    """§11.3 with ``act`` in place of the declared gate activation."""

    def gated_feed_forward(x: Any, params: Any, *, activation: str = "silu") -> np.ndarray:
        hidden = act(oracle.linear(x, params, "gate.")) * oracle.linear(x, params, "up.")
        return oracle.linear(hidden, params, "down.")

    return gated_feed_forward


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


# Elementwise functions a port puts in an FFN's activation or gate in place of the declared
# one, beside the families solved for (x * sigmoid(a x), the tanh GELU, max(x, 0)^p): the
# gate without its x (SiLU's sigmoid alone), tanh, no activation at all, softplus, Mish,
# ELU, hard-swish, ReLU6 and ReLU (torch.nn's names). Each fits only where its output is the
# implementation's, so the list may be long; the declared activation and the convention
# catalogue's alternatives are tried before it (explain._convention_alternatives).
FIXED_ACTIVATIONS: tuple[tuple[str, Callable[[np.ndarray], np.ndarray]], ...] = (
    ("sigmoid(x) (SiLU's gate without its x)", lambda x: 0.5 * (1.0 + np.tanh(0.5 * x))),
    ("tanh(x)", np.tanh),
    ("the identity (no activation)", lambda x: x),
    ("softplus, log(1 + exp(x))", _softplus),
    ("Mish, x tanh(softplus(x))", lambda x: x * np.tanh(_softplus(x))),
    ("ELU, x for x > 0 else exp(x) - 1", lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0)))),
    ("hard-swish, x relu6(x + 3) / 6", lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0),
    ("ReLU6, min(max(x, 0), 6)", lambda x: np.clip(x, 0.0, 6.0)),
    ("max(x, 0) (ReLU; a ReGLU gate)", lambda x: np.maximum(x, 0.0)),
)


def fixed_activation_hypotheses(component: str) -> Iterator[Alternative]:
    """Each of ``FIXED_ACTIVATIONS`` in place of the plain FFN's activation and of the gated
    FFN's gate activation, in every component whose oracle runs one (the declared function
    itself is the spec there, never evidence: ``alternatives.fits``)."""
    for piece, make_ffn, where in (
        ("feed_forward", _plain_ffn_with, "the FFN's activation (SPEC.md §6.1)"),
        ("gated_feed_forward", _gated_ffn_with, "the gated FFN's gate activation (SPEC.md §11.3)"),
    ):
        if not reaches(component, piece):
            continue
        for words, act in FIXED_ACTIVATIONS:
            yield Alternative(
                registered("ffn.activation_wrong"),
                f"the output is the spec's with {where} replaced by {words}: the activation "
                "is none of the declared ones",
                pieces={piece: make_ffn(lambda x, act=act: act(np.asarray(x, dtype=np.float64)))},
            )


def _activated_after_output(x: Any, params: Any, *, activation: str = "relu") -> np.ndarray:
    """§6.1 with the activation after the output projection: act(fc2(fc1(x)))."""
    hidden = oracle.linear(oracle.linear(x, params, "fc1."), params, "fc2.")
    return oracle.ACTIVATIONS[activation](hidden)


def activation_place_hypotheses(component: str) -> Iterator[Alternative]:
    """The declared activation applied after the FFN's output projection instead of between
    its two projections, in every component whose oracle runs the plain FFN."""
    if not reaches(component, "feed_forward"):
        return
    yield Alternative(
        registered("ffn.activation_misplaced"),
        "the output is the spec's with the FFN's activation applied after its output "
        "projection, act(fc2(fc1(x))), instead of between the two, fc2(act(fc1(x))) (a "
        "misplaced parenthesis; SPEC.md §6.1)",
        pieces={"feed_forward": _activated_after_output},
    )


def activation_family_hypotheses(
    component: str, evaluate: Evaluate, test: np.ndarray
) -> Iterator[Alternative]:
    """Each activation family solved for in the plain FFN and in the gated FFN's gate of
    every component whose oracle runs one, named by its fitted member, the family that
    comes closest to ``test`` first: near the declared activation several families fit
    within a float64 bound (a tanh GELU's factor 1e-10 off is matched by a cubic
    coefficient 1e-4 off at small inputs), and the message names the closest."""
    for piece, make_ffn, where in (
        ("feed_forward", _plain_ffn_with, "the FFN's activation (SPEC.md §6.1)"),
        ("gated_feed_forward", _gated_ffn_with, "the gated FFN's gate activation (SPEC.md §11.3)"),
    ):
        if not reaches(component, piece):
            continue
        solved: list[tuple[float, Alternative]] = []
        for family, log_range, named in ACTIVATION_FAMILIES:

            def make(
                value: float, family: Any = family, make_ffn: Any = make_ffn, piece: str = piece
            ) -> Alternative:
                return Alternative("", "", pieces={piece: make_ffn(family(value))})

            # Always refined: a member near the declared activation (QuickGELU near exact
            # GELU) has no grid point closer to the output than the spec itself is; the
            # per-subject memo (once_per_subject) bounds the cost instead.
            value = solve_log(make, evaluate, test, log_range)
            if value is None:
                continue
            pieces = {piece: make_ffn(family(value))}
            constant = GELU_CONSTANTS.get(family)
            if constant is not None and held_in_float32(constant[1], value):
                found = float32_constant(constant[0], constant[1], value, pieces=pieces)
            else:
                found = Alternative(
                    registered("ffn.activation_wrong"),
                    f"the output is the spec's with {where} replaced by {named(value)} (solved "
                    "for among parameterised families: x * sigmoid(a x), the tanh GELU with a "
                    "fitted cubic coefficient or factor, max(x, 0)^p, 0.5 x (1 + erf(a x))): "
                    "the activation is none "
                    "of the declared ones",
                    pieces=pieces,
                )
            try:
                distance = max_distance(test, evaluate(found))
            except (ValueError, KeyError, IndexError, FloatingPointError):
                continue
            solved.append((distance, found))
        yield from (found for _, found in sorted(solved, key=lambda pair: pair[0]))


# ------------------------------------------------------- the ViT's patches and class token


def patch_kernel_hypotheses(params: Any) -> Iterator[Alternative]:
    """The patch kernel (D, C, p, p) applied with its rows and columns swapped, or to the
    image's channels in another order."""
    weight = None if not params else params.get("patch_embed.weight")
    if weight is None or np.ndim(weight) != 4 or np.shape(weight)[2] != np.shape(weight)[3]:
        return
    yield Alternative(
        registered("vit.patch_kernel_transposed"),
        "the output is the spec's with the patch kernel transposed within each patch: "
        "weight[d, c, x, y] meets pixel (y, x) (an einsum 'dcqp' for 'dcpq', a kernel "
        "flattened in (c, x, y) order against patches in (c, y, x); SPEC.md §9.1)",
        params={**params, "patch_embed.weight": np.swapaxes(np.asarray(weight), 2, 3)},
    )
    # the image's channels in another order before the kernel (RGB read as BGR: x.flip(1)),
    # which is the kernel's input channels read in the inverse order; every order of up to four
    channels = np.shape(weight)[1]
    for order in itertools.permutations(range(channels)) if 1 < channels <= 4 else ():
        if order == tuple(range(channels)):
            continue
        reversed_ = order == tuple(reversed(range(channels)))
        yield Alternative(
            registered("vit.channel_order_wrong"),
            f"the output is the spec's with the image's channels read in the order {order}"
            f"{' (reversed: RGB read as BGR)' if reversed_ else ''} before the patch "
            "projection: each kernel channel meets another colour (SPEC.md §9.1)",
            params={**params, "patch_embed.weight": np.asarray(weight)[:, np.argsort(order)]},
        )


def _vit_tokens_class_last(images: Any, params: Any, config: Any, conventions: Any) -> Any:
    """§9.1-§9.4 with the class token after the patches: [patches, cls] + pos_embed."""
    weight, bias = params["patch_embed.weight"], params["patch_embed.bias"]
    x = oracle.patch_embed(images, weight, bias, patch_size=config.patch_size)
    cls = np.broadcast_to(oracle._f64(params["cls_token"]), (x.shape[0], 1, x.shape[2]))
    x = np.concatenate([x, cls], axis=1) + oracle._f64(params["pos_embed"])
    return oracle.encoder(x, oracle.subparams(params, "encoder."), config, conventions=conventions)


def class_token_hypotheses(component: str, conventions: Any = None) -> Iterator[Alternative]:
    """The class token concatenated after the patch tokens, in every component whose oracle
    builds the ViT's tokens: the pooled token 0 is then the first patch; under mean pooling
    (tokens 1..N) the mean counts the class token and leaves out the first patch."""
    if not reaches(component, "vit_tokens"):
        return
    mean = getattr(conventions, "pooling", "cls") == "mean"
    pooled = (
        "the mean over tokens 1..N counts the class token and leaves out the first patch"
        if mean
        else "the pooled token 0 is the first patch, not the class token"
    )
    yield Alternative(
        registered("vit.pooling_mean_with_cls" if mean else "vit.pooling_wrong_token"),
        "the output is the spec's with the class token appended after the patch tokens "
        "(torch.cat((x, cls), dim=1) for torch.cat((cls, x), dim=1)): the position table "
        f"meets the tokens in that order and {pooled} (SPEC.md §9.2, §9.5)",
        pieces={"vit_tokens": _vit_tokens_class_last},
    )


# ------------------------------------------------------------------ one leaf from a sibling

_LEAF_KEY = re.compile(r"^(?P<parent>(?:.*\.)?)(?P<module>[^.]+)\.(?P<leaf>weight|bias)$")


def sibling_leaf_hypotheses(params: Any) -> Iterator[Alternative]:
    """One leaf (the bias, or the weight) of a module read from a sibling module of the same
    parent, in every layer at once: ``q = x W_q + b_k``. Read off the canonical layout."""
    if not params:
        return
    # (parent with layer indices blanked, module, leaf) -> {parent: key}
    leaves: dict[tuple[str, str, str], dict[str, str]] = {}
    for key in params:
        match = _LEAF_KEY.match(key)
        if match:
            shape = re.sub(r"\.\d+\.", ".*.", "." + match["parent"])
            leaves.setdefault((shape, match["module"], match["leaf"]), {})[match["parent"]] = key
    for (shape, reader, leaf), places in leaves.items():
        for (other_shape, source, other_leaf), sources in leaves.items():
            if (other_shape, other_leaf) != (shape, leaf) or source == reader:
                continue
            if set(sources) != set(places) or any(
                np.shape(params[sources[p]]) != np.shape(params[k]) for p, k in places.items()
            ):
                continue
            if all(np.array_equal(params[sources[p]], params[k]) for p, k in places.items()):
                continue  # the same values: no input tells them apart
            out = dict(params)
            for parent, key in places.items():
                out[key] = params[sources[parent]]
            # a pair with a code of its own (the values through the key projection's weight)
            own = _OWN_CODES.get((reader, source)) if leaf == "weight" else None
            yield Alternative(
                registered(own or "params.read_from_other_module"),
                f"the output is the spec's with the {leaf} of {reader!r} read from its sibling "
                f"{source!r} (in every layer): the module computes with its own other "
                f"parameters and {source!r}'s {leaf} (SPEC.md §0.2)",
                params=out,
            )


# ------------------------------------------------------- a grouped fused qkv in the other layout


def _grouped_relaid(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, n_kv: int, stored: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, k, v read from one fused projection stored in layout ``stored`` and read in the
    other. Group-major ``[KV, g + 2, d]`` (each key/value head's g query heads, its key, its
    value: Qwen's and GPT-NeoX's grouped query_key_value) read as part-major ``[g + 2, KV,
    d]`` then transposed, or part-major ``[q | k | v]`` read as group-major. Rows first."""
    rest = q.shape[1:]
    d = k.shape[0] // n_kv
    g = q.shape[0] // (n_kv * d)
    if stored == "group_major":
        fused = np.concatenate(
            [
                q.reshape(n_kv, g, d, *rest),
                k.reshape(n_kv, 1, d, *rest),
                v.reshape(n_kv, 1, d, *rest),
            ],
            axis=1,
        )  # [KV, g + 2, d, ...] in memory
        read = fused.reshape(g + 2, n_kv, d, *rest).swapaxes(0, 1)  # viewed [g + 2, KV, d]
    else:
        read = np.concatenate([q, k, v]).reshape(n_kv, g + 2, d, *rest)  # [q | k | v] as groups
    return (
        read[:, :g].reshape(n_kv * g * d, *rest),
        read[:, g].reshape(n_kv * d, *rest),
        read[:, g + 1].reshape(n_kv * d, *rest),
    )


def grouped_qkv_hypotheses(config: Any, params: Any) -> Iterator[Alternative]:
    """A fused qkv projection of grouped-query attention (fewer key/value heads than query
    heads) stored group-major and read part-major, or the reverse, in every attention of the
    parameters (``<prefix>q.weight``, ``k.weight``, ``v.weight``); with as many key/value
    heads as query heads this is ``hypotheses_more.qkv_hypotheses``' head-major layout."""
    n_heads = int(getattr(config, "n_heads", 0) or 0)
    if not params or not n_heads:
        return
    prefixes = sorted({k[: -len("q.weight")] for k in params if k.endswith("q.weight")})
    prefixes = [p for p in prefixes if f"{p}k.weight" in params and f"{p}v.weight" in params]
    for stored, words in (
        ("group_major", "group-major [KV, g + 2, d] and read part-major [g + 2, KV, d]"),
        ("part_major", "part-major [q | k | v] and read group-major [KV, g + 2, d]"),
    ):
        out = dict(params)
        for prefix in prefixes:
            q_rows, k_rows = (
                np.shape(params[f"{prefix}q.weight"])[0],
                np.shape(params[f"{prefix}k.weight"])[0],
            )
            d = q_rows // n_heads
            if not d or q_rows % n_heads or k_rows % d or k_rows // d >= n_heads:
                return  # not grouped-query attention
            n_kv = k_rows // d
            for leaf in ("weight", "bias"):
                keys = [f"{prefix}{x}.{leaf}" for x in "qkv"]
                if not all(key in params for key in keys):
                    continue
                parts = [np.asarray(params[key], dtype=np.float64) for key in keys]
                for key, relaid in zip(keys, _grouped_relaid(*parts, n_kv, stored), strict=True):
                    out[key] = relaid
        if not prefixes:
            return
        yield Alternative(
            registered("attention.qkv_order_wrong"),
            f"the output is the spec's with the fused qkv projection of grouped-query attention "
            f"stored {words}: each query group takes its queries, key and value from the wrong "
            "rows of the fused weight (SPEC.md §3.4, §11.2, §0.2)",
            params=out,
        )
