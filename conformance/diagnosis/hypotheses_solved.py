"""Hypotheses by class rather than by example: where the rotary encoding is applied, and the
parameterised families that no list of candidate values covers, solved numerically.

- ``rope.applied_to_wrong_tensors``: RoPE (SPEC.md §2.3) rotates the queries and the keys of
  causal self-attention (§11.1); an implementation that rotates any other non-empty subset
  of the queries, keys and values (q only, k only, v only, q and v, k and v, all three).
  It applies to every component whose oracle runs the rotation
  (``tck.reference.variants.reaches(component, "rope_rows")``) under ``positions='rope'``.
- ``rope.rotation_inverted``: every rotation by -theta instead of theta (the sign of sin
  flipped: ``x * cos - rotate_half(x) * sin``), in every component whose oracle runs RoPE.
- ``rope.not_norm_preserving``: rotate_half with its minus sign lost (``[x2, x1]``) or
  doubled (``[-x2, -x1]``), or the cos (or sin) table gathered by the token's index in the
  call while the other is gathered at its position id, in every component whose oracle
  runs RoPE: no rotation at all.
- A convention field with a continuum of values (the catalogue's ``NUMERIC`` fields: an eps,
  a RoPE or sinusoidal base): the value is solved for by a one-dimensional search on a log
  scale, so a base of 1e6 or 123456 is named as well as the three usual ones; its code is
  the field's (``layer_norm.eps_wrong``, ``positional.base_wrong``).
- The attention scale (§3.1): the scores multiplied by ``c / sqrt(d_k)`` for a solved ``c``,
  in every component that runs scaled dot-product attention (causal self-attention, blocks
  and whole models as well as ``attention`` and ``mha``): ``attention.scale_missing`` when
  ``c = sqrt(d_k)``, ``attention.scale_inverted`` when ``c = d_k`` (multiplied by sqrt(d_k)
  instead of divided), ``attention.scale_wrong`` otherwise; and the scale applied to the
  query projection's input, its bias unscaled (``attention.scale_wrong``); the scale applied
  to the weights after the softmax, the scores unscaled (``attention.scale_missing``).

- A norm over the wrong axes (``layer_norm.positions_interact``): LayerNorm or RMSNorm
  statistics over the last two axes, (sequence, features), as ``nn.LayerNorm([L, D])`` or
  ``F.layer_norm(x, x.shape[-2:])`` compute them, in every component whose oracle runs that
  norm; positions then share statistics (in a decoder, the future leaks through them).
- RoPE's inverse frequencies rounded to float16 or bfloat16 before the angles are formed
  (``numerics.rope_angles_low_precision``), in every component whose oracle runs RoPE.
- A norm with the other norm's statistics: LayerNorm without its mean subtraction
  (``layer_norm.not_centred``; or without it in the numerator alone, the deviation still
  about the mean), RMSNorm with one (``layer_norm.rms_wrong_statistics``), in every
  component whose oracle runs that norm.
- RoPE's angles rounded to float16 or bfloat16 before their cosine or sine is taken, or its
  position ids rounded before the angles are formed (``numerics.rope_angles_low_precision``),
  in any subject.
- An eps added to the softmax's denominator (``attention.weights_not_normalized``), solved
  for, in every component whose oracle runs the attention core.
- The dtype of a table (``numerics.table_low_precision``): the sinusoidal table (§2.1) or
  RoPE's cos/sin tables (§2.3) computed in float64 and stored in float16 or bfloat16, in a
  subject compared in float32 or float64 (float32 tables in a float64 subject are the
  precision retry's, ``numerics.float64_precision_lost``).

- A constant factor on the logits (``model.logits_scaled``), in every component whose output
  is logits: the factor is the least-squares ratio of the output to the spec's, named where
  it is a power of d_model (a tied head divided by d_model where sqrt(d_model) is meant).

Each is an ``Alternative`` (``tck.conformance.diagnosis.alternatives``) judged like any other: a
solved value is evidence only if the oracle under it reproduces the output within the failed
comparison's bound and differs from the spec's by more than that bound. A solved value within
float32's rounding of the declared one is not a wrong value but the right one held in float32
(an ONNX node's float attribute: LayerNormalization's epsilon, a fused MatMul's alpha; a
float32 tensor in a float64 build): ``numerics.float64_precision_lost``, naming the constant.
"""

from __future__ import annotations

import itertools
import math
import re
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from tck.reference import oracle, record
from tck.reference.catalogue import NUMERIC, convention_code
from tck.reference.codes import code as registered
from tck.reference.variants import reaches

from .alternatives import Alternative, broadcast_keep
from .hypotheses_layout import _scores
from .position_measured import POSITION_TABLE
from .rope_measured import rope_on_one_side

Evaluate = Callable[[Alternative], np.ndarray]

# The rotation targets tried: every non-empty subset of (q, k, v) but the spec's (q, k).
ROPE_TARGETS: tuple[tuple[str, ...], ...] = tuple(
    subset
    for size in (1, 2, 3)
    for subset in itertools.combinations("qkv", size)
    if subset != ("q", "k")
)
_TENSOR_WORDS = {"q": "queries", "k": "keys", "v": "values"}

# Search ranges, natural log of the value: eps from 1e-14 to 1; a positional base from 10 to
# 1e9 (RoPE bases in use run from 1e4 to 5e5 and 1e6; anything in between is as plausible);
# the factor on the attention scale from 1e-3 to 1e3 (sqrt(d_k) for d_k up to 1e6).
LOG_RANGES: dict[str, tuple[float, float]] = {
    "eps": (math.log(1e-14), 0.0),
    "pe_base": (math.log(10.0), math.log(1e9)),
    "scale": (math.log(1e-3), math.log(1e3)),
    "denominator_eps": (math.log(1e-12), math.log(1.0)),
}
GRID_POINTS = 31  # coarse grid, then a golden-section refinement around its best point
# 0.618 ** 60 of a bracket two grid steps wide (1.2 in log for a base): ~4e-13 relative, so
# that a solved value reproduces an output within a float64 bound
REFINE_STEPS = 60
# Searches per check (hypothesis explains every failing example it shrinks through): each
# costs about GRID_POINTS + REFINE_STEPS oracle calls per family.
SOLVED_SEARCHES = 2
# A solved value this close to the declared one, relatively, is the declared value rounded to
# float32: one rounding is at most float32's unit roundoff 2**-24 (Higham, Accuracy and
# Stability of Numerical Algorithms, §2.1); a constant computed in float32 (1/sqrt(d_k) as a
# reciprocal of a root) carries two or three. Four allows those and the search's own 4e-13.
FLOAT32_CONSTANT_RTOL = 4 * 2.0**-24
_searches: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def searches_left(owner: Any) -> bool:
    """Count one search for ``owner`` (a check's harness); False once it has had its share."""
    used = _searches.get(owner, 0)
    _searches[owner] = used + 1
    return used < SOLVED_SEARCHES


