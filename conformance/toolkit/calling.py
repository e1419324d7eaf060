"""Calling an adapter so that nothing it does besides its output changes a verdict.

The adapter gets private copies of the inputs and the check a private copy of the output,
at every entry point that takes or gives arrays (run, step, grad, load: ``GuardedAdapter``):
an adapter that writes into its inputs or reuses its output buffer changes no verdict;
either is recorded as a side effect (``adapter.input_modified``, ``adapter.output_reused``),
which the plugin reports beside the verdict. An output that is not a floating array of at
least one dimension fails the check (SPEC.md §10.6).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .globalstate import AdapterWorld, GlobalState
from .recorder import Recorder
from .results import CheckFailure


def guarded_run(
    run: Callable[[Any, dict[str, Any]], Any],
    handle: Any,
    inputs: Mapping[str, np.ndarray],
    record: Recorder,
    outputs: list[np.ndarray],
) -> np.ndarray:
    """``run(handle, copies of inputs)``, checked; ``outputs`` holds the last few outputs
    as returned (updated here), to find a reused buffer."""
    return guarded_call("run", lambda private: run(handle, private), inputs, record, outputs)


def guarded_call(
    entry: str,
    call: Callable[[dict[str, Any]], Any],
    inputs: Mapping[str, Any],
    record: Recorder,
    outputs: list[np.ndarray],
) -> np.ndarray:
    """``call(copies of inputs)`` for the adapter entry point ``entry`` (run, step),
    its output checked and copied; a changed input or a reused output is recorded."""
    out = _watch_inputs(entry, call, inputs, record)
    if not isinstance(out, np.ndarray):
        raise CheckFailure(
            "adapter.output_not_array",
            f"{entry}() returned {type(out).__name__}, not a numpy array",
        )
    if not np.issubdtype(out.dtype, np.floating):
        raise CheckFailure("adapter.output_not_float", f"{entry}() returned dtype {out.dtype}")
    if out.ndim == 0:
        raise CheckFailure(
            "shape.wrong_output_shape",
            f"{entry}() returned a 0-d array (a scalar), not the spec's output shape "
            "(SPEC.md §10.6)",
            {"shape": []},
        )
    return _private_output(entry, out, record, outputs)


def _watch_inputs(
    entry: str, call: Callable[[dict[str, Any]], Any], inputs: Mapping[str, Any], record: Recorder
) -> Any:
    private = {k: private_copy(v) for k, v in inputs.items()}
    out = call(private)
    changed = [k for k in inputs if k not in private or not _same(private[k], inputs[k])]
    if changed:
        record.side_effects["adapter.input_modified"] = (
            f"{entry}() changed its input(s) {', '.join(map(repr, changed))} in place; an "
            "implementation must leave its inputs as they were (the checks compared "
            "with unchanged copies)."
        )
    return out


def _private_output(
    entry: str, out: np.ndarray, record: Recorder, outputs: list[np.ndarray]
) -> np.ndarray:
    if any(out is old or _overlap(out, old) for old in outputs):
        record.side_effects["adapter.output_reused"] = (
            f"{entry}() returned memory it had returned before (a reused output buffer): a "
            "caller's earlier output changes under it; return a fresh array per call "
            "(the checks compared private copies)."
        )
    outputs[:] = [*outputs[-3:], out]  # the last few: a reused one is among them
    return np.array(out, copy=True)


class GuardedAdapter:
    """The adapter as the checks see it: every entry point that takes or gives arrays gets
    the protection ``run`` has (``Harness.run``). ``step`` and ``grad`` get private copies
    of their inputs (a KV-cache's ``key_padding``, a cotangent) and give the check private
    copies of their outputs; ``load`` gets private copies of the parameters (the oracle
    keeps using the originals). A changed input or a reused output buffer is recorded
    (``adapter.input_modified``, ``adapter.output_reused``) and changes no verdict. Every
    other attribute is the adapter's own; an entry point the adapter lacks stays absent
    (``getattr(adapter, "grad", None)`` is None)."""

    def __init__(self, adapter: Any, record: Recorder, world: AdapterWorld | None = None):
        self.__dict__["_adapter"] = adapter
        self.__dict__["_record"] = record
        self.__dict__["_outputs"] = {"step": [], "grad": []}
        # every call runs under the adapter's own numpy and torch settings (globalstate)
        self.__dict__["_world"] = world or AdapterWorld(GlobalState.capture())

    @property
    def unguarded(self) -> Any:
        return self._adapter

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._adapter, name)
        if not callable(value) or isinstance(value, type):
            return value
        guard = {"step": self._step, "grad": self._grad, "load": self._load}.get(name)
        return self._in_world(value if guard is None else guard(value))

    def _in_world(self, method: Callable[..., Any]) -> Callable[..., Any]:
        def in_world(*args: Any, **kwargs: Any) -> Any:
            with self._world.adapter():
                return method(*args, **kwargs)

        in_world.__name__ = getattr(method, "__name__", "call")
        return in_world

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._adapter, name, value)

    def _step(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(handle: Any, inputs: Mapping[str, Any], cache: Any) -> Any:
            # the cache is the adapter's own state, handed back as it was returned
            result = _watch_inputs(
                "step", lambda private: step(handle, private, cache), inputs, self._record
            )
            if not isinstance(result, tuple) or len(result) != 2:
                raise CheckFailure(
                    "adapter.output_not_array",
                    f"step() returned {type(result).__name__}, not (output, cache)",
                )
            out, cache = result
            out = guarded_call("step", lambda _: out, {}, self._record, self._outputs["step"])
            return out, cache

        return guarded

    def _grad(self, grad: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(handle: Any, inputs: Mapping[str, Any], cotangent: Any) -> Any:
            both = {**inputs, _COTANGENT: cotangent}

            def call(private: dict[str, Any]) -> Any:
                rest = {k: v for k, v in private.items() if k != _COTANGENT}
                return grad(handle, rest, private[_COTANGENT])

            grads = _watch_inputs("grad", call, both, self._record)
            if not isinstance(grads, Mapping):
                return grads  # the gradient checks say what is wrong with it
            outputs = self._outputs["grad"]
            private = {}
            # A plain dict nobody else holds (the adapter kept no reference: only this frame's
            # name and getrefcount's argument) is ours: each array leaves it as its copy is
            # made, so the adapter's gradients and the copies are never both held whole (a
            # checkpoint's gradients are its float64 size: GPT-2 small, 1 GB each). A dict the
            # adapter keeps and refills is left as it is.
            own = type(grads) is dict and sys.getrefcount(grads) <= 2
            # Each gradient is held against the earlier calls' only: two parameters of one
            # call whose gradients share memory are one tensor in the implementation (layers
            # cloned by reference, tied weights), which the parameter checks name, not a
            # reused output buffer.
            earlier = list(outputs)
            for name in list(grads):
                value = grads.pop(name) if own else grads[name]
                if isinstance(value, np.ndarray):
                    seen = list(earlier)
                    value_copy = _private_output("grad", value, self._record, seen)
                    outputs[:] = [*outputs[-3:], value]
                    value = value_copy
                private[name] = value
            return private

        return guarded

    def _load(self, load: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(handle: Any, params: Mapping[str, Any]) -> Any:
            return _watch_inputs(
                "load", lambda private: load(handle, private), params, self._record
            )

        return guarded


_COTANGENT = "(cotangent)"  # grad's third argument, watched with its inputs


def private_copy(value: Any) -> Any:
    """A copy of an input the adapter may do anything with."""
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except Exception:
        return True


def _same(a: Any, b: Any) -> bool:
    """Bit for bit the same array (NaN included), or the same other value."""
    if isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.tobytes() == b.tobytes()
        )
    return a is b
