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

The decoder-only families (``hf.gpt2``, ``hf.llama``) are checked the same way, and
``tck run --model DIR`` without ``--adapter`` picks the adapter from ``config.json``
(``auto``). Every folder is read strictly (``checkpoint_config``): a ``config.json`` key that
changes the maths is read and shown in the subjects' notes, or refused by name; a size the
file lacks is refused; tensors the model does not use, or needs and lacks, are refused by
name, except a head tck does not check (a pooler, a classifier), which is listed as not
checked. The checkpoint is read from disk once: the second attention implementation is a
twin module that shares its parameters (``_twin``). See docs/checkpoints.md.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import os
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tck.usage import INSTALL, read_user_json

from . import checkpoint_config, real_size
from .base import Arrays, Config, OutputShapeMismatch, Subject, Unsupported
from .checkpoint_config import ModelError
from .config_space import ConfigSpace
from .real_size import stack_skip
from .torch_module import TorchEntry, TorchHandle, TorchModuleAdapter, _numpy

ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh"}
ACTIVATIONS["gelu_pytorch_tanh"] = "gelu_tanh"
LAYERED = ("encoder_layer", "encoder", "vit")  # the subjects eps and activation apply to
# transformers' attention implementations whose subjects share one copy of the weights
TWIN_IMPLEMENTATIONS = ("eager", "sdpa")
# which of them a checkpoint is checked with (``attention_choice``; tck run --attention)
ATTENTION_ENV = "TCK_ATTENTION"
DEFAULT_ATTENTION = "sdpa"  # transformers' choice where torch has it (every torch it supports)
# the subjects the oracle comparison also runs at the checkpoint's own length
REAL_LENGTH_COMPONENTS = ("mha", "encoder_layer", "encoder")
REAL_LENGTH_COMPONENTS += ("causal_self_attention", "decoder_block", "causal_lm")
# The longest call the oracle comparison makes on a decoder whose context is longer: its
# cost grows with the square of the length (SPEC.md §11.1), docs/checkpoints.md
MAX_REAL_LENGTH = 2048


def _folder(folder: str | os.PathLike[str] | None) -> Path:
    if not folder:
        raise ModelError("no checkpoint folder: pass --model DIR")
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


def _model_class(name: str) -> Any:
    """transformers' class ``name``, imported once the folder is known to be one (a wrong
    path is the first thing to say); where transformers is missing, the line says how to
    install it."""
    try:
        import transformers
    except Exception as err:  # a broken install fails in many ways, not only ImportError
        raise ImportError(
            f"--model needs transformers ({INSTALL['hf']}); importing it failed: "
            f"{type(err).__name__}: {err}"
        ) from err
    return getattr(transformers, name)


# Top-level parts of a checkpoint that tck does not check (a pooler, a task head): listed in
# the report as not checked when the file holds them, never refused, never silently dropped.
HEADS = frozenset(
    {"pooler", "classifier", "cls", "qa_outputs", "score", "multiple_choice_head", "lm_head"}
)


def _not_checked(key: str, prefix: str) -> bool:
    parts = key.split(".")
    if parts[0] == prefix and len(parts) > 1:
        parts = parts[1:]
    return parts[0] in HEADS


def _names(keys: set[str] | list[str], limit: int = 4) -> str:
    ordered = sorted(keys)
    more = f" and {len(ordered) - limit} more" if len(ordered) > limit else ""
    return ", ".join(ordered[:limit]) + more


