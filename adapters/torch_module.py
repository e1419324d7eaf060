"""Turn a torch ``nn.Module`` plus a parameter-name mapping into an adapter.

    from tck.adapters import TorchEntry, TorchModuleAdapter

    adapter = TorchModuleAdapter("my-model", [
        TorchEntry(
            "encoder_layer",
            make=lambda config: MyLayer(config.d_model, config.n_heads, config.d_ff),
            forward=lambda layer, x, key_padding=None: layer(x, pad=~key_padding),
            param_map={"self_attn.q.weight": "attn.wq.weight", ...},  # canonical -> yours
            conventions=Conventions(eps=1e-6),
        ),
    ])

``forward`` receives the module and the component's inputs (``INPUTS``) as torch tensors
in the module's dtype; masks are boolean keep-masks (True = may attend) and ``causal`` is
a Python bool. Convert them to your module's convention there: that is where polarity
bugs live, and the checks probe it. Inputs the component may take but ``forward`` does
not accept are never passed, and checks that need them skip with a reason.

Precision and gradients come for free: ``build(..., dtype="float16")`` converts the module
(parameters and buffers) to that dtype, ``run`` feeds it inputs of that dtype and returns
its output in it, and ``grad`` differentiates the same ``forward`` with torch autograd and
maps parameter gradients to canonical names through ``param_map``. An entry that cannot run
in some dtype lists the ones it can (``TorchEntry(dtypes=("float64", "float32"))``); an op
torch lacks for a dtype on this device ("not implemented for 'Half'") becomes
``Unsupported``, so the check skips with that reason.

Devices too: ``build(..., device="cuda")`` moves the module there after ``make`` (which
builds on the CPU, so the same seed gives the same parameters everywhere), ``run`` and
``grad`` move the inputs there and bring the results back as numpy arrays. Every subject
runs on the CPU and on CUDA unless its entry narrows it (``TorchEntry(devices=("cuda",))``
for a CUDA kernel). A ``forward`` that makes tensors of its own (a causal mask) makes them
on its inputs' device (``device=q.device``).
"""

from __future__ import annotations

import inspect
import linecache
import math
import re
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from tck.reference import Config, Conventions, param_shapes

from .base import (
    DTYPES,
    Adapter,
    Arrays,
    OutputShapeMismatch,
    ParamsMismatch,
    Subject,
    Unsupported,
)
from .config_space import ConfigSpace
from .devices import DEVICE_KINDS, device_kind

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


CPU = torch.device("cpu")


@dataclass(frozen=True)
class Chunk:
    """A canonical parameter stored as one of ``parts`` equal slices of a fused tensor along
    dim 0, e.g. nn.MultiheadAttention's ``in_proj_weight`` holds q, k and v:
    ``{"q.weight": Chunk("in_proj_weight", 0, 3), "k.weight": Chunk("in_proj_weight", 1, 3)}``.
    """

    name: str
    index: int
    parts: int
    # the axis the slices are cut along, and whether the canonical [out, in] matrix is the
    # slice transposed: GPT-2's Conv1D stores [in, out], its fused c_attn [D, 3D], so q is
    # Chunk("attn.c_attn.weight", 0, 3, dim=1, transposed=True)
    dim: int = 0
    transposed: bool = False

    def of(self, tensor: torch.Tensor) -> torch.Tensor:
        """This slice of ``tensor`` in the canonical layout (a view: writes reach it)."""
        part = tensor.chunk(self.parts, dim=self.dim)[self.index]
        return part.T if self.transposed else part


