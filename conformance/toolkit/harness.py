"""The ``tck`` fixture every check receives: build, run, compare.

A check is a plain pytest test. It asks the harness for an instance of the subject under
test (``instance``: built on the harness' device, in a dtype, with canonical parameters
rounded to it), runs it on canonical inputs (``inputs``, ``run``: the adapter gets private
copies) and compares with the oracle under the conventions the adapter declares
(``gold``, ``compare``, ``assert_matches_oracle``). Below float64 the bound takes the careful
reference's error in that dtype (``careful``: the torch reference model of
``tck.reference.model``, SPEC.md §10.7, §10.10), run on the subject's device; the oracle
stays numpy float64 on the CPU. What a check finds besides its verdict goes to its
``Recorder`` (``tck.conformance.toolkit.recorder``); a failed comparison is explained by
``tck.conformance.diagnosis.explain``; the careful run and gradients are
``tck.conformance.toolkit.careful``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tck.adapters import Adapter, Subject, TorchModuleAdapter, Unsupported
from tck.adapters.devices import DEFAULT_DEVICE, adapter_devices, offers_device
from tck.adapters.real_size import is_real_size
from tck.reference import RECORDS, Config, Conventions, init_params, param_shapes, record
from tck.reference.expected import expected
from tck.reference.inputs import DEFAULT_SHAPE, Inputs, Shape, make_inputs
from tck.reference.tolerance import (
    FLOOR,
    Comparison,
    careful_error,
    compare,
    floor_of,
    k_forward,
    round_to,
)

from .calling import GuardedAdapter, guarded_run
from .careful import careful, island_careful
from .globalstate import AdapterWorld
from .recorder import FailedCall, Recorder, seq_len
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


@dataclass
class Instance:
    """A built subject: the adapter's handle, its config and canonical params (if any)."""

    subject: Subject
    config: Config
    handle: Any
    params: dict[str, np.ndarray] | None  # rounded to ``dtype``, held as float64
    seed: int = 0  # what build and init_params were given
    dtype: str = "float64"  # what build was given (SPEC.md §10.7)
    # Why ``params`` are the subject's own rather than loaded canonical ones (None: loaded,
    # or not asked for): a round trip of parameters never loaded proves nothing.
    not_loaded: str | None = None

    @property
    def component(self) -> str:
        return self.subject.component

    @property
    def conventions(self) -> Conventions:
        return self.subject.conventions


