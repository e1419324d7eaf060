"""``tck export-onnx``: export one subject of a torch adapter to an ONNX file, check it, and
say what is in it.

    tck export-onnx --adapter reference --component vit --out vit.onnx [--opset 23]
        [--dynamic batch,seq] [--dtype float32] [--subject NAME]

The subject is built at the suite's default config with canonical parameters, and exported
with ``torch.onnx.export(dynamo=True)`` on the suite's default inputs; the batch and
sequence axes named by ``--dynamic`` stay dynamic ("none": all static). The graph must pass
``onnx.checker.check_model(full_check=True)``; the command then runs it once in ONNX Runtime
(CPU) against the torch module and prints the opset, the ops and the inputs. Exit status: 0
on success, 1 when export, the checker or the run fails, 2 on a usage error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from tck.adapters import (
    BUILTIN,
    DEFAULT_ADAPTER,
    Adapter,
    AdapterFailure,
    Unsupported,
    load_adapter,
)
from tck.reference import COMPONENTS, init_params
from tck.usage import INSTALL, UsageError


def require_exportable(adapter: Adapter) -> None:
    """A usage error unless the onnx extra is installed (onnx, onnxruntime, and the
    exporter's onnxscript) and ``adapter`` is a torch adapter."""
    missing = []
    for module in ("onnx", "onnxruntime", "onnxscript"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise UsageError(f"ONNX export needs {', '.join(missing)}: {INSTALL['onnx']}")
    from tck.adapters.onnx_runtime import with_onnx

    try:
        with_onnx(adapter)
    except TypeError as err:
        raise UsageError(str(err)) from None


def _axis_kinds(value: str) -> tuple[str, ...]:
    from tck.adapters.onnx_runtime import AXIS_KINDS

    if value == "none":
        return ()
    kinds = tuple(k.strip() for k in value.split(",") if k.strip())
    unknown = [k for k in kinds if k not in AXIS_KINDS]
    if unknown:
        raise UsageError(
            f"--dynamic: unknown axis kind(s) {', '.join(unknown)}; name some of "
            f"{', '.join(AXIS_KINDS)}, or 'none'"
        )
    return kinds


def add_parser(sub: Any) -> None:
    """Register ``tck export-onnx`` on the ``tck`` command's subparsers."""
    parser = sub.add_parser(
        "export-onnx",
        help="export one subject to an ONNX file, check it, and list its ops",
        description=__doc__.split("\n\n")[2].replace("\n", " "),
    )
    parser.add_argument(
        "--adapter",
        default=None,
        help=f"a torch adapter: built-in ({', '.join(BUILTIN)}) or module:attr",
    )
    parser.add_argument("--component", required=True, choices=COMPONENTS, metavar="COMPONENT")
    parser.add_argument("--subject", default=None, help="subject name (default: the component)")
    parser.add_argument("--out", required=True, help="the .onnx file to write")
    parser.add_argument("--opset", default=None, type=int, help="ONNX opset (default: torch's)")
    parser.add_argument(
        "--dynamic", default="batch,seq", help="axis kinds to keep dynamic: batch,seq or none"
    )
    parser.add_argument(
        "--dtype",
        default="float32",
        choices=("float64", "float32", "float16"),
        help="the graph's dtype (default float32, as deployed)",
    )
    parser.add_argument("--seed", default=0, type=int, help="seed of parameters and inputs")
    parser.set_defaults(func=cmd_export_onnx)


def cmd_export_onnx(args: argparse.Namespace) -> int:
    adapter = load_adapter(args.adapter)
    require_exportable(adapter)
    from tck.adapters.onnx_runtime import Exported, export, run_graph
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG
    from tck.conformance.toolkit.spaces import subject_config
    from tck.reference.inputs import make_inputs
    from tck.reference.tolerance import round_to

    kinds = _axis_kinds(args.dynamic)
    name = args.subject or args.component
    subjects = {s.name: s for s in adapter.subjects() if s.component == args.component}
    if name not in subjects:
        offered = ", ".join(subjects) or "none"
        raise UsageError(
            f"adapter {adapter.name!r} has no subject {name!r} of {args.component} "
            f"(it has: {offered}); pick one with --subject"
        )
    out = Path(args.out)
    if out.suffix != ".onnx":
        raise UsageError(f"--out {str(out)!r}: name a file ending in .onnx")
    if out.exists() and not out.is_file():
        raise UsageError(f"--out {str(out)!r} is a folder or not a regular file; name a file")
    if not out.parent.is_dir():
        raise UsageError(f"--out {str(out)!r}: the folder {str(out.parent)!r} does not exist")
    subject = subjects[name]
    seed = args.seed
    kwargs = {} if args.dtype == "float64" else {"dtype": args.dtype}
    try:
        config = subject_config(subject, DEFAULT_CONFIG, {})  # inside its ConfigSpace
        handle = adapter.build(subject, config, seed=seed, **kwargs)
        params = init_params(subject.component, config, subject.conventions, seed=seed)
        adapter.load(handle, {k: round_to(v, args.dtype) for k, v in params.items()})
    except Unsupported as why:
        raise UsageError(f"{adapter.name}:{name} in {args.dtype}: {why}") from None
    inputs = make_inputs(subject.component, config, np.random.default_rng(seed))
    inputs = {k: round_to(v, args.dtype) for k, v in inputs.items()}
    tensors = adapter._kwargs(handle, inputs)
    try:
        model = export(handle, tensors, opset=args.opset, dynamic=kinds)
    except AdapterFailure as failure:
        print(f"tck: {failure.code}: {failure.message}")
        return 1
    import onnx

    try:
        onnx.save(model, str(out))
    except OSError as err:
        raise UsageError(
            f"cannot write --out {str(out)!r}: {err.strerror or err}; choose a writable file"
        ) from None
    exported = Exported.of(model, tensors)
    info = exported.info
    print(f"wrote {out} ({out.stat().st_size:,} bytes): {adapter.name}:{name}, {args.dtype}")
    print(f"opset   {info.opset} (onnx.checker full_check: passed)")
    for input_name, shape in info.inputs.items():
        print(f"input   {input_name} {shape}")
    print(f"ops     {sum(info.ops.values())} nodes: ")
    for op, count in info.ops.items():
        print(f"        {count:4d} {op}")
    if info.rounded_scalars:
        shown = ", ".join(f"{n} = {v!r}" for n, v in info.rounded_scalars[:5])
        print(f"warning float64 constants rounded to float32: {shown}")
    try:
        ort_out = run_graph(exported, "disable_all", tensors)
    except (AdapterFailure, Unsupported) as failure:
        print(f"onnxruntime: cannot run it: {failure}")
        return 1
    torch_out = adapter.run(handle, inputs)
    finite = np.isfinite(ort_out) & np.isfinite(torch_out)
    delta = float(np.max(np.abs(ort_out - torch_out), where=finite, initial=0.0))
    nan_diff = int(np.sum(np.isnan(ort_out) != np.isnan(torch_out)))
    print(
        f"check   onnxruntime (CPU, ORT_DISABLE_ALL) vs torch on the example inputs: "
        f"max |delta| = {delta:.3g}" + (f", {nan_diff} NaN in one only" if nan_diff else "")
    )
    print(
        f"conform tck run --adapter {args.adapter or DEFAULT_ADAPTER} --export onnx "
        f"--only {subject.component}" + (f" --opset {args.opset}" if args.opset else "")
    )
    return 0
