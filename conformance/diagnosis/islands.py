"""§10.12 Float32 islands: a float64 build that computes some steps in float32 on purpose.

Correct public decoder code does it (Meta's Llama ``RMSNorm`` normalises ``x.float()``; its
``precompute_freqs_cis`` table is a ``complex64`` buffer that ``module.to(torch.float64)``
leaves as it is; a GELU whose ``sqrt(2/pi)`` is a float32 tensor; transformers' Llama keeps
its norm statistics, RoPE angles and eager softmax in float32 whatever the model's dtype).
Such a subject agrees with the float64 oracle to float32's precision, not float64's: held to
float64's floor (1e-10), every check of it would fail, each for the same reason.

``measure`` finds out once per subject: one build in float64 with canonical parameters,
two calls (the default shape, and a causal call of 13 tokens for the components that take
one), compared with the oracle at float64's floor and at the island bound
(``tolerance.ISLAND_FLOOR``, 16 float32 unit roundoffs at the output's scale). A subject
that fails the first and meets the second has an island. Then:

- declared (``Conventions.float32_steps``, a step the component holds: a model's
  conventions, shared by its subjects, may declare its norms' statistics for a RoPE subject
  that has none, which is then measured as undeclared): ``numerics.float32_islands`` is a
  convention row that gives the measurement;
- undeclared: that check fails, once, with ``numerics.float32_island``, naming the steps the
  component may keep in float32, the measurement and the declaration that would accept it;

and in both cases every float64 check of the subject runs with the island bound in place of
float64's floor (``subject_floor``, applied by the plugin's ``tck`` fixture), so what still
fails is a bug larger than float32 rounding, under its own code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tck.adapters import Unsupported
from tck.conformance.toolkit.careful import careful
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.recorder import Recorder
from tck.reference import record
from tck.reference.inputs import Shape
from tck.reference.model import QUANTITIES, computed_in
from tck.reference.tolerance import (
    FLOOR,
    ISLAND_FLOOR,
    UNIT_ROUNDOFF,
    Comparison,
    compare,
    float64_floor,
)

FINDING = "numerics.float32_island"
DECLARED = "numerics.float32_islands_declared"

# The steps of FLOAT32_STEPS a component can hold, by what it computes (SPEC.md §10.12).
_BY_QUANTITY = {
    "norm_statistics": ("norm_statistics",),
    "softmax": ("softmax",),
    "rope_angles": ("rope_angles", "rope_table"),
}
# the default call, and a causal one of 13 tokens (a decoder's causal path; other
# components take it as a plain call)
CALLS = (Shape(), Shape(batch=2, lq=13, lk=13, causal=True))


@dataclass(frozen=True)
class Island:
    """What ``measure`` found on a subject in float64."""

    max_abs_err: float  # max |test - oracle| over the calls
    scale: float  # max(1, max|oracle|), the floor's scale
    bound: float  # the island bound at that scale
    # "exact": within float64's floor; "island": above it, within the island bound;
    # "beyond": above the island bound too (a bug, or float32 rounding and a bug at once);
    # "explained": within the island bound, but a float64 hypothesis reproduces it to
    # float64's floor (a small bug such as eps outside the square root, not float32)
    status: str = "island"
    explained_by: str | None = None  # that hypothesis's code
    # every output value exactly a float32 number (``rounded_output``): the result itself
    # cast to float32, a step no declaration covers
    output_in_float32: bool = False
    # "beyond" the island bound, and reproduced by the torch reference with one quantity
    # (§10.10: norm_statistics, softmax, rope_angles) formed in 16 bits: (quantity, dtype)
    sixteen_bit: tuple[str, str] | None = None

    @property
    def roundoffs(self) -> float:
        """The error in float32 unit roundoffs at the output's scale."""
        return self.max_abs_err / (UNIT_ROUNDOFF["float32"] * self.scale)

    def describe(self) -> str:
        if self.status == "exact":
            return (
                f"max |test - oracle| = {self.max_abs_err:.3g}, within float64's own bound "
                f"{FLOOR['float64'] * self.scale:.3g}: no step is measured in float32"
            )
        if self.status == "explained":
            return (
                f"max |test - oracle| = {self.max_abs_err:.3g}, small enough for float32 "
                f"rounding, but reproduced to float64's own bound by {self.explained_by}: "
                "a bug, not a float32 step (the checks name it)"
            )
        if self.status == "beyond":
            return (
                f"max |test - oracle| = {self.max_abs_err:.3g}, above the float32-island "
                f"bound {self.bound:.3g} too: more than float32 rounding (the checks name it)"
            )
        return (
            f"max |test - oracle| = {self.max_abs_err:.3g} in float64, "
            f"{self.roundoffs:.2g} float32 unit roundoffs (2^-24) at the output's scale "
            f"{self.scale:.3g}: above float64's bound {FLOOR['float64'] * self.scale:.3g}, "
            f"within the float32-island bound {self.bound:.3g}"
        )


