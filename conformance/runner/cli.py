"""``tck run``, ``tck report`` and ``tck list`` (registered on the ``tck`` command by
tck.cli).

    tck run --adapter reference [--profile ci] [--out DIR] [--only mha,layer_norm] [--seed N]
        [--export onnx [--opset N]] [--device cpu|cuda|cuda:N] [--baseline OLD/results.json]
    tck report DIR [DIR ...] [--out DIR]
    tck list

``tck run`` runs the checks of tck.conformance (as pytest, through the tck plugin) and
writes DIR/results.json, DIR/index.html and DIR/junit.xml. ``tck report`` renders them
again from results.json, and with several folders a scoreboard across them. Exit status:
0 when every check ran and nothing failed or errored (with ``--baseline``: nothing new), 1
otherwise, 2 on a usage error (one line on stderr; ``--debug`` shows the traceback), 130
when interrupted (the partial results go to OUT/interrupted/, beside the complete ones).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rich.console import Console

from tck.adapters import BUILTIN, DEFAULT_ADAPTER, Adapter, AdapterError, load_adapter
from tck.adapters.devices import (
    DeviceError,
    adapter_devices,
    check_device,
    require_some_subject_on,
)
from tck.conformance.toolkit.results import write_results
from tck.reference import COMPONENTS
from tck.reports import load_results, write_reports, write_scoreboard
from tck.reports.files import foreign_files, remove_reports
from tck.reports.text import bounded, safe_str, visible
from tck.usage import UsageError, default_out, parse_only, writable_dir

from .baseline import apply_baseline, load_baseline, provenance, red, require_same_run
from .console import ProgressPlugin, print_summary
from .plugin import hand_over, results_path
from .profiles import PROFILES


def _bounded_int(name: str, low: int, high: int):
    """An argparse type: an integer in [low, high], else a one-line error."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{name} {number} is not between {low} and {high}")
        return number

    parse.__name__ = name
    return parse


def _timeout(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"--timeout {value} is not a positive number of seconds")
    return seconds


MAX_SEED = 2**32 - 1  # numpy and torch take any seed up to here, on every platform


def _workers(value: str) -> str:
    if value == "auto" or (value.isdigit() and int(value) <= 512):
        return value
    raise argparse.ArgumentTypeError(f"{value!r} is not a number of workers or 'auto'")


def checked_subjects(adapter: Adapter) -> list[Any]:
    """The adapter's subjects, or a one-line error: subjects() that raises or returns
    something else than Subjects, two subjects of one name."""
    from tck.adapters import Subject

    try:
        subjects = list(adapter.subjects())
    except (Exception, SystemExit) as err:
        raise UsageError(
            f"adapter {visible(safe_str(adapter.name))!r}: subjects() raised "
            f"{type(err).__name__}: {visible(safe_str(err))[:300]}; fix the adapter"
        ) from None
    for subject in subjects:
        if not isinstance(subject, Subject):
            raise UsageError(
                f"adapter {visible(safe_str(adapter.name))!r}: subjects() gave a "
                f"{type(subject).__name__}, not a tck.adapters.Subject; fix the adapter"
            )
    names = [s.name for s in subjects]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(
            f"adapter {visible(adapter.name)!r} offers more than one subject named "
            f"{', '.join(visible(repr(n)) for n in twice)}; give each subject its own name"
        )
    return subjects


def require_components(adapter: Adapter, only: list[str] | None) -> None:
    offered = {s.component for s in checked_subjects(adapter)}
    if only is None:
        return
    missing = [c for c in only if c not in offered]
    if missing:
        raise UsageError(
            f"adapter {adapter.name!r} offers no {', '.join(missing)}; "
            f"it offers {', '.join(sorted(offered))}"
        )


def require_device(
    adapter: Adapter, device: str, only: list[str] | None = None, *, export: str | None = None
) -> str:
    """``device`` if this machine has it and the adapter runs a (selected) subject there."""
    try:
        device = check_device(device)
        if device != "cpu" and export:
            raise UsageError(
                f"--export {export} runs ONNX Runtime on the CPU: drop --device {device}"
            )
        subjects = [s for s in adapter.subjects() if only is None or s.component in only]
        require_some_subject_on(adapter, device, subjects)
    except DeviceError as err:
        raise UsageError(str(err)) from None
    return device


