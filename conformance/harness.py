"""The ``tck`` fixture every check receives: build, run, compare, diagnose, record.

A check is a plain pytest test. It asks the harness for an instance of the subject under
test, runs it on canonical inputs, and compares with the oracle under the conventions the
adapter declares. When they disagree, the harness looks for the convention the
implementation *does* follow (``explain``) so the failure names a bug class, not just a
number.

Precision (SPEC.md §10.7): ``instance(dtype="float16")`` builds the subject in that dtype
with canonical parameters rounded to it, ``inputs`` rounds the float inputs to it, and the
comparison takes the naive reference's error in that dtype into its bound (``naive``: the
torch reference model of ``tck.reference.model``, built under the subject's conventions and
run in the same dtype on the same rounded values; the one naive implementation of the rule).
Gradients (SPEC.md §10.8): ``gradients``, ``gold_gradients``, ``naive_gradients``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tck.adapters import Adapter, Subject, TorchModuleAdapter, Unsupported
from tck.reference import Config, Conventions, init_params, param_shapes
from tck.reference.conventions import CHOICES

from .expected import expected
from .inputs import DEFAULT_SHAPE, Inputs, Shape, make_inputs
from .results import CheckFailure
from .tolerance import Comparison, compare, k_forward, reference_error, round_to
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

# The convention fields each component's output depends on, and the values to try.
_NORM = ("eps_placement", "variance", "eps")
_LAYER = ("norm_placement", "activation", *_NORM)  # what every layer's output depends on
_STACK = ("norm_placement", "final_norm", "activation", *_NORM)  # a layer, and the end
FIELDS: dict[str, tuple[str, ...]] = {
    "sinusoidal_pe": ("pe_layout", "pe_base"),
    "rope": ("rope_layout", "pe_base"),
    "attention": ("fully_masked_rows", "causal_alignment"),
    "mha": ("fully_masked_rows", "causal_alignment"),
    "layer_norm": _NORM,
    "rms_norm": ("eps",),
    "ffn": ("activation",),
    "encoder_layer": (*_LAYER, "fully_masked_rows"),
    "decoder_layer": (*_LAYER, "fully_masked_rows"),
    "encoder": (*_STACK, "fully_masked_rows", "padded_query_rows"),
    "decoder": (*_STACK, "fully_masked_rows"),
    "seq2seq": ("embedding_scale", "pe_layout", *_STACK),
    "vit": ("pooling", *_STACK),
    "embedding": (),
    "patch_embed": (),
}

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
}


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

    def __init__(self, adapter: Adapter, subject: Subject, seed: int = 0):
        self.adapter, self.subject, self.seed = adapter, subject, seed
        self.metrics: dict[str, Any] = {}
        self.conventions_seen: list[tuple[str, str]] = []  # (code, message)
        self.clauses: list[str] | None = None  # overrides the check's spec marker
        # One entry per oracle comparison (for the report's error-vs-length plot), and the
        # comparison that failed, with everything needed to replay it (the repro snippet).
        self.calls: list[dict[str, Any]] = []
        self.failed_call: FailedCall | None = None
        self._recipes: dict[int, tuple[Inputs, Shape, int]] = {}
        self._naive_handles: dict[tuple[int, str], tuple[TorchModuleAdapter, Any, Instance]] = {}

    # ------------------------------------------------------------------ building
    @property
    def component(self) -> str:
        return self.subject.component

    def config(self, **overrides: Any) -> Config:
        fixed = getattr(self.subject, "config", None) or {}  # what the subject fixes wins
        return dataclasses.replace(DEFAULT_CONFIG, **{**overrides, **fixed})

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
        if dtype == "float64":
            handle = self.adapter.build(self.subject, config, seed=seed)
        else:
            offered = self.dtypes()
            if dtype not in offered:
                raise Unsupported(
                    f"{self.adapter.name}:{self.subject.name} offers {', '.join(offered)}, "
                    f"not {dtype} (Adapter.dtypes)"
                )
            handle = self.adapter.build(self.subject, config, seed=seed, dtype=dtype)
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

    def require_params(self, inst: Instance) -> dict[str, np.ndarray]:
        if inst.params is None and _has_params(inst):
            pytest.skip(
                f"{self.adapter.name} gives no access to canonical parameters "
                "(load or params), which this check needs"
            )
        return inst.params or {}

    def inputs(
        self, inst: Instance, shape: Shape = DEFAULT_SHAPE, *, seed: int | None = None
    ) -> Inputs:
        seed = self.seed if seed is None else seed
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
        out = self.adapter.run(inst.handle, dict(inputs))
        if not isinstance(out, np.ndarray):
            raise CheckFailure(
                "adapter.output_not_array",
                f"run() returned {type(out).__name__}, not a numpy array",
            )
        if not np.issubdtype(out.dtype, np.floating):
            raise CheckFailure("adapter.output_not_float", f"run() returned dtype {out.dtype}")
        return out

    def gold(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        conventions: Conventions | None = None,
    ) -> np.ndarray:
        return expected(
            self.component, inputs, inst.params, inst.config, conventions or inst.conventions
        )

    def naive(self, inst: Instance, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """``ref`` of the tolerance rule: the torch reference model under the subject's
        conventions, in ``inst.dtype``, with the instance's (rounded) parameters."""
        naive, handle = self._naive(inst, inst.dtype)
        return np.asarray(naive.run(handle, dict(inputs)), dtype=np.float64)

    def _naive(self, inst: Instance, dtype: str) -> tuple[TorchModuleAdapter, Any]:
        key = (id(inst), dtype)
        if key not in self._naive_handles:
            from tck.adapters.reference import entry  # the reference adapter's own forwards

            naive = TorchModuleAdapter(
                "naive", [entry(self.component, inst.conventions, name=self.subject.name)]
            )
            handle = naive.build(self.subject, inst.config, seed=inst.seed, dtype=dtype)
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
        out = grad(inst.handle, dict(inputs), cotangent)
        if not isinstance(out, Mapping):
            raise CheckFailure(
                "adapter.grad_not_a_dict",
                f"grad() returned {type(out).__name__}, not a dict of numpy arrays",
            )
        return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}

    def gold_gradients(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        """float64 autograd through the torch reference on the same (rounded) values."""
        naive, handle = self._naive(inst, "float64")
        return naive.grad(handle, dict(inputs), cotangent)

    def naive_gradients(
        self, inst: Instance, inputs: Mapping[str, np.ndarray], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        """``ref`` for gradients: autograd through the torch reference in ``inst.dtype``."""
        naive, handle = self._naive(inst, inst.dtype)
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
        ref: np.ndarray | None = None,
        k: float | None = None,
    ) -> Comparison:
        """The tolerance rule in ``inst.dtype``; ``ref`` is the naive reference's output
        (required below float64, where its error sets the bound)."""
        if test.shape != gold.shape:
            raise CheckFailure(
                "shape.wrong_output_shape",
                f"output shape {test.shape}, the spec's is {gold.shape} (SPEC.md §10.6)",
                {"shape": list(test.shape), "expected_shape": list(gold.shape)},
            )
        ignore = self.ignore_mask(inst, gold)
        ref_err, lost = 0.0, 0
        if ref is not None:
            ref_err, lost = reference_error(ref, gold, ignore)
            if lost:  # the naive reference overflowed there: it can bound nothing
                overflow = ~np.isfinite(ref) & np.isfinite(gold)
                ignore = overflow if ignore is None else ignore | overflow
        elif inst.dtype != "float64":
            raise ValueError(f"comparing in {inst.dtype} needs the naive reference (ref=)")
        result = compare(
            test,
            gold,
            dtype=inst.dtype,
            ref_err=ref_err,
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
                if key in ("max_abs_err", "ratio", "nan_mismatch", "mean_abs_err") or key.endswith(
                    "max_abs_delta"
                ):
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
        ref = self.naive(inst, inputs) if inst.dtype != "float64" else None
        result = self.compare(inst, test, gold, ref=ref)
        self.calls.append(
            {
                "what": what,
                "seq_len": seq_len(inputs),
                "max_abs_err": result.max_abs_err,
                "ratio": result.ratio,
                "passed": result.passed,
                **call_facts(self.component, inputs, inst.config),  # SPEC.md §10.10
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
                gold = self.gold(inst, inputs, conv)
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
        hint = self._precision_hint(inst) if found is None and inst.dtype == "float64" else None
        if hint is not None:
            # A float64 graph that computes some step in float32 (an exported one: see
            # tck.adapters.onnx_runtime): the same hypotheses, at float32's precision.
            loose = dataclasses.replace(result, dtype="float32", ref_err=0.0)
            found = self._hypotheses(inst, inputs, test, loose)
            if found is None and _within(test, self.gold(inst, inputs), loose):
                found = (
                    "numerics.float64_precision_lost",
                    "agrees with the oracle to float32 precision only",
                )
            if found is not None:
                found = (found[0], f"{found[1]} ({hint})")
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
        for field in FIELDS.get(self.component, ()):
            values = self.matching_values(inst, inputs, test, field, tolerance)
            if values and getattr(inst.conventions, field) not in values:
                value = values[0]
                return (
                    convention_code(field, value),
                    f"behaves as {field}={value!r}, but the adapter declares "
                    f"{field}={getattr(inst.conventions, field)!r}",
                )
        for code, message, altered in self._mask_hypotheses(inputs):
            gold = self.gold(inst, altered)
            if test.shape == gold.shape and _within(test, gold, tolerance, np.isnan(gold)):
                return code, message
        return None

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


def _within(
    test: np.ndarray,
    gold: np.ndarray,
    tolerance: Comparison | None,
    ignore: np.ndarray | None = None,
) -> bool:
    """Does ``gold`` (an alternative hypothesis) explain ``test`` as well as the rule asks,
    in the dtype and with the naive reference's error of the failed comparison?"""
    if tolerance is None or tolerance.dtype == "float64":
        return compare(test, gold, ignore=ignore).passed
    return compare(
        test, gold, dtype=tolerance.dtype, ref_err=tolerance.ref_err, k=tolerance.k, ignore=ignore
    ).passed


def _area(component: str) -> str:
    return {
        "layer_norm": "layer_norm",
        "rms_norm": "layer_norm",
        "sinusoidal_pe": "positional",
        "rope": "rope",
        "attention": "attention",
        "mha": "attention",
        "ffn": "ffn",
        "embedding": "embedding",
        "patch_embed": "vit",
        "vit": "vit",
        "seq2seq": "model",
    }.get(component, "blocks")


def _has_params(inst: Instance) -> bool:
    return bool(param_shapes(inst.component, inst.config, inst.conventions))
