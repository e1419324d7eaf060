"""Peak memory of ``tck run`` against an adapter that prints N MB per call: the figure
docs/reliability.md quotes (captured output is bounded while it is captured).

    python scripts/capture_memory.py 0 10 20        # MB printed per call, one run each

Each run is ``tck run --adapter faulty_adapter:adapter --only layer_norm -n 0`` (one
process: its peak resident set is the run's) with TCK_FAULT=chatty; the peak comes from
``getrusage(RUSAGE_CHILDREN)`` after the run, which covers every process it waited for.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[1] / "tests" / "support"


def peak_mb(mb_per_call: int, workers: str = "0") -> tuple[float, int]:
    """(peak resident MB, exit status) of one run in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            **os.environ,
            "PYTHONPATH": str(SUPPORT),
            "TCK_FAULT": "chatty",
            "TCK_CHATTY_MB": str(mb_per_call),
            "TCK_FAULT_ONCE": str(Path(tmp) / "fired"),
        }
        code = (
            "import resource, subprocess, sys;"
            "p = subprocess.run(sys.argv[1:], capture_output=True);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.returncode)"
        )
        command = [sys.executable, "-m", "tck", "run", "--adapter", "faulty_adapter:adapter"]
        command += ["--only", "layer_norm", "--out", str(Path(tmp) / "out"), "-n", workers]
        out = subprocess.run(
            [sys.executable, "-c", code, *command], env=env, cwd=tmp, capture_output=True, text=True
        )
        kilobytes, status = out.stdout.split()
        return int(kilobytes) / 1024, int(status)


if __name__ == "__main__":
    del resource  # the measuring happens in the child interpreter
    for arg in sys.argv[1:] or ["0", "10"]:
        peak, status = peak_mb(int(arg))
        print(f"{arg} MB per call: peak {peak:.0f} MB (exit {status})")