@dataclass(frozen=True)
class Param:
    """A canonical parameter stored in another layout in the module tensor ``name``. From the
    module's tensor to the canonical one: ``slice`` = (dim, start, stop) of a fused tensor,
    then ``permute`` (a dims order; ``(1, 0)`` transposes), then a reshape to ``shape``
    (default: the canonical shape the spec gives). The inverse is applied on ``load``, the same
    on ``params`` and on ``grad``. A fused qkv weight [3D, D]:
    ``{"q.weight": Param("qkv.weight", slice=(0, 0, D)), "k.weight": Param(..., (0, D, 2*D))}``;
    a weight stored [in, out] (``x @ w``): ``Param("w", permute=(1, 0))``; a class token stored
    [1, D]: ``Param("cls", shape=(1, 1, D))``.
    """

    name: str
    slice: tuple[int, int, int] | None = None
    permute: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Absent:
    """A canonical parameter the module does not have (a bias it was built without): it reads
    as zeros, loads only as zeros (any other value is ``Unsupported``, and the suite checks the
    module with its own parameters instead), and has no gradient (gradient checks skip).
    Declaring the part without bias (``Config.attention_bias=False``, ...) is the exact way."""


ABSENT = Absent()

ParamRef = str | Chunk | Param | Absent

ParamMap = dict[str, ParamRef]


def linear_params(ours: str, theirs: str, *, bias: bool = True) -> ParamMap:
    """The map of one linear (or norm) layer: ``ours``weight -> ``theirs``weight, and bias."""
    mapping: ParamMap = {f"{ours}weight": f"{theirs}weight"}
    if bias:
        mapping[f"{ours}bias"] = f"{theirs}bias"
    return mapping


def stack_params(
    layer: Callable[[str, str], ParamMap],
    n_layers: int,
    ours: str,
    theirs: str,
    final_norm: str | None = None,
) -> ParamMap:
    """The map of a stack of ``n_layers`` layers: ``layer(ours_i, theirs_i)`` for each, where
    ``ours_i`` is ``{ours}layers.{i}.`` (SPEC.md §0.2) and ``theirs_i`` is ``theirs`` with
    ``{i}`` filled in (``"encoder.layer.{i}."``); then the final norm, ``{ours}norm.`` ->
    ``final_norm``, when the stack has one."""
    mapping: ParamMap = {}
    for i in range(n_layers):
        mapping.update(layer(f"{ours}layers.{i}.", theirs.format(i=i)))
    if final_norm is not None:
        mapping.update(linear_params(f"{ours}norm.", final_norm))
    return mapping


@dataclass
class TorchEntry:
    """One subject of a torch adapter: how to make it, call it, and find its parameters."""

    component: str
    make: Callable[[Config], nn.Module]
    forward: Callable[..., Any]
    param_map: Mapping[str, ParamRef] | Callable[[Config], Mapping[str, ParamRef]] | None = None
    conventions: Conventions | None = None
    name: str | None = None  # default: the component
    notes: tuple[str, ...] = ()
    dtypes: tuple[str, ...] | None = None  # default: the adapter's
    grad_dtypes: tuple[str, ...] | None = None  # dtypes grad() is offered in; default: dtypes
    # §11.6: step(module, cache, **inputs) -> (output, cache), one incremental decoding call
    # with the module's own cache (None on the first call); see Adapter.step
    step: Callable[..., Any] | None = None
    # §11.9: step (and forward) may be called without positions: Subject.derives_positions
    derives_positions: bool | Literal["cache", "padding"] = False
    devices: tuple[str, ...] | None = None  # device kinds; default: the adapter's
    devices_note: str | None = None  # why a device is not offered (the skip's reason)
    # The part(s) of the built module that are the subject, when ``make`` builds more (a whole
    # model for one of its layers); default: the module. ``params.count`` counts their
    # parameters (SPEC.md §10.3).
    holds: Callable[[nn.Module], nn.Module | Iterable[nn.Module]] | None = None
    # Config fields the subject fixes (Subject.config), e.g. {"attention_bias": False}
    config: Mapping[str, Any] | None = None
    # The configs the subject supports (Subject.supports, SPEC.md §0.6): e.g. an MLP fixed at
    # 4 x d_model is ConfigSpace(relations={"d_ff": Times("d_model", 4)})
    supports: ConfigSpace | None = None

    def subject(self) -> Subject:
        return Subject(
            name=self.name or self.component,
            component=self.component,
            conventions=self.conventions,  # type: ignore[arg-type]
            notes=self.notes,
            config=self.config,
            supports=self.supports,
            derives_positions=self.derives_positions,
        )


