"""``tck fingerprint``: the conventions an implementation shows, beside what its adapter declares.

    tck fingerprint --adapter hf.bert [--out DIR] [--only mha,encoder_layer] [--seed N]

Runs only the probes: every convention field of ``test_fingerprint`` (eps and its placement,
variance bias, activation, PE layout, causal alignment, fully-masked-row policy, norm
placement, ...), the effective attention scale (``attention.effective_scale``, per head for
``mha``) and the keep-mask polarity (``masks.polarity``). It prints one table per subject and
writes DIR/fingerprint.json (and the probes' own DIR/results.json). Exit status: 0 when every
measured property agrees with the declaration, 1 when one does not (a *mismatch*), 2 on a
usage error. A declared convention that the probe ran for and could not read off the
output (no value of it, alone or with up to two other conventions, reproduces the subject)
is *unmeasurable* and also exits 1, naming the subject and property.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tck.reference import COMPONENTS
from tck.reference.catalogue import KEEP, POLARITY_SHOWN
from tck.reports import load_results
from tck.usage import default_out, parse_only, writable_dir

from .cli import add_model_arguments, no_litter, require_components, resolve_adapter, run_checks

SCHEMA = 1
# The probes, as pytest selects them: module and the test functions in it.
PROBES = {
    "tck.conformance.checks.test_fingerprint": ("test_convention",),
    "tck.conformance.checks.test_attention": (
        "test_effective_scale",
        "test_effective_scale_per_head",
    ),
    "tck.conformance.checks.test_masks": ("test_polarity",),
}
SCALE_CHECKS = ("attention.effective_scale", "attention.effective_scale_per_head")
POLARITY_CHECK = "masks.polarity"
STATUS_STYLE = {
    "agrees": "green",
    "convention": "yellow",
    "mismatch": "bold red",
    "not measured": "dim",
    "unmeasurable": "bold red",
    "error": "bold magenta",
}


def add_parser(sub: Any) -> None:
    """Register ``tck fingerprint`` on the ``tck`` command's subparsers."""
    parser = sub.add_parser(
        "fingerprint",
        help="measure the conventions an implementation shows, beside what it declares",
        description=__doc__.split("\n\n")[2].replace("\n", " "),
    )
    add_model_arguments(parser)
    parser.add_argument(
        "--out", default=None, help="output folder (default reports/out/ADAPTER/fingerprint)"
    )
    parser.add_argument("--only", default=None, help="comma-separated components")
    parser.add_argument("--seed", default=0, type=int, help="seed of parameters and inputs")
    parser.add_argument("--threads", default=1, type=int, help="torch intra-op threads")
    parser.set_defaults(func=cmd_fingerprint)


def cmd_fingerprint(args: argparse.Namespace) -> int:
    no_litter()
    adapter, spec, target, as_is = resolve_adapter(args)  # fail fast, before pytest starts
    only = parse_only(args.only, COMPONENTS)
    require_components(adapter, only)
    name = adapter.name if as_is else args.adapter or adapter.name
    out = writable_dir(Path(args.out) if args.out else default_out(name) / "fingerprint")
    probes = " or ".join(name for names in PROBES.values() for name in names)
    results = run_checks(
        ["--pyargs", *PROBES, "-k", probes],
        adapter_spec=spec,
        target=target,
        out=out,
        profile="ci",
        seed=args.seed,
        threads=args.threads,
        only=only,
    )
    if results is None:
        return 1
    document = load_results(results.parent)
    fingerprint = build_fingerprint(document)
    path = out / "fingerprint.json"
    path.write_text(json.dumps(fingerprint, indent=2, default=str) + "\n", encoding="utf-8")
    print_fingerprint(Console(soft_wrap=True, emoji=False), fingerprint)
    print(f"fingerprint: {path}")
    return 1 if failed(fingerprint) else 0


def failed(fingerprint: dict[str, Any]) -> bool:
    """A mismatch, an error, or a declared convention the probes could not measure."""
    return bool(
        fingerprint["mismatches"] or fingerprint["errors"] or fingerprint.get("unmeasurable")
    )


# ------------------------------------------------------------------------------ building


