"""RoPE as a measured family (SPEC.md §2.3, §2.6): the rotation frequencies solved for from
the subject's own output, and the cos/sin table laid out for the other pairing.

- ``fitted_frequency_hypotheses``: the oracle with RoPE's per-pair frequencies
  ``omega_0 .. omega_{d/2-1}`` free (one real number per pair, under the declared pairing and
  then under the other), fitted to the failing output by a coordinate search on a log grid
  and Gauss-Newton refinement. No list of candidate tables is kept: a Llama 3.1 scaling
  multiplied instead of divided, its bands swapped, a base off every list, a pair's
  frequency negated, are all points of the same d/2-dimensional family. The fitted table is
  then classified against the declared one: every frequency times one factor
  (``rope.scaling_linear``, or ``rope.scaling_none`` where the declared scaling is undone),
  a geometric table with another base (``positional.base_wrong``), anything else
  ``positional.frequency_wrong`` with the bands that differ and their ratios to the declared
  and to the unscaled table ``base^(-2i/d)``. Like every solved value, the fit is evidence
  only where it also reproduces a second, independent call
  (``explain.holds_on_second_call``).
- ``table_layout_hypotheses``: the cos/sin table built for one pairing (interleaved:
  ``repeat_interleave(freqs, 2)``; half split: ``cat(freqs, freqs)``) and applied with the
  other (``rotate_half``'s pairs (i, i + d/2), or pairs (2i, 2i + 1)): the two members of a
  pair are turned by different angles, which no frequency table gives; or the cos table
  expanded one way and the sin table the other (GPT-J's ``duplicate_interleave`` on one,
  ``cat((t, t))`` on the other), a channel's cosine and sine then of two frequencies
  (``rope.table_layout_mismatch``).

- ``partial_rotary_hypotheses``: RoPE applied to the first quarter, half or three quarters
  of each head's channels only, the rest passed through (a partial rotary, GPT-NeoX's
  ``rotary_pct``, carried into a model that rotates every channel), with frequencies over
  the rotated width or the whole head's (``positional.frequency_wrong``: the channels left
  out turn at frequency 0).

All replace the oracle's ``rope`` piece, so they are tested on every component whose oracle
runs RoPE (``tck.reference.variants.reaches``): the ``rope`` op, causal self-attention, a
decoder block, a whole causal LM.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tck.reference import oracle
from tck.reference.catalogue import convention_code
from tck.reference.codes import code as registered
from tck.reference.variants import reaches

from .alternatives import Alternative

Evaluate = Callable[[Alternative], np.ndarray]
LAYOUTS = ("interleaved", "half_split")

# The coordinate search: per pair, GRID_POINTS frequencies on a log scale from
# LOWEST_FREQUENCY to pi (above pi a frequency aliases at integer positions: omega and
# omega - 2 pi turn every integer position alike), and 0; SWEEPS passes over the pairs.
GRID_POINTS = 36
LOWEST_FREQUENCY = 1e-6
SWEEPS = 2
# Gauss-Newton refinement: at most this many steps; the Jacobian by central differences of
# this relative step (truncation ~ step^2, rounding ~ 1e-16 / step: both far below what a
# float64 comparison resolves after two or three steps, which converge quadratically).
NEWTON_STEPS = 8
NEWTON_STEP = 1e-6
# A fitted frequency within this relative distance of the declared one is the declared one
# (the fit's own residual); a pair whose frequency the output cannot resolve (turned by less
# than the comparison resolves at every position of the call) keeps the declared value.
SAME_FREQUENCY = 1e-4
# The fit's cost is about pairs x (GRID_POINTS + 1) x SWEEPS oracle calls on the failing input:
# at most 32 pairs (head dimension 64, ~2400 calls) and outputs of at most this many entries
# (the suite's own calls are a few thousand; a real-size checkpoint's full-length call is not
# fitted).
MAX_PAIRS = 32
MAX_OUTPUT_ENTRIES = 200_000


def _rope_with(frequencies: np.ndarray, pairing: str) -> Callable[..., np.ndarray]:
    """§2.3 with the given per-pair ``frequencies`` and ``pairing``, whatever the caller's."""

    def rope(x, positions=None, **_):  # type: ignore[no-untyped-def]
        return oracle.rope(x, positions, layout=pairing, frequencies=frequencies)

    return rope