def _causal_self_attention_rotating(
    targets: tuple[str, ...], turned_back: str = "", mixed: tuple[str, str] | None = None
) -> Callable[..., np.ndarray]:
    """§11.1 with RoPE applied to ``targets`` (of q, k, v) instead of to q and k, the one
    named by ``turned_back`` rotated the other way (by -theta); ``mixed`` = (a, b): a's
    rotation takes its rotate_half term from b, ``a cos + rotate_half(b) sin``."""

    def causal_self_attention(
        x: Any,
        params: Any,
        *,
        n_heads: int,
        n_kv_heads: int | None = None,
        key_padding: Any = None,
        positions: Any = None,
        causal_keep: Any = None,
        key_positions: Any = None,
        conventions: Any = None,
    ) -> np.ndarray:
        x = oracle._f64(x)
        b, length, _ = x.shape
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads={n_kv_heads} does not divide n_heads={n_heads}")
        heads = {
            "q": oracle.split_heads(oracle.linear(x, params, "q."), n_heads),
            "k": oracle.split_heads(oracle.linear(x, params, "k."), n_kv_heads),
            "v": oracle.split_heads(oracle.linear(x, params, "v."), n_kv_heads),
        }
        pos = oracle.position_ids(positions, b, length)
        at = (
            {"k": oracle.position_ids(key_positions, b, length)}
            if key_positions is not None
            else {}
        )
        # §2.6: the declared frequency scaling, as the spec's own §11.1 applies it
        omega = oracle.rope_frequencies_of(heads["q"].shape[-1], conventions)
        plain = dict(heads)

        def turned(x: np.ndarray, name: str, sign: int) -> np.ndarray:
            angle = sign * np.asarray(at.get(name, pos))
            return oracle.rope_rows(x, angle, layout=conventions.rope_layout, frequencies=omega)

        for name in targets:
            sign = -1 if name == turned_back else 1
            heads[name] = turned(plain[name], name, sign)
        if mixed is not None:  # x cos = (R x + R' x) / 2, rotate_half(y) sin = (R y - R' y) / 2
            name, other = mixed
            if plain[name].shape != plain[other].shape:
                raise ValueError("the two tensors have different head counts")
            heads[name] = (
                turned(plain[name], name, 1)
                + turned(plain[name], name, -1)
                + turned(plain[other], name, 1)
                - turned(plain[other], name, -1)
            ) / 2
        rep = n_heads // n_kv_heads
        k, v = oracle.repeat_kv(heads["k"], rep), oracle.repeat_kv(heads["v"], rep)
        if causal_keep is None:  # §4.3, §4.5: the causal triangle, cut to the sliding window
            keep = oracle.causal_keep_mask(length, length)
            if conventions.sliding_window is not None:
                keep = keep & oracle.sliding_window_keep(length, length, conventions.sliding_window)
        keep = np.asarray(keep if causal_keep is None else causal_keep)
        if key_padding is not None:  # as the oracle's causal_self_attention combines them
            keep = oracle.combine_keep_masks(
                length, length, key_padding=key_padding, attn_mask=keep
            )
        out = oracle.scaled_dot_product_attention(
            heads["q"], k, v, keep, fully_masked_rows=conventions.fully_masked_rows
        )
        return oracle.linear(oracle.merge_heads(out), params, "o.")

    return causal_self_attention


def rope_target_hypotheses(component: str, conventions: Any) -> Iterator[Alternative]:
    """RoPE applied to the queries only, the keys only, or to the values as well."""
    if getattr(conventions, "positions", None) != "rope" or not reaches(component, "rope_rows"):
        return
    for targets in ROPE_TARGETS:
        rotated = " and ".join(_TENSOR_WORDS[t] for t in targets)
        missed = [_TENSOR_WORDS[t] for t in "qk" if t not in targets]
        words = f"the {rotated} only" + (
            f" (the {' and '.join(missed)} not rotated)" if missed else " (the values too)"
        )
        yield Alternative(
            registered("rope.applied_to_wrong_tensors"),
            f"the output is the spec's with the rotary encoding applied to {words}: "
            "RoPE rotates q and k, never v, so that the score q_i . k_j depends on i - j "
            "(SPEC.md §2.3, §11.1)",
            pieces={"causal_self_attention": _causal_self_attention_rotating(targets)},
        )


def rope_tensors_mixed_hypotheses(component: str, conventions: Any) -> Iterator[Alternative]:
    """One tensor's rotation taking its rotate_half (sin) term from the other: ``k_embed =
    k * cos + rotate_half(q) * sin`` (the q_embed line copied with one q left in), or the
    queries' from the keys, where queries and keys have as many heads."""
    if getattr(conventions, "positions", None) != "rope" or not reaches(component, "rope_rows"):
        return
    for name, other in (("k", "q"), ("q", "k")):
        yield Alternative(
            registered("rope.tensors_mixed"),
            f"the output is the spec's with the {_TENSOR_WORDS[name]} rotated as "
            f"{name} * cos + rotate_half({other}) * sin: their sin term is computed from the "
            f"{_TENSOR_WORDS[other]}, so the {_TENSOR_WORDS[other]}' content leaks into the "
            f"{_TENSOR_WORDS[name]} (SPEC.md §2.3, §11.1)",
            pieces={
                "causal_self_attention": _causal_self_attention_rotating(
                    ("q", "k"), mixed=(name, other)
                )
            },
        )


def rope_one_side_turned_back_hypotheses(component: str, conventions: Any) -> Iterator[Alternative]:
    """RoPE turned the other way on the queries alone or the keys alone (a complex rotation
    multiplied by ``freqs_cis.conj()`` on one side): the score then depends on the sum of
    the two positions, not on their difference."""
    if getattr(conventions, "positions", None) != "rope" or not reaches(component, "rope_rows"):
        return
    for name in "qk":
        other = _TENSOR_WORDS["k" if name == "q" else "q"]
        yield Alternative(
            registered("rope.rotation_inverted"),
            f"the output is the spec's with the {_TENSOR_WORDS[name]} rotated by -theta and the "
            f"{other} by +theta (one side's rotation conjugated, or its sin taken with the "
            "wrong sign): the score q_i . k_j depends on i + j instead of i - j, so the "
            "encoding is no longer relative (SPEC.md §2.3, §2.4)",
            pieces={"causal_self_attention": _causal_self_attention_rotating(("q", "k"), name)},
        )


