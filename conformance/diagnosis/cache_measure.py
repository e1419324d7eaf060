"""Cache addressing, measured (SPEC.md §11.6): when cached decoding disagrees with the full
forward and no hypothesis of the cache's layout reproduces it, measure what the cache holds.

- **The layers share one cache** (``cache.layers_share_pool``): the same subject built with
  one layer decodes right with its cache, and with its own number of layers does not. Every
  layer writing its keys into one pool (a layer index never passed, so all layers use layer
  0's pages) or reading another layer's entries is right for a one-layer model only.
- **Slots overlap** (``cache.slots_overlap``): an earlier token that moves the last query's
  output in the full forward does not move it after cached decoding, while other earlier
  tokens do: its cache entry was overwritten by a later token's (a paged cache whose slot is
  ``page + offset`` for ``page * page_size + offset``). If no earlier token moves it, the
  cache is not read at all, another class (``cache.ignored``).

Both measure the subject against itself (cached against full, one layer against several),
so they hold for any cache layout the subject chooses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tck.adapters import Unsupported
from tck.reference.tolerance import compare

from .decoding import decode, token_input

Arrays = Mapping[str, np.ndarray]
# (inputs) -> the cached outputs (B, L, ...) with one token per call after a prefill of one
Decoded = Callable[[Any, Arrays], np.ndarray]


def _cached(tck: Any, inst: Any, inputs: Arrays) -> np.ndarray:
    outs, _ = decode(tck.adapter, inst.handle, tck.component, inputs, 1, 1)
    return np.concatenate(outs, axis=1)


def _agrees(inst: Any, test: np.ndarray, truth: np.ndarray) -> bool:
    return compare(test, truth, dtype=inst.dtype).passed


def stacked(inst: Any) -> bool:
    """Whether the instance has several layers (parameters under ``layers.1.``)."""
    return inst.params is not None and any(k.startswith("layers.1.") for k in inst.params)


def one_layer(tck: Any, inst: Any) -> Any | None:
    """The subject built again with one layer (every layer-count field of the config set to
    1: an implementation may read either, a decoder-only model built from
    n_decoder_layers as a seq2seq decoder is), or None where the subject ignores the layer
    count or refuses the build."""
    counts = {
        f.name: 1
        for f in dataclasses.fields(inst.config)
        if f.name.startswith("n_") and f.name.endswith("layers")
    }
    try:
        one = tck.instance(dataclasses.replace(inst.config, **counts), dtype=inst.dtype)
    except Exception:  # a build the subject refuses measures nothing
        return None
    return None if stacked(one) else one


def layers_share_cache(tck: Any, inst: Any, inputs: Arrays) -> tuple[str, str] | None:
    """``cache.layers_share_pool`` when a one-layer build of the subject decodes ``inputs``
    right and this one (several layers) does not."""
    if not stacked(inst):
        return None
    layers = len({k.split(".")[1] for k in inst.params if k.startswith("layers.")})
    one = one_layer(tck, inst)
    if one is None:
        return None
    try:
        if not _agrees(one, _cached(tck, one, inputs), tck.run(one, inputs)):
            return None
    except Exception:  # a call the subject refuses measures nothing
        return None
    try:
        if _agrees(inst, _cached(tck, inst, inputs), tck.run(inst, inputs)):
            return None
    except Unsupported:
        return None
    except Exception:  # a step that raises is a decode that fails
        pass  # the subject's own decoding fails where its one-layer build does not
    return (
        "cache.layers_share_pool",
        f"built with one layer the subject decodes with its cache as its full forward does; "
        f"with {layers} layers it does not: the layers' caches interfere (every layer writes "
        "and reads one cache pool, as when the layer index never reaches the cache and all "
        "layers use layer 0's pages; SPEC.md §11.6)",
    )


def _perturbed(inputs: Arrays, name: str, row: int, t: int, vocab: int) -> dict[str, np.ndarray]:
    changed = {k: np.array(v, copy=True) for k, v in inputs.items()}
    tokens = changed[name]
    if np.issubdtype(tokens.dtype, np.integer):
        tokens[row, t] = (int(tokens[row, t]) + 1 + vocab // 2) % vocab or 1
    else:
        tokens[row, t] = tokens[row, t] + 3.0 * np.sign(tokens[row, t] + 0.5)
    return changed


def overwritten_slots(tck: Any, inst: Any, inputs: Arrays) -> tuple[str, str] | None:
    """``cache.slots_overlap`` when some earlier tokens (not all) stop influencing the last
    query's output after cached decoding, while they influence it in the full forward."""
    name = token_input(tck.component)
    tokens = np.asarray(inputs[name])
    length = tokens.shape[1]
    vocab = int(getattr(inst.config, "vocab_size", 2) or 2)
    try:
        base_cached = _cached(tck, inst, inputs)
        base_full = tck.run(inst, inputs)
    except Exception:
        return None
    last = length - 1
    lost, kept = [], []
    for t in range(last):
        changed = _perturbed(inputs, name, 0, t, vocab)
        try:
            cached = _cached(tck, inst, changed)
            full = tck.run(inst, changed)
        except Exception:
            return None
        if _agrees(inst, full[:1, last], base_full[:1, last]):
            continue  # the spec's own output does not move: no evidence either way
        (lost if _agrees(inst, cached[:1, last], base_cached[:1, last]) else kept).append(t)
    if not lost or not kept:
        return None
    shown = ", ".join(str(t) for t in lost)
    return (
        "cache.slots_overlap",
        f"after cached decoding the last token's output does not depend on token(s) {shown} "
        f"(it does in the full forward, and on {len(kept)} other earlier token(s) in both): "
        "their cache entries were overwritten by later tokens', the cache's slot addresses "
        "overlap (a paged cache's slot computed as page + offset instead of page * page_size "
        "+ offset; SPEC.md §11.6)",
    )


def measure_cache(tck: Any, inst: Any, inputs: Arrays) -> tuple[str, str] | None:
    """The cache class measured on ``inputs`` (unpadded rows), or None."""
    if inst.params is None:
        return None
    try:
        return layers_share_cache(tck, inst, inputs) or overwritten_slots(tck, inst, inputs)
    except Unsupported:
        return None
