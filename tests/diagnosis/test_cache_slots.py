"""Cache-only bugs named by slot and mask (conformance/diagnosis/decoding.py ``cache_slots``):
a static cache written one slot too far, the causal mask skipped once the cache is non-empty.
The slot model gives the spec's mask when nothing is wrong, and each bug, in a mutant
written independently, is named by its class's code by the cached-decoding checks."""

from __future__ import annotations

import numpy as np
import pytest

from tck.adapters import load_adapter
from tck.conformance.checks import test_decoder
from tck.conformance.diagnosis.decoding import (
    EMPTY_SLOT,
    buffer_slots,
    cache_orders,
    cache_slots,
    schedule,
)
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import oracle


@pytest.mark.parametrize(("prefill", "chunk"), [(1, 1), (4, 1), (1, 2), (3, 4)])
@pytest.mark.parametrize("window", [None, 3])
def test_the_slots_of_a_right_cache_are_the_spec_s_mask(prefill: int, chunk: int, window) -> None:  # type: ignore[no-untyped-def]
    length = 11
    pad = np.ones((2, length), bool)
    pad[1, :4] = False  # a left-padded row
    keep, empty = cache_slots(2, length, schedule(length, prefill, chunk), pad, window=window)
    causal = oracle.causal_keep_mask(length, length)
    if window is not None:
        causal = causal & oracle.sliding_window_keep(length, length, window)
    np.testing.assert_array_equal(keep, causal[None, None] & pad[:, None, None, :])
    assert not empty.any()


def test_a_cache_written_one_slot_late_hides_the_own_key_behind_an_empty_slot() -> None:
    length = 6
    keep, empty = cache_slots(1, length, schedule(length, 2, 1), None, write_offset=1)
    strict = np.tril(np.ones((length, length), bool), -1)  # tokens before the query only
    np.testing.assert_array_equal(keep[0, 0], strict)
    np.testing.assert_array_equal(empty[0, 0], np.ones(length, int))  # slot 0, never written


def test_the_causal_mask_skipped_in_steps_shows_only_in_chunks() -> None:
    length = 7
    one, _ = cache_slots(1, length, schedule(length, 3, 1), None, causal_in_steps=False)
    np.testing.assert_array_equal(one[0, 0], oracle.causal_keep_mask(length, length))
    chunked, _ = cache_slots(1, length, schedule(length, 3, 2), None, causal_in_steps=False)
    assert chunked[0, 0, 3, 4]  # token 3 sees token 4, the later one of its chunk
    assert not chunked[0, 0, 1, 2]  # the prefill keeps its mask


@pytest.mark.parametrize(
    ("mutant", "schedules", "code"),
    [
        ("cache_slot_late", ((1, 1), (4, 1)), "cache.causal_off_by_one"),
        ("cache_steps_unmasked", ((1, 2), (3, 4)), "mask.causal_leak"),
        ("cache_values_prepended", ((1, 1), (4, 1)), "cache.keys_prepended"),
        ("cache_keys_slot_zero", ((1, 1), (4, 1)), "cache.ignored"),
        ("cache_values_hold_keys", ((1, 1), (4, 1)), "attention.value_uses_key_projection"),
        ("cache_whole_buffer_read", ((1, 1), (4, 1)), "cache.unwritten_slots_read"),
    ],
)
def test_a_cache_only_bug_is_named_by_its_class(mutant: str, schedules, code: str) -> None:  # type: ignore[no-untyped-def]
    adapter = load_adapter(f"mutants.{mutant}")
    subject = adapter.subjects()[0]
    tck = Harness(adapter, subject, seed=0)
    inst = test_decoder.instance(tck)
    inputs = test_decoder.unpadded(tck, inst, 2, 11, seed=500)
    np.testing.assert_allclose(tck.run(inst, inputs), tck.gold(inst, inputs), atol=1e-9)
    with pytest.raises(CheckFailure) as failure:
        test_decoder.check_cache(tck, inst, inputs, "unpadded rows", schedules)
    assert failure.value.code == code, failure.value.message


