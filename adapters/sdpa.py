"""SDPA's backends, one at a time: ``F.scaled_dot_product_attention`` (and the torch.nn modules
that call it) pinned to one kernel with ``torch.nn.attention.sdpa_kernel``.

PyTorch picks a backend silently by device, dtype, shapes and masks. Pinned, each is a
subject of its own (``attention[flash]``, ``mha[efficient]``, ...; see
``tck.adapters.torch_nn``), so that a conformance bug of one kernel has a name. A backend
that cannot take an input (flash and an attention mask, a head size it lacks, a dtype)
refuses it: torch raises "No available kernel" (CUDA) or "No viable backend" (CPU) after
warning the reasons. ``pinned`` turns that refusal, and only that, into ``Unsupported``
with torch's reasons, so the check skips and says why; anything the kernel computes is
compared with the oracle like any other output.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .base import Unsupported

# CLI and subject names -> the members of torch.nn.attention.SDPBackend.
SDPA_BACKENDS: dict[str, str] = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}

# What torch raises when the pinned backend cannot run a call (CUDA, then CPU).
REFUSALS: tuple[str, ...] = ("No available kernel", "No viable backend")


def sdpa_backend(name: str) -> Any:
    """The SDPBackend member for a backend name; Unsupported where this torch lacks it."""
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:  # torch < 2.3
        raise Unsupported(f"torch {torch.__version__} has no torch.nn.attention") from None
    member = getattr(SDPBackend, SDPA_BACKENDS[name], None)
    if member is None:
        raise Unsupported(f"torch {torch.__version__} has no SDPBackend.{SDPA_BACKENDS[name]}")
    return member


def refused(error: BaseException) -> bool:
    """Is ``error`` SDPA saying that the pinned backend cannot run this call?"""
    return isinstance(error, RuntimeError) and any(r in str(error) for r in REFUSALS)


@contextmanager
def pinned(backend: str, what: str = "") -> Iterator[None]:
    """Run the block with SDPA pinned to ``backend`` (a key of ``SDPA_BACKENDS``); a refusal
    becomes ``Unsupported`` naming ``what``, the backend and torch's reasons."""
    from torch.nn.attention import sdpa_kernel

    member = sdpa_backend(backend)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(member):
                yield
        except RuntimeError as err:
            if not refused(err):
                raise
            # On CUDA torch warns each kernel's reason ("Flash attention does not support
            # the non-null attn_mask") before it raises.
            reasons = own_reasons(backend, [str(w.message) for w in said])
            why = "; ".join(dict.fromkeys([*reasons, _first_line(str(err))]))
            subject = f"{what}: " if what else ""
            raise Unsupported(
                f"{subject}SDPA's {backend} backend (SDPBackend.{SDPA_BACKENDS[backend]}) "
                f"refuses this input: {why}"
            ) from None


# How torch's CUDA dispatcher heads each kernel's reasons ("cuDNN attention kernel not used
# because:", then one warning per reason), by backend.
_HEADINGS: dict[str, str] = {
    "flash": "Flash attention kernel not used because",
    "efficient": "Memory efficient kernel not used because",
    "cudnn": "cuDNN attention kernel not used because",
}
_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")


def own_reasons(backend: str, warned: list[str]) -> list[str]:
    """The reasons torch warned for ``backend`` alone: on CUDA it warns every kernel's, each
    under a heading, and the other kernels (disabled by the pinning) say nothing about this
    one. Without a heading for it (the CPU, another torch), every reason, as warned."""
    lines = [_TRIGGERED.sub("", _first_line(w)).strip() for w in warned if w.strip()]
    lines = [line for line in lines if line]
    own, heading = [], None
    for line in lines:
        found = next((b for b, h in _HEADINGS.items() if line.startswith(h)), None)
        if found is not None:
            heading = found
        elif heading == backend:
            own.append(line)
    return own or lines


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else "(no message)"