def _load(
    cls: Any, path: Path, implementation: str = "eager", **kwargs: Any
) -> tuple[nn.Module, list[str]]:
    """The model of class ``cls`` saved in ``path``, in float64 and eval mode, and the
    tensors of the file it does not use that belong to a head tck does not check. Any other
    tensor the file holds and the model does not use, or the model needs and the file lacks,
    is refused by name: transformers would drop it, or draw it at random, with a warning."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()  # its load report is read below, not printed
    logging.disable_progress_bar()
    try:
        model, info = cls.from_pretrained(
            path,
            local_files_only=True,
            use_safetensors=True,
            attn_implementation=implementation,
            output_loading_info=True,
            **kwargs,
        )
    except Exception as err:  # transformers raises many kinds: one line for the user
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelError(f"cannot load {str(path)!r} as {cls.__name__}: {first}") from None
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
    prefix = getattr(cls, "base_model_prefix", "")
    unexpected = set(info.get("unexpected_keys") or ())
    heads = sorted(k for k in unexpected if _not_checked(k, prefix))
    unused = unexpected - set(heads)
    where = f"{str(path)!r}:"
    if unused:
        raise ModelError(
            f"{where} tensors {_names(unused)} are in the checkpoint but {cls.__name__} does "
            "not use them (an option tck does not read?); tck refuses rather than drop them"
        )
    missing = set(info.get("missing_keys") or ())
    if missing:
        raise ModelError(
            f"{where} {cls.__name__} needs tensors {_names(missing)}, which the checkpoint "
            "lacks (transformers would draw them at random); tck refuses"
        )
    mismatched = info.get("mismatched_keys") or ()
    if mismatched:
        names = {m[0] if isinstance(m, tuple) else str(m) for m in mismatched}
        raise ModelError(f"{where} tensors {_names(names)} have shapes config.json does not give")
    return model.to(torch.float64).eval(), heads


def _twin(model: nn.Module, implementation: str) -> nn.Module:
    """``model`` with another attention implementation, sharing its parameters and buffers
    (nothing read from disk again, nothing copied but the modules and the config)."""
    if implementation == model.config._attn_implementation:
        return model
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    twin = copy.deepcopy(model, shared)
    if hasattr(twin, "set_attn_implementation"):
        twin.set_attn_implementation(implementation)
    # A shell of parts (copy_parts) holds the model's config and each part a copy of it; the
    # mask is built from the one and the attention reads the other: set every one
    configs = {id(m.config): m.config for m in twin.modules() if hasattr(m, "config")}
    for config in configs.values():
        config._attn_implementation = implementation
    return twin.eval()


def _implementations(
    model: nn.Module, offered: tuple[str, ...], fixed: dict[str, Any]
) -> tuple[dict[str, nn.Module], str]:
    """The attention implementations checked (``attention_choice``), each a twin of
    ``model`` sharing its tensors, and the sentence that says which for every subject's
    note."""
    chosen, sentence = attention_choice(offered, fixed)
    return {impl: _twin(model, impl) for impl in chosen}, sentence


def attention_choice(
    offered: tuple[str, ...], fixed: dict[str, Any]
) -> tuple[tuple[str, ...], str]:
    """Which of transformers' attention implementations ``offered`` a checkpoint of sizes
    ``fixed`` is checked with, and why, in one sentence. ``$TCK_ATTENTION`` (``tck run
    --attention``) names them; unset or ``auto``: every one offered, except at real size (a
    layer of more than ``real_size.REAL_SIZE_LAYER_PARAMS`` parameters), where each would
    repeat every check of the stack and the layer at a real layer's cost: the one
    transformers runs by default, ``DEFAULT_ATTENTION``."""
    given = os.environ.get(ATTENTION_ENV, "").strip().lower()
    if given not in ("", "auto"):
        names = tuple(dict.fromkeys(n.strip() for n in given.split(",") if n.strip()))
        unknown = [n for n in names if n not in offered]
        if unknown or not names:
            raise ModelError(
                f"--attention ({ATTENTION_ENV}) names {', '.join(unknown) or 'nothing'}: "
                f"choose from {', '.join(offered)} (comma-separated), or auto"
            )
        left = [n for n in offered if n not in names]
        return names, (
            f"Attention implementations checked: {', '.join(names)} (as --attention asks)"
            + (f"; not checked: {', '.join(left)}." if left else ".")
        )
    size = real_size.layer_size(fixed.get("d_model"), fixed.get("d_ff"))
    if size is None or size <= real_size.REAL_SIZE_LAYER_PARAMS or len(offered) < 2:
        return offered, f"Attention implementations checked: {', '.join(offered)}."
    left = [n for n in offered if n != DEFAULT_ATTENTION]
    return (DEFAULT_ATTENTION,), (
        f"Attention implementations checked: {DEFAULT_ATTENTION} (transformers' default); "
        f"not checked: {', '.join(left)}, since at real size (a layer of {size:,} "
        "parameters) each implementation repeats every check of the layer and the stack: "
        f"--attention {','.join(offered)} checks {'each' if len(left) > 1 else 'both'}."
    )


def _read(path: Path, name: str) -> checkpoint_config.Reading:
    """The strict reading of ``path``'s config.json for the family ``name`` (refused in one
    line when it names another family or a key tck does not read)."""
    raw = checkpoint_config.read_config(path)
    found = checkpoint_config.family(raw, path)
    if found != name:
        raise ModelError(
            f"{str(path)!r}: config.json names model_type {found!r} "
            f"({checkpoint_config.ADAPTERS[found]}), not {name!r}; drop --adapter to let tck "
            "pick it"
        )
    return checkpoint_config.check(raw, name, path)


def _report(reading: checkpoint_config.Reading, loaded: Any, heads: list[str]) -> str:
    """One note for every subject: each key read and its source, and the parts not checked."""
    lines = checkpoint_config.show(reading, loaded)
    text = "config.json, read strictly: " + "; ".join(lines) + "."
    if heads:
        text += f" Not checked (in the checkpoint, outside every subject): {', '.join(heads)}."
    return text


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
        if subject.component not in REAL_LENGTH_COMPONENTS or self.twin_made_it(subject):
            return None
        return getattr(self, "positions", None)

    def _twins(self, subject: Subject) -> dict[str, Subject]:
        """A real-size stack's implementations by name (``eager``, ``sdpa``), ``subject``
        among them; empty for anything else."""
        stem, _, implementation = subject.name.partition("[")
        if implementation not in ("eager]", "sdpa]") or not real_size.applies(subject):
            return {}
        names = {f"{stem}[{name}]": name for name in ("eager", "sdpa")}
        return {names[s.name]: s for s in self.subjects() if s.name in names}

    def twin_made_it(self, subject: Subject) -> bool:
        """Whether ``subject`` is a real-size stack whose twin makes the full-length call in
        float64: the same weights, the same code but the attention kernel, whose full-length
        call the layer subjects make. Its oracle comparison then makes the usual calls only
        (docs/performance.md, "Real sizes"): the model's own forward at full length (a
        2048-token float64 forward of every layer for the small Llama) is made once, not
        twice. The ``[sdpa]`` stack makes it where it runs in float64 (transformers' eager
        attention forms every score matrix and its float32 softmax: 2.7 CPU s a layer of the
        small Llama at 2048 tokens, sdpa 1.5), else the ``[eager]`` one."""
        twins = self._twins(subject)
        maker = next(
            (
                twins[n]
                for n in ("sdpa", "eager")
                if n in twins and "float64" in self.dtypes(twins[n])
            ),
            None,
        )
        return maker is not None and maker.name != subject.name

    def leaves_to_eager(self, subject: Subject) -> bool:
        """Whether ``subject`` is a real-size ``[sdpa]`` stack whose ``[eager]`` twin, in
        float64, runs ``real_size.TWIN_LEAVES`` (the float64 gradients) for both."""
        eager = self._twins(subject).get("eager")
        return (
            subject.name.endswith("[sdpa]")
            and eager is not None
            and "float64" in self.dtypes(eager)
        )

    def stack_plan(self, subject: Subject, check: str, params: dict[str, Any]) -> str | None:
        """Why ``check`` does not run on ``subject``, a whole stack of a real-size checkpoint
        (``real_size.stack_skip``; for an ``[sdpa]`` twin whose ``[eager]`` twin runs in
        float64, also ``real_size.TWIN_LEAVES``; a stack another holds whole,
        ``real_size.container_skip``) or a real-size layer whose attention is a subject of
        its own (``real_size.attention_skip``); None when it runs."""
        why = stack_skip(subject, check, params, self.dtypes(subject))
        why = why or real_size.attention_skip(subject, check, self.subjects())
        why = why or real_size.container_skip(subject, check, self.subjects())
        if why is None and check in real_size.TWIN_LEAVES and self.leaves_to_eager(subject):
            stem = subject.name.partition("[")[0]
            why = (
                f"real-size stack: {subject.name} is {stem}[eager] with the sdpa attention "
                f"kernel (the same weights and code); {check} runs on {stem}[eager] and on "
                "the sdpa layer subjects, whose attention is this kernel"
            )
        return why

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
        if dtype not in self.dtypes(subject):  # its checks, its reasons
            return self.refuse_dtype(subject, config, seed=seed, dtype=dtype, device=device)
        if not plain and device == "cpu" and dtype in ("float32",):
            # hf.llama's subjects run in float32 at best: one converted copy per subject,
            # shared the same way (a 135 M-parameter model is 0.5 GB in float32)
            converted = self.__dict__.setdefault("_converted", {})
            key = (subject.name, dtype)
            stem, _, impl = subject.name.partition("[")
            twins = [h for (n, d), h in converted.items() if (n.split("[")[0], d) == (stem, dtype)]
            twin = twins[0] if twins else None
            implementation = impl.rstrip("]")
            twinned = twin is not None and hasattr(twin.module, "config")  # transformers'
            if key not in converted and twinned and implementation in TWIN_IMPLEMENTATIONS:
                module = _twin(twin.module, implementation)  # its twin's tensors
                converted[key] = dataclasses.replace(twin, subject=subject, module=module)
                converted[key].entry = self._entries[subject.name]
            if key not in converted:
                converted[key] = super().build(subject, config, seed=seed, dtype=dtype)
            return dataclasses.replace(converted[key], config=config)
        if not plain:
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

    def _exact_views(self, handle: TorchHandle) -> dict[str, np.ndarray] | None:
        """The canonical parameters of a float32 copy of the checkpoint as read-only views of
        the float64 checkpoint, where its float64 values are float32 numbers already (a
        checkpoint saved in float32, as most are): the copy holds the same numbers, so its
        export to the oracle needs no float64 copy of its own (the small Llama's: 1.1 GB,
        ViT-B/16's: 0.65 GB). None where a value would round, or the copy is not one of the
        checkpoint's float32 copies: ``_export`` converts then."""
        view = self.__dict__.get("views", {}).get(handle.subject.name)
        if handle.dtype != torch.float32 or handle.device.type != "cpu" or view is None:
            return None
        source = copy_parts(*view, deep=False)
        first = next(source.parameters(), None)
        if first is None or first.dtype != torch.float64:
            return None
        wide = dataclasses.replace(handle, module=source, dtype=torch.float64)
        values = _export(self, wide)  # type: ignore[arg-type]
        for value in values.values():
            # numpy's cast rounds to nearest even, as torch's conversion of the copy did
            if not np.array_equal(value.astype(np.float32), value):
                return None
        return values

    def grad_each(
        self,
        handle: TorchHandle,
        inputs: Arrays,
        cotangent: np.ndarray,
        take: Callable[[str, np.ndarray], None],
        only: Collection[str] | None = None,
    ) -> None:
        """``grad``, each gradient handed to ``take(name, array)`` as soon as the backward
        pass has formed it and then let go (``stream_gradients``): a real-size stack's
        gradients are its float64 size (GPT-2 small: 1 GB), and the check compares each
        with the reference's as it comes (``careful.gradients_each``). With ``only``, those
        parameters' and the inputs' alone."""
        stream_gradients(self, handle, inputs, cotangent, take, only)  # type: ignore[arg-type]

    def refuse_dtype(
        self, subject: Subject, config: Config, *, seed: int, dtype: str, device: str
    ) -> TorchHandle:
        """A dtype the subject does not offer: the adapter's own refusal, with its reason."""
        return super().build(subject, config, seed=seed, dtype=dtype, device=device)  # type: ignore[misc]

    def params(self, handle: TorchHandle) -> dict[str, np.ndarray]:
        """The canonical parameters, exported once per shared copy and handed out read-only
        (a new dict each time: a check may replace an entry, never write into one)."""
        kept = [self.__dict__.get("_shared", {}).get(handle.subject.name)]
        kept += [h.module for h in self.__dict__.get("_converted", {}).values()]
        if not any(module is handle.module for module in kept):
            return super().params(handle)  # type: ignore[misc]
        # eager and sdpa twins hold the same tensors (``_twin``): one export serves both
        first = next(handle.module.parameters(), None)
        key = (handle.subject.name.partition("[")[0], id(first))
        exported = self.__dict__.setdefault("_exported", {})  # (subject, tensors) -> params
        if key in exported:
            return dict(exported[key])
        values = self._exact_views(handle)
        view = values is not None
        if values is None:
            values = _export(self, handle)
        # Views of the checkpoint cost nothing to keep, nor does a layer's copy; a real-size
        # stack's converted copy's export (float32 tensors as float64 arrays: ViT-B/16's is
        # 0.65 GB) is made per instance, and goes with the check that asked for it.
        view = view or first is None
        view = view or (first.dtype == torch.float64 and first.device.type == "cpu")
        if view or not real_size.applies(handle.subject):
            exported[key] = values
        return dict(values)


def stream_gradients(
    adapter: TorchModuleAdapter,
    handle: TorchHandle,
    inputs: Arrays,
    cotangent: np.ndarray,
    take: Callable[[str, np.ndarray], None],
    only: Collection[str] | None = None,
) -> None:
    """``adapter.grad``, each gradient handed to ``take(name, array)`` as soon as the
    backward pass has formed it and then let go: a parameter's gradient as its last use in
    the backward is reached (a post-accumulate hook on the module's own parameter, whose
    ``.grad`` is cleared at once), the inputs' at the end. The same names and values as
    ``grad``, never the whole set at once. The array handed over is valid during the call
    only (``take`` copies what it keeps). Where the module's parameters are not leaves, or
    already hold a gradient, or a part is Absent, ``grad``'s dict is handed over instead,
    one array at a time. With ``only`` (canonical parameter names), the gradients of those
    parameters and the inputs alone: the backward pass forms no other parameter's."""
    from .torch_module import Absent, _dtype_name, _named_parameters, _owner, _to_canonical

    offered = handle.entry.grad_dtypes
    if offered is not None and _dtype_name(handle.dtype) not in offered:
        raise Unsupported(
            f"{adapter.name}:{handle.subject.name} offers gradients in {', '.join(offered)}, "
            f"not {_dtype_name(handle.dtype)} (see its notes)"
        )
    named = _named_parameters(handle.module)
    mapping = handle.param_map()
    if only is not None:
        mapping = {k: ref for k, ref in mapping.items() if k in only}
        take = _only(take, {f"params.{k}" for k in only})
    if any(isinstance(ref, Absent) for ref in mapping.values()):
        _take_all(adapter.grad(handle, inputs, cotangent), take)  # grad's own refusal
        return
    tensors: dict[int, torch.Tensor] = {}
    canonical_of: dict[int, list[tuple[str, Any]]] = {}
    for canonical, ref in mapping.items():
        tensor = adapter._lookup(handle, named, _owner(ref))
        tensors[id(tensor)] = tensor
        canonical_of.setdefault(id(tensor), []).append((canonical, ref))
    if any(not t.is_leaf or t.grad is not None for t in tensors.values()):
        _take_all(adapter.grad(handle, inputs, cotangent), take)
        return
    kwargs = adapter._kwargs(handle, inputs)
    leaves = {
        k: v.requires_grad_(True)
        for k, v in kwargs.items()
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    }
    done: set[int] = set()

    def hand_over(tensor: torch.Tensor) -> None:
        gradient, tensor.grad = tensor.grad, None
        done.add(id(tensor))
        for canonical, ref in canonical_of[id(tensor)]:
            shape = handle.canonical_shape(canonical)
            take(f"params.{canonical}", _numpy(_to_canonical(gradient, ref, shape)))
        del gradient

    hooks = []
    try:
        for tensor in tensors.values():
            tensor.requires_grad_(True)
            hooks.append(tensor.register_post_accumulate_grad_hook(hand_over))
        with torch.enable_grad(), adapter._lacking_ops(handle):
            out = adapter._output(handle.entry.forward(handle.module, **kwargs))
            if tuple(out.shape) != tuple(np.shape(cotangent)):
                raise OutputShapeMismatch(
                    f"{adapter.name}: the cotangent has shape {tuple(np.shape(cotangent))}, "
                    f"the output {tuple(out.shape)}"
                )
            seed = torch.from_numpy(np.array(cotangent, dtype=np.float64, copy=True))
            seed = seed.to(device=out.device, dtype=out.dtype)
            targets = [*leaves.values(), *tensors.values()]
            torch.autograd.backward(out, seed, inputs=targets)
            del out, seed
    finally:
        for hook in hooks:
            hook.remove()
        for tensor in tensors.values():
            tensor.grad = None
    for name, leaf in leaves.items():
        gradient = torch.zeros_like(leaf) if leaf.grad is None else leaf.grad
        take(name, _numpy(gradient))
    for key, tensor in tensors.items():  # no gradient reached it: zeros, as grad gives
        if key not in done:
            for canonical, ref in canonical_of[key]:
                shape = handle.canonical_shape(canonical)
                zeros = _to_canonical(torch.zeros_like(tensor), ref, shape)
                take(f"params.{canonical}", _numpy(zeros))


def _only(
    take: Callable[[str, np.ndarray], None], names: set[str]
) -> Callable[[str, np.ndarray], None]:
    """``take`` for the inputs' gradients and the parameters' in ``names`` alone."""

    def taken(name: str, value: np.ndarray) -> None:
        if not name.startswith("params.") or name in names:
            take(name, value)

    return taken


def _take_all(grads: dict[str, np.ndarray], take: Callable[[str, np.ndarray], None]) -> None:
    for name in list(grads):
        take(name, grads.pop(name))


def _export(adapter: TorchModuleAdapter, handle: TorchHandle) -> dict[str, np.ndarray]:
    """The canonical parameters of ``handle``'s module, read-only. A float64 tensor on the
    CPU is exported as a view of the module's own memory (a slice or a transpose of it where
    the layout differs: GPT-2's fused, transposed c_attn), never a copy: the checkpoint is
    held once, not twice (GPT-2 small: 1.0 GB saved). Nothing writes it: ``load`` refuses,
    and the views are read-only."""
    from .torch_module import Absent, _owner, _to_canonical

    named = dict(handle.module.named_parameters())
    out: dict[str, np.ndarray] = {}
    for canonical, ref in handle.param_map().items():
        if isinstance(ref, Absent):
            value = np.zeros(handle.canonical_shape(canonical))
        else:
            tensor = adapter._lookup(handle, named, _owner(ref))
            tensor = _to_canonical(tensor, ref, handle.canonical_shape(canonical)).detach()
            if tensor.dtype == torch.float64 and tensor.device.type == "cpu":
                value = tensor.numpy()  # a view, strided as the module holds it
            else:
                value = tensor.to(torch.float64).cpu().numpy()
        value.setflags(write=False)
        out[canonical] = value
    return out


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
    *,
    note: str = "",
    space: ConfigSpace | None = None,
    layered: tuple[str, ...] = LAYERED,
    **conv: Any,
) -> list[TorchEntry]:
    space = space or ConfigSpace(fixed=fixed, max_len=max_len)
    out = []
    for entry in base._entries.values():
        name = entry.name or entry.component
        if entry.param_map is None:  # attention: no parameters, nothing of the checkpoint
            continue
        impl = name.partition("[")[2].rstrip("]") or "eager"
        if impl not in models:  # a variant the built-in adapter adds (hf.llama's scaled RoPE)
            continue
        model = models[impl]
        conventions = entry.conventions
        if conventions is not None and entry.component in layered:
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
                notes=(*entry.notes, _describe(space), *((note,) if note else ())),
            )
        )
    return out


