"""tck fingerprint: the conventions an implementation shows beside the ones its adapter
declares. It agrees with the declaration for the built-in correct adapters (the hf ones in
test_hf_adapters.py), and flags a mutant's bug as a mismatch."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from tck.adapters import load_adapter
from tck.cli import main
from tck.conformance.runner.fingerprint_cli import build_fingerprint
from tck.reference.catalogue import KEEP

MEASURED = ("agrees", "convention")


def fingerprint(*args: str, out: Path) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "tck", "fingerprint", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    path = out / "fingerprint.json"
    document = json.loads(path.read_text()) if path.exists() else {}
    return proc, document


def assert_agrees(adapter_name: str, document: dict[str, Any]) -> set[str]:
    """No mismatch, every declared value is the adapter's; returns the measured properties."""
    assert document["mismatches"] == 0 and document["errors"] == 0
    subjects = {s.name: s for s in load_adapter(adapter_name).subjects()}
    measured = set()
    for name, subject in document["subjects"].items():
        declared = subjects[name].conventions
        for prop, row in subject["properties"].items():
            assert row["status"] in (*MEASURED, "not measured"), (name, prop, row)
            if prop in {f.name for f in fields(declared)}:
                assert row["declared"] == getattr(declared, prop), (name, prop, row)
            if row["status"] in MEASURED:
                measured.add(prop)
                if prop == "attention_scale":  # a measured number: as close as the probe's rtol
                    assert row["shown"][0] == pytest.approx(row["declared"], rel=1e-5), row
                elif row["declared"] != "undefined":
                    assert row["declared"] in row["shown"], (name, prop, row)
    return measured


@pytest.mark.spec("0.3", "3.1", "4.1")
@pytest.mark.parametrize("adapter", ["reference", "torch.nn"])
def test_agrees_with_the_declared_conventions(adapter: str, tmp_path: Path) -> None:
    proc, document = fingerprint("--adapter", adapter, out=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    measured = assert_agrees(adapter, document)
    expected = {"attention_scale", "mask_polarity", "fully_masked_rows", "causal_alignment"}
    expected |= {"eps", "eps_placement", "variance", "norm_placement", "activation"}
    if adapter == "reference":
        expected |= {"pe_layout", "rope_layout", "pooling", "final_norm", "embedding_scale"}
    assert expected <= measured
    assert "mask_polarity" in proc.stdout and "0 mismatch(es)" in proc.stdout
    assert (tmp_path / "results.json").exists()  # the probes' own results, for tck report


@pytest.mark.spec("0.3", "3.1", "4.1", "5.1")
@pytest.mark.parametrize(
    ("mutant", "only", "prop", "shown"),
    [
        ("layer_norm_eps_ignored", "layer_norm", "eps", 1e-12),
        ("mask_polarity_inverted", "attention", "mask_polarity", "inverted (True = ignore)"),
        ("scale_d_model", "mha", "attention_scale", 1 / 24**0.5),
    ],
)
def test_a_mutant_shows_a_flagged_mismatch(
    mutant: str, only: str, prop: str, shown: Any, tmp_path: Path
) -> None:
    proc, document = fingerprint("--adapter", f"mutants.{mutant}", "--only", only, out=tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert document["mismatches"] >= 1
    row = document["subjects"][only]["properties"][prop]
    assert row["status"] == "mismatch", row
    assert row["shown"][0] == pytest.approx(shown) if isinstance(shown, float) else shown
    assert row["declared"] != row["shown"][0]
    assert "MISMATCH" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--adapter", "no_such_module:adapter"], "cannot import 'no_such_module'"),
        (["--adapter", "reference", "--only", "bogus"], "unknown component(s) bogus"),
        (["--adapter", "mutants.scale_d_model", "--only", "vit"], "offers no vit"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fingerprint", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def _result(check: str, status: str, metrics: dict, code: str = "") -> dict[str, Any]:
    return {
        "check": check,
        "subject": "s",
        "component": "mha",
        "status": status,
        "metrics": metrics,
        "diagnosis": {"code": code, "message": code},
    }


def test_rows_from_results() -> None:
    """Each probe's result becomes a row: declared, shown, and agreement."""
    document = {
        "adapter": {"name": "x", "conventions": {"s": {"fully_masked_rows": "nan"}}},
        "seed": 3,
        "results": [
            _result(
                "fingerprint.fully_masked_rows",
                "convention",
                {"field": "fully_masked_rows", "declared": "nan", "shown": ["nan"]},
            ),
            _result(
                "attention.effective_scale_per_head",
                "fail",
                {"effective_scale": 0.2, "expected_scale": 0.4},
                "attention.scale_wrong",
            ),
            _result("masks.polarity", "pass", {}),
            _result("fingerprint.causal_alignment", "skip", {}, "skip"),
            _result("equality.oracle", "pass", {}),  # not a probe: no row
        ],
    }
    rows = build_fingerprint(document)["subjects"]["s"]["properties"]
    assert set(rows) == {
        "fully_masked_rows",
        "attention_scale",
        "mask_polarity",
        "causal_alignment",
    }
    assert rows["fully_masked_rows"]["status"] == "convention"
    assert rows["attention_scale"] == {
        "declared": 0.4,
        "shown": [0.2],
        "canonical": 0.4,
        "status": "mismatch",
        "diagnosis": {"code": "attention.scale_wrong", "message": "attention.scale_wrong"},
    }
    assert rows["mask_polarity"]["shown"] == [KEEP] and rows["mask_polarity"]["status"] == "agrees"
    assert rows["causal_alignment"]["status"] == "not measured"
    assert rows["causal_alignment"]["shown"] is None
    assert build_fingerprint(document)["mismatches"] == 1
