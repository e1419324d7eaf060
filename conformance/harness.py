"""The ``tck`` fixture every check receives: build, run, compare, diagnose, record.

A check is a plain pytest test. It asks the harness for an instance of the subject under
test, runs it on canonical inputs, and compares with the oracle under the conventions the
adapter declares. When they disagree, the harness looks for the convention the
implementation *does* follow (``explain``) so the failure names a bug class, not just a
number.

Precision (SPEC.md §10.7): ``instance(dtype="float16")`` builds the subject in that dtype
with canonical parameters rounded to it, ``inputs`` rounds the float inputs to it, and the
comparison takes the careful run's error in that dtype into its bound (``careful``: the
torch reference model of ``tck.reference.model``, built under the subject's conventions and
run in the same dtype on the same rounded values; it keeps norm statistics and the softmax
in float32 and RoPE angles in float64, as SPEC.md §10.10 asks of every implementation).
Gradients (SPEC.md §10.8): ``gradients``, ``gold_gradients``, ``naive_gradients``.

Devices (``tck run --device cuda``): the harness builds the subject on its ``device`` (a
subject that does not run there is ``Unsupported``); the oracle stays numpy float64 on the
CPU, the gradients' gold float64 autograd on the CPU, and the careful run, the ``careful``
of the tolerance rule, runs in the test dtype on the same device as the subject.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tck.adapters import Adapter, Subject, TorchModuleAdapter, Unsupported
from tck.adapters.devices import DEFAULT_DEVICE, adapter_devices, offers_device
from tck.reference import RECORDS, Config, Conventions, init_params, param_shapes, record
from tck.reference.conventions import CHOICES
from tck.reference.expected import expected
from tck.reference.inputs import DEFAULT_SHAPE, Inputs, Shape, make_inputs
from tck.reference.tolerance import Comparison, careful_error, compare, k_forward, round_to

from .decoding import param_hypotheses
from .results import CheckFailure
from .spaces import fit_shape, max_length, require_config, require_length, subject_config
from .verified import call_facts

# Sizes per component: small enough to be fast, with d_k != d_v where the spec allows and
# lengths that are not multiples of 8.
DEFAULT_CONFIG = Config(
    d_model=24,
    n_heads=4,
    d_ff=40,
    n_layers=2,
    n_decoder_layers=2,
    vocab_size=23,
    padding_idx=0,
    max_len=128,
    image_size=8,
    patch_size=4,
    channels=3,
    n_classes=5,
)

# The convention fields each component's output depends on (its record's ``fields``).
FIELDS: dict[str, tuple[str, ...]] = {name: rec.fields for name, rec in RECORDS.items()}

# Explanations that change several convention fields at once (issue 19): at most this many
# fields, this many oracle evaluations per search, this many searches per check.
MAX_COMBINED_FIELDS = 3
COMBINATION_BUDGET = 400
COMBINATION_SEARCHES = 3

_ALTERNATIVES: dict[str, tuple[Any, ...]] = {
    "eps": (1e-5, 1e-6, 1e-12, 1e-8, 1e-3, 0.0),
    "pe_base": (10000.0, 1000.0, 500000.0),
}

# The stable diagnosis code for "the implementation follows <field> = <value>".
CONVENTION_CODES: dict[tuple[str, Any], str] = {
    ("eps_placement", "outside_sqrt"): "layer_norm.eps_outside_sqrt",
    ("eps_placement", "inside_sqrt"): "layer_norm.eps_inside_sqrt",
    ("variance", "unbiased"): "layer_norm.unbiased_variance",
    ("variance", "biased"): "layer_norm.biased_variance",
    ("pe_layout", "concatenated"): "positional.layout_concatenated",
    ("pe_layout", "interleaved"): "positional.layout_interleaved",
    ("rope_layout", "half_split"): "rope.layout_half_split",
    ("rope_layout", "interleaved"): "rope.layout_interleaved",
    ("causal_alignment", "bottom_right"): "mask.causal_alignment_bottom_right",
    ("causal_alignment", "top_left"): "mask.causal_alignment_top_left",
    ("norm_placement", "pre"): "blocks.norm_placement_pre",
    ("norm_placement", "post"): "blocks.norm_placement_post",
    ("final_norm", "never"): "blocks.final_norm_missing",
    ("final_norm", "pre_only"): "blocks.final_norm_pre_only",
    ("final_norm", "always"): "blocks.final_norm_extra",
    ("embedding_scale", "none"): "embedding.scale_missing",
    ("embedding_scale", "emb"): "embedding.scale_on_embeddings",
    ("embedding_scale", "prj"): "embedding.scale_on_logits",
    ("pooling", "mean"): "vit.pooling_mean",
    ("pooling", "cls"): "vit.pooling_cls",
    ("padded_query_rows", "zero"): "mask.padded_queries_zeroed",
    ("padded_query_rows", "computed"): "mask.padded_queries_computed",
    ("gate_activation", "gelu"): "ffn.gate_activation_gelu",
    ("gate_activation", "gelu_tanh"): "ffn.gate_activation_gelu_tanh",
    ("gate_activation", "silu"): "ffn.gate_activation_silu",
    ("positions", "rope"): "positional.rope_applied",
    ("positions", "learned"): "positional.rope_missing",
}


# What each convention value means, in words, for reports.
PLAIN_WORDS: dict[tuple[str, Any], str] = {
    ("fully_masked_rows", "zero"): "returns zeros for a query whose keys are all masked",
    ("fully_masked_rows", "nan"): "returns NaN for a query whose keys are all masked",
    ("fully_masked_rows", "uniform"): "spreads a query whose keys are all masked evenly over "
    "every key (the mean of V), as a finite fill value such as -1e9 does",
    ("fully_masked_rows", "undefined"): "makes no promise for a query whose keys are all masked",
    ("norm_placement", "pre"): "normalises before each sublayer (pre-LN: x + f(norm(x)))",
    ("norm_placement", "post"): "normalises after each residual add (post-LN: norm(x + f(x)))",
    ("final_norm", "always"): "ends every stack with a LayerNorm, post-LN stacks included",
    ("final_norm", "pre_only"): "ends a stack with a LayerNorm only when it is pre-LN",
    ("final_norm", "never"): "ends no stack with a LayerNorm, pre-LN stacks included",
    ("activation", "relu"): "uses ReLU in the feed-forward network",
    ("activation", "gelu"): "uses the exact GELU, x * Phi(x), in the feed-forward network",
    ("activation", "gelu_tanh"): "uses the tanh approximation of GELU in the feed-forward network",
    ("eps_placement", "outside_sqrt"): "divides by std + eps instead of sqrt(var + eps)",
    ("eps_placement", "inside_sqrt"): "divides by sqrt(var + eps)",
    ("variance", "unbiased"): "normalises with the unbiased variance (divides by D - 1)",
    ("variance", "biased"): "normalises with the biased variance (divides by D)",
    ("pe_layout", "concatenated"): "puts all sines first and all cosines after them",
    ("pe_layout", "interleaved"): "interleaves sines (even dims) and cosines (odd dims)",
    ("rope_layout", "half_split"): "rotates pairs (x_i, x_(i+d/2)) (rotate_half)",
    ("rope_layout", "interleaved"): "rotates pairs (x_2i, x_2i+1)",
    ("causal_alignment", "bottom_right"): "aligns the causal mask bottom-right when Lq != Lk",
    ("causal_alignment", "top_left"): "aligns the causal mask top-left when Lq != Lk",
    ("embedding_scale", "emb"): "multiplies embeddings by sqrt(d_model)",
    ("embedding_scale", "prj"): "divides the output logits by sqrt(d_model) instead of "
    "scaling the embeddings",
    ("embedding_scale", "none"): "does not scale embeddings or logits by sqrt(d_model)",
    ("pooling", "mean"): "pools the mean of the patch tokens instead of the class token",
    ("pooling", "cls"): "pools the class token",
    ("padded_query_rows", "zero"): "returns exactly 0 at padded query positions instead of the "
    "value the formula gives",
    ("padded_query_rows", "computed"): "computes padded query positions by the formula",
    ("gate_activation", "silu"): "gates the FFN with SiLU (SwiGLU)",
    ("gate_activation", "gelu"): "gates the FFN with the exact GELU (GeGLU) instead of SiLU",
    ("gate_activation", "gelu_tanh"): "gates the FFN with the tanh GELU instead of SiLU",
    ("positions", "rope"): "rotates queries and keys by their positions (RoPE) in attention",
    ("positions", "learned"): "adds a learned position table to the embeddings (no RoPE)",
}


def combination_diagnosis(declared: Conventions, changed: Mapping[str, Any]) -> tuple[str, str]:
    """Code and message for an implementation that follows several undeclared conventions
    at once: the code is the first field's (in FIELDS order), the message names them all."""
    fields = list(changed)
    code = convention_code(fields[0], changed[fields[0]])
    shown = ", ".join(f"{f}={changed[f]!r}" for f in fields)
    words = "; ".join(plain_words(f, changed[f]) for f in fields)
    claimed = ", ".join(f"{f}={getattr(declared, f)!r}" for f in fields)
    return code, (
        f"behaves as {shown} together ({len(fields)} conventions at once: it {words}), but "
        f"the adapter declares {claimed}"
    )


