"""The positions a cached step gives its tokens, solved for (SPEC.md §11.6, §11.9).

A cached call's n new tokens belong at the positions after the cached ones. A subject that
numbers them itself may read the cache's length wrongly: from another axis of its key tensor
(``past_key_values[0][0].size(-1)``, the head size, where ``size(-2)`` is the sequence), from
the wrong layer, once for the whole decode. The wrong number is not on any list, so it is
solved for: call by call, in order, the offset ``o`` whose positions ``o, o + 1, .., o + n - 1``
make the oracle reproduce the subject's cached output on that call's queries, row by row (the
earlier calls at the positions solved for them; every candidate offset is one row block of a
single batched oracle call). The spec's own positions are tried first, so a call that is right is
read as right.

Where every call is reproduced and some call's positions are not the spec's, the class is
the cache's position offset (``cache.position_offset_wrong``; ``cache.rope_offset_wrong``
under RoPE), and the message gives what was solved: one constant for every call (a length
read from something that does not grow), the spec's positions shifted by one amount, or each
call's first position, or rows shifted by different amounts (a packed batch's positions
counted on across its sequences instead of restarting at each).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tck.reference.expected import decoder_only
from tck.reference.tolerance import compare

from .decoding import token_input

Arrays = Mapping[str, np.ndarray]
BLOCK = 64  # candidate offsets per batched oracle call
ROPE_OFFSETS = 256  # offsets tried under RoPE (positions are not bounded by a table there)


def _offsets(config: Any, conventions: Any, n: int) -> range:
    if conventions.positions == "rope":
        return range(ROPE_OFFSETS)
    return range(max(int(getattr(config, "max_len", 0) or 0) - n + 1, 0))


def solved_positions(
    component: str,
    inputs: Arrays,
    params: Arrays,
    config: Any,
    conventions: Any,
    cached: np.ndarray,
    ranges: list[tuple[int, int]],
    judged: np.ndarray,
    dtype: str,
) -> np.ndarray | None:
    """(B, L) positions under which the oracle reproduces ``cached`` on the ``judged``
    queries (B, L), each call's tokens in each row numbered ``o .. o + n - 1`` for one solved
    ``o`` (or the spec's positions); None where some row of a call has no such offset."""
    name = token_input(component)
    tokens = np.asarray(inputs[name])
    batch, length = tokens.shape[:2]
    spec = inputs.get("positions")
    spec = np.broadcast_to(np.arange(length), (batch, length)) if spec is None else spec
    solved = np.array(spec, copy=True)
    key_padding = inputs.get("key_padding")
    for start, stop in ranges:
        n = stop - start
        ask = judged[:, start:stop]
        # rows are independent in the oracle: each row's offset is solved on its own (a
        # packed batch numbers its rows' tokens on from one another's); a row with no judged
        # query keeps the spec's positions
        found: list[np.ndarray | None] = [None] * batch
        for r in range(batch):
            if not ask[r].any():
                found[r] = spec[r, start:stop]
        test = cached[:, start:stop]
        ignore = np.broadcast_to(~ask[(..., *([None] * (test.ndim - 2)))], test.shape)
        candidates = [np.asarray(spec[:, start:stop])]
        candidates += [
            np.broadcast_to(o + np.arange(n), (batch, n)) for o in _offsets(config, conventions, n)
        ]
        for first in range(0, len(candidates), BLOCK):
            if all(f is not None for f in found):
                break
            block = candidates[first : first + BLOCK]
            k = len(block)
            positions = np.concatenate(
                [np.concatenate([solved[:, :start], c], axis=1) for c in block], axis=0
            )
            call = {name: np.concatenate([tokens[:, :stop]] * k, axis=0), "positions": positions}
            if key_padding is not None:
                call["key_padding"] = np.concatenate([np.asarray(key_padding)[:, :stop]] * k)
            try:
                gold = decoder_only(component, call, params, config, conventions)
            except (IndexError, ValueError):  # positions past a table: not a candidate
                continue
            for i, c in enumerate(block):
                for r in range(batch):
                    mine = gold[i * batch + r, start:stop]
                    if (
                        found[r] is None
                        and compare(test[r], mine, dtype=dtype, ignore=ignore[r]).passed
                    ):
                        found[r] = c[r]
        if any(f is None for f in found):
            return None
        solved[:, start:stop] = np.stack([np.asarray(f) for f in found])
    return solved


def describe(solved: np.ndarray, spec: np.ndarray, ranges: list[tuple[int, int]]) -> str | None:
    """What the solved positions say, in words; None when they are the spec's."""
    wrong = [(s, e) for s, e in ranges if not np.array_equal(solved[:, s:e], spec[:, s:e])]
    if not wrong:
        return None
    by_row = [
        (s, e)
        for s, e in wrong
        if len({int(solved[r, s] - spec[r, s]) for r in range(len(solved))}) > 1
    ]
    if by_row:
        s, e = by_row[0]
        shifts = ", ".join(
            f"row {r} {int(solved[r, s] - spec[r, s]):+d}" for r in range(len(solved))
        )
        return (
            f"the rows of one call are shifted by different amounts (tokens {s}..{e - 1}: "
            f"{shifts}): each row's positions count on from the rows before it, as in a packed "
            "batch whose position ids do not restart at each sequence"
        )
    firsts = sorted({int(solved[0, s]) for s, _ in wrong})
    shifts = sorted({int(solved[0, s] - spec[0, s]) for s, _ in wrong})
    if len(firsts) == 1 and len(wrong) > 1:
        return (
            f"every cached call numbers its tokens from {firsts[0]}, whatever the cache holds: "
            "the cache's length is read from something that does not grow with it (another "
            "axis of the key tensor, such as the head size)"
        )
    if len(shifts) == 1:
        return f"the cached calls' tokens are placed {shifts[0]:+d} from their positions"
    shown = ", ".join(f"tokens {s}..{e - 1} from {int(solved[0, s])}" for s, e in wrong[:4])
    return f"the cached calls number their tokens from other offsets ({shown})"


def position_cause(
    tck: Any,
    inst: Any,
    inputs: Arrays,
    cached: np.ndarray,
    ranges: list[tuple[int, int]],
    judged: np.ndarray,
) -> tuple[str, str] | None:
    """(code, message) when each cached call is reproduced by the oracle at positions of
    one solved offset per call, and some of them are not the spec's; else None."""
    conv = inst.conventions
    if inst.params is None or conv.positions in (None, "none"):
        return None
    solved = solved_positions(
        tck.component, inputs, inst.params, inst.config, conv, cached, ranges, judged, inst.dtype
    )
    if solved is None:
        return None
    b, length = solved.shape
    spec = inputs.get("positions")
    spec = np.broadcast_to(np.arange(length), (b, length)) if spec is None else np.asarray(spec)
    said = describe(solved, spec, ranges)
    if said is None:
        return None
    code = "cache.rope_offset_wrong" if conv.positions == "rope" else "cache.position_offset_wrong"
    what = "RoPE rotates" if conv.positions == "rope" else "the position table gives"
    return (
        code,
        f"{what} the decoded tokens at positions solved from their output, not at their place "
        f"after the cached tokens: {said} (SPEC.md §11.6, §11.9)",
    )
