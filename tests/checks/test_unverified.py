"""Nothing unmeasured passes (SPEC.md §10.11), and params.count counts what the module holds
(SPEC.md §10.3): an oracle check that compared only length-1 calls, or a causal subject with
no unpadded causal call, is ``unverified``; an extra LayerNorm changes the count."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from torch import nn

from tck.adapters import TorchEntry, TorchModuleAdapter, Unsupported
from tck.adapters.mutants import tutorial
from tck.adapters.reference import entry
from tck.conformance.toolkit.verified import call_facts, unverified_reason
from tck.reference import Config, canonical_conventions
from tck.reports import write_reports

pytestmark = pytest.mark.spec("10.11", "10.3")


def _call(seq_len: int | None, causal: bool = False, padded: bool = False) -> dict:
    return {"seq_len": seq_len, "passed": True, "causal": causal, "padded": padded}


def test_length_one_only_is_unverified() -> None:
    assert "more than one token" in unverified_reason("mha", [_call(1), _call(1)])
    assert unverified_reason("mha", []) is not None
    assert unverified_reason("mha", [_call(1), _call(5)]) is None
    assert unverified_reason("vit", [_call(None)]) is None  # images: many patch tokens


def test_causal_needs_an_unpadded_causal_call() -> None:
    padded_only = [_call(5), _call(13, causal=True, padded=True)]
    assert "causal" in unverified_reason("mha", padded_only)
    assert unverified_reason("mha", [*padded_only, _call(9, causal=True)]) is None
    # a decoder is causal in every call: its unpadded calls must include one of length > 1
    assert "causal" in unverified_reason("decoder", [_call(5, True, True), _call(1, True)])
    assert unverified_reason("decoder", [_call(5, True, False)]) is None


def test_call_facts() -> None:
    keep = np.array([[True, True, False]])
    assert call_facts("mha", {"key_padding": keep, "causal": np.array(True)}) == {
        "causal": True,
        "padded": True,
    }
    assert call_facts("mha", {"key_padding": keep[:, :2]}) == {"causal": False, "padded": False}
    assert call_facts("decoder", {"x": np.zeros((1, 2, 3))})["causal"]
    ids = {"src_ids": np.array([[3, 4, 0]]), "tgt_ids": np.array([[5, 6]])}
    assert call_facts("seq2seq", ids, Config(padding_idx=0))["padded"]


_REFERENCE = entry("mha", canonical_conventions("mha"))


def _short_only(module: nn.Module, **inputs):
    if inputs["query"].shape[1] > 1:
        raise Unsupported("this subject takes one query at a time")
    return _REFERENCE.forward(module, **inputs)


# an mha that answers only length-1 queries: every call it accepts agrees with the oracle
short = TorchModuleAdapter(
    "short-only", [TorchEntry("mha", make=_REFERENCE.make, forward=_short_only)]
)


def test_length_one_pass_is_reported_unverified(tmp_path: Path, monkeypatch) -> None:
    from tck.conformance.runner.cli import run_checks
    from tck.reports import load_results

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))
    out = tmp_path / "out"
    results = run_checks(
        ["--pyargs", "tck.conformance.checks.test_equality", "-k", "test_oracle"],
        adapter_spec="test_unverified:short",
        out=out,
        workers="0",
    )
    assert results is not None
    document = load_results(out)
    [row] = [r for r in document["results"] if r["check"] == "equality.oracle"]
    assert row["status"] == "unverified", row
    assert row["diagnosis"]["code"] == "verify.unmeasured"
    assert document["summary"]["unverified"] == 1 and document["summary"]["passed"] == 0
    paths = write_reports(document, out)
    html = Path(paths["html"]).read_text(encoding="utf-8")
    assert "1 unverified" in html and "status-unverified" in html
    junit = Path(paths["junit"]).read_text(encoding="utf-8")
    assert "unverified: no oracle comparison ran with more than one token" in junit
    assert json.loads(results.read_text())["summary"]["unverified"] == 1


class _ExtraNorm(tutorial.EncoderLayer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.extra = nn.LayerNorm(args[0])  # held, never used, not in the map


def test_count_is_what_the_module_holds() -> None:
    config = Config(d_model=16, n_heads=2, d_ff=24)
    clean = tutorial.encoder_layer_entry()
    extra = tutorial.encoder_layer_entry(_ExtraNorm)
    counts = []
    for subject_entry in (clean, extra):
        adapter = TorchModuleAdapter("a", [subject_entry])
        handle = adapter.build(adapter.subjects()[0], config, seed=0)
        mapped = sum(v.size for v in adapter.params(handle).values())
        counts.append((mapped, adapter.param_count(handle)))
    assert counts[0][0] == counts[1][0]  # params() cannot see the extra norm
    assert counts[1][1] == counts[0][1] + 2 * config.d_model  # the module's count does
    assert counts[0][1] == counts[0][0]


def test_the_results_schema_knows_every_status():
    from tck.conformance.toolkit.results import STATUSES
    from tck.reports.schema import RESULT

    assert set(RESULT["properties"]["status"]["enum"]) == set(STATUSES)
