"""A decoding step's error read for what it says about the cache (``test_decoder``): two
sizes of one axis, the call's tokens against those and the cache's, are keys counted
without the cache where a mask or the positions count them with it (``cache.ignored``)."""

from __future__ import annotations

import pytest

from tck.conformance.checks.test_decoder import keys_of_the_call_alone

BROADCAST = (
    "The size of tensor a ({}) must match the size of tensor b ({}) at non-singleton dimension 3"
)


@pytest.mark.parametrize(
    ("message", "chunk", "found"),
    [
        # transformers' BART/OPT/BioGPT attention, its mask built for the cached keys too
        (
            "Attention mask should be of size (2, 1, 1, 1), but is torch.Size([2, 1, 1, 5])",
            1,
            (1, 5),
        ),
        # torch's broadcasting error, a mask (B, 1, 1, past + n) against the scores' n keys
        (
            BROADCAST.format(1, 7),
            1,
            (1, 7),
        ),
        (
            BROADCAST.format(3, 7),
            3,
            (3, 7),
        ),
        # sizes that are not the call's against the call's and the cache's
        (
            BROADCAST.format(6, 5),
            1,
            None,
        ),
        (
            BROADCAST.format(1, 3),
            1,
            None,
        ),
        (
            BROADCAST.format(1, 12),
            1,
            None,
        ),
        # shapes that differ in more than their last axis, and a concatenation's words
        ("expected (2, 4, 1, 1), got (2, 1, 1, 5)", 1, None),
        (
            "Sizes of tensors must match except in dimension 1. Expected size 4 but got size 1",
            1,
            None,
        ),
    ],
)
def test_keys_of_the_call_alone(message: str, chunk: int, found: tuple[int, int] | None) -> None:
    # a prefill of 4 tokens of a sequence of 11
    assert keys_of_the_call_alone(message, 4, chunk, 11) == found