def plain_words(field: str, value: Any) -> str:
    if (field, value) in PLAIN_WORDS:
        return PLAIN_WORDS[(field, value)]
    if field == "eps":
        return f"uses LayerNorm eps = {value:g}"
    if field == "pe_base":
        return f"uses the positional base {value:g}"
    return f"has {field} = {value!r}"


def convention_code(field: str, value: Any) -> str:
    if (field, value) in CONVENTION_CODES:
        return CONVENTION_CODES[(field, value)]
    if field == "eps":
        return "layer_norm.eps_wrong"
    if field == "activation":
        return f"ffn.activation_{value}"
    if field == "fully_masked_rows":
        return f"mask.fully_masked_rows_{value}"
    if field == "pe_base":
        return "positional.base_wrong"
    return f"convention.{field}_{value}"


def alternatives(field: str, declared: Any) -> list[Any]:
    """The values of a convention field to try besides the declared one."""
    values = _ALTERNATIVES.get(field, CHOICES.get(field, ()))
    # 'undefined' is a promise not to promise: no output can show it.
    return [v for v in values if v != declared and v != "undefined"]


@dataclass
class Instance:
    """A built subject: the adapter's handle, its config and canonical params (if any)."""

    subject: Subject
    config: Config
    handle: Any
    params: dict[str, np.ndarray] | None  # rounded to ``dtype``, held as float64
    seed: int = 0  # what build and init_params were given
    dtype: str = "float64"  # what build was given (SPEC.md §10.7)

    @property
    def component(self) -> str:
        return self.subject.component

    @property
    def conventions(self) -> Conventions:
        return self.subject.conventions