@dataclass
class TorchHandle:
    entry: TorchEntry
    subject: Subject
    module: nn.Module
    config: Config
    dtype: torch.dtype = torch.float64
    device: torch.device = CPU

    def canonical_shape(self, name: str) -> tuple[int, ...]:
        shapes = param_shapes(self.subject.component, self.config, self.subject.conventions)
        return tuple(shapes.get(name, ()))

    def param_map(self) -> Mapping[str, ParamRef]:
        mapping = self.entry.param_map
        if mapping is None:  # the module's names are the canonical ones
            shapes = param_shapes(self.subject.component, self.config, self.subject.conventions)
            return {name: name for name in shapes}
        return mapping(self.config) if callable(mapping) else mapping

    def owners(self) -> dict[str, str]:
        """Canonical parameter -> the module tensor it is read from (a fused qkv weight's
        three parts share one; an ``Absent`` one has none): which canonical parameters are
        separate modules and which are slices of one (the diagnosis names a projection read
        from its neighbour by that, SPEC.md §0.2, §3.4)."""
        return {name: _owner(ref) for name, ref in self.param_map().items() if _owner(ref)}


def _dtype_name(dtype: torch.dtype) -> str:
    return next((k for k, v in TORCH_DTYPES.items() if v == dtype), str(dtype))


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """numpy has no bfloat16: such results cross the boundary as float32 (exactly)."""
    tensor = tensor.detach().to("cpu")
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.to(torch.float32)
    return tensor.numpy()


# Keyed weakly: a forward made per build (a closure over the module) is not kept alive here.
_ACCEPTED: weakref.WeakKeyDictionary[Callable[..., Any], frozenset[str] | None] = (
    weakref.WeakKeyDictionary()
)


def _accepted_inputs(forward: Callable[..., Any]) -> frozenset[str] | None:
    """Names ``forward`` accepts after the module (None: it takes **kwargs, so all). Cached:
    every call asks, and ``inspect.signature`` was a tenth of a failing mask check's time."""
    try:
        return _ACCEPTED[forward]
    except (KeyError, TypeError):  # not seen yet, or not weakly referable / hashable
        pass
    params = list(inspect.signature(forward).parameters.values())[1:]
    names = (
        None
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
        else frozenset(p.name for p in params)
    )
    try:
        _ACCEPTED[forward] = names
    except TypeError:  # such a forward is asked every call, as before
        pass
    return names


