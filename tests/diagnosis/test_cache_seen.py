"""Caches of another design measured from outside (conformance/diagnosis/cache_seen.py,
cache_positions.py; SPEC.md §11.6, §11.7, §11.9, §4.5): which keys each cached query attends,
read by changing each earlier token in turn, and the positions a cached call gives its
tokens, solved for. The mutants are a ring cache of window - 1 slots (a design the kit's own
caches do not have) and a GPT reading its past length off the layer tuple."""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_decoder
from tck.conformance.diagnosis.cache_positions import describe
from tck.conformance.diagnosis.cache_seen import classify, measured_cause
from tck.conformance.diagnosis.decoding import cache_slots, schedule
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure

L = 8


def _spec(window: int | None, key_padding: np.ndarray | None = None, batch: int = 1):
    ranges = schedule(L, 1, 1)
    return cache_slots(batch, L, ranges, key_padding, window=window)[0][:, 0]


def _judged(batch: int = 1, key_padding: np.ndarray | None = None) -> np.ndarray:
    judged = np.zeros((batch, L), bool)
    judged[:, 1:] = True
    return judged if key_padding is None else judged & key_padding


def _without_own(keep: np.ndarray) -> np.ndarray:
    return keep & ~np.eye(L, dtype=bool)[None]


def test_the_spec_itself_names_nothing() -> None:
    spec = _spec(4)
    assert classify(_without_own(spec), spec, _judged(), None) is None


@pytest.mark.parametrize("seen_window", [2, 3, 5])
def test_a_window_of_another_width_in_steps_is_the_window_class(seen_window: int) -> None:
    spec = _spec(4)
    seen = _without_own(_spec(seen_window))
    found = classify(seen, spec, _judged(), None)
    assert found is not None and found[0] == "mask.sliding_window_wrong", found