@dataclass
class FailedCall:
    """An oracle comparison that failed: the instance, the exact inputs and what they were."""

    inst: Instance
    inputs: dict[str, np.ndarray]
    what: str
    recipe: tuple[Shape, int] | None = None  # (shape, seed) if made by Harness.inputs


def seq_len(inputs: Mapping[str, np.ndarray]) -> int | None:
    """The sequence length of a call (queries / targets), or None for images."""
    if "positions" in inputs:  # sinusoidal_pe, rope (whose x is [B, H, L, d])
        return int(np.size(inputs["positions"]))
    for name, axis in (("q", -2), ("query", 1), ("x", 1), ("tgt_ids", 1), ("ids", 1)):
        if name in inputs and np.ndim(inputs[name]) >= 2:
            return int(np.shape(inputs[name])[axis])
    return None


class Harness:
    """What a check works with. One per (check, subject); it accumulates metrics."""

    def __init__(
        self, adapter: Adapter, subject: Subject, seed: int = 0, device: str = DEFAULT_DEVICE
    ):
        self.adapter, self.subject, self.seed = adapter, subject, seed
        self.device = device  # where the subject and the careful run run
        self.metrics: dict[str, Any] = {}
        self.conventions_seen: list[tuple[str, str]] = []  # (code, message)
        self.clauses: list[str] | None = None  # overrides the check's spec marker
        # One entry per oracle comparison (for the report's error-vs-length plot), and the
        # comparison that failed, with everything needed to replay it (the repro snippet).
        self.calls: list[dict[str, Any]] = []
        self.failed_call: FailedCall | None = None
        self._recipes: dict[int, tuple[Inputs, Shape, int]] = {}
        self._naive_handles: dict[
            tuple[int, str, str], tuple[TorchModuleAdapter, Any, Instance]
        ] = {}
        self._combination_searches = 0
        self._runs: dict[int, int] = {}  # id(instance) -> calls of run (state hypotheses)
        # What the adapter did besides its output (diagnosis code -> words): changing its
        # inputs, returning a buffer it reuses. Found beside the verdict, never in it.
        self.side_effects: dict[str, str] = {}
        self._outputs: list[np.ndarray] = []  # what run() returned, as returned

    # ------------------------------------------------------------------ building
    @property
    def component(self) -> str:
        return self.subject.component

    def config(self, **overrides: Any) -> Config:
        """DEFAULT_CONFIG with what the check needs, inside what the subject supports
        (``Subject.config`` fixes fields, ``Subject.supports`` a ConfigSpace: spaces.py);
        Unsupported when the subject cannot be what the check needs."""
        return subject_config(self.subject, DEFAULT_CONFIG, overrides)

    def dtypes(self) -> tuple[str, ...]:
        """The dtypes the adapter offers for this subject (float64 unless it says more)."""
        offered = getattr(self.adapter, "dtypes", None)
        return tuple(offered(self.subject)) if callable(offered) else ("float64",)

    def instance(
        self,
        config: Config | None = None,
        *,
        seed: int | None = None,
        params: bool = True,
        dtype: str = "float64",
    ) -> Instance:
        """Build a fresh instance; with ``params``, give it canonical parameters from
        ``init_params`` (or read its own when the adapter cannot load). In a ``dtype`` other
        than float64 the parameters are rounded to it first, so that the oracle, the naive
        reference and the adapter share them exactly; a dtype the adapter does not offer is
        ``Unsupported``."""
        config = config or self.config()
        seed = self.seed if seed is None else seed
        handle = self.build(config, seed=seed, dtype=dtype)
        values = None
        if params:
            canonical = init_params(self.component, config, self.subject.conventions, seed=seed)
            canonical = {k: round_to(v, dtype) for k, v in canonical.items()}
            try:
                self.adapter.load(handle, canonical)
                values = canonical
            except Unsupported:
                try:
                    values = self.adapter.params(handle)
                except Unsupported:
                    values = None
        return Instance(self.subject, config, handle, values, seed, dtype)

    def require_device(self) -> None:
        """Unsupported unless the adapter runs this subject on the harness' device."""
        if not offers_device(self.adapter, self.subject, self.device):
            offered = adapter_devices(self.adapter, self.subject)
            why = f"{self.adapter.name}:{self.subject.name} runs on {', '.join(offered)}"
            require = getattr(self.adapter, "require_device", None)
            if callable(require):  # its own words, with its reason
                require(self.subject, self.device)
            raise Unsupported(f"{why}, not {self.device} (Adapter.devices)")

    def build(self, config: Config, *, seed: int | None = None, dtype: str = "float64") -> Any:
        """The adapter's handle for this subject on the harness' device, in ``dtype``: the
        keywords ``dtype`` and ``device`` are passed only when they are not float64 and the
        CPU, and only for what the adapter offers (else Unsupported)."""
        seed = self.seed if seed is None else seed
        self.require_device()
        require_config(self.subject, config)  # a config outside its ConfigSpace: a skip
        kwargs: dict[str, Any] = {}
        if dtype != "float64":
            offered = self.dtypes()
            if dtype not in offered:
                raise Unsupported(
                    f"{self.adapter.name}:{self.subject.name} offers {', '.join(offered)}, "
                    f"not {dtype} (Adapter.dtypes)"
                )
            kwargs["dtype"] = dtype
        if self.device != DEFAULT_DEVICE:
            kwargs["device"] = self.device
        return self.adapter.build(self.subject, config, seed=seed, **kwargs)

    def require_params(self, inst: Instance) -> dict[str, np.ndarray]:
        if inst.params is None and _has_params(inst):
            pytest.skip(
                f"{self.adapter.name} gives no access to canonical parameters "
                "(load or params), which this check needs"
            )
        return inst.params or {}

    def inputs(
        self,
        inst: Instance,
        shape: Shape = DEFAULT_SHAPE,
        *,
        seed: int | None = None,
        beyond_max_len: bool = False,
    ) -> Inputs:
        """Inputs of ``shape``, its lengths cut to the subject's ConfigSpace.max_len unless
        ``beyond_max_len`` (the too-long probe, SPEC.md §2.2)."""
        seed = self.seed if seed is None else seed
        if not beyond_max_len:
            shape = fit_shape(shape, max_length(self.subject))
        made = make_inputs(self.component, inst.config, np.random.default_rng(seed), shape)
        made = {k: round_to(v, inst.dtype) for k, v in made.items()}  # once, for every path
        self._recipes[id(made)] = (made, shape, seed)
        return made

    def recipe(self, inputs: Mapping[str, np.ndarray]) -> tuple[Shape, int] | None:
        """How ``inputs`` were made (shape, seed), if by ``self.inputs`` (possibly changed
        since: the caller compares before relying on it)."""
        made, shape, seed = self._recipes.get(id(inputs), (None, None, None))
        return (shape, seed) if made is inputs else None

    # ------------------------------------------------------------------ running
    def run(self, inst: Instance, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The adapter's output for ``inputs``. The adapter gets private copies of the
        inputs and the check a private copy of the output, so that an adapter that writes
        into its inputs or reuses its output buffer changes no verdict; either is noted
        (``side_effects``: adapter.input_modified, adapter.output_reused)."""
        require_length(self.subject, inputs)  # never longer than the subject takes
        self._runs[id(inst)] = self._runs.get(id(inst), 0) + 1
        private = {k: _private(v) for k, v in inputs.items()}
        out = self.adapter.run(inst.handle, private)
        changed = [k for k in inputs if k not in private or not _same(private[k], inputs[k])]
        if changed:
            self.side_effects["adapter.input_modified"] = (
                f"run() changed its input(s) {', '.join(map(repr, changed))} in place; an "
                "implementation must leave its inputs as they were (the checks compared "
                "with unchanged copies)."
            )
        if not isinstance(out, np.ndarray):
            raise CheckFailure(
                "adapter.output_not_array",
                f"run() returned {type(out).__name__}, not a numpy array",
            )
        if not np.issubdtype(out.dtype, np.floating):
            raise CheckFailure("adapter.output_not_float", f"run() returned dtype {out.dtype}")
        if out.ndim == 0:
            raise CheckFailure(
                "shape.wrong_output_shape",
                "run() returned a 0-d array (a scalar), not the spec's output shape "
                "(SPEC.md §10.6)",
                {"shape": []},
            )
        if any(out is old or _overlap(out, old) for old in self._outputs):
            self.side_effects["adapter.output_reused"] = (
                "run() returned memory it had returned before (a reused output buffer): a "
                "caller's earlier output changes under it; return a fresh array per call "
                "(the checks compared private copies)."
            )
        self._outputs = [*self._outputs[-3:], out]  # the last few: a reused one is among them
        return np.array(out, copy=True)

    def gold(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        conventions: Conventions | None = None,
    ) -> np.ndarray:
        return expected(
            self.component, inputs, inst.params, inst.config, conventions or inst.conventions
        )

    def gold_under(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], conventions: Conventions
    ) -> np.ndarray:
        """The oracle under other ``conventions`` (a hypothesis). A norm those conventions
        have and the declared ones do not (a final LayerNorm after a post-LN stack) has no
        canonical parameters here: it gets what a fresh ``nn.LayerNorm`` holds, unit gain
        and zero bias."""
        params = inst.params
        if params is not None:
            wanted = param_shapes(self.component, inst.config, conventions)
            missing = {k: v for k, v in wanted.items() if k not in params}
            if missing and all(len(shape) == 1 for shape in missing.values()):
                params = {
                    **params,
                    **{
                        k: np.ones(v) if k.endswith("weight") else np.zeros(v)
                        for k, v in missing.items()
                    },
                }
        return expected(self.component, inputs, params, inst.config, conventions)

    def careful(self, inst: Instance, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """``careful`` of the tolerance rule, the careful run (SPEC.md §10.10): the torch
        reference model under the subject's conventions, in ``inst.dtype`` on the subject's
        device, with the instance's (rounded) parameters. Within
        ``computed_in_input_dtype(...)`` it is a hypothesis with those quantities in the input
        dtype (``tck.conformance.precision``)."""
        naive, handle = self._naive(inst, inst.dtype, self.device)
        return np.asarray(naive.run(handle, dict(inputs)), dtype=np.float64)

    def _naive(
        self, inst: Instance, dtype: str, device: str = DEFAULT_DEVICE
    ) -> tuple[TorchModuleAdapter, Any]:
        key = (id(inst), dtype, device)
        if key not in self._naive_handles:
            from tck.adapters.reference import entry  # the reference adapter's own forwards

            naive = TorchModuleAdapter(
                "naive", [entry(self.component, inst.conventions, name=self.subject.name)]
            )
            handle = naive.build(
                self.subject, inst.config, seed=inst.seed, dtype=dtype, device=device
            )
            if inst.params is not None:
                naive.load(handle, inst.params)
            # The instance is kept alive with its handle: id() stays unique while cached.
            self._naive_handles[key] = (naive, handle, inst)
        naive, handle, _ = self._naive_handles[key]
        return naive, handle

    # ------------------------------------------------------------------ gradients
    def gradients(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        """The adapter's gradients of sum(output * cotangent) (Adapter.grad), as float64."""
        grad = getattr(self.adapter, "grad", None)
        if not callable(grad):
            raise Unsupported(f"{self.adapter.name} does not compute gradients (Adapter.grad)")
        out = grad(
            inst.handle, {k: _private(v) for k, v in inputs.items()}, np.array(cotangent, copy=True)
        )
        if not isinstance(out, Mapping):
            raise CheckFailure(
                "adapter.grad_not_a_dict",
                f"grad() returned {type(out).__name__}, not a dict of numpy arrays",
            )
        return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}

    def gold_gradients(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        """float64 autograd through the torch reference on the same (rounded) values, on the
        CPU (the gold of the gradient checks, as the oracle is of the forward ones)."""
        naive, handle = self._naive(inst, "float64")
        return naive.grad(handle, dict(inputs), cotangent)

    def naive_gradients(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        """``ref`` for gradients: autograd through the torch reference in ``inst.dtype`` on the
        subject's device, with the norm statistics in that dtype: §10.8's multipliers were
        measured against that reference, and a careful one's norm gradients are tighter than
        torch.nn's own fused LayerNorm backward meets (measured: 1.3x the bound, encoder,
        float16, seed 4)."""
        from tck.reference.model import computed_in_input_dtype

        naive, handle = self._naive(inst, inst.dtype, self.device)
        with computed_in_input_dtype("norm_statistics"):
            grads = naive.grad(handle, dict(inputs), round_to(cotangent, inst.dtype))
        return {k: np.asarray(v, dtype=np.float64) for k, v in grads.items()}

    def ignore_mask(self, inst: Instance, gold: np.ndarray) -> np.ndarray | None:
        """Positions the declared conventions leave undefined (§4.4 'undefined')."""
        if inst.conventions.fully_masked_rows == "undefined":
            return np.isnan(gold)
        return None

    # ------------------------------------------------------------------ comparing
    def compare(
        self,
        inst: Instance,
        test: np.ndarray,
        gold: np.ndarray,
        *,
        careful: np.ndarray | None = None,
        k: float | None = None,
    ) -> Comparison:
        """The tolerance rule in ``inst.dtype``; ``careful`` is the careful run's output
        (required below float64, where its error sets the bound)."""
        if test.shape != gold.shape:
            raise CheckFailure(
                "shape.wrong_output_shape",
                f"output shape {test.shape}, the spec's is {gold.shape} (SPEC.md §10.6)",
                {"shape": list(test.shape), "expected_shape": list(gold.shape)},
            )
        ignore = self.ignore_mask(inst, gold)
        careful_err, lost = 0.0, 0
        if careful is not None:
            careful_err, lost = careful_error(careful, gold, ignore)
            if lost:  # the careful run overflowed there: it can bound nothing
                overflow = ~np.isfinite(careful) & np.isfinite(gold)
                ignore = overflow if ignore is None else ignore | overflow
        elif inst.dtype != "float64":
            raise ValueError(f"comparing in {inst.dtype} needs the careful run (careful=)")
        result = compare(
            test,
            gold,
            dtype=inst.dtype,
            careful_err=careful_err,
            k=k_forward(self.component) if k is None else k,
            ignore=ignore,
        )
        self.note(result.metrics())
        if lost:
            self.note({"ref_nonfinite": lost})
        return result

    def note(self, metrics: Mapping[str, Any]) -> None:
        """Keep the worst value of each metric across calls (hypothesis runs many)."""
        for key, value in metrics.items():
            old = self.metrics.get(key)
            if isinstance(value, (int, float)) and isinstance(old, (int, float)):
                if key in (
                    "max_abs_err",
                    "ratio",
                    "nan_mismatch",
                    "mean_abs_err",
                    "ref_multiple",
                ) or key.endswith("max_abs_delta"):
                    self.metrics[key] = max(old, value)
                    if key == "ratio" and value >= old:
                        self.metrics["worst_index"] = metrics.get("worst_index")
                        self.metrics["bound"] = metrics.get("bound")
                continue
            if old is None or key not in ("worst_index", "bound"):
                self.metrics[key] = value

    def assert_matches_oracle(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], what: str = "output"
    ) -> np.ndarray:
        """Run and compare with the oracle; on failure, explain and raise CheckFailure."""
        self.require_params(inst)
        test = self.run(inst, inputs)
        gold = self.gold(inst, inputs)
        careful = self.careful(inst, inputs) if inst.dtype != "float64" else None
        result = self.compare(inst, test, gold, careful=careful)
        self.calls.append(
            {
                "what": what,
                "seq_len": seq_len(inputs),
                "max_abs_err": result.max_abs_err,
                "ratio": result.ratio,
                "passed": result.passed,
                **call_facts(self.component, inputs, inst.config),  # SPEC.md §10.11
            }
        )
        if not result.passed:
            self.failed_call = FailedCall(inst, dict(inputs), what, self.recipe(inputs))
            code, message = self.explain(inst, inputs, test, result)
            raise CheckFailure(code, f"{what}: {message}", result.metrics())
        return test

    # ------------------------------------------------------------------ diagnosing
    def matching_values(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        test: np.ndarray,
        field: str,
        tolerance: Comparison | None = None,
    ) -> list[Any]:
        """The values of convention ``field`` under which the oracle reproduces ``test``
        (within the bound of ``tolerance``, the failed comparison, when given)."""
        declared = getattr(inst.conventions, field)
        found = []
        for value in [declared, *alternatives(field, declared)]:
            try:
                conv = dataclasses.replace(inst.conventions, **{field: value})
                gold = self.gold_under(inst, inputs, conv)
            except (ValueError, KeyError):  # e.g. a final norm the params do not have
                continue
            if test.shape == gold.shape and _within(test, gold, tolerance):
                found.append(value)
        return found

    def explain(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], test: np.ndarray, result: Comparison
    ) -> tuple[str, str]:
        """A diagnosis code and message for a mismatch with the oracle."""
        numbers = (
            f"max |test - oracle| = {result.max_abs_err:.3g} > bound {result.bound:.3g} "
            f"(ratio {result.ratio:.3g}) at index {result.worst_index}"
        )
        if result.nan_mismatch:
            numbers = (
                f"{result.nan_mismatch} position(s) are NaN in exactly one of the "
                f"implementation and the oracle (first at {result.worst_index})"
            )
        found = self._hypotheses(inst, inputs, test, result)
        if found is None and inst.dtype == "float64":
            # A float64 subject that computes or stores some step in float32 (a table built
            # in float64 and kept in a float32 buffer, a float32 constant, an exported graph:
            # see tck.adapters.onnx_runtime): the same hypotheses, at float32's precision.
            hint = self._precision_hint(inst)
            loose = dataclasses.replace(result, dtype="float32", careful_err=0.0)
            found = self._hypotheses(inst, inputs, test, loose)
            if found is None and _within(test, self.gold(inst, inputs), loose):
                found = (
                    "numerics.float64_precision_lost",
                    "agrees with the oracle to float32 precision only: a value is computed "
                    "or stored in float32 somewhere in a subject built in float64 (a buffer, "
                    "a table or a constant kept at the lower precision)",
                )
            if found is not None and hint is not None:
                found = (found[0], f"{found[1]} ({hint})")
        if found is None:  # last: it builds and runs a fresh instance
            found = self._state_hypothesis(inst, inputs, result)
        gold = self.gold(inst, inputs) if found is None else None
        if gold is not None and gold.shape == test.shape:
            blown = ~np.isfinite(test) & np.isfinite(gold)
            if blown.any():
                found = (
                    "numerics.overflow",
                    f"the output is inf or NaN at {int(blown.sum())} position(s) where the "
                    f"oracle is finite, in {inst.dtype}: an intermediate overflows the dtype's "
                    "range or divides 0 by 0 (exp of a score without subtracting the row "
                    "maximum, a sum of squares, a normalisation by zero)",
                )
        if found is not None:
            return found[0], f"{found[1]}; {numbers}"
        return f"{_area(self.component)}.oracle_mismatch", f"disagrees with the oracle: {numbers}"

    def _hypotheses(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        test: np.ndarray,
        tolerance: Comparison,
    ) -> tuple[str, str] | None:
        """The first convention or mask bug that explains ``test`` within ``tolerance``."""
        for field in record(self.component).fields:
            values = self.matching_values(inst, inputs, test, field, tolerance)
            if values and getattr(inst.conventions, field) not in values:
                value = values[0]
                return (
                    convention_code(field, value),
                    f"behaves as {field}={value!r}, but the adapter declares "
                    f"{field}={getattr(inst.conventions, field)!r}",
                )
        for code, message, params in param_hypotheses(self.component, inst.config, inst.params):
            gold = expected(self.component, inputs, params, inst.config, inst.conventions)
            if test.shape == gold.shape and _within(test, gold, tolerance, np.isnan(gold)):
                return code, message
        for code, message, altered in self._mask_hypotheses(inputs):
            gold = self.gold(inst, altered)
            if test.shape == gold.shape and _within(test, gold, tolerance, np.isnan(gold)):
                return code, message
        for code, message, altered in _offset_hypotheses(self.component, inputs):
            gold = self.gold(inst, altered)
            if test.shape == gold.shape and _within(test, gold, tolerance):
                return code, message
        from .structural import (
            extra_norm_hypotheses,
            patch_order_hypotheses,
            pooling_hypotheses,
        )

        compute = functools.partial(self.gold, inst, inputs)
        for code, message, gold in extra_norm_hypotheses(self.component, compute):
            if test.shape == gold.shape and _within(test, gold, tolerance):
                return code, f"{message}, and its adapter does not declare it"
        for code, message, gold in itertools.chain(
            patch_order_hypotheses(self.component, compute),
            pooling_hypotheses(self.component, compute),
        ):
            if test.shape == gold.shape and _within(test, gold, tolerance):
                return code, message
        combination = self.matching_combination(inst, inputs, test, tolerance=tolerance)
        if combination:
            self.note({"explained_by": combination})
            return combination_diagnosis(inst.conventions, combination)
        from .hypotheses_more import more_explanation  # head split/merge, bias, gain, residual

        return more_explanation(self, inst, inputs, test, tolerance)

    def matching_combination(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        test: np.ndarray,
        fields: Iterable[str] | None = None,
        tolerance: Comparison | None = None,
        max_fields: int = MAX_COMBINED_FIELDS,
    ) -> dict[str, Any] | None:
        """The smallest set of convention values (2 to ``max_fields`` fields changed at
        once) under which the oracle reproduces ``test``; None when none does.

        A field none of whose alternatives changes the oracle's output on these inputs is
        left out (it cannot be told apart here), and the search stops after
        ``COMBINATION_BUDGET`` oracle evaluations, the first ``COMBINATION_SEARCHES`` times
        per check (hypothesis may explain many failing examples)."""
        if self._combination_searches >= COMBINATION_SEARCHES:
            return None
        self._combination_searches += 1
        declared = inst.conventions
        names = tuple(record(self.component).fields if fields is None else fields)
        try:
            base = self.gold(inst, inputs)
        except (ValueError, KeyError):
            return None
        options: dict[str, list[Any]] = {}
        for field in names:
            for value in alternatives(field, getattr(declared, field)):
                try:
                    gold = self.gold_under(
                        inst, inputs, dataclasses.replace(declared, **{field: value})
                    )
                except (ValueError, KeyError):
                    continue
                if gold.shape == base.shape and not np.array_equal(gold, base, equal_nan=True):
                    options.setdefault(field, []).append(value)
        budget = COMBINATION_BUDGET
        for size in range(2, max_fields + 1):
            for combo in itertools.combinations(options, size):
                for values in itertools.product(*(options[f] for f in combo)):
                    budget -= 1
                    if budget < 0:
                        return None
                    changed = dict(zip(combo, values, strict=True))
                    try:
                        gold = self.gold_under(
                            inst, inputs, dataclasses.replace(declared, **changed)
                        )
                    except (ValueError, KeyError):
                        continue
                    if gold.shape == test.shape and _within(test, gold, tolerance):
                        return changed
        return None

    def _state_hypothesis(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], tolerance: Comparison
    ) -> tuple[str, str] | None:
        """An instance called before that fails where a fresh one (same config, seed and
        parameters) passes carries state from one call to the next."""
        calls = self._runs.get(id(inst), 0)
        if calls < 2:
            return None
        try:
            fresh = self.instance(inst.config, seed=inst.seed, dtype=inst.dtype)
            if (fresh.params is None) != (inst.params is None):
                return None
            again = self.run(fresh, inputs)
            gold = self.gold(fresh, inputs)
        except Exception:  # a hypothesis that cannot be tested explains nothing
            return None
        ignore = self.ignore_mask(fresh, gold)
        if again.shape != gold.shape or not _within(again, gold, tolerance, ignore):
            return None
        return (
            "state.leaks_between_calls",
            f"a fresh instance gives the right output for these inputs, the instance that had "
            f"already been called {calls - 1} time(s) does not: the subject carries state from "
            "one call to the next (a mask, table or cache kept from an earlier call and reused "
            "for inputs of the same shape, a buffer updated in forward)",
        )

    def _precision_hint(self, inst: Instance) -> str | None:
        """The adapter's account of float64 precision it may lose (``precision_hint``)."""
        hint = getattr(self.adapter, "precision_hint", None)
        return hint(inst.handle) if callable(hint) else None

    def _mask_hypotheses(self, inputs: Mapping[str, np.ndarray]) -> Iterable[tuple[str, str, dict]]:
        masks = [
            k
            for k in ("keep_mask", "key_padding", "attn_mask", "memory_key_padding")
            if k in inputs
        ]
        if masks:
            yield (
                "mask.polarity_inverted",
                "the output is what the spec gives with every keep-mask inverted: the "
                "implementation attends to the padded keys and ignores the real ones",
                {**inputs, **{k: ~np.asarray(inputs[k]) for k in masks}},
            )
            yield (
                "mask.ignored",
                "the output is what the spec gives with no mask at all: the mask has no "
                "effect (a float/bool mask mix-up, or a mask that never reaches softmax)",
                {k: v for k, v in inputs.items() if k not in masks},
            )

    # ------------------------------------------------------------------ recording
    def convention(self, code: str, message: str) -> None:
        """Record an observed, declared deviation from the canonical spec."""
        self.conventions_seen.append((code, message))


