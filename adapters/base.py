"""The adapter contract: how the suite talks to an implementation.

Adapters speak numpy at the boundary, so JAX, MLX, ONNX Runtime or a C++ binding can be
adapted as easily as PyTorch. An adapter offers *subjects*: a component of SPEC.md (e.g.
"mha") as the implementation builds it, with the conventions it declares (e.g.
``nn.MultiheadAttention`` returns NaN for fully-masked rows). One implementation may
offer several subjects of one component ("encoder_layer[norm_first]").

Every input and output is a numpy array; masks cross the boundary in one form, boolean
**keep**-masks (True = may attend), and each adapter converts them to its library's
convention. The inputs of each component are listed in ``INPUTS``.

Incremental decoding with a KV cache (``step``, SPEC.md §11.6) is optional too.
Precision and gradients are optional capabilities (SPEC.md §10.7, §10.8): ``dtypes`` names
the dtypes ``build`` accepts (float64 only, unless an adapter says more), and ``grad``
returns vector-Jacobian products. An adapter written before they existed keeps working:
the suite passes ``dtype`` to ``build`` only for a dtype ``dtypes`` offers, and skips the
gradient checks when ``grad`` raises ``Unsupported``. Devices likewise (``devices``, see
``tck.adapters.devices``): the CPU unless an adapter says more, and ``device`` is passed to
``build`` only when it is not the CPU.
"""

from __future__ import annotations

import unittest
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tck.reference import COMPONENTS, RECORDS, Config, Conventions, canonical_conventions
from tck.reference.components import tagged

from .config_space import ConfigSpace

# Subject.derives_positions: never; from the cache's length (True and 'cache' alike); from
# key_padding as well (SPEC.md §11.7, §11.9)
DERIVES_POSITIONS = (False, True, "cache", "padding")

Arrays = Mapping[str, np.ndarray]

# The dtypes the suite knows, by their numpy/torch names ("bfloat16" has no numpy dtype: an
# adapter returns bfloat16 results as float32 or float64 arrays).
DTYPES: tuple[str, ...] = ("float64", "float32", "float16", "bfloat16")

# component -> (required inputs, optional inputs), and the output's shape, from the
# component records (tck.reference.components: each input's kind and dims are there).
#   key_padding: bool keep [B, Lk] (True = a real token); attn_mask: bool keep [Lq, Lk];
#   causal: a 0-d bool array, "apply your own causal mask" (its alignment is a convention).
#   §11 decoder-only: one input, always causal; positions int64 [B, L] are position ids
#   (default 0 .. L-1 in every row; shifted for a left-padded row, §11.7)
INPUTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    name: (rec.required, rec.optional) for name, rec in RECORDS.items()
}

OUTPUTS: dict[str, str] = {name: rec.output for name, rec in RECORDS.items()}

# Components that decode incrementally (SPEC.md §11.6): ``Adapter.step`` may serve them.
CACHED: tuple[str, ...] = tagged("kv_cache")

assert set(INPUTS) == set(COMPONENTS) == set(OUTPUTS)


class Unsupported(unittest.SkipTest):
    """An adapter lacks a capability (a component, a config, parameter access, a dtype).

    The suite turns it into a *skip* whose reason is this exception's message, so say
    what is missing and why, e.g. "nn.MultiheadAttention has no separate d_v".

    It is a ``unittest.SkipTest`` so that hypothesis re-raises it at once instead of taking
    it for a failure to shrink: a property check on an unsupported call used to run and
    format ~200 examples before the skip (58 s on one torch.nn subject).
    """


class OutputShapeMismatch(ValueError):
    """The implementation's output has another shape than the one the suite asks a gradient
    of (the spec's output shape, the cotangent's): a finding about the implementation, which
    the suite records as ``shape.wrong_output_shape``, not a failure of the adapter."""


