"""A run survives a broken adapter, bad input gets one line, and nothing loads pickles.

Each fault of tests/support/faulty_adapter.py fires in exactly one check (oracle equality
on layer_norm): that row must say what happened, every other row must pass or skip, and
the reports must be written.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tck.cli import main

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parents[1] / "support"

# fault -> (status, diagnosis code or None for any, words the message must hold)
FAULTS = {
    "raise": ("error", "adapter.exception", "RuntimeError: the adapter <b>exploded</b>"),
    "nan": ("fail", None, "NaN"),
    "inf": ("fail", None, "inf"),
    "shape": ("fail", "shape.wrong_output_shape", "output shape"),
    "dtype": ("fail", "adapter.output_not_float", "int64"),
    "not_array": ("fail", "adapter.output_not_array", "list"),
    "hang": ("error", "adapter.timeout", "did not finish within 10.0 s"),
    "segfault": ("error", "adapter.crashed", "crashed while running"),
    "abort": ("error", "adapter.crashed", "crashed while running"),
    # faults that used to end in a false green, a lost report or a wrong verdict
    "keyboard_interrupt": ("error", "adapter.exception", "KeyboardInterrupt without a Ctrl-C"),
    "bad_str": ("error", "adapter.exception", "whose str() raised ValueError"),
    "exit0": ("error", "adapter.crashed", "os._exit(0)"),
    "scribble": ("fail", "adapter.input_modified", "changed its input(s) 'x' in place"),
    "scribble_buggy": ("fail", None, "(also: run() changed its input(s) 'x' in place"),
    "zero_d": ("fail", "shape.wrong_output_shape", "0-d array"),
    "ansi": ("error", "adapter.exception", "\\x1b[31mred\\x1b[0m\\x00\\x07"),
    "undecodable": ("error", "adapter.exception", "bytes \\udcff\\udcfe not utf-8"),
    # a model's own shape assert (fairseq's style): the implementation raising, not a check
    # failing, and the bare assert named by its statement
    "bare_assert": ("error", "adapter.exception", "raised by `assert out.shape[-1] == -1`"),
}


def run_faulty(
    fault: str,
    tmp_path: Path,
    *extra: str,
    env: dict[str, str] | None = None,
    out: Path | None = None,
) -> tuple[subprocess.CompletedProcess, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = out or tmp_path / "out"
    env = {
        **os.environ,
        "PYTHONPATH": str(SUPPORT),
        "TCK_FAULT": fault,
        "TCK_FAULT_ONCE": str(tmp_path / "fired"),
        **(env or {}),
    }
    # A limit long enough for a cold worker on a loaded machine (the first gradient check
    # imports much of torch); the hang tests pass their own.
    command = ["run", "--adapter", "faulty_adapter:adapter", "--out", str(out), "--timeout", "60"]
    proc = subprocess.run(
        [sys.executable, "-m", "tck", *command, *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    return proc, out


def _tck(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m tck ARGS`` with the faulty adapters of tests/support importable."""
    return subprocess.run(
        [sys.executable, "-m", "tck", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SUPPORT)},
        cwd=cwd,
        timeout=600,
    )


@pytest.mark.parametrize("fault", FAULTS)
def test_a_broken_adapter_is_one_row_and_the_run_goes_on(fault, tmp_path):
    status, code, words = FAULTS[fault]
    proc, out = run_faulty(fault, tmp_path, *(("--timeout", "10") if fault == "hang" else ()))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    for name in ("results.json", "index.html", "junit.xml"):
        assert (out / name).exists(), name
    document = json.loads((out / "results.json").read_text())
    bad = [r for r in document["results"] if r["status"] in ("fail", "error")]
    assert [(r["check"], r["subject"]) for r in bad] == [("equality.oracle", "layer_norm")]
    assert bad[0]["status"] == status
    assert code is None or bad[0]["diagnosis"]["code"] == code, bad[0]["diagnosis"]
    assert words in bad[0]["diagnosis"]["message"], bad[0]["diagnosis"]
    assert document["summary"]["passed"] > 20  # every other check ran, and passed
    assert "not_run" not in document
    assert "Traceback" not in proc.stdout