def test_cache_orders_of_a_right_cache_are_the_spec_s() -> None:
    length, ranges = 8, schedule(8, 3, 2)
    key_at, value_at, keep = cache_orders(1, length, ranges, None)
    np.testing.assert_array_equal(key_at, value_at)
    for row in range(length):  # every visible slot holds its own token
        seen = np.flatnonzero(keep[0, 0, row])
        np.testing.assert_array_equal(key_at[row, seen], np.arange(row + 1))


def test_values_prepended_pair_a_key_with_another_token_s_value() -> None:
    key_at, value_at, _ = cache_orders(1, 5, schedule(5, 2, 1), None, values="prepend")
    np.testing.assert_array_equal(key_at[4], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(value_at[4], [4, 3, 2, 0, 1])


def test_keys_written_at_the_start_overwrite_the_first_slots() -> None:
    """``cache_k[:, 0:n] = k``: each call's keys land in slots 0..n-1; the slots read for its
    own tokens hold zeros (never written) or an older call's keys; the values stay right."""
    key_at, value_at, _ = cache_orders(1, 6, schedule(6, 3, 1), None, keys="start")
    empty = EMPTY_SLOT
    np.testing.assert_array_equal(key_at[2, :3], [0, 1, 2])  # the prefill is right
    np.testing.assert_array_equal(key_at[3, :4], [3, 1, 2, empty])
    np.testing.assert_array_equal(key_at[5, :6], [5, 1, 2, empty, empty, empty])
    np.testing.assert_array_equal(value_at[5, :6], np.arange(6))
    chunked, _, _ = cache_orders(1, 6, schedule(6, 2, 2), None, keys="start")
    np.testing.assert_array_equal(chunked[5, :6], [4, 5, empty, empty, empty, empty])


def test_values_written_with_keys_number_the_keys_past_the_tokens() -> None:
    key_at, value_at, _ = cache_orders(1, 4, schedule(4, 2, 1), None, values="keys")
    np.testing.assert_array_equal(key_at[3], [0, 1, 2, 3])
    np.testing.assert_array_equal(value_at[3], [4, 5, 6, 7])  # token t's key is t + length


def test_a_whole_buffer_shows_its_unwritten_slots_to_unmasked_queries() -> None:
    """A buffer of 8 slots: one-token calls see every written key and the 8 - filled zeros;
    a masked chunk sees its triangle; a chunk masked bottom-right over the buffer sees its
    own later tokens and the zeros before its place."""
    ranges = [(0, 3), (3, 4), (4, 6)]
    keep, empty = buffer_slots(1, 6, ranges, 8, chunks="masked")
    np.testing.assert_array_equal(keep[0, 0, :3], np.tril(np.ones((3, 6), bool)))
    np.testing.assert_array_equal(empty[0, 0], [0, 0, 0, 4, 0, 0])
    assert keep[0, 0, 3, :4].all() and not keep[0, 0, 3, 4:].any()
    keep, empty = buffer_slots(1, 6, ranges, 8, chunks="bottom_right")
    assert keep[0, 0, 0].sum() == 3  # the prefill's first query sees the later two
    np.testing.assert_array_equal(empty[0, 0], [3, 4, 5, 4, 1, 2])


def test_swapped_reads_number_the_other_tensor_past_the_tokens() -> None:
    """A (key, value) pair unpacked in the other order: a slot numbered token + length holds
    that token's other tensor. Stored as used, the cached part flips at every call; read
    alone, every call after the prefill sees the cached part flipped once."""
    length, ranges = 5, schedule(5, 2, 1)  # prefill 0..1, then 2, 3, 4
    stored, _, _ = cache_orders(1, length, ranges, None, swapped="stored")
    read, read_values, _ = cache_orders(1, length, ranges, None, swapped="read")
    np.testing.assert_array_equal(stored[1, :2], [0, 1])  # the prefill is right
    np.testing.assert_array_equal(stored[2, :3], [5, 6, 2])  # values 0, 1 as keys
    np.testing.assert_array_equal(stored[3, :4], [0, 1, 7, 3])  # flipped back, 2 flipped
    np.testing.assert_array_equal(read[4, :5], [5, 6, 7, 8, 4])
    np.testing.assert_array_equal(read_values[4, :5], [5, 6, 7, 8, 4])
