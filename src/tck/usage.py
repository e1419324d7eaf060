"""What every ``tck`` subcommand shares about bad input: the bottom floor (imports nothing of
ours, so any floor may use it).

A usage error is one line on stderr and exit status 2 (``tck.cli.main`` prints it);
``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

INTERRUPTED = 128 + signal.SIGINT  # the shell's status for a process ended by Ctrl-C: 130

# How to install what an optional part needs, from a checkout: the one wording that the
# adapters' errors, tck list and the README give (tests/project/test_docs.py holds them equal).
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


# ----------------------------------------------------------------- files a user hands us

# A results.json of a real-size run is a few MB; a map or a config is a few kB. The bound
# is far above both and far below what a reader can hold (json builds ~10 bytes of objects
# per byte of text).
MAX_JSON_BYTES = 64 * 2**20
# Nothing tck writes or reads nests deeper than ~10 levels; Python's json parser recurses
# once per level (RecursionError near 1000), and so do the checks that walk a document.
MAX_JSON_DEPTH = 64


def read_user_file(
    path: str | os.PathLike[str],
    *,
    what: str,
    hint: str,
    limit: int,
    error: type[Exception] = UsageError,
) -> bytes:
    """The bytes of a file a user named: a regular file of at most ``limit`` bytes, read
    with that bound. Anything else is ``error(f"{what}: <the problem>; {hint}")``, at once:
    a device (``/dev/zero``), a named pipe (opened without blocking, so never waited on),
    a folder, a file over the limit or one that grows past it while read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{what}: no such file; {hint}") from None
    except OSError as err:
        raise error(f"{what}: cannot be read ({err.strerror or err}); {hint}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what}: not a regular file (a {_kind(info.st_mode)}); {hint}")
        if info.st_size > limit:
            raise error(f"{what}: {info.st_size} bytes, over the {limit}-byte limit; {hint}")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, min(2**20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise error(f"{what}: grew past the {limit}-byte limit while read; {hint}")
        return b"".join(chunks)
    except OSError as err:
        raise error(f"{what}: cannot be read ({err.strerror or err}); {hint}") from None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "named pipe"), (stat.S_ISCHR, "device"))
    kinds += ((stat.S_ISBLK, "device"), (stat.S_ISSOCK, "socket"))
    return next((name for test, name in kinds if test(mode)), "special file")


def read_user_json(
    path: str | os.PathLike[str],
    *,
    what: str,
    hint: str,
    limit: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    error: type[Exception] = UsageError,
) -> Any:
    """The JSON value of a file a user named (results.json, a baseline, a map, a
    config.json), bounded in size (``read_user_file``) and in nesting: a document nested
    deeper than ``max_depth`` is refused before it is parsed, so no parser or walker of it
    recurses without bound. Every problem is one ``error`` naming ``what``."""
    data = read_user_file(path, what=what, hint=hint, limit=limit, error=error)
    too_deep = f"{what}: JSON nested deeper than the {max_depth} levels allowed; {hint}"
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise error(f"{what}: not UTF-8 text ({err.reason} at byte {err.start}); {hint}") from None
    except RecursionError:  # the parser's own bound (about 1000 levels) was reached first
        raise error(too_deep) from None
    except ValueError as err:  # json.JSONDecodeError, or a number of too many digits
        raise error(f"{what}: not valid JSON ({str(err)[:200]}); {hint}") from None
    if json_depth(value) > max_depth:
        raise error(too_deep)
    return value


def json_depth(value: Any) -> int:
    """How deeply lists and dicts nest in a parsed JSON value (a scalar: 0), counted with a
    stack of our own: no recursion, so any depth the parser accepted is measured."""
    deepest = 0
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list)))
    return deepest
