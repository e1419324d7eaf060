"""What every ``tck`` subcommand shares about bad input: the bottom floor (imports nothing of
ours, so any floor may use it).

A usage error is one line on stderr and exit status 2 (``tck.cli.main`` prints it);
``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path

# How to install what an optional part needs, from a checkout: the one wording that the
# adapters' errors, tck list and the README give (tests/test_docs.py holds them equal).
INSTALL = {
    "hf": "python3 -m pip install -c constraints.txt -e '.[hf]'",
    "onnx": "python3 -m pip install -c constraints.txt -e '.[onnx]'",
    # timm imports torchvision, which needs a torch it was built for: an env of its own
    "timm": "python3 -m venv .venv-timm && . .venv-timm/bin/activate && "
    "python3 -m pip install -c constraints-timm.txt -e . timm",
}


class UsageError(Exception):
    """Bad input on the command line: reported in one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line naming the problem (the default prints the usage too)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def default_out(adapter: str) -> Path:
    """The results folder of a run of ``adapter`` when --out is not given."""
    return Path("reports") / "out" / re.sub(r"[^A-Za-z0-9_.-]+", "_", adapter)


def writable_dir(path: Path) -> Path:
    """``path``, created if missing, once a file can be written there; else a UsageError."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".tck-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UsageError(
            f"cannot write to --out {str(path)!r}: {err.strerror or err}; "
            "choose a writable directory"
        ) from None
    return path


def parse_only(
    only: str | None, components: Sequence[str], option: str = "--only"
) -> list[str] | None:
    """The components a comma-separated ``--only`` names, in its order; None when it is
    not given. A value that names none, or a name not in ``components``, is a UsageError
    naming ``option`` (``tck run --only``, the plugin's ``--tck-only``). ``components`` is
    ``tck.reference.COMPONENTS``, passed in so that this module stays at the bottom."""
    if only is None:
        return None
    names = [n.strip() for n in only.split(",") if n.strip()]
    if not names:
        raise UsageError(
            f"{option} {only!r} names no component; name some ({', '.join(components)}) "
            "or leave --only out to run them all"
        )
    unknown = [n for n in names if n not in components]
    if unknown:
        raise UsageError(
            f"unknown component(s) {', '.join(unknown)} in {option}; "
            f"choose from {', '.join(components)}"
        )
    return names
