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
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from tck.reference import Config, Conventions, param_shapes

from .base import Adapter, Arrays, Subject, Unsupported


@dataclass(frozen=True)
class Chunk:
    """A canonical parameter stored as one of ``parts`` equal slices of a fused tensor along
    dim 0, e.g. nn.MultiheadAttention's ``in_proj_weight`` holds q, k and v:
    ``{"q.weight": Chunk("in_proj_weight", 0, 3), "k.weight": Chunk("in_proj_weight", 1, 3)}``.
    """

    name: str
    index: int
    parts: int


ParamRef = str | Chunk


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

    def subject(self) -> Subject:
        return Subject(
            name=self.name or self.component,
            component=self.component,
            conventions=self.conventions,  # type: ignore[arg-type]
            notes=self.notes,
        )


@dataclass
class TorchHandle:
    entry: TorchEntry
    subject: Subject
    module: nn.Module
    config: Config

    def param_map(self) -> Mapping[str, ParamRef]:
        mapping = self.entry.param_map
        if mapping is None:  # the module's names are the canonical ones
            shapes = param_shapes(self.subject.component, self.config, self.subject.conventions)
            return {name: name for name in shapes}
        return mapping(self.config) if callable(mapping) else mapping


def _accepted_inputs(forward: Callable[..., Any]) -> set[str] | None:
    """Names ``forward`` accepts after the module (None: it takes **kwargs, so all)."""
    params = list(inspect.signature(forward).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


class TorchModuleAdapter(Adapter):
    """An adapter over torch modules, float64 by default, always in eval mode."""

    def __init__(self, name: str, entries: list[TorchEntry], *, dtype: torch.dtype = torch.float64):
        self.name = name
        self.dtype = dtype
        self._entries = {(e.name or e.component): e for e in entries}
        if len(self._entries) != len(entries):
            raise ValueError(f"adapter {name!r}: two entries share a subject name")

    def subjects(self) -> list[Subject]:
        return [e.subject() for e in self._entries.values()]

    def build(self, subject: Subject, config: Config, *, seed: int) -> TorchHandle:
        entry = self._entries[subject.name]
        torch.manual_seed(seed)
        module = entry.make(config).to(self.dtype).eval()
        return TorchHandle(entry, subject, module, config)

    def run(self, handle: TorchHandle, inputs: Arrays) -> np.ndarray:
        accepted = _accepted_inputs(handle.entry.forward)
        missing = [k for k in inputs if accepted is not None and k not in accepted]
        if missing:
            raise Unsupported(
                f"{self.name}:{handle.subject.name} does not take {', '.join(missing)}"
            )
        kwargs = {k: self._to_torch(k, v) for k, v in inputs.items()}
        with torch.no_grad():
            out = handle.entry.forward(handle.module, **kwargs)
        if isinstance(out, (tuple, list)):
            out = out[0]
        return out.detach().to("cpu").numpy()

    def _to_torch(self, name: str, value: np.ndarray) -> Any:
        value = np.asarray(value)
        if name == "causal":
            return bool(value)
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        return tensor.to(self.dtype) if tensor.is_floating_point() else tensor

    def params(self, handle: TorchHandle) -> dict[str, np.ndarray]:
        named = dict(handle.module.named_parameters())
        out = {}
        for canonical, ref in handle.param_map().items():
            tensor = self._lookup(handle, named, ref)
            out[canonical] = tensor.detach().to(torch.float64).cpu().numpy().copy()
        return out

    def load(self, handle: TorchHandle, params: Arrays) -> None:
        named = dict(handle.module.named_parameters())
        mapping = handle.param_map()
        unknown = sorted(set(params) - set(mapping))
        if unknown:
            raise ValueError(f"{self.name}: no mapping for canonical parameters {unknown}")
        with torch.no_grad():
            for canonical, ref in mapping.items():
                if canonical not in params:
                    raise ValueError(f"{self.name}: canonical parameter {canonical} is missing")
                target = self._lookup(handle, named, ref)
                value = torch.from_numpy(np.asarray(params[canonical], dtype=np.float64))
                if tuple(target.shape) != tuple(value.shape):
                    raise ValueError(
                        f"{self.name}: {canonical} has shape {tuple(value.shape)}, the module's "
                        f"{ref} slot has {tuple(target.shape)}"
                    )
                target.copy_(value.to(target.dtype))

    def _lookup(self, handle: TorchHandle, named: Mapping[str, Any], ref: ParamRef) -> torch.Tensor:
        name = ref.name if isinstance(ref, Chunk) else ref
        if name not in named:
            raise ValueError(
                f"{self.name}:{handle.subject.name}: the module has no parameter {name!r} "
                f"(it has {', '.join(sorted(named)) or 'none'})"
            )
        tensor = named[name]
        if isinstance(ref, Chunk):
            return tensor.chunk(ref.parts, dim=0)[ref.index]
        return tensor