def test_the_oldest_keys_seen_and_the_newest_missed_is_top_left() -> None:
    spec = _spec(None)
    seen = np.zeros_like(spec)
    for p in range(2, L):
        seen[0, p, : p // 2] = True  # the first keys of the cache, not the ones before p
    found = classify(seen, spec, _judged(), None)
    assert found is not None and found[0] == "cache.causal_top_left", found


def test_pads_seen_in_padded_rows_only_is_padding_dropped() -> None:
    key_padding = np.ones((2, L), bool)
    key_padding[1, :3] = False  # row 1 left-padded by 3
    spec = _spec(None, key_padding, batch=2)
    seen = _without_own(_spec(None, None, batch=2))  # every earlier key, pads included
    found = classify(seen, spec, _judged(2, key_padding), key_padding)
    assert found is not None and found[0] == "cache.padding_dropped_in_steps", found


def test_real_keys_lost_in_padded_rows_only_is_padding_misaligned() -> None:
    key_padding = np.ones((2, L), bool)
    key_padding[1, :3] = False
    spec = _spec(None, key_padding, batch=2)
    seen = _without_own(spec).copy()
    seen[1, 5:, 3] = False  # the first real key of row 1 hidden as if it were a pad
    found = classify(seen, spec, _judged(2, key_padding), key_padding)
    assert found is not None and found[0] == "cache.padding_misaligned", found


def test_the_same_loss_in_every_row_is_not_a_padding_class() -> None:
    key_padding = np.ones((2, L), bool)
    key_padding[1, :3] = False
    spec = _spec(None, key_padding, batch=2)
    seen = _without_own(spec).copy()
    seen[:, 6:, 4] = False  # scattered loss in both rows: neither padding nor a window
    assert classify(seen, spec, _judged(2, key_padding), key_padding) is None


def test_a_window_that_narrows_as_decoding_goes_on_is_an_offset() -> None:
    """Keys numbered from the first slot of a buffer that drops its oldest tokens: each call
    sees fewer of the window's keys, where a cache too small sees the same number at every
    call, and so does one that keeps the previous call only (no window declared)."""
    spec = _spec(4)
    seen = _without_own(spec).copy()
    for p in range(4, L):
        seen[0, p, : 2 * p - 6] = False  # the oldest 1, 2, 3 and 3 keys of each window lost
    found = classify(seen, spec, _judged(), None, ranges=schedule(L, 1, 1))
    assert found is not None and found[0] == "cache.causal_offset_wrong", found
    narrower = _without_own(_spec(3))  # one key fewer at every call
    found = classify(narrower, spec, _judged(), None, ranges=schedule(L, 1, 1))
    assert found is not None and found[0] == "mask.sliding_window_wrong", found
    last_call = _without_own(_spec(2))  # the previous token only, whatever the window
    found = classify(last_call, _spec(None), _judged(), None, ranges=schedule(L, 1, 1))
    assert found is None or found[0] != "cache.causal_offset_wrong", found


def test_a_query_whose_mask_kept_nothing_sees_no_key() -> None:
    """A row filled because its mask kept no key, not even its own: it lost every key,
    the newest included (top-left), and its own key counts as lost."""
    spec = _spec(None)
    flat = np.zeros((1, L), bool)
    flat[0, 4:] = True  # the top-left mask of a full cache: nothing left
    seen = np.zeros_like(spec)
    for p in range(1, 4):
        seen[0, p, 0] = True  # query p (numbered 0 in its call) sees key 0 only
    own = ~flat
    own[0, 1:4] = False
    found = classify(seen, spec, _judged(), None, flat, schedule(L, 1, 1), own)
    assert found is not None and found[0] == "cache.causal_top_left", found


def test_an_own_key_lost_in_padded_rows_only_is_padding_misaligned() -> None:
    key_padding = np.ones((2, L), bool)
    key_padding[1, :3] = False
    spec = _spec(None, key_padding, batch=2)
    own = np.ones((2, L), bool)
    own[1, 3:] = False  # row 1's decoded tokens flagged as padding: their own keys hidden
    found = classify(_without_own(spec), spec, _judged(2, key_padding), key_padding, own=own)
    assert found is not None and found[0] == "cache.padding_misaligned", found


def test_solved_positions_in_words() -> None:
    spec = np.arange(6)[None]
    ranges = schedule(6, 2, 1)
    constant = spec.copy()
    constant[0, 2:] = 16  # every call from 16: a length read from a fixed axis
    assert "from 16" in describe(constant, spec, ranges)
    shifted = spec + np.array([[0, 0, 1, 1, 1, 1]])
    assert "+1" in describe(shifted, spec, ranges)
    assert describe(spec, spec, ranges) is None


def _fails_with(mutant: str, component: str, check: str) -> str:
    loaded = load_adapter(f"mutants.{mutant}")
    subject = next(s for s in loaded.subjects() if s.component == component)
    with pytest.raises(CheckFailure) as failure:
        getattr(test_decoder, check)(Harness(loaded, subject, seed=0))
    return failure.value.code


@pytest.mark.parametrize(
    ("mutant", "check", "code"),
    [
        ("ring_cache_too_small", "test_kv_cache", "mask.sliding_window_wrong"),
        ("ring_cache_top_left", "test_kv_cache_chunked", "cache.causal_top_left"),
        ("ring_cache_padding_by_place", "test_kv_cache_left_padded", "cache.padding_misaligned"),
        (
            "ring_cache_padding_dropped",
            "test_kv_cache_left_padded",
            "cache.padding_dropped_in_steps",
        ),
        ("ring_cache_keys_by_place", "test_kv_cache", "cache.causal_offset_wrong"),
        # a finite fill: a query that keeps no key weighs every key it read equally (§4.4)
        ("ring_cache_min_fill_top_left", "test_kv_cache", "cache.causal_top_left"),
        (
            "ring_cache_min_fill_padding_from_start",
            "test_kv_cache_left_padded",
            "cache.padding_misaligned",
        ),
    ],
)
def test_ring_cache_bugs_are_named_by_the_keys_they_attend(
    mutant: str, check: str, code: str
) -> None:
    assert _fails_with(mutant, "causal_self_attention", check) == code


def test_a_past_length_read_off_the_layer_tuple_is_solved() -> None:
    code = _fails_with("lm_past_length_from_layers", "causal_lm", "test_kv_cache_own_positions")
    assert code == "cache.position_offset_wrong"


def test_a_right_cache_measures_nothing() -> None:
    loaded = load_adapter("reference")
    subject = next(s for s in loaded.subjects() if s.component == "causal_self_attention")
    tck = Harness(loaded, subject, seed=0)
    inst = test_decoder.instance(tck)
    inputs = test_decoder.left_padded(tck, inst, (11, 6), seed=506)
    ranges = schedule(11, 1, 2)
    judged = np.asarray(inputs["key_padding"], bool).copy()
    judged[:, :1] = False
    assert measured_cause(tck, inst, inputs, ranges, judged) is None


def test_layers_extending_one_buffer_are_named_in_a_model_built_from_decoder_layers() -> None:
    """The one-layer build sets every layer-count field (this model reads n_decoder_layers)."""
    assert _fails_with("lm_layers_one_buffer", "causal_lm", "test_kv_cache") == (
        "cache.layers_share_pool"
    )
