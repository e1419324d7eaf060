"""The ``tck`` command.

    tck run --adapter reference [--profile ci] [--out DIR] [--only mha,layer_norm] [--seed N]
    tck list

``tck run`` runs the checks of tck.conformance (as pytest, through the tck plugin) and
writes DIR/results.json. Exit status: 0 when nothing failed or errored, 1 otherwise,
2 on a usage error (one line on stderr; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

from tck.adapters import BUILTIN, DEFAULT_ADAPTER, AdapterError, load_adapter
from tck.reference import COMPONENTS

from .profiles import PROFILES


class UsageError(Exception):
    """Bad input on the command line: reported in one line, exit status 2."""


def default_out(adapter: str) -> Path:
    return Path("reports") / "out" / re.sub(r"[^A-Za-z0-9_.-]+", "_", adapter)


def _parse_only(only: str | None) -> list[str] | None:
    if not only:
        return None
    names = [n.strip() for n in only.split(",") if n.strip()]
    unknown = [n for n in names if n not in COMPONENTS]
    if unknown:
        raise UsageError(
            f"unknown component(s) {', '.join(unknown)} in --only; "
            f"choose from {', '.join(COMPONENTS)}"
        )
    return names


def _writable_dir(path: Path) -> Path:
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


def cmd_run(args: argparse.Namespace) -> int:
    import pytest

    adapter_spec = args.adapter
    adapter = load_adapter(adapter_spec)  # fail fast, before pytest starts
    only = _parse_only(args.only)
    if only is not None:
        offered = {s.component for s in adapter.subjects()}
        missing = [c for c in only if c not in offered]
        if missing:
            raise UsageError(
                f"adapter {adapter.name!r} offers no {', '.join(missing)}; "
                f"it offers {', '.join(sorted(offered))}"
            )
    out = _writable_dir(Path(args.out) if args.out else default_out(adapter_spec or adapter.name))
    pytest_args = [
        "--pyargs",
        "tck.conformance",
        "-p",
        "no:cacheprovider",
        f"--tck-adapter={adapter_spec or DEFAULT_ADAPTER}",
        f"--tck-out={out}",
        f"--tck-profile={args.profile}",
        f"--tck-seed={args.seed}",
        f"--tck-threads={args.threads}",
        "-q" if not args.verbose else "-v",
        "--no-header",
        "-p",
        "no:randomly",
        "--tb=no" if not args.verbose else "--tb=short",
        # hypothesis is imported before pytest starts: its modules cannot be rewritten
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    ]
    if only:
        pytest_args.append(f"--tck-only={','.join(only)}")
    code = pytest.main(pytest_args)
    results_path = out / "results.json"
    if not results_path.exists():
        print(
            f"tck: the run ended before writing results (pytest exit status {int(code)})",
            file=sys.stderr,
        )
        return 1
    document = json.loads(results_path.read_text())
    print(summary_text(document, results_path))
    summary = document["summary"]
    return 1 if summary["failed"] or summary["errors"] else 0


def summary_text(document: dict, path: Path) -> str:
    s = document["summary"]
    lines = [
        "",
        f"tck {document['adapter']['name']}: {s['passed']} passed, {s['failed']} failed, "
        f"{s['errors']} errors, {s['skipped']} skipped, {s['conventions']} conventions "
        f"({document['duration_s']:.1f} s, profile {document['profile']})",
    ]
    bad = [r for r in document["results"] if r["status"] in ("fail", "error")]
    for r in bad[:40]:
        lines.append(
            f"  {r['status'].upper():5} {r['check']} [{r['subject']}] "
            f"§{','.join(r['clause'])}: {r['diagnosis']['code']}: "
            f"{r['diagnosis']['message'][:300]}"
        )
    if len(bad) > 40:
        lines.append(f"  ... and {len(bad) - 40} more in {path}")
    conventions = Counter(
        (r["subject"], r["diagnosis"]["message"])
        for r in document["results"]
        if r["status"] == "convention"
    )
    for (subject, message), _ in sorted(conventions.items())[:20]:
        lines.append(f"  CONV  [{subject}] {message[:200]}")
    lines.append(f"results: {path}")
    return "\n".join(lines)


def cmd_list(args: argparse.Namespace) -> int:
    for name in BUILTIN:
        try:
            adapter = load_adapter(name)
        except AdapterError as err:
            print(f"{name}\t(unavailable: {err})")
            continue
        components = sorted({s.component for s in adapter.subjects()})
        print(f"{name}\t{' '.join(components)}")
    return 0


class _OneLineParser(argparse.ArgumentParser):
    """Usage errors in one line naming the problem (the default prints the usage too)."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="tck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the conformance checks against an adapter")
    run.add_argument(
        "--adapter",
        default=None,
        help=f"built-in ({', '.join(BUILTIN)}) or module:attr; default $TCK_ADAPTER or reference",
    )
    run.add_argument("--profile", default="ci", choices=PROFILES, help="hypothesis profile")
    run.add_argument("--out", default=None, help="results folder (default reports/out/ADAPTER)")
    run.add_argument("--only", default=None, help="comma-separated components")
    run.add_argument("--seed", default=0, type=int, help="seed of parameters and inputs")
    run.add_argument(
        "--threads",
        default=1,
        type=int,
        help="torch intra-op threads (default 1: the checks' tensors are tiny)",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="pytest's own report too")
    run.set_defaults(func=cmd_run)
    lst = sub.add_parser("list", help="list built-in adapters and their components")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error, already printed (2)
        return 0 if exit_.code in (0, None) else 2
    try:
        return args.func(args)
    except (UsageError, AdapterError) as err:
        if args.debug:
            raise
        print(f"tck: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
