"""Which keys a cached step attends, measured from outside (SPEC.md §11.6, §11.7, §4.5).

A cache of the subject's own design (a rolling sliding-window buffer, a static preallocated
cache, a ring indexed ``position % size``, transformers' ``past_key_values`` tuples) is not
rebuilt here. Its effect is measured instead: each token t is changed in turn (every
row at once), the sequence is decoded again with the subject's own cache, and the queries
whose cached output moves are the ones that attend token t's key. That gives, for each
decoded query, the set of keys it sees (``seen[b, p, t]``; a t > p is a later token of its
own call, a leak). A query's own key cannot be measured this way (changing token p changes
its query too), so both readings are tried, row by row.

The measured set is evidence only when the oracle, attending exactly those keys
(``decoder_only(..., causal_keep=seen)``), reproduces the subject's cached output on every
decoded query; or, for a query whose mask kept no key at all, not even its own, filled with
one finite score (``masked_fill(~keep, finfo.min)``, §4.4), when the keys it reads weighed
equally do. Such a row sees no key for the classes below. The measured set is then
compared with the keys the spec's mask keeps (causal, bottom-right, cut to the declared
sliding window, without padded keys), and the difference names the class, recorded as a
reproduction (``reproduced_by``) and ranked as a cache hypothesis's fit is, since the oracle
under the measured mask gave the output (``tck.reports.causes``):

- **the padding mask in steps** (the differences are in the rows with padding only, rows
  without padding in the same batch decode right): every padded key in reach is seen and no
  real key is hidden: ``cache.padding_dropped_in_steps``; otherwise the key-padding mask is
  laid over the cache's slots at the wrong offset (read from slot 0 of the mask where the
  cache's first kept key is a later token, or by slot where the cache reorders tokens):
  ``cache.padding_misaligned``;
- **the window in steps**: the keys hidden are the oldest of the spec's window, or the keys
  added are the ones just before it: the cached steps see a window of another width (a
  rolling buffer that keeps fewer or more keys than ``window - 1``):
  ``mask.sliding_window_wrong``; unless the queries at one place within their calls see
  fewer keys the further decoding goes, or none at all: the step's mask
  compares the queries' places with key indices offset by another count (the keys
  numbered from the first slot of a buffer that drops its oldest tokens):
  ``cache.causal_offset_wrong``;
- **keys read in another order**: every query that differs sees as many keys as the spec
  keeps, some exchanged for others (a key older than its window for one inside it): the
  cache's keys are read back in another order than the step's mask numbers them (a ring
  read in slot order once it has wrapped): ``cache.read_order_wrong``;
- **the causal mask aligned top-left in steps**: a query misses the newest keys it should see
  while it sees older ones (query i of a call numbered from the cache's first slot, not from
  its own place after the cached keys): ``cache.causal_top_left``.

Anything else (scattered keys lost: ``cache_measure.overwritten_slots``) is left to the other
measurements. The measurement costs one decode per token of the sequence (11 here), and runs
only where no layout hypothesis reproduced a failing cached decode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tck.reference.tolerance import compare

from .cache_measure import one_layer, stacked
from .decoding import cache_slots, decode, decoder_only_seeing, token_input

Arrays = Mapping[str, np.ndarray]


def _changed_at(inputs: Arrays, name: str, t: int, vocab: int) -> dict[str, np.ndarray]:
    """``inputs`` with token ``t`` of every row changed (another id, or the vector moved by
    3 in every feature): a key and value no row had before."""
    changed = {k: np.array(v, copy=True) for k, v in inputs.items()}
    tokens = changed[name]
    if np.issubdtype(tokens.dtype, np.integer):
        tokens[:, t] = (tokens[:, t] + 1 + vocab // 2) % vocab
        tokens[:, t] = np.where(tokens[:, t] == 0, 1, tokens[:, t])
    else:
        tokens[:, t] = tokens[:, t] + 3.0 * np.sign(tokens[:, t] + 0.5)
    return changed


def _moved(dtype: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(B, L): whether each query's output differs between ``a`` and ``b`` beyond the floor
    of the tolerance rule in ``dtype``."""
    batch, length = a.shape[:2]
    out = np.zeros((batch, length), bool)
    for row in range(batch):
        for p in range(length):
            out[row, p] = not compare(a[row, p], b[row, p], dtype=dtype).passed
    return out


