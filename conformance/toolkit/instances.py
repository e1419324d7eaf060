"""Instances a property check reuses across hypothesis examples, and canonical parameters
it fills in itself."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tck.adapters import Unsupported
from tck.conformance.toolkit.harness import Harness, Instance
from tck.reference import param_shapes

_INSTANCES: weakref.WeakKeyDictionary[Harness, dict[Any, Instance]] = weakref.WeakKeyDictionary()


def cached_instance(tck: Harness, key: Any, build: Callable[[], Instance]) -> Instance:
    """One instance per (check, subject, key) across hypothesis examples.

    Building (and loading params) per example would dominate the run time; reusing one
    instance across calls is also what users do, and a state leak between calls then
    shows up as a failure here too.
    """
    cache = _INSTANCES.setdefault(tck, {})
    if key not in cache:
        try:
            cache[key] = build()
        except Unsupported as why:
            # A fact of the subject (a dtype or device it lacks), not of this example: skip
            # now. Raised as Unsupported, hypothesis would shrink it as a failure (measured:
            # 40-75 s per check for a subject that does not offer float64).
            pytest.skip(str(why))
    return cache[key]


def zero_params(inst: Instance) -> dict[str, np.ndarray]:
    """Canonical parameter arrays of the instance's component, all zeros (to fill in)."""
    shapes = param_shapes(inst.component, inst.config, inst.conventions)
    return {name: np.zeros(shape) for name, shape in shapes.items()}
