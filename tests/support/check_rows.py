"""One check module run through the tck plugin in-process, and its result rows: for tests of
what a check concludes on an adapter defined in a test module (``module:name``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def check_rows(
    out: Path, check_module: str, test: str, spec: str, *, only: list[str] | None = None
) -> list[dict[str, Any]]:
    """``tck.conformance.checks.<check_module>``'s ``test`` on the adapter ``spec``, no worker
    processes; the run's results (results.json) under ``out``. The caller puts the adapter's
    module on ``sys.path`` (``monkeypatch.syspath_prepend``)."""
    from tck.conformance.runner.cli import run_checks
    from tck.reports import load_results

    run_checks(
        ["--pyargs", f"tck.conformance.checks.{check_module}", "-k", test],
        adapter_spec=spec,
        out=out,
        workers="0",
        only=only,
    )
    return load_results(out)["results"]