def candidate_steps(component: str) -> tuple[str, ...]:
    """The float32 steps (``Conventions.float32_steps``) ``component`` can hold: those of the
    quantities it forms (§10.10), a constant where it has an activation, a table where it
    has positions."""
    rec = record(component)
    steps: list[str] = []
    # a record that does not know its quantities (None) may form any of them
    quantities = tuple(_BY_QUANTITY) if rec.quantities is None else rec.quantities
    for quantity in quantities:
        steps += _BY_QUANTITY.get(quantity, ())
    if "pe_layout" in rec.fields:  # the sinusoidal table (§2.1), alone or inside
        steps.append("positional_table")
    if {"activation", "gate_activation"} & set(rec.fields):
        steps.append("constants")
    return tuple(dict.fromkeys(steps)) or ("constants",)


def held_steps(component: str, conventions: Any) -> tuple[str, ...]:
    """The declared float32 steps (``conventions.float32_steps``) that ``component`` holds
    (``candidate_steps``): the ones that may widen its float64 checks."""
    holds = candidate_steps(component)
    return tuple(s for s in conventions.float32_steps if s in holds)


# (adapter id, subject name, seed, device) -> (the adapter, what measure found): a subject is
# measured once per process, and every check of it reads the answer. The adapter is held so
# that its id is not reused by another adapter while the answer is kept.
_MEASURED: dict[tuple[int, str, int, str], tuple[object, Island | str]] = {}


def measure(h: Harness) -> Island | str:
    """What ``h``'s subject measures in float64 (an ``Island``: its ``status`` says whether
    it is one), or a string saying why it cannot be measured."""
    # keyed by the adapter itself: each check's Harness wraps it in a GuardedAdapter of its
    # own, and a key on the wrapper measured the subject again for every check
    adapter = getattr(h.adapter, "unguarded", h.adapter)
    key = (id(adapter), h.subject.name, h.seed, h.device)
    held = _MEASURED.get(key)
    if held is None or held[0] is not adapter:
        held = _MEASURED[key] = (adapter, _measure(h))
    return held[1]


def _measure(h: Harness) -> Island | str:
    if "float64" not in h.dtypes():
        return f"{h.adapter.name}:{h.subject.name} does not run in float64 (Adapter.dtypes)"
    if callable(getattr(h.adapter, "precision_hint", None)):  # an exported graph: its own
        return "an exported graph accounts for its float32 constants itself (precision_hint)"
    # a subject that declares its float32 steps is taken at its word (test_islands)
    declared = bool(held_steps(h.component, h.subject.conventions))
    probe = Harness(h.adapter, h.subject, seed=h.seed, device=h.device, record=Recorder())
    try:
        inst = probe.instance()
        if inst.params is None and _needs_params(probe):
            return "the adapter gives no canonical parameters to compare with the oracle"
        worst, scale, measured, rounded = 0.0, 1.0, False, True
        exact, within, explained_by = True, True, None
        calls: list[tuple[Any, Any, Any, Any]] = []  # (inputs, test, gold, ignore)
        for index, shape in enumerate(CALLS):
            try:
                inputs = probe.inputs(inst, shape, seed=index)
                test = probe.run(inst, inputs)
            except Unsupported:
                continue
            gold = probe.gold(inst, inputs)
            if test.shape != gold.shape:
                return "the output's shape is not the oracle's (the shape checks name it)"
            ignore = probe.ignore_mask(inst, gold)
            with float64_floor(FLOOR["float64"]):
                strict = compare(test, gold, ignore=ignore)
                exact &= strict.passed
                if not strict.passed and explained_by is None and not declared:
                    explained_by = _reproduced_in_float64(probe, inst, inputs, test, strict)
            # exactly float32 where the oracle's own output is not: a cast, not parameters
            # that are float32 numbers (a checkpoint's table read back by an embedding)
            rounded = rounded and rounded_output(test, ignore) and not rounded_output(gold, ignore)
            with float64_floor(ISLAND_FLOOR):
                loose = compare(test, gold, ignore=ignore)
            within &= loose.passed
            measured = True
            worst = max(worst, loose.max_abs_err)
            scale = max(scale, loose.bound / ISLAND_FLOOR)
            calls.append((inputs, test, gold, ignore))
        sixteen_bit = None
        if calls and not exact and not within:  # declared float32 steps or not
            sixteen_bit = _sixteen_bit_step(probe, inst, calls)
    except Unsupported as why:
        return f"cannot be built in float64 here: {why}"
    except Exception as error:  # the checks report what breaks; this probe only measures
        return f"the float64 probe failed: {type(error).__name__}: {error}"
    finally:
        probe.release()
    if not measured:
        return "no call of the float64 probe ran"
    status = "exact" if exact else "island" if within and math.isfinite(worst) else "beyond"
    if status == "island" and explained_by is not None:
        status = "explained"
    rounded = rounded and status != "exact"
    return Island(worst, scale, ISLAND_FLOOR * scale, status, explained_by, rounded, sixteen_bit)


