"""Creating an ONNX Runtime session that may crash the process, in a child process first.

onnxruntime 1.31.1 (the pinned version) dies with SIGSEGV inside ``InferenceSession``
creation, at ``ORT_ENABLE_ALL`` on x86_64, for the float16 graph of ``nn.MultiheadAttention``
(cross-attention with a key padding mask; ``numerics.dtype_sweep``, subject
``mha@ort.enable_all``, float16). Found by bisecting the optimisers:
``ORT_DISABLE_ALL`` to ``ORT_ENABLE_LAYOUT`` load the graph, and ``ORT_ENABLE_ALL`` loads it
with either ``NchwcTransformer`` or ``FuseFp16InitializerToFp32NodeTransformer`` disabled:
the CPU provider runs the float16 ``MatMul`` in float32 behind inserted ``Cast`` nodes, and
``NchwcTransformer`` then dereferences a node without an op schema on ``Transpose ->
Cast(fp16->fp32) -> MatMul`` (microsoft/onnxruntime#28392, reported for 1.24.4 and 1.25.1).

A crash there used to end the worker (``adapter.crashed``, subject unknown) or, under
``-n 0``, the whole run. Now a half-precision graph's ``ORT_ENABLE_ALL`` session is first
created in a child Python that imports only onnxruntime, creates the session and exits
(~0.3 s; a fork of the checking process would be cheaper but inherits its threads and state,
and was seen to hang). If that child dies by a signal, the check gets the named finding
``onnx.runtime_crashed`` (an error: a deployment at ORT's default optimisation level dies on
this graph) and the session is never created here. The verdict depends on the graph's
structure, not on its weights, so it is kept per structure: one child
per exported structure, not per parameter set.
"""

from __future__ import annotations

import hashlib
import platform
import signal
import subprocess
import sys
from typing import Any

# onnx.TensorProto.FLOAT16 and BFLOAT16 (onnx is not imported here: the onnx extra is optional)
HALF = (10, 16)
# the probe's own deadline: past it, the session is created in-process as before
PROBE_TIMEOUT_S = 120
KNOWN = "microsoft/onnxruntime#28392"

# structure key -> the crash's description, or None where the session was created
_VERDICTS: dict[str, str | None] = {}


def half_precision(model: Any) -> bool:
    """Whether the graph holds float16 or bfloat16 inputs, initialisers or casts."""
    graph = model.graph
    if any(v.type.tensor_type.elem_type in HALF for v in graph.input):
        return True
    if any(t.data_type in HALF for t in graph.initializer):
        return True
    return any(
        n.op_type == "Cast" and any(a.name == "to" and a.i in HALF for a in n.attribute)
        for n in graph.node
    )


def structure_key(model: Any, level: str) -> str:
    """A digest of what the session's graph optimisers see, without the weights' values."""
    digest = hashlib.sha256(level.encode())
    graph = model.graph
    for opset in model.opset_import:
        digest.update(f"opset {opset.domain} {opset.version};".encode())
    for v in (*graph.input, *graph.output):
        digest.update(f"io {v.name} {v.type.SerializeToString().hex()};".encode())
    for t in graph.initializer:
        digest.update(f"init {t.name} {t.data_type} {list(t.dims)};".encode())
    for n in graph.node:
        attrs = [a.SerializeToString().hex() for a in n.attribute]
        digest.update(f"node {n.domain} {n.op_type} {n.input} {n.output} {attrs};".encode())
    return digest.hexdigest()


_CHILD = """
import sys
import onnxruntime as ort

level, disabled = sys.argv[1], [o for o in sys.argv[2].split(",") if o]
options = ort.SessionOptions()
options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
options.log_severity_level = 4
try:
    ort.InferenceSession(
        sys.stdin.buffer.read(), options, providers=["CPUExecutionProvider"],
        disabled_optimizers=disabled or None,
    )
except Exception:
    sys.exit(3)  # an exception is the in-process path's to report, with its text
"""


def _child_dies(data: bytes, level: str, disabled: tuple[str, ...] = ()) -> int | None:
    """The signal that ended a child Python creating the session, None if it did not die by
    one (it created the session, raised, or passed the deadline and was ended)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, level, ",".join(disabled)],
            input=data,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return -done.returncode if done.returncode < 0 else None


def crash_of(model: Any, data: bytes, level_name: str) -> str | None:
    """Why ONNX Runtime would crash this process creating the session at ``level_name``
    (e.g. ``ORT_ENABLE_ALL``), or None. Only half-precision graphs at ``ORT_ENABLE_ALL``
    on x86_64 are probed: the graphs and level where a crash was seen."""
    if level_name != "ORT_ENABLE_ALL" or not half_precision(model):
        return None
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    key = structure_key(model, level_name)
    if key not in _VERDICTS:
        _VERDICTS[key] = _describe(data, level_name)
    return _VERDICTS[key]


def _describe(data: bytes, level_name: str) -> str | None:
    died = _child_dies(data, level_name)
    if died is None:
        return None
    import onnxruntime as ort

    try:
        name = signal.Signals(died).name
    except ValueError:
        name = f"signal {died}"
    text = (
        f"ONNX Runtime {ort.__version__} crashes ({name}) creating the {level_name} session "
        "of this half-precision graph on the CPU provider (tested in a child process; "
        "a deployment at ORT's default optimisation level dies here)"
    )
    if _child_dies(data, level_name, ("NchwcTransformer",)) is None:
        text += (
            f"; without its NchwcTransformer it loads: the known crash on Transpose -> "
            f"Cast(fp16->fp32) -> MatMul, {KNOWN} (workaround: the session option "
            "disabled_optimizers=['NchwcTransformer'], or ORT_ENABLE_EXTENDED)"
        )
    return text


def clear() -> None:
    """Forget the verdicts (for tests)."""
    _VERDICTS.clear()
