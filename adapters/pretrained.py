"""The instance as it is: a local ``save_pretrained`` folder, checked with its own weights.

    tck run --adapter hf.bert --model DIR      (and hf.vit)

The folder is read with ``local_files_only=True`` and ``use_safetensors=True``: never a
download, never a pickle. The subjects are those of ``tck.adapters.hf`` at the checkpoint's
own sizes (``Subject.supports``, a ConfigSpace, fixes d_model, heads, d_ff, layers, ... and
the longest sequence its position table takes; SPEC.md §0.6), with
the conventions its config states (LayerNorm eps, activation). The suite reads the
checkpoint's canonical parameters (``params``) and never writes them: ``load`` is
``Unsupported``, so the oracle checks compare with the checkpoint's own weights, and checks
that need other parameters (the shipped fixtures) skip with that reason. In float64 every
check of a subject shares the loaded model's own parts (read-only: nothing writes them); a
build in another dtype is a copy, so a check that converts it (float16) leaves them alone.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tck.usage import read_user_json

from .base import Arrays, Config, Subject, Unsupported
from .config_space import ConfigSpace
from .real_size import stack_skip
from .torch_module import TorchEntry, TorchHandle, TorchModuleAdapter

ENV = "TCK_MODEL"  # the folder, for the worker processes of a run (set by tck run --model)
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh"}
ACTIVATIONS["gelu_pytorch_tanh"] = "gelu_tanh"
LAYERED = ("encoder_layer", "encoder", "vit")  # the subjects eps and activation apply to


class ModelError(Exception):
    """The checkpoint folder cannot be used; the message says why and what to do."""


def _folder(folder: str | os.PathLike[str] | None) -> Path:
    folder = folder or os.environ.get(ENV)
    if not folder:
        raise ModelError(f"no checkpoint folder: pass --model DIR (or set ${ENV})")
    path = Path(folder)
    if not path.is_dir() or not (path / "config.json").exists():  # a device: read_user_json says
        raise ModelError(
            f"--model {str(path)!r} is not a save_pretrained folder (it needs config.json and "
            "model.safetensors); save one with model.save_pretrained(DIR)"
        )
    # bounded and regular before transformers parses it (a pipe, a device, deep nesting)
    read_user_json(
        path / "config.json",
        what=f"--model {str(path)!r}: config.json",
        hint="save the folder again with model.save_pretrained(DIR)",
        error=ModelError,
    )
    odd = [p.name for p in path.glob("*.safetensors") if not p.is_file()]
    if odd:
        raise ModelError(
            f"--model {str(path)!r}: {', '.join(odd)} is not a regular file; save the folder "
            "again with model.save_pretrained(DIR)"
        )
    if not any(path.glob("*.safetensors")):
        raise ModelError(
            f"--model {str(path)!r} has no *.safetensors file; tck never loads pickles "
            "(pytorch_model.bin): save it again with save_pretrained(DIR, safe_serialization=True)"
        )
    return path


def _load(cls: Any, path: Path, implementation: str, **kwargs: Any) -> nn.Module:
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()  # its load report and progress bars are not ours to print
    logging.disable_progress_bar()
    try:
        model = cls.from_pretrained(
            path,
            local_files_only=True,
            use_safetensors=True,
            attn_implementation=implementation,
            **kwargs,
        )
    except Exception as err:  # transformers raises many kinds: one line for the user
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelError(f"cannot load {str(path)!r} as {cls.__name__}: {first}") from None
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
    return model.to(torch.float64).eval()


def _activation(hidden_act: Any, path: Path) -> str:
    if not isinstance(hidden_act, str) or hidden_act not in ACTIVATIONS:
        raise ModelError(
            f"{str(path)!r}: hidden_act={hidden_act!r} is not one tck checks "
            f"({', '.join(ACTIVATIONS)})"
        )
    return ACTIVATIONS[hidden_act]


class _AsIs:
    """What makes an adapter check the checkpoint as it is (mixed into a TorchModuleAdapter).
    Its sizes are each subject's ConfigSpace: the suite builds nothing else (a check that
    needs other sizes skips, naming the checkpoint's)."""

    fixed: dict[str, Any]
    folder: Path
    # The harness reads ``params`` straight away instead of drawing canonical parameters
    # for a ``load`` that refuses them (a BERT-base encoder's draw: 2.4 s, per instance).
    loads_params = False

    def load(self, handle: TorchHandle, params: Arrays) -> None:
        raise Unsupported(
            f"the checkpoint {self.folder.name} is checked with its own weights, which tck "
            "never overwrites; this check needs other parameters"
        )

    def real_length(self, subject: Subject) -> int | None:
        """The sequence length the checkpoint runs at, for ``subject`` (BERT: its position
        table, 512 for BERT-base; ViT: its patches and the class token, 197 at 224 px): the
        oracle comparison makes one call at it (``equality.oracle``). None: no such length."""
        if subject.component not in ("mha", "encoder_layer", "encoder"):
            return None
        return getattr(self, "positions", None)

    def stack_plan(self, subject: Subject, check: str, params: dict[str, Any]) -> str | None:
        """Why ``check`` does not run on ``subject``, a whole stack of a real-size checkpoint
        (``real_size.stack_skip``); None when it runs."""
        return stack_skip(subject, check, params, self.dtypes(subject))

    def build(
        self,
        subject: Subject,
        config: Config,
        *,
        seed: int,
        dtype: str = "float64",
        device: str = "cpu",
    ) -> TorchHandle:
        """In float64 on the CPU, every check of a subject shares one read-only module per
        process: the loaded checkpoint's own parts (``copy_parts(deep=False)``, nothing
        copied) where the adapter knows them, else one copy. Nothing writes it: ``load``
        refuses, the forwards run in eval mode under ``no_grad``, and ``grad`` asks
        ``torch.autograd.grad``, which accumulates nothing. In another dtype or on another
        device, a fresh copy converted from the checkpoint (which stays float64)."""
        plain = dtype == "float64" and device == "cpu" and self.dtype == torch.float64
        if not plain or dtype not in self.dtypes(subject):  # its checks, its reasons
            return super().build(subject, config, seed=seed, dtype=dtype, device=device)
        shared = self.__dict__.setdefault("_shared", {})  # subject name -> its module
        view = self.__dict__.get("views", {}).get(subject.name)
        if subject.name not in shared and view is not None:  # the loaded model's own parts
            shared[subject.name] = copy_parts(*view, deep=False).eval()
        if subject.name not in shared:
            handle = super().build(subject, config, seed=seed, dtype=dtype, device=device)
            shared[subject.name] = handle.module
            return handle
        entry = self._entries[subject.name]
        self.require_device(subject, device)
        return TorchHandle(entry, subject, shared[subject.name], config, torch.float64)

    def params(self, handle: TorchHandle) -> dict[str, np.ndarray]:
        """The canonical parameters, exported once per shared copy and handed out read-only
        (a new dict each time: a check may replace an entry, never write into one)."""
        if self.__dict__.get("_shared", {}).get(handle.subject.name) is not handle.module:
            return super().params(handle)  # type: ignore[misc]
        exported = self.__dict__.setdefault("_exported", {})  # subject name -> its params
        if handle.subject.name not in exported:
            values = super().params(handle)  # type: ignore[misc]
            for value in values.values():
                value.setflags(write=False)
            exported[handle.subject.name] = values
        return dict(exported[handle.subject.name])


