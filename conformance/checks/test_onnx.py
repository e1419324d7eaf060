"""§10.9 Export to ONNX: the graph a torch subject exports to, held to the same spec.

These checks run with ``tck run --export onnx`` (``--tck-export onnx``), once per torch
subject (on its ``@ort.enable_all`` twin, see tck.adapters.onnx_runtime). Every other
check runs on the exported subjects as on the originals; these add what only an export
has: opsets, dynamic axes, and the runtime's optimisation level.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tck.adapters import AdapterFailure, Unsupported
from tck.adapters.onnx_runtime import OPSETS  # imports onnx only when it exports
from tck.conformance.toolkit.harness import Harness, Instance
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.inputs import Shape

spec = pytest.mark.spec
exported = pytest.mark.exported

# A call with a fully-masked row (batch row 1 has no key: §4.4) where the component takes
# masks, then calls of other sizes through the same graph (none of size 1: a size-1 axis
# exports as a broadcast, a structure of its own).
EMPTY_ROW = Shape(batch=2, lq=5, lk=7, lengths=(7, 0))
RESIZED = (Shape(batch=3, lq=9, lk=4), Shape(batch=4, lq=12, lk=12))


def _float64_else_float32(tck: Harness, inst_for, run) -> tuple[Instance, str]:
    """Run ``run(inst)`` in float64, or in float32 where ONNX Runtime has no float64 kernel
    for an op of the graph (Conv, Erf); return the instance and the dtype used."""
    try:
        inst = inst_for("float64")
        run(inst)
        return inst, "float64"
    except Unsupported as why:
        if "float32" not in tck.dtypes():
            raise
        tck.note({"float64_unsupported": str(why)})
    inst = inst_for("float32")
    run(inst)
    return inst, "float32"


def _at(inst: Instance, *, opset: int | None = None, level: str | None = None) -> Instance:
    """The same built subject, exported at another opset or run at another ORT level."""
    handle = dataclasses.replace(
        inst.handle,
        opset=inst.handle.opset if opset is None else opset,
        level=level or inst.handle.level,
        last=None,
    )
    return dataclasses.replace(inst, handle=handle)


def _graph(tck: Harness, inst: Instance) -> None:
    exported = inst.handle.last
    if exported is not None:
        info = exported.info
        tck.note(
            {
                "graph_ops": info.ops,
                "graph_nodes": sum(info.ops.values()),
                "dynamic_axes": info.dynamic(),
            }
        )


def _failure_of_export(error: AdapterFailure) -> CheckFailure:
    return CheckFailure(error.code, error.message)


@exported
@spec("10.9", "4.4", id="onnx.opset")
@pytest.mark.parametrize("opset", OPSETS)
def test_opset(tck: Harness, opset: int) -> None:
    """Export at ``opset`` passes onnx.checker, and the graph matches the oracle on a call
    with a fully-masked row (§4.4: where F.scaled_dot_product_attention's opset-20 graph
    returns the mean of V)."""
    tck.note({"opset": opset})

    def build(dtype: str) -> Instance:
        return _at(tck.instance(dtype=dtype), opset=opset, level="disable_all")

    def run(inst: Instance) -> None:
        inputs = tck.inputs(inst, EMPTY_ROW)
        try:
            tck.assert_matches_oracle(inst, inputs, what=f"opset {opset}")
        finally:
            _graph(tck, inst)

    try:
        _, dtype = _float64_else_float32(tck, build, run)
    except AdapterFailure as error:
        raise _failure_of_export(error) from None
    tck.note({"dtype": dtype})


@exported
@spec("10.9", "10.6", id="onnx.dynamic_axes")
def test_dynamic_axes(tck: Harness) -> None:
    """The graph exported from one call gives the oracle's output at other batch sizes and
    lengths, and what the original torch module gives."""

    def build(dtype: str) -> Instance:
        return _at(tck.instance(dtype=dtype), level="disable_all")

    def run(inst: Instance) -> None:
        for index, shape in enumerate((Shape(), *RESIZED)):
            inputs = tck.inputs(inst, shape, seed=index)
            what = f"B={shape.batch}, Lq={shape.lq}, Lk={shape.lk}"
            out = tck.assert_matches_oracle(inst, inputs, what=what)
            original = tck.adapter.base.run(inst.handle.torch, inputs)
            finite = np.isfinite(out) & np.isfinite(original)
            delta = float(np.max(np.abs(out - original), where=finite, initial=0.0))
            tck.note({"vs_torch_max_abs_delta": delta})
        _graph(tck, inst)

    try:
        _float64_else_float32(tck, build, run)
    except AdapterFailure as error:
        raise _failure_of_export(error) from None


@exported
@spec("10.9", "10.7", id="onnx.opt_levels")
def test_opt_levels(tck: Harness) -> None:
    """ORT_ENABLE_ALL gives ORT_DISABLE_ALL's result, within §10.7's rule, in every dtype
    the graph runs in (float64 where ONNX Runtime has the kernels, and float32)."""
    from tck.reference.tolerance import compare

    checked = []
    for dtype in ("float64", "float32"):
        if dtype not in tck.dtypes():
            continue
        inst = _at(tck.instance(dtype=dtype), level="disable_all")
        inputs = tck.inputs(inst, EMPTY_ROW)
        fused_inst = _at(inst, level="enable_all")
        try:
            plain = tck.run(inst, inputs)
            fused = tck.run(fused_inst, inputs)
        except Unsupported as why:
            tck.note({f"{dtype}_unsupported": str(why)})
            continue
        except AdapterFailure as error:
            raise _failure_of_export(error) from None
        result = compare(fused, plain, dtype=dtype, careful_err=0.0)
        tck.note({f"{dtype}_max_abs_delta": result.max_abs_err})
        checked.append(dtype)
        if not result.passed:
            hint = tck.adapter.precision_hint(fused_inst.handle)
            raise CheckFailure(
                "onnx.opt_level_changes_result",
                f"{dtype}: ORT_ENABLE_ALL differs from ORT_DISABLE_ALL by up to "
                f"{result.max_abs_err:.3g} (bound {result.bound:.3g}) at index "
                f"{result.worst_index}" + (f"; {hint}" if hint else ""),
                result.metrics(),
            )
    if not checked:
        pytest.skip("ONNX Runtime runs the exported graph in no dtype here")