def run_checks(
    selection: list[str],
    *,
    adapter_spec: str,
    out: Path,
    target: Mapping[str, str | None] | None = None,
    profile: str = "ci",
    seed: int = 0,
    threads: int | None = None,
    only: list[str] | None = None,
    workers: str = "1",
    timeout: float = 300,
    verbose: bool = False,
    export: str | None = None,
    opset: int | None = None,
    device: str = "cpu",
) -> Path | None:
    """Run the checks ``selection`` names (pytest arguments) through the tck plugin, with a
    progress bar; return OUT/results.json, or None (said on stderr) if the run wrote none.
    ``target``: load_adapter's model, component and map_path, passed as the plugin's
    options (pytest-xdist hands them to its workers): the environment is left as it is."""
    import pytest

    pytest_args = [
        *selection,
        "-p",
        "no:cacheprovider",
        f"--tck-adapter={adapter_spec}",
        f"--tck-out={out}",
        f"--tck-profile={profile}",
        f"--tck-seed={seed}",
        *([f"--tck-threads={threads}"] if threads is not None else []),
        "-p",
        "no:randomly",
        "-p",
        "no:benchmark",  # pytest-benchmark, where installed, warns under xdist
        # pytest's log capture attaches a handler to every non-propagating logger (torch has
        # dozens) three times per check: ~10% of a run. An adapter's warnings still reach the
        # check's captured stderr (logging's last-resort handler).
        "-p",
        "no:logging",
        # at its end pytest collects garbage to find exceptions raised in __del__ (~0.2 CPU s
        # a run over torch's heap); those still print to stderr
        "-p",
        "no:unraisableexception",
        # the plugin's capture keeps at most CAPTURE_LIMIT bytes of a check's output while
        # it runs; pytest's holds all of it until the check ends (conformance/runner/capture.py)
        "--capture=no",
        "--tck-capture=bounded",
        # no assertion rewriting: the checks report through CheckFailure, not bare asserts,
        # and rewriting the ~160 modules pytest would rewrite costs ~1.5 s a run (nothing
        # is cached: no bytecode is written, no_litter)
        "--assert=plain",
    ]
    if verbose:  # pytest's own report instead of the progress bar
        pytest_args += ["-v", "--tb=short"]
        plugins = []
    else:
        # Hypothesis formats the traceback of every failing example it shrinks through
        # pytest's repr_failure; pytest's own styles parse the source of each frame (~0.2 s
        # an example), the native one does not. Nobody reads these: the results carry the
        # diagnosis, and pytest's report goes to a buffer.
        pytest_args += ["-q", "--tb=native"]
        plugins = [ProgressPlugin(Console(stderr=True, emoji=False))]
    options = {"model": "--tck-model", "component": "--tck-component", "map_path": "--tck-map"}
    pytest_args += [f"{options[k]}={v}" for k, v in (target or {}).items() if v is not None]
    if only:
        pytest_args.append(f"--tck-only={','.join(only)}")
    if export:
        pytest_args.append(f"--tck-export={export}")
    if opset is not None:
        pytest_args.append(f"--tck-opset={opset}")
    pytest_args.append(f"--tck-device={device}")  # cpu too: one path for every device
    if workers != "0":  # a worker process that dies (segfault, abort) is one error row
        pytest_args += ["-n", workers]
    if timeout > 0:  # and a watchdog ends a worker stuck in native code (plugin)
        pytest_args += [f"--timeout={timeout}", "--timeout-method=signal"]
    # The bar stands in for pytest's terminal report, which goes to a buffer: shown only
    # if the run ends without results.
    pytest_output = io.StringIO()
    before = {p: _stamp(p) for p in (results_path(out, False), results_path(out, True))}
    with contextlib.redirect_stdout(sys.stdout if verbose else pytest_output):
        code = pytest.main(pytest_args, plugins=plugins)
    interrupted = code == pytest.ExitCode.INTERRUPTED
    results = results_path(out, interrupted)
    if code == pytest.ExitCode.USAGE_ERROR:
        lines = [ln for ln in pytest_output.getvalue().splitlines() if ln.strip()]
        raise UsageError(visible(lines[-1].removeprefix("ERROR: ") if lines else "usage error"))
    if not results.exists() or _stamp(results) == before[results]:  # not this run's
        collection = "during collection" in pytest_output.getvalue()  # pytest says INTERRUPTED
        if interrupted and not collection:  # Ctrl-C before any check ran: nothing to keep
            raise KeyboardInterrupt
        print(visible(bounded(pytest_output.getvalue(), 4000)), file=sys.stderr)
        print(
            f"tck: the run ended before writing results (pytest exit status {int(code)})",
            file=sys.stderr,
        )
        return None
    return results


