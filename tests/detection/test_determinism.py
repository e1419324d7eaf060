"""The same profile and seed give the same results.json, apart from timestamps and timings:
two runs of the ci profile per adapter, each in a process with its own string-hash seed
(set, not random, so a difference can be rerun), compared in full (verdicts, diagnoses,
metrics, repros). Slow (tox -e determinism)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Python's string hashing (set and dict iteration order over strings) is the source of
# run-to-run differences a process can have; each run gets a different, stated seed.
RUNS = 2
pytestmark = pytest.mark.determinism


def normalised(path: Path) -> dict:
    document = json.loads(path.read_text())
    del document["started"], document["duration_s"]
    for result in document["results"]:
        del result["duration_s"]
    return document


def run(adapter: str, out: Path, workers: str = "0", hash_seed: int = 0) -> dict:
    command = ["run", "--adapter", adapter, "--profile", "ci", "--seed", "0", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "tck", *command, "-n", workers],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return normalised(out / "results.json")


def differences(a: dict, b: dict) -> list[str]:
    if a == b:
        return []
    found = [k for k in a if k != "results" and a[k] != b.get(k)]
    for x, y in zip(a["results"], b["results"], strict=False):
        if x != y:
            found.append(f"{x['check']}[{x['subject']}]: {x} != {y}")
    if len(a["results"]) != len(b["results"]):
        found.append(f"{len(a['results'])} results != {len(b['results'])}")
    return found[:5]


@pytest.mark.parametrize("adapter", ["reference", "torch.nn"])
def test_runs_with_other_hash_seeds_give_identical_results(adapter, tmp_path):
    first = run(adapter, tmp_path / "0")
    for i in range(1, RUNS):
        again = run(adapter, tmp_path / str(i), hash_seed=i)
        assert not differences(first, again), f"run {i + 1} (PYTHONHASHSEED={i})"


def verdicts(document: dict) -> list[tuple]:
    return [
        (r["check"], r["subject"], r["status"], r["diagnosis"]["code"]) for r in document["results"]
    ]


def test_worker_processes_give_the_same_verdicts(tmp_path):
    """Not the same bits: a process's memory layout may change float noise at 1e-16."""
    serial = run("reference", tmp_path / "serial")
    parallel = run("reference", tmp_path / "parallel", workers="2")
    assert verdicts(serial) == verdicts(parallel)
