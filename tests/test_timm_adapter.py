"""timm.vit: with timm and a torchvision built for the installed torch (tox -e timm), the
whole suite runs with 0 failures and the fingerprint agrees with what the adapter declares;
without them, ``tck run --adapter timm.vit`` stops with one line saying why (exit 2).

torchvision from the package index cannot load beside the CPU torch 2.13.0 build the other
envs pin, so ``tox -e timm`` installs torch 2.14.1 and torchvision 0.29.1 with their own
constraints (constraints-timm.txt) and sets TCK_REQUIRE_TIMM=1: there a timm that does not
import fails the env instead of skipping it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_fingerprint_cli import assert_agrees

from tck.cli import main
from tck.conformance.fingerprint_cli import build_fingerprint


def tck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tck", *args], capture_output=True, text=True, timeout=900
    )


def timm_import_error() -> str | None:
    """Why timm does not import here, or None when it does."""
    try:
        import timm  # noqa: F401
    except Exception as err:  # missing, or a torchvision built for another torch
        return f"{type(err).__name__}: {err}"
    return None


@pytest.fixture(scope="module")
def timm_available() -> None:
    why = timm_import_error()
    if why is None:
        return
    if os.environ.get("TCK_REQUIRE_TIMM"):
        pytest.fail(f"TCK_REQUIRE_TIMM is set but timm does not import: {why}")
    pytest.skip(f"timm (and a matching torchvision) not importable: {why}")


@pytest.mark.skipif(
    timm_import_error() is None, reason="timm imports here: test_timm_runs_with_no_failure"
)
def test_timm_unavailable_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that could check nothing stops (exit 2), naming the reason in one line."""
    proc = tck("run", "--adapter", "timm.vit", "--out", str(tmp_path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "timm.vit needs timm" in lines[0], proc.stderr
    assert "torchvision" in lines[0]
    assert main(["list"]) == 0
    assert "timm.vit\t(unavailable: " in capsys.readouterr().out


@pytest.mark.spec("0.3", "9.1", "9.4")
def test_timm_runs_with_no_failure(timm_available: None, tmp_path: Path) -> None:
    proc = tck("run", "--adapter", "timm.vit", "--out", str(tmp_path))
    document = json.loads((tmp_path / "results.json").read_text())
    bad = [
        f"{r['check']}[{r['subject']}]: {r['diagnosis']}"
        for r in document["results"]
        if r["status"] in ("fail", "error")
    ]
    assert proc.returncode == 0 and not bad, "\n".join(bad)
    summary = document["summary"]
    assert summary["passed"] > 100, summary  # the whole suite ran, not a handful of checks
    assert_agrees("timm.vit", build_fingerprint(document))
