"""The process-wide settings an adapter can change and the kit's verdicts depend on.

numpy's floating-point error state (``np.seterr``) and torch's globals (default dtype,
grad mode, deterministic algorithms, TF32 and matmul precision, intra-op threads) belong
to whoever set them last. An adapter that calls ``np.seterr(all="raise")`` or
``torch.set_default_dtype(torch.float64)`` must not make the oracle raise or the careful
run compute in another dtype: the checks run under the kit's settings (``KIT``), and every
adapter call swaps in the adapter's own settings (what it last left, starting from the
kit's) and swaps them back out when it returns or raises (``AdapterWorld``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

# numpy's own defaults (numpy.seterr's documentation): the kit's checks are written for them
NUMPY_DEFAULTS = {"divide": "warn", "over": "warn", "under": "ignore", "invalid": "warn"}


@dataclass(frozen=True)
class GlobalState:
    numpy_err: dict[str, str] = field(default_factory=lambda: dict(NUMPY_DEFAULTS))
    torch: tuple[tuple[str, Any], ...] | None = None  # None: torch untouched (not imported)

    @classmethod
    def capture(cls) -> GlobalState:
        return cls(dict(np.geterr()), _torch_capture())

    def apply(self) -> None:
        np.seterr(**self.numpy_err)
        if self.torch is not None:
            _torch_apply(dict(self.torch))


def _torch() -> Any:
    import sys

    return sys.modules.get("torch")  # never imported here: only what the process already has


def _torch_capture() -> tuple[tuple[str, Any], ...] | None:
    torch = _torch()
    if torch is None:
        return None
    return (
        ("default_dtype", torch.get_default_dtype()),
        ("grad_enabled", torch.is_grad_enabled()),
        ("deterministic", torch.are_deterministic_algorithms_enabled()),
        ("deterministic_warn_only", torch.is_deterministic_algorithms_warn_only_enabled()),
        ("cudnn_deterministic", torch.backends.cudnn.deterministic),
        ("cudnn_benchmark", torch.backends.cudnn.benchmark),
        ("cudnn_allow_tf32", torch.backends.cudnn.allow_tf32),
        ("matmul_allow_tf32", torch.backends.cuda.matmul.allow_tf32),
        ("matmul_precision", torch.get_float32_matmul_precision()),
        ("threads", torch.get_num_threads()),
    )


def _torch_apply(state: dict[str, Any]) -> None:
    torch = _torch()
    if torch is None:
        return
    if torch.get_default_dtype() != state["default_dtype"]:
        torch.set_default_dtype(state["default_dtype"])
    torch.set_grad_enabled(state["grad_enabled"])
    if (
        torch.are_deterministic_algorithms_enabled() != state["deterministic"]
        or torch.is_deterministic_algorithms_warn_only_enabled() != state["deterministic_warn_only"]
    ):
        torch.use_deterministic_algorithms(
            state["deterministic"], warn_only=state["deterministic_warn_only"]
        )
    torch.backends.cudnn.deterministic = state["cudnn_deterministic"]
    torch.backends.cudnn.benchmark = state["cudnn_benchmark"]
    torch.backends.cudnn.allow_tf32 = state["cudnn_allow_tf32"]
    torch.backends.cuda.matmul.allow_tf32 = state["matmul_allow_tf32"]
    if torch.get_float32_matmul_precision() != state["matmul_precision"]:
        torch.set_float32_matmul_precision(state["matmul_precision"])
    if torch.get_num_threads() != state["threads"]:  # costly to set: only when it changed
        torch.set_num_threads(state["threads"])


def kit_state(threads: int = 1) -> GlobalState:
    """The settings the checks are written for: numpy's defaults, torch's (float32 default
    dtype, grad mode on, no deterministic mode, no TF32 in matmuls, "highest" precision)
    and ``threads`` (tck run --threads)."""
    state = GlobalState()
    torch = _torch()
    if torch is None:
        return state
    return replace(
        state,
        torch=(
            ("default_dtype", torch.float32),
            ("grad_enabled", True),
            ("deterministic", False),
            ("deterministic_warn_only", False),
            ("cudnn_deterministic", False),
            ("cudnn_benchmark", False),
            ("cudnn_allow_tf32", True),
            ("matmul_allow_tf32", False),
            ("matmul_precision", "highest"),
            ("threads", threads),
        ),
    )


class AdapterWorld:
    """The adapter's settings, kept apart from the kit's: ``with world.adapter():`` around
    each adapter call."""

    def __init__(self, kit: GlobalState):
        self.kit = kit
        self.own = kit  # what the adapter left at the end of its last call

    @contextmanager
    def adapter(self) -> Iterator[None]:
        outer = GlobalState.capture()  # the check's (the kit's), or an enclosing call's
        self.own.apply()
        try:
            yield
        finally:
            self.own = GlobalState.capture()
            outer.apply()

    @contextmanager
    def checks(self) -> Iterator[None]:
        """The kit's settings for the checks, whatever was set before (an adapter's import)."""
        before = GlobalState.capture()
        self.kit.apply()
        try:
            yield
        finally:
            before.apply()
