"""JUnit XML from results.json, for CI systems (Jenkins, GitLab, GitHub test reporters).

One ``testsuite`` per component; a test case per result, named ``check[subject]``. A
``fail`` is a ``<failure>`` whose message leads with the root cause (``tck.conformance.
diagnosis.root_causes``): the diagnosis code, or "CAUSE (symptom: CODE)" when a more specific
explanation of the same subject covers it, and whose type is the code; an ``error`` an
``<error>``, a ``skip`` ``<skipped>``; a ``convention`` passes, with the deviation in its
``system-out``. Under ``tck run --baseline``, a known failure is ``<skipped
type="baseline.known">`` (it does not fail CI), a new one's text starts "NEW since the
baseline", and a fixed row says so in its ``system-out``. ElementTree escapes every text
and attribute; ``visible`` first writes every character XML 1.0 forbids (control
characters, lone surrogates) as a visible escape.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Any

from tck.reports.causes import root_causes

from .text import visible


def junit_xml(document: dict[str, Any]) -> str:
    adapter = document["adapter"]["name"] or "unknown"
    by_component: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in document["results"]:
        by_component[result["component"]].append(result)
    fixed = set(document.get("baseline", {}).get("fixed", ()))
    kinds = [_kind(r) for r in document["results"]]
    root = ET.Element(
        "testsuites",
        name=f"tck {adapter}",
        tests=str(len(document["results"])),
        failures=str(kinds.count("fail")),
        errors=str(kinds.count("error")),
        skipped=str(kinds.count("skip") + kinds.count("unverified")),
        time=f"{document.get('duration_s', 0.0):.3f}",
    )
    by_index = {
        symptom["index"]: cause["code"]
        for cause in root_causes({**r, "index": i} for i, r in enumerate(document["results"]))
        for symptom in cause["symptoms"]
    }
    causes = {id(r): by_index.get(i) for i, r in enumerate(document["results"])}
    for component, results in by_component.items():
        statuses = [_kind(r) for r in results]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"tck.{adapter}.{component}",
            tests=str(len(results)),
            failures=str(statuses.count("fail")),
            errors=str(statuses.count("error")),
            skipped=str(statuses.count("skip") + statuses.count("unverified")),
            time=f"{sum(r.get('duration_s', 0.0) for r in results):.3f}",
        )
        for result in results:
            suite.append(_testcase(adapter, result, fixed, causes.get(id(result))))
    for element in root.iter():  # adapter text: well-formed XML whatever it holds
        element.text = None if element.text is None else visible(element.text)
        for key, value in element.attrib.items():
            element.set(key, visible(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")


def _case_name(result: dict[str, Any]) -> str:
    """check[subject], and the dtype where a check runs once per dtype, and the opset where
    an export check runs once per opset: unique per run."""
    metrics = result.get("metrics", {})
    dtype = metrics.get("dtype")
    suffix = f"[{dtype}]" if isinstance(dtype, str) and dtype != "float64" else ""
    if result["check"] == "onnx.opset" and "opset" in metrics:
        suffix += f"[opset {metrics['opset']}]"
    return f"{result['check']}[{result['subject']}]{suffix}"


def _kind(result: dict[str, Any]) -> str:
    """The JUnit outcome: a failure known from ``tck run --baseline`` is a skip (it does not
    fail CI; its message says it is known)."""
    return "skip" if result.get("baseline") == "known" else result["status"]


def _testcase(
    adapter: str,
    result: dict[str, Any],
    fixed: set[str] = frozenset(),
    cause: str | None = None,
) -> ET.Element:
    case = ET.Element(
        "testcase",
        classname=f"tck.{adapter}.{result['component']}",
        name=_case_name(result),
        time=f"{result.get('duration_s', 0.0):.4f}",
    )
    status, diagnosis = result["status"], result["diagnosis"]
    clauses = ", ".join(f"§{c}" for c in result["clause"])
    if result.get("baseline") == "known":
        ET.SubElement(
            case,
            "skipped",
            message=f"known failure (tck run --baseline), still failing: {diagnosis['code']}",
            type="baseline.known",
        ).text = f"{status} {diagnosis['code']}: {diagnosis['message']}"
        return case
    if status in ("fail", "error"):
        body = f"SPEC {clauses}\n{diagnosis['message']}"
        if result.get("baseline") == "new":
            body = f"NEW since the baseline (tck run --baseline)\n{body}"
        if result.get("counterexample"):
            body += f"\n\n{result['counterexample']}"
        if result.get("repro"):
            body += f"\n\nReproduce:\n{result['repro']}"
        cause = cause or diagnosis["code"]
        message = cause if cause == diagnosis["code"] else f"{cause} (symptom: {diagnosis['code']})"
        if cause != diagnosis["code"]:
            body = f"root cause {cause}\n{body}"
        element = ET.SubElement(case, "failure" if status == "fail" else "error", message=message)
        element.set("type", diagnosis["code"])
        element.text = body
    elif status == "skip":
        ET.SubElement(case, "skipped", message=diagnosis["message"])
    elif status == "unverified":  # ran, measured nothing: not a pass (SPEC.md §10.11)
        ET.SubElement(case, "skipped", message=f"unverified: {diagnosis['message']}")
    elif status == "convention":
        out = ET.SubElement(case, "system-out")
        out.text = f"convention {diagnosis['code']}: {diagnosis['message']}"
    if _case_name(result) in fixed and status in ("pass", "convention"):
        out = case.find("system-out")
        if out is None:
            out = ET.SubElement(case, "system-out")
        out.text = f"FIXED since the baseline (tck run --baseline). {out.text or ''}".strip()
    return case
