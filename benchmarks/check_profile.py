"""A pytest plugin for ``benchmarks/real_size.py --per-check``: each check's CPU seconds
and resident memory, one JSON line per check, into the file ``$TCK_CHECK_PROFILE`` names.

Per check: ``cpu_s`` (user + system, ``os.times`` of the process around pytest's
run of the check: setup, call, teardown), ``sys_s``, ``wall_s``, and the resident set in GB
when it starts (``rss_start_gb``), at its highest (``rss_peak_gb``: sampled every 20 ms by
a thread reading ``/proc/self/statm``, so a spike shorter than that can be missed) and when
it ends (``rss_end_gb``). Linux only (``/proc``); elsewhere the memory fields are absent.
Loaded by pytest's ``-p check_profile`` with this folder on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

SAMPLE_S = 0.02
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_state: dict[str, Any] = {"peak": 0}


def _rss() -> int | None:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except OSError:
        return None


def _sample() -> None:
    while True:
        rss = _rss()
        if rss is None:
            return
        _state["peak"] = max(_state["peak"], rss)
        time.sleep(SAMPLE_S)


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get("TCK_CHECK_PROFILE")
    if path:
        _state["out"] = open(path, "a")  # for the session: every check appends
        threading.Thread(target=_sample, daemon=True).start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    out = _state.get("out")
    if out is None:
        yield
        return
    start = _rss()
    _state["peak"] = start or 0
    before, started = os.times(), time.perf_counter()
    yield
    after, end = os.times(), _rss()
    row: dict[str, Any] = {
        "check": item.nodeid.split("::")[-1],
        "cpu_s": round(after.user - before.user + after.system - before.system, 2),
        "sys_s": round(after.system - before.system, 2),
        "wall_s": round(time.perf_counter() - started, 2),
    }
    if start is not None and end is not None:
        gb = 2**30
        row.update(
            rss_start_gb=round(start / gb, 3),
            rss_peak_gb=round(max(_state["peak"], end) / gb, 3),
            rss_end_gb=round(end / gb, 3),
        )
    out.write(json.dumps(row) + "\n")
    out.flush()
