"""§2 Positional encodings: the properties of sinusoidal PE and RoPE, and PE frequencies.

No parameters are involved: ``sinusoidal_pe`` maps positions to codes, ``rope`` rotates
vectors. The properties hold in every declared layout; the frequency probe reads the
angles of position 1 to tell a wrong frequency formula (seed 004's precedence bug) from a
layout or base mix-up.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tck.conformance.toolkit import spaces
from tck.conformance.toolkit.deltas import delta
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.input_edits import rng
from tck.conformance.toolkit.instances import cached_instance
from tck.conformance.toolkit.results import CheckFailure
from tck.conformance.toolkit.strategies import seeds
from tck.reference.catalogue import convention_code
from tck.reference.tolerance import compare, floor_of

spec = pytest.mark.spec
components = pytest.mark.components

MAX_POSITION = 60_000  # long positions (10000, 50000) are where frequency bugs blow up
LONG = np.array([0, 1, 2, 3, 7, 100, 1_000, 10_000, 50_000, MAX_POSITION - 1])
positions = st.integers(0, MAX_POSITION - 1)


def reach(tck: Harness) -> int:
    """MAX_POSITION, or the subject's own maximum length when it declares a shorter one
    (ConfigSpace.max_len, SPEC.md §0.6): positions are drawn below it."""
    return spaces.reach(tck.subject, MAX_POSITION)


def long_positions(tck: Harness) -> np.ndarray:
    return LONG[LONG < reach(tck)]


def long_instance(tck: Harness) -> Instance:
    """One instance whose encoding is defined up to MAX_POSITION (§2.2 max_len)."""
    config = tck.config(max_len=reach(tck))
    return cached_instance(tck, "long", lambda: tck.instance(config, params=False))


def encode(tck: Harness, inst: Instance, at: np.ndarray) -> np.ndarray:
    return tck.run(inst, {"positions": np.asarray(at, dtype=np.int64)})  # [L, D]


# ---------------------------------------------------------------- sinusoidal PE (§2.1, §2.2)


@spec("2.2", id="positional.bounded")
@components("sinusoidal_pe")
def test_bounded(tck: Harness) -> None:
    """§2.2: every entry lies in [-1, 1] and is finite, also at long positions."""
    inst = long_instance(tck)
    at = long_positions(tck)
    pe = encode(tck, inst, at)
    worst = np.nanargmax(np.where(np.isfinite(pe), np.abs(pe), np.inf))
    index = np.unravel_index(worst, pe.shape)
    value = float(pe[index])
    tck.note({"max_abs_entry": abs(value)})
    if not (np.isfinite(pe).all() and np.abs(pe).max() <= 1.0 + 1e-12):
        raise CheckFailure(
            "positional.unbounded",
            f"PE[{at[index[0]]}, {index[1]}] = {value:.6g}: entries must be finite and in "
            "[-1, 1] (SPEC.md §2.2)",
            {"max_abs_entry": abs(value)},
        )


@spec("2.2", id="positional.relative")
@components("sinusoidal_pe")
@given(t=positions, k=st.integers(0, 2_000), other=positions)
def test_relative(tck: Harness, t: int, k: int, other: int) -> None:
    """§2.2: PE_t . PE_(t+k) = sum_i cos(k w_i) depends on the offset k only, and is the
    same for -k."""
    inst = long_instance(tck)
    limit = reach(tck)
    t, other = t % limit, other % limit  # unchanged unless the subject takes fewer
    k = max(0, min(k, limit - 1 - max(t, other)))
    at = [t, t + k, other, other + k, t - k if t >= k else t + k]
    pe = encode(tck, inst, np.array(at))
    forward, elsewhere, backward = pe[0] @ pe[1], pe[2] @ pe[3], pe[0] @ pe[4]
    # float64 sin/cos at arguments up to 6e4, summed over d/2: 10x the float64 floor in force
    # (SPEC.md §10.12: a subject with float32 islands is held to its island bound)
    bound = 10 * floor_of("float64") * pe.shape[1]
    worst = max(abs(forward - elsewhere), abs(forward - backward))
    if tck.record.metrics.get("max_abs_delta", -1.0) < worst:
        tck.note({"max_abs_delta": worst, "bound": bound})
    if worst > bound:
        precision_lost(tck, inst, np.array(at), pe)
        again = encode(tck, tck.instance(tck.config(max_len=limit), params=False), at)
        dots = again[0] @ again[1], again[2] @ again[3], again[0] @ again[4]
        if max(abs(dots[0] - dots[1]), abs(dots[0] - dots[2])) <= bound:
            raise state_carried(f"PE_{t} . PE_({t}+{k})")
        raise CheckFailure(
            "positional.not_relative",
            f"PE_t . PE_(t+k) must depend on k only and equal PE_t . PE_(t-k): with k = {k}, "
            f"t = {t}: {forward:.12g}, t = {other}: {elsewhere:.12g}, PE_t . PE_(t-k) = "
            f"{backward:.12g} (|delta| {worst:.3g} > {bound:.3g}; SPEC.md §2.2)",
            {"max_abs_delta": worst},
        )


@spec("2.2", id="positional.distinct")
@components("sinusoidal_pe")
def test_distinct(tck: Harness) -> None:
    """§2.2: distinct integer positions get distinct codes."""
    inst = long_instance(tck)
    at = np.arange(min(256, reach(tck)))
    pe = encode(tck, inst, at)
    gaps = np.linalg.norm(pe[:, None, :] - pe[None, :, :], axis=-1)
    gaps[np.diag_indices_from(gaps)] = np.inf
    i, j = np.unravel_index(np.argmin(gaps), gaps.shape)
    tck.note({"min_distance": float(gaps[i, j])})
    if not gaps[i, j] > 1e-6:
        raise CheckFailure(
            "positional.not_distinct",
            f"positions {at[i]} and {at[j]} get the same code (distance {gaps[i, j]:.3g}); "
            "distinct positions must be told apart (SPEC.md §2.2)",
            {"min_distance": float(gaps[i, j])},
        )


def state_carried(what: str) -> CheckFailure:
    """The property fails on the instance reused across examples and holds on a fresh one
    for the same inputs: the subject carries state from one call to the next."""
    return CheckFailure(
        "state.leaks_between_calls",
        f"{what}: the property fails on the instance reused across hypothesis' examples and "
        "holds on a fresh instance for the same inputs: the subject carries state from one "
        "call to the next (a cos/sin or table cache keyed by length only, a buffer updated in "
        "forward)",
    )


def table(at: np.ndarray, omega: np.ndarray, layout: str) -> np.ndarray:
    """Sinusoidal codes at positions ``at`` for arbitrary frequencies (§2.1 layouts)."""
    angles = np.asarray(at, np.float64)[:, None] * omega  # [L, d/2]
    if layout == "interleaved":
        return np.stack([np.sin(angles), np.cos(angles)], axis=-1).reshape(len(at), -1)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)


def frequencies(d: int, base: float) -> np.ndarray:
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # w_i = base^(-2i/d)


def pairs(pe: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """(sine part, cosine part) of each frequency pair, [L, d/2] each."""
    if layout == "interleaved":
        return pe[:, 0::2], pe[:, 1::2]
    half = pe.shape[1] // 2
    return pe[:, :half], pe[:, half:]


def precision_lost(tck: Harness, inst: Instance, at: np.ndarray, pe: np.ndarray) -> None:
    """Raise ``numerics.float64_precision_lost`` when the codes are the declared table to
    float32 precision and no closer (a table computed in float64 and stored in a float32
    buffer, or built from float32 positions): a precision finding, not a wrong formula."""
    conv, d = inst.conventions, inst.config.d_model
    spec_table = table(at, frequencies(d, conv.pe_base), conv.pe_layout)
    if pe.shape != spec_table.shape or compare(pe, spec_table).passed:
        return
    loose = compare(pe, spec_table, dtype="float32")
    if not loose.passed:
        return
    rounded = compare(pe, spec_table.astype(np.float32).astype(np.float64))
    how = (
        "stored as float32 (it equals the float64 table rounded to float32)"
        if (rounded.passed)
        else "computed in float32 somewhere (positions, frequencies or angles)"
    )
    raise CheckFailure(
        "numerics.float64_precision_lost",
        f"the codes are the spec's table to float32 precision only: max |PE - spec| = "
        f"{loose.max_abs_err:.3g}, within float32's bound {loose.bound:.3g} but above "
        f"float64's; the table is {how}, in a subject built in float64. The frequencies and "
        "the layout are right (SPEC.md §2.1, §10.7)",
        loose.metrics(),
    )


@spec("2.1", "2.2", id="positional.frequencies")
@components("sinusoidal_pe")
def test_frequencies(tck: Harness) -> None:
    """§2.1: PE[pos, 2i] = sin(pos * base^(-2i/d)) and PE[pos, 2i+1] = cos(...) under the
    declared layout and base. On a mismatch the angles at position 1 (which *are* the
    frequencies, all below pi) name the cause: another layout, another base, or a wrong
    formula such as seed 004's ``1 / (base ** arange(0, d, 2) / d)`` = d * base^(-2i)."""
    inst = long_instance(tck)
    conv, d = inst.conventions, inst.config.d_model
    at = long_positions(tck)  # LONG, below the subject's maximum length
    pe = encode(tck, inst, at)
    result = compare(pe, table(at, frequencies(d, conv.pe_base), conv.pe_layout))
    tck.note(result.metrics())
    if result.passed:
        return
    numbers = (
        f"max |PE - spec| = {result.max_abs_err:.3g} at [position {at[result.worst_index[0]]},"
        f" channel {result.worst_index[1]}]"
        if result.worst_index
        else ""
    )
    precision_lost(tck, inst, at, pe)
    other = "concatenated" if conv.pe_layout == "interleaved" else "interleaved"
    if compare(pe, table(at, frequencies(d, conv.pe_base), other)).passed:
        raise CheckFailure(
            convention_code("pe_layout", other),
            f"the codes are the {other} layout, but the adapter declares "
            f"pe_layout={conv.pe_layout!r}; {numbers} (SPEC.md §2.1)",
            result.metrics(),
        )
    sines, cosines = pairs(pe[1:2], conv.pe_layout)
    measured = np.arctan2(sines, cosines)[0]  # position 1: the angle is w_i itself
    expected = frequencies(d, conv.pe_base)
    tck.note({"measured_frequencies": measured.tolist()})
    if len(measured) > 1 and 0 < measured[1] < 1:
        base = float(measured[1] ** (-d / 2))  # w_1 = base^(-2/d)
        if math.isfinite(base) and base > 1:
            if compare(pe, table(at, frequencies(d, base), conv.pe_layout)).passed:
                from tck.conformance.diagnosis.hypotheses_fitted import (
                    exponent_factor,
                    exponent_message,
                )

                k = exponent_factor(conv.pe_base, base, d)
                if k is not None:  # the exponent stepped wrong, not another base
                    raise CheckFailure(
                        "positional.frequency_wrong",
                        f"{exponent_message(conv.pe_base, base, k)}; {numbers}",
                        result.metrics(),
                    )
                raise CheckFailure(
                    convention_code("pe_base", base),
                    f"the frequencies follow base {base:.6g}, but the adapter declares "
                    f"pe_base={conv.pe_base:g}; {numbers} (SPEC.md §2.1)",
                    result.metrics(),
                )
    seed004 = d * conv.pe_base ** (-np.arange(0, d, 2, dtype=np.float64))
    wrong = int(np.argmax(np.abs(measured - expected)))
    if compare(pe, table(at, seed004, conv.pe_layout)).passed:
        cause = (
            "they are d * base^(-2i), seed 004's precedence bug "
            "`1 / (base ** arange(0, d, 2) / d)` for `1 / base ** (arange(0, d, 2) / d)`: "
            "pair 0 spins at d radians per position and the others are frozen"
        )
    else:
        cause = f"pair {wrong}'s angle at position 1 is {measured[wrong]:.6g} rad"
    raise CheckFailure(
        "positional.frequency_wrong",
        f"the frequencies must be base^(-2i/d) = {np.round(expected[:3], 6).tolist()}...; "
        f"{cause}; {numbers} (SPEC.md §2.1, §2.2)",
        {**result.metrics(), "measured_frequencies": measured.tolist()},
    )


