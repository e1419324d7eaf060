"""JUnit XML from results.json, for CI systems (Jenkins, GitLab, GitHub test reporters).

One ``testsuite`` per component; a test case per result, named ``check[subject]``. A
``fail`` is a ``<failure>`` whose message is the diagnosis code, an ``error`` an
``<error>``, a ``skip`` ``<skipped>``; a ``convention`` passes, with the deviation in its
``system-out``. ElementTree escapes every text and attribute.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Any


def junit_xml(document: dict[str, Any]) -> str:
    adapter = document["adapter"]["name"] or "unknown"
    by_component: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for result in document["results"]:
        by_component[result["component"]].append(result)
    root = ET.Element(
        "testsuites",
        name=f"tck {adapter}",
        tests=str(len(document["results"])),
        failures=str(document["summary"]["failed"]),
        errors=str(document["summary"]["errors"]),
        skipped=str(document["summary"]["skipped"] + document["summary"].get("unverified", 0)),
        time=f"{document.get('duration_s', 0.0):.3f}",
    )
    for component, results in by_component.items():
        statuses = [r["status"] for r in results]
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
            suite.append(_testcase(adapter, result))
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


def _testcase(adapter: str, result: dict[str, Any]) -> ET.Element:
    case = ET.Element(
        "testcase",
        classname=f"tck.{adapter}.{result['component']}",
        name=_case_name(result),
        time=f"{result.get('duration_s', 0.0):.4f}",
    )
    status, diagnosis = result["status"], result["diagnosis"]
    clauses = ", ".join(f"§{c}" for c in result["clause"])
    if status in ("fail", "error"):
        body = f"SPEC {clauses}\n{diagnosis['message']}"
        if result.get("counterexample"):
            body += f"\n\n{result['counterexample']}"
        if result.get("repro"):
            body += f"\n\nReproduce:\n{result['repro']}"
        element = ET.SubElement(
            case, "failure" if status == "fail" else "error", message=diagnosis["code"]
        )
        element.set("type", diagnosis["code"])
        element.text = body
    elif status == "skip":
        ET.SubElement(case, "skipped", message=diagnosis["message"])
    elif status == "unverified":  # ran, measured nothing: not a pass (SPEC.md §10.10)
        ET.SubElement(case, "skipped", message=f"unverified: {diagnosis['message']}")
    elif status == "convention":
        out = ET.SubElement(case, "system-out")
        out.text = f"convention {diagnosis['code']}: {diagnosis['message']}"
    return case
