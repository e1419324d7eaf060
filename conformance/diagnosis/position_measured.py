"""A ViT's position table, measured (SPEC.md §9.2, §9.3): when the output disagrees with the
oracle and no hypothesis reproduces it, load the same parameters with the position table
zeroed and run the subject again.

- **The table has no effect** (``positional.positions_ignored``): the output with the table
  zeroed is the output with the table loaded, and is not the spec's. The table never reaches
  the tokens and something else is added in its place (the tokens themselves, a buffer of the
  initialisation); a table that is simply never added is the spec's output with the table
  zeroed, an alternative tried before this measurement (``explain._table_not_added``).
- **The table is used transformed** (``vit.pos_embed_transformed``): with the table zeroed
  the subject agrees with the spec; with the table loaded it does not. Every other part of
  the model computes as specified, and the tokens receive something other than the table's
  rows: the table resampled at its own grid (an interpolation whose shortcut for the native
  size is skipped, or whose scale carries an offset), scaled, or read in another order. A
  bug that lives outside the table (a norm, a head) shows with the table zeroed too, so it
  is never named this way.

Both compare the subject with itself and with the oracle on the same images, whatever
resampling or replacement the implementation chose.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from tck.adapters import Unsupported
from tck.reference.variants import reaches

from .alternatives import within

TABLE = "pos_embed"


def measure_position_table(
    h: Any, inst: Any, inputs: Mapping[str, np.ndarray], test: np.ndarray, tolerance: Any
) -> tuple[str, str] | None:
    """(code, message) of the position table's class on ``inputs``, or None (the subject has
    no table of the canonical layout, cannot load one, or the table is not the account)."""
    params = inst.params
    if params is None or TABLE not in params or not reaches(h.component, "vit_tokens"):
        return None
    if inst.not_loaded is not None or not np.any(params[TABLE]):
        return None
    zeroed = {**params, TABLE: np.zeros_like(params[TABLE])}
    try:
        h.adapter.load(inst.handle, zeroed)
        try:
            without = h.run(inst, inputs)
        finally:
            h.adapter.load(inst.handle, params)
        gold = h.gold(dataclasses.replace(inst, params=zeroed), inputs)
        spec = h.gold(inst, inputs)
    except (Unsupported, ValueError, KeyError, RuntimeError, TypeError):
        return None  # a subject that cannot take the table back measures nothing
    if without.shape != test.shape or without.shape != gold.shape:
        return None
    if within(spec, gold, tolerance):
        return None  # the spec's own output does not show the table on these images
    if np.array_equal(without, test, equal_nan=True) or within(without, test, tolerance):
        return (
            "positional.positions_ignored",
            "the output does not change when the position table is zeroed, and is not the "
            "spec's output without a table either: the table never reaches the tokens and "
            "something else is added in their place (the tokens themselves, a table of the "
            "initialisation; SPEC.md §9.2, §9.3)",
        )
    if within(without, gold, tolerance):
        return (
            "vit.pos_embed_transformed",
            "with the position table zeroed the subject agrees with the spec, with the table "
            "loaded it does not: every other part computes as specified and the tokens "
            "receive a transform of the table instead of its rows (resampled at its own grid, "
            "an interpolation's native-size shortcut skipped or its scale offset; scaled; "
            "read in another order; SPEC.md §9.2, §9.3)",
        )
    return None
