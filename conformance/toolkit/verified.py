"""Nothing unmeasured passes (SPEC.md §10.11): when an oracle check counts as a measurement.

An oracle-equality check that compared no call of more than one token (a length-1 call
cannot show a wrong mask, a wrong scale across positions or a causal leak), or, on a causal
subject, no causal call without padding, did not measure the subject: it is reported as
``unverified``, not as a pass.

The facts of each comparison are recorded with it (``Harness.calls``): ``call_facts`` says
whether a call was causal and whether it carried padding, ``unverified_reason`` judges a
check's calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tck.reference import Config, record

# The checks whose pass vouches for oracle equality.
ORACLE_CHECKS = ("equality.oracle",)
_MASKS = ("keep_mask", "key_padding", "attn_mask", "memory_key_padding")


def call_facts(
    component: str, inputs: Mapping[str, np.ndarray], config: Config | None = None
) -> dict[str, bool]:
    """``causal``: the call applied a causal mask; ``padded``: some position was masked out
    (a keep-mask with a False, or a padding id in a seq2seq call)."""
    rec = record(component)
    causal = rec.has("causal_target") or bool(np.asarray(inputs.get("causal", False)))
    padded = any(k in inputs and not np.asarray(inputs[k]).all() for k in _MASKS)
    pad = getattr(config, "padding_idx", None)
    if pad is not None:  # token inputs hold the padding id past each row's length (§8.1)
        padded = padded or any(
            bool((np.asarray(inputs[i.name]) == pad).any())
            for i in rec.inputs
            if i.kind == "tokens" and i.name in inputs
        )
    return {"causal": causal, "padded": padded}


def unverified_reason(
    component: str, calls: Iterable[Mapping[str, Any]], unmeasured: Iterable[str] = ()
) -> str | None:
    """Why the passed comparisons ``calls`` measured nothing, or None when they did;
    ``unmeasured``: the declared conventions the check said it could not exercise."""
    left = list(unmeasured)
    if left:
        return "; ".join(left) + " (SPEC.md §10.11)"
    passed = [c for c in calls if c.get("passed")]
    multi = [c for c in passed if c.get("seq_len") is None or c["seq_len"] > 1]
    if not multi:
        lengths = sorted({c.get("seq_len") for c in passed}, key=str)
        return (
            "no oracle comparison ran with more than one token "
            f"({len(passed)} call(s), lengths {lengths or 'none'}): a mask, a scale across "
            "positions or a causal leak cannot show at length 1 (SPEC.md §10.11)"
        )
    causal = record(component).has("causal_target") or any(c.get("causal") for c in passed)
    if causal and not any(c.get("causal") and not c.get("padded") for c in multi):
        return (
            "the subject is causal, and no causal call of more than one token ran without "
            "padding: a causal mask that only works together with a padding mask is not "
            "measured (SPEC.md §10.11)"
        )
    return None
