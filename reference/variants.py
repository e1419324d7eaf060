"""Alternative oracles: the spec's oracle with named pieces replaced, built as a separate
object and passed in, never written into ``tck.reference.oracle``.

The diagnosis tests hypotheses such as "the softmax runs over the query axis" or "the heads
are split without the transpose" by computing what the spec's oracle gives with one piece
changed. The oracle's functions call each other by module-global name
(``multi_head_attention`` calls ``split_heads``), so a variant is a copy of the module's
namespace in which every function of the module is rebuilt to look names up in the copy, and
the named pieces are replaced there. The real module is never touched: two threads, or a
hypothesis and a check, can run at the same time.

``expected_under(variant, component, ...)`` is ``tck.reference.expected.expected`` computed
with a variant (the component's oracle call, ``tck.reference.components``, rebuilt the same
way so that its ``oracle.X`` names resolve in the variant). ``reaches(component, name)``
says whether a component's oracle calls the piece ``name`` at all, read from the code of its
oracle call: the hypotheses a component can have follow from its record, not from lists.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from . import components, oracle
from .components import record
from .conventions import Config, Conventions

Arrays = Mapping[str, np.ndarray]


def _rebuilt(fn: types.FunctionType, namespace: dict[str, Any]) -> types.FunctionType:
    """``fn`` with its global names looked up in ``namespace``."""
    copy = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__doc__ = fn.__doc__
    copy.__qualname__ = fn.__qualname__
    return copy


def _rebuild_namespace(module: types.ModuleType, name: str) -> types.ModuleType:
    """A new module whose functions (and tables of functions, such as ``ACTIVATIONS``) are
    those of ``module`` rebuilt to look their global names up in the new module."""
    copy = types.ModuleType(name, module.__doc__)
    namespace = copy.__dict__
    original = vars(module)
    namespace.update(original)
    mapping: dict[int, Any] = {}
    for key, value in original.items():
        if isinstance(value, types.FunctionType) and value.__globals__ is original:
            namespace[key] = mapping.setdefault(id(value), _rebuilt(value, namespace))
    for key, value in original.items():
        if isinstance(value, dict) and any(id(v) in mapping for v in value.values()):
            namespace[key] = {k: mapping.get(id(v), v) for k, v in value.items()}
    return copy


def oracle_variant(replacements: Mapping[str, Callable[..., Any]]) -> types.ModuleType:
    """The oracle with each piece ``name`` replaced by ``replacements[name]``: every other
    function of the oracle calls the replacement. A replacement may call the real oracle's
    pieces (``tck.reference.oracle.X``); a name the oracle lacks is a ValueError."""
    unknown = [name for name in replacements if not callable(getattr(oracle, name, None))]
    if unknown:
        raise ValueError(f"the oracle has no function {unknown}")
    variant = _rebuild_namespace(oracle, f"{oracle.__name__}[variant]")
    for name, replacement in replacements.items():
        setattr(variant, name, replacement)
    return variant


def _calls_of(variant: types.ModuleType) -> types.ModuleType:
    """``tck.reference.components`` with ``oracle`` bound to ``variant``."""
    cached = getattr(variant, "__components__", None)
    if cached is None:
        cached = _rebuild_namespace(components, f"{components.__name__}[variant]")
        cached.oracle = variant
        variant.__components__ = cached
    return cached


def expected_under(
    variant: types.ModuleType | None,
    component: str,
    inputs: Arrays,
    params: Arrays | None,
    config: Config,
    conventions: Conventions,
) -> np.ndarray:
    """What ``variant`` (None: the spec's own oracle) gives for one call of ``component``,
    as ``tck.reference.expected.expected`` computes it."""
    call = record(component).oracle
    if variant is not None and isinstance(call, types.FunctionType):
        call = _rebuilt(call, vars(_calls_of(variant)))
    return call(inputs, params or {}, config, conventions)


def _names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


@functools.cache
def _reached(fn_name: str, module: str) -> frozenset[str]:
    """The oracle functions a function of ``tck.reference.oracle`` (``module`` "oracle") or
    of ``tck.reference.components`` calls, directly or through others (by the global names
    its code reads: a static over-approximation, never an under-one)."""
    spaces = {"oracle": vars(oracle), "components": vars(components)}
    seen: set[tuple[str, str]] = set()
    todo = [(module, fn_name)]
    found: set[str] = set()
    while todo:
        where, name = todo.pop()
        if (where, name) in seen:
            continue
        seen.add((where, name))
        fn = spaces[where].get(name)
        if isinstance(fn, dict):  # a table of functions, such as ACTIVATIONS
            todo += [(where, f.__name__) for f in fn.values() if callable(f)]
            continue
        if not isinstance(fn, types.FunctionType):
            continue
        if where == "oracle":
            found.add(name)
        for used in _names(fn.__code__):
            if used in vars(oracle):
                todo.append(("oracle", used))
            if where == "components" and used in vars(components):
                todo.append(("components", used))
    return frozenset(found)


@functools.cache
def oracle_pieces(component: str) -> frozenset[str]:
    """The oracle functions ``component``'s oracle call can reach (SPEC order is not kept)."""
    call = record(component).oracle
    if not isinstance(call, types.FunctionType):
        return frozenset()
    found: set[str] = set()
    for used in _names(call.__code__):
        if used in vars(oracle):
            found |= _reached(used, "oracle")
        if used in vars(components):
            found |= _reached(used, "components")
    return frozenset(found)


def reaches(component: str, piece: str) -> bool:
    """Does ``component``'s oracle call the oracle function ``piece`` (directly or not)?"""
    return piece in oracle_pieces(component)
