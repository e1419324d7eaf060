"""The pytest plugin: runs the checks of tck.conformance against an adapter.

    pytest --pyargs tck.conformance --tck-adapter=torch.nn [--tck-out=DIR] [--tck-only=mha]

Each check is a test with ``@pytest.mark.spec(...)`` (the clauses it verifies) and
``@pytest.mark.components(...)`` (what it applies to); it is parametrised over the
adapter's subjects of those components and receives the ``tck`` fixture (a Harness).
Every outcome becomes a Result; ``--tck-out`` writes them to DIR/results.json.
"""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tck import conformance as _conformance
from tck import reference as _reference
from tck.adapters import (
    DEFAULT_ADAPTER,
    Adapter,
    AdapterError,
    AdapterFailure,
    Subject,
    Unsupported,
    load_adapter,
    real_size,
)
from tck.adapters.devices import (
    DEFAULT_DEVICE,
    DeviceError,
    check_device,
    device_environment,
    offers_device,
    require_some_subject_on,
)
from tck.conformance.diagnosis import islands
from tck.conformance.diagnosis.diagnosis import named_exception
from tck.conformance.toolkit import spaces
from tck.conformance.toolkit.globalstate import AdapterWorld, kit_state
from tck.conformance.toolkit.harness import FIELDS, Harness
from tck.conformance.toolkit.recorder import Recorder
from tck.conformance.toolkit.results import (
    SCHEMA,
    CheckFailure,
    Result,
    reported,
    summarize,
    write_results,
)
from tck.conformance.toolkit.verified import ORACLE_CHECKS, unverified_reason
from tck.fixtures import FixtureError
from tck.reference import COMPONENTS, canonical_conventions
from tck.reference.tolerance import FLOOR, ISLAND_FLOOR, float64_floor
from tck.reports.text import bounded, safe_str, visible
from tck.usage import UsageError, parse_only

from . import repro, watchdog
from .baseline import provenance
from .capture import bounded_capture
from .profiles import PROFILES, load_profile