# A 16-bit step's hypothesis reproduces the output when it is this many times closer to it
# than the oracle is. The same step computed by the same kernel gives the same 16-bit numbers
# except where a float64 input lies within its last bits of a 16-bit rounding boundary (the
# subject's products and the reference's differ there, so such a value may round the other
# way: rare), so the measured distance is mostly float64 rounding; ten leaves room
# for a step written another way (exp / sum in 16 bits where torch.softmax accumulates in
# float32), while float16 against bfloat16 stays apart (8 bits of mantissa against 11: the
# wrong one is about 8 times further off, not ten times closer).
SIXTEEN_BIT_MARGIN = 10.0


def _sixteen_bit_step(
    h: Harness, inst: Any, calls: list[tuple[Any, Any, Any, Any]]
) -> tuple[str, str] | None:
    """(quantity, dtype) of a step formed in float16 or bfloat16 whatever the build's dtype
    (``softmax(scores, dim=-1, dtype=torch.float16)``, a norm of ``x.half()``, RoPE angles
    from bfloat16 positions) that reproduces every call of the float64 probe: the torch
    reference with that one quantity in that dtype (``computed_in``) is ``SIXTEEN_BIT_MARGIN``
    times closer to the output than the oracle, with the same non-finite positions. A
    quantity that plays no part in a call (the reference unchanged) reproduces nothing."""
    rec = record(h.component)
    for quantity in rec.quantities if rec.quantities is not None else QUANTITIES:
        for dtype in ("float16", "bfloat16"):
            if all(_reproduces(h, inst, call, quantity, dtype) for call in calls):
                return quantity, dtype
    return None


def _reproduces(
    h: Harness, inst: Any, call: tuple[Any, Any, Any, Any], quantity: str, dtype: str
) -> bool:
    inputs, test, gold, ignore = call
    try:
        with computed_in(dtype, quantity):
            other = np.asarray(careful(h, inst, inputs), dtype=np.float64)
    except (Unsupported, ValueError, KeyError, RuntimeError):
        return False
    if other.shape != test.shape or not np.array_equal(np.isfinite(test), np.isfinite(other)):
        return False
    judged = np.isfinite(test) & np.isfinite(gold)
    if ignore is not None:
        judged &= ~np.broadcast_to(np.asarray(ignore, bool), judged.shape)
    if not judged.any():
        return False
    to_gold = float(np.abs(test - gold)[judged].max())
    to_other = float(np.abs(test - other)[judged].max())
    return to_gold > 0 and to_other * SIXTEEN_BIT_MARGIN <= to_gold


# Values a float64 output holds exactly as float32 numbers by chance: about one in 2^29 each;
# at least this many, all exact, is a cast, not chance.
ROUNDED_VALUES = 16


def rounded_output(test: Any, ignore: Any = None) -> bool:
    """Whether every judged value of a float64 output (``ignore``: values not judged) is
    exactly a float32 number, and at least ``ROUNDED_VALUES`` of them are not 0: the
    output itself was cast to float32. No float32 step a subject may declare (norm
    statistics, softmax, RoPE angles, tables, constants) ends a float64 computation."""
    values = np.asarray(test)
    if values.dtype != np.float64:
        return False
    if ignore is not None:
        values = values[~np.broadcast_to(np.asarray(ignore, bool), values.shape)]
    values = values[np.isfinite(values)]
    with np.errstate(over="ignore"):
        exact = values.astype(np.float32).astype(np.float64) == values
    return bool(exact.all()) and int(np.count_nonzero(values)) >= ROUNDED_VALUES


def _reproduced_in_float64(
    h: Harness, inst: Any, inputs: Any, test: Any, strict: Comparison
) -> str | None:
    """The code of a hypothesis that is not itself about precision and reproduces ``test``
    at float64's own floor: float32 rounding is noise no such hypothesis reproduces, while
    a small bug (eps outside the square root: an error of about eps / var) is reproduced
    exactly. None where none does."""
    from .explain import float64_hypothesis

    found = float64_hypothesis(h, inst, inputs, test, strict)
    return None if found is None or found.startswith("numerics.") else found


def subject_floor(h: Harness) -> float | None:
    """The float64 floor for every check of ``h``'s subject: ``ISLAND_FLOOR`` when it
    declares float32 steps it holds or has an island, else None (float64's own)."""
    if held_steps(h.component, h.subject.conventions):
        return ISLAND_FLOOR
    found = measure(h)
    return ISLAND_FLOOR if isinstance(found, Island) and found.status == "island" else None


def _needs_params(h: Harness) -> bool:
    from tck.reference import param_shapes

    return bool(param_shapes(h.component, h.config(), h.subject.conventions))
