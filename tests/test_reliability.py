"""A run survives a broken adapter, bad input gets one line, and nothing loads pickles.

Each fault of tests/support/faulty_adapter.py fires in exactly one check (oracle equality
on layer_norm): that row must say what happened, every other row must pass or skip, and
the reports must be written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tck.conformance.cli import main

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = Path(__file__).resolve().parent / "support"

# fault -> (status, diagnosis code or None for any, words the message must hold)
FAULTS = {
    "raise": ("error", "adapter.exception", "RuntimeError: the adapter <b>exploded</b>"),
    "nan": ("fail", None, "NaN"),
    "inf": ("fail", None, "inf"),
    "shape": ("fail", "shape.wrong_output_shape", "output shape"),
    "dtype": ("fail", "adapter.output_not_float", "int64"),
    "not_array": ("fail", "adapter.output_not_array", "list"),
    "hang": ("error", "adapter.timeout", "did not finish within 3.0 s"),
    "segfault": ("error", "adapter.crashed", "crashed while running"),
    "abort": ("error", "adapter.crashed", "crashed while running"),
}


def run_faulty(fault: str, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    out = tmp_path / "out"
    env = {
        **os.environ,
        "PYTHONPATH": str(SUPPORT),
        "TCK_FAULT": fault,
        "TCK_FAULT_ONCE": str(tmp_path / "fired"),
    }
    command = ["run", "--adapter", "faulty_adapter:adapter", "--out", str(out), "--timeout", "3"]
    proc = subprocess.run(
        [sys.executable, "-m", "tck", *command, *extra],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    return proc, out


@pytest.mark.parametrize("fault", FAULTS)
def test_a_broken_adapter_is_one_row_and_the_run_goes_on(fault, tmp_path):
    status, code, words = FAULTS[fault]
    proc, out = run_faulty(fault, tmp_path)
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
    "torch" + ".load(",  # every torch.load must say weights_only=True: none is needed today
]


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
