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

- **The grid read transposed, told from the patches read transposed**
  (``patch_order_or_table``): under class-token pooling the encoder cannot tell which of the
  two is permuted, patch tokens read column-major against a row-major table or the table
  read transposed against row-major patches (the tokens meet the same rows). Where the
  adapter offers the patch embedding as a subject of its own and that subject agrees with
  the spec, its patches are in order, and the table is what is read transposed.

Each compares the subject with itself and with the oracle on the same images, whatever
resampling, replacement or layout the implementation chose.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from tck.adapters import Unsupported
from tck.reference import record, select
from tck.reference.variants import reaches

from .alternatives import within

TABLE = "pos_embed"
# A learned position table under its canonical names: a ViT's pos_embed, a decoder's
# pos_embedding.weight (SPEC.md §2.2, §9.3)
POSITION_TABLE = re.compile(r"(^|\.)(pos_embedding\.weight|pos_embed)$")


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


def _whole(component: str) -> bool:
    return record(component).level == "model"


def patch_embedding_agrees(h: Any) -> bool | None:
    """Whether the adapter's own patch-embedding subject agrees with the spec on its default
    images (None: the adapter offers none, or it cannot be built and run)."""
    from tck.conformance.toolkit.harness import Harness

    subjects = getattr(h.adapter, "subjects", None)
    if not callable(subjects):
        return None
    # the subject that takes the images and is no whole model: the patch embedding (§9.1)
    patch = next(
        (s for s in subjects() if s.component in select("images") and not _whole(s.component)),
        None,
    )
    if patch is None:
        return None
    adapter = getattr(h.adapter, "unguarded", h.adapter)
    twin = Harness(adapter, patch, seed=h.seed, device=h.device)
    try:
        inst = twin.instance()
        if inst.params is None:
            return None
        inputs = twin.inputs(inst)
        return twin.compare(inst, twin.run(inst, inputs), twin.gold(inst, inputs)).passed
    except Exception:  # a subject that cannot be built or run measures nothing
        return None
    finally:
        twin.release()


def patch_order_or_table(h: Any, found: tuple[str, str]) -> tuple[str, str]:
    """``found`` (a ``vit.patch_order`` fit on a whole ViT), or the position table read in
    another order where the fit reads the grid column-major (the tokens are the patches,
    permuted: a table read transposed gives the same output) and the adapter's patch
    embedding, checked alone, orders its patches as specified. Tokens that mix several
    patches' channels are no table's doing."""
    if found[0] != "vit.patch_order" or not _whole(h.component):
        return found
    if "read column-major" not in found[1]:
        return found
    if not patch_embedding_agrees(h):
        return found
    return (
        "vit.pos_embed_transformed",
        "the output is what patches read column-major would give, but the patch embedding "
        "checked alone orders its patches row-major as specified: the tokens meet the "
        "position table's rows in another order, the table read with its grid transposed "
        "(SPEC.md §9.1, §9.3)",
    )