class AdapterFailure(Exception):
    """The implementation, or what an adapter did to it, broke in a way with a name: ``code``
    is a diagnosis code in dotted form (``onnx.export_failed``), ``message`` says it in words.
    The suite records it as an ``error`` with that diagnosis, not as a crash of the adapter.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"[{code}] {message}")
        self.code, self.message = code, message


class ParamsMismatch(AdapterFailure, ValueError):
    """Canonical parameters that do not fit the module built for the config: a parameter the
    map names is missing (``params.names_differ``), or its slot has another shape
    (``params.shape_differs``). A ValueError too, for callers that load outside a check."""


@dataclass(frozen=True)
class Subject:
    """One component as an implementation builds it, with the conventions it declares."""

    name: str  # unique within the adapter: "mha", "mha[seq_first]"
    component: str  # a SPEC component: one of tck.reference.COMPONENTS
    conventions: Conventions = None  # type: ignore[assignment]  # default: canonical
    notes: tuple[str, ...] = ()  # plain-words facts for the report
    # Config fields this subject fixes, e.g. {"attention_bias": False}: the suite builds it
    # with them (SPEC.md §0.5); not part of its identity.
    config: Mapping[str, Any] | None = field(default=None, compare=False)
    # The configs the subject supports (sizes, ratios, a maximum length, biases, tying): the
    # suite draws every config and input inside it (SPEC.md §0.6); not part of its identity.
    supports: ConfigSpace | None = field(default=None, compare=False)
    # §11.9: ``step`` may be called without ``positions`` (the subject numbers the new tokens
    # itself, from its cache's length, as generate() leaves it to): the suite then decodes
    # without them too. ``"padding"``: it numbers a row's tokens from ``key_padding`` as well
    # (``cumsum(mask) - 1``, OPT's learned positions), so left-padded rows are also run
    # without them (§11.7). Off by default: ``positions`` is always given.
    derives_positions: bool | Literal["cache", "padding"] = field(default=False, compare=False)

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS:
            raise ValueError(
                f"subject {self.name!r}: unknown component {self.component!r}; "
                f"choose one of {', '.join(COMPONENTS)}"
            )
        if self.derives_positions not in DERIVES_POSITIONS:
            raise ValueError(
                f"subject {self.name!r}: derives_positions={self.derives_positions!r}; choose "
                "False, True (or 'cache': from the cache's length) or 'padding' (from "
                "key_padding too, cumsum(mask) - 1)"
            )
        if self.conventions is None:
            object.__setattr__(self, "conventions", canonical_conventions(self.component))


class Adapter(ABC):
    """Subclass this (or use ``TorchModuleAdapter``) to point the suite at an implementation.

    Required: ``name``, ``subjects``, ``build`` and ``run``. ``params`` and ``load`` give
    access to canonical parameters (SPEC.md §0.2); without them, oracle-equality checks
    skip and the property checks and probes still run.

    Optional: ``dtypes`` (the precisions ``build`` can make, SPEC.md §10.7), ``grad``
    (gradients, SPEC.md §10.8) and ``devices`` (where ``build`` can put a subject).
    ``TorchModuleAdapter`` implements all three.
    """

    name: str = "unnamed"

    @abstractmethod
    def subjects(self) -> list[Subject]:
        """What this implementation offers."""

    @abstractmethod
    def build(self, subject: Subject, config: Config, *, seed: int) -> Any:
        """A fresh instance in evaluation mode, float64 where the library allows.

        Raise ``Unsupported`` for a config the implementation cannot express. An adapter that
        offers other precisions (``dtypes``) takes a keyword ``dtype`` as well, one of
        ``DTYPES`` ("float32", "float16", "bfloat16"), and computes in it: the suite passes
        ``dtype`` only when it is not float64, so ``build(subject, config, *, seed)`` stays
        a valid signature for float64-only adapters. Likewise ``device`` ("cuda", "cuda:1"),
        passed only when it is not the CPU and only for a kind ``devices`` offers: build the
        instance there, and ``run`` it there (inputs and outputs stay numpy arrays).
        """

    @abstractmethod
    def run(self, handle: Any, inputs: Arrays) -> np.ndarray:
        """One forward call; ``inputs`` as in ``INPUTS[subject.component]``."""

    def params(self, handle: Any) -> dict[str, np.ndarray]:
        """The instance's parameters in the canonical layout (SPEC.md §0.2)."""
        raise Unsupported(f"{self.name} does not export canonical parameters")

    def load(self, handle: Any, params: Arrays) -> None:
        """Set the instance's parameters from the canonical layout."""
        raise Unsupported(f"{self.name} does not load canonical parameters")

    def dtypes(self, subject: Subject) -> tuple[str, ...]:
        """The dtypes ``build`` can make ``subject`` in (a subset of ``DTYPES``).

        The suite checks each one besides float64 with the tolerance rule of SPEC.md §10.7
        and skips the others with a reason; the default offers float64 only.
        """
        return ("float64",)

    def devices(self, subject: Subject) -> tuple[str, ...]:
        """The device kinds ("cpu", "cuda") ``build`` can put ``subject`` on; the default
        offers the CPU only. ``tck run --device cuda`` skips a subject without "cuda" with a
        reason, and refuses an adapter that offers it for no subject."""
        return ("cpu",)

    def grad(self, handle: Any, inputs: Arrays, cotangent: np.ndarray) -> dict[str, np.ndarray]:
        """The vector-Jacobian product of one forward call (SPEC.md §10.8).

        With ``out = run(handle, inputs)``, the gradients of ``sum(out * cotangent)`` with
        respect to every floating-point input (keyed by its ``INPUTS`` name, e.g. ``"q"``)
        and to every canonical parameter (keyed ``"params." + name``, e.g.
        ``"params.q.weight"``), each of its input's or parameter's shape. An input the output
        does not depend on has gradient zero. Raise ``Unsupported`` when the implementation
        cannot differentiate (the default), ``OutputShapeMismatch`` when its output has
        another shape than ``cotangent``.
        """
        raise Unsupported(f"{self.name} does not compute gradients")

    def step(self, handle: Any, inputs: Arrays, cache: Any) -> tuple[np.ndarray, Any]:
        """One incremental decoding call with the implementation's own KV cache (SPEC.md §11.6).

        ``inputs`` holds only the *new* tokens in the component's main input (``x`` [B, n, D]
        or ``ids`` [B, n]; n is 1 or more, on an empty or a non-empty cache), their
        ``positions`` [B, n] (always given, unless the subject declares
        ``Subject.derives_positions``: then also calls without them, unpadded, where the
        subject numbers the new tokens from its cache's length, SPEC.md §11.9), and ``key_padding``
        [B, T] over every token so far, cached and new, when the sequence has padding.
        ``cache`` is None on the first call and afterwards what the previous call returned.
        Returns the output rows of the new tokens ([B, n, ...]) and the cache to pass next.
        Optional: the default raises ``Unsupported`` and the KV-cache checks skip.
        """
        raise Unsupported(f"{self.name} does not decode incrementally (Adapter.step)")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "subjects": [s.name for s in self.subjects()]}
