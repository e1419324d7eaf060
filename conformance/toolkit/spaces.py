"""The suite inside what a subject can be (``Subject.supports``, SPEC.md §0.6).

Every config a check gets goes through ``subject_config`` (``Harness.config``): the suite's
default sizes and what the check needs, moved inside the subject's ``ConfigSpace``, or a skip
of that check naming the constraint it breaks. Every input respects the subject's maximum
length: ``fit_shape`` shortens the fixed shapes of a check (``Harness.inputs``),
``length_cap`` bounds the lengths the hypothesis strategies draw, and ``require_length``
(``Harness.run``) refuses to feed a longer call, so that nothing longer ever reaches the
subject except the too-long probe of SPEC.md §2.2 / §10.6, which expects a refusal.

A subject that declares no ``supports`` gets exactly what it got before: the default config
with the fields ``Subject.config`` fixes, and inputs of the checks' own sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from typing import Any

import numpy as np

from tck.adapters import Subject, Unsupported
from tck.adapters.config_space import ConfigSpace
from tck.reference import Config, record
from tck.reference.inputs import Shape

# The subject of the check now running (set by the ``tck`` fixture), for the strategies,
# which are built when the check module is imported and draw while the check runs.
_CURRENT: ContextVar[Subject | None] = ContextVar("tck_subject", default=None)


def space_of(subject: Subject) -> ConfigSpace | None:
    """The subject's ConfigSpace, with the fields ``Subject.config`` fixes folded in."""
    space = getattr(subject, "supports", None)
    if space is None:
        return None
    fixed = getattr(subject, "config", None) or {}
    if fixed:
        space = dataclasses.replace(space, fixed={**space.fixed, **fixed})
    return space


def subject_config(subject: Subject, base: Config, overrides: Mapping[str, Any]) -> Config:
    """The config a check gets for ``subject``: ``Unsupported`` (a skip of this check, with
    the constraint named) when the subject cannot be what the check needs."""
    space = space_of(subject)
    if space is None:  # what it always was: what the subject fixes wins
        fixed = getattr(subject, "config", None) or {}
        return dataclasses.replace(base, **{**overrides, **fixed})
    resolved = space.resolve(overrides, base)
    if isinstance(resolved, str):
        raise Unsupported(f"{subject.name} ({space.describe()}): {resolved}")
    return resolved


def require_config(subject: Subject, config: Config) -> None:
    """``Unsupported`` when ``config`` (made by a check or a fixture file, not by
    ``subject_config``) lies outside the subject's declared space."""
    space = space_of(subject)
    refusal = space.admits(config) if space is not None else None
    if refusal:
        raise Unsupported(f"{subject.name} ({space.describe()}): {refusal}")  # type: ignore[union-attr]


def max_length(subject: Subject | None) -> int | None:
    """The longest sequence the subject takes (ConfigSpace.max_len), None for no limit."""
    space = space_of(subject) if subject is not None else None
    return space.max_len if space is not None else None


def reach(subject: Subject, wanted: int) -> int:
    """``wanted`` positions, or fewer when the subject declares a shorter maximum length: the
    checks that probe long positions probe up to the subject's own limit."""
    limit = max_length(subject)
    return wanted if limit is None else min(wanted, limit)


def declared(subjects: Iterable[Subject]) -> dict[str, dict[str, str]]:
    """``{"supports": {subject: the ConfigSpace in words}}`` for the results' adapter
    section; empty when no subject declares one (results.json as before)."""
    said = {s.name: space.describe() for s in subjects if (space := space_of(s)) is not None}
    return {"supports": said} if said else {}


# ------------------------------------------------------------------------------ inputs


def fit_shape(shape: Shape, limit: int | None) -> Shape:
    """``shape`` with its lengths at most ``limit``: a padded row stays padded (when the
    shorter length leaves room), a full row stays full."""
    if limit is None or (shape.lq <= limit and shape.lk <= limit):
        return shape
    lq, lk = min(shape.lq, limit), min(shape.lk, limit)
    lengths = shape.lengths
    if lengths is not None:
        lengths = tuple(lk if n >= shape.lk else min(n, lk - 1 if lk > 1 else lk) for n in lengths)
    return dataclasses.replace(shape, lq=lq, lk=lk, lengths=lengths)


_AXES = {
    "q": -2,
    "k": -2,
    "v": -2,
    "x": 1,
    "query": 1,
    "key": 1,
    "value": 1,
    "memory": 1,
    "ids": 1,
    "src_ids": 1,
    "tgt_ids": 1,
    "key_padding": -1,
    "memory_key_padding": -1,
    "keep_mask": -1,
    "attn_mask": -1,
}


def call_length(component: str, inputs: Mapping[str, Any]) -> int:
    """The longest sequence in a call, and the largest position + 1 it uses."""
    longest = 0
    for name, axis in _AXES.items():
        value = inputs.get(name)
        if value is None or np.ndim(value) < 2:
            continue
        if name == "x" and record(component).has("heads"):
            axis = -2  # [B, H, L, d]
        longest = max(longest, int(np.shape(value)[axis]))
    positions = inputs.get("positions")
    if positions is not None and np.size(positions):
        longest = max(longest, int(np.shape(positions)[-1]), int(np.max(positions)) + 1)
    return longest


def require_length(subject: Subject, inputs: Mapping[str, Any]) -> None:
    """``Unsupported`` for a call longer than the subject takes: the suite never feeds it
    (only the too-long probe does, straight through the adapter, and expects a refusal)."""
    limit = max_length(subject)
    if limit is None:
        return
    length = call_length(subject.component, inputs)
    if length > limit:
        raise Unsupported(
            f"this check calls {subject.name} with {length} positions; the subject takes at "
            f"most {limit} (ConfigSpace.max_len)"
        )


# ------------------------------------------------------------------------------ strategies


def use(subject: Subject | None) -> None:
    """Make ``subject`` the one the strategies draw for (the ``tck`` fixture calls it)."""
    _CURRENT.set(subject)


def length_cap(wanted: int) -> int:
    """``wanted``, or the current subject's maximum length when that is shorter."""
    limit = max_length(_CURRENT.get())
    return wanted if limit is None else min(wanted, limit)


def too_short(needed: int, limit: int) -> None:
    """``Unsupported`` (the check skips) when it needs longer sequences than the subject
    takes: e.g. padding in every row needs 3 positions."""
    if limit < needed:
        raise Unsupported(
            f"this check needs sequences of {needed} positions; the subject takes at most "
            f"{limit} (ConfigSpace.max_len)"
        )