def build_fingerprint(document: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint of a probes-only results document: per subject, per property, what
    the adapter declares, what the probe shows, and whether they agree."""
    adapter = document["adapter"]
    subjects: dict[str, dict[str, Any]] = {}
    for result in document["results"]:
        row = _row(result, adapter["conventions"].get(result["subject"], {}))
        if row is None:
            continue
        entry = subjects.setdefault(
            result["subject"], {"component": result["component"], "properties": {}}
        )
        entry["properties"][row.pop("property")] = row
    rows = [row for s in subjects.values() for row in s["properties"].values()]
    return {
        "schema": SCHEMA,
        "adapter": adapter["name"],
        "seed": document.get("seed"),
        "mismatches": sum(row["status"] == "mismatch" for row in rows),
        "errors": sum(row["status"] == "error" for row in rows),
        "unmeasurable": [
            f"{name}.{prop}"
            for name, s in subjects.items()
            for prop, row in s["properties"].items()
            if row["status"] == "unmeasurable"
        ],
        "subjects": subjects,
    }


def _row(result: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any] | None:
    check, status, metrics = result["check"], result["status"], result.get("metrics") or {}
    diagnosis = result.get("diagnosis") or {}
    if check.startswith("fingerprint."):
        field = check.removeprefix("fingerprint.")
        row = {
            "property": field,
            "declared": metrics.get("declared", declared.get(field)),
            "shown": metrics.get("shown"),
            "canonical": metrics.get("canonical"),
        }
    elif check in SCALE_CHECKS:
        expected = metrics.get("expected_scale")
        row = {
            "property": "attention_scale",  # per head for mha: one of the two per subject
            "declared": expected,
            "shown": [metrics["effective_scale"]] if "effective_scale" in metrics else None,
            "canonical": expected,
        }
    elif check == POLARITY_CHECK:
        shown = None
        if status == "pass":
            shown = [KEEP]
        elif status == "fail":
            shown = [POLARITY_SHOWN.get(diagnosis.get("code"), diagnosis.get("code"))]
        row = {"property": "mask_polarity", "declared": KEEP, "shown": shown, "canonical": KEEP}
    else:
        return None
    row["status"] = {
        "pass": "agrees",
        "convention": "convention",
        "fail": "mismatch",
        "skip": "not measured",
    }.get(status, "error")
    if status == "skip" and metrics.get("not_measured"):
        # The probe ran on the subject and could not read the property off its output: a
        # declared convention that nothing shows, not a capability it lacks.
        row["status"] = "unmeasurable"
        row["reason"] = metrics["not_measured"]
    if metrics.get("explained_by"):
        row["explained_by"] = metrics["explained_by"]
    if status != "pass":
        row["diagnosis"] = diagnosis
    return row


# ------------------------------------------------------------------------------ printing


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return "-" if value is None else str(value)


def _values(values: Iterable[Any] | None) -> str:
    return " | ".join(_value(v) for v in values or ()) or "-"


def print_fingerprint(console: Console, fingerprint: dict[str, Any]) -> None:
    """One table per subject: property, declared, shown, and their agreement."""
    for name, subject in fingerprint["subjects"].items():
        table = Table(
            title=Text(f"{fingerprint['adapter']}:{name} ({subject['component']})"),
            title_justify="left",
        )
        for column in ("property", "declared", "shown", "status"):
            table.add_column(column)
        for prop, row in subject["properties"].items():
            status = row["status"]
            label = "MISMATCH" if status == "mismatch" else status
            if status == "error":
                label = f"error: {row['diagnosis'].get('message', '')[:120]}"
            if status == "unmeasurable":
                label = "NOT MEASURED (declared, unreadable)"
            table.add_row(
                Text(prop),
                Text(_value(row["declared"])),
                Text(_values(row["shown"])),
                Text(label, style=STATUS_STYLE[status]),
            )
        console.print(table)
    unmeasured = sum(
        row["status"] == "not measured"
        for subject in fingerprint["subjects"].values()
        for row in subject["properties"].values()
    )
    unreadable = fingerprint.get("unmeasurable") or []
    console.print(
        f"tck fingerprint {fingerprint['adapter']}: {fingerprint['mismatches']} mismatch(es), "
        f"{fingerprint['errors']} error(s), {len(unreadable)} declared convention(s) that could "
        f"not be measured, {unmeasured} not measured (the reasons are in fingerprint.json)",
        style="bold red" if failed(fingerprint) else "green",
    )
    if unreadable:
        console.print(
            "could not measure, on subjects that claim the component: "
            + ", ".join(unreadable)
            + " (no declared or alternative convention reproduces their output)",
            style="bold red",
            markup=False,
        )