class TorchModuleAdapter(Adapter):
    """An adapter over torch modules, float64 by default, always in eval mode.

    ``dtype`` is what ``build`` makes when the suite asks for float64 (leave it); ``dtypes``
    the precisions its subjects offer (SPEC.md §10.7), narrowed per entry by
    ``TorchEntry.dtypes``; ``devices`` the device kinds (``tck.adapters.devices``), narrowed
    per entry by ``TorchEntry.devices``.
    """

    def __init__(
        self,
        name: str,
        entries: list[TorchEntry],
        *,
        dtype: torch.dtype = torch.float64,
        dtypes: tuple[str, ...] = DTYPES,
        devices: tuple[str, ...] = ("cpu", "cuda"),
    ):
        self.name = name
        self.dtype = dtype
        self._dtypes = tuple(dtypes)
        self._devices = tuple(devices)
        self._entries = {(e.name or e.component): e for e in entries}
        if len(self._entries) != len(entries):
            raise ValueError(f"adapter {name!r}: two entries share a subject name")
        for entry in entries:
            unknown = set(entry.dtypes or self._dtypes) - set(DTYPES)
            if unknown:
                raise ValueError(
                    f"adapter {name!r}: unknown dtype(s) {sorted(unknown)} for "
                    f"{entry.name or entry.component}; choose from {', '.join(DTYPES)}"
                )
            unknown = set(entry.devices or self._devices) - set(DEVICE_KINDS)
            if unknown:
                raise ValueError(
                    f"adapter {name!r}: unknown device kind(s) {sorted(unknown)} for "
                    f"{entry.name or entry.component}; choose from {', '.join(DEVICE_KINDS)}"
                )

    def subjects(self) -> list[Subject]:
        return [e.subject() for e in self._entries.values()]

    def dtypes(self, subject: Subject) -> tuple[str, ...]:
        entry = self._entries[subject.name]
        return tuple(entry.dtypes or self._dtypes)

    def devices(self, subject: Subject) -> tuple[str, ...]:
        entry = self._entries[subject.name]
        return tuple(entry.devices or self._devices)

    def build(
        self,
        subject: Subject,
        config: Config,
        *,
        seed: int,
        dtype: str = "float64",
        device: str = "cpu",
    ) -> TorchHandle:
        entry = self._entries[subject.name]
        if dtype not in self.dtypes(subject):
            raise Unsupported(
                f"{self.name}:{subject.name} offers {', '.join(self.dtypes(subject))}, not {dtype}"
            )
        self.require_device(subject, device)
        torch_dtype = self.dtype if dtype == "float64" else TORCH_DTYPES[dtype]
        _seed(seed, device)
        module = entry.make(config).to(torch_dtype).eval()
        target = torch.device(device)
        if target.type != "cpu" or _off_cpu(module):  # .to() walks every submodule
            module = module.to(target)
        return TorchHandle(entry, subject, module, config, torch_dtype, target)

    def require_device(self, subject: Subject, device: str) -> None:
        """Unsupported, with the entry's reason, for a device kind ``subject`` lacks."""
        offered = self.devices(subject)
        if device_kind(device) not in offered:
            why = self._entries[subject.name].devices_note
            raise Unsupported(
                f"{self.name}:{subject.name} runs on {', '.join(offered)}, not {device}"
                + (f": {why}" if why else "")
            )

    def run(self, handle: TorchHandle, inputs: Arrays) -> np.ndarray:
        kwargs = self._kwargs(handle, inputs)
        with torch.no_grad(), self._lacking_ops(handle):
            out = self._output(handle.entry.forward(handle.module, **kwargs))
        return _numpy(out.to(handle.dtype) if out.is_floating_point() else out)

    def grad(
        self, handle: TorchHandle, inputs: Arrays, cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        offered = handle.entry.grad_dtypes
        if offered is not None and _dtype_name(handle.dtype) not in offered:
            raise Unsupported(
                f"{self.name}:{handle.subject.name} offers gradients in {', '.join(offered)}, "
                f"not {_dtype_name(handle.dtype)} (see its notes)"
            )
        kwargs = self._kwargs(handle, inputs)
        leaves = {
            k: v.requires_grad_(True)
            for k, v in kwargs.items()
            if isinstance(v, torch.Tensor) and v.is_floating_point()
        }
        named = _named_parameters(handle.module)
        mapping = handle.param_map()
        absent = sorted(k for k, ref in mapping.items() if isinstance(ref, Absent))
        if absent:
            raise Unsupported(
                f"{self.name}:{handle.subject.name} has no {', '.join(absent)} (param_map: "
                "Absent), so it has no gradient for them; declare the part without bias "
                "(Config.attention_bias / ffn_bias / norm_bias / head_bias) to check gradients"
            )
        # Several canonical parameters may live in one tensor (Chunk, Param slice):
        # differentiate each module parameter once, then slice.
        owners = sorted({_owner(ref) for ref in mapping.values()})
        for owner in owners:
            self._lookup(handle, named, owner).requires_grad_(True)
        targets = [*leaves.values(), *(named[o] for o in owners)]
        with torch.enable_grad(), self._lacking_ops(handle):
            out = self._output(handle.entry.forward(handle.module, **kwargs))
            if tuple(out.shape) != tuple(np.shape(cotangent)):
                raise OutputShapeMismatch(
                    f"{self.name}: the cotangent has shape {tuple(np.shape(cotangent))}, the "
                    f"output {tuple(out.shape)}"
                )
            # a copy: autograd may accumulate into the incoming gradient's buffer in place,
            # which would change the caller's cotangent
            seed = torch.from_numpy(np.array(cotangent, dtype=np.float64, copy=True))
            seed = seed.to(device=out.device, dtype=out.dtype)
            grads = torch.autograd.grad(out, targets, seed, allow_unused=True)
        by_target = [
            torch.zeros_like(t) if g is None else g for t, g in zip(targets, grads, strict=True)
        ]
        result = {k: _numpy(g) for k, g in zip(leaves, by_target, strict=False)}
        of_owner = dict(zip(owners, by_target[len(leaves) :], strict=True))
        for canonical, ref in mapping.items():
            g = _to_canonical(of_owner[_owner(ref)], ref, handle.canonical_shape(canonical))
            result[f"params.{canonical}"] = _numpy(g)
        return result

    def step(self, handle: TorchHandle, inputs: Arrays, cache: Any) -> tuple[np.ndarray, Any]:
        if handle.entry.step is None:
            raise Unsupported(
                f"{self.name}:{handle.subject.name} does not decode incrementally (TorchEntry.step)"
            )
        kwargs = {k: self._to_torch(k, v, handle.dtype, handle.device) for k, v in inputs.items()}
        with torch.no_grad(), self._lacking_ops(handle):
            out, cache = handle.entry.step(handle.module, cache, **kwargs)
        out = self._output(out)
        return _numpy(out.to(handle.dtype) if out.is_floating_point() else out), cache

    def _kwargs(self, handle: TorchHandle, inputs: Arrays) -> dict[str, Any]:
        accepted = _accepted_inputs(handle.entry.forward)
        missing = [k for k in inputs if accepted is not None and k not in accepted]
        if missing:
            raise Unsupported(
                f"{self.name}:{handle.subject.name} does not take {', '.join(missing)}"
            )
        return {k: self._to_torch(k, v, handle.dtype, handle.device) for k, v in inputs.items()}

    @staticmethod
    def _output(out: Any) -> torch.Tensor:
        return out[0] if isinstance(out, (tuple, list)) else out

    @contextmanager
    def _lacking_ops(self, handle: TorchHandle) -> Iterator[None]:
        """torch's "not implemented for 'Half'" on this device: the dtype is unsupported here,
        not the implementation wrong."""
        try:
            yield
        except (RuntimeError, NotImplementedError) as err:
            transposed = _weight_multiplied_transposed(handle, err)
            if transposed is not None:
                raise transposed from err
            if handle.dtype == torch.float64 or "not implemented for" not in str(err):
                raise
            first = str(err).strip().splitlines()[0]
            raise Unsupported(
                f"{self.name}:{handle.subject.name} cannot compute in {handle.dtype} on this "
                f"device: torch says {first}"
            ) from err

    def _to_torch(
        self,
        name: str,
        value: np.ndarray,
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
    ) -> Any:
        value = np.asarray(value)
        if name == "causal":
            return bool(value)
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        if device is not None and device.type != "cpu":
            tensor = tensor.to(device)
        return tensor.to(dtype or self.dtype) if tensor.is_floating_point() else tensor

    def params(self, handle: TorchHandle) -> dict[str, np.ndarray]:
        named = _named_parameters(handle.module)
        out = {}
        for canonical, ref in handle.param_map().items():
            if isinstance(ref, Absent):
                out[canonical] = np.zeros(handle.canonical_shape(canonical))
                continue
            tensor = self._lookup(handle, named, _owner(ref))  # whole, then its layout
            tensor = _to_canonical(tensor, ref, handle.canonical_shape(canonical))
            out[canonical] = tensor.detach().to(torch.float64).cpu().numpy().copy()
        return out

    def param_count(self, handle: TorchHandle) -> int:
        """The scalars the module itself holds (``module.parameters()``, a shared tensor once),
        whatever ``param_map`` shows: an extra LayerNorm counts (SPEC.md §10.3)."""
        return sum(p.numel() for p in _held_parameters(handle).values())

    def unmapped_count(self, handle: TorchHandle) -> dict[str, int]:
        """The scalars of module tensors that ``param_map`` reads in slices (``Param.slice``,
        ``Chunk``) and no canonical parameter reads, by tensor: a position table's offset
        rows (OPT's, BioGPT's and BART's learned tables keep 2 rows before position 0, read
        as ``Param(table, slice=(0, 2, 2 + max_len))``). ``params.count`` shows them as
        held beyond the spec instead of failing (SPEC.md §10.3)."""
        named = _named_parameters(handle.module)
        counted = _held_parameters(handle)
        read: dict[str, int] = {}
        sliced: set[str] = set()
        for canonical, ref in handle.param_map().items():
            if isinstance(ref, Chunk) or (isinstance(ref, Param) and ref.slice is not None):
                sliced.add(ref.name)
            owner = _owner(ref)
            if owner:
                size = math.prod(handle.canonical_shape(canonical))
                read[owner] = read.get(owner, 0) + size
        out = {}
        for name in sorted(sliced):
            tensor = named.get(name)
            if tensor is not None and id(tensor) in counted and tensor.numel() > read[name]:
                out[name] = tensor.numel() - read[name]
        return out

    def load(self, handle: TorchHandle, params: Arrays) -> None:
        named = _named_parameters(handle.module)
        mapping = handle.param_map()
        unknown = sorted(set(params) - set(mapping))
        if unknown:
            raise ValueError(f"{self.name}: no mapping for canonical parameters {unknown}")
        missing = sorted(set(mapping) - set(params))
        if missing:
            raise ValueError(f"{self.name}: canonical parameter {missing[0]} is missing")
        for canonical, ref in mapping.items():  # before anything is written
            if isinstance(ref, Absent) and np.any(np.asarray(params[canonical]) != 0):
                raise Unsupported(
                    f"{self.name}:{handle.subject.name} has no {canonical} (param_map: Absent) "
                    "and can hold only zeros there"
                )
        with torch.no_grad():
            for canonical, ref in mapping.items():
                if isinstance(ref, Absent):
                    continue
                target = self._lookup(handle, named, ref)
                value = torch.from_numpy(np.asarray(params[canonical], dtype=np.float64))
                if isinstance(ref, Param):
                    value = _from_canonical(value, ref, target)
                elif _singletons_apart(tuple(value.shape), tuple(target.shape)):
                    value = value.reshape(target.shape)  # a plain name: up to singletons
                if tuple(target.shape) != tuple(value.shape):
                    raise ParamsMismatch(
                        "params.shape_differs",
                        f"{self.name}: {canonical} has shape {tuple(value.shape)}, the module's "
                        f"{ref} slot has {tuple(target.shape)}: the module is not built for "
                        "this config, or its param_map names another slot (SPEC.md §0.2)",
                    )
                target.copy_(value.to(device=target.device, dtype=target.dtype))

    def _lookup(self, handle: TorchHandle, named: Mapping[str, Any], ref: ParamRef) -> torch.Tensor:
        """The module's tensor of ``ref``: a Chunk's or a Param's slice, as a view."""
        name = _owner(ref)
        if name not in named:
            raise self._not_built(handle, named, name)
        tensor = named[name]
        if isinstance(ref, Chunk):
            return ref.of(tensor)
        if isinstance(ref, Param) and ref.slice is not None:
            dim, start, stop = ref.slice
            return tensor.narrow(dim, start, stop - start)
        return tensor

    def _not_built(
        self, handle: TorchHandle, named: Mapping[str, Any], name: str
    ) -> ParamsMismatch:
        """The error for a parameter ``name`` that ``param_map`` names and the module lacks.
        When every parameter the module has is mapped (no name the map could have meant
        instead) and what is missing is a stack's final norm (§7.3, §9.4, §11.1: canonical
        ``norm.*``, ``encoder.norm.*``, ``decoder.norm.*``), the module was built without
        that norm: ``blocks.final_norm_missing``, the cause, not the names."""
        mapping = handle.param_map()
        canonical = sorted(c for c, r in mapping.items() if _owner(r) == name)
        unmapped = set(named) - {_owner(r) for r in mapping.values()}
        where = f"{self.name}:{handle.subject.name}"
        if not unmapped and canonical and all(_FINAL_NORM.fullmatch(c) for c in canonical):
            return ParamsMismatch(
                "blocks.final_norm_missing",
                f"{where}: the module has no parameter {name!r}, the stack's final norm "
                f"({', '.join(canonical)}), and no parameter its param_map leaves unnamed: "
                "the stack was built without its final norm, which this config's norm "
                "placement ends it with (SPEC.md §7.3, §0.2)",
            )
        return ParamsMismatch(
            "params.names_differ",
            f"{where}: the module has no parameter {name!r}, which its param_map names for a "
            "canonical parameter of this config: the module was built without it (a bias "
            "left out where the config has one), or the map names it wrongly (it has "
            f"{', '.join(sorted(named)) or 'none'}; SPEC.md §0.2)",
        )


# a stack's final norm among the canonical names (SPEC.md §0.2): ``norm.weight`` of an
# encoder, decoder or causal LM, ``encoder.norm.bias`` of a seq2seq model or a ViT
_FINAL_NORM = re.compile(r"((encoder|decoder)\.)?norm\.(weight|bias)")


def _held_parameters(handle: TorchHandle) -> dict[int, torch.Tensor]:
    """The subject's own parameters (``TorchEntry.holds``, default the module), a shared
    tensor once, by id."""
    held = handle.entry.holds(handle.module) if handle.entry.holds else handle.module
    parts = [held] if isinstance(held, nn.Module) else list(held)
    return {id(p): p for part in parts for p in part.parameters()}


def _named_parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every name of every parameter, a shared one under each of its names: a stack built
    as ``[layer] * n`` holds one layer's tensors under ``layers.0.*`` and ``layers.1.*``
    alike, and its map names both. Loading then writes each layer's weights into the one
    tensor (the last wins), so the checks find the sharing instead of a missing name."""
    return dict(module.named_parameters(remove_duplicate=False))


def _owner(ref: ParamRef) -> str:
    """The module parameter a reference reads."""
    if isinstance(ref, Absent):
        return ""
    return ref if isinstance(ref, str) else ref.name


# torch's words for a 2-D product whose inner sizes differ: (n x width) @ (rows x cols)
_PRODUCT_SHAPES = re.compile(
    r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)"
)


def _weight_multiplied_transposed(handle: TorchHandle, err: BaseException) -> ParamsMismatch | None:
    """``params.weight_reshaped`` for a product that raised because a weight was used in the
    other orientation: an input of the layer's own input width met a (out x in) matrix, the
    transpose of what fits (``x @ w.T`` on an [in, out] weight, or ``F.linear``, which
    multiplies by ``w.T``, on one). The weight is the parameter of those sizes held by the
    innermost module of the traceback (of several, the one its raising line names); its
    canonical parameters (``param_map``) say its input width. A right weight handed a tensor
    of its *output* width raises the same way and is not named: the canonical widths tell the
    two apart. A square weight used so raises nothing and applies the transposed map
    (SPEC.md §0.2)."""
    found = _PRODUCT_SHAPES.search(str(err))
    if found is None:
        return None
    width, rows, cols = (int(n) for n in found.groups()[1:])
    if cols != width or rows == width:
        return None
    owners = {id(m): name for name, m in handle.module.named_modules()}
    frames, tb = [], err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):  # the innermost module of the model that raised
        prefix = owners.get(id(frame.f_locals.get("self")))
        if prefix is None:
            continue
        module = frame.f_locals["self"]
        held = {
            local: tensor
            for local, tensor in module.named_parameters(recurse=False)
            if tensor.ndim == 2 and sorted(tensor.shape) == sorted((rows, width))
        }
        if len(held) > 1:  # several of those sizes: the one the raising line names
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            held = {local: t for local, t in held.items() if re.search(rf"\b{local}\b", line)}
        if len(held) != 1:
            return None
        for local, tensor in held.items():
            name = f"{prefix}.{local}" if prefix else local
            shapes = [
                handle.canonical_shape(canonical)
                for canonical, ref in handle.param_map().items()
                if _owner(ref) == name
            ]
            out = sum(shape[0] for shape in shapes if len(shape) == 2)
            if shapes and out == rows and all(s[-1:] == (width,) for s in shapes):
                return ParamsMismatch(
                    "params.weight_reshaped",
                    f"{handle.subject.name}: {name} (stored {tuple(tensor.shape)}) got an input "
                    f"of its own input width {width} and the product raised with a {rows}x{cols} "
                    "matrix, the transpose of the one that fits: the weight is multiplied in "
                    "the other orientation (x @ w.T on an [in, out] weight, or F.linear, which "
                    "takes w.T, on one), as ports between (in, out) and (out, in) layouts do; a "
                    "square weight used so applies the transposed map silently (SPEC.md §0.2). "
                    f"torch: {found.group(0)}",
                )
        return None
    return None


def _singletons_apart(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Do shapes ``a`` and ``b`` differ only by dimensions of size 1 (a 0-d gain and a
    canonical ``[1]``, ``[D]`` and ``[1, D]``)? Then one is a reshape of the other with the
    same element order, and no transposition can hide in it."""
    return a != b and [n for n in a if n != 1] == [n for n in b if n != 1]


def _to_canonical(tensor: torch.Tensor, ref: ParamRef, shape: tuple[int, ...]) -> torch.Tensor:
    """A module tensor (or its gradient), whole, in the canonical layout of ``ref``."""
    if isinstance(ref, Chunk):
        return ref.of(tensor)
    if not isinstance(ref, Param):  # a plain name: the canonical shape up to singletons
        return tensor.reshape(shape) if _singletons_apart(tuple(tensor.shape), shape) else tensor
    if ref.slice is not None:
        dim, start, stop = ref.slice
        tensor = tensor.narrow(dim, start, stop - start)
    if ref.permute is not None:
        tensor = tensor.permute(*ref.permute)
    target = ref.shape or shape
    return tensor.reshape(target) if target else tensor


def _from_canonical(value: torch.Tensor, ref: Param, slot: torch.Tensor) -> torch.Tensor:
    """A canonical value in the layout of the module's ``slot`` (the inverse of
    ``_to_canonical`` after the slice)."""
    if ref.permute is None:
        return value.reshape(slot.shape) if value.numel() == slot.numel() else value
    permuted = tuple(slot.shape[d] for d in ref.permute)
    if value.numel() != slot.numel():
        return value  # the shape check below names the mismatch
    inverse = [0] * len(ref.permute)
    for i, d in enumerate(ref.permute):
        inverse[d] = i
    return value.reshape(permuted).permute(*inverse)


def _seed(seed: int, device: str) -> None:
    """``torch.manual_seed(seed)``; for a CPU build only the CPU generator's part of it.

    The module is made on the CPU either way; torch.manual_seed also queues a seed for each
    accelerator backend (CUDA, XPU, MTIA) that formats the caller's stack every call while
    that backend is not initialised: ~0.9 ms a build under pytest and hypothesis, about 1 s
    of a 20 s ``tck run`` (measured). The CPU generator gets the same seed, so a
    CPU build's parameters are those of ``torch.manual_seed``."""
    if device_kind(device) == "cpu":
        torch.default_generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def _off_cpu(module: nn.Module) -> bool:
    """Whether a parameter or buffer of ``module`` lives elsewhere than on the CPU."""
    return any(t.device.type != "cpu" for t in (*module.parameters(), *module.buffers()))
