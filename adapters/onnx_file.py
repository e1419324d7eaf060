"""An ONNX file as the implementation: ``tck run --adapter onnx:FILE --component C [--map M]``.

The graph is run by ONNX Runtime (CPU). Its inputs are bound by name: a graph input named as
the component's input (``INPUTS``: ``x``, ``key_padding``, ...) takes it, or the map says
which (``"inputs": {"x": "hidden_states"}``). A keep-mask input the call does not give is fed
all True (no padding: the same function); any other input the suite cannot give, or an
input the graph lacks, makes that call ``Unsupported``.

Without a map the checks that need no parameters still run, in the graph's own dtype
(padding invariance, batching, causal no-leak where the graph takes ``causal``, determinism,
shape contracts: ``Harness.own_dtype``); the oracle checks skip. A map JSON names the
initializers of the canonical parameters and the sizes and conventions the oracle needs::

    {"params": {"self_attn.q.weight": {"name": "val_30", "permute": [1, 0]},
                "self_attn.q.bias": "module.self_attn.q.bias", ...},
     "config": {"n_heads": 4, "d_ff": 40},
     "conventions": {"norm_placement": "post"},
     "inputs": {"x": "x", "key_padding": "key_padding"}}

``params`` reads the initializers, ``load`` writes new values into a copy of the graph in
memory (the file is never written). The graph's float dtype is the one dtype offered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tck.reference import COMPONENTS, Config, Conventions, canonical_conventions, param_shapes
from tck.usage import read_user_json

from .base import INPUTS, Adapter, Arrays, Subject, Unsupported

ENV_FILE, ENV_COMPONENT, ENV_MAP = "TCK_ONNX_FILE", "TCK_ONNX_COMPONENT", "TCK_ONNX_MAP"
KEEP_MASKS = ("key_padding", "keep_mask", "memory_key_padding")
_FLOAT = {1: "float32", 11: "float64", 10: "float16"}  # onnx TensorProto elem types
_NUMPY = {1: np.float32, 11: np.float64, 10: np.float16, 9: np.bool_, 7: np.int64, 6: np.int32}


class OnnxFileError(Exception):
    """The file, the component or the map cannot be used; the message says why."""


@dataclass
class _Handle:
    model: Any  # onnx.ModelProto (a copy once parameters were loaded)
    session: Any
    config: Config


class OnnxFileAdapter(Adapter):
    def __init__(self, path: str | os.PathLike[str], component: str, mapping: Any = None):
        import onnx

        self.path = Path(path)
        if component not in COMPONENTS:
            raise OnnxFileError(
                f"--component {component!r} is not a component; choose one of "
                f"{', '.join(COMPONENTS)}"
            )
        if not self.path.is_file():
            raise OnnxFileError(f"no ONNX file {str(self.path)!r}")
        try:
            self.model = onnx.load(str(self.path))
        except Exception as err:  # onnx raises DecodeError and others for a bad file
            raise OnnxFileError(f"{str(self.path)!r} is not an ONNX model: {err}") from None
        self.component = component
        self.name = f"onnx:{self.path.name}"
        self.mapping = _check_map(mapping or {})
        initializers = {t.name for t in self.model.graph.initializer}
        self.graph_inputs = {
            i.name: i.type.tensor_type for i in self.model.graph.input if i.name not in initializers
        }
        floats = [_FLOAT.get(t.elem_type) for t in self.graph_inputs.values()]
        floats = [f for f in floats if f]
        self.dtype = floats[0] if floats else "float64"
        self.bind = {k: self.mapping.get("inputs", {}).get(k, k) for k in _inputs(component)}
        unknown = sorted(set(self.mapping.get("inputs", {}).values()) - set(self.graph_inputs))
        if unknown:
            raise OnnxFileError(
                f"the map binds {unknown}, which the graph does not take "
                f"(its inputs: {', '.join(self.graph_inputs)})"
            )
        named = {_ref(r)[0] for r in self.mapping.get("params", {}).values()}
        missing = sorted(named - initializers)
        if missing:
            raise OnnxFileError(f"the map names initializers the graph lacks: {missing}")
        self.fixed = self._fixed_config()
        self.conventions = Conventions(
            **{**canonical_conventions(component).to_dict(), **self.mapping.get("conventions", {})}
        )

    def _fixed_config(self) -> dict[str, Any]:
        fixed = dict(self.mapping.get("config", {}))
        first = self.bind.get(_inputs(self.component)[0])
        dims = self.graph_inputs[first].shape.dim if first in self.graph_inputs else []
        if self.component not in ("patch_embed", "vit", "embedding", "seq2seq") and dims:
            last = dims[-1].dim_value
            if last and self.component not in ("attention", "rope"):
                fixed.setdefault("d_model", int(last))
        if "d_model" in fixed and "n_heads" not in fixed and fixed["d_model"] % 4:
            fixed["n_heads"] = 1  # the suite's default 4 does not divide it: one head
        try:
            Config(**fixed)
        except (TypeError, ValueError) as err:
            raise OnnxFileError(f"the map's config is not a Config: {err}") from None
        return fixed

    def subjects(self) -> list[Subject]:
        return [
            Subject(
                name=self.component,
                component=self.component,
                conventions=self.conventions,
                notes=(f"the ONNX graph {self.path.name}, run by ONNX Runtime (CPU)",),
                config=self.fixed,
            )
        ]

    def dtypes(self, subject: Subject) -> tuple[str, ...]:
        return (self.dtype,)

    def build(
        self, subject: Subject, config: Config, *, seed: int, dtype: str = "float64"
    ) -> _Handle:
        if dtype != self.dtype:
            raise Unsupported(f"the graph {self.path.name} computes in {self.dtype}, not {dtype}")
        differ = {f: v for f, v in self.fixed.items() if getattr(config, f) != v}
        if differ:
            raise Unsupported(
                f"the graph {self.path.name} has "
                + ", ".join(f"{f}={v!r}" for f, v in differ.items())
            )
        return _Handle(self.model, _session(self.model), config)

    def run(self, handle: _Handle, inputs: Arrays) -> np.ndarray:
        feed: dict[str, np.ndarray] = {}
        for name, value in inputs.items():
            graph_name = self.bind.get(name, name)
            if graph_name not in self.graph_inputs:
                if name == "causal" and not bool(np.asarray(value)):
                    continue  # no causal mask asked for: the graph's own function
                raise Unsupported(f"the graph {self.path.name} takes no {name} input")
            feed[graph_name] = self._cast(graph_name, np.asarray(value))
        for graph_name in self.graph_inputs:
            if graph_name in feed:
                continue
            name = next((k for k, v in self.bind.items() if v == graph_name), graph_name)
            if name in KEEP_MASKS:  # no mask in this call: keep every position
                feed[graph_name] = self._cast(graph_name, self._all_keep(name, inputs))
            else:
                raise Unsupported(
                    f"the graph {self.path.name} needs input {graph_name!r}, which this call "
                    "does not give"
                )
        out = handle.session.run(None, feed)[0]
        return np.asarray(out)

    def _all_keep(self, name: str, inputs: Arrays) -> np.ndarray:
        x = next(iter(v for k, v in inputs.items() if np.ndim(v) >= 2))
        batch, length = np.shape(x)[0], np.shape(x)[1]
        if name == "memory_key_padding" and "memory" in inputs:
            length = np.shape(inputs["memory"])[1]
        return np.ones((batch, length), dtype=bool)

    def _cast(self, graph_name: str, value: np.ndarray) -> np.ndarray:
        target = _NUMPY.get(self.graph_inputs[graph_name].elem_type)
        return value.astype(target) if target is not None else value

    def params(self, handle: _Handle) -> dict[str, np.ndarray]:
        from onnx import numpy_helper

        refs = self._refs(handle)
        values = {t.name: t for t in handle.model.graph.initializer}
        out = {}
        for canonical, (name, permute) in refs.items():
            array = numpy_helper.to_array(values[name]).astype(np.float64)
            array = array.transpose(permute) if permute else array
            shape = param_shapes(self.component, handle.config, self.conventions).get(canonical)
            out[canonical] = array.reshape(shape) if shape else array
        return out

    def load(self, handle: _Handle, params: Arrays) -> None:
        from onnx import numpy_helper

        refs = self._refs(handle)
        unknown = sorted(set(params) - set(refs))
        if unknown:
            raise Unsupported(f"the map names no initializer for {unknown}")
        model = type(handle.model)()
        model.CopyFrom(handle.model)  # the file's graph stays as it is
        values = {t.name: t for t in model.graph.initializer}
        for canonical, value in params.items():
            name, permute = refs[canonical]
            old = numpy_helper.to_array(values[name])
            array = np.asarray(value, dtype=np.float64)
            if permute:
                array = array.reshape([old.shape[i] for i in permute]).transpose(
                    np.argsort(permute)
                )
            if array.size != old.size:
                raise ValueError(f"{canonical}: {array.shape} does not fit {name} {old.shape}")
            new = numpy_helper.from_array(array.reshape(old.shape).astype(old.dtype), name)
            values[name].CopyFrom(new)
        handle.model, handle.session = model, _session(model)

    def _refs(self, handle: _Handle) -> dict[str, tuple[str, tuple[int, ...] | None]]:
        params = self.mapping.get("params")
        if not params:
            raise Unsupported(
                f"no map names the initializers of {self.path.name} (--map MAP.json): the "
                "checks that compare with the oracle need them"
            )
        return {k: _ref(v) for k, v in params.items()}


def _ref(value: Any) -> tuple[str, tuple[int, ...] | None]:
    if isinstance(value, str):
        return value, None
    permute = value.get("permute")
    return value["name"], tuple(permute) if permute else None


def _inputs(component: str) -> tuple[str, ...]:
    required, optional = INPUTS[component]
    return (*required, *optional)


def _check_map(mapping: Any) -> dict[str, Any]:
    if not isinstance(mapping, dict):
        raise OnnxFileError("the map must be a JSON object")
    unknown = sorted(set(mapping) - {"params", "config", "conventions", "inputs"})
    if unknown:
        raise OnnxFileError(
            f"the map has unknown keys {unknown}; use params, config, conventions, inputs"
        )
    for name, value in mapping.get("params", {}).items():
        ok = isinstance(value, str) or (
            isinstance(value, dict) and isinstance(value.get("name"), str)
        )
        if not ok:
            raise OnnxFileError(
                f"map params[{name!r}] must be an initializer name or "
                '{"name": ..., "permute": [...]}'
            )
    return mapping


def _session(model: Any) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def read_map(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    if not path:
        return {}
    return read_user_json(
        path, what=f"--map {str(path)!r}", hint="name a JSON map file", error=OnnxFileError
    )


def from_env() -> OnnxFileAdapter:
    """The adapter ``tck run --adapter onnx:FILE`` describes, from the environment it sets."""
    file, component = os.environ.get(ENV_FILE), os.environ.get(ENV_COMPONENT)
    if not file or not component:
        raise OnnxFileError(f"set {ENV_FILE} and {ENV_COMPONENT} (tck run --adapter onnx:FILE)")
    return OnnxFileAdapter(file, component, read_map(os.environ.get(ENV_MAP)))
