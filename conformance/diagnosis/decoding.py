"""Decoder-only models (SPEC.md §11): the bug hypotheses that live in the parameters, and
the incremental decoding loop of the KV-cache checks.

A *parameter hypothesis* is a bug that computes the spec's function of other parameters:
gate and up projections swapped (§11.3), or key/value heads grouped by tiling instead of
repeating each head in place (§11.2; the tiled output is the spec's with the query heads,
and the output projection's columns, permuted). The harness tries each when an oracle
comparison fails, so the failure names the bug class. Nothing here imports the harness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
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


def queries_regrouped(params: Arrays, config: Config) -> list[dict[str, np.ndarray]]:
    """§11.2: parameters under which the spec computes what a subject computes whose query
    heads are numbered across the key/value groups instead of within them: the g queries of
    group j read as heads j, j + H_kv, ..., as a per-group fused projection (``(H_kv, g, d)``)
    transposed to ``(g, H_kv, d)`` before its reshape gives them, each query head paired with
    another group's key/value head and its output in its own place. The query heads' rows
    permuted (both directions of the transpose); none where there is one group or one head
    per group."""
    h, h_kv = config.n_heads, config.kv_heads
    g = h // h_kv
    if h_kv in (1, h):
        return []
    across = [j + r * h_kv for j in range(h_kv) for r in range(g)]
    within = list(np.argsort(across))
    dk = config.head_dim_k
    prefixes = [p for p in _prefixes(params, "q.weight") if f"{p}o.weight" in params]
    found = []
    for order in (within, across) if within != across else (within,):
        rows = np.concatenate([np.arange(i * dk, (i + 1) * dk) for i in order])
        out = dict(params)
        for prefix in prefixes:
            for leaf in ("weight", "bias"):
                if f"{prefix}q.{leaf}" in params:
                    out[f"{prefix}q.{leaf}"] = np.asarray(params[f"{prefix}q.{leaf}"])[rows]
        found.append(out)
    return found if prefixes else []


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
        for regrouped in queries_regrouped(params, config):
            yield (
                "attention.heads_split_wrong_order",
                f"the output is the spec's with the query heads numbered across the "
                f"{config.kv_heads} key/value groups instead of within them (query i of group "
                f"j taken as head i * {config.kv_heads} + j, not j * "
                f"{config.n_heads // config.kv_heads} + i: a per-group fused projection "
                "transposed before its reshape), so each query head meets another group's key "
                "and value head (SPEC.md §3.3, §11.2)",
                regrouped,
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


def prefill_inputs(component: str, inputs: Arrays, prefill: int) -> dict[str, np.ndarray]:
    """The first ``prefill`` tokens of ``inputs`` as a forward call takes them (tokens,
    positions, key padding cut to that length): the prefill call of ``decode`` as a forward,
    whose oracle output is the first ``prefill`` positions of the whole sequence's."""
    cut = {token_input(component), "positions", "key_padding"}
    return {
        name: np.ascontiguousarray(np.asarray(a)[:, :prefill]) if name in cut else a
        for name, a in inputs.items()
    }


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


# ------------------------------------------------------- the cache as slots, some of them empty


# The token index of a cache slot that holds zeros (never written): past every token.
EMPTY_SLOT = np.iinfo(np.int64).max