POSITION_OFFSETS = (1, 2, -1)


def _offset_hypotheses(
    component: str, inputs: Mapping[str, np.ndarray]
) -> Iterable[tuple[str, str, dict]]:
    """Positions counted from another origin: the encoding at p is the spec's at p + offset
    (fairseq counts positions from padding_idx + 1; a cache index off by one)."""
    if component not in ("sinusoidal_pe", "rope") or "positions" not in inputs:
        return
    positions = np.asarray(inputs["positions"])
    area = "positional" if component == "sinusoidal_pe" else "rope"
    counted = np.arange(positions.size)
    if positions.ndim == 1 and not np.array_equal(positions, counted):
        yield (
            f"{area}.positions_ignored",
            "the encoding ignores the positions it is given and uses 0, 1, ..., L-1 (its index "
            "in the sequence) instead: position ids passed in never reach it",
            {**inputs, "positions": counted},
        )
    for offset in POSITION_OFFSETS:
        if positions.size and int(positions.min()) + offset < 0:
            continue
        yield (
            f"{area}.position_offset",
            f"the encoding at position p is the spec's at position p {offset:+d}: positions are "
            f"counted from {offset} instead of 0 (a position index offset, such as fairseq's "
            "positions that start at padding_idx + 1, or a cache read one step off)",
            {**inputs, "positions": positions + offset},
        )


def _within(
    test: np.ndarray,
    gold: np.ndarray,
    tolerance: Comparison | None,
    ignore: np.ndarray | None = None,
) -> bool:
    """Does ``gold`` (an alternative hypothesis) explain ``test`` as well as the rule asks,
    in the dtype and with the careful run's error of the failed comparison?"""
    if tolerance is None or tolerance.dtype == "float64":
        return compare(test, gold, ignore=ignore).passed
    return compare(
        test,
        gold,
        dtype=tolerance.dtype,
        careful_err=tolerance.careful_err,
        k=tolerance.k,
        ignore=ignore,
    ).passed


def _private(value: Any) -> Any:
    """A copy of an input the adapter may do anything with."""
    return np.array(value, copy=True) if isinstance(value, np.ndarray) else value


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10_000))
    except Exception:
        return True


def _same(a: Any, b: Any) -> bool:
    """Bit for bit the same array (NaN included), or the same other value."""
    if isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and a.tobytes() == b.tobytes()
        )
    return a is b


def _area(component: str) -> str:
    return record(component).area


def _has_params(inst: Instance) -> bool:
    return bool(param_shapes(inst.component, inst.config, inst.conventions))
