"""What gets timed: the adapter's component, and the baselines beside it.

A ``Call`` is a zero-argument function with its analytic FLOPs (``tck.reference.costs``) and
the context it must run in (``torch.no_grad()``, ``sdpa_kernel(...)``): the context is
entered once around all rounds, so that only the call itself is timed.

- ``adapter_call``: a torch adapter's module and inputs moved to the device, called the way
  the suite calls it (``handle.entry.forward(module, **inputs)``); the forward under
  ``torch.no_grad()``, forward+backward as ``torch.autograd.grad`` of the output with
  respect to every floating input and parameter (nothing accumulates between rounds). A
  non-torch adapter is timed through ``adapter.run`` / ``adapter.grad``, numpy conversion
  included, and its note says so.
- ``sdpa_call``: ``F.scaled_dot_product_attention`` on [B, H, N, D] inside
  ``sdpa_kernel(SDPBackend.X)``: one baseline per backend the device offers.
- ``oracle_call``: the numpy float64 oracle (``tck.reference.expected``), forward only.
- ``matmul_call``: a large square matmul, the measured peak of the run.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from tck.adapters import Adapter, Subject, TorchHandle, TorchModuleAdapter, Unsupported
from tck.adapters.devices import device_kind, offers_device
from tck.adapters.sdpa import SDPA_BACKENDS  # one table with tck run's backend subjects
from tck.adapters.torch_module import TORCH_DTYPES
from tck.reference import Config, canonical_conventions, init_params
from tck.reference.components import tagged
from tck.reference.costs import BACKWARD_FACTOR, attention_flops, flops
from tck.reference.expected import expected
from tck.reference.inputs import Shape, make_inputs

FORWARD = "forward"
FORWARD_BACKWARD = "forward+backward"
PASSES: tuple[str, ...] = (FORWARD, FORWARD_BACKWARD)

# Components with a FLOP formula and a sequence axis (the ViT's length is its image's).
COMPONENTS: tuple[str, ...] = tagged("bench")

ORACLE = "oracle"
BASELINES: tuple[str, ...] = (*SDPA_BACKENDS, ORACLE)

NUMPY_NOTE = (
    "a non-torch adapter: timed through adapter.run/adapter.grad, so the conversion of "
    "inputs and outputs to and from numpy is included"
)


@dataclass
class Call:
    """One thing to time."""

    label: str  # the series name: "torch.nn:mha", "sdpa[flash]", "oracle:mha"
    kind: str  # "adapter" or "baseline"
    component: str
    dtype: str
    pass_: str
    fn: Callable[[], Any]
    flops: float
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    notes: tuple[str, ...] = ()
    shape: dict[str, int] = field(default_factory=dict)  # heads, head_dim, d_model


def _first(out: Any) -> torch.Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


def _no_grad() -> contextlib.AbstractContextManager:
    return torch.no_grad()


def _numpy_inputs(
    component: str, config: Config, *, batch: int, seq: int, causal: bool, seed: int
) -> dict[str, np.ndarray]:
    """Dense inputs (no padding: every key real), the suite's builders at bench sizes."""
    return dict(_cached_inputs(component, config, batch, seq, causal, seed))


@functools.lru_cache(maxsize=len(COMPONENTS))
def _cached_inputs(
    component: str, config: Config, batch: int, seq: int, causal: bool, seed: int
) -> dict[str, np.ndarray]:
    # Built once per (component, B, N) of a sweep and shared by its dtypes, passes and the
    # oracle: at GPU sizes make_inputs draws hundreds of millions of normals.
    shape = Shape(batch=batch, lq=seq, lk=seq, masked=False, causal=causal)
    inputs = make_inputs(component, config, np.random.default_rng(seed), shape)
    for value in inputs.values():
        value.flags.writeable = False  # shared: no caller may change them
    return inputs


