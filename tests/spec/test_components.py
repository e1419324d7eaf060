"""The component records (tck.reference.components): one per component, consistent with
SPEC.md, the adapter contract and the tables that read from them."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from tck.adapters import INPUTS, OUTPUTS
from tck.conformance.checks.test_equality import CALLS
from tck.conformance.toolkit.harness import DEFAULT_CONFIG, FIELDS
from tck.reference import COMPONENTS, RECORDS, init_params, param_shapes, record
from tck.reference import components as components_module
from tck.reference.components import (
    TAGS,
    Component,
    Input,
    of_family,
    tagged,
)
from tck.reference.conventions import Conventions
from tck.reference.expected import expected
from tck.reference.inputs import Shape, make_inputs
from tck.reference.model import build
from tck.reference.tolerance import k_forward, k_gradient

ROOT = Path(__file__).resolve().parents[2]
SPEC_CLAUSES = set(re.findall(r"^### §(\d+\.\d+) ", (ROOT / "SPEC.md").read_text("utf-8"), re.M))


def test_every_component_has_one_record_in_spec_order():
    assert tuple(RECORDS) == COMPONENTS
    assert all(record(name).name == name for name in COMPONENTS)
    assert all(
        dataclasses.is_dataclass(r) and r.__dataclass_params__.frozen for r in RECORDS.values()
    )


@pytest.mark.parametrize("name", COMPONENTS)
def test_record_clauses_exist_in_spec(name):
    missing = set(record(name).clauses) - SPEC_CLAUSES
    assert not missing, f"{name} cites clauses SPEC.md does not have: {sorted(missing)}"


@pytest.mark.parametrize("name", COMPONENTS)
def test_record_fields_are_convention_fields(name):
    fields = record(name).fields
    known = {f.name for f in dataclasses.fields(Conventions)}
    assert set(fields) <= known, set(fields) - known
    assert len(set(fields)) == len(fields)


@pytest.mark.parametrize("name", COMPONENTS)
def test_record_oracle_runs_on_its_made_inputs(name):
    rec, config = record(name), DEFAULT_CONFIG
    conv = rec.canonical
    params = init_params(name, config, conv, seed=1)
    assert set(params) == set(rec.layout(config, conv)) == set(param_shapes(name, config))
    for index, shape in enumerate((*CALLS, Shape(batch=2, lq=4, lk=4, lengths=(4, 2)))):
        inputs = make_inputs(name, config, np.random.default_rng(index), shape)
        made = set(inputs)
        assert set(rec.required) <= made, f"{name}: the builder left out a required input"
        assert made <= {i.name for i in rec.inputs}, f"{name}: an undeclared input"
        out = expected(name, inputs, params, config, conv)
        assert out.dtype == np.float64 and out.shape == rec.shape_of(inputs, config)
        keep_nan = conv.fully_masked_rows == "nan"
        assert keep_nan or np.isfinite(out).all(), f"{name}: the oracle gave NaN or inf"


def test_spec_lists_every_component_under_its_forward_multiplier():
    """SPEC.md §10.7 names each component once, under the k its record's tolerance class
    gives: the list is read by people choosing a bound, so a component added later must
    appear there too."""
    section = (ROOT / "SPEC.md").read_text("utf-8").split("### §10.7 ", 1)[1]
    block = section.split("```", 2)[1]
    listed: dict[str, float] = {}
    k = None
    for line in block.splitlines():
        head = re.match(r"\s*(?:k\s*)?=\s*(\d+)\s+(.*)", line)
        if line.lstrip().startswith("floor"):
            break
        if head:
            k, line = float(head.group(1)), head.group(2)
        for name in re.findall(r"[a-z][a-z0-9_]*", line) if k is not None else ():
            assert name not in listed, f"§10.7 lists {name} twice"
            listed[name] = k
    assert listed == {name: k_forward(name) for name in COMPONENTS}


def test_tables_read_from_the_records():
    for name, rec in RECORDS.items():
        assert INPUTS[name] == (rec.required, rec.optional)
        assert OUTPUTS[name] == rec.output
        assert FIELDS[name] == rec.fields
        assert k_forward(name) in (5.0, 32.0)
        assert (
            k_gradient(name, "anything-else")
            == {"other": 64.0, "query": 25.0}[rec.gradient_default]
        )
    assert tagged("kv_cache") == ("causal_self_attention", "decoder_block", "causal_lm")
    assert of_family("decoder-only") == (
        "causal_self_attention",
        "gated_ffn",
        "decoder_block",
        "causal_lm",
    )
    # what tck bench times is checked row by row: §10.2 batch independence, or for the
    # decoder-only family its batch-row checks (§11.8; gated_ffn's rows: not yet on their own)
    assert set(tagged("bench")) <= set(tagged("batched")) | set(of_family("decoder-only"))
    assert all(record(name).cost is not None for name in tagged("bench"))


@pytest.mark.parametrize(
    "call",
    [
        lambda: record("nope"),
        lambda: expected("nope", {}, None, DEFAULT_CONFIG, RECORDS["mha"].canonical),
        lambda: make_inputs("nope", DEFAULT_CONFIG, np.random.default_rng(0)),
        lambda: param_shapes("nope", DEFAULT_CONFIG),
        lambda: k_forward("nope"),
    ],
)
def test_unknown_component_is_a_clear_error(call):
    with pytest.raises(ValueError, match=r"unknown component 'nope'; the components are: emb"):
        call()


def test_unknown_tag_or_family_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown tag 'fast'; the tags are: " + TAGS[0]):
        tagged("fast")
    with pytest.raises(ValueError, match="unknown family 'rnn'"):
        of_family("rnn")


def test_a_record_refuses_unknown_vocabulary():
    with pytest.raises(ValueError, match="input 'x': kind 'uniform' is not one of"):
        Input("x", "uniform")
    with pytest.raises(ValueError, match="area 'norms' is not one of"):
        dataclasses.replace(RECORDS["layer_norm"], name="ln2", area="norms")
    with pytest.raises(ValueError, match="no clauses"):
        dataclasses.replace(RECORDS["layer_norm"], name="ln2", clauses=())


class _Doubling(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 2.0 * x


def test_a_record_added_at_runtime_is_picked_up(monkeypatch):
    """The bridge functions find a component through its record alone: a test-only
    'scaled_x' (2x, no parameters) gets inputs, an oracle output, a layout, tolerances and
    a torch reference module."""
    scaled = Component(
        name="scaled_x",
        level="op",
        family="transformer",
        clauses=("0.1",),
        inputs=(Input("x", "normal", ("B", "Lq", "D")),),
        output="[B, L, D]",
        oracle=lambda i, p, c, conv: 2.0 * np.asarray(i["x"], dtype=np.float64),
        layout=lambda c, conv: {},
        module=lambda c, conv, dropout: _Doubling(),
        area="ffn",
    )
    monkeypatch.setitem(components_module.RECORDS, "scaled_x", scaled)
    inputs = make_inputs("scaled_x", DEFAULT_CONFIG, np.random.default_rng(0), Shape(lq=3))
    assert inputs["x"].shape == (2, 3, DEFAULT_CONFIG.d_model)
    out = expected("scaled_x", inputs, None, DEFAULT_CONFIG, scaled.canonical)
    np.testing.assert_array_equal(out, 2 * inputs["x"])
    assert param_shapes("scaled_x", DEFAULT_CONFIG) == {}
    assert k_forward("scaled_x") == 5.0 and k_gradient("scaled_x", "x") == 64.0
    module = build("scaled_x", DEFAULT_CONFIG)
    x = torch.ones(2, dtype=torch.float64)
    torch.testing.assert_close(module(x), 2 * x)