def _rope_turned_back(  # type: ignore[no-untyped-def]
    x, positions=None, *, base: float = 10000.0, layout: str = "interleaved", frequencies=None
):
    """§2.3 with every angle's sign flipped: the rotation at p is the spec's at -p
    (``x * cos - rotate_half(x) * sin``, or sin and cos of -theta)."""
    length = np.shape(x)[-2]
    positions = np.arange(length) if positions is None else np.asarray(positions)
    return oracle.rope(x, -positions, base=base, layout=layout, frequencies=frequencies)


def rope_direction_hypotheses(component: str) -> Iterator[Alternative]:
    """RoPE rotating the other way, in every component whose oracle runs the rotation (where
    the declared conventions do not rotate, the oracle does not call it: the alternative then
    equals the spec and is never evidence)."""
    if not reaches(component, "rope"):
        return
    yield Alternative(
        registered("rope.rotation_inverted"),
        "the output is the spec's with the rotary encoding turned the other way: each pair is "
        "rotated by -theta (x * cos - rotate_half(x) * sin, or sin taken with the wrong "
        "sign), so the score q_i . k_j depends on j - i instead of i - j (SPEC.md §2.3). "
        "Where the attention's output is all that is seen, a table whose cos and sin are "
        "exchanged gives the same scores (a rotation by pi/2 - theta: the constant quarter "
        "turn cancels in q . k); an adapter entry for the rope component tells the two "
        "apart (RoPE(x, 0) = x, SPEC.md §2.4)",
        pieces={"rope": _rope_turned_back},
    )


