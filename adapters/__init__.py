"""The adapter contract, the torch helper, and the built-in adapters.

``load_adapter`` resolves ``--adapter``: a built-in name (``reference``, ``torch.nn``,
``mutants.<bug_class>`` from ``tck.adapters.mutants.CATALOG``), or ``module:attr`` naming an
Adapter instance, an Adapter subclass, or a zero-argument factory; the ``TCK_ADAPTER``
environment variable is the fallback. What points the adapter at a given model comes as
arguments (``tck run`` passes them to its worker processes as pytest options): ``model``
(a checkpoint, handed to the factory as its one argument), ``component`` and ``map_path``
(an ``nn.Module`` instance, or ``onnx:FILE``: an exported graph).
"""

from __future__ import annotations

import importlib
import os
import sys

from .base import (
    INPUTS,
    OUTPUTS,
    Adapter,
    AdapterFailure,
    Arrays,
    OutputShapeMismatch,
    Subject,
    Unsupported,
)
from .config_space import ConfigSpace, Times
from .torch_module import ABSENT, Absent, Chunk, Param, TorchEntry, TorchHandle, TorchModuleAdapter

BUILTIN: dict[str, str] = {
    "reference": "tck.adapters.reference:adapter",
    "torch.nn": "tck.adapters.torch_nn:adapter",
    "hf.bert": "tck.adapters.hf:bert",  # needs transformers (the hf extra)
    "hf.vit": "tck.adapters.hf:vit",
    "hf.gpt2": "tck.adapters.hf_decoder:gpt2",  # decoder-only (SPEC.md §11), transformers
    "hf.llama": "tck.adapters.hf_decoder:llama",
    "timm.vit": "tck.adapters.timm_vit:adapter",  # needs timm, and so a working torchvision
}
DEFAULT_ADAPTER = "reference"


class AdapterError(Exception):
    """The adapter named on the command line cannot be used; the message says why."""


def _text(err: BaseException) -> str:
    """One line of an exception from user code (its str() may raise, or hold anything)."""
    from tck.reports.text import safe_str, visible

    return visible(safe_str(err)).replace("\n", " ")[:500]


def load_adapter(
    spec: str | None = None,
    *,
    model: str | os.PathLike[str] | None = None,
    component: str | None = None,
    map_path: str | os.PathLike[str] | None = None,
) -> Adapter:
    """The adapter ``spec`` names; ``model`` is passed to a factory as its one argument (a
    checkpoint folder or file), ``component`` and ``map_path`` describe an ``nn.Module``
    instance or the graph of ``onnx:FILE``. ``AdapterError`` in one line if unusable."""
    spec = spec or os.environ.get("TCK_ADAPTER") or DEFAULT_ADAPTER
    if spec.startswith("onnx:"):
        if model is not None:
            raise AdapterError("--model does not apply to --adapter onnx:FILE")
        return _onnx_file(spec.removeprefix("onnx:"), component, map_path)
    target = BUILTIN.get(spec, spec)
    if spec.startswith("mutants.") and ":" not in spec:  # the catalog of tck.adapters.mutants
        from .mutants import CATALOG

        name = spec.removeprefix("mutants.")
        if name not in CATALOG:
            raise AdapterError(f"unknown mutant {spec!r}; the mutants are: {', '.join(CATALOG)}")
        target = f"{CATALOG[name]}:adapter"
    if ":" not in target:
        raise AdapterError(
            f"unknown adapter {spec!r}: use a built-in name ({', '.join(BUILTIN)}) "
            "or module:attr naming your adapter"
        )
    module_name, _, attr = target.partition(":")
    if "" not in sys.path and os.getcwd() not in sys.path:
        # `tck run` (a console script) finds a module in the current folder as `python -m
        # tck run` does; appended, so that it never shadows an installed package
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as err:  # the user's module may fail in any way (exit too)
        raise AdapterError(
            f"cannot import {module_name!r} for adapter {spec!r}: {type(err).__name__}: "
            f"{_text(err)}"
        ) from err
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise AdapterError(f"module {module_name!r} has no attribute {attr!r}") from None
    obj = _instance(obj, spec, component, map_path)
    if model is not None:
        obj = _with_model(obj, spec, model)
    if callable(obj) and not isinstance(obj, Adapter):  # an Adapter subclass or a factory
        try:
            obj = obj()
        except (Exception, SystemExit) as err:  # the user's factory may fail in any way
            raise AdapterError(
                f"{spec!r} is callable, so it was called without arguments to make the "
                f"adapter, and that failed: {type(err).__name__}: {_text(err)}; name an Adapter "
                "instance, an Adapter subclass, or a factory that takes no arguments"
            ) from err
    missing = [m for m in ("subjects", "build", "run") if not callable(getattr(obj, m, None))]
    if missing or not isinstance(getattr(obj, "name", None), str):
        raise AdapterError(
            f"{spec!r} is a {type(obj).__name__}, not an adapter: it needs a 'name' and the "
            f"methods subjects(), build() and run() (missing: {', '.join(missing) or 'name'}); "
            "see tck.adapters.Adapter"
        )
    return obj


