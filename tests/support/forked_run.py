"""``tck run`` in a child forked from the test process: the same command a user runs, without
paying for a new interpreter each time.

A detection run is one ``tck run`` per mutant and per seed (72 of them). As subprocesses each
one imported torch, numpy, hypothesis and the suite again (twice: the ``tck`` process and its
pytest-xdist worker), which cost more than the checks. Here the test process imports them
once and each run is ``tck.cli.main`` in a fork of it, ``-n 0`` (the fork is the
worker: a crash in it is this run's, not the test process's), with its own stdout, stderr and
working folder, a deadline, and ``os._exit`` so that nothing of the parent's pytest session
runs twice. The test modules of ``tck.conformance`` are not imported before the fork, so each
run imports them itself under its own pytest's assertion rewriting, as a subprocess would.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from pathlib import Path

from tck.cli import main  # loaded once here, before any fork


def tck_run(args: list[str], *, cwd: Path, log: Path, timeout_s: float) -> int:
    """``tck run ARGS -n 0`` in a forked child; its exit status. stdout and stderr go to
    ``log``; past ``timeout_s`` the child is killed and the status is -SIGKILL."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
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
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL
        time.sleep(0.05)