def _stamp(path: Path) -> tuple[int, int] | None:
    """(inode, mtime) of a file, None if missing: a file this run wrote differs."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns


# --model DIR: the adapters that check a local save_pretrained folder as it is
PRETRAINED = {
    "hf.bert": "tck.adapters.pretrained:bert",
    "hf.vit": "tck.adapters.pretrained:vit",
    "hf.gpt2": "tck.adapters.pretrained:gpt2",
    "hf.llama": "tck.adapters.pretrained:llama",
    "hf.mistral": "tck.adapters.pretrained:mistral",
    "hf.qwen2": "tck.adapters.pretrained:qwen2",
    "timm.vit": "tck.adapters.timm_pretrained:vit",  # a folder or a weights file
}
AUTO = "tck.adapters.pretrained:auto"  # --model DIR alone: the family config.json names


def _pretrained(args: argparse.Namespace) -> tuple[str, str] | None:
    """The factory spec and checkpoint path of ``--adapter NAME --model DIR`` (the plugin
    hands the path to the factory: --tck-model)."""
    if args.model is None:
        return None
    if args.component or args.map:
        raise UsageError("--component and --map do not apply with --model")
    if args.adapter is not None and args.adapter not in PRETRAINED:
        raise UsageError(
            f"--model works with --adapter {', '.join(PRETRAINED)}, or none (the adapter "
            f"config.json names), not {args.adapter!r}"
        )
    from tck.adapters.pretrained import ModelError, _folder
    from tck.adapters.timm_pretrained import checkpoint

    try:  # the path only (no weights read yet): a bad one is one line, exit 2
        if args.adapter == "timm.vit":
            checkpoint(args.model)
            path = Path(args.model).resolve()
        else:
            path = _folder(args.model).resolve()
    except ModelError as err:
        raise UsageError(str(err)) from None
    return (PRETRAINED[args.adapter] if args.adapter else AUTO), str(path)


@contextlib.contextmanager
def _attention(args: argparse.Namespace) -> Iterator[None]:
    """--attention: handed to the checkpoint's adapter in this process and the workers as
    ``$TCK_ATTENTION`` (``tck.adapters.pretrained.attention_choice`` reads it) for the run,
    and the variable as it was after it."""
    if args.attention is None:
        yield
        return
    if args.model is None or args.adapter == "timm.vit":
        raise UsageError(
            "--attention applies to --model DIR of a transformers checkpoint (its eager and "
            "sdpa attention); drop it"
        )
    from tck.adapters.pretrained import ATTENTION_ENV, TWIN_IMPLEMENTATIONS

    names = [n.strip() for n in args.attention.split(",")]
    if names != ["auto"] and not set(names) <= set(TWIN_IMPLEMENTATIONS):
        raise UsageError(
            f"--attention {args.attention!r}: name {' and/or '.join(TWIN_IMPLEMENTATIONS)} "
            "(comma-separated), or auto"
        )
    before = os.environ.get(ATTENTION_ENV)
    os.environ[ATTENTION_ENV] = args.attention
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ATTENTION_ENV, None)
        else:
            os.environ[ATTENTION_ENV] = before


def _given(args: argparse.Namespace) -> dict[str, str | None]:
    """``--component`` and ``--map`` of ``--adapter onnx:FILE`` or ``module:attr`` naming an
    nn.Module instance (load_adapter refuses them for anything else)."""
    onnx = (args.adapter or "").startswith("onnx:")
    if (args.component or args.map) and ":" not in (args.adapter or ""):
        raise UsageError(
            "--component and --map apply to --adapter onnx:FILE or module:attr naming an "
            "nn.Module instance"
        )
    if onnx and not args.component:
        raise UsageError("--adapter onnx:FILE needs --component (e.g. --component encoder_layer)")
    return {
        "component": args.component or None,
        "map_path": str(Path(args.map).resolve()) if args.map else None,
    }


def no_litter() -> None:
    """Nothing of a run outside its output folder: no ``__pycache__`` beside the user's
    adapter module (this process; the plugin does the same in the worker processes of a
    run with --tck-out); hypothesis' files go to OUT/.hypothesis (the plugin)."""
    sys.dont_write_bytecode = True


