"""§3.3, §4.1, §10.6 A call that raises where the spec defines the output: what would it
compute?

Two checks, one idea: an exception names no class, so where a call raises the check makes
the nearest call that runs and lets the diagnosis name what it computes.

**A masked call that raises** (``shapes.masked_call_errors``). A layout bug that only a mask
can expose raises there: heads left ``[B, L, H, d]`` (flash-attn's layout) and handed to a
kernel that wants ``[B, H, L, d]`` run on unmasked calls, where the sequence and head axes
trade places silently, and raise on every masked one, where the mask ``[B, 1, 1, Lk]`` no
longer broadcasts; cross-attention keys taken from the wrong stream raise where ``Lq !=
Lk``. The report is left with ``adapter.exception``. On every component whose inputs include
a mask, where the default masked call raises, the check calls a fresh instance without any
mask, then without a mask and with ``Lk = Lq``, then without a mask on one token (a mask the
implementation builds itself broadcasts there), and compares the first call that runs with
the oracle: a mismatch is named by the diagnosis, beside the exception's words; a call that
matches leaves the exception alone (the mask handling is the only fault).

**A view that raises** (``shapes.view_errors``).

``tensor.view(shape)`` raises ``RuntimeError: view size is not compatible with input
tensor's size and stride`` when the tensor's memory cannot be read in that shape without a
copy (a slice of a fused projection, a transposed tensor). Code that cuts heads with a view
straight to ``(B, H, L, d)``, without the transpose, raises there on every call of more than
one token and runs only where the wrong layout equals the right one (a call of one token):
the outputs that run cannot show the bug, and the report is left with the exception
(``adapter.exception``), whose words name no class.

This check asks what the subject computes where it raises: it runs the default oracle
comparison of every component whose oracle splits or merges heads
(``tck.reference.variants.reaches``), in float64, with each view the tensor cannot take
performed as a ``reshape`` (a copy in the view's shape: exactly what the line would compute
on a contiguous tensor), and lets the diagnosis name the result
(``tck.conformance.diagnosis.explain``: a head split without the transpose is
``attention.heads_split_wrong_order``). A subject whose plain call runs is judged by the
oracle checks and skipped here; one whose views, made reshapes, give the spec's output is
left with its exception (the view's only fault is that it raises). Torch subjects only: the
views are intercepted with a ``torch.overrides.TorchFunctionMode``.

A view to a shape of **another size** (``shape '[2, 4, 24]' is invalid for input of size
240``), or two shapes that do not broadcast, is a shape read off an axis of another length:
NeMo's merge takes ``context.size()[:-2] + (hidden,)`` and, with the permute before it
left out, reads (B, H) where (B, L) belongs. Such a line runs where the sequence is as long
as the axis it was taken for (the head count, the head width); the check makes the first of
those calls that runs and lets the diagnosis name it (the merge without the transpose is
``attention.heads_merged_wrong_order``).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tck.adapters.base import Unsupported
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference import RECORDS
from tck.reference.inputs import Shape
from tck.reference.variants import reaches

spec = pytest.mark.spec
components = pytest.mark.components

HEADED = tuple(
    name for name in RECORDS if reaches(name, "split_heads") or reaches(name, "merge_heads")
)
# Components with an input the builder makes only for a masked call (a key-padding or keep
# mask, SPEC.md §4.1, §4.2).
MASKED = tuple(name for name, rec in RECORDS.items() if any(i.when == "masked" for i in rec.inputs))
# torch's words for a view the memory layout cannot give (aten/src/ATen/native/TensorShape.cpp)
VIEW_ERROR = "view size is not compatible with input tensor's size and stride"


def _views_as_reshapes() -> Any:
    """A torch function mode under which ``Tensor.view(shape)`` that raises ``VIEW_ERROR``
    returns ``reshape(shape)`` instead; ``mode.replaced`` lists (input shape, view shape)."""
    import torch
    from torch.overrides import TorchFunctionMode

    class ViewsAsReshapes(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.replaced: list[tuple[tuple[int, ...], tuple[Any, ...]]] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if func is not torch.Tensor.view:
                return func(*args, **kwargs)
            try:
                return func(*args, **kwargs)
            except RuntimeError as err:
                shape = args[1:]
                if VIEW_ERROR not in str(err) or any(isinstance(s, torch.dtype) for s in shape):
                    raise
                self.replaced.append((tuple(args[0].shape), tuple(shape)))
                return args[0].reshape(*shape)

    return ViewsAsReshapes()


@spec("3.3", "10.6", id="shapes.view_errors")
@components(*HEADED)
def test_view_errors(tck: Harness) -> None:
    """A call the spec defines that raises in a view: the output with that view made a
    reshape, or of a view to a shape of another size, the nearest call where that size is
    right; named by the diagnosis (SPEC.md §3.3, §10.6)."""
    pytest.importorskip("torch")
    inst = tck.instance()
    tck.require_params(inst)
    inputs = tck.inputs(inst, Shape())
    try:
        tck.run(inst, inputs)
    except RuntimeError as err:
        if SIZE_ERROR.search(str(err)):
            _nearest_length_that_runs(tck, err)
        if VIEW_ERROR not in str(err):
            pytest.skip(f"the call raises, not in a view: {type(err).__name__}")
        raised = err
    else:
        pytest.skip("the call runs: the oracle checks judge its output")
    mode = _views_as_reshapes()
    try:
        with mode:
            tck.assert_matches_oracle(inst, inputs, what="the call, its failing views as reshapes")
    except CheckFailure as failure:
        seen = list(dict.fromkeys(mode.replaced))[:3]
        where = "; ".join(f"{list(a)} viewed as {list(b)}" for a, b in seen)
        raise CheckFailure(
            failure.code,
            f"the call raises RuntimeError ({VIEW_ERROR}) in a view of a tensor whose memory "
            f"cannot take that shape ({where}); computed with that view as a reshape, "
            f"{failure.message} (SPEC.md §3.3, §10.6)",
            {**failure.metrics, "views_replaced": len(mode.replaced)},
        ) from None
    raise raised  # the views, made reshapes, give the spec: the exception is the only fault


# torch's words for a view or reshape to a shape that holds another number of elements, and
# for two shapes that do not broadcast: both what an axis taken for another gives
SIZE_ERROR = re.compile(
    r"shape '\[[-\d, ]*\]' is invalid for input of size \d+"
    r"|The size of tensor a \(\d+\) must match the size of tensor b \(\d+\)"
)


def _nearest_length_that_runs(tck: Harness, raised: RuntimeError) -> None:
    """A view to a shape of another size, or two shapes that do not broadcast: a shape read
    off an axis of another length (a merge that takes ``context.size()[:-2]`` from a
    (B, H, L, d) context left unpermuted; a split along the wrong axis, whose scores then
    meet the mask with the head count where the keys belong). Where the sequence is as long
    as the axis it was taken for, the head count or the head width, the sizes agree and the
    call runs: the first such call that runs is compared with the oracle, and a mismatch
    named by the diagnosis is the finding. Returns when none runs or the one that runs is
    the spec's."""
    config = tck.instance().config
    lengths = [
        (n, what)
        for n, what in ((config.n_heads, "the head count"), (config.head_dim_k, "the head width"))
        if n != Shape().lq and n > 1
    ]
    calls = [(Shape(lq=n, lk=n), f"of {n} tokens ({what})") for n, what in lengths]
    found = _first_call_that_runs(tck, calls)
    if found is None:
        return
    fresh, plain, shape, how = found
    try:
        tck.assert_matches_oracle(fresh, plain, what=f"the call {how}")
    except CheckFailure as failure:
        raise CheckFailure(
            failure.code,
            f"the call raises RuntimeError ({str(raised)[:120]}): a shape read off an axis of "
            f"another length; the same call {how}, where that shape has the right size, "
            f"runs, and {failure.message} (SPEC.md §3.3, §10.6)",
            {**failure.metrics, "nearest_length": shape.lq},
        ) from None