_STATE = pytest.StashKey[dict[str, Any]]()
_RECORD = pytest.StashKey[Recorder]()
_RESULT = "tck_result"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tck", "transformer-tck conformance checks")
    group.addoption(
        "--tck-adapter",
        default=None,
        help="built-in adapter name or module:attr (default: $TCK_ADAPTER or reference)",
    )
    # What points the adapter at a given model: handed to load_adapter as arguments (tck
    # run passes them here; pytest-xdist hands a session's options to its workers).
    group.addoption(
        "--tck-model",
        default=None,
        metavar="PATH",
        help="the checkpoint folder or file the adapter factory loads (tck run --model)",
    )
    group.addoption(
        "--tck-component",
        default=None,
        help="what an nn.Module instance or onnx:FILE computes (tck run --component)",
    )
    group.addoption(
        "--tck-map",
        default=None,
        metavar="MAP.json",
        help="the parameter map of an nn.Module instance or onnx:FILE (tck run --map)",
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
        default=None,
        type=int,
        help="torch intra-op threads while checks run (default: 1, the checks' tensors are "
        "tiny and more threads only contend; for a real-size checkpoint, the cores this "
        "process may use)",
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
    group.addoption(
        "--tck-capture",
        default="pytest",
        choices=("pytest", "bounded"),
        help="bounded: capture each check's output keeping its first and last "
        "CAPTURE_LIMIT bytes while it is captured (tck run passes it with --capture=no); "
        "default: pytest's own capture",
    )
    group.addoption(
        "--tck-device",
        default="cpu",
        help="where subjects are built and run: cpu, cuda or cuda:N (the oracle stays on the "
        "CPU in float64; default cpu)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spec(*clauses): the SPEC.md clauses a check verifies")
    config.addinivalue_line("markers", "components(*names): the components a check applies to")
    config.addinivalue_line("markers", "fields(*names): convention fields a probe measures")
    config.addinivalue_line(
        "markers", "exported: a check of the ONNX export itself (runs with --tck-export onnx)"
    )
    try:  # a device this machine lacks: pytest's usage error (one line, exit 4), up front
        check_device(_device(config), "--tck-device")
    except DeviceError as err:
        raise pytest.UsageError(str(err)) from None
    config.stash[_STATE] = {
        "adapter": None,
        "profile": None,
        "results": [],
        "done": set(),
        "start": time.time(),
        "sigint": False,  # a real Ctrl-C reached this process (not an adapter's raise)
    }
    config.pluginmanager.register(_Collector(config), "tck-results")
    out = config.getoption("--tck-out")
    if out:  # a run writes nothing outside its output folder: hypothesis' files included
        from hypothesis.configuration import set_hypothesis_home_dir

        set_hypothesis_home_dir(Path(out).resolve() / ".hypothesis")
        # nor a __pycache__ beside the user's adapter module (imported after this, also in
        # each pytest-xdist worker)
        sys.dont_write_bytecode = True
    _watch_sigint(config.stash[_STATE])
    # also where the session never finishes: an armed watchdog must not outlive it
    config.add_cleanup(lambda: _close_watchdog(config))


def _watch_sigint(state: dict[str, Any]) -> None:
    """Note a real SIGINT before Python raises KeyboardInterrupt for it: a
    KeyboardInterrupt that an adapter raises itself is then an error row, not the end of
    the run."""
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:  # pragma: no cover - not the main thread
        return

    def handler(signum: int, frame: Any) -> None:
        state["sigint"] = True
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt

    if previous in (signal.SIG_IGN, None):
        return
    try:
        signal.signal(signal.SIGINT, handler)
    except ValueError:  # pragma: no cover - not the main thread
        pass


class AdapterExit(Exception):
    """The adapter tried to end the process (os._exit) or raised KeyboardInterrupt itself
    while a check ran: the check is an error, and the run goes on."""

    def __init__(self, message: str, code: str = "adapter.crashed"):
        super().__init__(message)
        self.code = code


def _ours(config: pytest.Config, path: Any) -> bool:
    """Is this test one of tck's checks, or does the session ask for tck (--tck-adapter)?
    The plugin loads in every pytest session of an environment with tck installed: it must
    leave other projects' tests (and their fixtures named ``subject``) alone."""
    if config.getoption("--tck-adapter") is not None:
        return True
    try:
        return Path(path).resolve().parent == _CHECKS
    except (OSError, TypeError):
        return False


# The adapter ``tck run`` loaded to check its arguments, for this process' plugin to take
# instead of loading it again: a checkpoint is read and held once, not twice (GPT-2 small
# in float64: 1 GB).
_HANDED: dict[Any, Adapter] = {}


def _handover_key(spec: str | None, target: Mapping[str, str | None]) -> Any:
    return spec, tuple(sorted((k, str(v)) for k, v in target.items() if v is not None))


def hand_over(
    adapter: Adapter | None, spec: str = "", target: Mapping[str, str | None] | None = None
) -> None:
    """Give the plugin ``adapter``, loaded from ``spec`` and ``target`` (load_adapter's
    arguments), to use in place of loading its own in this process; None takes it back."""
    _HANDED.clear()
    if adapter is not None:
        _HANDED[_handover_key(spec, target or {})] = adapter


def _adapter(config: pytest.Config) -> Adapter:
    state = config.stash[_STATE]
    if state["adapter"] is None:
        try:
            key = _handover_key(config.getoption("--tck-adapter"), _target(config))
            adapter = _HANDED.pop(key, None)
            if adapter is None:
                adapter = load_adapter(config.getoption("--tck-adapter"), **_target(config))
            if config.getoption("--tck-export") == "onnx":
                from tck.adapters.onnx_runtime import with_onnx

                adapter = with_onnx(adapter, opset=config.getoption("--tck-opset"))
        except (AdapterError, TypeError) as err:
            raise pytest.UsageError(str(err)) from None
        names = [s.name for s in _subjects(adapter)]  # subjects() raising: a usage error
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise pytest.UsageError(
                f"adapter {adapter.name!r} offers more than one subject named "
                f"{', '.join(map(repr, twice))}; give each subject its own name"
            )
        try:
            _check_device(config, adapter)
        except DeviceError as err:
            raise pytest.UsageError(str(err)) from None
        state["adapter"] = adapter
        # Set here, not at configure time: the plugin loads in every pytest session of an
        # environment that has tck installed, and only sessions that run checks get here.
        # Measured on the 2-core CI machine: the reference run takes 7 s with one thread
        # and 160 s with torch's default when the cores are busy.
        import torch

        threads = _threads(config, adapter)
        state["threads"] = threads
        torch.set_num_threads(threads)
        # the checks' numpy and torch settings, kept apart from the adapter's (globalstate)
        state["world"] = AdapterWorld(kit_state(threads))
    return state["adapter"]


def _threads(config: pytest.Config, adapter: Adapter | None) -> int:
    """torch's intra-op threads while the checks run: ``--tck-threads``, else 1 (the checks'
    tensors are tiny: on a busy 2-core machine more threads only contend), except for an
    adapter with a real-size stack (``real_size.applies``: a checkpoint's whole model, whose
    float64 forwards and backward are large matmuls), which gets the cores this process may
    use that are idle when the run starts, shared among the xdist workers."""
    given = config.getoption("--tck-threads")
    if given is not None:
        return int(given)
    try:
        large = adapter is not None and any(real_size.applies(s) for s in _subjects(adapter))
    except ValueError as err:  # $TCK_STACK_PLAN misspelt
        raise pytest.UsageError(str(err)) from None
    if not large:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # Only the cores nobody else keeps busy (the 1-minute load average): on a loaded machine
    # a second thread waits for its share and spins meanwhile (measured on a 2-core machine
    # at load 6: 40% more CPU seconds, no shorter wall time).
    idle = (cores or 1) - (os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    return max(1, min(round(idle), cores or 1) // max(1, workers))


def _device(config: pytest.Config) -> str:
    return config.getoption("--tck-device") or DEFAULT_DEVICE


def _check_device(config: pytest.Config, adapter: Adapter) -> None:
    """--tck-device names a device of this machine that the adapter runs some subject on."""
    device = check_device(_device(config), "--tck-device")
    if device != DEFAULT_DEVICE and config.getoption("--tck-export"):
        raise DeviceError("--tck-export onnx runs ONNX Runtime on the CPU: drop --tck-device")
    require_some_subject_on(adapter, device)


def _subjects(adapter: Adapter) -> list[Subject]:
    """``adapter.subjects()``, or a one-line usage error naming what went wrong in it."""
    try:
        subjects = list(adapter.subjects())
    except (Exception, SystemExit) as err:
        raise pytest.UsageError(
            f"adapter {safe_str(getattr(adapter, 'name', adapter))!r}: subjects() raised "
            f"{type(err).__name__}: {visible(safe_str(err))[:300]}; fix the adapter"
        ) from None
    bad = [s for s in subjects if not isinstance(s, Subject)]
    if bad:
        raise pytest.UsageError(
            f"adapter {safe_str(adapter.name)!r}: subjects() returned "
            f"{type(bad[0]).__name__}, not tck.adapters.Subject; fix the adapter"
        )
    return subjects


def _only(config: pytest.Config) -> list[str] | None:
    only = config.getoption("--tck-only")
    if not only:
        return None
    try:
        return parse_only(only, COMPONENTS, "--tck-only")
    except UsageError as err:
        raise pytest.UsageError(str(err)) from None


_CHECKS = Path(__file__).resolve().parent.parent / "checks"


def pytest_collectstart(collector: pytest.Collector) -> None:
    """Load the hypothesis profile just before the first check module is imported: @given
    fixes a test's settings when it decorates it, and the checks need the profile (they
    take the per-test harness fixture). Sessions that collect no check are left alone."""
    state = collector.config.stash[_STATE]
    if state["profile"] is None and isinstance(collector, pytest.Module):
        if Path(collector.path).resolve().parent == _CHECKS:
            state["profile"] = load_profile(collector.config.getoption("--tck-profile"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "subject" not in metafunc.fixturenames or not _ours(
        metafunc.config, metafunc.definition.path
    ):
        return
    # every check declares its public id (UsageError, before anything runs, when one does not)
    declared_id(metafunc.definition.get_closest_marker("spec"), metafunc.function.__name__, {})
    marker = metafunc.definition.get_closest_marker("components")
    wanted = set(marker.args) if marker else set(COMPONENTS)
    only = _only(metafunc.config)
    adapter = _adapter(metafunc.config)
    subjects = [
        s
        for s in _subjects(adapter)
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
def tck(request: pytest.FixtureRequest, subject: Subject) -> Iterator[Harness]:
    record = request.node.stash[_RECORD] = Recorder()  # read back into the check's result
    harness = Harness(
        _adapter(request.config),
        subject,
        seed=request.config.getoption("--tck-seed"),
        device=_device(request.config),
        record=record,
        world=request.config.stash[_STATE].get("world"),
    )
    harness.check = check_id(request.node)  # which check asks (Harness.twin_may_ask)
    spaces.use(subject)  # the strategies draw lengths inside its ConfigSpace
    harness.require_device()  # a subject that does not run there: a skip that says why
    plan = getattr(harness.adapter, "stack_plan", None)  # a real-size checkpoint's stack
    if callable(plan):
        callspec = getattr(request.node, "callspec", None)
        why = plan(subject, check_id(request.node), dict(callspec.params) if callspec else {})
        if why:
            pytest.skip(why)
    # SPEC.md §10.12: a subject with float32 islands (declared, or measured once per subject)
    # has every float64 comparison of its checks held to the island bound.
    # A real-size checkpoint is not measured (a float64 build of the whole stack): its
    # declared steps alone set the bound.
    declared = islands.held_steps(harness.component, harness.subject.conventions)
    floor = (
        (ISLAND_FLOOR if declared else None) if callable(plan) else islands.subject_floor(harness)
    )
    with float64_floor(FLOOR["float64"] if floor is None else floor):
        yield harness
    # The copies of the subject and the careful runs it built go with the check, or a
    # real-size checkpoint's copies pile up over the session (a 2-layer BERT-base run passed
    # 9 GB with -n 0 while the harness was kept for the report).
    harness.release()


def check_id(item: pytest.Item) -> str:
    """The check's public id, as its ``@spec`` marker declares it (``id="masks.polarity"``;
    a probe's is a template, ``"fingerprint.{field}"``, filled from its parameters): moving
    a check to another file or renaming its function never renames it."""
    params = getattr(item, "callspec", None) and item.callspec.params
    return declared_id(
        item.get_closest_marker("spec"), getattr(item, "originalname", item.name), params or {}
    )


def declared_id(marker: pytest.Mark | None, function: str, params: Mapping[str, Any]) -> str:
    """The id a check's ``@spec`` marker declares (UsageError when it declares none)."""
    template = marker.kwargs.get("id") if marker is not None else None
    if not isinstance(template, str) or not template:
        raise pytest.UsageError(
            f"check {function} declares no id: give its marker one, "
            '@pytest.mark.spec(..., id="<area>.<name>")'
        )
    if "{" not in template:
        return template
    try:
        return template.format(**params)
    except (KeyError, IndexError):  # no parameters to fill it (a crashed probe): the template
        return template


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Contain what a check's adapter may do to the process: ``os._exit`` and a
    ``KeyboardInterrupt`` it raises itself become errors of this check."""
    if not isinstance(_subject_of(item), Subject):
        return (yield)
    state = item.config.stash[_STATE]
    real_exit = os._exit

    def no_exit(status: int = 0) -> None:
        raise AdapterExit(
            f"the adapter called os._exit({status!r}), which would have ended the run; "
            "an adapter must raise, never exit"
        )

    os._exit = no_exit  # type: ignore[assignment]
    dog = _watchdog(item)
    world = state.get("world") or AdapterWorld(kit_state(_threads(item.config, None)))
    try:
        with world.checks():  # whatever the adapter's import or an earlier check set
            return (yield from _captured(item, "call"))
    except KeyboardInterrupt:
        if state["sigint"]:
            raise  # a real Ctrl-C: the run stops, and its results are marked interrupted
        raise AdapterExit(
            "the adapter raised KeyboardInterrupt without a Ctrl-C; an adapter must raise "
            "an Exception",
            code="adapter.exception",
        ) from None
    finally:
        os._exit = real_exit  # type: ignore[assignment]
        if dog is not None:
            dog.stop()


def _watchdog_dir(config: pytest.Config) -> Path:
    workerinput = getattr(config, "workerinput", None)
    if workerinput and workerinput.get("tck_watchdog"):
        return Path(workerinput["tck_watchdog"])
    state = config.stash[_STATE]
    if "watchdog" not in state:
        state["watchdog"] = tempfile.mkdtemp(prefix="tck-watchdog-")
    return Path(state["watchdog"])


def _timed_out(config: pytest.Config, nodeid: str) -> bool:
    return watchdog.timed_out(_watchdog_dir(config), nodeid)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, on the controller: tell each worker where timeout markers go."""
    node.workerinput["tck_watchdog"] = str(_watchdog_dir(node.config))


def _watchdog(item: pytest.Item) -> watchdog.Watchdog | None:
    """This process's watchdog (conformance/runner/watchdog.py), started on ``item``; None without
    a --timeout."""
    limit = item.config.getoption("timeout", None)
    if not limit or float(limit) <= 0:
        return None
    state = item.config.stash[_STATE]
    if "watchdog_process" not in state:
        try:
            state["watchdog_process"] = watchdog.Watchdog(_watchdog_dir(item.config), float(limit))
        except OSError:  # pragma: no cover - no temporary folder: the signal method alone
            state["watchdog_process"] = None
    dog = state["watchdog_process"]
    if dog is not None:
        dog.start(item.nodeid)
    return dog


def _close_watchdog(config: pytest.Config) -> None:
    dog = config.stash[_STATE].pop("watchdog_process", None)
    if dog is not None:
        dog.close()


def _subject_of(item: pytest.Item) -> Any:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("subject") if callspec else None


# Captured output kept per check (head and tail): an adapter that prints megabytes per call
# must not make the run hold them all.
CAPTURE_LIMIT = 20_000


def _captured(item: pytest.Item, when: str) -> Iterator[None]:
    """One phase of a check under the bounded capture (conformance/runner/capture.py), its output
    added to the check's report as pytest's capture would."""
    if item.config.getoption("--tck-capture") != "bounded" or not isinstance(
        _subject_of(item), Subject
    ):
        return (yield)
    sinks: dict[str, Any] = {}
    try:
        with bounded_capture(CAPTURE_LIMIT) as sinks:
            result = yield
    finally:  # also when the phase raised: its output goes with its report
        for name, sink in sinks.items():
            text = sink.text()
            if text:
                item.add_report_section(when, name, text)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    return (yield from _captured(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    return (yield from _captured(item, "teardown"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    # Adapter text, made inert and bounded before anything carries it: pytest-xdist cannot
    # send a lone surrogate (bytes that were not UTF-8) from a worker at all.
    report.sections = [
        (name, visible(bounded(text, CAPTURE_LIMIT))) for name, text in report.sections
    ]
    if report.longrepr is not None and not isinstance(report.longrepr, tuple):
        text = safe_str(report.longrepr)
        if visible(text) != text or len(text) > CAPTURE_LIMIT:
            report.longrepr = visible(bounded(text, CAPTURE_LIMIT))
    excinfo = call.excinfo
    if excinfo is not None and excinfo.errisinstance(Unsupported) and not report.passed:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {excinfo.value}")
    subject = _subject_of(item)
    if not isinstance(subject, Subject):
        return report
    done = report.when == "call" or (report.when == "setup" and not report.passed)
    if done:
        try:
            result = _result(item, subject, report, excinfo)
        except Exception as err:
            result = Result(
                check=check_id(item),
                clause=[],
                component=subject.component,
                subject=subject.name,
                status="error",
                diagnosis={
                    "code": "adapter.exception",
                    "message": f"the check's outcome could not be recorded "
                    f"({type(err).__name__}: {safe_str(err)}); the adapter's exception "
                    "misbehaves",
                },
            )
        # Carried by the report, so that under pytest-xdist it reaches the controller.
        report.user_properties.append((_RESULT, result.to_dict()))
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


def _ids_to_subjects(adapter: Adapter) -> dict[str, Subject]:
    """Each subject by its name as pytest writes it in a node id (non-ASCII escaped)."""
    from _pytest.compat import ascii_escaped

    out: dict[str, Subject] = {}
    for s in _subjects(adapter):
        out[s.name] = s
        out.setdefault(ascii_escaped(s.name), s)
    return out


def _parse_id(config: pytest.Config, nodeid: str) -> tuple[str, str, Subject | None]:
    """(check id, the id's parameter, the subject) of a check's pytest node id: the id its
    function's ``@spec`` marker declares (for a check that left no report to read it from)."""
    path, _, name = nodeid.partition("::")
    function, _, param = name.partition("[")
    param = param.removesuffix("]")
    try:
        subjects = _ids_to_subjects(_adapter(config))
    except pytest.UsageError:
        subjects = {}
    subject = subjects.get(param)
    params: dict[str, Any] = {}
    if subject is None:  # "<subject>-<field>" (a probe) or "<subject>-<dtype>"
        fields = {f for names in FIELDS.values() for f in names}
        for key, s in subjects.items():
            if param.startswith(key + "-"):
                subject, rest = s, param[len(key) + 1 :]
                if rest in fields:
                    params["field"] = rest
    return _id_of(Path(path).stem, function, params), param, subject


def _id_of(module: str, function: str, params: Mapping[str, Any]) -> str:
    """The declared id of ``function`` in the check module ``module``."""
    try:
        check = getattr(importlib.import_module(f"{__package__}.{module}"), function)
        marks = [m for m in getattr(check, "pytestmark", []) if m.name == "spec"]
        return declared_id(marks[0] if marks else None, function, params)
    except (ImportError, AttributeError, pytest.UsageError):  # not a check of ours
        return f"{module.removeprefix('test_')}.{function.removeprefix('test_')}"


def _missing_result(config: pytest.Config, nodeid: str, code: str, message: str) -> Result:
    """An ``error`` row for a check that produced no result, named from its node id."""
    check, param, subject = _parse_id(config, nodeid)
    return Result(
        check=check,
        clause=[],
        component=subject.component if subject else "unknown",
        subject=subject.name if subject else param,
        status="error",
        diagnosis={"code": code, "message": f"{message} (pytest id {nodeid})"},
    )


def _crash_result(config: pytest.Config, report: pytest.TestReport) -> Result | None:
    """An ``error`` for the check a dead worker was running, named from its node id."""
    path, _, name = report.nodeid.partition("::")
    check, param, subject = _parse_id(config, report.nodeid)
    diagnosis = {
        "code": "adapter.crashed",
        "message": "the process running this check died (a segfault or an abort in "
        f"native code, or os._exit): {bounded(safe_str(report.longrepr), 4000)}. "
        "The checks after it ran in a fresh process.",
    }
    if _timed_out(config, report.nodeid):
        diagnosis = {
            "code": "adapter.timeout",
            "message": f"the check did not finish within {config.getoption('timeout', None)} s "
            "(tck run --timeout) and did not return to Python to be stopped (a hang in native "
            "code): its worker process was killed. The checks after it ran in a fresh process.",
        }
    return Result(
        check=check,
        clause=[],
        component=subject.component if subject else "unknown",
        subject=subject.name if subject else param,
        status="error",
        diagnosis=diagnosis,
        repro=repro.pytest_snippet(
            adapter_spec=_adapter_spec(config),
            target=_target(config),
            seed=config.getoption("--tck-seed"),
            module=Path(path).stem,
            test_id=name,
            title=f"tck repro: {check} on {_adapter_spec(config)} [{param}]",
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
    record = item.stash.get(_RECORD, None)
    metrics = dict(record.metrics) if record else {}
    if record and record.calls:
        metrics["calls"] = list(record.calls)
    params = getattr(item, "callspec", None) and item.callspec.params
    if params and isinstance(params.get("dtype"), str):  # skips too: one row per dtype
        metrics.setdefault("dtype", params["dtype"])
    where = getattr(item.config.stash[_STATE]["adapter"], "subject_metrics", None)
    if callable(where):  # --tck-export: where the subject ran (torch, onnxruntime)
        metrics = {**where(subject), **metrics}
    clauses = record.clauses if record and record.clauses else marker.args if marker else []
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
    elif (
        report.failed
        and excinfo is not None
        # the group itself first: hypothesis's FlakyFailure is one, and names carried state
        and (named := _named(excinfo.value, metrics) or _named(_leading(excinfo.value), metrics))
    ):
        # An exception that names an implementation bug (a fill value the dtype cannot
        # hold, state carried between calls): a failure with its cause, not a crash.
        result.status = "fail"
        result.diagnosis = {"code": named[0], "message": named[1]}
        result.repro = _repro(item, subject, excinfo)
    elif report.failed and excinfo is not None and _is_check_failure(_leading(excinfo.value)):
        err = _leading(excinfo.value)
        result.status = "fail"
        result.diagnosis = {"code": err.code, "message": err.message}
        result.metrics.update(err.metrics)
        result.repro = _repro(item, subject, excinfo)
    elif (
        report.failed
        and excinfo is not None
        and isinstance(excinfo.value, AssertionError)
        and not _raised_by_implementation(excinfo)
    ):
        result.status = "fail"
        result.diagnosis = {
            "code": f"{result.check}.assertion",
            "message": safe_str(excinfo.value).strip()[:2000],
        }
        result.repro = _repro(item, subject, excinfo)
    elif report.failed:
        value = excinfo.value if excinfo is not None else None
        result.status = "error"
        result.diagnosis = {
            "code": "adapter.exception" if report.when == "call" else "adapter.build_failed",
            "message": _exception_words(excinfo)
            if excinfo is not None
            else safe_str(report.longrepr)[:2000],
        }
        if isinstance(value, AdapterExit):
            result.diagnosis = {"code": value.code, "message": safe_str(value)}
        if isinstance(value, AdapterFailure):
            result.diagnosis = {"code": value.code, "message": value.message}
        if isinstance(value, FixtureError):
            result.diagnosis = {
                "code": "fixtures.file_corrupted",
                "message": f"{value}; nothing was compared with it (tck fixtures verify "
                "names every damaged file; reinstall, or rebuild with tck fixtures build)",
            }
        if value is not None and "from pytest-timeout" in safe_str(value):
            limit = item.config.getoption("timeout", None)
            result.diagnosis = {
                "code": "adapter.timeout",
                "message": f"the check did not finish within {limit} s (tck run --timeout) "
                "and was stopped: the adapter hangs, or is too slow for these sizes",
            }
        result.repro = _repro(item, subject, excinfo)
    elif record and record.conventions:
        result.status = "convention"
        codes = sorted({code for code, _ in record.conventions})
        result.diagnosis = {
            "code": ",".join(codes),
            "message": " ".join(dict.fromkeys(m for _, m in record.conventions)),
        }
        result.notes = list(subject.notes)
    effects = dict(record.side_effects) if record else {}
    if effects:  # found beside the verdict, which used private copies (Harness.run)
        result.metrics["side_effects"] = sorted(effects)
        words = " ".join(effects.values())
        if result.status in ("pass", "convention"):
            result.status = "fail"
            result.diagnosis = {"code": ",".join(sorted(effects)), "message": words}
            result.repro = _repro(item, subject, excinfo)
        else:
            result.diagnosis["message"] += f" (also: {words})"
    if result.status == "pass" and result.check in ORACLE_CHECKS and record:
        reason = unverified_reason(subject.component, record.calls, record.unmeasured)  # §10.11
        if reason:
            result.status = "unverified"
            result.diagnosis = {"code": "verify.unmeasured", "message": reason}
    if result.status in ("fail", "error") and excinfo is not None:
        result.counterexample = repro.counterexample(getattr(excinfo.value, "__notes__", []))
    return result


def _named(error: BaseException, metrics: dict[str, Any]) -> tuple[str, str] | None:
    dtype = metrics.get("dtype")
    return named_exception(error, dtype if isinstance(dtype, str) else None)


def _leading(error: BaseException) -> BaseException:
    """The failure an exception group stands for (hypothesis raises one when a property
    fails in several distinct ways): its first check failure, else its first member;
    any other exception is itself."""
    group = getattr(error, "exceptions", None)  # an ExceptionGroup (or its 3.10 backport)
    if not isinstance(group, tuple) or not group:
        return error
    members = [_leading(e) for e in group if isinstance(e, BaseException)]
    return next((e for e in members if _is_check_failure(e)), members[0] if members else error)


def _is_check_failure(error: BaseException) -> bool:
    """A CheckFailure, also from a second copy of the package (pytest may import a check
    module under another name, and its relative imports with it): judged by its fields."""
    return isinstance(error, CheckFailure) or (
        isinstance(error, AssertionError)
        and isinstance(getattr(error, "code", None), str)
        and isinstance(getattr(error, "message", None), str)
    )


_KIT_CODE = tuple(
    str(Path(module.__file__).resolve().parent) for module in (_conformance, _reference)
)


def _raised_by_implementation(excinfo: pytest.ExceptionInfo[BaseException]) -> bool:
    """Whether the exception came from the code under test (the adapter, the model, torch)
    rather than from a check or the oracle: judged by the innermost frame's file. A model's
    own ``assert`` (fairseq and ``F.multi_head_attention_forward`` check shapes that way) is
    the implementation raising, not a check failing."""
    try:
        where = str(Path(str(excinfo.traceback[-1].path)).resolve())
    except (IndexError, OSError, ValueError):
        return False
    return not where.startswith(_KIT_CODE)


def _exception_words(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    """The exception's type and words; for one without words (a bare ``assert``), the
    statement that raised it and where, which is all it says."""
    value = excinfo.value
    words = f"{type(value).__name__}: {bounded(safe_str(value), 4000)}"
    if safe_str(value).strip() or not excinfo.traceback:
        return words
    entry = excinfo.traceback[-1]
    try:
        statement = " ".join(str(entry.statement).split())
    except (OSError, IndexError):  # the source is gone: the type still says something
        return words
    where = f"{Path(str(entry.path)).name}:{entry.lineno + 1}"
    return f"{words.rstrip()} (raised by `{bounded(statement, 300)}` at {where})"


def _adapter_spec(config: pytest.Config) -> str:
    return config.getoption("--tck-adapter") or os.environ.get("TCK_ADAPTER") or DEFAULT_ADAPTER


def _target(config: pytest.Config) -> dict[str, str | None]:
    """load_adapter's arguments that point the adapter at a given model."""
    return {
        "model": config.getoption("--tck-model"),
        "component": config.getoption("--tck-component"),
        "map_path": config.getoption("--tck-map"),
    }


def _export(config: pytest.Config) -> dict[str, Any]:
    """What the repro snippets pass on of --tck-export, --tck-opset and --tck-device."""
    return {
        "export": config.getoption("--tck-export"),
        "opset": config.getoption("--tck-opset"),
        "device": _device(config),
    }


def _repro(item: pytest.Item, subject: Subject, excinfo: pytest.ExceptionInfo | None) -> str:
    record = item.stash.get(_RECORD, None)
    adapter, seed = _adapter_spec(item.config), item.config.getoption("--tck-seed")
    title = f"tck repro: {check_id(item)} on {adapter} [{subject.name}]"
    failed = record.failed_call if record else None
    # A float64 comparison replays in full; in other dtypes the check (which rounds the
    # inputs and bounds by the careful run in that dtype) reruns instead.
    replayable = failed is not None and getattr(failed.inst, "dtype", "float64") == "float64"
    # an export check builds at its own opset and ORT level: it reruns instead
    replayable = replayable and item.get_closest_marker("exported") is None
    if replayable and _is_check_failure(excinfo.value if excinfo else None):
        return repro.oracle_snippet(
            adapter_spec=adapter,
            target=_target(item.config),
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
        target=_target(item.config),
        seed=seed,
        module=module,
        test_id=item.name,
        title=title,
        **_export(item.config),
    )


def environment(device: str = DEFAULT_DEVICE) -> dict[str, str]:
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        **device_environment(device),
        "platform": platform.platform(),
    }


def results_document(config: pytest.Config) -> dict[str, Any]:
    state = config.stash[_STATE]
    adapter: Adapter | None = state["adapter"]
    # Arrival order differs between serial and parallel runs; the document does not.
    results = sorted(state["results"], key=lambda r: (r.check, r.subject))
    subjects = adapter.subjects() if adapter else []
    collector: _Collector = config.pluginmanager.get_plugin("tck-results")
    expected = {i for i in collector.collected if reported(i)} if collector else set()
    not_run = sorted(expected - state["done"])
    interrupted = bool(state.get("interrupted"))
    for nodeid in not_run:  # never a green run with checks that did not run
        if interrupted:
            code, message = "run.interrupted", "the run was interrupted before this check ran"
        else:
            code, message = (
                "run.not_run",
                "this check produced no result (its worker died, or the run stopped early)",
            )
        results.append(_missing_result(config, nodeid, code, message))
    results = one_export_failure(results)
    results.sort(key=lambda r: (r.check, r.subject))
    profile = (
        state["profile"]
        or config.getoption("--tck-profile")
        or os.environ.get("HYPOTHESIS_PROFILE")
        or "dev"
    )
    # the adapter as named, as tck run --baseline sees it (under --export, the unwrapped one)
    named = getattr(adapter, "base", adapter) if config.getoption("--tck-export") else adapter
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
            **spaces.declared(subjects),  # "supports": what each subject can be (§0.6)
        },
        "environment": {
            **environment(_device(config)),
            "torch_threads": str(state.get("threads") or config.getoption("--tck-threads") or 1),
        },
        "profile": profile,
        "seed": config.getoption("--tck-seed"),
        "run": provenance(
            _adapter_spec(config),
            named,
            named.subjects() if named else [],
            only=_only(config),
            **_export(config),
        ),
        "started": state["start"],
        "duration_s": round(time.time() - state["start"], 3),
        "summary": summarize(results),
        "results": [r.to_dict() for r in results],
    }
    if not_run:  # e.g. pytest-xdist gave up restarting crashed workers
        document["not_run"] = not_run
    if interrupted:
        document["interrupted"] = True
    here = {s.name for s in subjects if _runs_here(adapter, s, _device(config))}
    nothing = [s for s in unverified_subjects(document["results"]) if s in here]
    if nothing:  # never green: every check of these subjects skipped (SPEC.md §10.11)
        document["unverified_subjects"] = nothing
    return document


def _runs_here(adapter: Adapter | None, subject: Subject, device: str) -> bool:
    """Whether ``adapter`` runs ``subject`` on ``device``; under --export onnx, whether the
    torch adapter runs the subject it comes from there (the ONNX wrapper names no devices)."""
    base = getattr(adapter, "base", None)
    origin = getattr(adapter, "origin", None)
    if base is not None and callable(origin):
        found = origin(subject)
        return offers_device(base, found[0] if found else subject, device)
    return offers_device(adapter, subject, device)


EXPORT_FAILED = "onnx.export_failed"


def one_export_failure(results: list[Result]) -> list[Result]:
    """One failing row per subject whose ONNX export failed (SPEC.md §10.9). Every check of
    an exported subject needs the graph, so one exporter error used to be an error row per
    check (dozens). The row kept is the export check's (``onnx.dynamic_axes``, exported at
    the default opset; else another ``onnx.*`` check; else the first check), now a
    failure; the others skip, citing it."""
    failed: dict[str, list[Result]] = {}
    for r in results:
        # the code, or a finding made of it (hypothesis' FlakyFailure quotes the exporter
        # error of a first run whose replay exported another input structure)
        said = r.diagnosis.get("code") == EXPORT_FAILED or f"[{EXPORT_FAILED}]" in (
            r.diagnosis.get("message") or ""
        )
        if said and r.status in ("fail", "error"):
            failed.setdefault(r.subject, []).append(r)
    for subject, rows in failed.items():
        keep = min(
            rows,
            key=lambda r: (
                r.diagnosis.get("code") != EXPORT_FAILED,
                r.check != "onnx.dynamic_axes",
                not r.check.startswith("onnx."),
                r.check,
            ),
        )
        keep.status = "fail"
        keep.diagnosis["code"] = EXPORT_FAILED
        first = (keep.diagnosis.get("message") or "").strip().splitlines()
        why = first[0][:300] if first else EXPORT_FAILED
        for r in rows:
            if r is keep:
                continue
            r.status, r.repro, r.counterexample = "skip", "", ""
            r.diagnosis = {
                "code": "skip",
                "message": f"the ONNX export of {subject} failed, so this check has no graph "
                f"to run ({EXPORT_FAILED}, reported once, on {keep.check}): {why}",
            }
        if len(rows) > 1:
            keep.diagnosis["message"] += (
                f" ({len(rows) - 1} other check(s) of {subject} need the graph and skip)"
            )
    return results


def unverified_subjects(results: list[dict[str, Any]]) -> list[str]:
    """The subjects of ``results`` on which nothing verified anything: no check passed or
    showed a convention, and none failed (a failure is its own red verdict). A subject
    whose every check skipped (a dtype it does not offer, a map it lacks) is not a pass;
    the caller leaves out the subjects the adapter runs on another device only."""
    verdicts: dict[str, set[str]] = {}
    for r in results:
        verdicts.setdefault(r["subject"], set()).add(r["status"])
    return sorted(
        s for s, seen in verdicts.items() if not seen & {"pass", "convention", "fail", "error"}
    )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    out = config.getoption("--tck-out")
    _close_watchdog(config)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller writes
        return
    state = config.stash[_STATE]
    if out and (state["adapter"] is not None or state["results"]):
        try:
            _adapter(config)  # under xdist the controller has not needed it until now
        except pytest.UsageError:
            return
        state["interrupted"] = exitstatus == pytest.ExitCode.INTERRUPTED
        write_results(results_path(Path(out), state["interrupted"]), results_document(config))
    if "watchdog" in state:  # markers of processes that died
        shutil.rmtree(state["watchdog"], ignore_errors=True)


def results_path(out: Path, interrupted: bool) -> Path:
    """OUT/results.json; an interrupted run's partial results go beside it, to
    OUT/interrupted/results.json, and never replace a complete run's."""
    return out / "interrupted" / "results.json" if interrupted else out / "results.json"


def pytest_report_header(config: pytest.Config) -> str | None:
    adapter = config.stash[_STATE]["adapter"]
    return f"tck adapter: {adapter.name}" if adapter else None
