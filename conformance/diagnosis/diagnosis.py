"""Named exceptions: the bug behind an exception. The ranking of a run's
failures by root cause is ``tck.reports.causes``; the codes are ``tck.reference.codes``.

Some implementation bugs surface as exceptions, not as wrong numbers; ``named_exception``
gives those a code and plain words instead of a bare ``adapter.exception``:

- a fill value that the dtype cannot hold (``masked_fill(mask, -1e9)`` in float16 raises
  "value cannot be converted to type c10::Half without overflow"):
  ``numerics.fill_value_overflow``;
- hypothesis' ``FlakyFailure`` (an example failed, then passed when replayed): the subject
  carries state from one call to the next, ``state.leaks_between_calls``.
"""

from __future__ import annotations

import re

from tck.reference.codes import code
from tck.reports.text import safe_str

_OVERFLOW = re.compile(r"value cannot be converted to type (\S+) without overflow")


def named_exception(error: BaseException, dtype: str | None = None) -> tuple[str, str] | None:
    """(code, message) for an exception that names an implementation bug, else None."""
    text = f"{type(error).__name__}: {safe_str(error)}"
    match = _OVERFLOW.search(text)
    if match:
        where = f" in {dtype}" if dtype else ""
        return (
            code("numerics.fill_value_overflow"),
            f"a fill value does not fit the dtype{where}: a constant such as masked_fill(mask, "
            "-1e9) or -1e4 is beyond the range of the tensor's type (float16 holds +-65504), "
            f"so torch refuses it ({match.group(0)}). Fill with torch.finfo(dtype).min or "
            f"-inf instead. [{text[:300]}]",
        )
    flaky = _flaky(error)
    if flaky is not None:
        inner = "; ".join(f"{type(e).__name__}: {safe_str(e)[:200]}" for e in flaky) or "-"
        return (
            code("state.leaks_between_calls"),
            "the same example failed and then passed when hypothesis replayed it "
            "(FlakyFailure): the subject carries state from one call to the next (a cached "
            "mask or table, a buffer updated in forward, a counter, an RNG that is not "
            f"reset), so its output depends on what it was called with before. First run: "
            f"{inner}",
        )
    return None


def _flaky(error: BaseException) -> list[BaseException] | None:
    try:
        from hypothesis.errors import Flaky
    except ImportError:  # pragma: no cover - hypothesis is a dependency
        return None
    if not isinstance(error, Flaky):
        return None
    return list(getattr(error, "exceptions", ()) or ())
