"""The ONNX path: export a torch subject with ``torch.onnx.export(dynamo=True)`` and run the
graph in ONNX Runtime (CPU execution provider), as an adapter the checks run unchanged.

``with_onnx(adapter)`` returns an adapter that offers every subject of a torch adapter
twice more, ``"<name>@ort.disable_all"`` and ``"<name>@ort.enable_all"``: the exported graph
at the two ends of ONNX Runtime's graph optimisation levels. ``build``, ``load`` and
``params`` act on the torch module; the first ``run`` after them exports it, with the batch
and sequence axes of every input dynamic (``torch.export.Dim.AUTO``), and later calls of
other sizes reuse that graph, so a check that varies lengths also tests that the axes
really are dynamic. One graph is exported per subject *structure* (subject, config, dtype,
opset, and the input structure: names, ranks, dtypes, size-1 axes, the ``causal`` flag); the
graph of each further parameter set is that export with its initialisers replaced, then
optimised as the exporter does (``Template``): the model ``torch.onnx.export`` gives for
those parameters, in a fraction of the time. Where export baked a size into the graph, a
template serves calls of its own sizes only, and other sizes get an export of their own.
Where a parameter does not map to an initialiser, each parameter set is exported afresh; an
export that failed fails again without tracing (the exporter traces with fake tensors: its
failures do not depend on values).

What the graph cannot do becomes ``Unsupported`` (a skip with the reason): gradients, and a
dtype ONNX Runtime has no CPU kernel for (e.g. float64 ``Conv`` and ``Erf``). What export
breaks becomes ``AdapterFailure`` with a diagnosis code: ``onnx.export_failed``,
``onnx.checker_failed``, ``onnx.axis_not_dynamic``, ``onnx.runtime_error``, and
``onnx.runtime_crashed`` where creating the session would crash ONNX Runtime (ort_probe.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from tck.reference import Config

from . import ort_probe
from .base import Adapter, AdapterFailure, Arrays, Subject, Unsupported
from .torch_module import TorchHandle, TorchModuleAdapter

# ONNX Runtime's graph optimisation levels, by the names the results carry.
OPT_LEVELS: dict[str, str] = {
    "disable_all": "ORT_DISABLE_ALL",
    "enable_all": "ORT_ENABLE_ALL",
}
# Opsets the export checks try; the default is torch.onnx's own.
OPSETS: tuple[int, ...] = (17, 18, 20, 23)
# bfloat16 has no numpy dtype to feed ONNX Runtime, nor CPU kernels for most ops.
ORT_DTYPES: tuple[str, ...] = ("float64", "float32", "float16")
SEPARATOR = "@ort."

# Which axes of each input are the batch and the sequence axes ("dynamic" ones). Masks are
# aligned from the right (they broadcast): the last axis runs over keys, the one before
# over queries, the first of four over the batch; their size-1 axes broadcast and stay so.
_AXES: dict[str, dict[int, str]] = {
    "ids": {0: "batch", 1: "seq"},
    "src_ids": {0: "batch", 1: "seq"},
    "tgt_ids": {0: "batch", 1: "seq"},
    "positions": {0: "seq"},
    "q": {0: "batch", -2: "seq"},
    "k": {0: "batch", -2: "seq"},
    "v": {0: "batch", -2: "seq"},
    "query": {0: "batch", 1: "seq"},
    "key": {0: "batch", 1: "seq"},
    "value": {0: "batch", 1: "seq"},
    "x": {0: "batch", -2: "seq"},  # [B, L, D], and rope's [B, H, L, d]
    "memory": {0: "batch", 1: "seq"},
    "key_padding": {0: "batch", 1: "seq"},
    "memory_key_padding": {0: "batch", 1: "seq"},
    "images": {0: "batch"},
}
_MASK_AXES = {-1: "seq", -2: "seq", -4: "batch"}
AXIS_KINDS = ("batch", "seq")


def dynamic_axes(name: str, shape: tuple[int, ...], kinds: Iterable[str] = AXIS_KINDS) -> list[int]:
    """The axes of input ``name`` (of ``shape``) to export as dynamic: those of ``kinds``."""
    kinds = set(kinds)
    table = _AXES.get(name, _MASK_AXES if name in ("keep_mask", "attn_mask") else {})
    rank = len(shape)
    axes = []
    for axis, kind in table.items():
        axis = axis % rank if -rank <= axis < rank else None
        if axis is not None and kind in kinds and shape[axis] != 1:
            axes.append(axis)
    return sorted(set(axes))


class _Graph(nn.Module):
    """A subject's module and forward as ``forward(*tensors)``, the form export takes."""

    def __init__(self, handle: TorchHandle, names: list[str], constants: dict[str, Any]):
        super().__init__()
        self.module = handle.module
        self._forward, self._names, self._constants = handle.entry.forward, names, constants

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        named = dict(zip(self._names, tensors, strict=True))
        out = self._forward(self.module, **named, **self._constants)
        return out[0] if isinstance(out, (tuple, list)) else out