def test_in_process_runs_give_the_same_verdicts_as_worker_runs(tmp_path):
    verdicts = []
    for workers in ("0", "2"):
        proc, out = run_faulty("nan", tmp_path / workers, "-n", workers)
        assert proc.returncode == 1, proc.stderr[-2000:]
        document = json.loads((out / "results.json").read_text())
        verdicts.append([(r["check"], r["subject"], r["status"]) for r in document["results"]])
    assert verdicts[0] == verdicts[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--adapter", "tck.adapters:INPUTS"], "not an adapter"),
        (["run", "--workers", "many"], "'many' is not a number of workers or 'auto'"),
        (["run", "--timeout", "soon"], "invalid float value: 'soon'"),
        (["report"], "the following arguments are required: DIR"),
    ],
)
def test_more_bad_input_is_one_line_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_debug_shows_the_traceback():
    with pytest.raises(Exception, match="unknown adapter"):
        main(["--debug", "run", "--adapter", "no_such_adapter"])


# Spelled in pieces so that this file does not match its own search.
FORBIDDEN = [
    "allow_pickle" + "=True",
    "weights_only" + "=False",
    "pickle" + ".load",
    "pickle" + ".loads",
]
TORCH_LOAD = "torch" + ".load("  # allowed only with weights_only=True in the same call


def _call_text(text: str, start: int) -> str:
    """The argument text of the call whose "(" ends at ``start`` (balanced parentheses)."""
    depth = 1
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            return text[start:end]
    return text[start:]


def test_nothing_loads_pickles():
    offenders = []
    for path in ROOT.rglob("*"):
        if path.suffix not in (".py", ".md", ".toml", ".ini", ".cfg", ".txt", ".j2") or any(
            part.startswith(".") or part in ("build", "dist") or part.endswith(".egg-info")
            for part in path.relative_to(ROOT).parts
        ):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for pattern in FORBIDDEN:
            for match in re.finditer(re.escape(pattern), text):
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {pattern}")
        for match in re.finditer(re.escape(TORCH_LOAD), text):
            if "weights_only" + "=True" not in _call_text(text, match.end()):
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(
                    f"{path.relative_to(ROOT)}:{line}: {TORCH_LOAD} without weights_only"
                )
    assert not offenders, offenders


