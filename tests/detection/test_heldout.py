"""The held-out diagnosis set: tutorial-style implementations the mutant
catalog has never seen (``tests/heldout``), each with one bug from a public report and the code
a user would want as its top cause, plus correct implementations in other styles.

``test_heldout_run`` runs ``tck run`` (ci profile, seed 0, ``--only`` the module's components)
on one module in a forked child (support/forked_run.py, as tests/detection/test_detection.py
does) and
writes ``OUT/<name>/results.json``; a buggy module must have at least one failure or error, a
correct one none. ``test_heldout_diagnosis_benchmark`` scores those files: the detection rate
(buggy modules with a failure or error), the top-cause accuracy (the run's first root cause,
``tck.conformance.diagnosis.diagnosis.top_cause``, equal to the label) and the false failures of the
correct modules; it prints a table and the rates and writes ``OUT/heldout_scores.json``. OUT is
``$TCK_HELDOUT_OUT`` or ``reports/out/heldout``. Both run under ``-m detection`` (``tox -e
detection``), the scoring in the second pytest call, after every run.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import heldout
import pytest
from support.forked_run import tck_run

from tck.reports.causes import root_causes, top_cause

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("TCK_HELDOUT_OUT", ROOT / "reports" / "out" / "heldout"))
PROFILE = "ci"
TIMEOUT_S = 300
# Top-cause accuracy is measured and printed; the bar it must clear (the goal is 0.9) is
# asserted only when set here, a decision left to the coordinator (see the report).
MIN_ACCURACY: float | None = None

detection = pytest.mark.detection


@pytest.fixture(autouse=True)
def _only_when_selected(request: pytest.FixtureRequest) -> None:
    """The runs take minutes: run them under ``-m detection`` or TCK_DETECTION=1."""
    if request.node.get_closest_marker("detection") is None:
        return
    selected = "detection" in (request.config.getoption("markexpr", "") or "")
    if not (selected or os.environ.get("TCK_DETECTION")):
        pytest.skip("held-out diagnosis runs: select them with -m detection (tox -e detection)")


def module(name: str) -> ModuleType:
    return importlib.import_module(f"heldout.{name}")


def bad_rows(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in document["results"] if r["status"] in ("fail", "error")]


def test_set_is_well_formed() -> None:
    """At least 15 buggy modules, each labelled and citing a source; 2 or more correct ones."""
    buggy = [n for n in heldout.NAMES if module(n).LABEL is not None]
    assert len(buggy) >= 15, buggy
    assert len(heldout.NAMES) - len(buggy) >= 2
    for name in heldout.NAMES:
        m = module(name)
        assert m.adapter.name == f"heldout.{name}"
        assert m.ONLY and all(isinstance(c, str) for c in m.ONLY)
        doc = m.__doc__ or ""
        assert ("source" in doc.lower()) or m.LABEL is None, f"{name} cites no source"


@detection
@pytest.mark.parametrize("name", heldout.NAMES)
def test_heldout_run(name: str) -> None:
    m = module(name)
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    results.unlink(missing_ok=True)
    log = out / "tck-run.log"
    args = ["--adapter", f"heldout.{name}:adapter", "--only", ",".join(m.ONLY)]
    args += ["--profile", PROFILE, "--seed", "0", "--out", str(out)]
    code = tck_run(args, cwd=out, log=log, timeout_s=TIMEOUT_S)
    if not results.exists():
        raise AssertionError(
            f"tck run on heldout.{name} wrote no results (exit {code}):\n"
            f"{log.read_text(encoding='utf-8', errors='replace')[-4000:]}"
        )
    document = json.loads(results.read_text(encoding="utf-8"))
    bad = bad_rows(document)
    if m.LABEL is None:
        assert not bad, f"{name} is correct but fails: " + "; ".join(
            f"{r['check']} [{r['subject']}]: {r['diagnosis']['code']}" for r in bad
        )
        assert document["summary"]["passed"] > 0
    else:
        assert bad, f"{name} ({m.LABEL}) was not detected: {document['summary']}"


def score(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per module: its label, the run's top cause, and the rates over the set."""
    rows = []
    for name, document in runs.items():
        label = module(name).LABEL
        bad = bad_rows(document)
        got = top_cause(document["results"])
        causes = [c["code"] for c in root_causes(document["results"])]
        rows.append(
            {
                "name": name,
                "label": label,
                "got": got,
                "detected": bool(bad),
                "ok": (got == label) if label is not None else not bad,
                "label_rank": causes.index(label) + 1 if label in causes else None,
                "causes": causes,
            }
        )
    buggy = [r for r in rows if r["label"] is not None]
    correct = [r for r in rows if r["label"] is None]
    return {
        "profile": PROFILE,
        "rows": rows,
        "buggy": len(buggy),
        "correct": len(correct),
        "detection_rate": sum(r["detected"] for r in buggy) / len(buggy),
        "accuracy": sum(r["ok"] for r in buggy) / len(buggy),
        "false_failures": [r["name"] for r in correct if r["detected"]],
        "misses": [
            {"name": r["name"], "label": r["label"], "got": r["got"]} for r in buggy if not r["ok"]
        ],
    }


def format_scores(scores: dict[str, Any]) -> str:
    width = max(len(r["name"]) for r in scores["rows"])
    lines = [f"{'name':{width}}  {'label':34}  {'got':40}  ok"]
    for r in scores["rows"]:
        label = r["label"] or "(correct: no failure)"
        got = r["got"] or "(no failure)"
        lines.append(f"{r['name']:{width}}  {label:34}  {got:40}  {'yes' if r['ok'] else 'NO'}")
    lines.append(
        f"held-out set: {scores['buggy']} buggy, {scores['correct']} correct; "
        f"detection rate {scores['detection_rate']:.0%}, "
        f"top-cause accuracy {scores['accuracy']:.0%} "
        f"({scores['buggy'] - len(scores['misses'])}/{scores['buggy']}), "
        f"false failures {len(scores['false_failures'])}"
    )
    return "\n".join(lines)


@detection
def test_heldout_diagnosis_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    """Scores the results.json files test_heldout_run wrote (tox -e detection runs it in its
    second pytest call, after every run): detection 100%, no false failure; accuracy printed."""
    missing = [n for n in heldout.NAMES if not (OUT / n / "results.json").exists()]
    assert not missing, f"no results.json for {missing}: the held-out runs did not all happen"
    runs = {
        n: json.loads((OUT / n / "results.json").read_text(encoding="utf-8")) for n in heldout.NAMES
    }
    scores = score(runs)
    (OUT / "heldout_scores.json").write_text(json.dumps(scores, indent=1) + "\n")
    with capsys.disabled():
        print("\n" + format_scores(scores))
    assert scores["detection_rate"] == 1.0, format_scores(scores)
    assert not scores["false_failures"], format_scores(scores)
    if MIN_ACCURACY is not None:
        assert scores["accuracy"] >= MIN_ACCURACY, format_scores(scores)