class Harness:
    """What a check works with. One per (check, subject); its findings go to ``record``."""

    def __init__(
        self,
        adapter: Adapter,
        subject: Subject,
        seed: int = 0,
        device: str = DEFAULT_DEVICE,
        record: Recorder | None = None,
        world: AdapterWorld | None = None,
    ):
        self.subject, self.seed = subject, seed
        self.device = device  # where the subject and the careful run run
        # What the check finds besides its verdict: the plugin gives one per check.
        self.record = Recorder() if record is None else record
        # step, grad and load with run's protection (private copies), for every check
        # (and under its own numpy and torch settings, apart from the kit's: globalstate)
        self.adapter: Any = GuardedAdapter(adapter, self.record, world)
        self._recipes: dict[int, tuple[Inputs, Shape, int]] = {}
        self.naive_handles: dict[
            tuple[int, str, str], tuple[TorchModuleAdapter, Any, Instance]
        ] = {}
        self.combination_searches = 0  # tck.conformance.diagnosis.explain.matching_combination
        self.runs: dict[int, int] = {}  # id(instance) -> calls of run (state hypotheses)
        self._outputs: list[np.ndarray] = []  # what run() returned, the last few
        self.check: str | None = None  # the check's id, where the plugin says (twin_may_ask)

    # ------------------------------------------------------------------ building
    @property
    def component(self) -> str:
        return self.subject.component

    @property
    def real_size(self) -> bool:
        """Whether the subject is a real-size part of a checkpoint whose adapter states what
        its stacks run (``stack_plan``: ``tck.adapters.real_size``); a model of the user's
        at any size runs every check as it is."""
        plan = getattr(self.adapter, "stack_plan", None)
        return callable(plan) and is_real_size(self.subject)

    def config(self, **overrides: Any) -> Config:
        """DEFAULT_CONFIG with what the check needs, inside what the subject supports
        (``Subject.config`` fixes fields, ``Subject.supports`` a ConfigSpace: spaces.py);
        Unsupported when the subject cannot be what the check needs."""
        return subject_config(self.subject, DEFAULT_CONFIG, overrides)

    def dtypes(self) -> tuple[str, ...]:
        """The dtypes the adapter offers for this subject (float64 unless it says more)."""
        offered = getattr(self.adapter, "dtypes", None)
        return tuple(offered(self.subject)) if callable(offered) else ("float64",)

    def own_dtype(self) -> str:
        """float64 when the adapter offers it for this subject, else the highest precision
        it offers: the dtype of the checks that compare a subject with itself (batching,
        padding, determinism, causality, shapes), which need no oracle and so no float64.
        An ONNX graph or a model offered only in float32 is checked there in float32."""
        offered = self.dtypes()
        return next(
            (d for d in ("float64", "float32", "bfloat16", "float16") if d in offered), "float64"
        )

    def own_instance(self, config: Config | None = None, **kwargs: Any) -> Instance:
        """``instance`` in ``own_dtype``: for the checks that compare a subject with itself."""
        return self.instance(config, dtype=self.own_dtype(), **kwargs)

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
        values, not_loaded = None, None
        if params and not getattr(self.adapter, "loads_params", True):
            not_loaded = f"{self.adapter.name} never loads parameters (it checks its own)"
            try:  # an adapter that never loads (a checkpoint as it is): its own, at once
                values = self.adapter.params(handle)
            except Unsupported:
                values = None
        elif params:
            canonical = init_params(self.component, config, self.subject.conventions, seed=seed)
            canonical = {k: round_to(v, dtype) for k, v in canonical.items()}
            try:
                self.adapter.load(handle, canonical)
                values = canonical
            except Unsupported as why:
                not_loaded = f"{self.adapter.name} cannot load canonical parameters: {why}"
                try:
                    values = self.adapter.params(handle)
                except Unsupported:
                    values = None
        return Instance(self.subject, config, handle, values, seed, dtype, not_loaded)

    def require_device(self) -> None:
        """Unsupported unless the adapter runs this subject on the harness' device."""
        if not offers_device(self.adapter, self.subject, self.device):
            offered = adapter_devices(self.adapter, self.subject)
            why = f"{self.adapter.name}:{self.subject.name} runs on {', '.join(offered)}"
            require = getattr(self.adapter, "require_device", None)
            if callable(require):  # its own words, with its reason
                require(self.subject, self.device)
            raise Unsupported(f"{why}, not {self.device} (Adapter.devices)")

    @contextlib.contextmanager
    def on_the_cpu(self, why: str) -> Iterator[None]:
        """Build and run on the CPU inside the block, whatever the harness' device, with a
        note saying so: for the probes whose refusal on a GPU would end the process's use of
        it (an index out of range is a device-side assert on CUDA, and the context stays
        broken for every later call, torch's ``cudaErrorAssert``). Unsupported where the
        adapter does not run the subject on the CPU."""
        if self.device == DEFAULT_DEVICE:
            yield
            return
        if not offers_device(self.adapter, self.subject, DEFAULT_DEVICE):
            raise Unsupported(
                f"{why}; {self.adapter.name}:{self.subject.name} does not run on the CPU"
            )
        device, self.device = self.device, DEFAULT_DEVICE
        self.note({"probed_on": f"cpu, not {device}: {why}"})
        try:
            yield
        finally:
            self.device = device

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

    def release(self) -> None:
        """Drop what the harness holds between calls (the careful runs' modules, the input
        recipes, the last outputs): a check is over."""
        self.naive_handles.clear()
        self._recipes.clear()
        self._outputs = []
        _ORACLE_MEMO.release(id(self))  # a twin's check: the answers it used go
        GRADIENT_MEMO.release(id(self))
        if _real_size_stack(self.subject):  # its arrays are the checkpoint's size
            give_back_freed_memory()

    def twin_may_ask(self, dtype: str) -> bool:
        """Whether another subject of this component (an attention implementation's twin:
        ``causal_lm[sdpa]`` for ``causal_lm[eager]``) is offered in ``dtype`` and runs this
        check there (a real-size stack's ``stack_plan``), and so may ask the oracle what
        this check asks (``OracleMemo``). hf.vit's eager stacks run in
        float32 only, their sdpa twins in float64: an answer kept for such a twin is never
        asked for (ViT-B/16: 0.65 GB of float64 reference gradients per stack, held until a
        later check on the same component)."""
        stem = self.subject.name.partition("[")[0]
        subjects = getattr(self.adapter, "subjects", None)
        offered = getattr(self.adapter, "dtypes", None)
        if not callable(subjects) or not callable(offered):
            return True  # cannot tell: keep it, the memo's own rules drop it
        twins = [
            s
            for s in subjects()
            if s.name != self.subject.name and s.name.partition("[")[0] == stem
        ]
        plan = getattr(self.adapter, "stack_plan", None)  # a real-size stack's stated set

        def runs(twin: Subject) -> bool:
            if dtype not in offered(twin):
                return False
            if not callable(plan) or self.check is None:
                return True
            return plan(twin, self.check, {"dtype": dtype}) is None

        return any(runs(s) for s in twins)

    def recipe(self, inputs: Mapping[str, np.ndarray]) -> tuple[Shape, int] | None:
        """How ``inputs`` were made (shape, seed), if by ``self.inputs`` (possibly changed
        since: the caller compares before relying on it)."""
        made, shape, seed = self._recipes.get(id(inputs), (None, None, None))
        return (shape, seed) if made is inputs else None

    # ------------------------------------------------------------------ running
    def run(self, inst: Instance, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The adapter's output for ``inputs``, through ``calling.guarded_run``: the adapter
        gets private copies of the inputs and the check a private copy of the output; an
        input changed in place or an output buffer reused is a side effect, recorded."""
        require_length(self.subject, inputs)  # never longer than the subject takes
        self.runs[id(inst)] = self.runs.get(id(inst), 0) + 1
        return guarded_run(self.adapter.run, inst.handle, inputs, self.record, self._outputs)

    def gold(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        conventions: Conventions | None = None,
    ) -> np.ndarray:
        conventions = conventions or inst.conventions
        key = _ORACLE_MEMO.key(self.component, inputs, inst.params, inst.config, conventions)
        found = _ORACLE_MEMO.get(key, id(self))
        if found is not None:
            return found
        gold = expected(self.component, inputs, inst.params, inst.config, conventions)
        return _ORACLE_MEMO.put(key, gold, inst.params, id(self))

    def ignore_mask(
        self,
        inst: Instance,
        gold: np.ndarray,
        inputs: Mapping[str, np.ndarray] | None = None,
    ) -> np.ndarray | None:
        """Positions the spec does not promise: those the declared conventions leave
        undefined (§4.4 'undefined'), and, given the ``inputs``, the padded query rows of a
        causal decoder-only subject (§11.7: their outputs are not promised; a model that
        derives its position ids from the mask, ``cumsum - 1`` as transformers does, places
        its pads elsewhere than the oracle's default 0 .. L-1)."""
        ignore = np.isnan(gold) if inst.conventions.fully_masked_rows == "undefined" else None
        if inputs is not None and self.component in CAUSAL_SUBJECTS:
            pads = padded_positions(inputs, gold.shape)
            if pads is not None:
                ignore = pads if ignore is None else ignore | pads
        return ignore

    # ------------------------------------------------------------------ comparing
    def compare(
        self,
        inst: Instance,
        test: np.ndarray,
        gold: np.ndarray,
        *,
        careful: np.ndarray | None = None,
        k: float | None = None,
        inputs: Mapping[str, np.ndarray] | None = None,
    ) -> Comparison:
        """The tolerance rule in ``inst.dtype``; ``careful`` is the careful run's output
        (required below float64, where its error sets the bound); ``inputs``, when given,
        leave out what ``ignore_mask`` says they do not promise."""
        if test.shape != gold.shape:
            raise CheckFailure(
                "shape.wrong_output_shape",
                f"output shape {test.shape}, the spec's is {gold.shape} (SPEC.md §10.6)",
                {"shape": list(test.shape), "expected_shape": list(gold.shape)},
            )
        if careful is None and inst.dtype != "float64":
            raise ValueError(f"comparing in {inst.dtype} needs the careful run (careful=)")
        k = k_forward(self.component) if k is None else k
        result, lost = self._compare(inst, test, gold, careful, k, inputs)
        if (
            not result.passed
            and careful is None
            and inputs is not None
            and floor_of("float64") > FLOOR["float64"]
        ):
            # A float64 subject with float32 islands (SPEC.md §10.12) that fails the island
            # floor: held to the reference with the same steps in float32 (k times its
            # error, the rule of §10.7), which passing at the floor alone never needs.
            island = island_careful(self, inst, inputs)
            if island is not None and island.shape == gold.shape:
                result, lost = self._compare(inst, test, gold, island, k, inputs)
        self.note(result.metrics())
        if lost:
            self.note({"ref_nonfinite": lost})
        return result

    def _compare(
        self,
        inst: Instance,
        test: np.ndarray,
        gold: np.ndarray,
        careful: np.ndarray | None,
        k: float,
        inputs: Mapping[str, np.ndarray] | None,
    ) -> tuple[Comparison, int]:
        """The tolerance rule, and the positions where the careful run overflowed."""
        ignore = self.ignore_mask(inst, gold, inputs)
        careful_err, lost = 0.0, 0
        if careful is not None:
            careful_err, lost = careful_error(careful, gold, ignore)
            if lost:
                # The careful run overflowed where the oracle is finite: it bounds nothing
                # there, so a finite output is not compared; a non-finite one is compared and
                # fails (numerics.overflow), since an overflowing yardstick excuses no
                # overflow (SPEC.md §10.7).
                unbounded = ~np.isfinite(careful) & np.isfinite(gold) & np.isfinite(test)
                ignore = unbounded if ignore is None else ignore | unbounded
        result = compare(test, gold, dtype=inst.dtype, careful_err=careful_err, k=k, ignore=ignore)
        return result, lost

    def compare_chunked(
        self,
        inst: Instance,
        test: np.ndarray,
        chunks: Chunks,
        inputs: Mapping[str, np.ndarray],
        k: float | None = None,
    ) -> Comparison:
        """``compare`` of ``test`` with the oracle given in ``chunks`` of positions (axis 1:
        the slice, the oracle's values there, the careful run's below float64): the same
        rule, its parts combined over the chunks (``combine_chunks``), so the whole oracle
        output is never held. A float64 subject with float32 islands that fails the floor
        is held to the island yardstick, as ``compare`` does, formed in chunks too
        (``careful.careful_hidden`` under the islands; the oracle's hidden states are
        not computed again)."""
        k = k_forward(self.component) if k is None else k
        result, lost = self._chunked(inst, test, chunks(), inputs, k)
        if not result.passed and inst.dtype == "float64" and floor_of("float64") > FLOOR["float64"]:
            from .careful import _islands_in_float32, careful_hidden

            with _islands_in_float32(inst) as formed:
                island = careful_hidden(self, inst, inputs) if formed else None
            if island is not None:
                result, lost = self._chunked(inst, test, chunks(island), inputs, k)
        self.note(result.metrics())
        if lost:
            self.note({"ref_nonfinite": lost})
        return result

    def _chunked(
        self,
        inst: Instance,
        test: np.ndarray,
        chunks: Iterator[tuple[slice, np.ndarray, np.ndarray | None]],
        inputs: Mapping[str, np.ndarray],
        k: float,
    ) -> tuple[Comparison, int]:
        parts, lost = [], 0
        for where, gold, careful_part in chunks:
            index = (slice(None), where)
            ignore = self.ignore_mask(inst, gold, _sliced(inputs, where, test.shape))
            if ignore is not None and not ignore.any():  # nothing ignored here: the rule's
                ignore = None  # shorter path, the same comparison (tolerance._compare_finite)
            careful_err = 0.0
            if careful_part is not None:
                careful_err, lost_here = careful_error(careful_part, gold, ignore)
                lost += lost_here
                if lost_here:  # as _compare: an overflowing yardstick bounds nothing there
                    unbounded = ~np.isfinite(careful_part) & np.isfinite(gold)
                    unbounded &= np.isfinite(test[index])
                    ignore = unbounded if ignore is None else ignore | unbounded
            parts.append(chunk_part(test[index], gold, ignore, where.start or 0, careful_err))
        return combine_chunks(parts, test.shape, inst.dtype, k), lost

    def note(self, metrics: Mapping[str, Any]) -> None:
        """Record metrics (the worst of each across calls): ``Recorder.note``."""
        self.record.note(metrics)

    def convention(self, code: str, message: str) -> None:
        """Record an observed, declared deviation from the canonical spec."""
        self.record.convention(code, message)

    def assert_matches_oracle(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        what: str = "output",
        *,
        by_layer: bool = False,
    ) -> np.ndarray:
        """Run and compare with the oracle; on failure, explain and raise CheckFailure.
        With ``by_layer``, where the adapter records a real-size stack's layers
        (``layer_states``), the call is first judged layer by layer (``teacher``): a pass
        there is the call's pass; anything else is judged by the whole comparison below,
        with the same output (the model is not run again)."""
        self.require_params(inst)
        capture = getattr(self.adapter, "layer_states", None) if by_layer else None
        if callable(capture):
            from .teacher import judged_rows

            with capture(inst.handle) as states:
                if states is not None:  # the logits at the judged positions are enough
                    states.keep_rows = lambda length: judged_rows(length, self.seed)
                test = self.run(inst, inputs)
            if states is not None and states.complete() and inst.params:
                if self._judged_by_layer(inst, inputs, test, states, what):
                    return test
            if states is not None and states.logits_rows is not None:
                test = self.run(inst, inputs)  # the whole comparison needs every position
            del states
        else:
            test = self.run(inst, inputs)
        chunks = gold_chunks(self, inst, inputs, test.shape)
        if chunks is not None:  # a long call of a language model: its logits in chunks
            result = self.compare_chunked(inst, test, chunks, inputs)
        else:
            gold = self.gold(inst, inputs)
            if test.shape != gold.shape:
                self._raise_shape(inst, inputs, test, gold, what)
            bound_by = careful(self, inst, inputs) if inst.dtype != "float64" else None
            result = self.compare(inst, test, gold, careful=bound_by, inputs=inputs)
        self.record.calls.append(
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
            self.record.failed_call = FailedCall(inst, dict(inputs), what, self.recipe(inputs))
            from tck.conformance.diagnosis.explain import explain  # it builds on this module

            code, message = explain(self, inst, inputs, test, result)
            message += padded_worst(inputs, test.shape, result.worst_index)
            raise CheckFailure(code, f"{what}: {message}", result.metrics())
        return test

    def _raise_shape(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        test: np.ndarray,
        gold: np.ndarray,
        what: str,
    ) -> None:
        """An output of another shape than the spec's: a hypothesis whose output has that
        shape and reproduces it names the cause; otherwise the shape is the finding."""
        from tck.conformance.diagnosis.explain import explain_shape  # it builds on this module

        self.record.failed_call = FailedCall(inst, dict(inputs), what, self.recipe(inputs))
        shape = f"output shape {test.shape}, the spec's is {gold.shape} (SPEC.md §10.6)"
        found = explain_shape(self, inst, inputs, test)
        metrics = {"shape": list(test.shape), "expected_shape": list(gold.shape)}
        if found is not None:
            raise CheckFailure(found[0], f"{what}: {found[1]}; {shape}", metrics)
        raise CheckFailure("shape.wrong_output_shape", f"{what}: {shape}", metrics)

    def _judged_by_layer(
        self,
        inst: Instance,
        inputs: Mapping[str, np.ndarray],
        test: np.ndarray,
        states: Any,
        what: str,
    ) -> bool:
        """Whether ``test`` passes the layer-by-layer judgement (``teacher.judge``); a pass
        is recorded as the call's row, saying how it was judged."""
        from .teacher import judge

        if test.ndim != 3 or "ids" not in inputs:
            return False
        judgement = judge(
            inputs,
            test,
            states,
            inst.params or {},
            inst.config,
            inst.conventions,
            dtype=inst.dtype,
            component=self.component,
            seed=self.seed,
        )
        if not judgement.passed:
            return False
        part, worst = judgement.worst()
        self.note(worst.metrics())
        self.note({"judged_by_layer": {"layers": states.n_layers, "positions": judgement.rows}})
        self.record.calls.append(
            {
                "what": f"{what}, judged layer by layer: the input to layer 0 at every "
                f"position, each of {states.n_layers} layers' outputs and the logits at "
                f"{judgement.rows} positions from 0 to {seq_len(inputs) - 1} (worst: {part})",
                "seq_len": seq_len(inputs),
                "max_abs_err": worst.max_abs_err,
                "ratio": worst.ratio,
                "passed": True,
                **call_facts(self.component, inputs, inst.config),  # SPEC.md §10.11
            }
        )
        return True


Chunks = Callable[..., Iterator[tuple[slice, np.ndarray, "np.ndarray | None"]]]

# A call whose output has more values than this, where the oracle can give it in chunks of
# positions (a causal LM's logits: its hidden states times the output table), is compared
# chunk by chunk (``gold_chunks``): GPT-2 small's logits at 1024 tokens are 51 M values,
# 0.41 GB in float64 per array, and the whole comparison held about five such arrays.
CHUNKED_ABOVE = 1 << 24  # 16.8 M values, 128 MB in float64
CHUNK_VALUES = 1 << 22  # values per chunk: 32 MB in float64


def gold_chunks(
    h: Harness, inst: Instance, inputs: Mapping[str, np.ndarray], shape: tuple[int, ...]
) -> Chunks | None:
    """The oracle's output for ``inputs`` in chunks of positions: a function that yields
    (slice of axis 1, values, and below float64 the careful run's values there; given
    another careful run, that one's), as often as asked, from hidden states computed
    once; or None where it is not given so: a component whose record lacks the tag
    ``head_per_position``, an output of at most ``CHUNKED_ABOVE`` values, or no canonical
    parameters. The oracle's hidden states (B, L, D) are computed once; each
    chunk's logits are those rows times the output table (``oracle.causal_lm_logits``, the
    oracle's own last step), so a chunk equals the same rows of the whole call up to the
    rounding of one matrix product (the sum over D in another blocking: a few float64
    ulps of the row's largest term, far below the float64 floor).
    The careful run (below float64) is the torch reference with its normed hidden states
    taken the same way (``careful.careful_hidden``), its logits formed per chunk in its
    dtype."""
    from tck.reference import oracle

    size = int(np.prod(shape))
    chunked = record(h.component).has("head_per_position") and len(shape) == 3
    if not chunked or size <= CHUNKED_ABOVE or not inst.params:
        return None
    careful_of = None
    if inst.dtype != "float64":
        from .careful import careful_hidden

        careful_of = careful_hidden(h, inst, inputs)
        if careful_of is None:
            return None
    params, config, conventions = inst.params, inst.config, inst.conventions
    hidden = oracle.causal_lm(
        inputs["ids"],
        params,
        config,
        key_padding=inputs.get("key_padding"),
        positions=inputs.get("positions"),
        conventions=conventions,
        head=False,
    )
    step = max(1, CHUNK_VALUES // max(1, shape[0] * shape[2]))

    def chunks(
        careful_of: Callable[[slice], np.ndarray] | None = careful_of,
    ) -> Iterator[tuple[slice, np.ndarray, np.ndarray | None]]:
        for start in range(0, shape[1], step):
            where = slice(start, min(start + step, shape[1]))
            gold = oracle.causal_lm_logits(hidden[:, where], params, config, conventions)
            yield where, gold, None if careful_of is None else careful_of(where)

    return chunks


@dataclass
class ChunkPart:
    """What ``compare`` needs of one chunk to combine with the others (``combine_chunks``)."""

    max_err: float
    err_sum: float
    counted: int  # positions whose difference counts (the mean's denominator)
    worst: tuple[int, ...] | None  # in the whole output's indices
    scale: float  # max |gold| where it counts
    nan_mismatch: int
    first_mismatch: tuple[int, ...] | None
    test_bad: int
    gold_bad: int
    careful_err: float


def chunk_part(
    test: np.ndarray,
    gold: np.ndarray,
    ignore: np.ndarray | None,
    offset: int,
    careful_err: float = 0.0,
) -> ChunkPart:
    """``compare``'s parts on one chunk whose axis 1 starts at ``offset``: the rule run on
    the chunk (bound aside), and the counts and scale the rule takes over the whole."""
    result = compare(test, gold, ignore=ignore)

    def shifted(index: tuple[int, ...] | None) -> tuple[int, ...] | None:
        return None if index is None else (index[0], index[1] + offset, *index[2:])

    counted = gold.size
    if ignore is None and np.isfinite(test).all() and np.isfinite(gold).all():
        scale = float(np.abs(gold).max(initial=0.0))
    else:  # compare's ``both & isfinite(gold)``: considered, neither NaN, gold finite
        considered = np.ones(gold.shape, bool) if ignore is None else ~np.asarray(ignore, bool)
        both = considered & ~np.isnan(test) & ~np.isnan(gold)
        counted = int(both.sum())
        scale = float(np.abs(np.where(both & np.isfinite(gold), gold, 0.0)).max(initial=0.0))
    nan_first = result.worst_index if result.nan_mismatch else None
    return ChunkPart(
        result.max_abs_err,
        result.mean_abs_err * counted,
        counted,
        shifted(result.worst_index),
        scale,
        result.nan_mismatch,
        shifted(nan_first),
        result.nonfinite_test,
        result.nonfinite_gold,
        careful_err,
    )


def combine_chunks(
    parts: list[ChunkPart],
    shape: tuple[int, ...],
    dtype: str,
    k: float,
    scale: float | None = None,
) -> Comparison:
    """The ``Comparison`` of the whole output from its chunks' parts: the largest error and
    its index (the first chunk's on a tie, as argmax takes the first), the mean over every
    counted position, the bound k x careful error + floor x max(1, max |gold|) with both
    taken over every chunk (``scale``, where given, replaces max |gold| as in ``compare``),
    the first NaN mismatch."""
    del shape  # the indices are already the whole output's
    max_err = max((p.max_err for p in parts), default=0.0)
    worst = next((p.worst for p in parts if p.max_err == max_err), None)
    counted = sum(p.counted for p in parts)
    mean_err = sum(p.err_sum for p in parts) / counted if counted else 0.0
    careful_err = max((p.careful_err for p in parts), default=0.0)
    if scale is None:
        scale = max((p.scale for p in parts), default=0.0)
    bound = k * careful_err + floor_of(dtype) * max(1.0, scale)
    nan_mismatch = sum(p.nan_mismatch for p in parts)
    if nan_mismatch:
        worst = next(p.first_mismatch for p in parts if p.nan_mismatch)
    test_bad, gold_bad = sum(p.test_bad for p in parts), sum(p.gold_bad for p in parts)
    ratio = max_err / bound if bound > 0 else float("inf")
    passed = nan_mismatch == 0 and not (test_bad or gold_bad) and max_err <= bound
    return Comparison(
        passed,
        max_err,
        mean_err,
        bound,
        ratio,
        nan_mismatch,
        worst,
        dtype,
        careful_err,
        k,
        test_bad,
        gold_bad,
    )


def compare_by_rows(
    test: np.ndarray,
    gold: np.ndarray,
    *,
    dtype: str,
    careful_err: float,
    k: float,
    scale: float | None = None,
) -> Comparison:
    """``compare`` (nothing ignored) of a large array in chunks of rows (axis 0) of at most
    ``CHUNK_VALUES`` values, combined (``combine_chunks``): its temporaries are a chunk's,
    not the whole array's (a token table's gradient for GPT-2 small: 0.31 GB each). Arrays
    of at most ``CHUNK_VALUES`` values, or without rows, are compared whole."""
    if gold.ndim == 0 or gold.size <= CHUNK_VALUES or np.shape(test) != np.shape(gold):
        return compare(test, gold, dtype=dtype, careful_err=careful_err, k=k, scale=scale)
    rows = max(1, CHUNK_VALUES // max(1, gold.size // gold.shape[0]))
    wide_test, wide_gold = test[None], gold[None]  # rows on axis 1, as chunk_part takes them
    parts = [
        chunk_part(
            wide_test[:, start : start + rows],
            wide_gold[:, start : start + rows],
            None,
            start,
            careful_err,
        )
        for start in range(0, gold.shape[0], rows)
    ]
    result = combine_chunks(parts, wide_gold.shape, dtype, k, scale=scale)
    if result.worst_index is not None:
        result.worst_index = result.worst_index[1:]
    return result


def largest_finite(values: np.ndarray) -> float:
    """max |values| over the finite ones (0 for none), a chunk of rows at a time."""
    flat = values.reshape(-1) if values.flags.c_contiguous else np.ravel(values)
    largest = 0.0
    for start in range(0, flat.size, CHUNK_VALUES):
        part = np.abs(flat[start : start + CHUNK_VALUES])
        largest = max(largest, float(part[np.isfinite(part)].max(initial=0.0)))
    return largest


def _sliced(
    inputs: Mapping[str, np.ndarray], where: slice, shape: tuple[int, ...]
) -> dict[str, np.ndarray]:
    """The inputs whose first two axes are the output's (batch, positions), cut to the
    positions ``where`` (what ``ignore_mask`` reads: ``key_padding``)."""
    out = {}
    for name, value in inputs.items():
        array = np.asarray(value)
        if array.ndim >= 2 and array.shape[:2] == tuple(shape[:2]):
            out[name] = array[:, where]
    return out


class OracleMemo:
    """The oracle's outputs for one check on one subject, kept for the same check on its
    twin. A checkpoint checked as it is offers each attention implementation (eager, sdpa)
    as a subject sharing one set of canonical parameters, and the twin's check asks the
    oracle exactly what the first asked (at a checkpoint's full length, one float64 forward
    of every layer: 25 CPU seconds for GPT-2 small at 1024 tokens). The oracle is a pure
    function of the call, so the twin gets the first's answers, read-only.

    Only parameters nobody can write are keyed, by identity: read-only numpy arrays (the
    checkpoint's export, ``pretrained._export``), held here so that their ids stay theirs.
    Inputs are keyed by content. Entries are grouped by parameter set, and a group holds one
    check's answers (one harness'): another check on the same parameters replaces them, and
    the twin's check drops them when it ends (``release``). Other subjects run in between
    (layer 0's pieces come between the model's eager and sdpa subjects) on their own
    parameters, so they neither use nor evict the group. A full-length output (GPT-2's
    logits at 1024 tokens, 0.4 GB) thus lives from one subject's check to its twin's."""

    def __init__(self) -> None:
        self._entries: dict[Any, tuple[Any, Any]] = {}
        # parameter set -> (component, the harness that asked)
        self._owners: dict[Any, tuple[str, int]] = {}
        self._released: set[int] = set()  # harnesses whose check is over
        self._used: dict[int, set[Any]] = {}  # harness -> the groups it was answered from

    @staticmethod
    def key(
        component: str,
        inputs: Mapping[str, np.ndarray],
        params: Mapping[str, np.ndarray] | None,
        config: Config,
        conventions: Conventions,
    ) -> Any:
        """The call's identity, or None when it cannot be keyed safely (a writable
        parameter array, an unhashable value)."""
        if not params:
            return None
        arrays = []
        for name in sorted(params):
            value = params[name]
            if not isinstance(value, np.ndarray) or value.flags.writeable:
                return None
            arrays.append((name, id(value)))
        digest = hashlib.blake2b(digest_size=16)
        for name in sorted(inputs):
            value = np.ascontiguousarray(inputs[name])
            digest.update(f"{name}:{value.dtype.str}:{value.shape};".encode())
            digest.update(value.tobytes())
        # The oracle computes every step in float64: a subject's float32 steps set its bound
        # (SPEC.md §10.12), not the oracle's answer, so twins that differ only there (hf.llama
        # eager: a float32 softmax; sdpa: not) ask the same question.
        oracle_conventions = dataclasses.replace(conventions, float32_steps=())
        key = (component, tuple(arrays), config, oracle_conventions, digest.hexdigest())
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def get(self, key: Any, owner: int) -> Any:
        """The kept answer for ``key``, read-only, or None; ``owner`` (a harness' id) is
        noted as its user, for ``release``."""
        found = None if key is None else self._entries.get(key)
        if found is None:
            return None
        self._used.setdefault(owner, set()).add(key[1])
        return _read_only(found[0])

    def put(self, key: Any, gold: Any, params: Any, owner: int) -> Any:
        """Keep ``gold`` (an array, or a dict of arrays: gradients) for ``key``, asked by
        ``owner`` (a harness' id); the caller gets read-only views, so a check that wrote
        into one would fail loudly, not change the twin's."""
        if key is None:
            return gold
        group = key[1]
        if self._owners.get(group, (key[0], owner))[1] != owner:  # another check's: they go
            self._drop(group)
        # A finished check's answers on the same component are another parameter set's
        # (another dtype's export, a stack without a twin): the twin they waited for would
        # have asked before this check, which follows it, so they go (ViT-B/16 held four
        # gradient sets of 0.65 GB to the end of the run).
        finished = [
            g
            for g, (component, asker) in self._owners.items()
            if g != group and component == key[0] and asker in self._released
        ]
        for other in finished:
            self._drop(other)
        self._owners[group] = (key[0], owner)
        self._entries[key] = (gold, params)
        return _read_only(gold)

    def release(self, owner: int) -> None:
        """``owner``'s check is over: the groups it was answered from go (it was the twin)."""
        for group in self._used.pop(owner, set()):
            self._drop(group)
        if any(o == owner for _, o in self._owners.values()):
            self._released.add(owner)

    def _drop(self, group: Any) -> None:
        self._entries = {k: v for k, v in self._entries.items() if k[1] != group}
        _, owner = self._owners.pop(group, ("", None))
        if all(o != owner for _, o in self._owners.values()):
            self._released.discard(owner)

    def clear(self) -> None:
        self._entries, self._owners, self._used, self._released = {}, {}, {}, set()


def _read_only(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {name: _read_only(array) for name, array in value.items()}
    if not isinstance(value, np.ndarray):
        return value
    view = value.view()
    view.setflags(write=False)
    return view


_ORACLE_MEMO = OracleMemo()


_LIBC: Any = None


def _real_size_stack(subject: Subject) -> bool:
    """Whether ``subject`` is a real-size checkpoint's whole stack (``real_size.applies``),
    whose checks allocate and free arrays of the checkpoint's size."""
    from tck.adapters.real_size import applies

    try:
        return applies(subject)
    except ValueError:  # a bad $TCK_STACK_PLAN: the plan itself says so, not this
        return False


def give_back_freed_memory() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``), where there
    is one. glibc raises its threshold for serving a block by ``mmap`` to the largest block
    freed so far (up to 32 MB), so after a check frees a real-size checkpoint's arrays the
    next ones come from the heap, whose freed pages count as resident until trimmed: the
    peak then ratchets from check to check (ViT-B/16: 0.35 GB given back after one stack's
    gradient check, measured 2026-11-26). One call per check of a real-size checkpoint's
    whole stack, not after every check: the pages given back are faulted in again by
    the next check that needs them (BERT-base trimmed after every check: 18 s of system time,
    against 13 after its stacks' checks only, both at load 8 to 15); elsewhere (macOS,
    musl) nothing."""
    global _LIBC
    if _LIBC is None:
        _LIBC = False
        try:
            import ctypes
            import sys

            if sys.platform.startswith("linux"):
                trim = ctypes.CDLL("libc.so.6").malloc_trim
                trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
                _LIBC = trim
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC(0)


# float64 autograd through the reference, kept the same way (careful.gold_gradients)
GRADIENT_MEMO = OracleMemo()


# The causal decoder-only subjects (SPEC.md §11), whose padded query rows are not promised.
CAUSAL_SUBJECTS = frozenset(name for name, rec in RECORDS.items() if "kv_cache" in rec.tags)


def padded_positions(inputs: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray | None:
    """The padded query positions of an output of ``shape`` (batch, length, ...): where the
    ``key_padding`` of a self-attention call is False, broadcast; None without one."""
    keep = inputs.get("key_padding")
    if keep is None or len(shape) < 2 or np.shape(keep) != tuple(shape[:2]):
        return None
    keep = np.asarray(keep, bool)
    return np.broadcast_to(~keep.reshape(keep.shape + (1,) * (len(shape) - 2)), shape)


def padded_worst(
    inputs: Mapping[str, np.ndarray], shape: tuple[int, ...], worst: tuple[int, ...] | None
) -> str:
    """Words for a failure whose worst index is a padded position (empty otherwise)."""
    pads = padded_positions(inputs, shape)
    if pads is None or worst is None or len(worst) != len(shape) or not pads[worst]:
        return ""
    return (
        f"; the worst index {worst} is a PADDED position (key_padding False at batch row "
        f"{worst[0]}, position {worst[1]}): its output depends on what the subject does with "
        "pads (SPEC.md §4.2 padded_query_rows, §11.7)"
    )


def _area(component: str) -> str:
    return record(component).area


def _has_params(inst: Instance) -> bool:
    return bool(param_shapes(inst.component, inst.config, inst.conventions))
