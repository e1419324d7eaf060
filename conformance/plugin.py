"""The pytest plugin: runs the checks of tck.conformance against an adapter.

    pytest --pyargs tck.conformance --tck-adapter=torch.nn [--tck-out=DIR] [--tck-only=mha]

Each check is a test with ``@pytest.mark.spec(...)`` (the clauses it verifies) and
``@pytest.mark.components(...)`` (what it applies to); it is parametrised over the
adapter's subjects of those components and receives the ``tck`` fixture (a Harness).
Every outcome becomes a Result; ``--tck-out`` writes them to DIR/results.json.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tck.adapters import (
    DEFAULT_ADAPTER,
    Adapter,
    AdapterError,
    AdapterFailure,
    Subject,
    Unsupported,
    load_adapter,
)
from tck.fixtures import FixtureError
from tck.reference import COMPONENTS, canonical_conventions

from . import repro
from .harness import FIELDS, Harness
from .profiles import PROFILES, load_profile
from .results import SCHEMA, CheckFailure, Result, summarize, write_results
from .verified import ORACLE_CHECKS, unverified_reason

_STATE = pytest.StashKey[dict[str, Any]]()
_HARNESS = pytest.StashKey["Harness"]()
_RESULT = "tck_result"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tck", "transformer-tck conformance checks")
    group.addoption(
        "--tck-adapter",
        default=None,
        help="built-in adapter name or module:attr (default: $TCK_ADAPTER or reference)",
    )
    group.addoption("--tck-out", default=None, help="write DIR/results.json")
    group.addoption("--tck-only", default=None, help="comma-separated components to check")
    group.addoption(
        "--tck-profile",
        default=None,
        choices=PROFILES,
        help="hypothesis profile (default: $HYPOTHESIS_PROFILE or dev)",
    )
    group.addoption("--tck-seed", default=0, type=int, help="seed of params and inputs")
    group.addoption(
        "--tck-threads",
        default=1,
        type=int,
        help="torch intra-op threads while checks run (default 1: the checks' "
        "tensors are tiny, and more threads only contend)",
    )
    group.addoption(
        "--tck-export",
        default=None,
        choices=("onnx",),
        help="also check each torch subject exported to ONNX and run in ONNX Runtime",
    )
    group.addoption(
        "--tck-opset", default=None, type=int, help="ONNX opset of --tck-export (default: torch's)"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spec(*clauses): the SPEC.md clauses a check verifies")
    config.addinivalue_line("markers", "components(*names): the components a check applies to")
    config.addinivalue_line("markers", "fields(*names): convention fields a probe measures")
    config.addinivalue_line(
        "markers", "exported: a check of the ONNX export itself (runs with --tck-export onnx)"
    )
    config.stash[_STATE] = {
        "adapter": None,
        "profile": None,
        "results": [],
        "done": set(),
        "start": time.time(),
    }
    config.pluginmanager.register(_Collector(config), "tck-results")


def _adapter(config: pytest.Config) -> Adapter:
    state = config.stash[_STATE]
    if state["adapter"] is None:
        try:
            adapter = load_adapter(config.getoption("--tck-adapter"))
            if config.getoption("--tck-export") == "onnx":
                from tck.adapters.onnx_runtime import with_onnx

                adapter = with_onnx(adapter, opset=config.getoption("--tck-opset"))
        except (AdapterError, TypeError) as err:
            raise pytest.UsageError(str(err)) from None
        state["adapter"] = adapter
        # Set here, not at configure time: the plugin loads in every pytest session of an
        # environment that has tck installed, and only sessions that run checks get here.
        # Measured on the 2-core CI machine: the reference run takes 7 s with one thread
        # and 160 s with torch's default when the cores are busy.
        import torch

        torch.set_num_threads(config.getoption("--tck-threads"))
    return state["adapter"]


def _only(config: pytest.Config) -> set[str] | None:
    only = config.getoption("--tck-only")
    if not only:
        return None
    names = {n.strip() for n in only.split(",") if n.strip()}
    unknown = names - set(COMPONENTS)
    if unknown:
        raise pytest.UsageError(
            f"--tck-only: unknown component(s) {', '.join(sorted(unknown))}; "
            f"choose from {', '.join(COMPONENTS)}"
        )
    return names


_CHECKS = Path(__file__).resolve().parent


def pytest_collectstart(collector: pytest.Collector) -> None:
    """Load the hypothesis profile just before the first check module is imported: @given
    fixes a test's settings when it decorates it, and the checks need the profile (they
    take the per-test harness fixture). Sessions that collect no check are left alone."""
    state = collector.config.stash[_STATE]
    if state["profile"] is None and isinstance(collector, pytest.Module):
        if Path(collector.path).resolve().parent == _CHECKS:
            state["profile"] = load_profile(collector.config.getoption("--tck-profile"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "subject" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("components")
    wanted = set(marker.args) if marker else set(COMPONENTS)
    only = _only(metafunc.config)
    adapter = _adapter(metafunc.config)
    subjects = [
        s
        for s in adapter.subjects()
        if s.component in wanted and (only is None or s.component in only)
    ]
    if metafunc.definition.get_closest_marker("exported"):  # once per exported torch subject
        origin = getattr(adapter, "origin", lambda s: None)
        subjects = [s for s in subjects if (origin(s) or (None, ""))[1] == "enable_all"]
    fields = metafunc.definition.get_closest_marker("fields")
    if fields is None:
        metafunc.parametrize("subject", subjects, ids=[s.name for s in subjects])
        return
    # Probes: one case per (subject, convention field that shapes its output).
    pairs = [(s, f) for s in subjects for f in fields.args if f in FIELDS.get(s.component, ())]
    metafunc.parametrize("subject,field", pairs, ids=[f"{s.name}-{f}" for s, f in pairs])


@pytest.fixture
def tck(request: pytest.FixtureRequest, subject: Subject) -> Harness:
    harness = Harness(
        _adapter(request.config), subject, seed=request.config.getoption("--tck-seed")
    )
    request.node.stash[_HARNESS] = harness
    return harness


def check_id(item: pytest.Item) -> str:
    module = item.module.__name__.rsplit(".", 1)[-1] if item.module else "checks"
    area = module.removeprefix("test_")
    name = getattr(item, "originalname", item.name).removeprefix("test_")
    params = getattr(item, "callspec", None) and item.callspec.params
    if params and "field" in params:  # a probe is named by what it measures
        name = params["field"]
    return f"{area}.{name}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    excinfo = call.excinfo
    if excinfo is not None and excinfo.errisinstance(Unsupported) and not report.passed:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {excinfo.value}")
    subject = getattr(item, "callspec", None) and item.callspec.params.get("subject")
    if not isinstance(subject, Subject):
        return report
    done = report.when == "call" or (report.when == "setup" and not report.passed)
    if done:
        # Carried by the report, so that under pytest-xdist it reaches the controller.
        report.user_properties.append((_RESULT, _result(item, subject, report, excinfo).to_dict()))
    return report


class _Collector:
    """Gathers results from reports: in a serial run all of them, under pytest-xdist on the
    controller (workers write nothing). A worker that dies running a check (a segfault or an
    abort in native code) leaves no result; xdist reports the crash, and it becomes an
    ``error`` naming the check."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.collected: set[str] = set()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        state = self.config.stash[_STATE]
        properties = dict(report.user_properties)
        if _RESULT in properties:
            state["results"].append(Result(**properties[_RESULT]))
            state["done"].add(report.nodeid)
        elif report.failed and "crashed while running" in str(report.longrepr):
            crash = _crash_result(self.config, report)
            if crash is not None:
                state["results"].append(crash)
                state["done"].add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected.update(ids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected.update(item.nodeid for item in session.items)


def _crash_result(config: pytest.Config, report: pytest.TestReport) -> Result | None:
    """An ``error`` for the check a dead worker was running, named from its node id."""
    path, _, name = report.nodeid.partition("::")
    function, _, param = name.partition("[")
    param = param.removesuffix("]")
    area = Path(path).stem.removeprefix("test_")
    check = function.removeprefix("test_")
    subjects = {s.name: s for s in _adapter(config).subjects()}
    subject = subjects.get(param)
    if subject is None:  # "<subject>-<field>" (a probe) or "<subject>-<dtype>"
        fields = {f for names in FIELDS.values() for f in names}
        for s in subjects.values():
            if param.startswith(s.name + "-"):
                subject, rest = s, param[len(s.name) + 1 :]
                check = rest if rest in fields else check
    if subject is None:
        return None
    return Result(
        check=f"{area}.{check}",
        clause=[],
        component=subject.component,
        subject=subject.name,
        status="error",
        diagnosis={
            "code": "adapter.crashed",
            "message": "the process running this check died (a segfault or an abort in "
            f"native code, or os._exit): {report.longrepr}. The checks after it ran in a "
            "fresh process.",
        },
        repro=repro.pytest_snippet(
            adapter_spec=_adapter_spec(config),
            seed=config.getoption("--tck-seed"),
            module=Path(path).stem,
            test_id=name,
            title=f"tck repro: {area}.{check} on {_adapter_spec(config)} [{subject.name}]",
            **_export(config),
        ),
    )


def _result(
    item: pytest.Item,
    subject: Subject,
    report: pytest.TestReport,
    excinfo: pytest.ExceptionInfo | None,
) -> Result:
    marker = item.get_closest_marker("spec")
    harness = item.stash.get(_HARNESS, None)
    metrics = dict(harness.metrics) if harness else {}
    if harness and harness.calls:
        metrics["calls"] = list(harness.calls)
    params = getattr(item, "callspec", None) and item.callspec.params
    if params and isinstance(params.get("dtype"), str):  # skips too: one row per dtype
        metrics.setdefault("dtype", params["dtype"])
    where = getattr(item.config.stash[_STATE]["adapter"], "subject_metrics", None)
    if callable(where):  # --tck-export: where the subject ran (torch, onnxruntime)
        metrics = {**where(subject), **metrics}
    clauses = harness.clauses if harness and harness.clauses else marker.args if marker else []
    result = Result(
        check=check_id(item),
        clause=list(clauses),
        component=subject.component,
        subject=subject.name,
        status="pass",
        metrics=metrics,
        duration_s=round(report.duration, 4),
    )
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        result.status = "skip"
        result.diagnosis = {"code": "skip", "message": reason.removeprefix("Skipped: ")}
    elif report.failed and excinfo is not None and _is_check_failure(excinfo.value):
        err = excinfo.value
        result.status = "fail"
        result.diagnosis = {"code": err.code, "message": err.message}
        result.metrics.update(err.metrics)
        result.repro = _repro(item, subject, excinfo)
    elif report.failed and excinfo is not None and isinstance(excinfo.value, AssertionError):
        result.status = "fail"
        result.diagnosis = {
            "code": f"{result.check}.assertion",
            "message": str(excinfo.value).strip()[:2000],
        }
        result.repro = _repro(item, subject, excinfo)
    elif report.failed:
        value = excinfo.value if excinfo is not None else None
        result.status = "error"
        result.diagnosis = {
            "code": "adapter.exception" if report.when == "call" else "adapter.build_failed",
            "message": f"{type(value).__name__}: {value}"
            if value is not None
            else str(report.longrepr)[:2000],
        }
        if isinstance(value, AdapterFailure):
            result.diagnosis = {"code": value.code, "message": value.message}
        if isinstance(value, FixtureError):
            result.diagnosis = {
                "code": "fixtures.file_corrupted",
                "message": f"{value}; nothing was compared with it (tck fixtures verify "
                "names every damaged file; reinstall, or rebuild with tck fixtures build)",
            }
        if value is not None and "from pytest-timeout" in str(value):
            limit = item.config.getoption("timeout", None)
            result.diagnosis = {
                "code": "adapter.timeout",
                "message": f"the check did not finish within {limit} s (tck run --timeout) "
                "and was stopped: the adapter hangs, or is too slow for these sizes",
            }
        result.repro = _repro(item, subject, excinfo)
    elif harness and harness.conventions_seen:
        result.status = "convention"
        codes = sorted({code for code, _ in harness.conventions_seen})
        result.diagnosis = {
            "code": ",".join(codes),
            "message": " ".join(dict.fromkeys(m for _, m in harness.conventions_seen)),
        }
        result.notes = list(subject.notes)
    if result.status == "pass" and result.check in ORACLE_CHECKS and harness:
        reason = unverified_reason(subject.component, harness.calls)  # SPEC.md §10.10
        if reason:
            result.status = "unverified"
            result.diagnosis = {"code": "verify.unmeasured", "message": reason}
    if result.status in ("fail", "error") and excinfo is not None:
        result.counterexample = repro.counterexample(getattr(excinfo.value, "__notes__", []))
    return result


def _is_check_failure(error: BaseException) -> bool:
    """A CheckFailure, also from a second copy of the package (pytest may import a check
    module under another name, and its relative imports with it): judged by its fields."""
    return isinstance(error, CheckFailure) or (
        isinstance(error, AssertionError)
        and isinstance(getattr(error, "code", None), str)
        and isinstance(getattr(error, "message", None), str)
    )


def _adapter_spec(config: pytest.Config) -> str:
    return config.getoption("--tck-adapter") or os.environ.get("TCK_ADAPTER") or DEFAULT_ADAPTER


def _export(config: pytest.Config) -> dict[str, Any]:
    """What the repro snippets pass on of --tck-export and --tck-opset."""
    return {"export": config.getoption("--tck-export"), "opset": config.getoption("--tck-opset")}


def _repro(item: pytest.Item, subject: Subject, excinfo: pytest.ExceptionInfo | None) -> str:
    harness = item.stash.get(_HARNESS, None)
    adapter, seed = _adapter_spec(item.config), item.config.getoption("--tck-seed")
    title = f"tck repro: {check_id(item)} on {adapter} [{subject.name}]"
    failed = harness.failed_call if harness else None
    # A float64 comparison replays in full; in other dtypes the check (which rounds the
    # inputs and bounds by the naive reference in that dtype) reruns instead.
    replayable = failed is not None and getattr(failed.inst, "dtype", "float64") == "float64"
    # an export check builds at its own opset and ORT level: it reruns instead
    replayable = replayable and item.get_closest_marker("exported") is None
    if replayable and _is_check_failure(excinfo.value if excinfo else None):
        return repro.oracle_snippet(
            adapter_spec=adapter,
            subject=subject.name,
            component=subject.component,
            config=failed.inst.config,
            seed=failed.inst.seed,
            inputs=failed.inputs,
            recipe=failed.recipe,
            title=f"{title}: {failed.what}",
            **_export(item.config),
        )
    module = item.module.__name__.rsplit(".", 1)[-1] if item.module else "checks"
    return repro.pytest_snippet(
        adapter_spec=adapter,
        seed=seed,
        module=module,
        test_id=item.name,
        title=title,
        **_export(item.config),
    )


def environment() -> dict[str, str]:
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "device": "cpu",
        "platform": platform.platform(),
    }


