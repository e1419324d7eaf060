"""§10.12 Float32 islands: one row per subject on the steps it computes in float32 inside a
float64 build (``tck.conformance.diagnosis.islands``).

A subject that agrees with the oracle to float32's precision only, in float64, gets one
finding here (``numerics.float32_island``) when it does not declare it, or a convention row
(``numerics.float32_islands_declared``) when it declares ``Conventions.float32_steps``; its
other float64 checks are judged at the island bound either way (the ``tck`` fixture), so
they fail only for what float32 rounding cannot explain.
"""

from __future__ import annotations

import pytest

from tck.conformance.diagnosis import islands, precision
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.tolerance import ISLAND_GROWTH

spec = pytest.mark.spec


@spec("10.12", id="numerics.float32_islands")
def test_float32_islands(tck: Harness) -> None:
    found = islands.measure(tck)
    declared = islands.held_steps(tck.component, tck.subject.conventions)
    if isinstance(found, str):
        pytest.skip(f"float32 islands not measured: {found}")
    if found.output_in_float32:
        raise CheckFailure(
            islands.FINDING,
            f"returns its float64 output rounded to float32: every value is exactly a float32 "
            f"number ({found.describe()}). The result itself is cast to float32 (a "
            "`.float()` on the output or the logits), a step no float32_steps "
            "declaration covers: keep the output in the build's dtype (SPEC.md §10.7, "
            "§10.12)",
            {"max_abs_err": found.max_abs_err, "float32_roundoffs": found.roundoffs},
        )
    if found.sixteen_bit is not None:  # a declared float32 step does not cover 16 bits
        _sixteen_bit_step(tck, found, *found.sixteen_bit)
    if declared:
        # the summary's convention line names the field and the steps declared
        tck.note({"field": "float32_steps", "declared": list(declared), "canonical": []})
        tck.convention(
            islands.DECLARED,
            f"Declared float32_steps={declared!r}: these steps are computed in float32 in a "
            f"float64 build, and every float64 check of this subject is held to "
            f"{ISLAND_GROWTH:g} float32 unit roundoffs at the output's scale instead of 1e-10 "
            f"(SPEC.md §10.12). Measured: {found.describe()}",
        )
        return
    if found.status != "island":
        tck.note({"float32_island": found.status, "max_abs_err": found.max_abs_err})
        return
    steps = islands.candidate_steps(tck.component)
    accept = (
        f"Conventions(float32_steps=({steps[0]!r},))"
        if len(steps) == 1
        else f"Conventions(float32_steps=(...)) with the one(s) of {', '.join(steps)} it is"
    )
    raise CheckFailure(
        islands.FINDING,
        f"computes in float32 somewhere inside a float64 build: {found.describe()} (two "
        f"calls, canonical parameters). The steps a {tck.component} keeps in float32 in public "
        f"code: {', '.join(steps)}. If that is on purpose, declare it: {accept} (SPEC.md "
        "§10.12); until then every float64 check of this subject is "
        "judged at that bound, so what else fails is larger than float32 rounding",
        {
            "max_abs_err": found.max_abs_err,
            "float32_roundoffs": found.roundoffs,
            "bound": found.bound,
            "candidate_steps": list(steps),
        },
    )


def _sixteen_bit_step(tck: Harness, found: islands.Island, quantity: str, dtype: str) -> None:
    """A float64 subject reproduced by the torch reference with one quantity formed in
    ``dtype`` (float16 or bfloat16): that step is pinned to 16 bits whatever the build's
    dtype, a precision bug in every dtype above it (SPEC.md §10.10)."""
    code = precision.CODES[quantity]
    raise CheckFailure(
        code,
        f"forms {precision.QUANTITY_WORDS[quantity]} in {dtype} inside a float64 build: "
        f"{found.describe()}, and the torch reference with that one step in {dtype} is at "
        f"least {islands.SIXTEEN_BIT_MARGIN:g} times closer to the output than the oracle on "
        f"every call. A dtype pinned to 16 bits (a softmax(..., dtype=torch.{dtype}), a "
        f"`.half()` before the step) rounds a float32 or float64 model to {dtype} there; form "
        "it in the input's dtype or float32 (SPEC.md §10.10, §10.12)",
        {
            "max_abs_err": found.max_abs_err,
            "quantity": quantity,
            "island_dtype": dtype,
            "reproduced_by": code,
            "reproduced_at": "float64",
        },
    )