class Resolved(NamedTuple):
    """The adapter a command names, loaded; the spec and arguments (``target``: model,
    component, map_path) the plugin loads it by again, in every worker process; whether it
    checks a given model as it is (a checkpoint, an ONNX file), whose run is named after
    the model, not the adapter."""

    adapter: Adapter
    spec: str
    target: dict[str, str | None]
    as_is: bool


def resolve_adapter(args: argparse.Namespace) -> Resolved:
    """The adapter that ``--adapter`` with ``--model``, ``--component`` and ``--map`` name,
    loaded here so that a bad one is one line (exit 2) before pytest starts."""
    pretrained = _pretrained(args)
    if pretrained is not None:
        spec, model = pretrained
        target: dict[str, str | None] = {"model": model}
    else:
        spec, target = args.adapter or DEFAULT_ADAPTER, _given(args)
        if spec.startswith("onnx:"):  # the file by its full path, as the workers find it
            spec = "onnx:" + str(Path(spec.removeprefix("onnx:")).resolve())
    adapter = load_adapter(spec, **target)
    as_is = pretrained is not None or spec.startswith("onnx:")
    return Resolved(adapter, spec, {k: v for k, v in target.items() if v is not None}, as_is)


def cmd_run(args: argparse.Namespace) -> int:
    with _attention(args):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    no_litter()
    adapter, spec, target, as_is = resolve_adapter(args)
    only = parse_only(args.only, COMPONENTS)
    require_components(adapter, only)
    if args.opset is not None and args.export is None:
        raise UsageError("--opset applies to --export onnx; add --export onnx")
    if args.export == "onnx":
        from .onnx_cli import require_exportable

        require_exportable(adapter)
    device = require_device(adapter, args.device, only, export=args.export)
    baseline = load_baseline(args.baseline) if args.baseline else None
    if baseline is None and args.accept_baseline_mismatch:
        raise UsageError("--accept-baseline-mismatch applies to --baseline; add --baseline")
    accepted: list[str] = []
    if baseline is not None:  # before anything runs: a baseline of another run is refused
        now = provenance(
            spec,
            adapter,
            checked_subjects(adapter),
            only=only,
            export=args.export,
            opset=args.opset,
            device=device,
        )
        now.update(profile=args.profile, seed=args.seed)
        accepted = require_same_run(
            baseline, now, args.baseline, accept=args.accept_baseline_mismatch
        )
    name = adapter.name if as_is else args.adapter or adapter.name
    out = writable_dir(Path(args.out) if args.out else default_out(name))
    with out_lock(out):
        foreign = foreign_files(out) + foreign_files(out / "interrupted")
        if foreign:
            raise UsageError(
                f"--out {str(out)!r} holds {', '.join(str(p) for p in foreign)}, which tck "
                "did not write; choose another folder (tck writes results.json, index.html "
                "and junit.xml there)"
            )
        # In this process (-n 0) the checks' plugin takes this adapter instead of loading the
        # checkpoint again; with workers, each loads its own and this one goes now.
        hand_over(adapter if args.workers == "0" else None, spec, target)
        del adapter
        try:
            results = run_checks(
                ["--pyargs", "tck.conformance"],
                adapter_spec=spec,
                target=target,
                out=out,
                profile=args.profile,
                seed=args.seed,
                threads=args.threads,
                only=only,
                workers=args.workers,
                timeout=args.timeout,
                verbose=args.verbose,
                export=args.export,
                opset=args.opset,
                device=device,
            )
        finally:
            hand_over(None)
        if results is None:
            return 1
        folder = results.parent
        document = load_results(folder)
        if baseline is not None:
            apply_baseline(document, baseline, args.baseline, accepted)
            write_results(results, document)
        reports = write_reports(document, folder)
        if not document.get("interrupted"):  # an earlier run's partial results: superseded
            remove_reports(results_path(out, True).parent)
    print_summary(Console(soft_wrap=True, emoji=False), document, folder, reports)
    if document.get("interrupted"):
        print(
            f"tck: interrupted; partial results in {folder} (the last complete run's, if "
            f"any, are still in {out})",
            file=sys.stderr,
        )
        return 130
    return 1 if red(document) else 0


