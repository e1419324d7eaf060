"""``tck run`` in a child forked from the test process: the same command a user runs, without
paying for a new interpreter each time.

A detection run is one ``tck run`` per mutant and per seed (146 of them). As subprocesses each
one imported torch, numpy, hypothesis and the suite again (twice: the ``tck`` process and its
pytest-xdist worker), which cost more than the checks. Here the test process imports them
once and each run is ``tck.cli.main`` in a fork of it, ``-n 0`` (the fork is the
worker: a crash in it is this run's, not the test process's), with its own stdout, stderr and
working folder, a deadline, and ``os._exit`` so that nothing of the parent's pytest session
runs twice. The check modules of ``tck.conformance`` (``test_*.py``) are imported once here
too, under this pytest session's assertion rewriting (the same rewrite each run's own pytest
would make: pytest rewrites every ``test_*.py``); each run's collection then finds them in
``sys.modules`` instead of parsing, rewriting and compiling 17 modules again (about 0.4 CPU s
a run; a run whose modules were not rewritten here imports them itself, as before).

What each run would otherwise repeat is done once here (measured in
tests/detection/test_detection.py's docstring): matplotlib and the report modules are
imported before the fork, and
``gc.freeze()`` moves everything loaded so far out of the collector's generations, so that the
children's collections (pytest's at session end, hypothesis') do not walk torch's objects
again in every run. ``html=False`` writes results.json and junit.xml but not index.html: the
detection tests read results.json only, and the HTML report (three matplotlib plots, a few
CPU seconds a run) is tested by tests/reports/test_reports.py.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

# What torch and tck import lazily, at a run's first call that needs it, is imported here
# once instead of in every run: torch.fx's symbolic_shapes (and sympy under it) comes with
# the first backward or torch._check (nn.MultiheadAttention checks its key padding mask with
# one), 0.4 to 0.7 CPU s of a seed run (5 to 7 %); jsonschema validates each results.json.
import jsonschema  # noqa: F401
import torch.fx.experimental.symbolic_shapes  # noqa: F401

from tck.cli import main  # loaded once here, before any fork
from tck.conformance.runner import cli
from tck.reports import html as _html  # noqa: F401  (loaded once: jinja2 and the templates)
from tck.reports import junit_xml
from tck.reports.files import atomic_write
from tck.reports.plots import _pyplot

_pyplot()  # matplotlib and pyplot, loaded once


def _preload_checks() -> list[str]:
    """Import the check modules of ``tck.conformance`` now, if this pytest session rewrites
    their asserts (it does for every ``test_*.py``); the names imported. A module that comes
    back unrewritten is dropped again, so that each run imports it under its own pytest."""
    import importlib
    import pkgutil

    from tck.conformance import checks

    loaded = []
    for info in pkgutil.iter_modules(checks.__path__):
        if not info.name.startswith("test_"):
            continue
        name = f"{checks.__name__}.{info.name}"
        fresh = name not in sys.modules
        module = importlib.import_module(name)
        if "@pytest_ar" in vars(module):
            loaded.append(name)
        elif fresh:
            del sys.modules[name]
    return loaded


PRELOADED = _preload_checks()


def _junit_only(document: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """write_reports without index.html (``tck_run(html=False)``)."""
    out = Path(out_dir)
    paths = {"html": out / "index.html (not rendered: html=False)", "junit": out / "junit.xml"}
    atomic_write(paths["junit"], junit_xml(document))
    return paths


def tck_run(args: list[str], *, cwd: Path, log: Path, timeout_s: float, html: bool = True) -> int:
    """``tck run ARGS -n 0`` in a forked child; its exit status. stdout and stderr go to
    ``log``; past ``timeout_s`` the child is killed and the status is -SIGKILL. With
    ``html=False`` the run writes no index.html."""
    sys.stdout.flush()
    sys.stderr.flush()
    gc.collect()
    gc.freeze()  # the children inherit a frozen heap: their collections skip it
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            if not html:
                cli.write_reports = _junit_only
            os.chdir(cwd)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = sys.stderr = open(fd, "w", buffering=1, encoding="utf-8")
            code = main(["run", *args, "-n", "0"])
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            _cpu_line(log, usage)
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL
        time.sleep(0.05)


def _cpu_line(log: Path, usage: Any) -> None:
    """The run's CPU seconds, last line of its log (what tests/detection/test_detection.py's timings
    were measured with: wall time means little on a shared machine)."""
    with open(log, "a", encoding="utf-8") as out:
        out.write(
            f"tck_run: CPU {usage.ru_utime + usage.ru_stime:.2f} s "
            f"(user {usage.ru_utime:.2f}, sys {usage.ru_stime:.2f})\n"
        )


def run_tck(args: list[str], cwd: Path, timeout_s: float = 900.0) -> subprocess.CompletedProcess:
    """``python -m tck run ARGS`` in a child process from ``cwd``, its output captured (the
    tests that read the exit code and the printed lines, not a log file)."""
    return subprocess.run(
        [sys.executable, "-m", "tck", "run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