def cache_slots(
    batch: int,
    length: int,
    ranges: list[tuple[int, int]],
    key_padding: np.ndarray | None,
    *,
    write_offset: int = 0,
    causal_in_steps: bool = True,
    window: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """What each query sees when the calls take the token ranges ``ranges`` and the cache is
    a row of slots, as a static (preallocated) cache lays it out: a call of n tokens on a
    cache filled to F writes its keys at slots F + ``write_offset`` .. F + ``write_offset``
    + n - 1, the cache is filled to F + n and the call reads slots 0..F + n - 1; query i of
    the call sees the slots up to F + i (bottom-right, SPEC.md §11.6), each masked by the
    padding entry at the slot's index (§11.7). A slot read before anything was written there
    holds zeros: a key of score 0 and a value of 0, which still takes a share of the
    softmax. ``causal_in_steps=False``: the calls after the first see every slot read (the
    causal mask skipped once the cache is non-empty, right only for one token per call).
    ``window``: a sliding window (§4.5), laid over the slots as over the positions: query
    slot s sees slots above s - window.

    Returns (keep (B, 1, L, L): which tokens' keys each query sees; empty (B, 1, L): how many
    empty slots it sees). ``write_offset=0`` with the causal mask gives the spec's mask and no
    empty slot."""
    keep = np.zeros((batch, length, length), bool)
    empty = np.zeros((batch, length), int)
    held: dict[int, int] = {}  # slot -> token written there
    filled = 0
    pad = None if key_padding is None else np.asarray(key_padding, bool)
    for call, (start, stop) in enumerate(ranges):
        n = stop - start
        for i in range(n):
            held[filled + write_offset + i] = start + i
        filled += n
        for i in range(n):
            at = filled - n + i  # the query's own slot
            last = at if causal_in_steps or not call else filled - 1
            first = 0 if window is None else max(at - window + 1, 0)
            for slot in range(first, last + 1):
                real = np.ones(batch, bool) if pad is None else pad[:, slot]
                if slot in held:
                    keep[:, start + i, held[slot]] |= real
                else:
                    empty[:, start + i] += real
    return keep[:, None], empty[:, None]


# The largest preallocated buffer a hypothesis tries (slots): past it the zero slots' share
# of each softmax no longer changes what a float64 comparison resolves about the buffer.
LARGEST_BUFFER = 8192


def buffer_capacities(config: Any, length: int) -> list[int]:
    """Buffer sizes a static cache allocates for ``length`` tokens: the config's max_len and
    every power of two from the first that holds them up to LARGEST_BUFFER."""
    powers = [2**k for k in range(1, LARGEST_BUFFER.bit_length()) if 2**k >= length]
    given = [int(config.max_len)] if getattr(config, "max_len", None) else []
    return sorted({n for n in [*given, *powers] if n >= length})


def buffer_slots(
    batch: int,
    length: int,
    ranges: list[tuple[int, int]],
    capacity: int,
    *,
    chunks: str,
) -> tuple[np.ndarray, np.ndarray]:
    """What each query sees when the cache returns its whole preallocated buffer of
    ``capacity`` slots (``keys`` for ``keys[..., :offset]``), the unwritten ones zeros: a
    call of one token (no mask) sees every slot; a call of several sees its causal triangle
    over the written slots alone (``chunks="masked"``: a mask built for them) or every slot up
    to ``capacity - n + i`` (``chunks="bottom_right"``: a causal mask aligned bottom-right
    over the whole buffer, so that a query also sees its call's later tokens). The first
    call (an empty cache) is masked like any other. Returns (keep (B, 1, L, L), empty
    (B, 1, L)) as ``cache_slots`` does."""
    keep = np.zeros((batch, length, length), bool)
    empty = np.zeros((batch, length), int)
    for start, stop in ranges:
        n = stop - start
        for i in range(n):
            row = start + i
            if n == 1 or chunks == "bottom_right":
                last = min(capacity - n + i, capacity - 1)
                keep[:, row, : min(last + 1, stop)] = True
                empty[:, row] = max(last + 1 - stop, 0)
            else:
                keep[:, row, : row + 1] = True
    return keep[:, None], empty[:, None]


def _attention_with_empty_slots(empty: np.ndarray, flat: np.ndarray | None = None) -> Any:
    """The oracle's attention with ``empty`` (B, 1, L) zero key/value slots appended to the
    keys each query sees (a zero key scores 0; a zero value adds nothing but takes weight).
    The queries ``flat`` (B, 1, L) weigh the keys they see equally: a mask that kept no key
    and filled every score with one finite value (``masked_fill(..., finfo.min)``), whose
    softmax is uniform over every key the call read (SPEC.md §4.4); here as a zero query,
    whose scores are all 0."""
    from tck.reference import oracle

    most = int(empty.max()) if empty.size else 0

    def scaled_dot_product_attention(q, k, v, keep_mask=None, **kw):  # type: ignore[no-untyped-def]
        q, k, v = oracle._f64(q), oracle._f64(k), oracle._f64(v)
        if flat is not None:
            q = np.where(flat[..., None], 0.0, q)
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        zeros_k = np.zeros((*lead, most, k.shape[-1]))
        zeros_v = np.zeros((*lead, most, v.shape[-1]))
        k = np.concatenate([np.broadcast_to(k, (*lead, *k.shape[-2:])), zeros_k], axis=-2)
        v = np.concatenate([np.broadcast_to(v, (*lead, *v.shape[-2:])), zeros_v], axis=-2)
        lq = q.shape[-2]
        seen = np.arange(most)[None, None, None, :] < empty[..., None]  # (B, 1, L, most)
        keep = np.ones((*lead, lq, k.shape[-2] - most), bool)
        if keep_mask is not None:
            keep = np.broadcast_to(np.asarray(keep_mask, bool), keep.shape)
        seen = np.broadcast_to(seen, (*lead, lq, most))
        return oracle.scaled_dot_product_attention(
            q, k, v, np.concatenate([keep, seen], axis=-1), **kw
        )

    return scaled_dot_product_attention


def decoder_only_seeing(
    component: str,
    inputs: Arrays,
    params: Arrays,
    config: Config,
    conventions: Any,
    keep: np.ndarray,
    empty: np.ndarray | None = None,
    flat: np.ndarray | None = None,
) -> np.ndarray:
    """The decoder-only component's oracle (SPEC.md §11) where each query sees the tokens'
    keys ``keep`` (B, 1, L, L; in place of the causal and padding masks) and ``empty``
    (B, 1, L) zero slots besides (``cache_slots``; None: none), the queries ``flat``
    (B, 1, L) weighing what they see equally (a row its mask left empty, filled with a
    finite value; None: none)."""
    from tck.reference.variants import oracle_variant

    if empty is None:
        empty = np.zeros(keep.shape[:-1], int)
    attention = _attention_with_empty_slots(empty, flat)
    variant = oracle_variant({"scaled_dot_product_attention": attention})
    unpadded = {k: v for k, v in inputs.items() if k != "key_padding"}
    return _decoder_only_in(variant, component, unpadded, params, config, conventions, keep)


def _decoder_only_in(
    variant: Any,
    component: str,
    inputs: Arrays,
    params: Arrays,
    config: Config,
    conventions: Any,
    causal_keep: np.ndarray,
) -> np.ndarray:
    """``tck.reference.components.decoder_only`` computed in the oracle ``variant`` (its
    component calls rebuilt to look the oracle's pieces up there)."""
    from tck.reference.variants import _calls_of

    return _calls_of(variant).decoder_only(
        component, inputs, params, config, conventions, causal_keep=causal_keep
    )


def cache_orders(
    batch: int,
    length: int,
    ranges: list[tuple[int, int]],
    key_padding: np.ndarray | None,
    *,
    keys: str = "append",
    values: str = "append",
    window: int | None = None,
    swapped: str | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The cache as two rows of slots, the keys' and the values', each extended at its end
    (``"append"``, ``torch.cat([cache, new])``), at its start (``"prepend"``,
    ``torch.cat([new, cache])``) by every call after the first, written one slot too far
    into a preallocated cache (``"late"``: a call of n tokens on a cache filled to F writes
    slots F+1..F+n; slot 0 is never written and holds zeros), or written at the cache's
    start by every call (``"start"``: ``cache[:, 0:n] = new`` for ``cache[:, F:F + n]``;
    each call overwrites the first slots, and slots F..F+n-1, read, hold zeros; or
    ``"start_over_forward"``: they hold what a full call of the same sequence on the same
    buffer wrote there before the decode, the tokens of those places), or written at the
    slot of the call's own index (``"calls"``: a write
    position advanced by one per call, not by the call's n tokens: right for one token per
    call, a call of several overwrites its predecessors'), or, for the values only, the
    call's keys stored in the value cache (``"keys"``: ``values[..., F:F + n] = keys``, the
    prefill's included; ``"keys_after_prefill"``: the prefill's values right, the keys of
    every later call's tokens appended as values; ``"keys_stored"``: the call attends its own
    values, and the cache it returns holds its keys as values, ``present = (key, key)``).
    Query i of a call of n tokens on T slots sees slots 0..T-n+i (bottom-right by index,
    SPEC.md §11.6; a sliding ``window`` over slot indices, §4.5), each masked by the padding
    entry at the slot's index (§11.7); the score of slot s uses the key held there, the
    weight multiplies the value held there. ``swapped``: every call after the first reads the
    cached keys as values and the cached values as keys (a ``(key, value)`` pair unpacked in
    the other order), and then stores what it used (``"stored"``: transformers'
    ``present = (key, value)`` after the concatenation, so the cached part is swapped at
    every other call) or leaves the cache right (``"read"``).

    Returns (key (L, L), value (L, L), keep (B, 1, L, L)), indexed by query and slot: the
    token whose key (value) the slot holds, that number plus ``length`` where it holds the
    token's other tensor, ``EMPTY_SLOT`` where it holds zeros. Both "append" is the spec."""
    key_at = np.full((length, length), EMPTY_SLOT)
    value_at = np.full((length, length), EMPTY_SLOT)
    keep = np.zeros((batch, length, length), bool)
    # each slot as a token number, plus ``length`` where it holds the token's other tensor
    held: dict[str, list[int]] = {"keys": [], "values": []}
    pad = None if key_padding is None else np.asarray(key_padding, bool)

    def other(slots: list[int]) -> list[int]:
        return [s if s == EMPTY_SLOT else (s + length) % (2 * length) for s in slots]

    for call, (start, stop) in enumerate(ranges):
        new = list(range(start, stop))
        used = dict(held)
        if swapped and call:
            used = {"keys": other(held["values"]), "values": other(held["keys"])}
        for name, order in (("keys", keys), ("values", values)):
            if order == "late":  # slot s holds token s - 1 once written, slot 0 never
                used[name] = [EMPTY_SLOT, *range(stop - 1)]
            elif order == "keys" or (order == "keys_after_prefill" and call):
                used[name] = used[name] + [t + length for t in new]  # the tokens' keys
            elif order in ("start", "start_over_forward", "calls"):
                # written at slot 0, or at the call's index; slots never written hold zeros,
                # or what a full call on the same buffer left there (its own token's)
                at = call if order == "calls" else 0
                fill = (
                    list(range(len(used[name]), stop))
                    if order == "start_over_forward"
                    else [EMPTY_SLOT] * max(stop - len(used[name]), 0)
                )
                extended = used[name] + fill
                extended[at : at + len(new)] = new
                used[name] = extended
            elif order == "prepend" and call:
                used[name] = new + used[name]
            else:
                used[name] = used[name] + new
        if swapped == "read" and call:  # the cache itself stays right
            held = {name: held[name] + new for name in held}
        else:
            held = dict(used)
        for name, order in (("keys", keys), ("values", values)):
            if order == "keys_stored":  # what the next call reads: this call's keys
                held[name] = held[name][: len(held[name]) - len(new)] + [t + length for t in new]
        n, total = stop - start, stop
        for i in range(n):
            row, at = start + i, total - n + i
            first = 0 if window is None else max(at - window + 1, 0)
            key_at[row, :total] = used["keys"][:total]
            value_at[row, :total] = used["values"][:total]
            for slot in range(first, at + 1):
                keep[:, row, slot] = True if pad is None else pad[:, slot]
    return key_at, value_at, keep[:, None]


def _attention_over_slots(
    key_at: np.ndarray,
    value_at: np.ndarray,
    keep: np.ndarray,
    rotate_at_slots: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> Any:
    """The oracle's attention where query i's slot s holds the key of token key_at[i, s] and
    the value of token value_at[i, s] (a number past the tokens: that token's other tensor,
    ``cache_orders``), slots kept by ``keep`` (B, 1, L, L); the oracle's own
    mask (the causal triangle, replaced here) is not used. A row with no slot is 0.
    ``rotate_at_slots(keys, key_at)``: the keys as read, turned to the slot they are read
    at (``keys_rotated_at_slots``)."""
    from tck.reference import oracle

    def scaled_dot_product_attention(q, k, v, keep_mask=None, *, scale=None, **kw):  # type: ignore[no-untyped-def]
        q, k, v = oracle._f64(q), oracle._f64(k), oracle._f64(v)
        scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
        # EMPTY_SLOT indexes a zero row appended to the tokens: a slot never written
        zero_k, zero_v = (
            np.zeros((*k.shape[:-2], 1, k.shape[-1])),
            np.zeros((*v.shape[:-2], 1, v.shape[-1])),
        )
        # a slot numbered past the tokens holds the token's other tensor (same width, §3.1)
        both = k.shape[-1] == v.shape[-1]
        pool_k = np.concatenate([k, v, zero_k] if both else [k, zero_k], axis=-2)
        pool_v = np.concatenate([v, k, zero_v] if both else [v, zero_v], axis=-2)
        keys = pool_k[..., np.minimum(key_at, pool_k.shape[-2] - 1), :]
        values = pool_v[..., np.minimum(value_at, pool_v.shape[-2] - 1), :]
        if rotate_at_slots is not None:
            keys = rotate_at_slots(keys, key_at)
        scores = np.einsum("bhid,bhisd->bhis", q, keys) * scale
        scores = np.where(keep, scores, -np.inf)
        top = np.max(scores, axis=-1, keepdims=True)
        with np.errstate(invalid="ignore"):
            weights = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
            weights = np.nan_to_num(weights / weights.sum(axis=-1, keepdims=True))
        return np.einsum("bhis,bhisd->bhid", weights, values)

    return scaled_dot_product_attention


def keys_rotated_at_slots(conventions: Any) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """For a cache that holds its keys unrotated and rotates them when read, at the index of
    the slot that holds them (RoPE applied to the whole concatenated cache at positions 0..T-1,
    as TransformerLens' ``apply_rotary`` on the cached keys does): right while slot s holds
    token s, another token's angle wherever a slot order is wrong. The keys arrive rotated at
    their own token's position t (unpadded rows: position id t), so each is turned on by
    s - t (RoPE's rotations compose, SPEC.md §2.3). ``keys`` (B, H, L, L, d) by query and
    slot, ``key_at`` (L, L) as ``cache_orders`` gives it."""
    from tck.reference import oracle

    def rotate(keys: np.ndarray, key_at: np.ndarray) -> np.ndarray:
        queries, slots = key_at.shape
        tokens = np.where(key_at < slots, key_at, np.arange(slots)[None, :])  # keys only
        turn = (np.arange(slots)[None, :] - tokens).reshape(-1).astype(np.float64)
        flat = keys.reshape(*keys.shape[:-3], queries * slots, keys.shape[-1])
        omega = oracle.rope_frequencies_of(keys.shape[-1], conventions)
        turned = oracle.rope(flat, turn, layout=conventions.rope_layout, frequencies=omega)
        return turned.reshape(keys.shape)

    return rotate


def decoder_only_over_slots(
    component: str,
    inputs: Arrays,
    params: Arrays,
    config: Config,
    conventions: Any,
    orders: tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    keys_rotated_when_read: bool = False,
) -> np.ndarray:
    """The decoder-only component's oracle (SPEC.md §11) with attention over the cache's
    slots as ``cache_orders`` lays them out; ``keys_rotated_when_read``: the cache holds
    unrotated keys and rotates each at its slot's index (``keys_rotated_at_slots``)."""
    from tck.reference.variants import oracle_variant

    rotate = keys_rotated_at_slots(conventions) if keys_rotated_when_read else None
    variant = oracle_variant(
        {"scaled_dot_product_attention": _attention_over_slots(*orders, rotate)}
    )
    length = orders[0].shape[0]
    unpadded = {k: v for k, v in inputs.items() if k != "key_padding"}
    everything = np.ones((length, length), bool)  # the slots' keep replaces the triangle
    return _decoder_only_in(variant, component, unpadded, params, config, conventions, everything)