def test_the_console_script_finds_an_adapter_in_the_current_folder(tmp_path):
    """`tck run --adapter my_module:adapter` where my_module.py sits in the current folder."""
    (tmp_path / "my_layer_norm.py").write_text(
        "from tck.adapters import TorchModuleAdapter\n"
        "from tck.adapters.reference import entry\n"
        "from tck.reference import canonical_conventions\n"
        "adapter = TorchModuleAdapter('mine', "
        "[entry('layer_norm', canonical_conventions('layer_norm'))])\n"
    )
    script = Path(sys.executable).with_name("tck")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "tck"]
    proc = subprocess.run(
        [*command, "run", "--adapter", "my_layer_norm:adapter", "-n", "0", "--out", "out"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "tck mine:" in proc.stdout


# ------------------------------------------------------------------------- no false green


def _bad_rows(document: dict) -> list[dict]:
    return [r for r in document["results"] if r["status"] in ("fail", "error")]


def _all_reports_name(out: Path, check: str, code: str) -> None:
    """results.json, index.html and junit.xml all hold the row (JUnit: well-formed XML)."""
    document = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert any(r["check"] == check and r["diagnosis"]["code"] == code for r in document["results"])
    assert code in (out / "index.html").read_text(encoding="utf-8")
    root = ET.parse(out / "junit.xml").getroot()
    types = [e.get("type") for e in root.iter() if e.tag in ("error", "failure")]
    assert code in types, types


def test_a_buggy_adapter_that_scribbles_on_its_input_fails_the_oracle(tmp_path):
    """The oracle compares with the inputs as they were made, not as the adapter left them."""
    proc, out = run_faulty("scribble_buggy", tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    (row,) = _bad_rows(json.loads((out / "results.json").read_text()))
    assert row["diagnosis"]["code"] != "adapter.input_modified", row["diagnosis"]
    assert row["metrics"]["side_effects"] == ["adapter.input_modified"]


def test_a_hang_in_native_code_ends_its_worker_and_is_a_timeout_row(tmp_path):
    proc, out = run_faulty("native_hang", tmp_path, "--timeout", "15")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads((out / "results.json").read_text())
    bad = _bad_rows(document)
    assert [(r["check"], r["diagnosis"]["code"]) for r in bad] == [
        ("equality.oracle", "adapter.timeout")
    ], bad
    assert "native code" in bad[0]["diagnosis"]["message"]
    assert "not_run" not in document


def test_the_watchdog_rearms_once_per_slack_and_names_the_check_it_ended(tmp_path, monkeypatch):
    """One watchdog per process (conformance/runner/watchdog.py): its marker names the current
    check, faulthandler is armed once per SLACK of the limit (not per check), and a marker
    counts as a timeout only with faulthandler's words and only for the check it names."""
    from tck.conformance.runner import watchdog

    calls = []
    monkeypatch.setattr(
        watchdog.faulthandler, "dump_traceback_later", lambda t, **kw: calls.append(("arm", t))
    )
    monkeypatch.setattr(
        watchdog.faulthandler, "cancel_dump_traceback_later", lambda: calls.append(("cancel",))
    )
    clock = [100.0]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: clock[0])
    dog = watchdog.Watchdog(tmp_path, 15.0)  # limit 20 s: re-armed after 2 s
    for i in range(50):  # 50 checks of 0.25 s: armed at checks 0, 9, ..., 45
        dog.start(f"test_x.py::check[{i}]")
        clock[0] += 0.25
        dog.stop()
    assert calls[0] == ("arm", pytest.approx(22.0)), calls
    assert [c[0] for c in calls] == ["arm", "cancel"] * 5 + ["arm"], calls
    assert dog.path.read_bytes().startswith(b"test_x.py::check[49]\n")
    assert not watchdog.timed_out(tmp_path, "test_x.py::check[49]")  # it died otherwise
    with open(dog.path, "ab") as marker:  # as faulthandler writes when the deadline passes
        marker.write(b"Timeout (0:00:22)!\nThread 0x1 (most recent call first):\n")
    assert watchdog.timed_out(tmp_path, "test_x.py::check[49]")
    assert not watchdog.timed_out(tmp_path, "test_x.py::check[48]")
    dog.close()
    assert not dog.path.exists() and calls[-1] == ("cancel",)


@pytest.mark.parametrize("fault", ["exit0", "keyboard_interrupt"])
def test_in_process_runs_contain_exits_and_stray_interrupts(fault, tmp_path):
    proc, out = run_faulty(fault, tmp_path, "-n", "0")
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads((out / "results.json").read_text())
    assert [(r["check"], r["status"]) for r in _bad_rows(document)] == [
        ("equality.oracle", "error")
    ]
    assert document["summary"]["passed"] > 20 and "interrupted" not in document


@pytest.fixture
def sigint_not_ignored():
    """A real SIGINT must be able to reach the tck process. A shell starts a background job
    (``tox &``) with SIGINT ignored, and exec keeps an ignored signal ignored, so there the
    interrupt would never arrive and the run would finish. A handler set here is the
    default in the child instead (exec resets handlers)."""
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("workers", ["0", "1"])
@pytest.mark.usefixtures("sigint_not_ignored")
def test_ctrl_c_keeps_the_complete_results_and_writes_the_partial_ones_beside(workers, tmp_path):
    """A real SIGINT mid-run (sent by the adapter to the tck process, at a known point)."""
    run_faulty("nan", tmp_path / "complete")
    complete = tmp_path / "complete" / "out"
    before = (complete / "results.json").read_bytes()
    proc, _ = run_faulty(
        "ctrl_c",
        tmp_path / "interrupted",
        "-n",
        workers,
        env={"TCK_SIGINT": "self" if workers == "0" else "parent"},
        out=complete,
    )
    assert proc.returncode == 130, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (complete / "results.json").read_bytes() == before  # never over them
    partial = complete / "interrupted"
    document = json.loads((partial / "results.json").read_text())
    assert document["interrupted"] is True
    interrupted = [r for r in document["results"] if r["diagnosis"]["code"] == "run.interrupted"]
    assert interrupted and document["summary"]["errors"] >= len(interrupted)
    assert "INTERRUPTED" in proc.stdout
    _all_reports_name(partial, interrupted[0]["check"], "run.interrupted")
    # the next complete run supersedes the partial results: they go
    done, _ = run_faulty("nan", tmp_path / "again", out=complete)
    assert done.returncode == 1 and not partial.exists(), done.stderr[-2000:]


def test_checks_that_never_ran_are_errors_in_every_report(tmp_path):
    """Every oracle check aborts its worker; xdist stops replacing them, so checks are left
    that never ran: each is an error row, and the run is red."""
    out = tmp_path / "out"
    proc = _tck(
        tmp_path,
        "run",
        "--adapter",
        "hostile_adapters:crash_always",
        "--out",
        str(out),
        "--only",
        "layer_norm",
        "-n",
        "1",
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads((out / "results.json").read_text())
    missing = [r for r in document["results"] if r["diagnosis"]["code"] == "run.not_run"]
    assert len(missing) == len(document["not_run"]) > 0  # each one a row
    assert "not run" in proc.stdout
    assert document["summary"]["errors"] == len(_bad_rows(document))
    for r in document["results"]:
        if r["diagnosis"]["code"] == "run.not_run":
            _all_reports_name(out, r["check"], "run.not_run")
            break


def test_a_crash_in_a_subject_with_a_non_ascii_name_is_its_row(tmp_path):
    out = tmp_path / "out"
    proc = _tck(tmp_path, "run", "--adapter", "hostile_adapters:non_ascii_crash", "--out", str(out))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads((out / "results.json").read_text(encoding="utf-8"))
    (row,) = _bad_rows(document)
    assert (row["check"], row["subject"]) == ("equality.oracle", "layer_norm[é ü 名]")
    assert row["diagnosis"]["code"] == "adapter.crashed"
    assert "not_run" not in document


# ------------------------------------------------------------- private inputs and outputs


def test_a_reused_output_buffer_is_its_own_finding_and_changes_no_verdict(tmp_path):
    out = tmp_path / "out"
    proc = _tck(tmp_path, "run", "--adapter", "hostile_adapters:reuses_output", "--out", str(out))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads((out / "results.json").read_text())
    codes = {r["diagnosis"]["code"] for r in _bad_rows(document)}
    assert codes == {"adapter.output_reused"}, codes  # nothing else: the values are right
    determinism = [r for r in document["results"] if r["check"] == "blocks.eval_determinism"]
    assert determinism and all(r["status"] == "fail" for r in determinism)


def test_a_noisy_adapter_in_a_reused_buffer_fails_eval_determinism(tmp_path):
    out = tmp_path / "out"
    proc = _tck(
        tmp_path, "run", "--adapter", "hostile_adapters:noisy_reuses_output", "--out", str(out)
    )
    assert proc.returncode == 1
    document = json.loads((out / "results.json").read_text())
    (row,) = [r for r in document["results"] if r["check"] == "blocks.eval_determinism"]
    assert row["status"] == "fail"
    assert row["diagnosis"]["code"] != "adapter.output_reused", row["diagnosis"]


# ---------------------------------------------------------------------- inert text


@pytest.mark.parametrize("fault", ["ansi", "undecodable"])
def test_hostile_text_is_inert_in_every_report_and_the_terminal(fault, tmp_path):
    proc, out = run_faulty(fault, tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    ET.parse(out / "junit.xml")  # well-formed XML, or this raises
    for name in ("results.json", "index.html", "junit.xml"):
        text = (out / name).read_bytes().decode("utf-8")  # UTF-8, or this raises
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), name
    assert "\x1b" not in proc.stdout and "\x1b" not in proc.stderr
    assert "<![CDATA[" not in (out / "index.html").read_text()  # escaped, never markup


def test_repro_snippets_are_built_from_literals_only():
    from tck.conformance.runner import repro
    from tck.conformance.toolkit.harness import DEFAULT_CONFIG

    evil = 'x\nimport os; os.system("echo PWNED")\n#'
    snippets = [
        repro.pytest_snippet(
            adapter_spec=evil, seed=3, module="test_norm", test_id=f"test_a[{evil}]", title=evil
        ),
        repro.oracle_snippet(
            adapter_spec=evil,
            subject=evil,
            component="layer_norm",
            config=DEFAULT_CONFIG,
            seed=0,
            inputs={"x": np.zeros((1, 2, 24))},
            recipe=None,
            title=evil,
        ),
    ]
    for code in snippets:
        tree = ast.parse(code)
        calls = [
            n.func.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
        ]
        assert "system" not in calls, code
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "os" not in imported, code


def test_a_subject_named_with_a_newline_runs_and_reports(tmp_path):
    out = tmp_path / "out"
    proc = _tck(
        tmp_path, "run", "--adapter", "hostile_adapters:newline_name", "--out", str(out), "-n", "0"
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "PWNED" not in proc.stdout
    ET.parse(out / "junit.xml")
    document = json.loads((out / "results.json").read_text())
    assert {r["subject"] for r in document["results"]} == {
        'ln\nimport os; os.system("echo PWNED")\n#'
    }


def test_captured_output_is_bounded(tmp_path):
    proc, out = run_faulty("chatty", tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert (out / "junit.xml").stat().st_size < 2_000_000
    assert len(proc.stdout) + len(proc.stderr) < 2_000_000


# ------------------------------------------------------------- one run per output folder


def test_a_second_run_into_the_same_folder_is_refused(tmp_path, capsys):
    import filelock

    out = tmp_path / "out"
    out.mkdir()
    with filelock.FileLock(str(out / ".tck.lock")):
        assert main(["run", "--adapter", "reference", "--out", str(out), "-n", "0"]) == 2
    err = capsys.readouterr().err
    assert "another tck run is writing to" in err and err.count("\n") == 1


@pytest.mark.parametrize("name", ["index.html", "junit.xml", "results.json"])
def test_files_tck_did_not_write_are_never_overwritten(name, tmp_path, capsys):
    (tmp_path / name).write_text("<html>my own page</html>\n")
    assert main(["run", "--adapter", "reference", "--out", str(tmp_path), "-n", "0"]) == 2
    assert "which tck did not write" in capsys.readouterr().err
    assert (tmp_path / name).read_text() == "<html>my own page</html>\n"


def test_removing_reports_keeps_what_tck_did_not_write(tmp_path):
    from tck.reports import files

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    for folder in (ours, theirs):
        files.atomic_write(folder / "junit.xml", '<testsuites name="tck x"/>\n')
    (theirs / "index.html").write_text("<html>my own page</html>\n")
    files.remove_reports(ours)
    files.remove_reports(theirs)
    files.remove_reports(tmp_path / "missing")  # nothing there: nothing to do
    assert not ours.exists()
    assert [p.name for p in theirs.iterdir()] == ["index.html"]


def test_report_files_are_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    from tck.reports import files

    target = tmp_path / "results.json"
    target.write_text("old and complete\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(OSError):
        files.atomic_write(target, "new")
    assert target.read_text() == "old and complete\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary left


# ---------------------------------------------------------------------- strict input


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--only", ""], "names no component"),
        (["run", "--only", " , "], "names no component"),
        (["run", "--seed", "-1"], "--seed -1 is not between 0 and 4294967295"),
        (["run", "--seed", str(2**70)], "is not between 0 and 4294967295"),
        (["run", "--timeout", "-5"], "--timeout -5 is not a positive number of seconds"),
        (["run", "--timeout", "0"], "is not a positive number of seconds"),
        (["run", "--timeout", "nan"], "is not a positive number of seconds"),
        (["run", "--threads", "0"], "--threads 0 is not between 1 and 1024"),
        (["run", "--adapter", "hostile_adapters:subjects_raise"], "subjects() raised"),
        (["run", "--adapter", "hostile_adapters:subjects_exit"], "subjects() raised SystemExit"),
        (["run", "--adapter", "hostile_adapters:duplicate_names"], "more than one subject named"),
        (["run", "--adapter", "exit_on_import:adapter"], "SystemExit"),
        (["run", "--baseline", "nowhere/results.json"], "does not exist"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(args, message, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(SUPPORT))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_export_onnx_to_a_folder_is_one_line(tmp_path, capsys):
    pytest.importorskip("onnx")
    folder = tmp_path / "graph.onnx"
    folder.mkdir()
    args = ["export-onnx", "--adapter", "reference", "--component", "layer_norm"]
    assert main([*args, "--out", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "not a regular file" in err and err.count("\n") == 1


def _valid_document() -> dict:
    return {
        "schema": 1,
        "adapter": {"name": "x", "deviations": {"layer_norm": {}}},
        "environment": {"python": "3"},
        "profile": "ci",
        "seed": 0,
        "duration_s": 1.0,
        "summary": {"passed": 1, "failed": 0, "skipped": 0, "errors": 0, "conventions": 0},
        "results": [
            {
                "check": "norm.x",
                "clause": ["5.1"],
                "component": "layer_norm",
                "subject": "layer_norm",
                "status": "pass",
                "diagnosis": {"code": "", "message": ""},
                "metrics": {},
                "repro": "",
                "counterexample": "",
                "notes": [],
                "duration_s": 0.1,
            }
        ],
    }


def _broken(change) -> dict:
    document = _valid_document()
    change(document)
    return document


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (_broken(lambda d: d["results"][0].pop("status")), "'status' is a required property"),
        (_broken(lambda d: d["results"][0].update(status="maybe")), "results/0/status"),
        (_broken(lambda d: d["summary"].update(failed="none")), "summary/failed"),
        (_broken(lambda d: d.update(adapter="torch")), "adapter"),
        (_broken(lambda d: d["results"][0].update(clause="5.1")), "results/0/clause"),
        ([1, 2], "not an object"),
        (_broken(lambda d: d.pop("seed")), "'seed' is a required property"),
    ],
)
def test_report_refuses_a_malformed_results_file_in_one_line(document, message, tmp_path, capsys):
    (tmp_path / "results.json").write_text(json.dumps(document))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_report_renders_a_valid_results_file(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps(_valid_document()))
    assert main(["report", str(tmp_path)]) == 0


# ------------------------------------------------------------------------- containment


def test_the_plugin_leaves_other_projects_alone(tmp_path):
    """A project with its own fixture named ``subject``: the tck plugin (installed, so loaded
    in every pytest session) must not parametrise it or import $TCK_ADAPTER."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef subject():\n    return 'mine'\n"
    )
    (tmp_path / "test_mine.py").write_text(
        "def test_uses_subject(subject):\n    assert subject == 'mine'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_mine.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TCK_ADAPTER": "no_such_module:adapter"},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "1 passed" in proc.stdout


# ------------------------------------------------------------------------ the baseline


def test_a_baseline_turns_known_failures_green_and_new_ones_red(tmp_path):
    proc, old = run_faulty("nan", tmp_path / "old")
    assert proc.returncode == 1
    baseline = str(old / "results.json")
    proc, out = run_faulty("nan", tmp_path / "same", "--baseline", baseline)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "still failing, known from the baseline: 1" in proc.stdout
    assert "new since the baseline (these fail the run): 0" in proc.stdout
    document = json.loads((out / "results.json").read_text())
    assert document["baseline"]["known"] and not document["baseline"]["new"]
    root = ET.parse(out / "junit.xml").getroot()
    assert root.get("failures") == "0" and root.get("errors") == "0"
    assert [e.get("type") for e in root.iter("skipped")].count("baseline.known") == 1
    assert 'id="baseline"' in (out / "index.html").read_text()

    # another fault is another adapter name (faulty[shape]): compared on purpose
    proc, out = run_faulty(
        "shape", tmp_path / "new", "--baseline", baseline, "--accept-baseline-mismatch"
    )
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "new since the baseline (these fail the run): 1" in proc.stdout
    document = json.loads((out / "results.json").read_text())
    assert len(document["baseline"]["new"]) == 1
    root = ET.parse(out / "junit.xml").getroot()
    assert root.get("failures") == "1"
    assert "NEW since the baseline" in "".join(e.text or "" for e in root.iter("failure"))


def test_the_baseline_lists_fixed_rows_in_every_report(tmp_path):
    from tck.conformance.runner.baseline import apply_baseline, red
    from tck.reports import junit_xml
    from tck.reports.html import render_report

    old = _valid_document()
    old["results"][0].update(status="fail", diagnosis={"code": "x.bug", "message": "m"})
    now = _valid_document()
    apply_baseline(now, old, "old/results.json")
    assert now["baseline"]["fixed"] == ["norm.x[layer_norm]"] and not red(now)
    assert "FIXED since the baseline" in junit_xml(now)
    assert "Fixed since the baseline: 1" in render_report(now)
    # a failure with another diagnosis code than the baseline's is new
    now["results"][0].update(status="fail", diagnosis={"code": "x.other", "message": "m"})
    apply_baseline(now, old, "old/results.json")
    assert now["baseline"]["new"] == ["norm.x[layer_norm]"] and red(now)


def test_an_adapter_whose_load_raises_gets_named_error_rows(tmp_path):
    out = tmp_path / "out"
    proc = _tck(
        tmp_path, "run", "--adapter", "hostile_adapters:load_raises", "--out", str(out), "-n", "0"
    )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads((out / "results.json").read_text())
    bad = _bad_rows(document)
    assert bad and all(r["status"] == "error" for r in bad)
    assert all("RuntimeError: load is broken" in r["diagnosis"]["message"] for r in bad)
    assert "Traceback" not in proc.stdout
