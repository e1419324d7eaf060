"""The manual's "Point tck at your decoder-only model" (docs/guide/adapters.md): its snippet,
executed verbatim, is a working adapter of at most 15 lines with no failure; a copy with one
wrong line fails, and a copy whose output is scaled by 1.5 fails oracle equality (such a copy
once passed)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

MANUAL = Path(__file__).resolve().parents[2] / "docs" / "guide" / "adapters.md"
SECTION = "## Point tck at your decoder-only model"
ADAPTER_MARKER = "# ---- the adapter"
MAX_ADAPTER_LINES = 15

pytestmark = pytest.mark.spec("11.1", "11.4")


def _snippet() -> str:
    text = MANUAL.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/guide/adapters.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, f"expected one python block in {SECTION!r}, found {len(blocks)}"
    return blocks[0]


def _run(tmp_path: Path, source: str) -> dict[str, Any]:
    """``python -m tck run --adapter my_block:adapter`` (the manual's command) on ``source``."""
    (tmp_path / "my_block.py").write_text(source, encoding="utf-8")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tck",
            "run",
            "--adapter",
            "my_block:adapter",
            "-n",
            "0",
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    results = out / "results.json"
    assert results.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(results.read_text(encoding="utf-8"))
    document["returncode"] = done.returncode
    return document


def _failed(document: dict[str, Any]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for r in document["results"]:
        if r["status"] == "fail":
            found.setdefault(r["check"], set()).add(r["diagnosis"]["code"])
    return found


def test_adapter_is_at_most_15_lines() -> None:
    adapter = _snippet().split(ADAPTER_MARKER, 1)[1].splitlines()[1:]
    code = [line for line in adapter if line.strip() and not line.strip().startswith("#")]
    assert len(code) <= MAX_ADAPTER_LINES, "\n".join(code)
    assert "TorchModuleAdapter(" in "\n".join(code)


def test_snippet_runs_with_no_failure(tmp_path: Path) -> None:
    document = _run(tmp_path, _snippet())
    summary = document["summary"]
    assert document["returncode"] == 0 and summary["failed"] == 0 and summary["errors"] == 0
    passed = {r["check"] for r in document["results"] if r["status"] == "pass"}
    assert {"equality.oracle", "decoder.oracle_lengths", "decoder.causal_no_leak"} <= passed
    # the checks of unpadded calls: every causal subject takes them (SPEC.md §10.1, §10.2, §3.1)
    assert {"decoder.batch_rows_same_length", "decoder.instance_reuse"} <= passed
    skipped = {r["check"] for r in document["results"] if r["status"] == "skip"}
    assert {"decoder.kv_cache", "decoder.left_padding"} <= skipped  # no step, no padding


@pytest.mark.parametrize(
    ("wrong", "check", "code"),
    [
        # the output scaled by 1.5: oracle equality must see it
        (
            ("forward=lambda block, x: block(x),", "forward=lambda block, x: 1.5 * block(x),"),
            "equality.oracle",
            None,
        ),
        # exact GELU where GPT-2's tanh GELU is canonical
        (('nn.GELU(approximate="tanh")', "nn.GELU()"), "equality.oracle", "ffn.activation_gelu"),
        # the mask's triangle transposed: the future leaks
        (("torch.tril(torch.ones(block_size", "torch.triu(torch.ones(block_size"), None, None),
        # the scores scaled by 1/sqrt(d_model): the two-token probe inside the block reads it
        (
            ("(1.0 / math.sqrt(k.size(-1)))", "(1.0 / math.sqrt(C))"),
            "decoder.effective_scale",
            "attention.scale_wrong",
        ),
    ],
    ids=["scaled_1.5", "exact_gelu", "triu_mask", "scale_d_model"],
)
def test_one_wrong_line_fails(tmp_path: Path, wrong: tuple[str, str], check, code) -> None:
    snippet = _snippet()
    old, new = wrong
    assert snippet.count(old) == 1, old
    document = _run(tmp_path, snippet.replace(old, new))
    failed = _failed(document)
    assert document["returncode"] == 1 and failed, document["summary"]
    if check is not None:
        assert check in failed, failed
    if code is not None:
        assert code in failed[check], failed
    if "triu" in new:
        assert "mask.causal_leak" in failed.get("decoder.causal_no_leak", set()), failed
