"""The JSON schema of results.json (schema 1): what ``tck report`` checks before rendering.

A file that does not follow it is refused in one line that names the first place it goes
wrong (``results/3/status: 'maybe' is not one of [...]``), never a traceback.
"""

from __future__ import annotations

from typing import Any

_TEXT = {"type": "string"}
_COUNT = {"type": "integer", "minimum": 0}
_NUMBER = {"type": "number"}

RESULT: dict[str, Any] = {
    "type": "object",
    "required": [  # every field of tck.conformance.toolkit.results.Result
        "check",
        "clause",
        "component",
        "subject",
        "status",
        "diagnosis",
        "metrics",
        "repro",
        "counterexample",
        "notes",
        "duration_s",
    ],
    "properties": {
        "check": _TEXT,
        "clause": {"type": "array", "items": _TEXT},
        "component": _TEXT,
        "subject": _TEXT,
        # tck.conformance.toolkit.results.STATUSES (tests/checks/test_unverified.py keeps the
        # two equal)
        "status": {"enum": ["pass", "fail", "skip", "error", "convention", "unverified"]},
        "diagnosis": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": _TEXT, "message": _TEXT},
        },
        "metrics": {"type": "object"},
        "repro": _TEXT,
        "counterexample": _TEXT,
        "notes": {"type": "array", "items": _TEXT},
        "duration_s": _NUMBER,
        "baseline": {"enum": ["new", "known"]},
    },
}

RESULTS: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    # every field the pages render: tck run always writes them
    "required": [
        "schema",
        "adapter",
        "environment",
        "profile",
        "seed",
        "duration_s",
        "summary",
        "results",
    ],
    "properties": {
        "schema": {"const": 1},
        "adapter": {
            "type": "object",
            "required": ["name", "deviations"],
            "properties": {
                "name": {"type": ["string", "null"]},
                "conventions": {"type": "object"},
                "deviations": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": {"type": "array", "minItems": 2},
                    },
                },
                "notes": {"type": "object"},
            },
        },
        "environment": {"type": "object"},
        "profile": {"type": ["string", "null"]},
        "seed": {"type": "integer"},
        "started": _NUMBER,
        "duration_s": _NUMBER,
        "summary": {
            "type": "object",
            "required": ["passed", "failed", "skipped", "errors", "conventions"],
            "properties": {  # "unverified" (SPEC.md §10.11) is absent from older results
                k: _COUNT
                for k in ("passed", "failed", "skipped", "errors", "conventions", "unverified")
            },
        },
        "results": {"type": "array", "items": RESULT},
        "not_run": {"type": "array", "items": _TEXT},
        "unverified_subjects": {"type": "array", "items": _TEXT},
        "interrupted": {"type": "boolean"},
        "run": {"type": "object"},  # what produced the run (absent from older results)
        "baseline": {
            "type": "object",
            "required": ["path", "new", "known", "fixed"],
            "properties": {
                "run": {"type": "object"},
                "accepted_mismatches": {"type": "array", "items": _TEXT},
                "path": _TEXT,
                "new": {"type": "array", "items": _TEXT},
                "known": {"type": "array", "items": _TEXT},
                "fixed": {"type": "array", "items": _TEXT},
            },
        },
    },
}


def problem(document: Any) -> str | None:
    """The first way ``document`` breaks the schema, in one line; None when it follows it."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(RESULTS)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "the top level"
    message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
    return f"{where}: {message}"