def _first_call_that_runs(
    tck: Harness, calls: list[tuple[Shape, str]] | tuple[tuple[Shape, str], ...]
) -> tuple[Any, Any, Shape, str] | None:
    """(instance, inputs, shape, words) of the first of ``calls`` (a shape and its words)
    that runs on a fresh instance; None when each raises."""
    for shape, how in calls:
        fresh = tck.instance()
        plain = tck.inputs(fresh, shape)
        try:
            tck.run(fresh, plain)
        except Exception:  # raises here too: try the next call
            continue
        return fresh, plain, shape, how
    return None


# The calls tried in turn when the default masked call raises: no mask; no mask with the keys
# as long as the queries (a cross-attention that takes its keys from the wrong stream); no
# mask and one token, where a mask the implementation builds itself ([B, 1, 1, L] from an
# all-ones attention mask) broadcasts over any layout.
UNMASKED_CALLS: tuple[tuple[Shape, str], ...] = (
    (Shape(masked=False), "without a mask"),
    (Shape(masked=False, lk=Shape().lq), "without a mask and with Lk = Lq"),
    (Shape(masked=False, lq=1, lk=1), "without a mask, of one token"),
)


@spec("4.1", "10.6", id="shapes.masked_call_errors")
@components(*MASKED)
def test_masked_call_errors(tck: Harness) -> None:
    """A masked call the spec defines that raises: the nearest unmasked call that runs,
    compared with the oracle and named by the diagnosis (SPEC.md §4.1, §10.6)."""
    inst = tck.instance()
    tck.require_params(inst)
    try:
        tck.run(inst, tck.inputs(inst, Shape()))
    except Unsupported:
        raise  # a call the adapter declines is a skip with its reason, not a bug
    except Exception as err:  # any other exception: what it hides is the question
        if VIEW_ERROR in str(err):
            pytest.skip("the call raises in a view: shapes.view_errors judges it")
        raised = err
    else:
        pytest.skip("the masked call runs: the oracle checks judge its output")
    words = f"{type(raised).__name__}: {str(raised)[:200]}"
    found = _first_call_that_runs(tck, UNMASKED_CALLS)
    if found is None:
        raise raised  # nothing nearer runs: the exception is all there is to report
    fresh, plain, _, how = found
    try:
        tck.assert_matches_oracle(fresh, plain, what=f"the call {how}")
    except CheckFailure as failure:
        raise CheckFailure(
            failure.code,
            f"the masked call raises ({words}); the same call {how} runs, and "
            f"{failure.message} (SPEC.md §4.1, §10.6)",
            {**failure.metrics, "masked_call_raised": type(raised).__name__},
        ) from None
    raise raised  # the unmasked call is the spec's: the mask handling is the only fault
