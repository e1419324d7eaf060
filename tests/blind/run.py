"""Run the blind diagnosis benchmark: apply each bug of bugs.json to a private copy of its
implementation, run ``tck run`` on the components the bug's implementation exposes, and score
the report's first root cause against the bug's expected codes.

    python tests/blind/run.py                      # every bug, one at a time
    python tests/blind/run.py --jobs 2 --json out.json
    python tests/blind/run.py --only-bug hub.gqa_tiled --only-bug gpt.softmax_axis
    python tests/blind/run.py --clean              # the correct implementations alone
    python tests/blind/run.py --tck-python /path/to/venv/bin/python
    python tests/blind/run.py --set tests/blind2 --jobs 2 --json out.json   # another set

A *set* is a folder holding ``bugs.json``, the implementations its bugs patch, optionally
``implementations.json`` (implementation -> the components its adapter exposes; set 1, this
folder, keeps its table below) and optionally ``controls.json``: one-line rewrites that stay
correct, each of which must run with 0 failing rows (a *control passed*).

A bug is *detected* when its run has any fail or error row. Its *first root cause* is
``tck.reports.causes.root_causes(results)[0]["code"]``, the cause the HTML report leads with,
computed by the tck under test (the same interpreter that ran it). It is *right class first*
when that code is in the bug's ``expected_codes``; a bug with no expected code counts as a miss
(see PROTOCOL.md for how a code added later may be judged to name such a class).

The repository's files are never edited: each bug runs in its own temporary folder holding a
patched copy of its implementation under the same module name.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BUGS_FILE = HERE / "bugs.json"  # set 1's table (the default set)

# Components each implementation exposes (its adapter's subjects): --clean runs all of them.
IMPLEMENTATIONS: dict[str, list[str]] = {
    "hub_llama": [
        "rms_norm",
        "rope",
        "gated_ffn",
        "causal_self_attention",
        "decoder_block",
        "causal_lm",
    ],
    "einsum_gpt": ["layer_norm", "ffn", "causal_self_attention", "decoder_block", "causal_lm"],
    "np_functional": ["attention", "mha", "layer_norm", "ffn", "encoder_layer", "encoder"],
    "unfold_vit": ["patch_embed", "encoder_layer", "vit"],
}

# Run by the interpreter under test on a results.json: the report's root causes, in order,
# from tck's own ranking (never reimplemented here).
CAUSES_SNIPPET = """
import json, sys
from tck.reports.causes import root_causes
data = json.load(open(sys.argv[1], encoding="utf-8"))
results = data["results"]
causes = root_causes(results)
print(json.dumps({
    "causes": [c["code"] for c in causes],
    "first_message": causes[0]["message"] if causes else "",
    "failing": sum(r.get("status") in ("fail", "error") for r in results),
    "failing_rows": [
        [r.get("check"), (r.get("diagnosis") or {}).get("code")]
        for r in results if r.get("status") in ("fail", "error")
    ],
    "summary": data.get("summary"),
}))
"""


def load_bugs(set_dir: Path = HERE) -> list[dict[str, Any]]:
    return json.loads((set_dir / "bugs.json").read_text(encoding="utf-8"))


def load_controls(set_dir: Path = HERE) -> list[dict[str, Any]]:
    """The set's correct one-line rewrites (controls.json; none when the set has no file)."""
    path = set_dir / "controls.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []


def load_findings(set_dir: Path = HERE) -> dict[str, set[tuple[str, str]]]:
    """Findings judged after the freeze on a set's correct code: a row the kit fails on an
    implementation itself, or on a control's rewrite, which its SPEC clause says is a real
    deviation the author did not intend (findings.json: a list of {"impl" or "control",
    "check", "code", "finding", "judged_by", "date"}; none when the set has no file).
    Implementation or control id -> its (check, code) pairs. A control whose only failing rows
    are such findings passes "with findings", never plainly."""
    path = set_dir / "findings.json"
    found: dict[str, set[tuple[str, str]]] = {}
    if not path.is_file():
        return found
    for entry in json.loads(path.read_text(encoding="utf-8")):
        keys = ("check", "code", "finding", "judged_by", "date")
        missing = [k for k in keys if not entry.get(k)]
        where = entry.get("impl") or entry.get("control")
        if missing or not where:
            raise ValueError(f"{path}: a finding lacks {', '.join(missing) or 'impl'}: {entry}")
        found.setdefault(where, set()).add((entry["check"], entry["code"]))
    return found