@contextlib.contextmanager
def out_lock(out: Path) -> Iterator[None]:
    """One tck run per output folder at a time: a second one says so and exits 2."""
    import filelock

    lock = filelock.FileLock(str(out / ".tck.lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise UsageError(
            f"another tck run is writing to {str(out)!r} (it holds {str(out / '.tck.lock')!r});"
            " wait for it to end, or choose another --out"
        ) from None
    try:
        yield
    finally:
        lock.release()


def cmd_report(args: argparse.Namespace) -> int:
    folders = [Path(d) for d in args.dirs]
    for folder in folders:
        load_results(folder)  # every folder readable before anything is written
    if len(folders) == 1:
        paths = write_reports(load_results(folders[0]), folders[0])
        print(f"report: {paths['html']}\njunit:  {paths['junit']}")
        return 0
    out = writable_dir(Path(args.out) if args.out else Path("reports") / "out")
    print(f"scoreboard: {write_scoreboard(folders, out)}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    for name in BUILTIN:
        try:
            adapter = load_adapter(name)
        except AdapterError as err:
            print(f"{name}\t(unavailable: {err})")
            continue
        if getattr(args, "subjects", False):  # one line per subject: where and in what it runs
            for subject in adapter.subjects():
                devices = ",".join(adapter_devices(adapter, subject))
                offered = getattr(adapter, "dtypes", None)
                dtypes = ",".join(offered(subject)) if callable(offered) else "float64"
                print(f"{name}\t{subject.name}\t{devices}\t{dtypes}")
            continue
        components = sorted({s.component for s in adapter.subjects()})
        print(f"{name}\t{' '.join(components)}")
    return 0


ADAPTER_HELP = (
    f"built-in ({', '.join(BUILTIN)}), module:attr (an Adapter, or an nn.Module instance "
    "with --component), or onnx:FILE (an exported graph, with --component); default "
    "$TCK_ADAPTER or reference"
)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--adapter and the options that point it at a given model (a checkpoint folder, an
    ONNX file, an nn.Module instance): the same for tck run and tck fingerprint."""
    parser.add_argument("--adapter", default=None, help=ADAPTER_HELP)
    parser.add_argument(
        "--model",
        default=None,
        metavar="DIR",
        help="check the save_pretrained folder DIR as it is, at its own sizes with its own "
        "weights (local files and safetensors only); the adapter is the one its config.json "
        "names (bert, vit, gpt2, llama, mistral, qwen2) unless --adapter says; with "
        "--adapter timm.vit: a timm checkpoint folder or weights file",
    )
    parser.add_argument(
        "--component",
        default=None,
        help="with --adapter onnx:FILE or module:attr naming an nn.Module instance: the "
        "component it computes (e.g. encoder_layer)",
    )
    parser.add_argument(
        "--map",
        default=None,
        metavar="MAP.json",
        help="with --adapter onnx:FILE (or module:attr naming an nn.Module instance): its "
        "initializers (parameters) as canonical parameters, and its config, conventions, "
        "input names; without it the oracle checks skip",
    )


def add_parsers(sub: Any) -> None:
    """Register ``tck run``, ``tck report`` and ``tck list`` on the ``tck`` command's
    subparsers (tck.cli)."""
    run = sub.add_parser("run", help="run the conformance checks against an adapter")
    add_model_arguments(run)
    run.add_argument("--profile", default="ci", choices=PROFILES, help="hypothesis profile")
    run.add_argument("--out", default=None, help="results folder (default reports/out/ADAPTER)")
    run.add_argument("--only", default=None, help="comma-separated components")
    run.add_argument(
        "--seed",
        default=0,
        type=_bounded_int("--seed", 0, MAX_SEED),
        help=f"seed of parameters and inputs (0 to {MAX_SEED})",
    )
    run.add_argument(
        "--attention",
        default=None,
        metavar="IMPL[,IMPL]",
        help="with --model (transformers): the attention implementations checked, of eager "
        "and sdpa; default both, or sdpa alone at real size (a layer of more than 1 M "
        "parameters), where each repeats every check",
    )
    run.add_argument(
        "--threads",
        default=None,
        type=_bounded_int("--threads", 1, 1024),
        help="torch intra-op threads (default 1: the checks' tensors are tiny; for a "
        "real-size checkpoint, the cores this process may use)",
    )
    run.add_argument(
        "-n",
        "--workers",
        default="1",
        type=_workers,
        help="worker processes (pytest-xdist): a number or 'auto' (one per core); default 1, "
        "so that a check that crashes the interpreter is reported and the run goes on; "
        "0 runs in this process",
    )
    run.add_argument(
        "--timeout",
        default=300,
        type=_timeout,
        help="seconds one check may take before it is an error (default 300); a check stuck "
        "in native code past it has its worker process ended",
    )
    run.add_argument(
        "--baseline",
        default=None,
        metavar="OLD/results.json",
        help="an earlier run's results: its failures (same check, subject and diagnosis "
        "code) are known and do not fail this run; new ones do",
    )
    run.add_argument(
        "--accept-baseline-mismatch",
        action="store_true",
        help="compare with a --baseline written by another run (another adapter, subjects, "
        "profile, seed, --only, --export, --device or tck version) on purpose; without it "
        "such a baseline is refused. The report lists the differences accepted",
    )
    run.add_argument(
        "--export",
        default=None,
        choices=("onnx",),
        help="also run every check on each torch subject exported to ONNX and run in ONNX "
        "Runtime (CPU; ORT_DISABLE_ALL and ORT_ENABLE_ALL), with the export checks (§10.9)",
    )
    run.add_argument(
        "--opset", default=None, type=int, help="ONNX opset of --export (default: torch's, 20)"
    )
    run.add_argument(
        "--device",
        default="cpu",
        help="where subjects are built and run: cpu (default), cuda or cuda:N; the oracle "
        "stays float64 on the CPU, the careful run of the tolerance rule runs on the "
        "device. A subject its adapter does not run there is a skip (Adapter.devices)",
    )
    run.add_argument("-v", "--verbose", action="store_true", help="pytest's own report too")
    run.set_defaults(func=cmd_run)
    report = sub.add_parser(
        "report",
        help="re-render reports from results.json; several folders: a scoreboard",
        description="Re-render DIR/index.html and DIR/junit.xml from DIR/results.json. "
        "With several DIRs, also write OUT/scoreboard.html across them.",
    )
    report.add_argument("dirs", nargs="+", metavar="DIR", help="folders written by tck run")
    report.add_argument("--out", default=None, help="scoreboard folder (default reports/out)")
    report.set_defaults(func=cmd_report)
    lst = sub.add_parser("list", help="list built-in adapters and their components")
    lst.add_argument(
        "--subjects",
        action="store_true",
        help="one line per subject: adapter, subject, device kinds, dtypes",
    )
    lst.set_defaults(func=cmd_list)
