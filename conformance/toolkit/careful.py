"""The careful (naive) reference, ``ref`` of the tolerance rule (SPEC.md §10.7, §10.10): the torch
reference model of ``tck.reference.model`` under the subject's conventions, in the test
dtype on the subject's device, with the instance's (rounded) parameters; and gradients
(SPEC.md §10.8): the adapter's, the gold (float64 autograd through the torch reference on
the CPU) and the naive reference's in the test dtype. Functions of a check's harness."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tck.adapters import TorchModuleAdapter, Unsupported
from tck.adapters.devices import DEFAULT_DEVICE
from tck.adapters.torch_module import TorchEntry, TorchHandle
from tck.reference.tolerance import round_to

from .calling import GuardedAdapter, private_copy
from .results import CheckFailure

if TYPE_CHECKING:  # the harness imports this module
    from .harness import Harness, Instance


def careful(h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """``ref`` of the tolerance rule, the careful reference (SPEC.md §10.10): the torch
    reference model under the subject's conventions, in ``inst.dtype`` on the subject's
    device, with the instance's (rounded) parameters. Within
    ``computed_in_input_dtype(...)`` it is a hypothesis with those quantities in the input
    dtype (``tck.conformance.diagnosis.precision``)."""
    naive, handle = careful_model(h, inst, inst.dtype, h.device)
    return np.asarray(naive.run(handle, dict(inputs)), dtype=np.float64)


class _Stop(Exception):
    """Raised by a forward hook to end a forward once what it needs is taken."""


def careful_hidden(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray]
) -> Callable[[slice], np.ndarray] | None:
    """The careful run of a causal LM (``careful``) with its logits made per chunk of
    positions: the torch reference's forward stops at its final norm's output (a hook on
    ``norm``: the normed hidden states, B x L x D, in the test dtype), and the function
    returned gives the logits at the positions asked for, formed as the reference forms
    them (hidden W^T times the logit factor, in the test dtype, on the subject's device), as
    float64. None where the reference has no such parts."""
    import torch

    from tck.reference.model import matmul
    from tck.reference.oracle import embedding_scale

    naive, handle = careful_model(h, inst, inst.dtype, h.device)
    module = handle.module
    norm = getattr(module, "norm", None)
    if not isinstance(norm, torch.nn.Module) or not hasattr(module, "embedding"):
        return None
    taken: list[torch.Tensor] = []

    def take(_module: Any, _args: Any, output: torch.Tensor) -> None:
        taken.append(output.detach())
        raise _Stop

    hook = norm.register_forward_hook(take)
    try:
        naive.run(handle, dict(inputs))
    except _Stop:
        pass
    finally:
        hook.remove()
    if not taken:
        return None
    hidden = taken[0]
    table = module.embedding.weight if inst.config.tie_weights else module.lm_head.weight
    _, logit_scale = embedding_scale(inst.config.d_model, inst.conventions)

    def logits(where: slice) -> np.ndarray:
        with torch.no_grad():
            part = matmul(hidden[:, where], table.T) * logit_scale
        return part.detach().to("cpu", torch.float64).numpy()

    return logits


# Conventions.float32_steps -> the quantities the torch reference can form in float32
# (``tck.reference.model.computed_in_float32``); a table or a constant kept in float32 has
# no such quantity, and the island floor alone covers it.
ISLAND_QUANTITIES = {
    "norm_statistics": "norm_statistics",
    "softmax": "softmax",
    "rope_angles": "rope_angles",
    "rope_table": "rope_angles",
}


def island_careful(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray]
) -> np.ndarray | None:
    """The yardstick of a float64 subject with float32 islands (SPEC.md §10.12): the torch
    reference in float64 with the declared steps formed in float32 (every step it can form
    so, where the subject declares none: an island the suite detected). A float32 rounding
    is amplified by what follows it (a softmax by the size of its scores, a RoPE angle by
    |q| |k|), so inputs 30 times larger err 30 to 900 times more: the island floor alone,
    scaled by the output, does not bound that, the same rounding in the reference does.
    None when the reference cannot run the subject."""
    with _islands_in_float32(inst) as formed:
        if formed:
            try:
                return careful(h, inst, inputs)
            except (Unsupported, ValueError, KeyError):
                pass
    return None


def island_gradients(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
) -> dict[str, np.ndarray] | None:
    """``island_careful`` for gradients: float64 autograd through the torch reference with
    the subject's float32 steps formed in float32 (SPEC.md §10.8, §10.12)."""
    with _islands_in_float32(inst) as formed:
        if formed:
            try:  # never gold_gradients' memo: its answers are the all-float64 ones
                naive, handle = careful_model(h, inst, "float64")
                return naive.grad(handle, dict(inputs), cotangent)
            except (Unsupported, ValueError, KeyError):
                pass
    return None


@contextlib.contextmanager
def _islands_in_float32(inst: Instance) -> Iterator[bool]:
    """Within the block the torch reference forms the subject's float32 steps in float32
    (every step it can, where the subject declares none: an island the suite detected);
    yields whether there is any such step."""
    from tck.reference.model import QUANTITIES, computed_in_float32

    steps = inst.conventions.float32_steps
    quantities = {ISLAND_QUANTITIES[s] for s in steps if s in ISLAND_QUANTITIES}
    if not steps:
        quantities = set(QUANTITIES)
    with computed_in_float32(*sorted(quantities)):
        yield bool(quantities)


def careful_model(
    h: Harness, inst: Instance, dtype: str, device: str = DEFAULT_DEVICE
) -> tuple[TorchModuleAdapter, Any]:
    key = (id(inst), dtype, device)
    if key not in h.naive_handles:
        from tck.adapters.reference import entry  # the reference adapter's own forwards

        made = entry(h.component, inst.conventions, name=h.subject.name)
        naive = TorchModuleAdapter("naive", [made])
        handle = None
        shareable = inst.params is not None and all(map(_fixed_float64, inst.params.values()))
        if shareable and dtype == "float64" and device == DEFAULT_DEVICE:
            handle = _unfilled(made, h, inst)  # for a checkpoint's own parameters
            if not _share(handle.module, inst.params):
                handle = None
        if handle is None:
            handle = naive.build(h.subject, inst.config, seed=inst.seed, dtype=dtype, device=device)
            if inst.params is not None and not _share(handle.module, inst.params):
                naive.load(handle, inst.params)
        # The instance is kept alive with its handle: id() stays unique while cached.
        h.naive_handles[key] = (naive, handle, inst)
    naive, handle, _ = h.naive_handles[key]
    return naive, handle


def _fixed_float64(value: Any) -> bool:
    """A read-only float64 array torch can view (no negative strides)."""
    return (
        isinstance(value, np.ndarray)
        and not value.flags.writeable
        and value.dtype == np.float64
        and all(stride >= 0 for stride in value.strides)
    )


def _unfilled(made: TorchEntry, h: Harness, inst: Instance) -> TorchHandle:
    """The float64 reference on the CPU, its parameters given storage but no values: built
    on the meta device, where nothing is drawn, for parameters about to be shared
    (``_share``), whose random draw would be thrown away (the small Llama's 30 layers:
    1.2 CPU s a build). Its storage is never written: ``_share`` replaces it."""
    import torch

    with torch.device("meta"):
        module = made.make(inst.config)
    module = module.to(torch.float64).to_empty(device="cpu").eval()
    return TorchHandle(made, h.subject, module, inst.config, torch.float64, torch.device("cpu"))


def _share(module: Any, params: Mapping[str, np.ndarray]) -> bool:
    """Make ``module``'s parameters (a float64 reference on the CPU) the read-only arrays
    ``params`` themselves instead of copies (a checkpoint's canonical parameters: views of
    its own memory, ``pretrained._export``), so that the reference costs no second copy of
    a real-size checkpoint (GPT-2 small: 1 GB). Only where every parameter is a read-only
    float64 array of its name and shape: nothing writes them (the reference's forwards and
    autograd read their leaves). False, with nothing changed, otherwise (``load`` copies)."""
    import torch

    own = dict(module.named_parameters())
    if set(own) != set(params):
        return False
    for name, p in own.items():
        value = params[name]
        if (
            not _fixed_float64(value)
            or p.dtype != torch.float64
            or p.device.type != "cpu"
            or tuple(value.shape) != tuple(p.shape)
        ):
            return False
    with warnings.catch_warnings():  # torch warns that the arrays are not writable: by design
        warnings.simplefilter("ignore", UserWarning)
        for name, p in own.items():
            p.data = torch.from_numpy(params[name])
    return True


def gradients(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
) -> dict[str, np.ndarray]:
    """The adapter's gradients of sum(output * cotangent) (Adapter.grad), as float64."""
    grad = getattr(h.adapter, "grad", None)
    if not callable(grad):
        raise Unsupported(f"{h.adapter.name} does not compute gradients (Adapter.grad)")
    out = grad(
        inst.handle, {k: private_copy(v) for k, v in inputs.items()}, np.array(cotangent, copy=True)
    )
    if not isinstance(out, Mapping):
        raise CheckFailure(
            "adapter.grad_not_a_dict",
            f"grad() returned {type(out).__name__}, not a dict of numpy arrays",
        )
    # the guarded adapter's dict is a private one, made for this call
    return _as_float64(out, own=isinstance(h.adapter, GuardedAdapter))


def gradients_each(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    cotangent: np.ndarray,
    take: Callable[[str, np.ndarray], None],
    only: Collection[str] | None = None,
) -> None:
    """``gradients``, each handed to ``take(name, float64 array)`` in turn: as the backward
    pass forms it where the adapter streams them (``grad_each``: a checkpoint, whose
    whole gradient set is its float64 size), else from ``grad``'s dict, each array leaving
    the dict as it is handed over. Either way the check holds one of the subject's
    gradients at a time besides what it keeps. With ``only`` (canonical parameter names),
    those parameters' gradients and the inputs' alone (``grad_each`` forms no other)."""
    each = getattr(h.adapter, "grad_each", None)
    if not callable(each):
        out = gradients(h, inst, inputs, cotangent)
        for name in list(out):
            value = out.pop(name)
            parameter = name.startswith("params.")
            if only is None or not parameter or name.removeprefix("params.") in only:
                take(name, value)
        return
    private = {k: private_copy(v) for k, v in inputs.items()}

    def as_float64(name: str, value: np.ndarray) -> None:
        if not isinstance(value, np.ndarray):
            raise CheckFailure(
                "adapter.grad_not_a_dict",
                f"grad_each() gave {type(value).__name__} for {name}, not a numpy array",
            )
        take(name, np.asarray(value, dtype=np.float64))

    asked = {} if only is None else {"only": only}  # (an adapter's grad_each may not take it)
    each(inst.handle, private, np.array(cotangent, copy=True), as_float64, **asked)


def _as_float64(grads: Mapping[str, Any], *, own: bool) -> dict[str, np.ndarray]:
    """``grads`` as float64 arrays; where the dict is ``own`` (nobody else holds it), each
    array leaves it as it is converted, so a float32 set and its float64 conversion are
    never both held whole (a real-size stack's gradients in float32: half its float64
    size, beside the whole of it)."""
    own = own and type(grads) is dict
    out = {}
    for name in list(grads):
        value = grads.pop(name) if own else grads[name]  # type: ignore[attr-defined]
        out[name] = np.asarray(value, dtype=np.float64)
        del value
    return out


def gold_gradients(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    cotangent: np.ndarray,
    only: Collection[str] | None = None,
) -> dict[str, np.ndarray]:
    """float64 autograd through the torch reference on the same (rounded) values, on the
    CPU (the gold of the gradient checks, as the oracle is of the forward ones); with
    ``only`` (canonical parameter names), those parameters' and the inputs' alone."""
    from tck.adapters.pretrained import stream_gradients

    from .harness import GRADIENT_MEMO  # it builds on this module

    # eager and sdpa twins of a checkpoint ask the same: computed once (OracleMemo)
    asked = {**inputs, "\0cotangent": np.asarray(cotangent)}
    if only is not None:
        asked["\0only"] = np.asarray(sorted(only))
    key = GRADIENT_MEMO.key(h.component, asked, inst.params, inst.config, inst.conventions)
    found = GRADIENT_MEMO.get(key, id(h))
    if found is not None:
        return found
    naive, handle = careful_model(h, inst, "float64")
    if only is None:
        gold = naive.grad(handle, dict(inputs), cotangent)
    else:
        gold = {}

        def keep(name: str, value: np.ndarray) -> None:  # valid during the call: a copy
            gold[name] = np.array(value, dtype=np.float64)

        stream_gradients(naive, handle, dict(inputs), cotangent, keep, only)
    if key is not None:  # a checkpoint's weights: their float64 reference copy goes now
        h.naive_handles.pop((id(inst), "float64", DEFAULT_DEVICE), None)
    if key is not None and not h.twin_may_ask(inst.dtype):
        return gold  # no twin in this dtype: kept for nobody (Harness.twin_may_ask)
    return GRADIENT_MEMO.put(key, gold, inst.params, id(h))


def naive_gradients(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
) -> dict[str, np.ndarray]:
    """``ref`` for gradients: autograd through the torch reference in ``inst.dtype`` on the
    subject's device, with the norm statistics in that dtype: §10.8's multipliers were
    measured against that reference, and a careful one's norm gradients are tighter than
    torch.nn's own fused LayerNorm backward meets (measured: 1.3x the bound, encoder,
    float16, seed 4)."""
    from tck.reference.model import computed_in_input_dtype

    naive, handle = careful_model(h, inst, inst.dtype, h.device)
    with computed_in_input_dtype("norm_statistics"):
        grads = naive.grad(handle, dict(inputs), round_to(cotangent, inst.dtype))
    return _as_float64(grads, own=True)  # the reference adapter's fresh dict


def naive_gradients_each(
    h: Harness,
    inst: Instance,
    inputs: Mapping[str, np.ndarray],
    cotangent: np.ndarray,
    take: Callable[[str, np.ndarray], None],
    only: Collection[str] | None = None,
) -> None:
    """``naive_gradients``, each handed to ``take(name, float64 array)`` as the backward
    pass forms it (``pretrained.stream_gradients``): the check needs only each one's error
    against the gold, never the whole set (a real-size stack's float32 set, as float64, is
    its float64 size)."""
    from tck.adapters.pretrained import stream_gradients
    from tck.reference.model import computed_in_input_dtype

    naive, handle = careful_model(h, inst, inst.dtype, h.device)

    def as_float64(name: str, value: np.ndarray) -> None:
        take(name, np.asarray(value, dtype=np.float64))

    with computed_in_input_dtype("norm_statistics"):
        stream_gradients(
            naive, handle, dict(inputs), round_to(cotangent, inst.dtype), as_float64, only
        )
