"""The ``tck`` command.

    tck run --adapter reference [--profile ci] [--out DIR] [--only mha,layer_norm] [--seed N]
    tck report DIR [DIR ...] [--out DIR]          (tck.conformance.runner.cli)
    tck list                                      (tck.conformance.runner.cli)
    tck fixtures verify|build                     (tck.fixtures.cli)
    tck fingerprint --adapter NAME                (tck.conformance.runner.fingerprint_cli)
    tck export-onnx --adapter NAME --subject S    (tck.conformance.runner.onnx_cli)
    tck bench --adapter torch.nn --device cpu     (tck.bench.cli)

The top floor: it imports each area's subcommand module and nothing imports it. Each
module registers its subcommands (``add_parser``/``add_parsers``) and their functions;
``main`` runs the one named and turns a usage error into one line on stderr and exit
status 2 (``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import sys

from tck.usage import INTERRUPTED, OneLineParser, UsageError


def build_parser() -> argparse.ArgumentParser:
    # imported here, not at the top: importing them (torch) takes seconds, and a Ctrl-C
    # meanwhile is main's to turn into exit status 130
    from tck.bench import cli as bench_cli
    from tck.conformance.runner import cli as conformance_cli
    from tck.conformance.runner import fingerprint_cli, onnx_cli
    from tck.fixtures import cli as fixtures_cli

    parser = OneLineParser(prog="tck", description=__doc__.split("\n\n")[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    conformance_cli.add_parsers(sub)  # tck run, tck report, tck list
    fixtures_cli.add_parser(sub)  # tck fixtures
    fingerprint_cli.add_parser(sub)  # tck fingerprint
    onnx_cli.add_parser(sub)  # tck export-onnx
    bench_cli.add_parser(sub)  # tck bench
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``tck`` command: its exit status. A Ctrl-C at any moment (while importing, while
    the workers start, while checks run) ends it with status 130 and no traceback; what a
    run had finished is kept (``tck run`` writes it to OUT/interrupted/)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("tck: interrupted", file=sys.stderr)
        return INTERRUPTED


def _main(argv: list[str] | None) -> int:
    from tck.adapters import AdapterError
    from tck.reports import ReportError
    from tck.reports.text import safe_str, visible

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error, already printed (2)
        return 0 if exit_.code in (0, None) else 2
    try:
        return args.func(args)
    except (UsageError, AdapterError, ReportError) as err:
        if args.debug:
            raise
        message = visible(safe_str(err)).replace("\n", " ")
        print(f"tck: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
