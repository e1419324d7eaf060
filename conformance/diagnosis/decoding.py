"""Decoder-only models (SPEC.md §11): the bug hypotheses that live in the parameters, and
the incremental decoding loop of the KV-cache checks.

A *parameter hypothesis* is a bug that computes the spec's function of other parameters:
gate and up projections swapped (§11.3), or key/value heads grouped by tiling instead of
repeating each head in place (§11.2; the tiled output is the spec's with the query heads,
and the output projection's columns, permuted). The harness tries each when an oracle
comparison fails, so the failure names the bug class. Nothing here imports the harness.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import pairwise
from typing import Any

import numpy as np

from tck.reference import Config
from tck.reference.components import record

Arrays = Mapping[str, np.ndarray]


def _prefixes(params: Arrays, leaf: str) -> list[str]:
    return sorted({k[: -len(leaf)] for k in params if k.endswith(leaf)})


def gate_up_swapped(params: Arrays) -> dict[str, np.ndarray] | None:
    """§11.3: every gated FFN's gate and up projections exchanged (None: there is none)."""
    prefixes = _prefixes(params, "gate.weight")
    if not prefixes:
        return None
    out = dict(params)
    for prefix in prefixes:
        for leaf in ("weight", "bias"):
            gate, up = f"{prefix}gate.{leaf}", f"{prefix}up.{leaf}"
            if gate in params and up in params:
                out[gate], out[up] = params[up], params[gate]
    return out


def tiled_kv_heads(params: Arrays, config: Config) -> dict[str, np.ndarray] | None:
    """§11.2: parameters under which the spec's grouping (kv head j serves query heads
    j*g .. (j+1)*g - 1) computes what the tiled rule (query head h uses kv head h mod H_kv,
    ``k.repeat(1, g, 1, 1)``) computes with ``params``; None when the rules agree."""
    h, h_kv = config.n_heads, config.kv_heads
    g = h // h_kv
    if h_kv in (1, h):
        return None
    # slot s (served by kv head s // g under the spec) takes the query head that the tiled
    # rule serves with the same kv head
    order = [j + r * h_kv for j in range(h_kv) for r in range(g)]
    dk, dv = config.head_dim_k, config.head_dim_v
    q_rows = np.concatenate([np.arange(i * dk, (i + 1) * dk) for i in order])
    o_cols = np.concatenate([np.arange(i * dv, (i + 1) * dv) for i in order])
    out = dict(params)
    prefixes = [p for p in _prefixes(params, "q.weight") if f"{p}o.weight" in params]
    for prefix in prefixes:
        out[f"{prefix}q.weight"] = np.asarray(params[f"{prefix}q.weight"])[q_rows]
        if f"{prefix}q.bias" in params:
            out[f"{prefix}q.bias"] = np.asarray(params[f"{prefix}q.bias"])[q_rows]
        out[f"{prefix}o.weight"] = np.asarray(params[f"{prefix}o.weight"])[:, o_cols]
    return out if prefixes else None


def param_hypotheses(
    component: str, config: Config, params: Arrays | None
) -> Iterator[tuple[str, str, dict[str, np.ndarray]]]:
    """(code, message, parameters) for each parameter-level bug that may explain an output."""
    if not params:
        return
    swapped = gate_up_swapped(params)
    if swapped is not None:
        yield (
            "ffn.gate_up_swapped",
            "the output is the spec's with the gate and up projections exchanged: the "
            "activation is applied to up(x) and multiplies gate(x) (SPEC.md §11.3)",
            swapped,
        )
    if record(component).has("kv_cache"):  # the §11 components that hold attention
        tiled = tiled_kv_heads(params, config)
        if tiled is not None:
            yield (
                "attention.kv_heads_tiled",
                f"the output is what {config.n_heads} query heads give when query head h uses "
                f"key/value head h mod {config.kv_heads} (the group tiled, k.repeat): SPEC.md "
                f"§11.2 gives query head h key/value head h // {config.n_heads // config.kv_heads}"
                " (each head repeated in place, repeat_interleave)",
                tiled,
            )


# ------------------------------------------------------------------- incremental decoding


def token_input(component: str) -> str:
    """The input that holds the tokens of a causal component."""
    return record(component).inputs[0].name  # x [B, L, D] or ids [B, L]


def schedule(length: int, prefill: int, chunk: int = 1) -> list[tuple[int, int]]:
    """The token ranges [start, stop) of incremental decoding: the first ``prefill`` tokens
    in one call, then ``chunk`` tokens per call (the last call takes what is left)."""
    bounds = [0, prefill, *range(prefill + chunk, length, chunk), length]
    return [(start, stop) for start, stop in pairwise(bounds) if stop > start]


def decode(
    adapter: Any,
    handle: Any,
    component: str,
    inputs: Arrays,
    prefill: int,
    chunk: int = 1,
    *,
    give_positions: bool = True,
) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
    """Feed ``inputs`` (the whole sequence: tokens, key_padding, positions) to ``step``: the
    first ``prefill`` tokens in one call, then ``chunk`` tokens per call (SPEC.md §11.6,
    §11.9). Without ``give_positions`` the calls carry no ``positions``: the subject numbers
    the new tokens itself (``Subject.derives_positions``). Returns each call's output and its
    token range [start, stop)."""
    name = token_input(component)
    tokens = np.asarray(inputs[name])
    b, length = tokens.shape[:2]
    positions = inputs.get("positions")
    if positions is None:
        positions = np.broadcast_to(np.arange(length), (b, length))
    keep = inputs.get("key_padding")
    cache, outs, ranges = None, [], []
    for start, stop in schedule(length, prefill, chunk):
        call = {name: tokens[:, start:stop]}
        if give_positions:
            call["positions"] = np.ascontiguousarray(positions[:, start:stop])
        if keep is not None:
            call["key_padding"] = np.ascontiguousarray(keep[:, :stop])
        out, cache = adapter.step(handle, call, cache)
        outs.append(np.asarray(out))
        ranges.append((start, stop))
    return outs, ranges