def _head_dim(evaluate: Evaluate) -> int | None:
    """The last dimension of the vectors the oracle rotates, read off one call."""
    seen: list[int] = []

    def rope(x, positions=None, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(int(np.shape(x)[-1]))
        return oracle.rope(x, positions, **kwargs)

    try:
        evaluate(Alternative("", "", pieces={"rope": rope}))
    except (ValueError, KeyError, IndexError):
        return None
    return seen[0] if seen else None


def _declared_frequencies(d: int, conventions: Any) -> np.ndarray:
    return oracle.rope_frequencies_of(d, conventions)


def fit_frequencies(
    evaluate: Evaluate,
    test: np.ndarray,
    start: np.ndarray,
    pairing: str,
    ignore: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """The per-pair frequencies (d/2,) under ``pairing`` that bring the oracle closest to
    ``test`` (least squares over the finite, judged positions), and the largest absolute
    difference left."""
    test = np.asarray(test, dtype=np.float64)
    judged = np.isfinite(test) if ignore is None else np.isfinite(test) & ~ignore

    def residual(freqs: np.ndarray) -> np.ndarray | None:
        try:
            out = evaluate(Alternative("", "", pieces={"rope": _rope_with(freqs, pairing)}))
        except (ValueError, KeyError, IndexError, FloatingPointError):
            return None
        if out.shape != test.shape:
            return None
        r = np.where(judged, out - test, 0.0)
        return r.ravel() if np.isfinite(r).all() else None

    def cost(freqs: np.ndarray) -> float:
        r = residual(freqs)
        return math.inf if r is None else float(r @ r)

    freqs = np.array(start, dtype=np.float64)
    best = cost(freqs)
    if not math.isfinite(best):
        return freqs, math.inf
    grid = np.concatenate(
        [[0.0], np.exp(np.linspace(math.log(LOWEST_FREQUENCY), math.log(math.pi), GRID_POINTS))]
    )
    for _ in range(SWEEPS):
        for i in range(freqs.size):
            for value in grid:
                trial = freqs.copy()
                trial[i] = value
                c = cost(trial)
                if c < best:
                    best, freqs = c, trial
    for _ in range(NEWTON_STEPS):
        r = residual(freqs)
        if r is None:
            break
        columns = []
        for i in range(freqs.size):
            h = NEWTON_STEP * max(abs(freqs[i]), 1e-3)
            up, down = freqs.copy(), freqs.copy()
            up[i] += h
            down[i] -= h
            ru, rd = residual(up), residual(down)
            if ru is None or rd is None:
                return freqs, math.sqrt(best)
            columns.append((ru - rd) / (2 * h))
        jacobian = np.stack(columns, axis=1)
        step = np.linalg.lstsq(jacobian, -r, rcond=None)[0]
        trial = freqs + step
        c = cost(trial)
        if not c < best:
            break
        best, freqs = c, trial
    out = residual(freqs)
    left = math.inf if out is None else float(np.max(np.abs(out), initial=0.0))
    return freqs, left


def _bands(mask: np.ndarray) -> list[tuple[int, int]]:
    """Runs of True in ``mask`` as (first, last) index pairs."""
    runs: list[tuple[int, int]] = []
    for i, flag in enumerate(mask):
        if flag and runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        elif flag:
            runs.append((i, i))
    return runs


def describe_frequencies(
    fitted: np.ndarray, declared: np.ndarray, unscaled: np.ndarray
) -> tuple[str, str]:
    """The code and words for a fitted frequency table against the declared one."""
    ratio = fitted / declared
    differ = np.abs(ratio - 1.0) > SAME_FREQUENCY
    if ratio[0] != 0 and np.allclose(ratio, ratio[0], rtol=SAME_FREQUENCY):
        factor = float(ratio[0])
        if np.allclose(fitted, unscaled, rtol=SAME_FREQUENCY):
            return registered("rope.scaling_none"), (
                "rotates at the unscaled frequencies base^(-2i/d): the declared frequency "
                "scaling is not applied"
            )
        return registered("rope.scaling_linear"), (
            f"every frequency is the declared one times {factor:.6g} (a linear scaling by "
            f"{1 / factor:.6g} the declared table does not have, or positions multiplied)"
        )
    # A geometric table omega_i = b^(-2i/d) with another base: log omega linear in i, 0 at i=0.
    d = 2 * fitted.size
    if np.all(fitted > 0) and math.isclose(fitted[0], 1.0, rel_tol=SAME_FREQUENCY):
        exponents = np.arange(0, d, 2) / d
        logs = np.log(fitted)
        base = math.exp(-float(logs[1:] @ exponents[1:]) / float(exponents[1:] @ exponents[1:]))
        if np.allclose(fitted, base**-exponents, rtol=SAME_FREQUENCY):
            from .hypotheses_fitted import exponent_factor, exponent_message

            declared_base = math.exp(-math.log(float(unscaled[1])) / float(exponents[1]))
            k = exponent_factor(declared_base, base, d)
            if k is not None:  # the exponent stepped wrong, not another base
                return registered("positional.frequency_wrong"), exponent_message(
                    declared_base, base, k
                )
            return registered("positional.base_wrong"), (
                f"rotates at a geometric table base^(-2i/d) with base {base:.6g}"
            )
    parts = []
    for first, last in _bands(differ):
        span = f"pair {first}" if first == last else f"pairs {first}-{last}"
        to_declared = ratio[first : last + 1]
        to_unscaled = fitted[first : last + 1] / unscaled[first : last + 1]
        parts.append(
            f"{span}: {_range(to_declared)} x the declared frequency, "
            f"{_range(to_unscaled)} x the unscaled base^(-2i/d)"
        )
    return registered("positional.frequency_wrong"), (
        "rotates at frequencies other than the declared table (solved for, pair by pair, from "
        f"the output): {'; '.join(parts)}; the other pairs as declared"
    )


def _range(values: np.ndarray) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:.4g}" if math.isclose(lo, hi, rel_tol=1e-3) else f"{lo:.4g} to {hi:.4g}"


def fitted_frequency_hypotheses(
    component: str,
    conventions: Any,
    evaluate: Evaluate,
    test: np.ndarray,
    ignore: np.ndarray | None = None,
) -> Iterator[Alternative]:
    """The oracle at the frequency table fitted to ``test``, under the declared pairing
    first and then the other, for every component whose oracle runs RoPE."""
    if getattr(conventions, "positions", None) not in ("rope", None) or not reaches(
        component, "rope"
    ):
        return
    if np.size(test) > MAX_OUTPUT_ENTRIES:
        return
    d = _head_dim(evaluate)
    if d is None or d % 2 or d // 2 > MAX_PAIRS:
        return
    declared = _declared_frequencies(d, conventions)
    unscaled = oracle.rope_frequencies(d, base=conventions.pe_base)
    layout = conventions.rope_layout
    for pairing in (layout, *(p for p in LAYOUTS if p != layout)):
        fitted, _ = fit_frequencies(evaluate, test, declared, pairing, ignore)
        if pairing == layout and np.allclose(fitted, declared, rtol=SAME_FREQUENCY):
            continue
        if not np.any(fitted):  # no rotation at all: RoPE missing, a hypothesis of its own
            continue
        if pairing == layout:
            found, words = describe_frequencies(fitted, declared, unscaled)
        else:
            found = convention_code("rope_layout", pairing)
            words = f"pairs the features as {pairing} instead of {layout}" + (
                ""
                if np.allclose(fitted, declared, rtol=SAME_FREQUENCY)
                else f", and {describe_frequencies(fitted, declared, unscaled)[1]}"
            )
        table = ", ".join(f"{w:.6g}" for w in fitted)
        yield Alternative(
            found,
            f"the output is the spec's with RoPE's frequencies solved for from the output: "
            f"it {words} (fitted omega = [{table}]; declared "
            f"[{', '.join(f'{w:.6g}' for w in declared)}]; SPEC.md §2.3, §2.6)",
            pieces={"rope": _rope_with(fitted, pairing)},
        )


def _frequencies(d: int, base: float, frequencies: Any) -> np.ndarray:
    """The (d/2,) frequencies a rope piece turns by: ``frequencies`` where the oracle passes
    them (§2.6's scaled ones), else base^(-2i/d) (§2.3)."""
    if frequencies is None:
        return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    return oracle._f64(frequencies)


def _channel_angles(
    x: np.ndarray, positions: Any, base: float, frequencies: Any, table_layout: str
) -> np.ndarray:
    """The (L, d) angle each channel of ``x`` (..., L, d) turns by under a cos/sin table laid
    out for ``table_layout``: channel c takes the frequency of the pair c belongs to there."""
    length, d = x.shape[-2], x.shape[-1]
    positions = np.arange(length) if positions is None else np.asarray(positions)
    omega = _frequencies(d, base, frequencies)
    channels = np.arange(d)
    per_channel = (
        omega[channels // 2] if table_layout == "interleaved" else omega[channels % (d // 2)]
    )
    return positions.astype(np.float64)[:, None] * per_channel


def _rope_table_for(cos_layout: str, sin_layout: str, pairing: str) -> Callable[..., np.ndarray]:
    """§2.3 with the cos table laid out for ``cos_layout`` and the sin table for
    ``sin_layout`` (channel c turned by the frequency of the pair c belongs to under that
    layout) and the rotation pairing the channels by ``pairing``: where they differ, the
    members of a pair turn by different angles, or a channel's cosine and sine by two."""

    def rope(x, positions=None, *, base=10000.0, layout="interleaved", frequencies=None):  # type: ignore[no-untyped-def]
        x = oracle._f64(x)
        cos = np.cos(_channel_angles(x, positions, base, frequencies, cos_layout))
        sin = np.sin(_channel_angles(x, positions, base, frequencies, sin_layout))
        first, second = _pair_channels(pairing, x.shape[-1])
        out = np.empty_like(x)
        a, b = x[..., first], x[..., second]
        out[..., first] = a * cos[:, first] - b * sin[:, first]
        out[..., second] = b * cos[:, second] + a * sin[:, second]
        return out

    return rope


def _rope_partner_as(table: str, read: str, write: str) -> Callable[..., np.ndarray]:
    """§2.3 written as ``x * cos + rotate_half(x) * sin`` with the cos/sin table laid out for
    ``table`` and ``rotate_half`` reading the pairs of layout ``read`` and writing each pair's
    partner (-b, a) to the channels of layout ``write``: where the three differ, a channel
    meets another channel's partner or another pair's angle."""

    def rope(x, positions=None, *, base=10000.0, layout="interleaved", frequencies=None):  # type: ignore[no-untyped-def]
        x = oracle._f64(x)
        theta = _channel_angles(x, positions, base, frequencies, table)
        d = x.shape[-1]
        first, second = _pair_channels(read, d)
        to_first, to_second = _pair_channels(write, d)
        partner = np.empty_like(x)
        partner[..., to_first], partner[..., to_second] = -x[..., second], x[..., first]
        return x * np.cos(theta) + partner * np.sin(theta)

    return rope


def table_layout_hypotheses(component: str, conventions: Any) -> Iterator[Alternative]:
    """The two pairings mixed in one rotation: the cos/sin table laid out for one and
    applied with the other (the declared pairing with the other table, and the declared
    table with the other pairing), and pairs read in one layout and written in the other."""
    if not reaches(component, "rope"):
        return
    declared = getattr(conventions, "rope_layout", "interleaved")
    other = next(p for p in LAYOUTS if p != declared)
    words = {
        "interleaved": "interleaved pairs (2i, 2i+1): repeat_interleave(freqs, 2)",
        "half_split": "half-split pairs (i, i + d/2): cat(freqs, freqs)",
    }
    for table_layout, pairing in ((other, declared), (declared, other)):
        yield Alternative(
            registered("rope.table_layout_mismatch"),
            f"the output is the spec's with RoPE's cos/sin table laid out for "
            f"{words[table_layout]}, applied by a rotation that pairs the features as "
            f"{pairing}: the two members of a pair are turned by different angles, so the "
            "map is no rotation (lay the table out for the pairing the rotation uses; "
            "SPEC.md §2.3)",
            pieces={"rope": _rope_table_for(table_layout, table_layout, pairing)},
        )
    # the cos and the sin tables expanded in two layouts (repeat_interleave for one,
    # torch.cat((t, t)) for the other), under either pairing
    for (cos_layout, sin_layout), pairing in itertools.product(
        ((declared, other), (other, declared)), (declared, other)
    ):
        yield Alternative(
            registered("rope.table_layout_mismatch"),
            f"the output is the spec's with RoPE's cos table laid out for "
            f"{words[cos_layout]} and its sin table for {words[sin_layout]}, applied by a "
            f"rotation that pairs the features as {pairing}: a channel's cosine and sine "
            "belong to two frequencies, so the map is no rotation (expand both tables the "
            "same way, for the pairing the rotation uses; SPEC.md §2.3)",
            pieces={"rope": _rope_table_for(cos_layout, sin_layout, pairing)},
        )
    for (read, write), across in itertools.product(
        ((declared, other), (other, declared)), (False, True)
    ):
        where = " over the heads' concatenated channels" if across else ""
        yield Alternative(
            registered("rope.table_layout_mismatch"),
            f"the output is the spec's with RoPE's pairs read as {words[read].split(':')[0]} "
            f"and each rotated pair written back as {words[write].split(':')[0]}{where}: "
            "every pair turns by the right angle, but its two results land on other channels "
            "(a rotation whose read and write follow two layouts: torch.cat where "
            "torch.stack belongs, or the reverse; SPEC.md §2.3)",
            pieces={"rope": _rope_written_as(read, write, across)},
        )
    # one side's rotated pairs written back in the other layout, the other side's as declared
    # (Meta's llama: torch.cat for torch.stack on xq_out alone)
    if reaches(component, "rope_rows"):
        for (read, write), side in itertools.product(
            ((declared, other), (other, declared)), (0, 1)
        ):
            rotated, kept = ("queries", "keys") if side == 0 else ("keys", "queries")
            yield Alternative(
                registered("rope.table_layout_mismatch"),
                f"the output is the spec's with the {rotated}' RoPE pairs read as "
                f"{words[read].split(':')[0]} and each rotated pair written back as "
                f"{words[write].split(':')[0]}, the {kept} rotated as declared: the "
                f"{rotated}' channels no longer line up with the {kept}' in the scores "
                "(torch.cat where torch.stack belongs on one side, or the reverse; SPEC.md "
                "§2.3)",
                pieces=rope_on_one_side(_rope_written_as(read, write, False), side),
            )
    # x * cos + rotate_half(x) * sin with the rotate_half built in another layout than the
    # table (torch.stack((-x2, x1)).flatten(-2) of the halves beside a cat(freqs, freqs) table)
    for table, (read, write) in itertools.product(
        (declared, other), ((declared, other), (other, declared))
    ):
        yield Alternative(
            registered("rope.table_layout_mismatch"),
            f"the output is the spec's written as x * cos + rotate_half(x) * sin with the "
            f"cos/sin table laid out for {words[table]}, and rotate_half reading its pairs as "
            f"{words[read].split(':')[0]} and writing each partner (-b, a) as "
            f"{words[write].split(':')[0]} (torch.stack((-x2, x1), -1).flatten(-2) of the "
            "halves, or torch.cat of the strided channels): each channel meets another "
            "channel's partner, so the map is no rotation (SPEC.md §2.3)",
            pieces={"rope": _rope_partner_as(table, read, write)},
        )


def _pair_channels(layout: str, d: int) -> tuple[np.ndarray, np.ndarray]:
    channels = np.arange(d)
    if layout == "interleaved":
        return channels[0::2], channels[1::2]
    return channels[: d // 2], channels[d // 2 :]


def _rope_written_as(read: str, write: str, across_heads: bool) -> Callable[..., np.ndarray]:
    """§2.3 rotating the pairs of layout ``read`` and writing each rotated pair to the
    channels of layout ``write``: within each head, or (``across_heads``) over the (H * d)
    channels of all heads at once, as a rotation of the whole projection writes them."""

    def rope(x, positions=None, *, base=10000.0, layout="interleaved", frequencies=None):  # type: ignore[no-untyped-def]
        rotated = oracle.rope(x, positions, base=base, layout=read, frequencies=frequencies)
        d = rotated.shape[-1]
        first, second = _pair_channels(read, d)
        if across_heads:
            if rotated.ndim < 3:
                raise ValueError("no head axis (..., H, L, d) to write across")
            # pair j of head h is pair h d/2 + j of the (..., L, H * d) projection
            *lead, heads, length, _ = rotated.shape
            a, b = (
                np.moveaxis(rotated[..., c], -3, -2).reshape(*lead, length, heads * d // 2)
                for c in (first, second)
            )
            to_first, to_second = _pair_channels(write, heads * d)
            out = np.empty((*lead, length, heads * d))
            out[..., to_first], out[..., to_second] = a, b
            return np.moveaxis(out.reshape(*lead, length, heads, d), -2, -3)
        to_first, to_second = _pair_channels(write, d)
        out = np.empty_like(rotated)
        out[..., to_first], out[..., to_second] = rotated[..., first], rotated[..., second]
        return out

    return rope


def rope_on_one_side(rope: Callable[..., np.ndarray], side: int) -> Callable[[], dict[str, Any]]:
    """A fresh ``rope_rows`` per evaluation: ``rope`` (a per-row rotation, the signature of
    ``oracle.rope``) on one side only (``side`` 0, the queries; 1, the keys: the oracle
    rotates q, then k), the spec's rotation on the other."""

    def pieces() -> dict[str, Any]:
        calls = [0]

        def rope_rows(x, positions, *, base=10000.0, layout="interleaved", frequencies=None):  # type: ignore[no-untyped-def]
            which = calls[0] % 2
            calls[0] += 1
            kw = {"base": base, "layout": layout, "frequencies": frequencies}
            if which != side:
                return oracle.rope_rows(x, positions, **kw)
            x = oracle._f64(x)
            return np.stack([rope(x[b], positions[b], **kw) for b in range(len(x))])

        return {"rope_rows": rope_rows}

    return pieces


def _rope_rows_flat_index(x, positions, *, base=10000.0, layout="interleaved", frequencies=None):  # type: ignore[no-untyped-def]
    """§2.3 on (B, H, L, d) with pair i of head h given the frequency of pair h * d/2 + i of
    the whole projection: base^(-(h d + 2i) / d) = base^(-h) times the spec's."""
    x = oracle._f64(x)
    d = x.shape[-1]
    omega = _frequencies(d, base, frequencies)
    if d < 4 or omega[1] <= 0.0:
        raise ValueError("no second pair to read the base from")
    per_head = omega[1] ** (d / 2)  # base^(-1), from the frequencies the oracle passes
    out = np.empty_like(x)
    for h in range(x.shape[1]):
        out[:, h] = oracle.rope_rows(
            x[:, h : h + 1], positions, layout=layout, frequencies=omega * per_head**h
        )[:, 0]
    return out


def flat_index_hypotheses(component: str) -> Iterator[Alternative]:
    """RoPE's frequencies indexed over the whole query or key projection instead of within
    each head (llama2.c's ``head_dim = i % head_size`` written ``i``): head h rotates with
    the spec's frequencies times base^(-h), so only head 0 is right."""
    if not reaches(component, "rope_rows"):
        return
    yield Alternative(
        registered("positional.frequency_wrong"),
        "the output is the spec's with RoPE's frequency of pair i in head h taken from the "
        "pair's index in the whole projection, base^(-(h d_head + 2i) / d_head), instead of "
        "its index within the head, base^(-2i / d_head): head 0 is right, head h turns "
        "base^h times slower (SPEC.md §2.3)",
        pieces={"rope_rows": _rope_rows_flat_index},
    )


# The fractions of a head's channels a partial rotary rotates (GPT-NeoX's rotary_pct,
# Phi's partial_rotary_factor): one quarter, one half, three quarters.
ROTARY_FRACTIONS = (0.5, 0.25, 0.75)


def _rope_partial(fraction: float, over_rotated: bool) -> Callable[..., np.ndarray]:
    """§2.3 applied to the first ``fraction`` of the channels only (the rest passed through,
    as if turned at frequency 0), paired in the caller's layout within that part; the
    frequencies over the rotated width (``over_rotated``: base^(-2i/r)) or the first r/2 of
    the whole head's."""

    def rope(x, positions=None, *, base=10000.0, layout="interleaved", frequencies=None):  # type: ignore[no-untyped-def]
        x = oracle._f64(x)
        d = x.shape[-1]
        r = int(d * fraction) // 2 * 2
        if r < 2 or r >= d:
            raise ValueError(f"no partial rotary of {fraction} on {d} channels")
        omega = _frequencies(d, base, frequencies)[: r // 2]
        if over_rotated:
            if frequencies is not None:
                raise ValueError("scaled frequencies have no rotated-width form")
            omega = base ** (-np.arange(0, r, 2, dtype=np.float64) / r)
        out = x.copy()
        out[..., :r] = oracle.rope(x[..., :r], positions, layout=layout, frequencies=omega)
        return out

    return rope


def partial_rotary_hypotheses(component: str) -> Iterator[Alternative]:
    """RoPE applied to part of each head's channels only (a partial rotary, rotary_pct or
    partial_rotary_factor, carried into a model that rotates every channel), its frequencies
    over the rotated width or taken from the whole head's table."""
    if not reaches(component, "rope"):
        return
    for fraction, over_rotated in itertools.product(ROTARY_FRACTIONS, (True, False)):
        table = (
            "with frequencies base^(-2i/r) over the r rotated channels"
            if over_rotated
            else "with the first r/2 frequencies of the whole head's table"
        )
        yield Alternative(
            registered("positional.frequency_wrong"),
            f"the output is the spec's with RoPE applied to the first {fraction:g} of each "
            f"head's channels only (r of d), {table}, and the other channels passed through "
            "unrotated (frequency 0): a partial rotary (GPT-NeoX's rotary_pct, Phi's "
            "partial_rotary_factor) where the model rotates every channel (SPEC.md §2.3)",
            pieces={"rope": _rope_partial(fraction, over_rotated)},
        )
