"""§3.3, §10.6 A view that raises where the spec defines the output: what would it compute?

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
"""

from __future__ import annotations

from typing import Any

import pytest

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
    reshape, named by the diagnosis (SPEC.md §3.3, §10.6)."""
    pytest.importorskip("torch")
    inst = tck.instance()
    tck.require_params(inst)
    inputs = tck.inputs(inst, Shape())
    try:
        tck.run(inst, inputs)
    except RuntimeError as err:
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