def _with_model(factory: object, spec: str, model: str | os.PathLike[str]) -> object:
    """``factory(model)``: the adapter of the checkpoint ``model`` (tck run --model)."""
    from .checkpoint_config import ModelError

    if isinstance(factory, Adapter) or not callable(factory):
        raise AdapterError(
            f"--model applies to an adapter factory that takes the checkpoint; {spec!r} is a "
            f"{type(factory).__name__}"
        )
    try:
        return factory(os.fspath(model))
    except (ImportError, ModelError) as err:  # one line: a missing extra, an unusable model
        raise AdapterError(str(err)) from None
    except (Exception, SystemExit) as err:
        raise AdapterError(
            f"{spec!r} could not load the model {os.fspath(model)!r}: {type(err).__name__}: "
            f"{_text(err)}"
        ) from err


def _onnx_file(
    file: str, component: str | None, map_path: str | os.PathLike[str] | None
) -> Adapter:
    """The adapter of an exported graph (tck.adapters.onnx_file)."""
    if not component:
        raise AdapterError("--adapter onnx:FILE needs --component (e.g. --component encoder_layer)")
    from . import onnx_file

    try:
        return onnx_file.OnnxFileAdapter(file, component, onnx_file.read_map(map_path))
    except (ImportError, onnx_file.OnnxFileError) as err:  # no onnx extra; a bad file or map
        raise AdapterError(str(err)) from None


def _instance(
    obj: object,
    spec: str,
    component: str | None = None,
    map_path: str | os.PathLike[str] | None = None,
) -> object:
    """An ``nn.Module`` instance as its adapter (tck.adapters.instance); a module *class* is
    refused (calling it would build fresh weights, not the ones the user means)."""
    from torch import nn

    from . import instance

    if isinstance(obj, type) and issubclass(obj, nn.Module):
        raise AdapterError(
            f"{spec!r} is the class {obj.__name__}, not an instance: name a ready nn.Module "
            "instance with its weights (e.g. layer = MyLayer(...); layer.load_state_dict(...)) "
            "or an Adapter"
        )
    if isinstance(obj, nn.Module):
        try:
            return instance.adapt(obj, spec, component, map_path)
        except instance.InstanceError as err:
            raise AdapterError(str(err)) from None
    if component or map_path:
        raise AdapterError(
            f"--component and --map apply to an nn.Module instance (or onnx:FILE); {spec!r} is "
            f"a {type(obj).__name__}"
        )
    return obj


__all__ = [
    "ABSENT",
    "BUILTIN",
    "DEFAULT_ADAPTER",
    "INPUTS",
    "OUTPUTS",
    "Absent",
    "Adapter",
    "AdapterError",
    "AdapterFailure",
    "Arrays",
    "Chunk",
    "ConfigSpace",
    "OutputShapeMismatch",
    "Param",
    "Subject",
    "Times",
    "TorchEntry",
    "TorchHandle",
    "TorchModuleAdapter",
    "Unsupported",
    "load_adapter",
]
