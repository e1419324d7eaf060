"""The careful (naive) reference, ``ref`` of the tolerance rule (SPEC.md §10.7, §10.10): the torch
reference model of ``tck.reference.model`` under the subject's conventions, in the test
dtype on the subject's device, with the instance's (rounded) parameters; and gradients
(SPEC.md §10.8): the adapter's, the gold (float64 autograd through the torch reference on
the CPU) and the naive reference's in the test dtype. Functions of a check's harness."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tck.adapters import TorchModuleAdapter, Unsupported
from tck.adapters.devices import DEFAULT_DEVICE
from tck.reference.tolerance import round_to

from .calling import private_copy
from .results import CheckFailure

if TYPE_CHECKING:  # the harness imports this module
    from .harness import Harness, Instance


def careful(h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """``ref`` of the tolerance rule, the careful reference (SPEC.md §10.10): the torch
    reference model under the subject's conventions, in ``inst.dtype`` on the subject's
    device, with the instance's (rounded) parameters. Within
    ``computed_in_input_dtype(...)`` it is a hypothesis with those quantities in the input
    dtype (``tck.conformance.diagnosis.precision``)."""
    naive, handle = careful_model(h, inst, inst.dtype, h.device)
    return np.asarray(naive.run(handle, dict(inputs)), dtype=np.float64)


def careful_model(
    h: Harness, inst: Instance, dtype: str, device: str = DEFAULT_DEVICE
) -> tuple[TorchModuleAdapter, Any]:
    key = (id(inst), dtype, device)
    if key not in h.naive_handles:
        from tck.adapters.reference import entry  # the reference adapter's own forwards

        naive = TorchModuleAdapter(
            "naive", [entry(h.component, inst.conventions, name=h.subject.name)]
        )
        handle = naive.build(h.subject, inst.config, seed=inst.seed, dtype=dtype, device=device)
        if inst.params is not None:
            naive.load(handle, inst.params)
        # The instance is kept alive with its handle: id() stays unique while cached.
        h.naive_handles[key] = (naive, handle, inst)
    naive, handle, _ = h.naive_handles[key]
    return naive, handle


def gradients(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
) -> dict[str, np.ndarray]:
    """The adapter's gradients of sum(output * cotangent) (Adapter.grad), as float64."""
    grad = getattr(h.adapter, "grad", None)
    if not callable(grad):
        raise Unsupported(f"{h.adapter.name} does not compute gradients (Adapter.grad)")
    out = grad(
        inst.handle, {k: private_copy(v) for k, v in inputs.items()}, np.array(cotangent, copy=True)
    )
    if not isinstance(out, Mapping):
        raise CheckFailure(
            "adapter.grad_not_a_dict",
            f"grad() returned {type(out).__name__}, not a dict of numpy arrays",
        )
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def gold_gradients(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
) -> dict[str, np.ndarray]:
    """float64 autograd through the torch reference on the same (rounded) values, on the
    CPU (the gold of the gradient checks, as the oracle is of the forward ones)."""
    from .harness import GRADIENT_MEMO  # it builds on this module

    # eager and sdpa twins of a checkpoint ask the same: computed once (OracleMemo)
    asked = {**inputs, "\0cotangent": np.asarray(cotangent)}
    key = GRADIENT_MEMO.key(h.component, asked, inst.params, inst.config, inst.conventions)
    found = GRADIENT_MEMO.get(key, id(h))
    if found is not None:
        return found
    naive, handle = careful_model(h, inst, "float64")
    gold = naive.grad(handle, dict(inputs), cotangent)
    if key is not None:  # a checkpoint's weights: their float64 reference copy goes now
        h.naive_handles.pop((id(inst), "float64", DEFAULT_DEVICE), None)
    return GRADIENT_MEMO.put(key, gold, inst.params, id(h))


def naive_gradients(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
) -> dict[str, np.ndarray]:
    """``ref`` for gradients: autograd through the torch reference in ``inst.dtype`` on the
    subject's device, with the norm statistics in that dtype: §10.8's multipliers were
    measured against that reference, and a careful one's norm gradients are tighter than
    torch.nn's own fused LayerNorm backward meets (measured: 1.3x the bound, encoder,
    float16, seed 4)."""
    from tck.reference.model import computed_in_input_dtype

    naive, handle = careful_model(h, inst, inst.dtype, h.device)
    with computed_in_input_dtype("norm_statistics"):
        grads = naive.grad(handle, dict(inputs), round_to(cotangent, inst.dtype))
    return {k: np.asarray(v, dtype=np.float64) for k, v in grads.items()}
