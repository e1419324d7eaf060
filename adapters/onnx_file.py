"""An ONNX file as the implementation: ``tck run --adapter onnx:FILE --component C [--map M]``.

The graph is run by ONNX Runtime (CPU). Its inputs are bound by name: a graph input named as
the component's input (``INPUTS``: ``x``, ``key_padding``, ...) takes it, or the map says
which (``"inputs": {"x": "hidden_states"}``). A keep-mask input the call does not give is fed
all True (no padding: the same function); any other input the suite cannot give, or an
input the graph lacks, makes that call ``Unsupported``.

Without a map the checks that need no parameters still run, in the graph's own dtype
(padding invariance, batching, causal no-leak where the graph takes ``causal``, determinism,
shape contracts: ``Harness.own_dtype``); the oracle checks skip. The map is the one a module
instance takes (``param_map``: one schema, one parser), with initializer names::

    {"params": {"self_attn.q.weight": {"name": "val_30", "permute": [1, 0]},
                "self_attn.k.weight": {"name": "qkv.weight", "slice": [0, 32, 64]},
                "self_attn.q.bias": null, ...},
     "config": {"n_heads": 4, "d_ff": 40},
     "conventions": {"norm_placement": "post"},
     "inputs": {"x": "x", "key_padding": "key_padding"},
     "masks": "ignore"}

``params`` reads the initializers, ``load`` writes new values into a copy of the graph in
memory (the file is never written). The graph's float dtype is the one dtype offered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tck.reference import (
    COMPONENTS,
    Config,
    Conventions,
    canonical_conventions,
    param_shapes,
    record,
)
from tck.usage import read_user_file

from .base import INPUTS, Adapter, Arrays, Subject, Unsupported
from .param_map import Ref, check_map, masks_ignore, refs
from .param_map import read_map as _read_map

KEEP_MASKS = ("key_padding", "keep_mask", "memory_key_padding")
_FLOAT = {1: "float32", 11: "float64", 10: "float16"}  # onnx TensorProto elem types
_NUMPY = {1: np.float32, 11: np.float64, 10: np.float16, 9: np.bool_, 7: np.int64, 6: np.int32}


MAX_ONNX_BYTES = 2**31  # protobuf's limit on one serialized message


class OnnxFileError(Exception):
    """The file, the component or the map cannot be used; the message says why."""


@dataclass
class _Handle:
    model: Any  # onnx.ModelProto (a copy once parameters were loaded)
    session: Any
    config: Config


class OnnxFileAdapter(Adapter):
    def __init__(self, path: str | os.PathLike[str], component: str, mapping: Any = None):
        self.path = Path(path)
        if component not in COMPONENTS:
            raise OnnxFileError(
                f"--component {component!r} is not a component; choose one of "
                f"{', '.join(COMPONENTS)}"
            )
        if not self.path.exists():
            raise OnnxFileError(f"no ONNX file {str(self.path)!r}")
        # a regular file read with protobuf's own bound (2 GiB); larger models keep their
        # weights in external data files beside it, which onnx reads by the graph's names
        data = read_user_file(
            self.path,
            what=f"--adapter onnx:{str(self.path)!r}",
            hint="name an .onnx file",
            limit=MAX_ONNX_BYTES,
            error=OnnxFileError,
        )
        import onnx  # after the file's own checks: a hostile path is refused without onnx too

        try:
            self.model = onnx.load_from_string(data)
            if any(
                init.data_location == onnx.TensorProto.EXTERNAL
                for init in self.model.graph.initializer
            ):
                from onnx.external_data_helper import load_external_data_for_model

                load_external_data_for_model(self.model, str(self.path.parent))
        except Exception as err:  # onnx raises DecodeError and others for a bad file
            raise OnnxFileError(f"{str(self.path)!r} is not an ONNX model: {err}") from None
        self.component = component
        self.name = f"onnx:{self.path.name}"
        self.mapping = check_map(mapping or {}, what="the map", error=OnnxFileError)
        self.refs = refs(self.mapping)
        self.ignore = masks_ignore(self.mapping)
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
        named = {r.name for r in self.refs.values() if r is not None}
        missing = sorted(named - initializers)
        if missing:
            raise OnnxFileError(f"the map names initializers the graph lacks: {missing}")
        self.fixed = self._fixed_config()
        try:
            self.conventions = Conventions(
                **{
                    **canonical_conventions(component).to_dict(),
                    **self.mapping.get("conventions", {}),
                }
            )
        except (TypeError, ValueError) as err:
            raise OnnxFileError(f"the map's conventions are not Conventions: {err}") from None
        if self.refs:  # the same rules as a module instance's map: every canonical name, no other
            shapes = param_shapes(component, Config(**self.fixed), self.conventions)
            unknown = sorted(set(self.refs) - set(shapes))
            if unknown:
                raise OnnxFileError(
                    f"the map names {unknown}, which are not canonical parameters of "
                    f"{component} ({', '.join(shapes)})"
                )
            lacking = sorted(set(shapes) - set(self.refs))
            if lacking:
                raise OnnxFileError(
                    f"the map lacks canonical parameters {lacking[:4]} of {component} "
                    "(null: absent)"
                )

    def _fixed_config(self) -> dict[str, Any]:
        fixed = dict(self.mapping.get("config", {}))
        first = self.bind.get(_inputs(self.component)[0])
        dims = self.graph_inputs[first].shape.dim if first in self.graph_inputs else []
        # the first input's last axis is the width where the record says so: [.., D]
        if record(self.component).inputs[0].dims[-1:] == ("D",) and dims:
            last = dims[-1].dim_value
            if last:
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
            feed[graph_name] = self._cast(graph_name, self._mask(np.asarray(value)))
        for graph_name in self.graph_inputs:
            if graph_name in feed:
                continue
            name = next((k for k, v in self.bind.items() if v == graph_name), graph_name)
            if name in KEEP_MASKS:  # no mask in this call: keep every position
                feed[graph_name] = self._cast(graph_name, self._mask(self._all_keep(name, inputs)))
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
        keys = {"memory_key_padding": "memory", "key_padding": "key"}.get(name)
        if keys in inputs:  # the mask covers the keys: the memory's or mha's key's length
            length = np.shape(inputs[keys])[1]
        return np.ones((batch, length), dtype=bool)

    def _mask(self, value: np.ndarray) -> np.ndarray:
        """A keep-mask (True = attend) as the graph reads its masks: inverted under the map's
        ``"masks": "ignore"`` (True = masked); any other input as it is."""
        return ~value if self.ignore and value.dtype == np.bool_ and value.ndim >= 2 else value

    def _cast(self, graph_name: str, value: np.ndarray) -> np.ndarray:
        target = _NUMPY.get(self.graph_inputs[graph_name].elem_type)
        return value.astype(target) if target is not None else value

    def params(self, handle: _Handle) -> dict[str, np.ndarray]:
        from onnx import numpy_helper

        refs = self._refs(handle)
        values = {t.name: t for t in handle.model.graph.initializer}
        shapes = param_shapes(self.component, handle.config, self.conventions)
        out = {}
        for canonical, ref in refs.items():
            shape = shapes.get(canonical)
            if ref is None:  # absent (a bias the graph was built without): zeros
                out[canonical] = np.zeros(shape or (), dtype=np.float64)
                continue
            array = numpy_helper.to_array(values[ref.name]).astype(np.float64)
            array = array[_region(ref, array.ndim)]
            array = array.transpose(ref.permute) if ref.permute else array
            target = ref.shape or shape
            out[canonical] = array.reshape(target) if target else array
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
            ref = refs[canonical]
            array = np.asarray(value, dtype=np.float64)
            if ref is None:
                if np.any(array != 0):
                    raise Unsupported(
                        f"the graph {self.path.name} has no {canonical} (the map says null): "
                        "it loads only as zeros"
                    )
                continue
            whole = numpy_helper.to_array(values[ref.name]).copy()
            region = _region(ref, whole.ndim)
            slot = whole[region]
            if array.size != slot.size:
                raise ValueError(f"{canonical}: {array.shape} does not fit {ref.name} {slot.shape}")
            if ref.permute:  # the inverse of params(): reshape to the permuted slot, undo it
                array = array.reshape([slot.shape[i] for i in ref.permute])
                array = array.transpose(np.argsort(ref.permute))
            whole[region] = array.reshape(slot.shape).astype(whole.dtype)
            values[ref.name].CopyFrom(numpy_helper.from_array(whole, ref.name))
        handle.model, handle.session = model, _session(model)

    def _refs(self, handle: _Handle) -> dict[str, Ref | None]:
        if not self.refs:
            raise Unsupported(
                f"no map names the initializers of {self.path.name} (--map MAP.json): the "
                "checks that compare with the oracle need them"
            )
        return self.refs


def _region(ref: Ref, ndim: int) -> tuple[slice, ...]:
    """The index of ``ref.slice`` = (dim, start, stop) in a tensor of ``ndim`` dims."""
    if ref.slice is None:
        return (slice(None),) * ndim
    dim, start, stop = ref.slice
    if dim >= ndim:
        raise ValueError(f"{ref.name} has {ndim} dims; the map slices dim {dim}")
    return tuple(slice(start, stop) if d == dim else slice(None) for d in range(ndim))


def _inputs(component: str) -> tuple[str, ...]:
    required, optional = INPUTS[component]
    return (*required, *optional)


def _session(model: Any) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def read_map(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    return _read_map(path, error=OnnxFileError) or {}