def _torch_inputs(inputs: dict[str, np.ndarray], dtype: torch.dtype, device: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in inputs.items():
        if name == "causal":
            out[name] = bool(value)
            continue
        tensor = torch.from_numpy(np.array(value))  # a copy: the cached array stays read-only
        tensor = tensor.to(device)  # then convert there: faster than on the host
        out[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
    return out


def _accepts(forward: Callable[..., Any], names: set[str]) -> list[str]:
    """The names ``forward`` does not accept after its module argument."""
    params = list(inspect.signature(forward).parameters.values())[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    return sorted(names - {p.name for p in params})


def _shape(config: Config) -> dict[str, int]:
    return {"heads": config.n_heads, "head_dim": config.head_dim_k, "d_model": config.d_model}


def adapter_call(
    adapter: Adapter,
    subject: Subject,
    config: Config,
    *,
    batch: int,
    seq: int,
    dtype: str,
    pass_: str,
    causal: bool,
    device: str,
    seed: int = 0,
) -> Call:
    """The adapter's ``subject`` at these sizes; ``Unsupported`` when it cannot be built."""
    component = subject.component
    offered = adapter.dtypes(subject) if hasattr(adapter, "dtypes") else ("float64",)
    if dtype not in offered:
        raise Unsupported(f"{adapter.name}:{subject.name} offers {', '.join(offered)}")
    build_kwargs = {} if dtype == "float64" else {"dtype": dtype}
    if device_kind(device) != "cpu" and offers_device(adapter, subject, device):
        build_kwargs["device"] = device  # built there, as tck run --device builds it
    handle = adapter.build(subject, config, seed=seed, **build_kwargs)
    inputs = _numpy_inputs(component, config, batch=batch, seq=seq, causal=causal, seed=seed)
    backward = pass_ == FORWARD_BACKWARD
    work = flops(
        component,
        config,
        batch=batch,
        seq_len=seq,
        causal=causal,
        backward=backward,
        conventions=subject.conventions,
    )
    label = f"{adapter.name}:{subject.name}"
    common = {"label": label, "kind": "adapter", "component": component, "dtype": dtype}
    if not isinstance(adapter, TorchModuleAdapter) or not isinstance(handle, TorchHandle):
        if not device.startswith("cpu"):
            raise Unsupported(f"{adapter.name} is not a torch adapter: it runs on the CPU only")
        return _numpy_adapter_call(adapter, handle, inputs, pass_, work, common, config)
    unaccepted = _accepts(handle.entry.forward, set(inputs))
    if unaccepted:
        raise Unsupported(f"{label} does not take {', '.join(unaccepted)}")
    module = handle.module.to(device)
    kwargs = _torch_inputs(inputs, handle.dtype, device)
    forward = handle.entry.forward
    if pass_ == FORWARD:
        return Call(
            **common,
            pass_=pass_,
            fn=lambda: forward(module, **kwargs),
            flops=work,
            context=_no_grad,
            shape=_shape(config),
        )
    leaves = [v.requires_grad_(True) for v in kwargs.values() if _float_tensor(v)]
    leaves += [p.requires_grad_(True) for p in module.parameters() if p.is_floating_point()]
    if not leaves:
        raise Unsupported(f"{label} has nothing to differentiate")
    cotangent = torch.randn_like(_first(forward(module, **kwargs)).detach())

    def forward_backward() -> Any:
        out = _first(forward(module, **kwargs))
        return torch.autograd.grad(out, leaves, cotangent, allow_unused=True)

    return Call(**common, pass_=pass_, fn=forward_backward, flops=work, shape=_shape(config))


def _float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _numpy_adapter_call(
    adapter: Adapter,
    handle: Any,
    inputs: dict[str, np.ndarray],
    pass_: str,
    work: float,
    common: dict[str, Any],
    config: Config,
) -> Call:
    if pass_ == FORWARD:
        return Call(
            **common,
            pass_=pass_,
            fn=lambda: adapter.run(handle, inputs),
            flops=work,
            notes=(NUMPY_NOTE,),
            shape=_shape(config),
        )
    out = np.asarray(adapter.run(handle, inputs))
    cotangent = np.random.default_rng(1).standard_normal(out.shape)
    adapter.grad(handle, inputs, cotangent)  # Unsupported: no gradients, said in the report
    return Call(
        **common,
        pass_=pass_,
        fn=lambda: adapter.grad(handle, inputs, cotangent),
        flops=work,
        notes=(NUMPY_NOTE,),
        shape=_shape(config),
    )


def sdpa_backend(name: str) -> Any:
    """The SDPBackend member for a CLI name; Unsupported where this torch lacks it."""
    from torch.nn.attention import SDPBackend

    member = getattr(SDPBackend, SDPA_BACKENDS[name], None)
    if member is None:
        raise Unsupported(f"torch {torch.__version__} has no SDPBackend.{SDPA_BACKENDS[name]}")
    return member


def sdpa_call(
    backend: str,
    *,
    batch: int,
    heads: int,
    seq: int,
    head_dim: int,
    dtype: str,
    pass_: str,
    causal: bool,
    device: str,
    seed: int = 0,
) -> Call:
    """``F.scaled_dot_product_attention`` pinned to one backend; Unsupported if the backend
    cannot run this shape, dtype and device (torch's reason in the message)."""
    from torch.nn.attention import sdpa_kernel

    member = sdpa_backend(backend)
    generator = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (
        torch.randn(
            batch, heads, seq, head_dim, generator=generator, device=device, dtype=torch.float32
        ).to(TORCH_DTYPES[dtype])
        for _ in range(3)
    )
    backward = pass_ == FORWARD_BACKWARD
    for t in (q, k, v):
        t.requires_grad_(backward)

    def attend() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def context() -> contextlib.AbstractContextManager:
        stack = contextlib.ExitStack()
        stack.enter_context(sdpa_kernel(member))
        if not backward:
            stack.enter_context(torch.no_grad())
        return stack

    fn: Callable[[], Any] = attend
    if backward:
        cotangent = torch.randn_like(q)

        def fn() -> Any:
            return torch.autograd.grad(attend(), (q, k, v), cotangent)

    # A probe at the real shape: the backend's own "why not" (on CUDA torch warns the
    # reasons, e.g. "Flash attention requires ...", before it raises) before any timing.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            with context():
                fn()
        except RuntimeError as err:
            reasons = [str(w.message).strip().splitlines()[0] for w in said if str(w.message)]
            text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            if "out of memory" in text.lower():
                raise
            why = "; ".join(dict.fromkeys([*reasons, text]))
            raise Unsupported(f"SDPA backend {backend} on {device} in {dtype}: {why}") from None
    work = attention_flops(batch, heads, seq, seq, head_dim, causal=causal)
    work *= 1 + BACKWARD_FACTOR if backward else 1
    return Call(
        label=f"sdpa[{backend}]",
        kind="baseline",
        component="attention",
        dtype=dtype,
        pass_=pass_,
        fn=fn,
        flops=work,
        context=context,
        shape={"heads": heads, "head_dim": head_dim, "d_model": heads * head_dim},
    )


def oracle_call(
    component: str, config: Config, *, batch: int, seq: int, causal: bool, seed: int = 0
) -> Call:
    """The numpy float64 oracle of ``component``, forward only, on the CPU."""
    conventions = canonical_conventions(component)
    params = init_params(component, config, conventions, seed=seed)
    inputs = _numpy_inputs(component, config, batch=batch, seq=seq, causal=causal, seed=seed)
    return Call(
        label=f"{ORACLE}:{component}",
        kind="baseline",
        component=component,
        dtype="float64",
        pass_=FORWARD,
        fn=lambda: expected(component, inputs, params, config, conventions),
        flops=flops(component, config, batch=batch, seq_len=seq, causal=causal),
        notes=("the numpy float64 oracle (tck.reference.oracle), query-chunked; on the CPU",),
        shape=_shape(config),
    )


def matmul_call(dtype: str, device: str, size: int) -> Call:
    """[size, size] @ [size, size]: 2 * size^3 FLOPs, the run's measured peak."""
    generator = torch.Generator(device=device).manual_seed(0)
    a, b = (
        torch.randn(size, size, generator=generator, device=device).to(TORCH_DTYPES[dtype])
        for _ in range(2)
    )
    return Call(
        label=f"matmul[{size}]",
        kind="peak",
        component="matmul",
        dtype=dtype,
        pass_=FORWARD,
        fn=lambda: torch.matmul(a, b),
        flops=2.0 * size**3,
        context=_no_grad,
    )
