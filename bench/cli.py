"""``tck bench``: time an adapter's components against SDPA and the oracle, write HTML + JSON.

    tck bench --adapter torch.nn --device cpu --out DIR
    tck bench --adapter torch.nn --components attention --dtypes bf16 --seq 512,...,16384 \\
        --batch 4 --d-model 2048 --heads 16 --device cuda --out DIR

``--seq 128,...,16384`` is every doubling from 128 to 16384. Exit status: 0 when every
adapter point was measured or skipped for a stated reason (unsupported, out of memory, too
slow), 1 when one raised an error, 2 on a usage error (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

from tck.adapters import BUILTIN, load_adapter
from tck.adapters.devices import DeviceError
from tck.adapters.devices import check_device as _check_device
from tck.usage import INTERRUPTED, UsageError, writable_dir
from tck.usage import default_out as run_out

from .runner import BenchOptions, run_bench
from .timing import Budget, cpu_memory_supported
from .workloads import BASELINES, COMPONENTS, FORWARD, FORWARD_BACKWARD, ORACLE, SDPA_BACKENDS

DTYPE_NAMES = {
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float32": "float32",
    "float": "float32",
    "fp64": "float64",
    "float64": "float64",
    "double": "float64",
}
PASS_NAMES = {
    "fwd": FORWARD,
    "forward": FORWARD,
    "fwd+bwd": FORWARD_BACKWARD,
    "forward+backward": FORWARD_BACKWARD,
    "bwd": FORWARD_BACKWARD,
}
DEFAULTS = {  # device kind -> (dtypes, seq, batch)
    "cuda": ("bf16", "512,...,16384", "4"),
    "cpu": ("fp32", "128,...,1024", "1"),
}


def _items(text: str, option: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"{option} is empty; give a comma-separated list")
    return items


def parse_ints(text: str, option: str) -> tuple[int, ...]:
    """'128,256' or '128,...,16384' (every doubling from 128 to 16384), each >= 1."""
    items = _items(text, option)
    values: list[int] = []
    for i, item in enumerate(items):
        if item == "...":
            if i == 0 or i == len(items) - 1 or items[i + 1] == "...":
                raise UsageError(f"{option} {text!r}: '...' needs a number on each side")
            continue
        if not item.isdigit() or int(item) < 1:
            raise UsageError(f"{option} {text!r}: {item!r} is not a whole number >= 1")
        value = int(item)
        if i > 0 and items[i - 1] == "...":
            start, n = values[-1], values[-1]
            if value <= start:
                raise UsageError(f"{option} {text!r}: {start},...,{value} does not increase")
            while n * 2 <= value:
                n *= 2
                values.append(n)
            if n != value:
                raise UsageError(
                    f"{option} {text!r}: {value} is not {start} times a power of 2; "
                    "'a,...,b' doubles from a to b"
                )
            continue
        values.append(value)
    return tuple(sorted(set(values)))


def parse_dtypes(text: str) -> tuple[str, ...]:
    out = []
    for item in _items(text, "--dtypes"):
        if item.lower() not in DTYPE_NAMES:
            raise UsageError(
                f"unknown dtype {item!r} in --dtypes; choose from bf16, fp16, fp32, fp64"
            )
        out.append(DTYPE_NAMES[item.lower()])
    return tuple(dict.fromkeys(out))


def parse_passes(text: str) -> tuple[str, ...]:
    out = []
    for item in _items(text, "--passes"):
        if item.lower() not in PASS_NAMES:
            raise UsageError(f"unknown pass {item!r} in --passes; choose from fwd, fwd+bwd")
        out.append(PASS_NAMES[item.lower()])
    return tuple(dict.fromkeys(out))


def parse_baselines(text: str) -> tuple[str, ...]:
    if text.strip().lower() == "none":
        return ()
    items = _items(text, "--baselines")
    unknown = [b for b in items if b not in BASELINES]
    if unknown:
        raise UsageError(
            f"unknown baseline(s) {', '.join(unknown)} in --baselines; choose from "
            f"{', '.join(BASELINES)}, or none"
        )
    return tuple(dict.fromkeys(items))


def check_device(device: str) -> str:
    """The one device check of tck run and tck bench (tck.adapters.devices), as a usage
    error."""
    try:
        return _check_device(device)
    except DeviceError as err:
        raise UsageError(str(err)) from None


def check_dtypes(dtypes: tuple[str, ...], device: str) -> None:
    """Every dtype must have a matmul on this device (a GPU before Ampere has no bf16)."""
    for dtype in dtypes:
        if device.startswith("cuda") and dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
            name = torch.cuda.get_device_name(device)
            raise UsageError(
                f"--dtypes bf16: {name} has no bfloat16 (it needs compute capability 8.0 or "
                "later); use --dtypes fp16,fp32"
            )
        try:
            a = torch.ones(4, 4, dtype=getattr(torch, dtype), device=device)
            (a @ a).sum().item()
        except (RuntimeError, NotImplementedError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UsageError(
                f"--dtypes: {dtype} has no matmul on {device} ({first}); choose other dtypes"
            ) from None


def check_components(adapter: Any, names: list[str]) -> tuple[str, ...]:
    subjects = adapter.subjects()
    by_name = {s.name: s for s in subjects}
    offered = {s.component for s in subjects}
    for name in names:
        component = by_name[name].component if name in by_name else name
        if component not in COMPONENTS:
            raise UsageError(
                f"cannot benchmark {name!r}: choose components with a sequence length and a "
                f"FLOP formula ({', '.join(COMPONENTS)}) or a subject name of the adapter"
            )
        if name not in by_name and component not in offered:
            raise UsageError(
                f"adapter {adapter.name!r} offers no {component}; it offers "
                f"{', '.join(sorted(offered & set(COMPONENTS))) or 'nothing benchmarkable'}"
            )
    return tuple(dict.fromkeys(names))


def check_dtypes_offered(
    adapter: Any, components: tuple[str, ...], dtypes: tuple[str, ...]
) -> None:
    for name in components:
        subject = next(s for s in adapter.subjects() if name in (s.name, s.component))
        offered = adapter.dtypes(subject) if hasattr(adapter, "dtypes") else ("float64",)
        missing = [d for d in dtypes if d not in offered]
        if missing:
            raise UsageError(
                f"{adapter.name}:{subject.name} offers {', '.join(offered)}, not "
                f"{', '.join(missing)}; choose --dtypes among those"
            )


def options_from_args(args: argparse.Namespace) -> BenchOptions:
    device = check_device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    kind = "cuda" if device.startswith("cuda") else "cpu"
    dtypes_text, seq_text, batch_text = DEFAULTS[kind]
    dtypes = parse_dtypes(args.dtypes or dtypes_text)
    seqs = parse_ints(args.seq or seq_text, "--seq")
    batches = parse_ints(args.batch or batch_text, "--batch")
    passes = parse_passes(args.passes)
    baselines = parse_baselines(args.baselines)
    if args.d_model < 1 or args.heads < 1 or args.d_model % args.heads:
        raise UsageError(
            f"--d-model {args.d_model} must be a positive multiple of --heads {args.heads}"
        )
    for option, value in (
        ("--d-ff", args.d_ff),
        ("--layers", args.layers),
        ("--matmul-size", args.matmul_size),
    ):
        if value is not None and value < 1:
            raise UsageError(f"{option} must be >= 1, got {value}")
    if args.max_call_s <= 0:
        raise UsageError(f"--max-call-s must be > 0, got {args.max_call_s}")
    if args.compare_do_bench == "yes":
        if kind != "cuda":
            raise UsageError("--compare-do-bench yes times CUDA kernels; it needs --device cuda")
        try:
            import triton.testing  # noqa: F401
        except Exception:
            raise UsageError(
                "--compare-do-bench yes needs triton (pip install triton); or use auto"
            ) from None
    try:
        budget = Budget(
            warmup_s=args.warmup,
            min_rounds=args.min_rounds,
            max_rounds=max(args.max_rounds, args.min_rounds),
            min_time_s=args.min_time,
            max_time_s=max(args.max_time, args.min_time),
            rel_ci=args.rel_ci,
        )
    except ValueError as err:
        raise UsageError(f"bad timing options: {err}") from None
    if args.threads is not None:
        if args.threads < 1:
            raise UsageError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    check_dtypes(dtypes, device)
    return BenchOptions(
        adapter=args.adapter or "torch.nn",
        components=(),  # filled once the adapter is loaded
        dtypes=dtypes,
        seqs=seqs,
        batches=batches,
        device=device,
        passes=passes,
        causal=args.causal,
        d_model=args.d_model,
        heads=args.heads,
        d_ff=args.d_ff,
        layers=args.layers,
        baselines=baselines,
        budget=budget,
        max_call_s=args.max_call_s,
        matmul_size=args.matmul_size,
        do_bench=args.compare_do_bench,
        memory=not args.no_memory and (kind == "cuda" or cpu_memory_supported()),
        seed=args.seed,
    )


def cmd_bench(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from tck.bench import write_bench

    options = options_from_args(args)
    adapter = load_adapter(options.adapter)
    components = check_components(adapter, _items(args.components, "--components"))
    check_dtypes_offered(adapter, components, options.dtypes)
    options = replace(options, components=components)
    out = writable_dir(Path(args.out) if args.out else default_out(options.adapter))

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    document = run_bench(options, adapter, log=log)
    paths = write_bench(document, out)
    measured = len(document["benchmarks"])
    errors = [s for s in document["tck"]["skipped"] if s["status"] == "error"]
    print(f"tck bench: {measured} points measured, {len(document['tck']['skipped'])} not")
    print(f"report: {paths['html']}\njson:   {paths['json']}")
    for s in errors:
        print(f"tck bench: error in {s['label']} at N={s['seq']}: {s['reason']}", file=sys.stderr)
    if document["tck"]["interrupted"]:
        print("tck bench: interrupted: the points before it are kept", file=sys.stderr)
        return INTERRUPTED
    return 1 if errors else 0


def default_out(adapter: str) -> Path:
    return Path("reports") / "out" / "bench" / run_out(adapter).name


def add_parser(sub: Any) -> None:
    """Register ``tck bench`` on the ``tck`` command's subparsers."""
    p = sub.add_parser(
        "bench",
        help="time an adapter's components against SDPA and the oracle (HTML + JSON)",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument(
        "--adapter",
        default=None,
        help=f"built-in ({', '.join(BUILTIN)}) or module:attr; default torch.nn",
    )
    p.add_argument(
        "--components",
        default="attention,mha",
        help=f"comma-separated components ({', '.join(COMPONENTS)}) or subject names; "
        "default attention,mha",
    )
    p.add_argument(
        "--dtypes", default=None, help="bf16,fp16,fp32,fp64 (default: cuda bf16, cpu fp32)"
    )
    p.add_argument(
        "--seq",
        default=None,
        help="sequence lengths, e.g. 128,256 or 128,...,16384 (doublings); "
        "default: cuda 512,...,16384, cpu 128,...,1024",
    )
    p.add_argument("--batch", default=None, help="batch sizes (default: cuda 4, cpu 1)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default cuda if any)")
    p.add_argument("--passes", default="fwd,fwd+bwd", help="fwd, fwd+bwd (default both)")
    p.add_argument("--causal", action="store_true", help="causal self-attention")
    p.add_argument("--d-model", type=int, default=1024, help="model width (default 1024)")
    p.add_argument("--heads", type=int, default=16, help="heads; head dim = d-model / heads")
    p.add_argument("--d-ff", type=int, default=None, help="FFN width (default 4 * d-model)")
    p.add_argument("--layers", type=int, default=2, help="layers of the stacks (default 2)")
    p.add_argument(
        "--baselines",
        default=",".join(BASELINES),
        help=f"SDPA backends ({', '.join(SDPA_BACKENDS)}) and {ORACLE} (the numpy float64 "
        "oracle, forward), or none; default all",
    )
    p.add_argument("--warmup", type=float, default=0.05, help="warm-up seconds (default 0.05)")
    p.add_argument("--min-rounds", type=int, default=5, help="fewest timed rounds (default 5)")
    p.add_argument("--max-rounds", type=int, default=1000, help="most timed rounds (default 1000)")
    p.add_argument("--min-time", type=float, default=0.2, help="least seconds timed per point")
    p.add_argument("--max-time", type=float, default=2.0, help="most seconds timed per point")
    p.add_argument(
        "--rel-ci",
        type=float,
        default=0.01,
        help="stop once the median's 95%% confidence half-width is this fraction of it (0.01)",
    )
    p.add_argument(
        "--max-call-s",
        type=float,
        default=5.0,
        help="a series stops at the first N where one call takes longer (default 5 s)",
    )
    p.add_argument("--matmul-size", type=int, default=None, help="the peak matmul's size")
    p.add_argument(
        "--compare-do-bench",
        choices=("auto", "yes", "no"),
        default="auto",
        help="also time each point with triton.testing.do_bench (auto: on CUDA when triton "
        "imports)",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0, help="seed of parameters and inputs")
    p.add_argument("--out", default=None, help="folder (default reports/out/bench/ADAPTER)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_bench)
