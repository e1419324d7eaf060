"""What the spec says a component returns: the oracle called on the canonical inputs.

``expected(component, inputs, params, config, conventions)`` is the single bridge from the
adapter-facing input dict (tck.adapters.INPUTS) to the oracle functions, so every check
computes ``gold`` the same way. How each component's oracle is called is its record's
``oracle`` (tck.reference.components).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tck.reference import Config, Conventions, record
from tck.reference.components import decoder_only, memory_keep, self_keep

Arrays = Mapping[str, np.ndarray]

__all__ = ["decoder_only", "expected", "memory_keep", "self_keep"]


def expected(
    component: str,
    inputs: Arrays,
    params: Arrays | None,
    config: Config,
    conventions: Conventions,
) -> np.ndarray:
    """The oracle's output for one call (float64). ``params`` may be None for components
    without parameters."""
    return record(component).oracle(inputs, params or {}, config, conventions)