@contextmanager
def _quiet() -> Any:
    """torch.onnx prints progress and warns about torchvision ops; keep the report clean."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


# torch.onnx.export builds its registry of ONNX functions from torchlib on every call (0.2 to
# 0.6 CPU s of a 1.3 to 2 s export of a torch.nn layer, measured) and only reads it
# afterwards. Within _shared_registry each opset's registry is built once per process.
_REGISTRIES: dict[tuple, Any] = {}


@contextmanager
def _shared_registry() -> Any:
    try:
        from torch.onnx._internal.exporter import _registration

        owner = _registration.ONNXRegistry
        original = owner.__dict__["from_torchlib"]
        build = original.__func__
    except (ImportError, AttributeError, KeyError):  # another torch: build it every time
        yield
        return

    def shared(cls: type, *args: Any, **kwargs: Any) -> Any:
        key = (cls, args, tuple(sorted(kwargs.items())))
        if key not in _REGISTRIES:
            _REGISTRIES[key] = build(cls, *args, **kwargs)
        return _REGISTRIES[key]

    owner.from_torchlib = classmethod(shared)
    try:
        yield
    finally:
        owner.from_torchlib = original


def _first_line(err: BaseException) -> str:
    """The exporter wraps the cause in pages of advice: the cause and its first line."""
    cause = err.__cause__ or err
    lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(("For more information", "The error above"))]
    text = useful[0] if useful else type(cause).__name__
    return f"{type(cause).__name__}: {text[:400]}"


def export(
    handle: TorchHandle,
    inputs: Mapping[str, Any],
    *,
    opset: int | None = None,
    dynamic: Iterable[str] = AXIS_KINDS,
) -> Any:
    """Export ``handle``'s subject called on ``inputs`` (torch tensors and the ``causal`` bool,
    as ``TorchModuleAdapter`` passes them) to an ``onnx.ModelProto``, and check it with
    ``onnx.checker.check_model(full_check=True)``. ``dynamic``: the axis kinds to keep
    dynamic ("batch", "seq"). Raises ``AdapterFailure`` when export or the checker fails."""
    program = _export_program(handle, inputs, opset=opset, dynamic=dynamic, optimize=True)
    return _checked(program.model_proto)


def _export_program(
    handle: TorchHandle,
    inputs: Mapping[str, Any],
    *,
    opset: int | None,
    dynamic: Iterable[str] = AXIS_KINDS,
    optimize: bool,
) -> Any:
    """``torch.onnx.export(dynamo=True)``'s ``ONNXProgram``; with ``optimize=False``, before
    the exporter's last step (onnxscript's optimiser, which folds constants: parameters too)."""
    names = [k for k, v in inputs.items() if isinstance(v, torch.Tensor)]
    constants = {k: v for k, v in inputs.items() if not isinstance(v, torch.Tensor)}
    args = tuple(inputs[n] for n in names)
    kinds = tuple(dynamic)
    shapes = tuple(
        {axis: torch.export.Dim.AUTO for axis in dynamic_axes(n, tuple(a.shape), kinds)}
        for n, a in zip(names, args, strict=True)
    )
    graph = _Graph(handle, names, constants).eval()
    try:
        with _quiet(), _shared_registry(), torch.no_grad():
            return torch.onnx.export(
                graph,
                args,
                dynamo=True,
                opset_version=opset,
                dynamic_shapes=(shapes,),
                input_names=names,
                output_names=["output"],
                verbose=False,
                optimize=optimize,
            )
    except Exception as err:  # the exporter raises many types; all mean "did not export"
        raise _export_failed(opset, err) from err


def _export_failed(opset: int | None, err: BaseException) -> AdapterFailure:
    return AdapterFailure(
        "onnx.export_failed",
        f"torch.onnx.export(dynamo=True, opset_version={opset}) failed: {_first_line(err)}",
    )


def _checked(model: Any) -> Any:
    """``model``, once ``onnx.checker.check_model(full_check=True)`` passed it."""
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as err:  # onnx.checker.ValidationError, or shape inference errors
        raise AdapterFailure(
            "onnx.checker_failed", f"onnx.checker.check_model(full_check=True): {err}"
        ) from err
    return model


@dataclass
class GraphInfo:
    """What one exported graph is: for the results and for ``tck export-onnx``."""

    opset: int
    ops: dict[str, int]  # op type -> count
    inputs: dict[str, list[int | str]]  # input -> shape, dynamic axes by their symbol
    rounded_scalars: list[tuple[str, float]] = field(default_factory=list)

    @classmethod
    def of(cls, model: Any) -> GraphInfo:
        from onnx import numpy_helper

        ops: dict[str, int] = {}
        for node in model.graph.node:
            key = (
                node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
            )
            ops[key] = ops.get(key, 0) + 1
        shapes = {
            i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in model.graph.input
        }
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        rounded = []
        for init in model.graph.initializer:
            value = numpy_helper.to_array(init)
            if value.dtype == np.float64 and value.size == 1:
                scalar = float(value.reshape(()))
                if _float32_rounded(scalar):
                    rounded.append((init.name, scalar))
        return cls(opset, dict(sorted(ops.items())), shapes, rounded)

    def dynamic(self) -> dict[str, list[int]]:
        return {
            name: [i for i, d in enumerate(shape) if isinstance(d, str)]
            for name, shape in self.inputs.items()
        }


def _float32_rounded(value: float) -> bool:
    """A float64 constant that is exactly a float32 value but no short binary fraction
    (0.5, 0.125, -inf are exact in both): the trace of a scalar rounded to float32 on its
    way into a float64 graph, as 1/sqrt(d_k) = 0.40824829046386 becoming 0.40824830532073."""
    if not np.isfinite(value) or value == 0.0:
        return False
    if float(np.float32(value)) != value:
        return False
    mantissa, _ = np.frexp(value)
    return float(mantissa * 2**12) != round(mantissa * 2**12)  # more than 12 significant bits


def _tensor_shapes(inputs: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The shapes of a forward's tensor inputs, by name (its constants left out)."""
    return {n: tuple(v.shape) for n, v in inputs.items() if isinstance(v, torch.Tensor)}


