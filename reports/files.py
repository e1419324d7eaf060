"""Report files written whole or not at all, and only over files tck wrote.

``atomic_write`` writes a temporary file in the same folder and renames it over the target:
a reader (or a run killed half-way) sees the old file or the new one, never a truncated
one. ``foreign_files`` names the files of a folder that tck would replace but did not
write, so that ``tck run --out .`` never overwrites someone's ``index.html``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# What each file tck writes holds near its start, and no other file is likely to.
MARKERS = {
    "results.json": '"schema"',
    "index.html": 'name="generator" content="transformer-tck"',
    "junit.xml": '<testsuites name="tck ',
    "scoreboard.html": 'name="generator" content="transformer-tck"',
}


def atomic_write(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp makes the file private (0600); a report gets the mode any new file of the
        # user's gets (0666 less the umask), so a shared or served folder can read it
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _umask() -> int:
    """The process' umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def remove_reports(folder: str | Path) -> None:
    """Remove the report files tck wrote in ``folder`` (MARKERS' names; a file of the same
    name that tck did not write stays), then the folder if nothing else is left in it."""
    folder = Path(folder)
    for name in MARKERS:
        path = folder / name
        if path.is_file() and written_by_tck(path):
            path.unlink()
    try:
        folder.rmdir()
    except OSError:  # missing, or holding something else
        pass


def written_by_tck(path: Path) -> bool:
    """Is ``path`` (one of MARKERS' names) a file tck wrote? Missing files count as ours."""
    marker = MARKERS.get(path.name)
    if marker is None or not path.exists():
        return True
    if not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(4096).decode("utf-8", "replace")
    except OSError:
        return False
    if (
        path.name == "index.html" and "<title>tck conformance report" in head
    ):  # pages of earlier tck versions
        return True
    return marker in head


def foreign_files(folder: str | Path, names: tuple[str, ...] = tuple(MARKERS)) -> list[Path]:
    """The files among ``names`` in ``folder`` that exist and that tck did not write."""
    return [Path(folder) / n for n in names if not written_by_tck(Path(folder) / n)]