def load_implementations(set_dir: Path = HERE) -> dict[str, list[str]]:
    """Implementation -> the components its adapter exposes: the set's implementations.json,
    or for set 1 (which has none) the table above."""
    path = set_dir / "implementations.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    if set_dir.resolve() == HERE:
        return IMPLEMENTATIONS
    raise ValueError(f"{set_dir} has no implementations.json")


def patched_source(bug: dict[str, Any], set_dir: Path = HERE) -> str:
    """The implementation's text with the bug's one line replaced (exactly one occurrence)."""
    source = (set_dir / f"{bug['impl']}.py").read_text(encoding="utf-8")
    lines = source.split("\n")
    hits = [i for i, line in enumerate(lines) if line == bug["original"]]
    if len(hits) != 1:
        raise ValueError(
            f"bug {bug['id']}: the original line occurs {len(hits)} times in {bug['impl']}.py "
            "(the implementation changed after the freeze?)"
        )
    lines[hits[0]] = bug["replacement"]
    return "\n".join(lines)


def run_one(
    label: str,
    impl: str,
    source: str,
    components: list[str],
    python: str,
    timeout: float,
    keep: bool,
) -> dict[str, Any]:
    """tck run on ``source`` saved as ``impl``.py in a fresh folder; its root causes."""
    folder = Path(tempfile.mkdtemp(prefix=f"tck-blind-{label}-"))
    (folder / f"{impl}.py").write_text(source, encoding="utf-8")
    out = folder / "out"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    cmd = [
        python, "-m", "tck", "run",
        "--adapter", f"{impl}:adapter",
        "--only", ",".join(components),
        "--profile", "ci",
        "--out", str(out),
        "-n", "0",
    ]  # fmt: skip
    started = time.monotonic()
    record: dict[str, Any] = {"folder": str(folder), "command": " ".join(cmd)}
    try:
        proc = subprocess.run(
            cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout
        )
        record["exit_code"] = proc.returncode
        record["output_tail"] = (proc.stdout + proc.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        record["exit_code"] = None
        record["runner_error"] = f"tck run took longer than {timeout:.0f} s"
    except OSError as err:  # the interpreter vanished or cannot start
        record["exit_code"] = None
        record["runner_error"] = f"could not start {python}: {err}"
    record["duration_s"] = round(time.monotonic() - started, 1)
    results = out / "results.json"
    if not results.is_file():
        record.setdefault("runner_error", "tck run wrote no results.json")
        return record
    try:
        causes = subprocess.run(
            [python, "-c", CAUSES_SNIPPET, str(results)],
            capture_output=True,
            text=True,
            env=env,
            cwd=folder,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        record["runner_error"] = f"reading the root causes failed: {err}"
        return record
    if causes.returncode != 0:
        record["runner_error"] = "reading the root causes failed: " + causes.stderr[-500:]
        return record
    record.update(json.loads(causes.stdout))
    if not keep:
        _remove(folder)
        record.pop("folder")
    return record


def _remove(folder: Path) -> None:
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    folder.rmdir()


def load_addenda(path: Path | None) -> dict[str, list[str]]:
    """Codes judged after the freeze to name a bug's class (PROTOCOL.md, "Addenda"): a JSON
    list of {"bug", "code", "meaning", "judged_by", "date"}; bug id -> the codes."""
    if path is None:
        return {}
    entries = json.loads(path.read_text(encoding="utf-8"))
    added: dict[str, list[str]] = {}
    for entry in entries:
        missing = [k for k in ("bug", "code", "meaning", "judged_by", "date") if not entry.get(k)]
        if missing:
            raise ValueError(f"{path}: an addendum lacks {', '.join(missing)}: {entry}")
        added.setdefault(entry["bug"], []).append(entry["code"])
    return added


def score(
    bug: dict[str, Any], record: dict[str, Any], added: list[str] | None = None
) -> dict[str, Any]:
    causes = record.get("causes") or []
    first = causes[0] if causes else None
    expected = bug["expected_codes"]
    with_addenda = [*expected, *(added or [])]
    return {
        "id": bug["id"],
        "impl": bug["impl"],
        "class": bug["class"],
        "family": bug.get("family", ""),
        "expected_codes": expected,
        "class_without_code": bug["class_without_code"],
        "detected": bool(record.get("failing")),
        "first_cause": first,
        "first_message": record.get("first_message", ""),
        "right_class_first": first is not None and first in expected,
        # reported beside the frozen score, never instead of it
        "right_class_first_with_addenda": first is not None and first in with_addenda,
        "right_class_anywhere": any(c in expected for c in causes),
        "causes": causes,
        "summary": record.get("summary"),
        "duration_s": record.get("duration_s"),
        "runner_error": record.get("runner_error"),
        "output_tail": record.get("output_tail") if record.get("runner_error") else None,
        "folder": record.get("folder"),
    }


def _imports_tck(python: str) -> bool:
    """Can ``python`` import the tck whose report ranking the runner reads?"""
    try:
        probe = subprocess.run(
            [python, "-c", "import tck.reports.causes"], capture_output=True, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


@functools.cache
def tck_git_head(python: str) -> str | None:
    """The git HEAD of the tree ``python`` imports tck from: the code the runs measured, which
    ``--tck-python`` may take from another checkout than this file's. None where that tree is
    not a git checkout (an installed wheel) or ``python`` cannot say where tck is."""
    where = "import pathlib, tck; print(pathlib.Path(tck.__file__).resolve().parent)"
    try:
        found = subprocess.run([python, "-c", where], capture_output=True, text=True, timeout=120)
        folder = found.stdout.strip()
        if found.returncode != 0 or not folder:
            return None
        proc = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1, help="bugs run in parallel (default 1)")
    parser.add_argument(
        "--only-bug", action="append", default=[], help="a bug id (repeat, or comma-separate)"
    )
    parser.add_argument("--json", type=Path, help="write machine-readable results here")
    parser.add_argument(
        "--tck-python",
        default=sys.executable,
        help="the interpreter whose tck is measured (python -m tck); default: this one",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per bug run")
    parser.add_argument(
        "--clean", action="store_true", help="run the correct implementations, no bug applied"
    )
    parser.add_argument("--keep", action="store_true", help="keep each run's temporary folder")
    parser.add_argument(
        "--addenda",
        type=Path,
        help="codes judged after the freeze to name a class no code named (PROTOCOL.md)",
    )
    parser.add_argument(
        "--set",
        type=Path,
        default=HERE,
        help="the benchmark's folder (bugs.json, implementations); default tests/blind",
    )
    parser.add_argument(
        "--no-controls", action="store_true", help="run the bugs only, not the set's controls"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    args.set = args.set.resolve()
    if not (args.set / "bugs.json").is_file():
        parser.error(f"--set {args.set}: no bugs.json there")
    try:
        implementations = load_implementations(args.set)
    except (OSError, ValueError) as err:
        parser.error(f"--set: {err}")

    if not _imports_tck(args.tck_python):
        print(
            f"error: {args.tck_python} cannot import tck.reports.causes; give --tck-python an "
            "interpreter with transformer-tck installed",
            file=sys.stderr,
        )
        return 2
    if args.clean:
        return _clean(args, implementations)
    try:
        addenda = load_addenda(args.addenda)
    except (OSError, ValueError) as err:
        print(f"error: --addenda: {err}", file=sys.stderr)
        return 2
    unknown_addenda = sorted(set(addenda) - {b["id"] for b in load_bugs(args.set)})
    if unknown_addenda:
        print(
            f"error: --addenda names unknown bug(s): {', '.join(unknown_addenda)}", file=sys.stderr
        )
        return 2

    bugs = load_bugs(args.set)
    controls = [] if args.no_controls else load_controls(args.set)
    findings = load_findings(args.set)
    wanted = {b for spec in args.only_bug for b in spec.split(",") if b}
    unknown = sorted(wanted - {b["id"] for b in [*bugs, *load_controls(args.set)]})
    if unknown:
        parser.error(f"unknown bug id(s): {', '.join(unknown)}")
    if wanted:
        bugs = [b for b in bugs if b["id"] in wanted]
        controls = [c for c in load_controls(args.set) if c["id"] in wanted]
    unknown_impls = sorted({r["impl"] for r in [*bugs, *controls]} - set(implementations))
    if unknown_impls:
        parser.error(f"--set {args.set}: no components listed for {', '.join(unknown_impls)}")

    def job(bug: dict[str, Any]) -> dict[str, Any]:
        is_control = bug in controls
        try:
            source = patched_source(bug, args.set)
        except ValueError as err:
            record: dict[str, Any] = {"runner_error": str(err)}
        else:
            record = run_one(
                bug["id"], bug["impl"], source, bug["components"], args.tck_python,
                args.timeout, args.keep,
            )  # fmt: skip
        if is_control:
            row = score_control(bug, record, findings)
            mark = "ok " if row["passed"] else "FAL"
            print(f"[{mark}] {bug['id']}: {row['failing']} failing", file=sys.stderr, flush=True)
            return row
        row = score(bug, record, addenda.get(bug["id"]))
        mark = "ok " if row["right_class_first"] else ("det" if row["detected"] else "---")
        print(f"[{mark}] {bug['id']}: {row['first_cause']}", file=sys.stderr, flush=True)
        return row

    work = [*bugs, *controls]
    done: dict[int, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(job, item): i for i, item in enumerate(work)}
        for future in as_completed(futures):
            done[futures[future]] = future.result()
            if args.json:  # after every bug: an interrupted run keeps what it measured
                finished = [done[i] for i in sorted(done)]
                _write_json(args, finished, addenda, complete=len(done) == len(work))
    scored = [done[i] for i in range(len(bugs))]
    scored_controls = [done[i] for i in range(len(bugs), len(work))]

    rows = [["bug", "detected", "first root cause", "right class first", "expected"]]
    for r in scored:
        rows.append(
            [
                r["id"],
                "yes" if r["detected"] else ("ERROR" if r["runner_error"] else "no"),
                r["first_cause"] or "-",
                "yes" if r["right_class_first"] else "no",
                ", ".join(r["expected_codes"]) or f"(no code: {r['class_without_code']})",
            ]
        )
    print(_table(rows))
    total = len(scored)
    detected = sum(r["detected"] for r in scored)
    right = sum(r["right_class_first"] for r in scored)
    anywhere = sum(r["right_class_anywhere"] for r in scored)
    with_code = sum(bool(r["expected_codes"]) for r in scored)
    errors = [r["id"] for r in scored if r["runner_error"]]
    print()
    print(f"detected:          {detected}/{total}")
    print(f"right class first: {right}/{total}  ({right}/{with_code} of the bugs a code names)")
    print(f"right class among the root causes: {anywhere}/{total}")
    if addenda:
        judged = sum(r["right_class_first_with_addenda"] for r in scored)
        print(f"right class first with the addenda ({args.addenda}): {judged}/{total}")
    if errors:
        print(f"runner errors ({len(errors)}): {', '.join(errors)}")
    families: dict[str, list[dict[str, Any]]] = {}
    for r in scored:
        families.setdefault(r["family"] or "-", []).append(r)
    print()
    by_family = [["family", "bugs", "detected", "right class first"]]
    for family, members in sorted(families.items()):
        by_family.append(
            [
                family,
                str(len(members)),
                str(sum(m["detected"] for m in members)),
                str(sum(m["right_class_first"] for m in members)),
            ]
        )
    print(_table(by_family))
    if scored_controls:
        print()
        rows = [["control", "failing rows", "passed", "root causes"]]
        for c in scored_controls:
            rows.append(
                [
                    c["id"],
                    "ERROR" if c["runner_error"] else str(c["failing"]),
                    "yes" if c["passed"] else "no",
                    ", ".join(c["causes"]) or "-",
                ]
            )
        print(_table(rows))
        passed = sum(c["passed"] for c in scored_controls)
        print(f"controls passed (0 failing rows): {passed}/{len(scored_controls)}")
        if findings:
            judged = sum(c["passed_with_findings"] for c in scored_controls)
            print(
                f"controls passed counting the judged findings on their code "
                f"(findings.json): {judged}/{len(scored_controls)}"
            )
    return 0


def score_control(
    control: dict[str, Any],
    record: dict[str, Any],
    findings: dict[str, set[tuple[str, str]]] | None = None,
) -> dict[str, Any]:
    """A control passes when its run has no fail or error row (and the runner had no error);
    it passes with findings when every failing row is a judged finding on its implementation
    (``load_findings``): the rewrite added no failure of its own."""
    failing = record.get("failing")
    judged = (findings or {}).get(control["impl"], set()) | (findings or {}).get(
        control["id"], set()
    )
    rows = [tuple(row) for row in record.get("failing_rows") or []]
    passed = failing == 0 and not record.get("runner_error")
    return {
        "id": control["id"],
        "impl": control["impl"],
        "control": True,
        "failing": failing,
        "passed": passed,
        "passed_with_findings": passed
        or (
            not record.get("runner_error")
            and len(rows) == failing
            and all(row in judged for row in rows)
        ),
        "causes": record.get("causes") or [],
        "summary": record.get("summary"),
        "duration_s": record.get("duration_s"),
        "runner_error": record.get("runner_error"),
        "output_tail": record.get("output_tail") if record.get("runner_error") else None,
        "folder": record.get("folder"),
    }


def _write_json(
    args: argparse.Namespace,
    scored: list[dict[str, Any]],
    addenda: dict[str, list[str]],
    *,
    complete: bool,
) -> None:
    """The machine-readable results so far; ``complete`` once every selected bug ran."""
    controls = [r for r in scored if r.get("control")]
    scored = [r for r in scored if not r.get("control")]
    controls_file = args.set / "controls.json"
    payload = {
        "set": str(args.set),
        "bugs_sha256": hashlib.sha256((args.set / "bugs.json").read_bytes()).hexdigest(),
        "controls_sha256": (
            hashlib.sha256(controls_file.read_bytes()).hexdigest()
            if controls_file.is_file()
            else None
        ),
        "git_head": tck_git_head(args.tck_python),  # of the tck measured
        "tck_python": args.tck_python,
        "complete": complete,
        "totals": {
            "bugs": len(scored),
            "detected": sum(r["detected"] for r in scored),
            "right_class_first": sum(r["right_class_first"] for r in scored),
            "right_class_anywhere": sum(r["right_class_anywhere"] for r in scored),
            "bugs_with_expected_codes": sum(bool(r["expected_codes"]) for r in scored),
            "runner_errors": sum(bool(r["runner_error"]) for r in scored),
            "right_class_first_with_addenda": (
                sum(r["right_class_first_with_addenda"] for r in scored) if addenda else None
            ),
            "controls": len(controls),
            "controls_passed": sum(c["passed"] for c in controls),
            "controls_passed_with_findings": sum(
                c.get("passed_with_findings", c["passed"]) for c in controls
            ),
        },
        "bugs": scored,
        "controls": controls,
    }
    args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")


def _clean(args: argparse.Namespace, implementations: dict[str, list[str]]) -> int:
    """Each correct implementation on every component it exposes: a false failure here is a
    finding of its own (the benchmark's numbers assume the unpatched code passes)."""
    rows = [["implementation", "failing rows", "root causes", "summary"]]
    records = {}
    for impl, components in implementations.items():
        source = (args.set / f"{impl}.py").read_text(encoding="utf-8")
        record = run_one(
            f"clean-{impl}", impl, source, components, args.tck_python, args.timeout, args.keep
        )
        records[impl] = record
        rows.append(
            [
                impl,
                str(record.get("failing", "ERROR")),
                ", ".join(record.get("causes") or []) or "-",
                json.dumps(record.get("summary")),
            ]
        )
    print(_table(rows))
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r.get("failing") == 0 for r in records.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