# The parts of the model each subject's forward reads (None: the whole model). Each build
# copies only those: a BERT-base embedding table alone is 188 MB in float64, and copying the
# whole checkpoint for one layer's check made a 2-layer BERT-base run need over 20 GB.
PARTS: dict[str, dict[str, tuple[str, ...] | None]] = {
    "hf.bert": {
        "mha": ("encoder.layer.0",),
        "encoder_layer": ("encoder.layer.0",),
        "encoder": ("encoder",),
        "embedding": ("embeddings.word_embeddings",),
    },
    "hf.vit": {
        "mha": ("vit.layers.0",),
        "encoder_layer": ("vit.layers.0",),
        "encoder": ("vit.layers", "vit.layernorm"),
    },
}


def copy_parts(model: nn.Module, paths: tuple[str, ...] | None, *, deep: bool = True) -> nn.Module:
    """Deep copies of ``model``'s submodules at ``paths`` (dotted, ``encoder.layer.0``) in a
    shell that holds them under the same names (``shell.encoder.layer[0]``), with the model's
    ``config``; the whole model copied when ``paths`` is None. Parameters are never shared
    with ``model``, so converting the copy (float16) leaves the checkpoint alone. With
    ``deep=False`` the shell holds the model's own submodules (a view: nothing copied)."""
    if paths is None:
        return copy.deepcopy(model) if deep else model
    shell = nn.Module()
    if hasattr(model, "config"):
        shell.config = model.config
    for path in paths:
        *parents, leaf = path.split(".")
        source, target = model, shell
        for name in parents:
            source = source[int(name)] if name.isdigit() else getattr(source, name)
            if name not in target._modules:
                target.add_module(name, nn.Module())
            target = target._modules[name]
        part = source[int(leaf)] if leaf.isdigit() else getattr(source, leaf)
        part = copy.deepcopy(part) if deep else part
        if leaf.isdigit():  # index 0 of a ModuleList: the only index the forwards read
            if leaf != "0":
                raise ValueError(f"copy_parts copies layer 0 of a list, not {path!r}")
            parent_name = parents[-1]
            grand = shell
            for name in parents[:-1]:
                grand = grand._modules[name]
            grand._modules[parent_name] = nn.ModuleList([part])
        else:
            target.add_module(leaf, part)
    return shell