# ------------------------------------------------------------------------- RoPE (§2.3, §2.4)


def rotate(tck: Harness, inst: Instance, x: np.ndarray, at: list[int] | np.ndarray):
    """RoPE of x [1, 1, L, d] at positions ``at``."""
    return tck.run(inst, {"x": x, "positions": np.asarray(at, dtype=np.int64)})


def rope_vectors(inst: Instance, seed: int, n: int) -> np.ndarray:
    return rng(seed).standard_normal((1, 1, n, inst.config.head_dim_k))


@spec("2.4", id="positional.rope_norm_preserving")
@components("rope")
@given(seed=seeds, at=st.lists(positions, min_size=1, max_size=6))
def test_rope_norm_preserving(tck: Harness, seed: int, at: list[int]) -> None:
    """§2.4: |RoPE(x, m)| = |x|: each pair is rotated, never stretched."""
    inst = cached_instance(tck, "default", lambda: tck.instance(params=False))
    x = rope_vectors(inst, seed, len(at))
    out = rotate(tck, inst, x, at)
    found = delta(np.linalg.norm(x, axis=-1), np.linalg.norm(out, axis=-1))
    if found.changed:
        position = at[found.index[-1]] if found.index else None
        raise CheckFailure(
            "rope.not_norm_preserving",
            f"|RoPE(x, m)| must equal |x|: at position {position}, {found.describe()} "
            "(norms before -> after; SPEC.md §2.4)",
            found.metrics(),
        )


