"""ONNX Runtime's session-creation crash becomes a named finding (adapters/ort_probe.py).

The graph is the smallest found that crashes onnxruntime 1.31.1 (the pinned version) at
ORT_ENABLE_ALL on x86_64: a float16 ``Transpose`` feeding a ``MatMul`` with a float16
initialiser, dynamic axes (what ``nn.MultiheadAttention`` exports in float16). Without the
``Transpose`` it loads; with ``NchwcTransformer`` disabled it loads.
"""

from __future__ import annotations

import platform
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tck.adapters import AdapterFailure, ort_probe  # noqa: E402
from tck.adapters import onnx_runtime as onnx_rt  # noqa: E402

X86 = platform.machine().lower() in ("x86_64", "amd64")


def _graph(*, transpose: bool, dtype: int = TensorProto.FLOAT16) -> Any:
    np_dtype = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
    weight = numpy_helper.from_array(np.ones((24, 24), np_dtype), "W")
    nodes = [helper.make_node("MatMul", ["t" if transpose else "x", "W"], ["output"])]
    if transpose:
        nodes.insert(0, helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]))
    out_shape = ["L", "B", 24] if transpose else ["B", "L", 24]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", dtype, ["B", "L", 24])],
        [helper.make_tensor_value_info("output", dtype, out_shape)],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


@pytest.fixture(autouse=True)
def _fresh() -> None:
    ort_probe.clear()


@pytest.mark.skipif(not X86 or ort.__version__ != "1.31.1", reason="the crash seen: x86_64, 1.31.1")
def test_the_crash_is_named_not_suffered() -> None:
    model = _graph(transpose=True)
    crash = ort_probe.crash_of(model, model.SerializeToString(), "ORT_ENABLE_ALL")
    assert crash is not None and "SIGSEGV" in crash and "ORT_ENABLE_ALL" in crash
    assert ort_probe.KNOWN in crash and "NchwcTransformer" in crash
    # through the adapter's session: the named finding, and this process still alive
    exported = onnx_rt.Exported.of(model, {})
    with pytest.raises(AdapterFailure) as failure:
        onnx_rt._session(exported, "enable_all")
    assert failure.value.code == "onnx.runtime_crashed"
    assert "enable_all" not in exported.sessions
    # the same graph at ORT_DISABLE_ALL is created in-process as before, and runs
    session = onnx_rt._session(exported, "disable_all")
    x = np.ones((2, 3, 24), np.float16)
    (out,) = session.run(["output"], {"x": x})
    assert out.shape == (3, 2, 24) and np.all(out == 24)


def test_graphs_that_load_are_not_findings() -> None:
    for model in (_graph(transpose=False), _graph(transpose=True, dtype=TensorProto.FLOAT)):
        assert ort_probe.crash_of(model, model.SerializeToString(), "ORT_ENABLE_ALL") is None
    model = _graph(transpose=True)  # only ORT_ENABLE_ALL is probed
    assert ort_probe.crash_of(model, model.SerializeToString(), "ORT_DISABLE_ALL") is None


def test_the_verdict_is_kept_per_structure_not_per_weights() -> None:
    a, b = _graph(transpose=False), _graph(transpose=False)
    b.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.full((24, 24), 2, np.float16), "W"))
    assert ort_probe.structure_key(a, "ORT_ENABLE_ALL") == ort_probe.structure_key(
        b, "ORT_ENABLE_ALL"
    )
    other = _graph(transpose=True)
    assert ort_probe.structure_key(a, "ORT_ENABLE_ALL") != ort_probe.structure_key(
        other, "ORT_ENABLE_ALL"
    )
    assert ort_probe.half_precision(a) and not ort_probe.half_precision(
        _graph(transpose=False, dtype=TensorProto.FLOAT)
    )