@dataclass
class Exported:
    model: Any
    info: GraphInfo
    shapes: dict[str, tuple[int, ...]]  # the inputs' shapes at export
    sessions: dict[str, Any] = field(default_factory=dict)  # opt level -> InferenceSession

    @classmethod
    def of(
        cls,
        model: Any,
        inputs: Mapping[str, Any],
        traced: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Exported:
        """``model`` exported from a call on ``inputs`` (the torch forward's), or traced at
        the sizes ``traced`` (a template's) where it was not."""
        shapes = _tensor_shapes(inputs)
        return cls(model, GraphInfo.of(model), dict(traced) if traced else shapes)


# Exports are slow (seconds); instances of one subject with the same parameters and input
# structure share one graph. Bounded, so that a long hypothesis run does not hoard models.
_CACHE: OrderedDict[tuple, Exported] = OrderedDict()
_CACHE_SIZE = 64


@dataclass
class Template:
    """One export of a subject *structure* (subject, config, dtype, opset, input structure)
    at some input sizes, taken before the exporter's last step, onnxscript's optimiser
    (which folds constants, parameters among them: ``nn.MultiheadAttention``'s
    ``in_proj_weight`` becomes three folded slices). ``tensors`` maps each tensor of the
    module (parameters and buffers) to the initialiser that holds it, checked by value at
    export; ``None`` where one does not map (the exporter transformed it, or dropped it):
    then ``why`` says which, and each parameter set is exported afresh.

    The graph for other parameter values is this one with those initialisers replaced, then
    optimised as ``torch.onnx.export`` does (``ONNXProgram.optimize``): the same model the
    exporter gives for them, without tracing the module again.

    A template serves calls of other sizes where the traced program says every size may
    change (``serves``): each dynamic axis is a symbol whose range holds the new size, axes
    that share a symbol get one size, and the program asserts nothing else about sizes.
    Export may bake a size into a graph whose ONNX inputs still look dynamic
    (``int(x.shape[0])`` becomes a ``Reshape`` to a constant); the program then records the
    symbol's range as that one value, and the template serves its own sizes only."""

    proto: Any  # onnx.ModelProto, unoptimised
    tensors: dict[str, str] | None  # module tensor -> initialiser name
    why: str
    shapes: dict[str, tuple[int, ...]]  # the inputs' shapes at export
    counters: dict[str, int] = field(default_factory=dict)  # see _name_counters
    sizes: SymbolicSizes | None = None  # None: it serves its own sizes only

    def serves(self, shapes: Mapping[str, tuple[int, ...]]) -> bool:
        """Is this graph the export of a call of ``shapes`` too?"""
        if dict(shapes) == self.shapes:
            return True
        return self.sizes is not None and self.sizes.admit(shapes)

    @classmethod
    def export(
        cls, handle: TorchHandle, inputs: Mapping[str, Any], *, opset: int | None
    ) -> Template:
        from onnx import numpy_helper

        program = _export_program(handle, inputs, opset=opset, optimize=False)
        proto = program.model_proto
        shapes = _tensor_shapes(inputs)
        initialisers = {init.name: init for init in proto.graph.initializer}
        tensors: dict[str, str] = {}
        unmapped = []
        for name, tensor in _module_tensors(handle.module).items():
            init = initialisers.get(f"module.{name}")  # _Graph holds the module as "module"
            value = tensor.detach().cpu().numpy()
            if (
                init is None
                or not init.HasField("raw_data")
                or not _same(numpy_helper.to_array(init), value)
            ):
                unmapped.append(name)
            else:
                tensors[name] = init.name
        why = ""
        if unmapped:
            why = f"no initialiser holds {', '.join(unmapped)} as the module does"
        counters = _name_counters(program.model.graph)
        sizes = SymbolicSizes.of(program, list(shapes))
        return cls(proto, None if unmapped else tensors, why, shapes, counters, sizes)

    def instantiate(self, module: nn.Module | None, *, opset: int | None) -> Any:
        """The optimised ``onnx.ModelProto`` with ``module``'s tensors (None: the values it
        was exported with), as ``torch.onnx.export`` would give it."""
        import onnx
        import onnx_ir as ir

        proto = onnx.ModelProto()
        proto.CopyFrom(self.proto)
        if module is not None:
            if self.tensors is None:
                raise ValueError(f"this export cannot take other parameters: {self.why}")
            by_name = {init.name: init for init in proto.graph.initializer}
            for name, tensor in _module_tensors(module).items():
                init = by_name[self.tensors[name]]
                data = tensor.detach().cpu().numpy().tobytes()
                if len(data) != len(init.raw_data):
                    raise ValueError(f"{name} does not fit its initialiser {init.name}")
                init.raw_data = data
        model = ir.serde.deserialize_model(proto)
        authority = getattr(model.graph, "_name_authority", None)
        for counter, value in self.counters.items():
            if hasattr(authority, counter):
                setattr(authority, counter, value)
        program = torch.onnx.ONNXProgram(model, None)
        try:
            with _quiet():
                program.optimize()  # what torch.onnx.export(optimize=True) does last
        except Exception as err:  # as an optimiser error inside torch.onnx.export
            raise _export_failed(opset, err) from err
        return program.model_proto


@dataclass(frozen=True)
class SymbolicSizes:
    """What ``torch.export`` recorded of a program's input sizes: per input axis its fixed
    size or the name of its symbol, and each symbol's range."""

    axes: dict[str, tuple[int | str, ...]]
    ranges: dict[str, tuple[float, float]]

    @classmethod
    def of(cls, program: Any, names: list[str]) -> SymbolicSizes | None:
        """None where the program cannot take other sizes as they come: an axis whose size is
        an expression of symbols, or a runtime assertion on sizes in the graph."""
        ep = getattr(program, "exported_program", None)
        if ep is None:
            return None
        nodes = {node.name: node for node in ep.graph.nodes}
        if any(
            node.op == "call_function" and "assert" in str(node.target) for node in nodes.values()
        ):
            return None
        users = list(ep.graph_signature.user_inputs)
        if len(users) != len(names):
            return None
        axes: dict[str, tuple[int | str, ...]] = {}
        for name, user in zip(names, users, strict=True):
            value = nodes[user].meta.get("val")
            if value is None:
                return None
            dims: list[int | str] = []
            for dim in value.shape:
                if isinstance(dim, int):
                    dims.append(dim)
                elif getattr(dim.node.expr, "is_Symbol", False):
                    dims.append(str(dim.node.expr))
                else:
                    return None
            axes[name] = tuple(dims)
        ranges = {
            str(symbol): (float(bounds.lower), float(bounds.upper))
            for symbol, bounds in ep.range_constraints.items()
        }
        return cls(axes, ranges)

    def admit(self, shapes: Mapping[str, tuple[int, ...]]) -> bool:
        if set(shapes) != set(self.axes):
            return False
        bound: dict[str, int] = {}
        for name, shape in shapes.items():
            dims = self.axes[name]
            if len(dims) != len(shape):
                return False
            for dim, size in zip(dims, shape, strict=True):
                if isinstance(dim, int):
                    if dim != size:
                        return False
                elif bound.setdefault(dim, size) != size:
                    return False
        return all(
            low <= bound[symbol] <= high
            for symbol, (low, high) in self.ranges.items()
            if symbol in bound
        )


def _name_counters(graph: Any) -> dict[str, int]:
    """Where the graph's name authority (onnx_ir) stands after export: the optimiser names
    the initialisers it folds ``val_<counter>``, so a template read back from its proto
    resumes there to name them as the exporter does (names show in diagnoses)."""
    authority = getattr(graph, "_name_authority", None)
    names = ("_value_counter", "_node_counter")
    return {n: v for n in names if isinstance(v := getattr(authority, n, None), int)}


def _module_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """A module's parameters and buffers (persistent or not), by name."""
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# Templates by structure (a few per structure where export baked sizes in), and the exports
# that failed, by structure: export traces the module with fake tensors, so its failure (a
# guard on data, an op without a translation) does not depend on the values.
_TEMPLATES: OrderedDict[tuple, list[Template]] = OrderedDict()
_TEMPLATES_SIZE = 256  # structures
_TEMPLATES_PER_STRUCTURE = 8
_FAILED: dict[tuple, tuple[str, str]] = {}
# How the graphs of this process were made: "exported" (a template traced), "swapped"
# (a template's initialisers replaced), "resized" (the same, for a call of other sizes than
# the template's), "reexported" (a template that cannot take other
# parameters, exported afresh), "failed_cached" (a known failure raised again).
STATS: dict[str, int] = {
    "exported": 0,
    "swapped": 0,
    "resized": 0,
    "reexported": 0,
    "failed_cached": 0,
}


def clear_caches() -> None:
    """Forget every graph, template and failed export of this process (for tests)."""
    _CACHE.clear()
    _TEMPLATES.clear()
    _FAILED.clear()


# TCK_ONNX_REEXPORT=1: every parameter set exported afresh (no templates), as before the
# templates: for comparing the two.
REEXPORT_ENV = "TCK_ONNX_REEXPORT"


def run_graph(exported: Exported, level: str, inputs: Mapping[str, Any]) -> np.ndarray:
    """Run an exported graph in ONNX Runtime (CPU) at ``level`` on ``inputs`` (the torch
    forward's: tensors by name, and constants the graph has baked in)."""
    session = _session(exported, level)
    feeds = {n: v.detach().cpu().numpy() for n, v in inputs.items() if isinstance(v, torch.Tensor)}
    try:
        (out,) = session.run(["output"], feeds)
    except Exception as err:  # onnxruntime's Fail / InvalidArgument / RuntimeException
        text, code = str(err).strip(), "onnx.runtime_error"
        resized = [n for n, v in feeds.items() if v.shape != exported.shapes.get(n, v.shape)]
        if resized:  # it ran at the export's sizes: export fixed a size the call changes
            code = "onnx.axis_not_dynamic"
            text += (
                f"; the graph was exported from a call of other sizes ({_sizes(exported.shapes)}"
                f", now {_sizes({n: feeds[n].shape for n in resized})}) and cannot run this "
                f"one: export fixed an axis (its inputs: {exported.info.inputs})"
            )
        raise AdapterFailure(code, f"ONNX Runtime ({OPT_LEVELS[level]}): {text}") from err
    return out


def _sizes(shapes: Mapping[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{n} {list(shape)}" for n, shape in shapes.items())


def _session(exported: Exported, level: str) -> Any:
    """The graph's InferenceSession at ``level``; a dtype without CPU kernels: Unsupported."""
    import onnxruntime as ort

    if level not in exported.sessions:
        options = ort.SessionOptions()
        options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[level])
        options.intra_op_num_threads = 1  # the checks' tensors are tiny (see --tck-threads)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        data = exported.model.SerializeToString()
        crash = ort_probe.crash_of(exported.model, data, OPT_LEVELS[level])
        if crash is not None:  # it would end this process (adapters/ort_probe.py)
            raise AdapterFailure("onnx.runtime_crashed", crash)
        try:
            exported.sessions[level] = ort.InferenceSession(
                data, options, providers=["CPUExecutionProvider"]
            )
        except Exception as err:
            text = str(err)
            if "NOT_IMPLEMENTED" in text:  # no kernel for this dtype on the CPU provider
                detail = text.split("NOT_IMPLEMENTED :")[-1].strip()
                raise Unsupported(
                    f"ONNX Runtime's CPU execution provider cannot run this graph: {detail}"
                ) from err
            raise AdapterFailure("onnx.runtime_error", f"InferenceSession: {text}") from err
    return exported.sessions[level]


@dataclass
class OrtHandle:
    torch: TorchHandle
    level: str
    opset: int | None
    last: Exported | None = None  # the graph of the latest run


class OnnxRuntimeAdapter(Adapter):
    """A torch adapter's subjects, exported to ONNX and run in ONNX Runtime (CPU EP) at the
    optimisation levels ``levels``, beside the torch subjects themselves."""

    def __init__(
        self,
        base: TorchModuleAdapter,
        *,
        opset: int | None = None,
        levels: Iterable[str] = tuple(OPT_LEVELS),
        reuse: bool | None = None,
    ):
        if not isinstance(base, TorchModuleAdapter):
            raise TypeError(
                f"ONNX export needs a torch adapter (TorchModuleAdapter); {base.name!r} is a "
                f"{type(base).__name__}"
            )
        unknown = set(levels) - set(OPT_LEVELS)
        if unknown:
            raise ValueError(
                f"unknown ORT levels {sorted(unknown)}; choose from {list(OPT_LEVELS)}"
            )
        self.base, self.opset, self.levels = base, opset, tuple(levels)
        # reuse: one export per structure, its initialisers swapped per parameter set
        # (Template); False (or TCK_ONNX_REEXPORT=1): one export per parameter set.
        self.reuse = os.environ.get(REEXPORT_ENV, "") in ("", "0") if reuse is None else reuse
        self.name = base.name
        self._exported: dict[str, tuple[Subject, str]] = {}
        for subject in base.subjects():
            for level in self.levels:
                self._exported[f"{subject.name}{SEPARATOR}{level}"] = (subject, level)

    # ------------------------------------------------------------------ subjects
    def subjects(self) -> list[Subject]:
        out = self.base.subjects()
        for name, (subject, level) in self._exported.items():
            note = (
                f"exported with torch.onnx.export(dynamo=True, opset "
                f"{self.opset or 'default'}), run by ONNX Runtime's CPU execution provider at "
                f"{OPT_LEVELS[level]}"
            )
            out.append(dataclasses.replace(subject, name=name, notes=(*subject.notes, note)))
        return out

    def origin(self, subject: Subject) -> tuple[Subject, str] | None:
        """The torch subject an exported one comes from, and its ORT level (None: torch)."""
        return self._exported.get(subject.name)

    def subject_metrics(self, subject: Subject) -> dict[str, Any]:
        """What every result of ``subject`` carries: where it ran."""
        origin = self.origin(subject)
        if origin is None:
            return {"runtime": "torch"}
        import onnxruntime as ort

        return {
            "runtime": "onnxruntime",
            "runtime_version": ort.__version__,
            "opset": self.opset or _default_opset(),
            "ort_opt_level": OPT_LEVELS[origin[1]],
            "exported_from": origin[0].name,
        }

    def dtypes(self, subject: Subject) -> tuple[str, ...]:
        origin = self.origin(subject)
        offered = self.base.dtypes(origin[0] if origin else subject)
        return offered if origin is None else tuple(d for d in offered if d in ORT_DTYPES)

    # ------------------------------------------------------------------ building
    def build(self, subject: Subject, config: Config, *, seed: int, dtype: str = "float64") -> Any:
        origin = self.origin(subject)
        kwargs = {} if dtype == "float64" else {"dtype": dtype}
        if origin is None:
            return self.base.build(subject, config, seed=seed, **kwargs)
        if dtype not in self.dtypes(subject):
            raise Unsupported(
                f"{subject.name}: ONNX Runtime is fed numpy arrays, and numpy has no {dtype}; "
                f"the exported graph is checked in {', '.join(self.dtypes(subject))}"
            )
        base, level = origin
        return OrtHandle(self.base.build(base, config, seed=seed, **kwargs), level, self.opset)

    def _torch(self, handle: Any) -> TorchHandle:
        return handle.torch if isinstance(handle, OrtHandle) else handle

    def params(self, handle: Any) -> dict[str, np.ndarray]:
        return self.base.params(self._torch(handle))

    def load(self, handle: Any, params: Arrays) -> None:
        self.base.load(self._torch(handle), params)

    def grad(self, handle: Any, inputs: Arrays, cotangent: np.ndarray) -> dict[str, np.ndarray]:
        if isinstance(handle, OrtHandle):
            raise Unsupported("an ONNX Runtime inference session computes no gradients")
        return self.base.grad(handle, inputs, cotangent)

    # ------------------------------------------------------------------ running
    def run(self, handle: Any, inputs: Arrays) -> np.ndarray:
        if not isinstance(handle, OrtHandle):
            return self.base.run(handle, inputs)
        kwargs = self.base._kwargs(handle.torch, inputs)  # the forward's inputs: the export's
        exported = self.exported(handle, kwargs)
        out = run_graph(exported, handle.level, kwargs)
        handle.last = exported
        return out

    def exported(self, handle: OrtHandle, kwargs: Mapping[str, Any]) -> Exported:
        """The graph for this call's input structure and the module's current parameters."""
        th = handle.torch
        structure = tuple(
            (n, tuple(v.shape[a] == 1 for a in range(v.ndim)), str(v.dtype))
            if isinstance(v, torch.Tensor)
            else (n, repr(v))
            for n, v in kwargs.items()
        )
        digest = hashlib.sha1()
        for name, tensor in _module_tensors(th.module).items():
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy())
        shape_key = (
            self.base.name,
            th.subject.name,
            dataclasses.astuple(th.config),
            str(th.dtype),
            # torch.onnx.export's default opset is that opset: one graph for both
            _default_opset() if handle.opset is None else handle.opset,
            structure,
        )
        key = (*shape_key, digest.hexdigest())
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        if self.reuse:
            model, traced = self._from_template(th, kwargs, shape_key, handle.opset)
        else:
            model, traced = export(th, kwargs, opset=handle.opset), None
        exported = Exported.of(model, kwargs, traced)
        _CACHE[key] = exported
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
        return exported

    def _from_template(
        self, th: TorchHandle, kwargs: Mapping[str, Any], key: tuple, opset: int | None
    ) -> tuple[Any, dict[str, tuple[int, ...]] | None]:
        """The checked graph of ``th`` for ``kwargs``, and the input sizes it was traced at:
        the template of its structure that serves these sizes, swapped to the module's
        tensors (see ``Template``); exported afresh where that cannot be."""
        if key in _FAILED:
            STATS["failed_cached"] += 1
            raise AdapterFailure(*_FAILED[key])
        shapes = _tensor_shapes(kwargs)
        templates = _TEMPLATES.get(key, [])
        template = next((t for t in templates if t.serves(shapes)), None)
        if template is None:
            try:
                template = Template.export(th, kwargs, opset=opset)
            except AdapterFailure as failure:
                _FAILED[key] = (failure.code, failure.message)
                raise
            STATS["exported"] += 1
            _TEMPLATES[key] = [template, *templates][:_TEMPLATES_PER_STRUCTURE]  # newest first
            _TEMPLATES.move_to_end(key)
            while len(_TEMPLATES) > _TEMPLATES_SIZE:
                _TEMPLATES.popitem(last=False)
            return _checked(template.instantiate(None, opset=opset)), None  # its own values
        _TEMPLATES.move_to_end(key)
        if template.tensors is None:
            STATS["reexported"] += 1
            return export(th, kwargs, opset=opset), None
        STATS["swapped" if template.shapes == shapes else "resized"] += 1
        return _checked(template.instantiate(th.module, opset=opset)), template.shapes

    def precision_hint(self, handle: Any) -> str | None:
        """Where a float64 graph of ``handle`` computes in float32, for a diagnosis (the
        harness asks when a float64 comparison fails): scalars the exporter stored rounded to
        float32, and rounded float32 attributes of the graph ONNX Runtime runs at this level."""
        if not isinstance(handle, OrtHandle) or handle.torch.dtype != torch.float64:
            return None
        exported = handle.last
        if exported is None:  # nothing ran yet: nothing to say
            return f"the exported float64 graph at {OPT_LEVELS[handle.level]}"
        found = []
        if exported.info.rounded_scalars:
            shown = ", ".join(f"{n} = {v!r}" for n, v in exported.info.rounded_scalars[:3])
            found.append(f"torch.onnx stored Python-float scalars rounded to float32 ({shown})")
        attributes = _float32_attributes(exported.model, handle.level)
        if attributes:
            found.append(
                f"the graph ONNX Runtime runs at {OPT_LEVELS[handle.level]} holds float32 "
                f"attributes ({', '.join(attributes[:3])})"
            )
        if found:
            return "; ".join(found)
        return (
            f"the float64 graph holds no rounded constant, so a kernel of ONNX Runtime at "
            f"{OPT_LEVELS[handle.level]} computes in float32 inside (the graph runs "
            f"{', '.join(exported.info.ops)})"
        )


def _float32_attributes(model: Any, level: str) -> list[str]:
    """``op.attr = value`` for each float attribute (an ONNX float attribute is a float32)
    that looks rounded, in the graph ONNX Runtime runs at ``level``: its own ops (the
    ``Attention`` scale, the ``LayerNormalization`` epsilon) and the kernels it fused in."""
    import tempfile
    from pathlib import Path

    import onnx
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[level])
    options.log_severity_level = 3
    with tempfile.TemporaryDirectory() as folder:
        options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(options.optimized_model_filepath)
    return [
        f"{node.op_type}.{attr.name} = {attr.f!r}"
        for node in optimized.graph.node
        for attr in node.attribute
        if attr.type == onnx.AttributeProto.FLOAT and _float32_rounded(attr.f)
    ]


def _default_opset() -> int:
    """torch.onnx's default opset for dynamo=True export."""
    from torch.onnx._constants import ONNX_DEFAULT_OPSET  # type: ignore[attr-defined]

    return int(ONNX_DEFAULT_OPSET)


def with_onnx(
    base: Adapter,
    *,
    opset: int | None = None,
    levels: Iterable[str] = tuple(OPT_LEVELS),
    reuse: bool | None = None,
) -> OnnxRuntimeAdapter:
    """``base`` and its subjects exported to ONNX (see the module docstring)."""
    return OnnxRuntimeAdapter(base, opset=opset, levels=levels, reuse=reuse)  # type: ignore[arg-type]
