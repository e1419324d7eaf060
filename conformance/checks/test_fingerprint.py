"""Probes: measure each convention an implementation shows, and hold it to what its
adapter declares (the *fingerprint*). A declared deviation from the canonical spec is a
``convention`` result; a difference between declared and shown is a failure that names
the bug class.

A probe finds the values of one convention field under which the oracle reproduces the
implementation's output, on inputs chosen to tell those values apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from tck.conformance.diagnosis import explain
from tck.conformance.diagnosis.hypotheses_more import explained_by_one_other_field
from tck.conformance.toolkit import spaces
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import canonical_conventions, record
from tck.reference.catalogue import FIELD_CLAUSES, convention_code, declared_code, plain_words
from tck.reference.inputs import Inputs, Shape


def probe_inputs(tck: Harness, inst: Instance, field: str) -> Inputs:
    """Inputs on which the values of ``field`` give different outputs."""
    if field == "causal_alignment":  # Lq < Lk: top-left and bottom-right differ
        return tck.inputs(inst, Shape(batch=2, lq=3, lk=7, masked=False, causal=True))
    if field == "fully_masked_rows":  # the second row has no key at all
        return tck.inputs(inst, Shape(batch=2, lq=4, lk=5, lengths=(5, 0)))
    if record(tck.component).inputs[0].kind == "positions":  # positions alone (§2.1)
        return {"positions": np.arange(spaces.reach(tck.subject, 64))}  # ConfigSpace.max_len
    inputs = tck.inputs(inst)
    if "x" in inputs and field in ("eps", "eps_placement", "variance"):
        inputs["x"][0] = inputs["x"][0] * 1e-3 + 2.0  # a row of variance ~1e-6: eps matters
    if "x" in inputs and field == "activation":
        inputs["x"] = inputs["x"] * 3.0  # spread pre-activations where GELU forms differ
    return inputs


@pytest.mark.spec(
    "0.3", *sorted({c for cs in FIELD_CLAUSES.values() for c in cs}), id="fingerprint.{field}"
)
@pytest.mark.fields(*FIELD_CLAUSES)
def test_convention(tck: Harness, field: str) -> None:
    tck.record.measured("0.3", *FIELD_CLAUSES[field])
    inst = tck.instance()
    tck.require_params(inst)
    inputs = probe_inputs(tck, inst, field)
    test = tck.run(inst, inputs)
    declared = getattr(inst.conventions, field)
    canonical = getattr(canonical_conventions(tck.component), field)
    shown = explain.matching_values(tck, inst, inputs, test, field)
    together: dict[str, object] = {}
    if not shown:  # another field alone explains it: this one shows its declared value
        other = explained_by_one_other_field(tck, inst, inputs, test, field)
        if other:
            shown = [declared]
            tck.note({"explained_by_other_field": other})
    if not shown:  # several conventions at once? (an Annotated-Transformer LayerNorm: three)
        together = explain.matching_combination(tck, inst, inputs, test) or {}
        if together:
            shown = [together.get(field, declared)]
    tck.note({"field": field, "declared": declared, "shown": shown, "canonical": canonical})
    if together:
        tck.note({"explained_by": together})
    if not shown:
        reason = (
            f"not measured: no value of {field}, alone or with up to two other conventions of "
            f"{tck.component}, reproduces the output, so the probe cannot read {field} off it "
            "(the subject differs from the oracle in another way: see equality.oracle)"
        )
        tck.note({"not_measured": reason})
        pytest.skip(reason)
    if declared != "undefined" and declared not in shown:
        if field == "pe_base":  # the declared base to a power: the exponent stepped wrong
            from tck.conformance.diagnosis.hypotheses_fitted import (
                exponent_factor,
                exponent_message,
                table_width,
            )

            width = table_width(tck.component, inst.config)
            k = exponent_factor(declared, float(shown[0]), width)
            if k is not None:
                raise CheckFailure(
                    "positional.frequency_wrong", exponent_message(declared, float(shown[0]), k)
                )
        also = ""
        if len(together) > 1:
            others = ", ".join(f"{f}={v!r}" for f, v in together.items() if f != field)
            also = f"; together with {others} (all undeclared)"
        raise CheckFailure(
            convention_code(field, shown[0]),
            f"{plain_words(field, shown[0])} ({field}={shown[0]!r}), but its adapter declares "
            f"that it {plain_words(field, declared)} ({field}={declared!r}){also}",
            {"explained_by": together} if together else None,
        )
    if len(shown) > 1:
        tck.note({"indistinguishable": shown})
    if declared != canonical:
        seen = [v for v in shown if v != "undefined"]
        if declared == "undefined" and len(seen) == 1:
            what = f"; on these inputs it {plain_words(field, seen[0])}"
        else:
            what = ""
        tck.convention(
            declared_code(field),
            f"It {plain_words(field, declared)}{what} (canonical: it "
            f"{plain_words(field, canonical)}). {field}={declared!r}, declared and shown.",
        )