@spec("2.4", id="positional.rope_relative")
@components("rope")
@given(seed=seeds, m=positions, n=positions, shift=st.integers(0, 5_000))
def test_rope_relative(tck: Harness, seed: int, m: int, n: int, shift: int) -> None:
    """§2.4: RoPE(q, m) . RoPE(k, n) depends on the positions only through n - m."""
    inst = cached_instance(tck, "default", lambda: tck.instance(params=False))
    limit = reach(tck)
    m, n = m % limit, n % limit  # unchanged unless the subject takes fewer
    shift = max(0, min(shift, limit - 1 - max(m, n)))
    q, k = rope_vectors(inst, seed, 2)[0, 0]
    x = np.stack([q, k, q, k])[None, None]  # [1, 1, 4, d]
    out = rotate(tck, inst, x, [m, n, m + shift, n + shift])[0, 0]
    here, there = out[0] @ out[1], out[2] @ out[3]
    # angles up to ~6e4 rad: 10x the float64 floor in force (SPEC.md §10.12)
    bound = 10 * floor_of("float64") * float(np.linalg.norm(q) * np.linalg.norm(k))
    if abs(here - there) > bound:
        fresh = rotate(tck, tck.instance(params=False), x, [m, n, m + shift, n + shift])[0, 0]
        if abs(fresh[0] @ fresh[1] - fresh[2] @ fresh[3]) <= bound:
            raise state_carried(f"RoPE(q, {m}) . RoPE(k, {n}) vs shifted by {shift}")
        raise CheckFailure(
            "rope.not_relative",
            f"RoPE(q, {m}) . RoPE(k, {n}) = {here:.12g} but RoPE(q, {m + shift}) . "
            f"RoPE(k, {n + shift}) = {there:.12g}: the score must depend on n - m only "
            f"(|delta| {abs(here - there):.3g} > {bound:.3g}; SPEC.md §2.4)",
            {"max_abs_delta": abs(here - there)},
        )


@spec("2.3", "2.4", id="positional.rope_identity_at_zero")
@components("rope")
def test_rope_identity_at_zero(tck: Harness) -> None:
    """§2.4: RoPE(x, 0) = x; and values are rotated, not replaced: position 0 is the
    identity for every vector."""
    inst = tck.instance(params=False)
    x = rope_vectors(inst, tck.seed, 5)
    found = delta(x, rotate(tck, inst, x, np.zeros(5)))
    tck.note(found.metrics())
    if found.changed:
        raise CheckFailure(
            "rope.not_identity_at_zero",
            f"RoPE(x, 0) must be x: {found.describe()} (SPEC.md §2.4)",
            found.metrics(),
        )
