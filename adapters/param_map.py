"""The one ``--map`` format: its JSON schema (``MAP_SCHEMA``) and its one parser (``read_map``),
used by the module-instance adapter (``--adapter module:attr``) and the ONNX-file adapter
(``--adapter onnx:FILE``) alike. A map says how an implementation tck does not know lays out
the canonical parameters of its component (SPEC.md §0.5) and how it is called::

    {"params": {"self_attn.q.weight": "attn.wq.weight",
                "self_attn.q.bias": null,                         (absent: reads as zeros)
                "self_attn.k.weight": {"name": "attn.wqkv", "slice": [0, 64, 128]},
                "ffn.fc1.weight": {"name": "mlp.w1", "permute": [1, 0]}, ...},
     "config": {"n_heads": 4},                        (Config fields the file/module lacks)
     "conventions": {"norm_placement": "pre", "eps": 1e-6},
     "inputs": {"key_padding": "pad_mask"},     (canonical input -> the implementation's name)
     "masks": "ignore"}                   (its boolean masks say True = masked; default "keep")

A parameter reference reads the implementation's tensor ``name``, cuts ``slice`` = [dim,
start, stop) out of it (a fused qkv), orders its dims by ``permute`` (``[1, 0]`` transposes
a weight stored [in, out]), then reshapes it to ``shape`` (default: the canonical shape);
``load`` applies the inverse. The schema is also written to ``docs/map.schema.json``
(``tests/adapters/test_param_map.py`` keeps the two equal).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import jsonschema

from tck.reference import Config, Conventions
from tck.usage import read_user_json

KEYS = ("params", "config", "conventions", "inputs", "masks")
REF_KEYS = ("name", "slice", "permute", "shape")
HINT = "see docs/guide/as-it-is.md, section --map"

_INDEX = {"type": "integer", "minimum": 0}
_REF = {  # one canonical parameter: the tensor's name, null (absent) or a reference object
    "type": ["string", "null", "object"],
    "minLength": 1,
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "slice": {"type": "array", "items": _INDEX, "minItems": 3, "maxItems": 3},
        "permute": {"type": "array", "items": _INDEX, "minItems": 1, "uniqueItems": True},
        "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
    },
}
_SCALAR = {"type": ["integer", "number", "string", "boolean", "null"]}
MAP_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "tck --map: the canonical parameters and calling of an implementation",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "params": {"type": "object", "additionalProperties": _REF},
        # the fields are the dataclasses' own; their values are checked by Config/Conventions
        "config": {
            "type": "object",
            "additionalProperties": False,
            "properties": {f.name: _SCALAR for f in dataclasses.fields(Config)},
        },
        "conventions": {
            "type": "object",
            "additionalProperties": False,
            "properties": {f.name: _SCALAR for f in dataclasses.fields(Conventions)},
        },
        "inputs": {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}},
        "masks": {"enum": ["keep", "ignore"]},
    },
}


@dataclass(frozen=True)
class Ref:
    """One canonical parameter's place in the implementation: the tensor ``name``, then
    ``slice`` (dim, start, stop), ``permute`` and ``shape`` as in the module docstring."""

    name: str
    slice: tuple[int, int, int] | None = None
    permute: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None


def _where(path: Any) -> str:
    """``params['q.weight'].slice[1]`` from a jsonschema error path."""
    parts = list(path)
    out = str(parts[0]) if parts else "the map"
    for depth, part in enumerate(parts[1:], start=1):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f"[{part!r}]" if depth == 1 else f".{part}"
    return out


def _message(error: jsonschema.ValidationError) -> str:
    where = _where(error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"{where}: unknown key {extra[0]!r} (it takes {', '.join(allowed)})"
    if error.validator in ("minItems", "maxItems") and where.endswith("slice"):
        return f"{where} is [dim, start, stop], three integers, not {error.instance!r}"
    if error.validator == "required":
        return f"{where}: a parameter reference needs its tensor's 'name'"
    if error.validator == "type" and len(error.absolute_path) == 2 and where.startswith("params"):
        return (
            f"{where} is a tensor name, null (absent) or "
            '{"name": ..., "slice": [dim, start, stop], "permute": [...], "shape": [...]}, '
            f"not {error.instance!r}"
        )
    return f"{where}: {error.message}"


def check_map(mapping: Any, *, what: str = "--map", error: type[Exception] = ValueError) -> dict:
    """``mapping`` validated against ``MAP_SCHEMA`` and the rules a schema cannot state (a
    slice's start before its stop, a permute that is a permutation); the first wrong field
    is one ``error`` naming it."""
    validator = jsonschema.Draft202012Validator(MAP_SCHEMA)
    found = jsonschema.exceptions.best_match(validator.iter_errors(mapping))
    if found is not None:
        raise error(f"{what}: {_message(found)}; {HINT}")
    for canonical, value in mapping.get("params", {}).items():
        if not isinstance(value, dict):
            continue
        where = f"{what}: params[{canonical!r}]"
        if "slice" in value and not value["slice"][1] < value["slice"][2]:
            raise error(f"{where}.slice [dim, start, stop] needs start < stop; {HINT}")
        if "permute" in value and sorted(value["permute"]) != list(range(len(value["permute"]))):
            raise error(f"{where}.permute is an order of the dims 0..n-1; {HINT}")
    return mapping


def read_map(
    path: str | os.PathLike[str] | None, *, error: type[Exception] = ValueError
) -> dict[str, Any] | None:
    """The map in the JSON file ``path`` (bounded read, validated), or None without one."""
    if not path:
        return None
    what = f"--map {str(path)!r}"
    mapping = read_user_json(path, what=what, hint="name a JSON map file", error=error)
    return check_map(mapping, what=what, error=error)


def refs(mapping: dict[str, Any] | None) -> dict[str, Ref | None]:
    """Each canonical parameter the map names -> its ``Ref``, or None for an absent one."""
    out: dict[str, Ref | None] = {}
    for canonical, value in ((mapping or {}).get("params") or {}).items():
        if value is None or isinstance(value, str):
            out[canonical] = None if value is None else Ref(value)
        else:
            out[canonical] = Ref(
                value["name"],
                *(tuple(value[k]) if value.get(k) is not None else None for k in REF_KEYS[1:]),
            )
    return out


def masks_ignore(mapping: dict[str, Any] | None) -> bool:
    """Whether the implementation's boolean masks say True = masked (``"masks": "ignore"``)."""
    return (mapping or {}).get("masks", "keep") == "ignore"


__all__ = ["MAP_SCHEMA", "Ref", "check_map", "masks_ignore", "read_map", "refs"]