def _describe(space: ConfigSpace) -> str:
    return f"the checkpoint as saved, with its own weights: {space.describe()}"


class _PretrainedBert(_AsIs, TorchModuleAdapter):
    pass


def bert(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """hf.bert on the BertModel saved in ``folder``."""
    path = _folder(folder)
    from . import hf

    reading = _read(path, "bert")
    model, heads = _load(_model_class("BertModel"), path, add_pooling_layer=False)
    c = model.config
    fixed = {
        "d_model": c.hidden_size,
        "n_heads": c.num_attention_heads,
        "d_ff": c.intermediate_size,
        "n_layers": c.num_hidden_layers,
        "vocab_size": c.vocab_size,
        "padding_idx": c.pad_token_id,
    }
    conv = {"eps": float(c.layer_norm_eps), "activation": _activation(c.hidden_act, path)}
    models, checked = _implementations(model, hf.IMPLEMENTATIONS, fixed)
    note = f"{_report(reading, c, heads)} {checked}"
    views: dict[str, tuple[nn.Module, tuple[str, ...] | None]] = {}
    entries = _entries(hf.bert, models, fixed, c.max_position_embeddings, views, note=note, **conv)
    adapter = _PretrainedBert(f"hf.bert:{path.name}", entries)
    adapter.views = views
    adapter.fixed, adapter.folder = fixed, path
    adapter.positions = int(c.max_position_embeddings)
    return adapter


def vit(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """hf.vit on the ViTForImageClassification saved in ``folder``."""
    path = _folder(folder)
    from . import hf

    reading = _read(path, "vit")
    model, heads = _load(_model_class("ViTForImageClassification"), path)
    c = model.config
    fixed = {
        "d_model": c.hidden_size,
        "n_heads": c.num_attention_heads,
        "d_ff": c.intermediate_size,
        "n_layers": c.num_hidden_layers,
        # SPEC.md §0.5: qkv_bias switches q, k, v alone; the output projection keeps its bias
        "attention_bias": bool(getattr(c, "qkv_bias", True)),
        "attention_out_bias": True,
        "image_size": c.image_size,
        "patch_size": c.patch_size,
        "channels": c.num_channels,
        "n_classes": model.classifier.out_features,
    }
    conv = {"eps": float(c.layer_norm_eps), "activation": _activation(c.hidden_act, path)}
    models, checked = _implementations(model, hf.IMPLEMENTATIONS, fixed)
    note = f"{_report(reading, c, heads)} {checked}"
    views: dict[str, tuple[nn.Module, tuple[str, ...] | None]] = {}
    entries = _entries(hf.vit, models, fixed, views=views, note=note, **conv)
    adapter = _PretrainedViT(f"hf.vit:{path.name}", entries)
    adapter.views = views
    adapter.fixed, adapter.folder = fixed, path
    adapter.positions = (c.image_size // c.patch_size) ** 2 + 1  # the patches and [CLS]
    return adapter


class _PretrainedViT(_AsIs, TorchModuleAdapter):
    """hf.vit's eager subjects keep their dtypes (float32 and below: a float32 softmax)."""


# ------------------------------------------------------------------ decoder-only families

PARTS["hf.gpt2"] = {
    "causal_self_attention": ("transformer.h.0",),
    "decoder_block": ("transformer.h.0",),
    "causal_lm": None,  # GPT2LMHeadModel's own forward: the whole model
}
PARTS["hf.llama"] = PARTS["hf.mistral"] = PARTS["hf.qwen2"] = {
    "gated_ffn": ("model.layers.0",),
    "causal_self_attention": ("model.rotary_emb", "model.layers.0"),
    "decoder_block": ("model.rotary_emb", "model.layers.0"),
    "causal_lm": None,
}
DECODER_COMPONENTS = ("gated_ffn", "causal_self_attention", "decoder_block", "causal_lm")


def gpt2(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """hf.gpt2 on the GPT2LMHeadModel saved in ``folder``: its sizes,
    its position table (``n_positions``), its LayerNorm eps and activation (``gelu_new`` is
    the tanh GELU of SPEC.md §6.1), the head tied to the token table."""
    path = _folder(folder)
    from . import hf_decoder

    reading = _read(path, "gpt2")
    model, heads = _load(_model_class("GPT2LMHeadModel"), path)
    c = model.config
    fixed = {
        "d_model": c.n_embd,
        "n_heads": c.n_head,
        "d_ff": c.n_inner or 4 * c.n_embd,  # GPT2MLP: n_inner, or 4 * n_embd when null
        "n_layers": c.n_layer,
        "vocab_size": c.vocab_size,
        "n_kv_heads": c.n_head,  # no grouped-query attention (SPEC.md §11.2)
    }
    space = ConfigSpace(fixed=fixed, max_len=c.n_positions, tied=True)
    conv = {
        "eps": float(c.layer_norm_epsilon),
        "activation": _activation(c.activation_function, path),
    }
    models, checked = _implementations(model, hf_decoder.IMPLEMENTATIONS, fixed)
    views: dict[str, tuple[nn.Module, tuple[str, ...] | None]] = {}
    entries = _entries(
        hf_decoder.gpt2,
        models,
        fixed,
        views=views,
        note=f"{_report(reading, c, heads)} {checked}",
        space=space,
        layered=DECODER_COMPONENTS,
        **conv,
    )
    adapter = _PretrainedDecoder(f"hf.gpt2:{path.name}", entries)
    adapter.layer_list = "transformer.h"
    adapter.views = views
    adapter.fixed, adapter.folder = fixed, path
    adapter.positions = min(int(c.n_positions), MAX_REAL_LENGTH)
    return adapter


def llama(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """hf.llama on the LlamaForCausalLM saved in ``folder``: its sizes,
    key/value heads (SPEC.md §11.2), head width, RoPE base (``rope_theta``), RMSNorm eps,
    biases and tying, and its context (``max_position_embeddings``)."""
    return _llama_like(folder, "llama", "LlamaForCausalLM")


def mistral(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """hf.mistral: Llama's subjects on the MistralForCausalLM saved in ``folder``, with its
    ``sliding_window`` as the declared convention of SPEC.md §4.5 (every layer windowed)."""
    return _llama_like(folder, "mistral", "MistralForCausalLM")


def qwen2(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """hf.qwen2: Llama's subjects on the Qwen2ForCausalLM saved in ``folder``: q, k and v
    with a bias, the output projection and the MLP without (SPEC.md §0.5)."""
    return _llama_like(folder, "qwen2", "Qwen2ForCausalLM")


def _llama_like(folder: str | os.PathLike[str] | None, family: str, cls: str) -> TorchModuleAdapter:
    path = _folder(folder)
    from . import hf_decoder

    reading = _read(path, family)
    model, heads = _load(_model_class(cls), path)
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    fixed: dict[str, Any] = {
        "d_model": c.hidden_size,
        "n_heads": c.num_attention_heads,
        "d_ff": c.intermediate_size,
        "n_layers": c.num_hidden_layers,
        "vocab_size": c.vocab_size,
        "n_kv_heads": c.num_key_value_heads or c.num_attention_heads,
    }
    if head_dim * c.num_attention_heads != c.hidden_size:  # heads wider or narrower than D/H
        fixed.update(d_k=head_dim, d_v=head_dim)
    if family == "qwen2":  # the architecture's own layout (Qwen2Attention, Qwen2MLP)
        biases = {"attention": True, "attention_out": False, "ffn": False}
    else:
        attention = bool(getattr(c, "attention_bias", False))
        biases = {"attention": attention, "ffn": bool(getattr(c, "mlp_bias", False))}
    space = ConfigSpace(
        fixed=fixed,
        max_len=c.max_position_embeddings,
        biases=biases,
        tied=bool(c.tie_word_embeddings),
    )
    rope = c.rope_parameters or {}
    conv: dict[str, Any] = {
        "eps": float(c.rms_norm_eps),
        "pe_base": float(rope.get("rope_theta", 10000.0)),
        "gate_activation": checkpoint_config.GATE_ACTIVATIONS[c.hidden_act],
    }
    kind = rope.get("rope_type", "default")
    if kind != "default":  # SPEC.md §2.6, the numbers transformers' rope init reads
        conv.update(rope_scaling=kind, rope_scaling_factor=float(rope["factor"]))
    if kind == "llama3":
        conv.update(
            rope_low_freq_factor=float(rope["low_freq_factor"]),
            rope_high_freq_factor=float(rope["high_freq_factor"]),
            rope_original_max_positions=int(rope["original_max_position_embeddings"]),
        )
    if family == "mistral":
        conv["sliding_window"] = c.sliding_window  # None: every earlier key (SPEC.md §4.5)
    models, checked = _implementations(model, hf_decoder.IMPLEMENTATIONS, fixed)
    views: dict[str, tuple[nn.Module, tuple[str, ...] | None]] = {}
    entries = _entries(
        hf_decoder.llama,
        models,
        fixed,
        views=views,
        note=f"{_report(reading, c, heads)} {checked}",
        space=space,
        layered=DECODER_COMPONENTS,
        **conv,
    )
    adapter = _PretrainedDecoder(f"hf.{family}:{path.name}", entries)
    adapter.float32_note = hf_decoder.LLAMA_FLOAT32_NOTE
    adapter.layer_list = "model.layers"
    adapter.views = views
    adapter.fixed, adapter.folder = fixed, path
    adapter.positions = min(int(c.max_position_embeddings), MAX_REAL_LENGTH)
    return adapter


class _PretrainedDecoder(_AsIs, TorchModuleAdapter):
    """A decoder checkpoint; hf.llama's attention, block and model run in float32 and below
    (its RMSNorm and RoPE angles compute in float32), and say so when asked for float64."""

    float32_note = ""
    layer_list: str | None = None  # the ModuleList of the layers (``layer_states``)

    @contextlib.contextmanager
    def layer_states(self, handle: TorchHandle) -> Iterator[Any]:
        """During the block, every forward of a real-size ``causal_lm`` stack in float64
        records the input to layer 0 and each layer's output (float64 copies, a
        ``real_size.LayerStates``): the oracle comparison judges its call at the checkpoint's
        own context layer by layer from them (``tck.conformance.toolkit.teacher``). Yields
        None for any other subject, dtype or size (the whole comparison is made then).
        The forward hooks return nothing, except one on the output head when the caller sets
        ``keep_rows``: the head then takes the hidden states at those positions alone, and
        the output is the logits there (``LayerStates.logits_rows``)."""
        path = self.layer_list
        wanted = handle.subject.component == "causal_lm" and handle.dtype == torch.float64
        if path is None or not wanted or not real_size.applies(handle.subject):
            yield None
            return
        try:
            layers = handle.module.get_submodule(path)
        except AttributeError:
            yield None
            return
        states = real_size.LayerStates(len(layers), outputs=[None] * len(layers))

        def kept(value: Any) -> np.ndarray | None:
            value = value[0] if isinstance(value, tuple) else value
            if not isinstance(value, torch.Tensor):
                return None
            return value.detach().to(torch.float64, copy=True).cpu().numpy()

        def first(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            states.first = kept(args[0] if args else kwargs.get("hidden_states"))

        def output_of(index: int) -> Callable[..., None]:
            def hook(module: nn.Module, args: Any, output: Any) -> None:
                states.outputs[index] = kept(output)

            return hook

        def judged_only(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
            hidden = args[0] if args else None
            if states.keep_rows is None or not isinstance(hidden, torch.Tensor):
                return None
            rows = np.asarray(states.keep_rows(hidden.shape[1]), dtype=np.int64)
            states.logits_rows = rows
            return (hidden[:, torch.as_tensor(rows, device=hidden.device)], *args[1:])

        hooks = (
            [layers[0].register_forward_pre_hook(first, with_kwargs=True)] if len(layers) else []
        )
        hooks += [layer.register_forward_hook(output_of(i)) for i, layer in enumerate(layers)]
        head = handle.module.get_output_embeddings()  # transformers' output projection
        if isinstance(head, nn.Module):
            hooks.append(head.register_forward_pre_hook(judged_only))
        try:
            yield states
        finally:
            for hook in hooks:
                hook.remove()

    def refuse_dtype(
        self, subject: Subject, config: Config, *, seed: int, dtype: str, device: str
    ) -> TorchHandle:
        if self.float32_note:
            raise Unsupported(
                f"{subject.name} runs in {', '.join(self.dtypes(subject))}: {self.float32_note}"
            )
        return super().refuse_dtype(subject, config, seed=seed, dtype=dtype, device=device)


BUILDERS = {"bert": bert, "vit": vit, "gpt2": gpt2, "llama": llama}
BUILDERS.update(mistral=mistral, qwen2=qwen2)


def auto(folder: str | os.PathLike[str] | None = None) -> TorchModuleAdapter:
    """The adapter ``config.json`` of ``folder`` names (``model_type``, else
    ``architectures``), on that checkpoint; an unknown family is refused in one line
    listing the supported ones."""
    path = _folder(folder)
    name = checkpoint_config.family(checkpoint_config.read_config(path), path)
    return BUILDERS[name](path)
