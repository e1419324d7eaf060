"""benchmarks/check_profile.py (``real_size.py --per-check``): one JSON line per check with
its CPU seconds and resident memory, in the file $TCK_CHECK_PROFILE names; nothing written
without it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

CHECKS = """
def test_small():
    assert sum(range(10)) == 45

def test_allocates():
    import time

    block = bytearray(64 * 2**20)  # 64 MB, touched: resident while the check runs
    block[::4096] = b"x" * len(block[::4096])
    time.sleep(0.3)  # held for 15 of the sampler's 20 ms periods
    assert block[0] == ord("x")
"""


def _pytest(tmp_path: Path, profile: Path | None) -> None:
    (tmp_path / "test_two.py").write_text(CHECKS)
    env = {**os.environ, "PYTHONPATH": str(BENCHMARKS)}
    env.pop("TCK_CHECK_PROFILE", None)
    if profile is not None:
        env["TCK_CHECK_PROFILE"] = str(profile)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "check_profile",
        "-p",
        "no:cacheprovider",
    ]
    done = subprocess.run(
        [*command, "-n", "0", str(tmp_path / "test_two.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_one_line_per_check(tmp_path) -> None:
    profile = tmp_path / "checks.jsonl"
    _pytest(tmp_path, profile)
    rows = {r["check"]: r for r in map(json.loads, profile.read_text().splitlines())}
    assert set(rows) == {"test_small", "test_allocates"}
    for row in rows.values():
        assert row["cpu_s"] >= 0 and row["wall_s"] >= 0 and row["sys_s"] >= 0
    if sys.platform.startswith("linux"):  # /proc/self/statm
        grown = rows["test_allocates"]
        assert grown["rss_peak_gb"] >= grown["rss_start_gb"]
        assert grown["rss_peak_gb"] - grown["rss_start_gb"] > 0.03  # its 64 MB, sampled


def test_nothing_without_the_variable(tmp_path) -> None:
    _pytest(tmp_path, None)
    assert not list(tmp_path.glob("*.jsonl"))
