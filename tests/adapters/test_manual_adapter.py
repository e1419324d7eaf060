"""The manual's "Point tck at your model" (docs/guide/adapters.md): its snippet, executed
verbatim, is a working adapter of at most 15 lines, and the command printed after it runs the
checks with no failure."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

MANUAL = Path(__file__).resolve().parents[2] / "docs" / "guide" / "adapters.md"
SECTION = "## Point tck at your model"
ADAPTER_MARKER = "# ---- the adapter"
MAX_ADAPTER_LINES = 15

pytestmark = pytest.mark.spec("0.2", "0.3")


def _blocks(language: str) -> list[str]:
    text = MANUAL.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/guide/adapters.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


def _snippet() -> str:
    blocks = _blocks("python")
    assert len(blocks) == 1, f"expected one python block in {SECTION!r}, found {len(blocks)}"
    return blocks[0]


def test_adapter_is_at_most_15_lines() -> None:
    snippet = _snippet()
    assert ADAPTER_MARKER in snippet, f"the snippet marks its adapter with {ADAPTER_MARKER!r}"
    adapter = snippet.split(ADAPTER_MARKER, 1)[1].splitlines()[1:]
    code = [line for line in adapter if line.strip() and not line.strip().startswith("#")]
    assert len(code) <= MAX_ADAPTER_LINES, "\n".join(code)
    assert "TorchModuleAdapter(" in "\n".join(code)


def test_snippet_runs_with_no_failure(tmp_path: Path) -> None:
    """Save the snippet as my_layer.py and run the manual's command from that folder:
    0 failed, 0 errors."""
    (tmp_path / "my_layer.py").write_text(_snippet(), encoding="utf-8")
    commands = [
        line.split("#", 1)[0].strip() for block in _blocks("sh") for line in block.splitlines()
    ]
    run = next(c for c in commands if c.startswith("python -m tck run "))
    argv = shlex.split(run)[1:]  # after "python"
    assert argv[:5] == ["-m", "tck", "run", "--adapter", "my_layer:adapter"], run
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, *argv, "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads((out / "results.json").read_text())
    summary = document["summary"]
    assert summary["failed"] == 0 and summary["errors"] == 0, summary
    assert summary["passed"] >= 20, summary
    checks = {r["check"] for r in document["results"] if r["status"] == "pass"}
    # The parameter map works (oracle equality ran) and the mask reached the softmax.
    assert {"equality.oracle", "masks.polarity", "masks.padding_invariance"} <= checks
    conventions = {r["check"] for r in document["results"] if r["status"] == "convention"}
    assert "fingerprint.fully_masked_rows" in conventions