def results_document(config: pytest.Config) -> dict[str, Any]:
    state = config.stash[_STATE]
    adapter: Adapter | None = state["adapter"]
    # Arrival order differs between serial and parallel runs; the document does not.
    results = sorted(state["results"], key=lambda r: (r.check, r.subject))
    subjects = adapter.subjects() if adapter else []
    collector: _Collector = config.pluginmanager.get_plugin("tck-results")
    # "[NOTSET]": pytest's placeholder for a check no subject of this adapter takes
    expected = {i for i in collector.collected if "[NOTSET" not in i} if collector else set()
    not_run = sorted(expected - state["done"])
    profile = (
        state["profile"]
        or config.getoption("--tck-profile")
        or os.environ.get("HYPOTHESIS_PROFILE")
        or "dev"
    )
    document = {
        "schema": SCHEMA,
        "adapter": {
            "name": adapter.name if adapter else None,
            "conventions": {s.name: s.conventions.to_dict() for s in subjects},
            "deviations": {
                s.name: {
                    k: list(v)
                    for k, v in s.conventions.deviations(canonical_conventions(s.component)).items()
                }
                for s in subjects
            },
            "notes": {s.name: list(s.notes) for s in subjects if s.notes},
        },
        "environment": environment(),
        "profile": profile,
        "seed": config.getoption("--tck-seed"),
        "started": state["start"],
        "duration_s": round(time.time() - state["start"], 3),
        "summary": summarize(results),
        "results": [r.to_dict() for r in results],
    }
    if not_run:  # e.g. pytest-xdist gave up restarting crashed workers
        document["not_run"] = not_run
    return document


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    out = config.getoption("--tck-out")
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller writes
        return
    state = config.stash[_STATE]
    if out and (state["adapter"] is not None or state["results"]):
        _adapter(config)  # under xdist the controller has not needed it until now
        write_results(Path(out) / "results.json", results_document(config))


def pytest_report_header(config: pytest.Config) -> str | None:
    adapter = config.stash[_STATE]["adapter"]
    return f"tck adapter: {adapter.name}" if adapter else None