def keys_seen(
    tck: Any,
    inst: Any,
    inputs: Arrays,
    prefill: int,
    chunk: int,
    *,
    give_positions: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(seen (B, L, L): whether query p's cached output depends on token t != p, a later
    token of its own call included (a leak); the cached outputs (B, L, ...)) of decoding
    ``inputs`` with a prefill of ``prefill`` tokens and then ``chunk`` tokens per call."""
    name = token_input(tck.component)
    vocab = int(getattr(inst.config, "vocab_size", 2) or 2)

    def cached(call_inputs: Arrays) -> np.ndarray:
        outs, _ = decode(
            tck.adapter,
            inst.handle,
            tck.component,
            call_inputs,
            prefill,
            chunk,
            give_positions=give_positions,
        )
        return np.concatenate(outs, axis=1)

    base = cached(inputs)
    batch, length = base.shape[:2]
    seen = np.zeros((batch, length, length), bool)
    for t in range(length):
        seen[:, :, t] = _moved(inst.dtype, cached(_changed_at(inputs, name, t, vocab)), base)
        seen[:, t, t] = False  # changing token t changes its query too: not measured
    return seen, base


def _older_than_all(keys: np.ndarray, than: np.ndarray) -> bool:
    return bool(keys.size) and (not than.size or keys.max() < than.min())


def classify(
    seen: np.ndarray,
    spec: np.ndarray,
    judged: np.ndarray,
    key_padding: np.ndarray | None,
    flat: np.ndarray | None = None,
    ranges: list[tuple[int, int]] | None = None,
    own: np.ndarray | None = None,
) -> tuple[str, str] | None:
    """(code, message) for the difference between the keys the cached queries see (``seen``,
    (B, L, L), own keys excluded) and the keys the spec's mask keeps (``spec``, the same
    layout), on the queries ``judged`` (B, L), the queries ``flat`` (B, L) having had no key
    kept by their mask, not even their own, the calls having taken the token ranges
    ``ranges``, each query's own key seen where ``own`` (B, L) says so (None: every one);
    None when it is none of the classes of this module (or no difference)."""
    length = judged.shape[1]
    below = np.tril(np.ones((length, length), bool), -1)  # keys before each query
    extra = seen & ~spec & below & judged[..., None]
    missing = spec & ~seen & below & judged[..., None]
    if own is not None:  # a query's own key, kept by the spec, not seen
        missing |= np.eye(length, dtype=bool) & spec & ~own[..., None] & judged[..., None]
    differs = (extra | missing).any(axis=-1)  # (B, L)
    if not differs.any():
        return None
    if key_padding is not None:
        pad_key = ~np.asarray(key_padding, bool)  # (B, L)
        padded_rows = pad_key.any(axis=-1)
        if padded_rows.any() and not differs[~padded_rows].any():
            if not missing.any() and (extra <= pad_key[:, None, :]).all():
                return (
                    "cache.padding_dropped_in_steps",
                    "the decoded tokens of the padded rows attend the padded keys (measured: "
                    "each earlier token changed in turn moves the cached queries that see it), "
                    "while the rows without padding decode right: the key-padding mask is not "
                    "applied in cached steps (SPEC.md §11.6, §11.7)",
                )
            shown = _example(extra, missing)
            return (
                "cache.padding_misaligned",
                "only the rows with padding decode wrong, and their queries see keys the "
                f"key-padding mask does not keep them from, or miss real keys ({shown}; "
                "measured: each earlier token changed in turn moves the cached queries that "
                "see it): the mask is laid over the cache's keys at the wrong offset (sliced "
                "from slot 0 where the cache's first kept key is a later token, or indexed by "
                "slot in a cache that reorders its tokens; SPEC.md §11.6, §11.7)",
            )
    narrower = wider = top_left = exchanged = True
    slid = 0  # queries that see an older key and miss a newer one
    widths: set[int] = set()
    for row, p in zip(*np.nonzero(differs), strict=True):
        sees = np.nonzero(seen[row, p] & below[p])[0]
        kept = np.nonzero(spec[row, p] & below[p])[0]
        lost = np.nonzero(missing[row, p])[0]
        added = np.nonzero(extra[row, p])[0]
        narrower &= not added.size and _older_than_all(lost, sees)
        wider &= not lost.size and _older_than_all(added, kept)
        # the newest keys lost while older ones are seen: the mask slid toward the start (a
        # query that sees no earlier key at all, every older one a pad, fits it too)
        top_left &= bool(lost.size) and (not sees.size or lost.max() > sees.max())
        slid += bool(lost.size) and bool(sees.size) and lost.max() > sees.max()
        widths.add(int(p - sees.min() + 1) if sees.size else 1)
        # as many keys seen as kept, some exchanged for others: the mask on other tokens
        exchanged &= bool(added.size) and added.size == lost.size
    if narrower and (
        _seen_shrinks(seen, differs, ranges) or (flat is not None and (flat & differs).any())
    ):
        return (
            "cache.causal_offset_wrong",
            "the decoded tokens see fewer of their window's keys the further decoding goes, "
            "or none, not even their own (their mask kept nothing; measured: each "
            "earlier token changed in turn moves the cached queries that see it): the cached "
            "step's mask compares the queries' places with key indices offset by a count "
            "other than the cache's length (keys numbered from the first slot of a buffer "
            "that drops its oldest tokens; SPEC.md §11.6, §4.5). A cache that keeps too few "
            "keys sees the same number at every call",
        )
    if narrower or wider:
        most = max(widths)
        return (
            "mask.sliding_window_wrong",
            f"the decoded tokens see {'fewer' if narrower else 'more'} earlier keys than "
            f"the spec's window keeps: the oldest keys of each query's window are "
            f"{'dropped' if narrower else 'joined by older ones'} (measured: each earlier "
            f"token changed in turn moves the cached queries that see it; the widest window "
            f"seen, own key included, is {most}): the cache keeps "
            f"{'too few' if narrower else 'too many'} keys between calls (a rolling buffer "
            "that keeps another number than window - 1; SPEC.md §4.5, §11.6)",
        )
    if exchanged and not top_left:
        row, p = (int(i[0]) for i in np.nonzero(differs))
        shown = (
            f"row {row}, query {p} sees key {np.nonzero(extra[row, p])[0][0]} and misses "
            f"key {np.nonzero(missing[row, p])[0][0]}"
        )
        return (
            "cache.read_order_wrong",
            "the decoded tokens see as many earlier keys as the spec's mask keeps, but not "
            f"the same ones ({shown}; measured: "
            "each earlier token changed in turn moves the cached queries that see it): the "
            "cache's keys are read back in another order than the step's mask numbers them (a "
            "ring buffer read in slot order once it has wrapped, where the oldest token is no "
            "longer in slot 0; SPEC.md §11.6, §4.5)",
        )
    if top_left and slid:
        return (
            "cache.causal_top_left",
            "each decoded token misses the newest keys before it while it sees older ones "
            "(measured: each earlier token changed in turn moves the cached queries that see "
            "it): the causal mask of a cached step is numbered from the cache's first kept "
            "key (query i sees keys 0..i of the cache), aligned top-left, not from the "
            "query's own place after the cached keys (SPEC.md §11.6, §4.3)",
        )
    return None


def _seen_shrinks(
    seen: np.ndarray, differs: np.ndarray, ranges: list[tuple[int, int]] | None
) -> bool:
    """Whether a query sees fewer earlier keys (``seen``, (B, L, L)) than a query at the same
    place within an earlier call, among the queries that differ from the spec (``differs``,
    (B, L)): a window that closes in as decoding goes on (an offset that grows with the
    tokens decoded), where a window or cache too narrow keeps the same number at every call."""
    if not ranges:
        return False
    length = differs.shape[1]
    below = np.tril(np.ones((length, length), bool), -1)
    place = np.zeros(length, int)  # each query's index within its call
    for start, stop in ranges:
        place[start:stop] = np.arange(stop - start)
    for row in range(differs.shape[0]):
        fewest: dict[int, int] = {}  # place -> the fewest keys seen there so far
        for p in np.nonzero(differs[row])[0]:
            count, at = int((seen[row, p] & below[p]).sum()), int(place[p])
            if at in fewest and count < fewest[at]:
                return True
            fewest[at] = min(count, fewest.get(at, count))
    return False


def _example(extra: np.ndarray, missing: np.ndarray) -> str:
    where = extra if extra.any() else missing
    row, p, t = (int(i[0]) for i in np.nonzero(where))
    verb = "sees padded key" if extra.any() else "misses real key"
    return f"row {row}, query {p} {verb} {t}"


def measured_cause(
    tck: Any,
    inst: Any,
    inputs: Arrays,
    ranges: list[tuple[int, int]],
    judged: np.ndarray,
    *,
    give_positions: bool = True,
) -> tuple[str, str] | None:
    """The class of a failing cached decode of ``inputs`` (taken in the token ranges
    ``ranges``), judged on the queries ``judged`` (B, L), when the oracle attending the keys
    measured reproduces the subject's cached output there; else None. A stack of layers is
    measured built with one layer: through several, a key also reaches a query by way of
    the earlier layers' cached keys, so the keys a query's output depends on are more than
    the keys it attends."""
    if inst.params is None or len(ranges) < 2:
        return None
    if stacked(inst):
        inst = one_layer(tck, inst)
        if inst is None:
            return None
    prefill = ranges[0][1]
    chunk = ranges[1][1] - ranges[1][0]
    seen, cached = keys_seen(tck, inst, inputs, prefill, chunk, give_positions=give_positions)
    batch, length = seen.shape[:2]
    key_padding = inputs.get("key_padding")
    window = inst.conventions.sliding_window
    spec = cache_slots(batch, length, ranges, key_padding, window=window)[0][:, 0]
    eye = np.eye(length, dtype=bool)[None]

    def gold(own: np.ndarray, flat: np.ndarray | None) -> np.ndarray:
        keep = seen | (eye & own[:, :, None])
        return decoder_only_seeing(
            tck.component,
            inputs,
            inst.params,
            inst.config,
            inst.conventions,
            keep[:, None],
            flat=None if flat is None else flat[:, None],
        )

    none, every = np.zeros((batch, length), bool), np.ones((batch, length), bool)
    # each judged query reproduced with its own key seen, or without it; failing that, as a
    # row its mask left empty and filled with one finite score (uniform over the keys it
    # read, SPEC.md §4.4: every key it read moves it, so ``seen`` holds them)
    choices = [(own, None) for own in (every, none)] + [(own, every) for own in (every, none)]
    golds = [gold(own, flat) for own, flat in choices[:2]]
    own, flat = none.copy(), none.copy()
    for row, p in zip(*np.nonzero(judged), strict=True):
        for index, (own_choice, flat_choice) in enumerate(choices):
            if index == len(golds):
                golds.append(gold(own_choice, flat_choice))
            if compare(cached[row, p], golds[index][row, p], dtype=inst.dtype).passed:
                own[row, p] = own_choice[row, p]
                flat[row, p] = flat_choice is not None
                break
        else:
            return None
    if flat.any():  # the rows of each kind together, as the subject computed them
        both = gold(own, flat)
        for row, p in zip(*np.nonzero(judged), strict=True):
            if not compare(cached[row, p], both[row, p], dtype=inst.dtype).passed:
                return None
    # a row filled because its mask kept nothing sees no key
    found = classify(seen & ~flat[..., None], spec, judged, key_padding, flat, ranges, own & ~flat)
    if found is not None:
        # the oracle attending the keys measured gave the cached output: a reproduction, as a
        # cache hypothesis's fit is (one on rows whose mask kept nothing is degenerate)
        fit: dict[str, Any] = {"reproduced_by": found[0], "reproduced_at": inst.dtype}
        if flat[judged].all():
            fit["degenerate_fit"] = found[0]
        tck.note(fit)
    return found