def _entries(
    base: TorchModuleAdapter,
    models: dict[str, nn.Module],
    fixed: dict[str, Any],
    max_len: int | None = None,
    views: dict[str, tuple[nn.Module, tuple[str, ...] | None]] | None = None,
    **conv: Any,
) -> list[TorchEntry]:
    space = ConfigSpace(fixed=fixed, max_len=max_len)
    out = []
    for entry in base._entries.values():
        name = entry.name or entry.component
        if entry.param_map is None:  # attention: no parameters, nothing of the checkpoint
            continue
        impl = name.partition("[")[2].rstrip("]") or "eager"
        model = models[impl]
        conventions = entry.conventions
        if conventions is not None and entry.component in LAYERED:
            conventions = dataclasses.replace(conventions, **conv)
        paths = PARTS.get(base.name, {}).get(entry.component)
        if views is not None:
            views[name] = (model, paths)
        out.append(
            dataclasses.replace(
                entry,
                make=lambda c, model=model, paths=paths: copy_parts(model, paths),
                conventions=conventions,
                supports=space,
                notes=(*entry.notes, _describe(space)),
            )
        )
    return out


def _describe(space: ConfigSpace) -> str:
    return f"the checkpoint as saved, with its own weights: {space.describe()}"


class _PretrainedBert(_AsIs, TorchModuleAdapter):
    pass


def bert(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """hf.bert on the BertModel saved in ``folder`` (default: $TCK_MODEL)."""
    from transformers import BertModel

    from . import hf

    path = _folder(folder)
    models = {
        impl: _load(BertModel, path, impl, add_pooling_layer=False) for impl in hf.IMPLEMENTATIONS
    }
    c = models["eager"].config
    fixed = {
        "d_model": c.hidden_size,
        "n_heads": c.num_attention_heads,
        "d_ff": c.intermediate_size,
        "n_layers": c.num_hidden_layers,
        "vocab_size": c.vocab_size,
        "padding_idx": c.pad_token_id,
    }
    conv = {"eps": float(c.layer_norm_eps), "activation": _activation(c.hidden_act, path)}
    views: dict[str, tuple[nn.Module, tuple[str, ...] | None]] = {}
    entries = _entries(hf.bert, models, fixed, c.max_position_embeddings, views, **conv)
    adapter = _PretrainedBert(f"hf.bert:{path.name}", entries)
    adapter.views = views
    adapter.fixed, adapter.folder = fixed, path
    adapter.positions = int(c.max_position_embeddings)
    return adapter


def vit(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """hf.vit on the ViTForImageClassification saved in ``folder`` (default: $TCK_MODEL)."""
    from transformers import ViTForImageClassification

    from . import hf

    path = _folder(folder)
    models = {impl: _load(ViTForImageClassification, path, impl) for impl in hf.IMPLEMENTATIONS}
    c = models["eager"].config
    if not getattr(c, "qkv_bias", True):
        raise ModelError(
            f"{str(path)!r}: qkv_bias=False with a biased output projection; hf.vit maps the "
            "canonical layout with every attention bias"
        )
    fixed = {
        "d_model": c.hidden_size,
        "n_heads": c.num_attention_heads,
        "d_ff": c.intermediate_size,
        "n_layers": c.num_hidden_layers,
        "image_size": c.image_size,
        "patch_size": c.patch_size,
        "channels": c.num_channels,
        "n_classes": models["eager"].classifier.out_features,
    }
    conv = {"eps": float(c.layer_norm_eps), "activation": _activation(c.hidden_act, path)}
    views: dict[str, tuple[nn.Module, tuple[str, ...] | None]] = {}
    entries = _entries(hf.vit, models, fixed, views=views, **conv)
    adapter = _PretrainedViT(f"hf.vit:{path.name}", entries)
    adapter.views = views
    adapter.fixed, adapter.folder = fixed, path
    adapter.positions = (c.image_size // c.patch_size) ** 2 + 1  # the patches and [CLS]
    return adapter


class _PretrainedViT(_AsIs, TorchModuleAdapter):
    """hf.vit's eager subjects keep their dtypes (float32 and below: a float32 softmax)."""