def _rope_sign_lost(spec_half: int) -> Callable[..., np.ndarray]:
    """§2.3 with rotate_half's negation lost or doubled: ``[x2, x1]`` (``spec_half=1``: the
    first member of each pair gets ``a cos + b sin``, the second the spec's) or
    ``[-x2, -x1]`` (``spec_half=0``: the first the spec's, the second ``b cos - a sin``).
    Each half is the spec's rotation or the one turned back, so it is built from those two."""

    def rope(x, positions=None, **kw):  # type: ignore[no-untyped-def]
        length = np.shape(x)[-2]
        positions = np.arange(length) if positions is None else np.asarray(positions)
        spec = oracle.rope(x, positions, **kw)
        back = oracle.rope(x, -positions, **kw)
        halves = [spec, back] if spec_half == 0 else [back, spec]
        d = spec.shape[-1]
        if kw.get("layout", "interleaved") == "interleaved":
            first, second = slice(0, None, 2), slice(1, None, 2)
        else:
            first, second = slice(0, d // 2), slice(d // 2, None)
        out = np.empty_like(spec)
        out[..., first], out[..., second] = halves[0][..., first], halves[1][..., second]
        return out

    return rope


def rope_sign_lost_hypotheses(component: str) -> Iterator[Alternative]:
    """rotate_half without its minus sign (``cat((x2, x1))``) or with two (``cat((-x2,
    -x1))``): ``x cos + rotate_half(x) sin`` is then no rotation, in every component whose
    oracle runs RoPE; and the same sign lost on the queries alone or the keys alone (one
    line of a rotation written out per side, Meta's ``xk_out_r = xk_r * cos - xk_i * sin``
    with a + for the -), where the oracle rotates both."""
    if not reaches(component, "rope"):
        return
    for spec_half, helper in ((1, "[x2, x1]"), (0, "[-x2, -x1]")):
        yield Alternative(
            registered("rope.not_norm_preserving"),
            f"the output is the spec's with rotate_half returning {helper} instead of "
            "[-x2, x1]: x * cos + rotate_half(x) * sin then gives both members of a pair the "
            "same sign of sin, which is no rotation, so a vector's norm changes with its "
            "position and q_i . k_j is no function of i - j (SPEC.md §2.3, §2.4)",
            pieces={"rope": _rope_sign_lost(spec_half)},
        )
    if not reaches(component, "rope_rows"):
        return
    for (spec_half, member), side in itertools.product(((1, "first"), (0, "second")), (0, 1)):
        rotated, kept = ("queries", "keys") if side == 0 else ("keys", "queries")
        yield Alternative(
            registered("rope.not_norm_preserving"),
            f"the output is the spec's with the {rotated}' rotation giving the {member} member "
            "of each pair the wrong sign of sin (a cos + b sin where a cos - b sin belongs, or "
            f"b cos - a sin for b cos + a sin), the {kept} rotated as declared: the {rotated}' "
            "map is no rotation, so their norm changes with the position and the scores are "
            "no function of i - j (SPEC.md §2.3, §2.4)",
            pieces=rope_on_one_side(_rope_sign_lost(spec_half), side),
        )


def _rope_factor_by_index(by_index: str) -> Callable[..., np.ndarray]:
    """§2.3 with one factor of the rotation, ``cos`` or ``sin``, taken at the token's index
    in the call (rows 0 .. L-1 of the table: ``cos[:seq_len]``) and the other at its
    position id. From the spec's rotations alone: x cos(t) = (R(t) x + R(-t) x) / 2 and
    rotate_half(x) sin(t) = (R(t) x - R(-t) x) / 2."""

    def rope(x, positions=None, **kw):  # type: ignore[no-untyped-def]
        index = np.arange(np.shape(x)[-2])
        positions = index if positions is None else np.asarray(positions)
        at = {"cos": positions, "sin": positions, by_index: np.broadcast_to(index, positions.shape)}
        cos_at, sin_at = at["cos"], at["sin"]
        cos_term = (oracle.rope(x, cos_at, **kw) + oracle.rope(x, -cos_at, **kw)) / 2
        sin_term = (oracle.rope(x, sin_at, **kw) - oracle.rope(x, -sin_at, **kw)) / 2
        return cos_term + sin_term

    return rope


def rope_factor_by_index_hypotheses(component: str) -> Iterator[Alternative]:
    """RoPE's cos (or sin) gathered by the token's index in the call while the other factor
    is gathered at its position ids (``cos = cos[:seq_len]`` beside ``sin =
    sin[position_ids]``): wherever the ids are not 0 .. L-1 (a cached step, left padding,
    long positions) the two factors belong to different angles, cos^2 + sin^2 != 1, and
    the map is no rotation, in every component whose oracle runs RoPE."""
    if not reaches(component, "rope"):
        return
    for by_index in ("cos", "sin"):
        other = "sin" if by_index == "cos" else "cos"
        yield Alternative(
            registered("rope.not_norm_preserving"),
            f"the output is the spec's with RoPE's {by_index} taken at each token's index in "
            f"the call (rows 0 .. L-1 of the table) and its {other} at the token's position "
            "id: where the ids are not 0 .. L-1 the two factors belong to different angles, "
            "so the map is no rotation and a vector's norm changes (SPEC.md §2.3, §2.4)",
            pieces={"rope": _rope_factor_by_index(by_index)},
        )


def _sdpa_scaled_by(factor: float) -> Callable[..., np.ndarray]:
    """§3.1 with the scale multiplied by ``factor`` (the spec's 1/sqrt(d_k) when None)."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        base = 1.0 / math.sqrt(np.shape(q)[-1]) if scale is None else scale
        return oracle.scaled_dot_product_attention(
            q, k, v, keep_mask, scale=base * factor, fully_masked_rows=fully_masked_rows
        )

    return sdpa


def _sdpa_scaled_after_softmax(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
    """§3.1 with the scale applied to the weights after the softmax instead of to the scores:
    ``softmax(q k^T) / sqrt(d_k) @ v``, rows summing to 1/sqrt(d_k)."""
    base = 1.0 / math.sqrt(np.shape(q)[-1]) if scale is None else scale
    out = oracle.scaled_dot_product_attention(
        q, k, v, keep_mask, scale=1.0, fully_masked_rows=fully_masked_rows
    )
    return out * base


def scale_after_softmax_hypotheses(component: str) -> Iterator[Alternative]:
    """The scale moved past the softmax (``softmax(energy) / scaling``, a tutorial's order of
    operations): the scores unscaled and the weights' rows summing to 1/sqrt(d_k)."""
    if not reaches(component, "scaled_dot_product_attention"):
        return
    yield Alternative(
        registered("attention.scale_missing"),
        "the output is the spec's with the scale applied after the softmax: the scores are "
        "not scaled, and the weights are divided by sqrt(d_k) instead (softmax(q k^T) / "
        "sqrt(d_k) for softmax(q k^T / sqrt(d_k))), so each row sums to 1/sqrt(d_k) "
        "(SPEC.md §3.1)",
        pieces={"scaled_dot_product_attention": _sdpa_scaled_after_softmax},
    )


def _sdpa_denominator_plus(eps: float) -> Callable[..., np.ndarray]:
    """§3.1 with ``eps`` added to the softmax's denominator: ``e / (e.sum() + eps)`` for
    ``e = exp(s - max s)`` (masked scores -inf; a row with no key is the declared policy's)."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        spec = oracle.scaled_dot_product_attention(
            q, k, v, keep_mask, scale=scale, fully_masked_rows=fully_masked_rows
        )
        scores = _scores(q, k, scale)
        keep = broadcast_keep(q, k, keep_mask)
        if keep is not None:
            scores = np.where(keep, scores, -np.inf)
        with np.errstate(invalid="ignore"):
            e = np.exp(scores - scores.max(axis=-1, keepdims=True))
            total = e.sum(axis=-1, keepdims=True)
        keyless = ~(total > 0)  # every key hidden: the spec's row stands
        weights = np.where(keyless, 0.0, e / np.where(keyless, 1.0, total + eps))
        return np.where(keyless[..., :1], spec, weights @ np.asarray(v, np.float64))

    return sdpa


def softmax_epsilon_hypotheses(
    component: str, evaluate: Evaluate, test: np.ndarray
) -> Iterator[Alternative]:
    """The eps added to the softmax's denominator (``l + eps`` in a tiled kernel, ``sum + 1e-6``
    written as a guard against rows with no key) solved for, wherever the oracle runs the
    attention core: the weight rows then sum to slightly less than 1 (§3.1)."""
    if not reaches(component, "scaled_dot_product_attention"):
        return

    def make(value: float) -> Alternative:
        return Alternative(
            "", "", pieces={"scaled_dot_product_attention": _sdpa_denominator_plus(value)}
        )

    value = solve_log(make, evaluate, test, LOG_RANGES["denominator_eps"])
    if value is None:
        return
    yield Alternative(
        registered("attention.weights_not_normalized"),
        f"the output is the spec's with {value:.4g} added to the softmax's denominator "
        f"(solved for: e / (sum(e) + {value:.3g}) for e / sum(e)): every weight row sums to "
        "less than 1, by more where the row's largest score stands out least (an eps guard "
        "against rows with no key, written where a where() was meant; SPEC.md §3.1)",
        pieces={"scaled_dot_product_attention": _sdpa_denominator_plus(value)},
    )


def max_distance(test: np.ndarray, gold: np.ndarray) -> float:
    if gold.shape != test.shape:
        return math.inf
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(np.asarray(test, dtype=np.float64) - gold)
    return float(np.max(diff)) if diff.size and np.isfinite(diff).all() else math.inf


def solve_log(
    make: Callable[[float], Alternative],
    evaluate: Evaluate,
    test: np.ndarray,
    log_range: tuple[float, float],
) -> float | None:
    """The value (not its log) in ``exp(log_range)`` whose alternative ``make(value)`` comes
    closest to ``test`` (largest absolute difference), by a grid then golden sections; None
    when no value can be computed."""

    def cost(t: float) -> float:
        try:
            return max_distance(test, evaluate(make(math.exp(t))))
        except (ValueError, KeyError, IndexError, FloatingPointError):
            return math.inf

    lo, hi = log_range
    grid = np.linspace(lo, hi, GRID_POINTS)
    costs = [cost(float(t)) for t in grid]
    best = int(np.argmin(costs))
    if not math.isfinite(costs[best]):
        return None
    a, b = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, len(grid) - 1)])
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = cost(c), cost(d)
    for _ in range(REFINE_STEPS):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = cost(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = cost(d)
    return math.exp(c if fc <= fd else d)


def solved_hypotheses(
    component: str,
    config: Any,
    conventions: Any,
    evaluate: Evaluate,
    test: np.ndarray,
    compared_in: str = "float64",
) -> Iterator[Alternative]:
    """Each numeric convention field of ``component``, and the attention scale where the
    component runs attention, at the value that comes closest to ``test`` (a comparison in
    ``compared_in``)."""
    for field in record(component).fields:
        if field not in NUMERIC or field not in LOG_RANGES:
            continue
        declared = getattr(conventions, field)

        def make(value: float, field: str = field) -> Alternative:
            return Alternative("", "", conventions={field: value})

        value = solve_log(make, evaluate, test, LOG_RANGES[field])
        if value is None or math.isclose(value, declared, rel_tol=1e-9):
            continue
        if math.isclose(value, declared, rel_tol=FLOAT32_CONSTANT_RTOL):
            yield float32_constant(field, declared, value, conventions={field: value})
            continue
        if field == "pe_base":  # another base, or the exponent stepped wrong
            from .hypotheses_fitted import base_alternative, table_width

            width = table_width(component, config)
            yield base_alternative(field, declared, value, width=width, compared_in=compared_in)
            continue
        yield Alternative(
            convention_code(field, value),
            f"behaves as {field}={value:.6g} (solved for: the value under which the oracle "
            f"comes closest to the output), but the adapter declares {field}={declared!r}",
            conventions={field: value},
        )
    if not reaches(component, "scaled_dot_product_attention"):
        return

    def scaled(factor: float) -> Alternative:
        return Alternative("", "", pieces={"scaled_dot_product_attention": _sdpa_scaled_by(factor)})

    factor = solve_log(scaled, evaluate, test, LOG_RANGES["scale"])
    if factor is None or math.isclose(factor, 1.0, rel_tol=1e-9):
        return
    if math.isclose(factor, 1.0, rel_tol=FLOAT32_CONSTANT_RTOL):
        root = math.sqrt(config.d_model // config.n_heads)
        yield float32_constant(
            "the attention scale 1/sqrt(d_k)",
            1.0 / root,
            factor / root,
            pieces={"scaled_dot_product_attention": _sdpa_scaled_by(factor)},
        )
        return
    # c = sqrt(d_k): no scale at all; c = d_k: multiplied by sqrt(d_k) instead of divided.
    # Near one of these the exact value is tried first: a 16-bit comparison's noise moves the
    # solved factor off it, not the bug.
    d_k = config.d_model // config.n_heads
    named = {math.sqrt(d_k): "attention.scale_missing", float(d_k): "attention.scale_inverted"}
    candidates = [(v, c) for v, c in named.items() if math.isclose(factor, v, rel_tol=0.05)]
    code = next(
        (c for value, c in named.items() if math.isclose(factor, value, rel_tol=1e-6)),
        "attention.scale_wrong",
    )
    for value, named_code in [*candidates, (factor, code)]:
        yield Alternative(
            registered(named_code),
            f"the output is the spec's with the attention scores multiplied by {value:.6g} / "
            f"sqrt(d_k) instead of 1 / sqrt(d_k) (solved for; 1/sqrt(d_k) times sqrt(d_k) is "
            "no scale at all, times 1/sqrt(d_k) a division by d_k, times sqrt(d_k / d_model) "
            "the model width's root): SPEC.md §3.1",
            pieces={"scaled_dot_product_attention": _sdpa_scaled_by(value)},
        )


# A stack layer's own query projection (canonical names: ``layers.3.self_attn.q.weight``,
# ``encoder.layers.0.self_attn.q.bias``): the stack's path and the layer's index.
_LAYER_QUERY = re.compile(
    r"^(?P<stack>(?:.+\.)?layers)\.(?P<i>[0-9]+)\.self_attn\.q\.(weight|bias)$"
)
# Layer i's scores times f(i), and what it is: query-key layer scaling (GPT-2's
# ``scale_attn_by_inverse_layer_idx``, Megatron-LM's ``apply_query_key_layer_scaling``)
# divides layer i's scores by its number i + 1, and Megatron's softmax multiplies it back:
# one half of that pair without the other.
LAYER_SCALINGS: tuple[tuple[Callable[[int], float], str], ...] = (
    (
        lambda i: 1.0 / (i + 1),
        "divided by the layer's number (i + 1 for layer i) as well as by sqrt(d_k): query-key "
        "layer scaling whose softmax does not multiply the number back (Megatron-LM's "
        "apply_query_key_layer_scaling with the softmax's scale dropped; GPT-2's "
        "scale_attn_by_inverse_layer_idx where the spec's scale is declared)",
    ),
    (
        lambda i: float(i + 1),
        "multiplied by the layer's number (i + 1 for layer i): query-key layer scaling's "
        "softmax factor applied without its division of the scores",
    ),
)


def layer_scale_hypotheses(params: Any) -> Iterator[Alternative]:
    """Each stack layer's attention scores scaled by a function of its index
    (``LAYER_SCALINGS``), in every stack of two or more layers with queries of their own:
    layer i's query projection (weight and bias) scaled by f(i), which scales its scores
    alike (RoPE rotates the queries linearly). Layer 0 keeps the spec's scale, so the layer
    subjects pass and the stack alone fails."""
    stacks: dict[str, dict[int, list[str]]] = {}
    for name in params or {}:
        found = _LAYER_QUERY.match(name)
        if found:
            stacks.setdefault(found["stack"], {}).setdefault(int(found["i"]), []).append(name)
    if not any(len(layers) > 1 for layers in stacks.values()):
        return
    for factor_of, words in LAYER_SCALINGS:
        changed = dict(params)
        for layers in stacks.values():
            for i, names in layers.items():
                for name in names:
                    changed[name] = np.asarray(params[name], dtype=np.float64) * factor_of(i)
        yield Alternative(
            registered("attention.scale_wrong"),
            f"the output is the spec's with each layer's attention scores {words}: layer 0 "
            "has the spec's scale 1/sqrt(d_k), every later layer another (SPEC.md §3.1)",
            params=changed,
        )


# Every attention's query bias (``q.bias``, ``self_attn.q.bias``, ``layers.2.cross_attn.q.bias``).
_QUERY_BIAS = re.compile(r"^(?:.+\.)?q\.bias$")


def query_bias_unscaled_hypotheses(config: Any, params: Any) -> Iterator[Alternative]:
    """The scale 1/sqrt(d_k) applied to the query projection's input (``q_proj(x * scaling)``
    for ``q_proj(x) * scaling``): the weight's part is scaled, the bias is not, so the
    queries are the spec's with the bias multiplied by sqrt(d_k) (RoPE rotates linearly)."""
    names = [name for name in params or {} if _QUERY_BIAS.match(name)]
    if not names:
        return
    root = math.sqrt(config.d_model // config.n_heads)
    changed = dict(params)
    for name in names:
        changed[name] = np.asarray(params[name], dtype=np.float64) * root
    yield Alternative(
        registered("attention.scale_wrong"),
        "the output is the spec's with the query bias left unscaled: the scale 1/sqrt(d_k) "
        "multiplies the query projection's input (q_proj(x * scaling)) instead of its output "
        "(q_proj(x) * scaling), so the scores are scaled in the weight's part only "
        "(SPEC.md §3.1)",
        params=changed,
    )


def held_in_float32(declared: float, solved: float) -> bool:
    """Whether ``solved`` is ``declared`` held as a float32 number: within float32's rounding
    of it, and a float32 number itself (to the search's precision, 4e-13). A literal with
    too few digits (0.79788456 for sqrt(2/pi), 1e-10 off) is within the rounding but not
    on float32's grid (its nearest float32 is 2.3e-8 away): a wrong value, not a dtype."""
    near = math.isclose(solved, declared, rel_tol=FLOAT32_CONSTANT_RTOL)
    return near and math.isclose(solved, float(np.float32(solved)), rel_tol=1e-10)


def float32_constant(what: str, declared: float, solved: float, **change: Any) -> Alternative:
    """The declared constant ``what`` reproduced at ``solved``, within float32's rounding of
    it: a precision finding rather than a wrong value."""
    return Alternative(
        registered("numerics.float64_precision_lost"),
        f"behaves as {what} = {solved:.9g} (solved for), the declared {declared!r} rounded to "
        f"float32 ({float(np.float32(declared))!r}): the constant is held as a float32 value "
        "in a subject built in float64 (an exported graph's float attribute, a float32 tensor "
        "or buffer); keep it in float64, or declare the step (float32_steps, SPEC.md §10.12)",
        **change,
    )


# The 16-bit dtypes a table may be kept in, and the comparisons in which that shows.
TABLE_DTYPES = ("float16", "bfloat16")
TABLE_COMPARISONS = ("float64", "float32")


def rounded_to(x: Any, dtype: str) -> np.ndarray:
    """``x`` rounded to ``dtype`` (float16, bfloat16, float32) and held as float64; bfloat16
    is float32's upper 16 bits, rounded to nearest even (as torch's .to(torch.bfloat16))."""
    x = np.asarray(x, dtype=np.float64)
    if dtype != "bfloat16":
        return x.astype(dtype).astype(np.float64)
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def _sinusoidal_pe_in(dtype: str) -> Callable[..., np.ndarray]:
    def sinusoidal_pe(length: int, d_model: int, **kw: Any) -> np.ndarray:
        return rounded_to(oracle.sinusoidal_pe(length, d_model, **kw), dtype)

    return sinusoidal_pe


def _rope_with(
    tables: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> Callable[..., np.ndarray]:
    """§2.3 with the cos and sin tables made by ``tables`` from the angles theta (L, d/2)."""

    def rope(  # type: ignore[no-untyped-def]
        x: Any,
        positions: Any = None,
        *,
        base: float = 10000.0,
        layout: str = "interleaved",
        frequencies: Any = None,
    ):
        x = oracle._f64(x)
        length, d = x.shape[-2], x.shape[-1]
        positions = np.arange(length) if positions is None else np.asarray(positions)
        if d % 2 or positions.shape != (length,):
            raise ValueError("not a RoPE call this hypothesis can make")
        omega = (  # (d/2,): §2.6's scaled frequencies where the oracle call gives them
            base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
            if frequencies is None
            else np.asarray(frequencies, dtype=np.float64)
        )
        theta = positions.astype(np.float64)[:, None] * omega  # (L, d/2)
        cos, sin = tables(theta)
        if layout == "interleaved":
            a, b = x[..., 0::2], x[..., 1::2]
        elif layout == "half_split":
            a, b = x[..., : d // 2], x[..., d // 2 :]
        else:
            raise ValueError(f"unknown RoPE layout {layout!r}")
        ra, rb = a * cos - b * sin, a * sin + b * cos
        out = np.empty_like(x)
        if layout == "interleaved":
            out[..., 0::2], out[..., 1::2] = ra, rb
        else:
            out[..., : d // 2], out[..., d // 2 :] = ra, rb
        return out

    return rope


def _rope_in(dtype: str) -> Callable[..., np.ndarray]:
    """§2.3 with the cos and sin tables stored in ``dtype``."""
    return _rope_with(
        lambda theta: (rounded_to(np.cos(theta), dtype), rounded_to(np.sin(theta), dtype))
    )


# Which of the two tables a 16-bit angle feeds (the angles cast before one of cos and sin only
# is a one-line slip as common as before both).
ANGLE_TABLES = ("cos and sin", "cos", "sin")


def _rope_angles_in(dtype: str, which: str) -> Callable[..., np.ndarray]:
    """§2.3 with the angles theta = p * omega rounded to ``dtype`` before ``which`` of the
    cosine and sine is taken (``torch.cos(angles.to(torch.float16))``), that table then held
    in ``dtype`` too."""

    def tables(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        low = rounded_to(theta, dtype)
        cos = rounded_to(np.cos(low), dtype) if "cos" in which else np.cos(theta)
        sin = rounded_to(np.sin(low), dtype) if "sin" in which else np.sin(theta)
        return cos, sin

    return _rope_with(tables)


def _rope_frequencies_in(dtype: str, stepwise: bool) -> Callable[..., np.ndarray]:
    """§2.3 with the inverse frequencies base^(-2i/d) (or §2.6's scaled ones) held in
    ``dtype`` before the angles are formed: rounded once (an ``inv_freq`` computed in float64
    and stored in ``dtype``) or, ``stepwise``, at every step of ``1 / base ** (2i / d)``
    computed in ``dtype`` (``torch.arange(0, d, 2, dtype=torch.bfloat16)``)."""

    def rope(  # type: ignore[no-untyped-def]
        x, positions=None, *, base: float = 10000.0, layout: str = "interleaved", frequencies=None
    ):
        d = np.shape(x)[-1]
        unscaled = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        if frequencies is not None and not np.allclose(frequencies, unscaled, rtol=1e-12):
            omega = rounded_to(frequencies, dtype)  # §2.6's scaled frequencies, stored
        elif stepwise:  # each 16-bit op computed in float32 and rounded (as torch on CPU)
            f32 = np.float32
            exponent = rounded_to(np.arange(0, d, 2, dtype=f32) / f32(d), dtype).astype(f32)
            power = rounded_to(np.power(f32(base), exponent), dtype).astype(f32)
            omega = rounded_to(f32(1.0) / power, dtype)
        else:
            omega = rounded_to(unscaled, dtype)
        return oracle.rope(x, positions, base=base, layout=layout, frequencies=omega)

    return rope


def _rope_positions_in(dtype: str) -> Callable[..., np.ndarray]:
    """§2.3 with the position ids rounded to ``dtype`` before the angles are formed
    (``torch.arange(L, dtype=torch.bfloat16)``): past 256 (bfloat16) or 2048 (float16) a
    position is rounded to its neighbour, which then shares its rotation."""
    exact = _rope_with(lambda theta: (np.cos(theta), np.sin(theta)))

    def rope(x, positions=None, **kw):  # type: ignore[no-untyped-def]
        length = np.shape(x)[-2]
        positions = np.arange(length) if positions is None else np.asarray(positions)
        return exact(x, rounded_to(positions, dtype), **kw)

    return rope


def table_dtype_hypotheses(component: str, compared_in: str) -> Iterator[Alternative]:
    """Each table the component's oracle builds, stored in each 16-bit dtype, in a subject
    compared in float32 or float64 (in a 16-bit subject a 16-bit table is its dtype's own);
    RoPE's inverse frequencies or its angles formed in a 16-bit dtype, in any subject (SPEC.md
    §10.10 forms them in float32 whatever the model's dtype)."""
    tables = (
        ("sinusoidal_pe", _sinusoidal_pe_in, "the sinusoidal position table (SPEC.md §2.1)"),
        ("rope", _rope_in, "RoPE's cos and sin tables (SPEC.md §2.3)"),
    )
    for piece, make, words in tables:
        if compared_in not in TABLE_COMPARISONS or not reaches(component, piece):
            continue
        for dtype in TABLE_DTYPES:
            yield Alternative(
                registered("numerics.table_low_precision"),
                f"the output is the spec's with {words} stored in {dtype} (computed, then "
                f"kept in a {dtype} buffer or built from {dtype} values) in a subject compared "
                f"in {compared_in}: the table's values are off by {dtype}'s rounding; build "
                "and keep it in the model's dtype or better",
                pieces={piece: make(dtype)},
            )
    if not reaches(component, "rope"):
        return
    for dtype, stepwise in itertools.product(TABLE_DTYPES, (True, False)):
        yield Alternative(
            registered("numerics.rope_angles_low_precision"),
            f"the output is the spec's with RoPE's inverse frequencies base^(-2i/d) "
            f"{'computed' if stepwise else 'stored'} in {dtype} before the angles "
            f"p * omega are formed (an inv_freq buffer built or kept in {dtype}): every "
            f"angle is off by {dtype}'s rounding of its frequency, times the position "
            "(SPEC.md §2.3, §10.10)",
            pieces={"rope": _rope_frequencies_in(dtype, stepwise)},
        )
    for dtype in TABLE_DTYPES:
        yield Alternative(
            registered("numerics.rope_angles_low_precision"),
            f"the output is the spec's with RoPE's position ids rounded to {dtype} before the "
            f"angles p * omega are formed (the positions made with dtype={dtype}): past "
            f"{'256' if dtype == 'bfloat16' else '2048'} neighbouring positions share one "
            "rotation, so far tokens get their neighbour's; form positions and angles in "
            "float32 or better (SPEC.md §2.3, §10.10)",
            pieces={"rope": _rope_positions_in(dtype)},
        )
    for dtype, which in itertools.product(TABLE_DTYPES, ANGLE_TABLES):
        yield Alternative(
            registered("numerics.rope_angles_low_precision"),
            f"the output is the spec's with RoPE's angles p * omega rounded to {dtype} "
            f"before the {which} {'are' if which == ANGLE_TABLES[0] else 'is'} taken (the "
            f"angles cast to the model's dtype first): an angle is off by up to half of "
            f"{dtype}'s spacing at its size, so far positions rotate wrongly; form the angles "
            "and their cos and sin in float32, then cast (SPEC.md §2.3, §10.10)",
            pieces={"rope": _rope_angles_in(dtype, which)},
        )


def learned_table_dtype_hypotheses(
    params: Mapping[str, Any] | None, compared_in: str
) -> Iterator[Alternative]:
    """A learned position table (a ViT's ``pos_embed``, a decoder's ``pos_embedding``: the
    parameters ``POSITION_TABLE`` names) rounded to each 16-bit dtype before it is added
    (``pos_embed.half()``, a checkpoint converted through float16), in a subject compared
    in float32 or float64 (SPEC.md §9.3, §10.7)."""
    if compared_in not in TABLE_COMPARISONS or not params:
        return
    for name in sorted(k for k in params if POSITION_TABLE.search(k)):
        for dtype in TABLE_DTYPES:
            yield Alternative(
                registered("numerics.table_low_precision"),
                f"the output is the spec's with the learned position table {name} rounded to "
                f"{dtype} before it is added (cast, or kept in a {dtype} copy) in a subject "
                f"compared in {compared_in}: every position's vector is off by {dtype}'s "
                "rounding; add the table in the model's dtype (SPEC.md §9.3, §10.7)",
                params={**params, name: rounded_to(params[name], dtype)},
            )


# The axes a norm's statistics may wrongly run over, besides the spec's last axis.
# (sequence, features): nn.LayerNorm([L, D]); the sequence alone: mean(dim=1) for dim=-1.
NORM_AXES: tuple[tuple[int, ...], ...] = ((-2, -1), (-2,))
_AXES_WORDS = {
    (-2, -1): "the last 2 axes (sequence and features: nn.LayerNorm([L, D]), "
    "F.layer_norm(x, x.shape[-2:]))",
    (-2,): "the sequence axis (x.mean(dim=1) for dim=-1: each feature normalised over the "
    "positions)",
}


def _layer_norm_over(axes: tuple[int, ...]) -> Callable[..., np.ndarray]:
    """§5.1 with the statistics over ``axes``; the gain and shift still per feature."""

    def layer_norm(  # type: ignore[no-untyped-def]
        x, weight=None, bias=None, *, eps=1e-5, eps_placement="inside_sqrt", variance="biased"
    ):
        x = oracle._f64(x)
        if x.ndim < len(axes) + 1:
            raise ValueError("no such axes")
        n = int(np.prod([x.shape[a] for a in axes]))
        centred = x - x.mean(axis=axes, keepdims=True)
        var = (centred**2).sum(axis=axes, keepdims=True) / (n - (variance == "unbiased"))
        if eps_placement == "inside_sqrt":
            y = centred / np.sqrt(var + eps)
        else:
            y = centred / (np.sqrt(var) + eps)
        y = y if weight is None else y * oracle._f64(weight)
        return y if bias is None else y + oracle._f64(bias)

    return layer_norm


def _rms_norm_over(axes: tuple[int, ...]) -> Callable[..., np.ndarray]:
    """§5.3 with the mean square over ``axes``."""

    def rms_norm(x, weight=None, *, eps=1e-5):  # type: ignore[no-untyped-def]
        x = oracle._f64(x)
        if x.ndim < len(axes) + 1:
            raise ValueError("no such axes")
        y = x / np.sqrt((x**2).mean(axis=axes, keepdims=True) + eps)
        return y if weight is None else y * oracle._f64(weight)

    return rms_norm


def _rms_norm_eps_outside(x: Any, weight: Any = None, *, eps: float = 1e-5) -> np.ndarray:
    """§5.3 with eps added to the root instead of under it: x / (sqrt(mean(x^2)) + eps)."""
    x = oracle._f64(x)
    y = x / (np.sqrt((x**2).mean(axis=-1, keepdims=True)) + eps)
    return y if weight is None else y * oracle._f64(weight)


def _layer_norm_not_centred(
    x: Any,
    weight: Any = None,
    bias: Any = None,
    *,
    eps: float = 1e-5,
    eps_placement: str = "inside_sqrt",
    variance: str = "biased",
) -> np.ndarray:
    """§5.1 without the centring: x / sqrt(mean(x^2) + eps) * weight + bias (the mean
    subtraction lost, the gain and shift kept)."""
    x = oracle._f64(x)
    y = x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    y = y if weight is None else y * oracle._f64(weight)
    return y if bias is None else y + oracle._f64(bias)


def _layer_norm_numerator_not_centred(
    x: Any,
    weight: Any = None,
    bias: Any = None,
    *,
    eps: float = 1e-5,
    eps_placement: str = "inside_sqrt",
    variance: str = "biased",
) -> np.ndarray:
    """§5.1 (under the declared eps placement and variance) with the mean dropped from the
    numerator only: x / sigma for (x - mean) / sigma, sigma still the deviation about the
    mean (``mean = 0`` where ``std = x.std(-1)`` stays). sigma is read off the spec's own
    norm of the rows: (x - mean) / sigma at the row's largest deviation."""
    x = oracle._f64(x)
    deviation = x - x.mean(axis=-1, keepdims=True)
    normed = oracle.layer_norm(x, eps=eps, eps_placement=eps_placement, variance=variance)
    at = np.abs(deviation).argmax(axis=-1)[..., None]
    largest = np.take_along_axis(deviation, at, axis=-1)
    inverse = np.take_along_axis(normed, at, axis=-1) / np.where(largest == 0, 1.0, largest)
    y = x * inverse
    y = y if weight is None else y * oracle._f64(weight)
    return y if bias is None else y + oracle._f64(bias)


def _rms_norm_centred(x: Any, weight: Any = None, *, eps: float = 1e-5) -> np.ndarray:
    """§5.3 with the rows centred first: the variance where the mean square belongs."""
    x = oracle._f64(x)
    centred = x - x.mean(axis=-1, keepdims=True)
    y = centred / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps)
    return y if weight is None else y * oracle._f64(weight)


def norm_kind_hypotheses(component: str) -> Iterator[Alternative]:
    """The statistics of the other norm, in every component whose oracle runs a norm:
    LayerNorm without its mean subtraction (an RMS in LayerNorm's place, gain and shift
    kept), RMSNorm with one (a variance in the mean square's place)."""
    if reaches(component, "layer_norm"):
        yield Alternative(
            registered("layer_norm.not_centred"),
            "the output is the spec's with LayerNorm's mean subtraction dropped: x / "
            "sqrt(mean(x^2) + eps) * weight + bias instead of (x - mean) / sqrt(var + eps) * "
            "weight + bias, so the normalised rows are not centred (SPEC.md §5.1)",
            pieces={"layer_norm": _layer_norm_not_centred},
        )
        yield Alternative(
            registered("layer_norm.not_centred"),
            "the output is the spec's with the mean no longer subtracted in the numerator: "
            "x / sigma * weight + bias for (x - mean) / sigma * weight + bias, sigma still "
            "the deviation about the mean (mean = 0 where std = x.std(-1) stays), so the "
            "normalised rows are not centred (SPEC.md §5.1)",
            pieces={"layer_norm": _layer_norm_numerator_not_centred},
        )
    if reaches(component, "rms_norm"):
        yield Alternative(
            registered("layer_norm.rms_wrong_statistics"),
            "the output is the spec's with RMSNorm's rows centred first: (x - mean) / "
            "sqrt(var + eps) * weight (a LayerNorm without bias) instead of x / "
            "sqrt(mean(x^2) + eps) * weight (SPEC.md §5.3)",
            pieces={"rms_norm": _rms_norm_centred},
        )


def norm_axes_hypotheses(component: str) -> Iterator[Alternative]:
    """LayerNorm and RMSNorm statistics over (sequence, features), or over the sequence
    alone, instead of over the features; RMSNorm's eps outside the square root (LayerNorm's
    placement is the ``eps_placement`` convention field; RMSNorm's oracle has no such
    field, so the piece is replaced); the other norm's statistics
    (``norm_kind_hypotheses``)."""
    yield from norm_kind_hypotheses(component)
    if reaches(component, "rms_norm"):
        yield Alternative(
            registered("layer_norm.eps_outside_sqrt"),
            "the output is the spec's with RMSNorm's eps added outside the square root, "
            "x / (sqrt(mean(x^2)) + eps) instead of x / sqrt(mean(x^2) + eps) (SPEC.md §5.3): "
            "visible where a row's root mean square is near sqrt(eps)",
            pieces={"rms_norm": _rms_norm_eps_outside},
        )
    for piece, make in (("layer_norm", _layer_norm_over), ("rms_norm", _rms_norm_over)):
        if not reaches(component, piece):
            continue
        for axes in NORM_AXES:
            yield Alternative(
                registered("layer_norm.positions_interact"),
                f"the output is the spec's with the {piece} statistics taken over "
                f"{_AXES_WORDS[axes]} instead of over the features of each "
                "position: every position's output depends on the others (in a decoder, on "
                "future tokens; SPEC.md §5.1, §5.3)",
                pieces={piece: make(axes)},
            )


def logits_scale_hypotheses(
    component: str, config: Any, evaluate: Evaluate, test: np.ndarray
) -> Iterator[Alternative]:
    """The spec's logits times the factor that comes closest to ``test`` (least squares over
    the finite positions), wherever the component's output is logits (SPEC.md §8.2)."""
    if not record(component).has("logits"):
        return
    spec = np.asarray(evaluate(Alternative("", "")), dtype=np.float64)
    if spec.shape != test.shape:
        return
    both = np.isfinite(spec) & np.isfinite(test)
    power = float(np.sum(spec[both] ** 2))
    if power == 0.0:
        return
    factor = float(np.sum(spec[both] * test[both]) / power)
    if not math.isfinite(factor) or factor <= 0.0 or math.isclose(factor, 1.0, rel_tol=1e-6):
        return
    d = config.d_model
    powers = {
        1 / d: "1/d_model",
        1 / math.sqrt(d): "1/sqrt(d_model)",
        math.sqrt(d): "sqrt(d_model)",
        float(d): "d_model",
    }
    named = next(
        (f" = {w}" for v, w in powers.items() if math.isclose(factor, v, rel_tol=1e-3)), ""
    )
    yield Alternative(
        registered("model.logits_scaled"),
        f"the output logits are the spec's times {factor:.6g}{named} (solved for: the factor "
        "that brings the spec's logits closest to the output): a constant on the logits, such "
        "as a tied head divided by d_model where sqrt(d_model) is meant, or a scale applied "
        "twice or left out (SPEC.md §8.2, §8.3)",
        after=lambda out, factor=factor: out * factor,
    )
