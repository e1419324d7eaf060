"""More explanations for an oracle mismatch: head split and merge layouts,
biases that are never added, a norm gain read as ``1 + weight``, and a residual taken from
the normalised input.

Each hypothesis is an ``Alternative`` (``tck.conformance.diagnosis.alternatives``): the oracle
with a
piece replaced (in a separate oracle passed to the comparison, ``tck.reference.variants``)
or with other parameters, judged like a convention: does it reproduce the implementation's
output within the failed comparison's bound, while differing from the spec's?
``more_hypotheses`` yields them for a component whose oracle runs the replaced piece (read
from its record's oracle call); the explainer tries them after its own, so that nothing here
can take a diagnosis away from a more specific explanation found first.

The codes (SPEC.md Appendix B):

- ``attention.heads_merged_wrong_order`` (inside layers, stacks and models; mha has its own
  check): ``(B, H, L, d)`` reshaped to ``(B, L, H*d)`` without the transpose;
- ``attention.heads_split_wrong_order``: ``x.view(B, H, L, d)`` (or ``view(B * H, -1, d)``)
  instead of ``x.view(B, L, H, d).transpose(1, 2)``: each "head" is a block of positions'
  channels, positions and heads interleaved before the scores;
- ``params.bias_unused``: a projection's bias is loaded but never added (a port that reads
  only the weights, ``F.linear(x, w)`` without ``b``): the named groups, each module's
  biases, and every bias under one parent module (an attention's four projections);
- ``layer_norm.gain_plus_one``: the norm multiplies by ``1 + weight`` (Gemma's RMSNorm
  convention) where the weights are stored for ``weight`` (or the reverse, ``weight - 1``);
- ``blocks.residual_after_norm``: a pre-LN sublayer adds its output to the *normalised*
  input, ``h = norm(x); h + f(h)``, instead of ``x + f(norm(x))``, in every sublayer or
  in one sublayer only (the k-th of the call, in the order the oracle runs them);
- ``blocks.norm_on_branch``: the norm applied to a sublayer's output before the residual add,
  ``x + Norm(f(x))``, in every sublayer or in one alone;
- ``blocks.residual_missing``: a sublayer without its residual add, in every sublayer or in
  one only; ``blocks.norm_placement_post`` / ``_pre``: one sublayer alone normalised on the
  other side of its residual add (the whole stack's placement is the convention field);
- ``blocks.residual_added_twice``: a sublayer's branch that adds its own input to its output
  while the layer adds the residual too, ``x + h + f(h)``, or adds the residual stream itself,
  ``2x + f(h)``, in every sublayer, in one alone, or in every sublayer of one kind (by its
  norm's name); every layer's input added to its output again by the code around it;
- ``blocks.residual_from_layer_input`` / ``blocks.branch_from_layer_input``: a later sublayer
  taking its residual, its branch or both from the layer's input or an earlier sublayer's
  input (a residual variable not refreshed; the sublayers in between discarded), or its
  residual or its branch from the previous sublayer's branch output (before its add);
- ``attention.qkv_order_wrong``: the query, key and value projections taken in another order
  (a fused ``c_attn`` output split as k, q, v) or the fused weight read in the other layout,
  head-major ``[H, 3, d]`` for part-major ``[3, H, d]`` or the reverse, or interleaved channel
  by channel ``[D, 3]`` (§3.4), wherever the canonical parameters hold q, k and v projections
  of one shape;
- ``layer_norm.gain_unused``: the norm's gain is loaded but never multiplied (every norm, or
  every norm of one name: ``norm1`` of each layer), wherever a norm weight is not all ones;
- ``blocks.layers_not_chained``: every layer of a stack computes from the stack's input
  instead of the layer before it (only the last layer reaches the output; §7.3);
- ``params.unused`` (a layer skipped): the first or the last layer of a stack passes its
  input on unchanged (``for block in blocks[:-1]``), its parameters loaded and never used;
- ``blocks.layer_params_wrong``: every layer of a stack reads the first layer's parameters,
  or the last's (a loop that indexes ``layers[0]``, a dict of weights keyed without the
  layer index), or the layers run in reverse order, wherever the canonical parameters hold
  ``layers.<i>.`` prefixes (§7.3);
- ``ffn.activation_after_gating``: a gated FFN computing ``down(act(gate(x) * up(x)))``,
  wherever the oracle runs the gated FFN (§11.3);
- ``model.returns_log_probabilities`` / ``model.returns_probabilities``: the (log-)softmax
  of the spec's output, wherever the component record calls the output logits (§8.2).
- ``params.unused``: a parameter the subject loads never reaches the output: the spec's
  output with one parameter (in every layer, where the stack repeats it) set to zero (a class
  token replaced by ``zeros_like``, a projection never applied); tried after every other
  hypothesis here, and not for the biases, norm gains and position tables, which have codes
  of their own;
- ``params.weight_reshaped``: a weight of two or more axes read by a reshape where its axes
  should be exchanged (a ``(out, in)`` kernel viewed as ``(in, out)``; a square one used
  transposed), one name across a stack's layers at a time; tried last.

The parameter hypotheses are read off the canonical parameter layout (``tck.reference.params``:
``q.weight``, ``norm1.weight``, ``layers.<i>.``), not off a list of components, so every
component whose parameters hold those pieces gets them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from tck.reference import oracle, record
from tck.reference.codes import code as registered
from tck.reference.components import select
from tck.reference.variants import reaches

from .alternatives import Alternative
from .hypotheses_solved import solve_log
from .hypotheses_strided import RANK_GROUPS
from .position_measured import POSITION_TABLE

Arrays = Mapping[str, np.ndarray]

_NORM_WEIGHT = re.compile(r"(^|\.)(norm\d*|ln_\w+)\.weight$")

# Bias groups: (plain words, the leaf names whose biases are dropped together). All of a
# group's parameters, in every layer, are zeroed at once; the q/k/v triple first (a port
# that drops the attention biases drops them together: Qwen2's q/k/v biases). The key bias
# alone has no group: it adds q . b_k to every score of a query, which softmax cancels.
_PROJECTION_BIASES = (
    *("q.bias", "k.bias", "v.bias", "o.bias", "fc1.bias", "fc2.bias"),
    *("gate.bias", "up.bias", "down.bias", "head.bias"),
)
BIAS_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # one shared linear-layer class that drops its bias drops every projection's
    ("every linear projection (one shared linear layer)", _PROJECTION_BIASES),
    ("the query, key and value projections", ("q.bias", "k.bias", "v.bias")),
    ("the query projection", ("q.bias",)),
    ("the value projection", ("v.bias",)),
    ("the attention output projection", ("o.bias",)),
    ("the FFN's first projection", ("fc1.bias",)),
    ("the FFN's second projection", ("fc2.bias",)),
    ("the gated FFN's projections", ("gate.bias", "up.bias", "down.bias")),
    ("the LayerNorm shift (beta)", ("bias", "norm.bias", "norm1.bias", "norm2.bias", "norm3.bias")),
    ("the classification head", ("head.bias",)),
)


def _split_heads_no_transpose(x: Any, n_heads: int) -> np.ndarray:
    """(B, L, H*d) read as (B, H, L, d) without the transpose: ``x.view(B, H, L, d)``."""
    b, length, width = x.shape
    if width % n_heads:
        raise ValueError(f"width {width} is not divisible by n_heads={n_heads}")
    return oracle._f64(x).reshape(b, n_heads, length, width // n_heads)


def _split_heads_left_time_major(x: Any, n_heads: int) -> np.ndarray:
    """(B, L, H*d) -> (B, L, H, d) with no transpose: the positions stand where the heads
    belong and the heads where the positions belong (flash-attn's layout given to a kernel
    that reads (B, H, L, d))."""
    b, length, width = x.shape
    if width % n_heads:
        raise ValueError(f"width {width} is not divisible by n_heads={n_heads}")
    return oracle._f64(x).reshape(b, length, n_heads, width // n_heads)


def _merge_heads_left_time_major(x: Any) -> np.ndarray:
    """(B, L, H, d) -> (B, L, H*d): the attention's output read back in the layout it was
    given, with no transpose."""
    b, length = x.shape[:2]
    return oracle._f64(x).reshape(b, length, -1)


def _merge_heads_transposed_time_major(x: Any) -> np.ndarray:
    """(B, L, H, d) -> (B, L, H*d) by the spec's merge written for (B, H, L, d): the
    transpose to (B, H, L, d) and a reshape to the known (B, L, H*d), which flattens the
    heads' and positions' values together (``x.transpose(1, 2).reshape(B, N, C)``)."""
    b, length = x.shape[:2]
    return oracle._f64(x).transpose(0, 2, 1, 3).reshape(b, length, -1)


def _residual_after_norm(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
    """A pre-LN sublayer whose residual is the normalised input: h = Norm(x); h + f(h)."""
    if conventions.norm_placement == "post":
        return oracle.norm(x + fn(x), params, norm_prefix, conventions)
    h = oracle.norm(x, params, norm_prefix, conventions)
    return h + fn(h)


def _residual_after_norm_in(
    which: int, variant: Callable[..., Any] = _residual_after_norm
) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces (built anew for each evaluation: the replacement counts its calls) under which
    only the ``which``-th sublayer of a call (0-based, in the order the oracle runs them)
    runs ``variant`` (default: takes its residual from the normalised input)."""

    def pieces() -> dict[str, Callable[..., Any]]:
        seen = [0]

        def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
            seen[0] += 1
            if seen[0] - 1 == which:
                return variant(x, params, norm_prefix, conventions, fn)
            return oracle._sublayer(x, params, norm_prefix, conventions, fn)

        return {"_sublayer": sublayer}

    return pieces


def _residual_dropped(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
    """A sublayer without its residual add: f(Norm(x)) pre-LN, Norm(f(x)) post-LN (§7.1)."""
    if conventions.norm_placement == "post":
        return oracle.norm(fn(x), params, norm_prefix, conventions)
    return fn(oracle.norm(x, params, norm_prefix, conventions))


def _residual_inside_branch(
    x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any
) -> Any:
    """A sublayer whose branch adds its own input to its output, the layer's residual add
    kept: x + (h + f(h)) with h = Norm(x) pre-LN, Norm(x + (x + f(x))) post-LN (§7.1)."""
    if conventions.norm_placement == "post":
        return oracle.norm(x + x + fn(x), params, norm_prefix, conventions)
    h = oracle.norm(x, params, norm_prefix, conventions)
    return x + h + fn(h)


def _residual_added_again(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
    """A sublayer whose branch adds the layer's residual stream to its output, the layer's
    residual add kept: 2x + f(Norm(x)) pre-LN (``x = fc2(x) + residual`` followed by
    ``x = residual + x``), Norm(2x + f(x)) post-LN (§7.1)."""
    if conventions.norm_placement == "post":
        return oracle.norm(x + x + fn(x), params, norm_prefix, conventions)
    return x + x + fn(oracle.norm(x, params, norm_prefix, conventions))


# The two ways a sublayer's input reaches the stream twice (pre-LN: the branch adds its own
# normalised input, or the stream itself; post-LN the two are one)
ADDED_TWICE = (
    (
        _residual_inside_branch,
        "adding its own input inside its branch (f(h) + h, a skip connection inside the "
        "module) while the layer adds the residual as well (x + h + f(h) pre-LN, "
        "norm(2x + f(x)) post-LN)",
    ),
    (
        _residual_added_again,
        "adding the residual stream to its branch's output while the layer adds it as well "
        "(2x + f(norm(x)) pre-LN, norm(2x + f(x)) post-LN)",
    ),
)


def _post_ln(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
    """A post-LN sublayer, Norm(x + f(x)), whatever the declared placement (§7.1)."""
    return oracle.norm(x + fn(x), params, norm_prefix, conventions)


def _pre_ln(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
    """A pre-LN sublayer, x + f(Norm(x)), whatever the declared placement (§7.1)."""
    return x + fn(oracle.norm(x, params, norm_prefix, conventions))


def _norm_on_branch(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
    """The sublayer's norm on its own output before the residual add, x + Norm(f(x)) (Swin
    V2's res-post-norm), whatever the declared placement (§7.1)."""
    return x + oracle.norm(fn(x), params, norm_prefix, conventions)


def _norm_name(norm_prefix: str) -> str:
    """The norm's own name in a layer (``norm2``) from the prefix the oracle's ``_sublayer``
    receives (``layers.0.norm2.``)."""
    return norm_prefix.rstrip(".").rsplit(".", 1)[-1]


def _residual_from_layer_input(
    target: str, part: str = "residual", source: str | None = None
) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces (built anew for each evaluation) under which every sublayer normalised by
    ``target`` (a norm's name, such as ``norm2``) takes the input of an earlier sublayer of
    its layer (the one normalised by ``source``; by default the layer's first, whose input
    is the layer's) in place of its own input, for its residual (``part="residual"``:
    ``out = x + ffn(norm2(h))`` for ``h + ffn(norm2(h))``, so the sublayers in between leave
    the residual stream), for its branch (``part="branch"``: ``out = h + ffn(norm2(x))``,
    their outputs never reach the branch) or for both (``part="both"``: ``x + ffn(norm2(x))``,
    the sublayers in between computed and discarded; SPEC.md §7.1)."""

    def pieces() -> dict[str, Callable[..., Any]]:
        first: list[str] = []  # the norm name of a layer's first sublayer
        inputs: dict[str, Any] = {}  # each sublayer's input in the current layer, by norm

        def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
            name = _norm_name(norm_prefix)
            if not first:
                first.append(name)
            if name == first[0]:
                inputs.clear()
            inputs[name] = x
            earlier = first[0] if source is None else source
            if name != target or name == earlier or earlier not in inputs:
                return oracle._sublayer(x, params, norm_prefix, conventions, fn)
            stale = oracle._f64(inputs[earlier])
            base = oracle._f64(x) if part == "branch" else stale
            into = x if part == "residual" else stale
            if conventions.norm_placement == "post":
                return oracle.norm(base + fn(into), params, norm_prefix, conventions)
            return base + fn(oracle.norm(into, params, norm_prefix, conventions))

        return {"_sublayer": sublayer}

    return pieces


def _from_previous_branch(target: str, part: str) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces (built anew for each evaluation) under which the sublayer normalised by
    ``target`` reads the previous sublayer's branch output (its f(norm(x)), before that
    sublayer's residual add) where the residual stream belongs: for its residual
    (``part="residual"``: ``b + f(norm(h))`` for ``h + f(norm(h))``, the stream before the
    earlier add lost) or for its branch (``part="branch"``: ``h + f(norm(b))``; SPEC.md §7.1).
    """

    def pieces() -> dict[str, Callable[..., Any]]:
        previous: list[Any] = []  # the branch output of the sublayer before, in this layer

        def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
            x = oracle._f64(x)
            post = conventions.norm_placement == "post"

            def norm(v: Any) -> Any:
                return oracle.norm(v, params, norm_prefix, conventions)

            if _norm_name(norm_prefix) == target and previous:
                stale = previous.pop()
                base, into = (stale, x) if part == "residual" else (x, stale)
                branch = fn(into if post else norm(into))
                return norm(base + branch) if post else base + branch
            branch = fn(x if post else norm(x))
            previous[:] = [branch]
            return norm(x + branch) if post else x + branch

        return {"_sublayer": sublayer}

    return pieces


def _from_attention_context(target: str) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces (built anew for each evaluation) under which the sublayer normalised by
    ``target`` computes its branch from the attention's merged context before the output
    projection (the heads merged, W_o not yet applied: SqueezeBERT's FFN handed
    ``context_layer`` where the attention sublayer's output belongs), its residual add right
    (``h + f(norm(c))`` pre-LN, ``norm(h + f(c))`` post-LN; SPEC.md §7.1)."""

    def pieces() -> dict[str, Callable[..., Any]]:
        context: list[Any] = []  # the last merged context of this layer's attention

        def merge_heads(x: Any) -> Any:
            merged = oracle.merge_heads(x)
            context[:] = [merged]
            return merged

        def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
            if _norm_name(norm_prefix) != target or not context:
                return oracle._sublayer(x, params, norm_prefix, conventions, fn)
            x, stale = oracle._f64(x), oracle._f64(context.pop())
            if stale.shape != x.shape:
                raise ValueError("the context is not of the model width")
            if conventions.norm_placement == "post":
                return oracle.norm(x + fn(stale), params, norm_prefix, conventions)
            return x + fn(oracle.norm(stale, params, norm_prefix, conventions))

        return {"merge_heads": merge_heads, "_sublayer": sublayer}

    return pieces


def residual_from_layer_input_hypotheses(
    component: str, params: Arrays | None
) -> Iterator[Alternative]:
    """Each later sublayer (by the name of its norm: ``norm2``, ``norm3``) adding its output
    to the layer's input, or to an earlier sublayer's input (a residual variable not
    refreshed after the sublayer before it), in every layer at once; or computing its
    branch from one of them."""
    if not reaches(component, "_sublayer") or not params:
        return
    names = sorted(
        {m.group(2) for k in params if (m := _NORM_WEIGHT.search(k)) and m.group(2) != "norm1"}
    )
    for name in names:
        yield Alternative(
            "blocks.residual_from_layer_input",
            f"the output is the spec's with the sublayer normalised by {name} adding its "
            "output to the layer's input instead of to its own input (out = x + f(norm(h)) "
            "for h + f(norm(h)), h the earlier sublayer's output): the earlier sublayer's "
            "residual add is lost from the stream (SPEC.md §7.1)",
            pieces=_residual_from_layer_input(name),
        )
        yield Alternative(
            "blocks.branch_from_layer_input",
            f"the output is the spec's with the sublayer normalised by {name} computing its "
            "branch from the layer's input instead of from its own input (out = h + "
            "f(norm(x)) for h + f(norm(h)), h the earlier sublayer's output, x the layer's "
            "input): the earlier sublayer's output never reaches this one's branch, while "
            "the residual add is right (SPEC.md §7.1)",
            pieces=_residual_from_layer_input(name, "branch"),
        )
        yield Alternative(
            "blocks.residual_from_layer_input",
            f"the output is the spec's with the sublayer normalised by {name} taking the "
            "layer's input as both its input and its residual (out = x + f(norm(x)) for "
            "h + f(norm(h)), h the earlier sublayer's output): the earlier sublayer is "
            "computed and discarded (SPEC.md §7.1)",
            pieces=_residual_from_layer_input(name, "both"),
        )
        yield Alternative(
            "blocks.residual_from_layer_input",
            f"the output is the spec's with the sublayer normalised by {name} adding its "
            "output to the previous sublayer's branch output (before that sublayer's residual "
            "add) instead of to the residual stream (out = b + f(norm(h)) for h + f(norm(h)), "
            "h = x + b): the stream before the earlier add is lost (SPEC.md §7.1)",
            pieces=_from_previous_branch(name, "residual"),
        )
        yield Alternative(
            "blocks.branch_from_layer_input",
            f"the output is the spec's with the sublayer normalised by {name} computing its "
            "branch from the previous sublayer's branch output instead of the residual stream "
            "(out = h + f(norm(b)) for h + f(norm(h)), h = x + b), while its residual add is "
            "right (SPEC.md §7.1)",
            pieces=_from_previous_branch(name, "branch"),
        )
        if reaches(component, "merge_heads"):
            yield Alternative(
                "blocks.branch_from_layer_input",
                f"the output is the spec's with the sublayer normalised by {name} computing "
                "its branch from the attention's merged context before the output projection "
                "(the heads merged, W_o not applied) instead of the attention sublayer's "
                "output, while its residual add is right (SPEC.md §7.1)",
                pieces=_from_attention_context(name),
            )
    # a layer of three sublayers: the third's residual or branch from the second's input
    for earlier, name in itertools.combinations(names, 2):
        yield Alternative(
            "blocks.residual_from_layer_input",
            f"the output is the spec's with the sublayer normalised by {name} adding its "
            f"output to the input of the sublayer normalised by {earlier} instead of to its "
            "own input (a residual variable not refreshed after that sublayer): its residual "
            "add is lost from the stream (SPEC.md §7.1)",
            pieces=_residual_from_layer_input(name, source=earlier),
        )
        yield Alternative(
            "blocks.branch_from_layer_input",
            f"the output is the spec's with the sublayer normalised by {name} computing its "
            f"branch from the input of the sublayer normalised by {earlier} instead of from "
            "its own input, while the residual add is right: that sublayer's output never "
            "reaches this one's branch (SPEC.md §7.1)",
            pieces=_residual_from_layer_input(name, "branch", earlier),
        )


# A pre-LN attention sublayer whose norm reaches some of the attention's inputs only:
# (which call, which inputs come from the un-normalised stream, the words)
_NORM_BYPASSES = (
    ("self", "kv", "the keys and values projected from the un-normalised sublayer input"),
    ("self", "q", "the queries projected from the un-normalised sublayer input"),
    (
        "self",
        "qkv",
        "the queries, keys and values all projected from the un-normalised sublayer input "
        "(the sublayer's norm skipped, its residual add kept)",
    ),
    ("cross", "q", "the cross-attention's queries taken from the un-normalised stream"),
)


def _norm_bypassed(call: str, inputs: str) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces (built anew for each evaluation) under which every pre-LN attention sublayer
    of kind ``call`` (``self``: query, key and value the same tensor; ``cross``: keys from
    the memory) feeds its attention the sublayer's input before the norm for ``inputs``
    (``q``, ``kv`` or all three, ``qkv``) and the normalised input for the rest (SPEC.md
    §7.1: the branch is f(Norm(x)), every input of f normalised)."""

    def pieces() -> dict[str, Callable[..., Any]]:
        raw: list[Any] = [None]  # the input of the sublayer being run, before its norm

        def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
            raw[0] = oracle._f64(x) if conventions.norm_placement == "pre" else None
            try:
                return oracle._sublayer(x, params, norm_prefix, conventions, fn)
            finally:
                raw[0] = None

        def attention(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
            kind = "self" if key is query else "cross"
            if raw[0] is not None and kind == call and np.shape(raw[0]) == np.shape(query):
                if "q" in inputs:
                    query = raw[0]
                if "kv" in inputs:
                    key = value = raw[0]
            return oracle.multi_head_attention(query, key, value, *args, **kwargs)

        def causal_attention(x: Any, *args: Any, **kwargs: Any) -> Any:
            # one input for queries, keys and values: only all three can bypass the norm
            if raw[0] is not None and inputs == "qkv" and np.shape(raw[0]) == np.shape(x):
                x = raw[0]
            return oracle.causal_self_attention(x, *args, **kwargs)

        return {
            "_sublayer": sublayer,
            "multi_head_attention": attention,
            "causal_self_attention": causal_attention,
        }

    return pieces


def _norm_skipped(target: str | None) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces under which every sublayer normalised by ``target`` (a norm's name, such as
    ``norm2``; None: every sublayer), in every layer, skips its norm: ``x + f(x)`` for pre-LN's
    ``x + f(Norm(x))`` and for post-LN's ``Norm(x + f(x))`` (SPEC.md §7.1)."""

    def pieces() -> dict[str, Callable[..., Any]]:
        def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
            name = _norm_name(norm_prefix)
            if target not in (None, name):
                return oracle._sublayer(x, params, norm_prefix, conventions, fn)
            x = oracle._f64(x)
            return x + fn(x)

        return {"_sublayer": sublayer}

    return pieces


def norm_bypass_hypotheses(
    component: str, conventions: Any, params: Arrays | None = None
) -> Iterator[Alternative]:
    """A pre-LN attention sublayer whose norm output reaches only some of the attention's
    inputs (the queries alone, or the keys and values alone; a cross-attention's queries
    taken from the stream before the norm) or none of them (the norm call skipped); any
    later sublayer (by the name of its norm: the feed-forward's, a cross-attention's) whose
    norm is skipped, in every layer; under post-LN, any sublayer's norm after its residual
    add skipped (a branch on the flag that picks the placement inverted)."""
    placement = getattr(conventions, "norm_placement", None)
    if placement not in ("pre", "post") or not reaches(component, "_sublayer"):
        return
    # a layer's sublayers' norms (norm1, norm2, norm3), not a stack's; pre-LN's first is
    # the attention's, whose inputs are tried one by one below
    first = 1 if placement == "post" else 2
    mine = {f"norm{i}" for i in range(first, 10)}
    names = sorted({m.group(2) for k in params or () if (m := _NORM_WEIGHT.search(k))} & mine)
    for name in names:
        words = (
            f"computing its branch from its input before the norm (x + f(x) for "
            f"x + f({name}(x))), in every layer: the norm is skipped, its residual add kept, "
            "and the raw residual stream, which grows with depth, reaches that sublayer"
            if placement == "pre"
            else f"returning its residual sum without the norm (x + f(x) for "
            f"{name}(x + f(x))), in every layer: the post-LN norm after that residual add "
            "is skipped, the other sublayers' kept"
        )
        yield Alternative(
            "blocks.norm_bypassed",
            f"the output is the spec's with the sublayer normalised by {name} {words} "
            "(SPEC.md §7.1)",
            pieces=_norm_skipped(name),
        )
    if names and (placement == "pre" or len(names) > 1):
        # every sublayer's norm skipped (a norm switch turned off, neither pre nor post)
        yield Alternative(
            "blocks.norm_bypassed",
            "the output is the spec's with every sublayer computing x + f(x), in every "
            "layer: no sublayer norm is applied, before the branch or after the residual add "
            "(SPEC.md §7.1)",
            pieces=_norm_skipped(None),
        )
    if placement != "pre":
        return
    decoder_only = reaches(component, "causal_self_attention")
    if not (decoder_only or reaches(component, "multi_head_attention")):
        return
    for call, inputs, words in _NORM_BYPASSES:
        if call == "cross" and not reaches(component, "decoder_layer"):
            continue  # no cross-attention here
        if decoder_only and inputs != "qkv":
            continue  # one input for queries, keys and values (SPEC.md §11.1)
        yield Alternative(
            "blocks.norm_bypassed",
            f"the output is the spec's with {words}"
            + ("" if inputs == "qkv" else ", the other inputs of the attention normalised")
            + ": the pre-LN branch is f(Norm(x)) with every input of f normalised, here the "
            + ("norm reaches none of it" if inputs == "qkv" else "norm reaches part of it")
            + " (SPEC.md §7.1)",
            pieces=_norm_bypassed(call, inputs),
        )


def _final_norm_skipped(which: int) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces (built anew for each evaluation) under which the ``which``-th stack the call
    runs (0: an encoder-decoder's encoder, 1: its decoder) ends without its final norm."""

    def pieces() -> dict[str, Callable[..., Any]]:
        seen = [0]

        def final_norm(x: Any, params: Any, conventions: Any) -> Any:
            seen[0] += 1
            if seen[0] - 1 == which:
                return oracle._f64(x)
            return oracle._final_norm(x, params, conventions)

        return {"_final_norm": final_norm}

    return pieces


def final_norm_one_stack_hypotheses(component: str, conventions: Any) -> Iterator[Alternative]:
    """In a model of two stacks whose declared placement ends each with a norm (§7.3), one
    stack's final norm missing (the convention ``final_norm='never'`` drops both)."""
    if conventions is None or not oracle.has_final_norm(conventions):
        return
    if not (reaches(component, "encoder") and reaches(component, "decoder")):
        return
    for which, stack in enumerate(("first stack (the encoder's)", "second (the decoder's)")):
        yield Alternative(
            "blocks.final_norm_missing",
            f"the output is the spec's with the {stack} ending without its final norm, "
            f"the other stack's kept: a {conventions.norm_placement}-LN stack ends with a norm "
            "(SPEC.md §7.3)",
            pieces=_final_norm_skipped(which),
        )


# The oracle's stacks of layers and the config field that counts each one's layers.
STACKS = (("encoder", "n_layers"), ("decoder", "n_decoder_layers"))


def _with_layers(params: Arrays, indices: Iterable[int]) -> dict[str, Any]:
    """A stack's parameters holding only its layers ``indices``, renumbered from 0 in that
    order; the parameters outside its layers (the final norm) kept."""
    kept = {k: v for k, v in params.items() if not k.startswith("layers.")}
    for j, i in enumerate(indices):
        prefix = f"layers.{i}."
        kept.update(
            {
                f"layers.{j}.{k.removeprefix(prefix)}": v
                for k, v in params.items()
                if k.startswith(prefix)
            }
        )
    return kept


def _stack_normed_per_layer(name: str, count: str) -> Callable[..., Any]:
    """The stack ``name`` (``encoder``, ``decoder``) run one layer at a time, each as a
    stack of one layer that ends with the stack's final norm: the norm after every layer."""
    stack: Callable[..., Any] = getattr(oracle, name)

    def per_layer(x: Any, *args: Any, **kwargs: Any) -> Any:
        params, config = args[-2], args[-1]
        if not oracle.has_final_norm(kwargs.get("conventions", oracle.CANONICAL)):
            raise ValueError("the stack declares no final norm to repeat")
        one = dataclasses.replace(config, **{count: 1})
        for i in range(getattr(config, count)):
            x = stack(x, *args[:-2], _with_layers(params, [i]), one, **kwargs)
        return x

    return per_layer


def _stack_skipping(
    name: str, count: str, which: str, final_norm: bool = True
) -> Callable[..., Any]:
    """The stack ``name`` (``encoder``, ``decoder``) run without its ``which`` ("first" or
    "last") layer: the other layers in order, then the stack's final norm (none where
    ``final_norm`` is False: the output read before the last layer and the norm after it)."""
    stack: Callable[..., Any] = getattr(oracle, name)

    def skipping(x: Any, *args: Any, **kwargs: Any) -> Any:
        params, config = args[-2], args[-1]
        n = getattr(config, count)
        if n < 2:
            raise ValueError("a stack of one layer has no other layer to run")
        kept = range(1, n) if which == "first" else range(n - 1)
        fewer = dataclasses.replace(config, **{count: n - 1})
        if not final_norm:
            declared = kwargs.get("conventions", oracle.CANONICAL)
            if not oracle.has_final_norm(declared):
                raise ValueError("the stack declares no final norm to leave out")
            kwargs = {**kwargs, "conventions": dataclasses.replace(declared, final_norm="never")}
        return stack(x, *args[:-2], _with_layers(params, kept), fewer, **kwargs)

    return skipping


def skipped_layer_hypotheses(component: str) -> Iterator[Alternative]:
    """The first or the last layer of a stack never run (``for block in blocks[:-1]``, a
    ``range(1, n)``, an off-by-one depth): its parameters are loaded and never used. (In a
    stack of two, the first skipped is also every layer computing from the stack's input,
    ``blocks.layers_not_chained``, tried before.)"""
    for name, count in STACKS:
        if not reaches(component, name):
            continue
        for which in ("last", "first"):
            yield Alternative(
                "params.unused",
                f"the output is the spec's with the {name} stack's {which} layer skipped (its "
                "input passed on unchanged): the stack loads that layer's parameters and never "
                "applies it (a loop over layers[:-1] or range(1, n); SPEC.md §7.3, §0.2)",
                pieces={name: _stack_skipping(name, count, which)},
            )
        yield Alternative(
            "params.unused",
            f"the output is the spec's read before the {name} stack's last layer and its "
            "final norm (out = hidden_states[-2], a features list indexed one too early): "
            "the last layer's and the final norm's parameters are loaded and never used "
            "(SPEC.md §7.3, §0.2)",
            pieces={name: _stack_skipping(name, count, "last", final_norm=False)},
        )


def final_norm_every_layer_hypotheses(component: str) -> Iterator[Alternative]:
    """A stack's final norm applied inside the loop over its layers, after each one (whisper's
    decoder, mmpretrain's ViT with the norm moved into the loop): each layer's output
    normalised with the final norm's weights, in every stack the component runs."""
    for name, count in STACKS:
        if not reaches(component, name):
            continue
        yield Alternative(
            "blocks.final_norm_every_layer",
            f"the output is the spec's with the {name} stack's final norm applied after every "
            "layer (its weights reused in the loop over the layers) instead of once after the "
            "last one (SPEC.md §7.3)",
            pieces={name: _stack_normed_per_layer(name, count)},
        )


def _by_norm_name(name: str, variant: Callable[..., Any]) -> dict[str, Callable[..., Any]]:
    """Pieces under which every sublayer normalised by ``name`` (``norm2``: each layer's
    FFN) runs ``variant``, the others the spec's."""

    def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
        if _norm_name(norm_prefix) == name:
            return variant(x, params, norm_prefix, conventions, fn)
        return oracle._sublayer(x, params, norm_prefix, conventions, fn)

    return {"_sublayer": sublayer}


def sublayer_kind_hypotheses(component: str, params: Arrays | None) -> Iterator[Alternative]:
    """Each sublayer kind (by the name of its norm) normalising its own output before the
    residual add, or adding its own input inside its branch, in every layer at once (the
    one-sublayer variants are in ``residual_hypotheses``)."""
    if not reaches(component, "_sublayer") or not params:
        return
    names = sorted({m.group(2) for k in params if (m := _NORM_WEIGHT.search(k))})
    for name in names:
        yield Alternative(
            "blocks.norm_on_branch",
            f"the output is the spec's with the sublayer normalised by {name} applying its norm "
            "to the sublayer's output before the residual add, in every layer (x + "
            f"{name}(f(x)), where post-LN is {name}(x + f(x)) and pre-LN x + f({name}(x))): the "
            "residual stream is never normalised there (SPEC.md §7.1)",
            pieces=_by_norm_name(name, _norm_on_branch),
        )
        for variant, words in ADDED_TWICE:
            yield Alternative(
                "blocks.residual_added_twice",
                f"the output is the spec's with the sublayer normalised by {name}, in every "
                f"layer, {words}: its input reaches the stream twice (SPEC.md §7.1)",
                pieces=_by_norm_name(name, variant),
            )


def sublayer_calls(evaluate: Callable[[Alternative], np.ndarray]) -> list[str]:
    """The norm prefix of each sublayer the component's oracle runs, in the order it runs
    them ("norm1.", "norm2." of every layer): their count, and the norms they use; [] where
    it runs none or cannot be run."""
    calls: list[str] = []

    def pieces() -> dict[str, Callable[..., Any]]:
        calls.clear()  # one evaluation's calls

        def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
            calls.append(norm_prefix)
            return oracle._sublayer(x, params, norm_prefix, conventions, fn)

        return {"_sublayer": sublayer}

    try:
        evaluate(Alternative("", "", pieces=pieces))
    except (ValueError, KeyError, IndexError):
        return []
    return calls


def _leaf(key: str) -> str:
    parts = key.split(".")
    return ".".join(parts[-2:]) if len(parts) >= 2 else key


def _norm_weights(component: str, params: Arrays) -> list[str]:
    if record(component).has("norm"):
        return ["weight"] if "weight" in params else []
    return [k for k in params if _NORM_WEIGHT.search(k)]


def head_split_hypotheses(component: str) -> Iterator[Alternative]:
    """Heads split by a reshape without the transpose."""
    if not reaches(component, "split_heads"):
        return
    yield Alternative(
        "attention.heads_split_wrong_order",
        "the output is the spec's with the heads split by a reshape without the transpose: "
        "(B, L, H*d) viewed as (B, H, L, d) (x.view(B, H, L, d) or view(B*H, -1, d)) where the "
        "spec takes x.view(B, L, H, d).transpose(1, 2), so each 'head' mixes several positions' "
        "channels and the scores compare the wrong vectors (SPEC.md §3.3)",
        pieces={"split_heads": _split_heads_no_transpose},
    )


def heads_time_major_hypotheses(component: str) -> Iterator[Alternative]:
    """Heads left (B, L, H, d) for an attention that reads (B, H, L, d), and read back the
    same way: computable only where a mask broadcasts over that layout (an unmasked call, or
    one token), as the implementation's own call is (shapes.masked_call_errors)."""
    if reaches(component, "split_heads") and reaches(component, "merge_heads"):
        yield Alternative(
            "attention.heads_split_wrong_order",
            "the output is the spec's with the heads left as (B, L, H, d) (x.view(B, L, H, d) "
            "without the transpose to (B, H, L, d)) for an attention that reads (B, H, L, d), "
            "and its output read back the same way: each position attends over its own heads "
            "instead of each head over the positions; a padding mask (B, 1, 1, Lk) no longer "
            "broadcasts, so masked calls raise (SPEC.md §3.3)",
            pieces={
                "split_heads": _split_heads_left_time_major,
                "merge_heads": _merge_heads_left_time_major,
            },
        )
        # the same split, the merge still transposing as for (B, H, L, d): a fused qkv
        # permuted (2, 0, 1, 3, 4) for (2, 0, 3, 1, 4), its output merged as the spec's
        yield Alternative(
            "attention.heads_split_wrong_order",
            "the output is the spec's with the heads left as (B, L, H, d) (a fused qkv "
            "permuted without the exchange of the token and head axes) for an attention "
            "that reads (B, H, L, d), and its output merged as if it were (B, H, L, d): each "
            "position attends over its own heads instead of each head over the positions; a "
            "padding mask (B, 1, 1, Lk) no longer broadcasts, so masked calls raise (SPEC.md "
            "§3.3)",
            pieces={
                "split_heads": _split_heads_left_time_major,
                "merge_heads": _merge_heads_transposed_time_major,
            },
        )


# §11.2's repeat_kv runs twice per attention, keys first, then values (oracle
# causal_self_attention): the tensor a tiling slip touches, by its place in that pair.
KV_TILED = {"keys": 0, "values": 1}


def _repeat_kv_tiled_on(which: int) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces (built anew for each evaluation: the replacement counts its calls) under which
    the ``which``-th tensor of every (keys, values) pair is tiled, ``x.repeat(1, g, 1, 1)``
    (query head h reads kv head h mod H_kv), and the other one grouped as the spec says."""

    def pieces() -> dict[str, Callable[..., Any]]:
        seen = [0]

        def repeat_kv(x: Any, n_rep: int) -> np.ndarray:
            seen[0] += 1
            if (seen[0] - 1) % 2 == which:
                return np.tile(oracle._f64(x), (1, n_rep, 1, 1))
            return oracle.repeat_kv(x, n_rep)

        return {"repeat_kv": repeat_kv}

    return pieces


def kv_tiling_hypotheses(component: str) -> Iterator[Alternative]:
    """Grouped-query attention with only the keys, or only the values, tiled over the query
    heads (the both-tiled case is ``decoding.tiled_kv_heads``, a permutation of the
    parameters): in every component whose oracle repeats key/value heads."""
    if not reaches(component, "repeat_kv"):
        return
    for tensor, which in KV_TILED.items():
        yield Alternative(
            "attention.kv_heads_tiled",
            f"the output is the spec's with the {tensor} alone tiled over the query heads "
            f"(query head h reads {tensor[:-1]} head h mod H_kv: a repeat or broadcast on the "
            "group axis in the wrong place) where SPEC.md §11.2 gives query head h kv head "
            "h // (H / H_kv) (each head repeated in place); the other tensor is grouped right",
            pieces=_repeat_kv_tiled_on(which),
        )


def _merge_heads_no_transpose(x: Any) -> np.ndarray:
    """(B, H, L, d) reshaped straight to (B, L, H*d), without the transpose."""
    b, h, length, d = x.shape
    return oracle._f64(x).reshape(b, length, h * d)


def _merge_heads_read_as(order: str) -> Callable[[Any], np.ndarray]:
    """``merge_heads`` that lays the (B, H, L, d) context out with its last three axes in
    ``order`` (a permutation of "HLd") before the reshape to (B, L, H*d)."""
    axes = (0, *(1 + "HLd".index(a) for a in order))

    def merge_heads(x: Any) -> np.ndarray:
        b, h, length, d = x.shape
        return np.transpose(oracle._f64(x), axes).reshape(b, length, h * d)

    return merge_heads


def head_merge_hypotheses(component: str) -> Iterator[Alternative]:
    """Heads merged by a reshape without the transpose, or with the context's axes in another
    order (a per-example ``(H, L, d)`` tensor, batched by vmap, transposed on the wrong pair
    of axes), in any head-bearing component (mha has its own check,
    test_attention.test_heads_merge_order; inside a layer, a stack or a ViT only the oracle
    comparison sees it). Feature-major (L, d, H) is ``hypotheses_strided``'s."""
    if not reaches(component, "merge_heads"):
        return
    yield Alternative(
        "attention.heads_merged_wrong_order",
        "the output is the spec's with the heads merged by a reshape without the transpose: "
        "(B, H, L, d) reshaped straight to (B, L, H*d) where the spec takes "
        "x.transpose(1, 2).reshape(B, L, H*d), so positions and heads are interleaved before "
        "the output projection (SPEC.md §3.3)",
        pieces={"merge_heads": _merge_heads_no_transpose},
    )
    for order in ("HdL", "dHL", "dLH"):
        shown = ", ".join(order).replace("d", "d_k")
        yield Alternative(
            "attention.heads_merged_wrong_order",
            f"the output is the spec's with the heads merged from the context laid out as "
            f"(B, {shown}) before the reshape to (B, L, H*d_k) instead of (B, L, H, d_k): the "
            "transpose is taken on another pair of axes (a per-example (H, L, d_k) tensor "
            "transposed as the batched one would be), so positions, heads and features are "
            "scrambled before the output projection (SPEC.md §3.3)",
            pieces={"merge_heads": _merge_heads_read_as(order)},
        )


def residual_hypotheses(component: str, sublayers: int = 0) -> Iterator[Alternative]:
    """A pre-LN residual taken from the normalised input, a residual add missing: in every
    sublayer, then (when the call runs ``sublayers`` > 1 of them) in each one alone; one
    sublayer alone normalised on the other side of its residual add; the norm on the
    sublayer's output before the add, in every sublayer or one alone."""
    if not reaches(component, "_sublayer"):
        return
    yield Alternative(
        "blocks.residual_after_norm",
        "the output is the spec's with each pre-LN sublayer adding its output to the "
        "normalised input (h = norm(x); h + f(h)) instead of to the input itself "
        "(x + f(norm(x))): the residual path carries the LayerNorm's output, so the "
        "identity path of the stack is lost (SPEC.md §7.1)",
        pieces={"_sublayer": _residual_after_norm},
    )
    for which in range(sublayers if sublayers > 1 else 0):
        yield Alternative(
            "blocks.residual_after_norm",
            f"the output is the spec's with sublayer {which + 1} of {sublayers} (in the order "
            "the layers run them: attention, [cross-attention,] FFN per layer) adding its "
            "output to the normalised input (h = norm(x); h + f(h)) instead of to the input "
            "itself (x + f(norm(x))); the other sublayers are right (SPEC.md §7.1)",
            pieces=_residual_after_norm_in(which),
        )
    yield Alternative(
        "blocks.residual_missing",
        "the output is the spec's with no residual add in any sublayer (f(norm(x)) pre-LN, "
        "norm(f(x)) post-LN, instead of x + f(norm(x)) or norm(x + f(x))): SPEC.md §7.1",
        pieces={"_sublayer": _residual_dropped},
    )
    for which in range(sublayers if sublayers > 1 else 0):
        yield Alternative(
            "blocks.residual_missing",
            f"the output is the spec's with sublayer {which + 1} of {sublayers} (in the order "
            "the layers run them: attention, [cross-attention,] FFN per layer) missing its "
            "residual add (f(norm(x)) pre-LN, norm(f(x)) post-LN); the other sublayers are "
            "right (SPEC.md §7.1)",
            pieces=_residual_after_norm_in(which, _residual_dropped),
        )
    for variant, words in ADDED_TWICE:
        yield Alternative(
            "blocks.residual_added_twice",
            f"the output is the spec's with every sublayer {words}: the sublayer's input "
            "reaches the stream twice (SPEC.md §7.1)",
            pieces={"_sublayer": variant},
        )
        for which in range(sublayers if sublayers > 1 else 0):
            yield Alternative(
                "blocks.residual_added_twice",
                f"the output is the spec's with sublayer {which + 1} of {sublayers} (in the "
                "order the layers run them: attention, [cross-attention,] FFN per layer) "
                f"{words}: its input reaches the stream twice; the other sublayers are right "
                "(SPEC.md §7.1)",
                pieces=_residual_after_norm_in(which, variant),
            )
    # the whole stack's placement is the norm_placement convention (tried first); here one
    # sublayer alone normalises on the other side of its residual add
    # (the declared placement's own variant equals the spec: never evidence)
    placements = (
        ("blocks.norm_placement_post", "post-LN, norm(x + f(x))", _post_ln),
        ("blocks.norm_placement_pre", "pre-LN, x + f(norm(x))", _pre_ln),
    )
    for which in range(sublayers if sublayers > 1 else 0):
        for code, formula, variant in placements:
            yield Alternative(
                code,
                f"the output is the spec's with sublayer {which + 1} of {sublayers} (in the "
                "order the layers run them: attention, [cross-attention,] FFN per layer) "
                f"computed {formula}, while the others follow the declared placement "
                "(SPEC.md §7.1)",
                pieces=_residual_after_norm_in(which, variant),
            )
    # the norm moved onto the branch, x + norm(f(x)): neither placement of §7.1
    branch = (
        "the norm applied to the sublayer's output before the residual add (x + norm(f(x)), "
        "where post-LN is norm(x + f(x)) and pre-LN x + f(norm(x))): the residual stream is "
        "never normalised (SPEC.md §7.1)"
    )
    yield Alternative(
        "blocks.norm_on_branch",
        f"the output is the spec's with every sublayer computed with {branch}",
        pieces={"_sublayer": _norm_on_branch},
    )
    for which in range(sublayers if sublayers > 1 else 0):
        yield Alternative(
            "blocks.norm_on_branch",
            f"the output is the spec's with sublayer {which + 1} of {sublayers} (in the order "
            "the layers run them: attention, [cross-attention,] FFN per layer) computed with "
            f"{branch}; the others follow the declared placement",
            pieces=_residual_after_norm_in(which, _norm_on_branch),
        )


def _branch_scaled(prefix: str | None, factor: float) -> dict[str, Callable[..., Any]]:
    """§7.1 with the output of each sublayer normalised by ``prefix`` (every sublayer: None)
    multiplied by ``factor`` before the residual add."""

    def sublayer(x: Any, params: Any, norm_prefix: str, conventions: Any, fn: Any) -> Any:
        if prefix is None or norm_prefix == prefix:
            return oracle._sublayer(
                x, params, norm_prefix, conventions, lambda h: factor * np.asarray(fn(h))
            )
        return oracle._sublayer(x, params, norm_prefix, conventions, fn)

    return {"_sublayer": sublayer}


def branch_scale_hypotheses(
    component: str, evaluate: Callable[[Alternative], np.ndarray], test: np.ndarray
) -> Iterator[Alternative]:
    """A residual branch multiplied by a constant c before its add, solved for: the
    sublayers of each norm (every layer's attention, every layer's FFN) and all of them. A
    layer scale (CaiT's, DINOv2's ``LayerScale``) that the checkpoint does not hold, left at
    its initial value (1e-5, 0.1), or one applied where the model has none; c near 1 is the
    spec and never evidence (``alternatives.fits``)."""
    if not reaches(component, "_sublayer"):
        return
    norms = list(dict.fromkeys(sublayer_calls(evaluate)))  # in order of first use
    groups: list[str | None] = [*norms, None] if len(norms) > 1 else [None]
    for prefix in groups:

        def make(factor: float, prefix: str | None = prefix) -> Alternative:
            return Alternative("", "", pieces=_branch_scaled(prefix, factor))

        factor = solve_log(make, evaluate, test, BRANCH_SCALE_RANGE)
        if factor is None or math.isclose(factor, 1.0, rel_tol=1e-6):
            continue
        which = "every sublayer" if prefix is None else f"each sublayer normalised by {prefix!r}"
        yield Alternative(
            registered("blocks.branch_scaled"),
            f"the output is the spec's with the output of {which} multiplied by "
            f"{factor:.6g} (solved for) before its residual add: a layer scale the "
            "checkpoint does not hold, left at its initial value, or a scale the model does "
            "not have (SPEC.md §7.1)",
            pieces=_branch_scaled(prefix, factor),
        )


# The factors a branch scale is solved over: LayerScale's initial values (1e-6 to 0.1) and
# a residual scaled up, with room either side.
BRANCH_SCALE_RANGE = (math.log(1e-8), math.log(1e3))


def _bias_groups(params: Arrays) -> Iterator[tuple[str, list[str]]]:
    """The groups of biases a bug drops together: the named groups (``BIAS_GROUPS``), then
    those the parameter tree gives, every layer at once: the biases of one module
    (``layers.*.self_attn.k.bias``), and all the biases under one parent module (the
    attention's q, k, v and o: one projection class that drops its bias, used inside it)."""
    for words, leaves in BIAS_GROUPS:
        yield words, [k for k in params if _leaf(k) in leaves or k in leaves]
    by_module: dict[str, list[str]] = {}
    by_parent: dict[str, list[str]] = {}
    for key in params:
        if not key.endswith(".bias"):
            continue
        path = _LAYER_INDEX.sub(".*.", "." + key)[1:]
        module = path[: -len(".bias")]
        by_module.setdefault(module, []).append(key)
        if "." in module:
            by_parent.setdefault(module.rsplit(".", 1)[0], []).append(key)
    for module, keys in by_module.items():
        if all(_leaf(k) == "k.bias" for k in keys):
            continue  # q . b_k is one constant per score row: softmax never sees it (§3.1)
        yield f"the module {module!r}", keys
    for parent, keys in by_parent.items():
        if len({_LAYER_INDEX.sub(".*.", "." + k) for k in keys}) > 1:
            yield f"every module under {parent!r}", keys


def param_hypotheses_more(component: str, params: Arrays | None) -> Iterator[Alternative]:
    """Biases never added; a norm gain read as 1 + weight (or weight - 1)."""
    if not params:
        return
    tried: set[frozenset[str]] = set()
    for words, keys in _bias_groups(params):
        nonzero = [k for k in keys if np.any(np.asarray(params[k]) != 0)]
        if not nonzero or frozenset(keys) in tried:
            continue
        tried.add(frozenset(keys))
        dropped = {**params, **{k: np.zeros_like(np.asarray(params[k])) for k in keys}}
        shown = ", ".join(sorted(keys)[:6]) + (", ..." if len(keys) > 6 else "")
        yield Alternative(
            "params.bias_unused",
            f"the output is the spec's with the biases of {words} set to zero ({shown}): the "
            "implementation loads those biases but never adds them (a projection called "
            "without its bias, or a port that reads only the weights)",
            params=dropped,
        )
    norms = _norm_weights(component, params)
    for sign, words in ((1.0, "1 + weight"), (-1.0, "weight - 1")):
        if not norms:
            break
        shifted = {**params, **{k: np.asarray(params[k], dtype=np.float64) + sign for k in norms}}
        yield Alternative(
            "layer_norm.gain_plus_one",
            f"the output is the spec's with every norm gain replaced by {words}: the norm "
            "multiplies by (1 + weight) where the weights are stored for a plain weight, or "
            "the reverse (Gemma's RMSNorm stores weight - 1 and multiplies by 1 + weight; a "
            f"port mixes the two conventions). Norm weights: {', '.join(norms[:4])}",
            params=shifted,
        )


def _qkv_prefixes(params: Arrays) -> list[str]:
    """Prefixes ``p`` with ``p + 'q.weight'``, ``'k.weight'`` and ``'v.weight'``."""
    prefixes = sorted({k[: -len("q.weight")] for k in params if k.endswith("q.weight")})
    return [p for p in prefixes if all(f"{p}{x}.weight" in params for x in "kv")]


def _same_shapes(params: Arrays, prefix: str, pairs: Iterator[tuple[str, str]]) -> bool:
    return all(
        np.shape(params[f"{prefix}{a}.weight"]) == np.shape(params[f"{prefix}{b}.weight"])
        for a, b in pairs
    )


def _leaves(params: Arrays, prefix: str) -> list[str]:
    """The leaves (weight, bias) that q, k and v of ``prefix`` all have."""
    return [
        leaf for leaf in ("weight", "bias") if all(f"{prefix}{x}.{leaf}" in params for x in "qkv")
    ]


def _relaid(fused: np.ndarray, n_heads: int, stored: str) -> list[np.ndarray]:
    """q, k and v read from ``fused`` (the rows of q, k, v stacked in the layout ``stored``)
    in the other layout: part-major ``[3, H, d]`` stored, head-major ``[H, 3, d]`` read, or
    the reverse. Rows first: a weight ``[3*H*d, D]`` or a bias ``[3*H*d]``."""
    rows, rest = fused.shape[0], fused.shape[1:]
    d = rows // (3 * n_heads)
    if stored == "part_major":  # memory [3, H, d]; read as [H, 3, d]
        read = fused.reshape(n_heads, 3, d, *rest)
        return [read[:, i].reshape(n_heads * d, *rest) for i in range(3)]
    read = fused.reshape(3, n_heads * d, *rest)  # memory [H, 3, d]; read as [3, H, d]
    return [read[i] for i in range(3)]


def qkv_hypotheses(config: Any, params: Arrays | None) -> Iterator[Alternative]:
    """The q, k, v projections in another order, or the fused weight in the other layout."""
    prefixes = _qkv_prefixes(params or {})
    if not prefixes or params is None:
        return
    for order in itertools.permutations("qkv"):
        # with grouped-query heads (k and v narrower than q) only k and v can trade places
        if order == ("q", "k", "v") or not all(
            _same_shapes(params, p, zip("qkv", order, strict=True)) for p in prefixes
        ):
            continue
        out = dict(params)
        for prefix in prefixes:
            for leaf in _leaves(params, prefix):
                for to, source in zip("qkv", order, strict=True):
                    out[f"{prefix}{to}.{leaf}"] = params[f"{prefix}{source}.{leaf}"]
        # queries and keys traded is also the score matrix transposed: softmax over the
        # queries of q_t . k_s, each key's weights normalised, in self-attention
        transposed = (
            "; in self-attention the same output as the score matrix written key-major "
            "(einsum '...hst' for '...hts', k @ q^T) and softmaxed over its last axis"
            if order == ("k", "q", "v")
            else ""
        )
        yield Alternative(
            "attention.qkv_order_wrong",
            f"the output is the spec's with the query, key and value projections taken as "
            f"{', '.join(order)}: a fused qkv projection split in the wrong order (or q, k, v "
            f"weights loaded into each other's places{transposed}; SPEC.md §3.4, §0.2)",
            params=out,
        )
    # with grouped-query heads a fused [q | k | v] projection cut in another order, each
    # part at its own width (``key_value, query = qkv.split((2 * kv, d))``, GPTBigCode's
    # multi-query split written the other way round): the parts straddle the boundaries
    if not all(_same_shapes(params, p, iter((("q", "k"), ("q", "v")))) for p in prefixes):
        for order in itertools.permutations("qkv"):
            if order == ("q", "k", "v"):
                continue
            yield Alternative(
                "attention.qkv_order_wrong",
                f"the output is the spec's with the fused [q | k | v] projection cut as "
                f"{', '.join(order)}, each part at its own width: a fused projection split "
                "in the wrong order, so with narrower key/value heads the parts straddle "
                "the boundaries of q, k and v (SPEC.md §3.4, §11.2, §0.2)",
                params=_fused_cut(params, prefixes, order),
            )
        return  # a fused [3, H, d] weight needs as many key/value heads as query heads
    n_heads = getattr(config, "n_heads", 0)
    layouts = (("part_major", "head-major [H, 3, d]"), ("head_major", "part-major"))
    for ranks in (1, *RANK_GROUPS):
        if not n_heads or n_heads % ranks or (ranks > 1 and n_heads // ranks < 2):
            continue  # a rank of one head has one layout
        for stored, read in layouts:
            out = _fused_relaid(params, prefixes, n_heads, stored, ranks)
            if out is None:
                return
            layout = "part-major [3, H, d]" if stored == "part_major" else "head-major [H, 3, d]"
            per_rank = (
                f" within each of {ranks} tensor-parallel ranks' blocks of H/{ranks} heads"
                if ranks > 1
                else ""
            )
            yield Alternative(
                "attention.qkv_order_wrong",
                f"the output is the spec's with the fused qkv projection stored {layout} and "
                f"read {read}{per_rank}: each head's query, key and value rows are taken from "
                "the wrong slices of the fused weight (SPEC.md §3.4, §0.2)",
                params=out,
            )
    # the finest head-major layout, one channel a "head": q, k and v interleaved channel by
    # channel ([D, 3], rows 3c, 3c + 1, 3c + 2; ``unflatten(-1, (D, 3))`` of a [q | k | v]
    # output), read for the stacked blocks or the reverse
    width = int(np.shape(params[f"{prefixes[0]}q.weight"])[0]) if prefixes else 0
    if not width or width == n_heads:
        return  # one channel a head: the head-major layouts above
    words = (
        ("part_major", "stacked [q | k | v]", "interleaved channel by channel [D, 3]"),
        ("head_major", "interleaved channel by channel [D, 3]", "stacked [q | k | v]"),
    )
    for stored, layout, read in words:
        out = _fused_relaid(params, prefixes, width, stored, 1)
        if out is None:
            return
        yield Alternative(
            "attention.qkv_order_wrong",
            f"the output is the spec's with the fused qkv projection stored {layout} and read "
            f"{read}: every query, key and value channel is taken from another row of the "
            "fused weight, a mix of all three projections (SPEC.md §3.4, §0.2)",
            params=out,
        )


def _fused_cut(params: Arrays, prefixes: list[str], order: tuple[str, ...]) -> Arrays:
    """``params`` with q, k and v fused in that order (rows stacked) and cut back in
    ``order``, each part as many rows as its own projection has."""
    out = dict(params)
    for prefix in prefixes:
        for leaf in _leaves(params, prefix):
            pieces = {x: np.asarray(params[f"{prefix}{x}.{leaf}"], dtype=np.float64) for x in "qkv"}
            fused = np.concatenate([pieces[x] for x in "qkv"], axis=0)
            at = 0
            for name in order:
                rows = pieces[name].shape[0]
                out[f"{prefix}{name}.{leaf}"] = fused[at : at + rows]
                at += rows
    return out


def _fused_relaid(
    params: Arrays, prefixes: list[str], n_heads: int, stored: str, ranks: int
) -> Arrays | None:
    """``params`` with q, k and v fused in the layout ``stored`` and read back in the other,
    within each of ``ranks`` consecutive blocks of heads (a column-parallel rank fuses its
    own heads: Megatron-LM); None where the rows do not split into heads."""
    out = dict(params)
    heads = n_heads // ranks
    for prefix in prefixes:
        for leaf in _leaves(params, prefix):
            pieces = [np.asarray(params[f"{prefix}{x}.{leaf}"], dtype=np.float64) for x in "qkv"]
            if pieces[0].shape[0] % n_heads:
                return None
            d = pieces[0].shape[0] // n_heads
            blocks: list[list[np.ndarray]] = [[], [], []]
            for r in range(ranks):
                own = [x[r * heads * d : (r + 1) * heads * d] for x in pieces]
                if stored == "part_major":
                    fused = np.concatenate(own)
                else:  # per head: its q rows, its k rows, its v rows
                    fused = np.concatenate(
                        [x[h * d : (h + 1) * d] for h in range(heads) for x in own]
                    )
                for i, relaid in enumerate(_relaid(fused, heads, stored)):
                    blocks[i].append(relaid)
            for x, block in zip("qkv", blocks, strict=True):
                out[f"{prefix}{x}.{leaf}"] = np.concatenate(block)
    return out


def gain_unused_hypotheses(component: str, params: Arrays | None) -> Iterator[Alternative]:
    """Every norm's gain never multiplied, then each norm name's alone (norm1 of each layer)."""
    if not params:
        return
    norms = [k for k in _norm_weights(component, params) if np.any(np.asarray(params[k]) != 1.0)]
    groups: dict[str, list[str]] = {}
    for k in norms:
        groups.setdefault(_leaf(k), []).append(k)
    candidates = [norms] + (list(groups.values()) if len(groups) > 1 else [])
    for keys in candidates:
        if not keys:
            continue
        ones = {
            **params,
            **{k: np.ones_like(np.asarray(params[k], dtype=np.float64)) for k in keys},
        }
        shown = ", ".join(keys[:4]) + (", ..." if len(keys) > 4 else "")
        yield Alternative(
            "layer_norm.gain_unused",
            f"the output is the spec's with the norm gains set to one ({shown}): the norm "
            "loads its weight but never multiplies by it (a hand-written norm that returns the "
            "normalised x, SPEC.md §5.1, §5.3)",
            params=ones,
        )


def shift_before_gain_hypotheses(component: str, params: Arrays | None) -> Iterator[Alternative]:
    """Every norm adding its shift before its gain, ``weight * (x_hat + bias)``, then each
    norm name's alone: the spec's norm with each bias replaced by ``weight * bias``."""
    if not params:
        return
    pairs = {
        k: k[: -len("weight")] + "bias"
        for k in _norm_weights(component, params)
        if k[: -len("weight")] + "bias" in params
    }
    moved = {
        w: b
        for w, b in pairs.items()
        if not np.allclose(np.asarray(params[w]) * np.asarray(params[b]), params[b])
    }
    groups: dict[str, list[str]] = {}
    for k in moved:
        groups.setdefault(_leaf(k), []).append(k)
    for keys in [list(moved)] + (list(groups.values()) if len(groups) > 1 else []):
        if not keys:
            continue
        scaled = {
            moved[w]: np.asarray(params[w], dtype=np.float64) * np.asarray(params[moved[w]])
            for w in keys
        }
        shown = ", ".join(keys[:4]) + (", ..." if len(keys) > 4 else "")
        yield Alternative(
            "layer_norm.shift_before_gain",
            f"the output is the spec's with the norms of {shown} adding their shift before "
            "their gain: weight * (x_hat + bias) for weight * x_hat + bias, so the shift is "
            "scaled by the gain (SPEC.md §5.1)",
            params={**params, **scaled},
        )


_BIAS = re.compile(r"(^|\.)bias$")


def unused_param_hypotheses(component: str, params: Arrays | None) -> Iterator[Alternative]:
    """Each parameter (one name across the layers of a stack) set to zero: loaded, never
    used. Biases, norm gains and position tables are left to their own hypotheses."""
    if not params:
        return
    gains = set(_norm_weights(component, params))
    groups: dict[str, list[str]] = {}
    for key in params:
        # biases, norm gains and position tables have codes of their own when unused
        own_code = key in gains or _BIAS.search(key) or POSITION_TABLE.search(key)
        if own_code or not np.any(np.asarray(params[key])):
            continue
        match = _LAYER.match(key)
        name = f"{match.group(1)}<i>.{match.group(3)}" if match else key
        groups.setdefault(name, []).append(key)
    for name, keys in groups.items():
        zeroed = {**params, **{k: np.zeros_like(np.asarray(params[k])) for k in keys}}
        yield Alternative(
            "params.unused",
            f"the output is the spec's with {name} set to zero: the implementation loads "
            "this parameter but never uses it (a tensor of zeros or a fresh buffer in its "
            "place, or the step that applies it skipped)",
            params=zeroed,
        )
        # a square linear skipped: its input passed on as it is (the identity, no bias)
        shapes = {np.shape(params[k]) for k in keys}
        if name.endswith(".weight") and len(shapes) == 1 and _square(next(iter(shapes))):
            skipped = dict(params)
            for key in keys:
                skipped[key] = np.eye(np.shape(params[key])[0])
                bias = key.removesuffix("weight") + "bias"
                if bias in params:
                    skipped[bias] = np.zeros_like(np.asarray(params[bias]))
            yield Alternative(
                "params.unused",
                f"the output is the spec's with the linear map {name.removesuffix('.weight')} "
                "skipped (its input passed on as it is, the weight and any bias never "
                "applied: the attention's output projection left out, the merged heads added "
                "to the residual directly; SPEC.md §3.4, §0.2)",
                params=skipped,
            )


_LAYER = re.compile(r"^(.*?layers\.)(\d+)\.(.+)$")


def _square(shape: tuple[int, ...]) -> bool:
    return len(shape) == 2 and shape[0] == shape[1]


def reshaped_weight_hypotheses(params: Arrays | None) -> Iterator[Alternative]:
    """Each weight of two or more axes (one name across a stack's layers) reinterpreted by a
    reshape where its axes should be exchanged: a ``(out, in...)`` kernel read as
    ``(in, out)`` by ``.reshape``/``.view`` instead of flattened and transposed (for a square
    weight: the weight used transposed). Embedding tables, read by row, are not kernels."""
    if not params:
        return
    groups: dict[str, list[str]] = {}
    for key in params:
        value = np.asarray(params[key])
        if not key.endswith("weight") or value.ndim < 2 or POSITION_TABLE.search(key):
            continue
        module = key.rsplit(".", 2)[-2] if "." in key else ""
        if module.startswith("embedding"):
            continue  # a table read by row, not a kernel
        match = _LAYER.match(key)
        name = f"{match.group(1)}<i>.{match.group(3)}" if match else key
        groups.setdefault(name, []).append(key)

    def reshaped(key: str) -> np.ndarray:
        weight = np.asarray(params[key], dtype=np.float64)
        rows = weight.shape[0]
        return weight.reshape(-1, rows).T.reshape(weight.shape)

    for name, keys in groups.items():
        yield Alternative(
            "params.weight_reshaped",
            f"the output is the spec's with {name} read by a reshape where its axes should "
            "be exchanged: the (out, in) kernel viewed as (in, out) (`.reshape`/`.view` for "
            "a flatten and a transpose; a square weight used transposed), as a port between "
            "an (in, out) and an (out, in) layout does",
            params={**params, **{k: reshaped(k) for k in keys}},
        )


def _layers_unchained(piece: str) -> Callable[[], dict[str, Callable[..., Any]]]:
    """Pieces (built anew for each evaluation) under which every call of the layer function
    ``piece`` after the first takes the first call's input: each layer of the stack
    computes from the stack's input, not from the layer before it."""

    def pieces() -> dict[str, Callable[..., Any]]:
        first: list[Any] = [None]

        def layer(x: Any, *args: Any, **kwargs: Any) -> Any:
            if first[0] is None:
                first[0] = oracle._f64(x)
            elif np.shape(first[0]) == np.shape(x):
                x = first[0]
            return getattr(oracle, piece)(x, *args, **kwargs)

        return {piece: layer}

    return pieces


def unchained_layer_hypotheses(component: str) -> Iterator[Alternative]:
    """Every layer of a stack computing from the stack's input instead of the previous
    layer's output (``out = layer(x)`` in the loop for ``x = layer(x)``): only the last
    layer's computation reaches the output (SPEC.md §7.3)."""
    for piece in select(level="layer"):  # the oracle runs each layer by its own name
        if reaches(component, piece):
            yield Alternative(
                "blocks.layers_not_chained",
                "the output is the spec's with every layer of the stack computing from the "
                "stack's input instead of the previous layer's output (out = layer(x) in the "
                "loop for x = layer(x)): only the last layer reaches the output (SPEC.md "
                "§7.3)",
                pieces=_layers_unchained(piece),
            )


def _layers_add_input(piece: str) -> dict[str, Callable[..., Any]]:
    """Pieces under which every call of the layer function ``piece`` returns its output
    plus its input."""

    def layer(x: Any, *args: Any, **kwargs: Any) -> Any:
        return oracle._f64(x) + getattr(oracle, piece)(x, *args, **kwargs)

    return {piece: layer}


def layer_input_added_hypotheses(component: str) -> Iterator[Alternative]:
    """Every layer's input added to its output by the code around it (a stack's loop
    ``hidden = layer(hidden)[0] + hidden``, or a block whose caller adds the residual it
    already added): each layer's residual counted twice (SPEC.md §7.1, §7.3)."""
    for piece in select(level="layer"):
        if reaches(component, piece):
            yield Alternative(
                "blocks.residual_added_twice",
                "the output is the spec's with every layer's input added to the layer's "
                "output again (hidden = layer(hidden) + hidden, the layer having added its "
                "residuals already): the skip path is counted twice at every layer (SPEC.md "
                "§7.1, §7.3)",
                pieces=_layers_add_input(piece),
            )


def layer_params_hypotheses(params: Arrays | None) -> Iterator[Alternative]:
    """Every layer of a stack reading the first layer's parameters, or the last layer's; or
    the layers run in reverse order (layer i computing with layer n - 1 - i's)."""
    stacks: dict[str, dict[int, dict[str, str]]] = {}  # stack prefix -> layer -> rest -> key
    for key in params or {}:
        match = _LAYER.match(key)
        if match:
            stack, index, rest = match.groups()
            stacks.setdefault(stack, {}).setdefault(int(index), {})[rest] = key
    stacks = {s: layers for s, layers in stacks.items() if len(layers) > 1}
    if not stacks or params is None:
        return
    for which, words in ((min, "the first layer's"), (max, "the last layer's")):
        out = dict(params)
        for layers in stacks.values():
            source = layers[which(layers)]
            for own in layers.values():
                for rest, key in own.items():
                    if rest in source and np.shape(params[source[rest]]) == np.shape(params[key]):
                        out[key] = params[source[rest]]
        yield Alternative(
            "blocks.layer_params_wrong",
            f"the output is the spec's with every layer of the stack reading {words} "
            "parameters: a loop over the layers that indexes one fixed layer, or weights "
            "looked up without the layer index (SPEC.md §7.3)",
            params=out,
        )
    out = dict(params)
    for layers in stacks.values():
        order = sorted(layers)
        for own, source in zip(order, reversed(order), strict=True):
            for rest, key in layers[own].items():
                theirs = layers[source].get(rest)
                if theirs is not None and np.shape(params[theirs]) == np.shape(params[key]):
                    out[key] = params[theirs]
    yield Alternative(
        "blocks.layer_params_wrong",
        "the output is the spec's with the stack's layers run in reverse order (for layer in "
        "reversed(self.layers)): the last layer's weights act on the input first, and each "
        "layer position computes with another layer's parameters (SPEC.md §7.3)",
        params=out,
    )


# A module key: "<parent><module>.<leaf>", the parent holding any layer index.
_MODULE_KEY = re.compile(r"^(?P<parent>(?:.*\.)?)(?P<module>[^.]+)\.(?P<leaf>weight|bias)$")
_LAYER_INDEX = re.compile(r"\.\d+\.")

# A module pair that has a code of its own (a check names it too).
_OWN_CODES = {
    ("v", "k"): "attention.value_uses_key_projection",
    ("lm_head", "embedding"): "model.head_tied_to_embedding",  # §8.3: an untied head
    # one attention projection computed with another's weights: a fused qkv read at the
    # wrong slot (InternLM2's ``qkv[..., -1, :]`` for the keys), q, k, v in the wrong order
    **{
        (reader, source): "attention.qkv_order_wrong"
        for reader in "qkv"
        for source in "qkv"
        if reader != source and (reader, source) != ("v", "k")
    },
    # a gated FFN's gate computed from the up projection's weights, or the up from the gate's
    # (``silu(w3(x)) * w3(x)``): the pair's layout code
    ("gate", "up"): "ffn.gate_up_swapped",
    ("up", "gate"): "ffn.gate_up_swapped",
}
# What a sibling read means, by the code it is given (other_module_hypotheses).
_SIBLING_WORDS = {
    "attention.qkv_order_wrong": "one attention projection computed with another's weights: a "
    "fused qkv read at the wrong slot, or q, k, v taken in the wrong order (SPEC.md §3.4)",
    "ffn.gate_up_swapped": "the gated FFN's gate and up projections confused: one of the two "
    "computed with the other's weights, so its own are never used (SPEC.md §11.3)",
}


def _held_apart(
    owners: Mapping[str, str] | None,
    places: Mapping[str, Mapping[str, str]],
    sources: Mapping[str, Mapping[str, str]],
) -> bool:
    """Does the subject hold the reader's and the source's weights in tensors of their own
    (``owners``), in every parent, rather than as slices of one fused tensor?"""
    if not owners:
        return False
    for parent, leaves in places.items():
        mine, theirs = (
            owners.get(leaves.get("weight", "")),
            owners.get(sources[parent].get("weight", "")),
        )
        if mine is None or theirs is None or mine == theirs:
            return False
    return True


def other_module_hypotheses(
    params: Arrays | None, owners: Mapping[str, str] | None = None
) -> Iterator[Alternative]:
    """A module computing with a sibling module's parameters (same parent, same leaves,
    same shapes), in every layer at once: ``ln_2`` read with ``ln_1``'s weights (a wrong key
    into the parameter tree), a projection loaded from its neighbour's. Read off the
    canonical parameter layout (``tck.reference.params``), not off a list of modules. One
    attention projection computed with another's weights is the qkv order where the two are
    slices of one fused tensor, or where ``owners`` (canonical -> the subject's tensor) is
    not known; a module read from another where the subject holds them apart."""
    if not params:
        return
    # (parent with the layer index blanked, module) -> {actual parent: {leaf: key}}
    modules: dict[tuple[str, str], dict[str, dict[str, str]]] = {}
    for key in params:
        match = _MODULE_KEY.match(key)
        if match:
            shape = _LAYER_INDEX.sub(".*.", "." + match["parent"])
            modules.setdefault((shape, match["module"]), {}).setdefault(match["parent"], {})[
                match["leaf"]
            ] = key
    for (shape, reader), places in modules.items():
        for (other_shape, source), sources in modules.items():
            if other_shape != shape or source == reader or set(sources) != set(places):
                continue
            out = dict(params)
            fits_all = True
            for parent, leaves in places.items():
                theirs = sources[parent]
                if set(theirs) != set(leaves) or any(
                    np.shape(params[theirs[leaf]]) != np.shape(params[key])
                    for leaf, key in leaves.items()
                ):
                    fits_all = False
                    break
                for leaf, key in leaves.items():
                    out[key] = params[theirs[leaf]]
            if not fits_all:
                continue
            code = _OWN_CODES.get((reader, source), "params.read_from_other_module")
            if code == "attention.qkv_order_wrong" and _held_apart(owners, places, sources):
                code = "params.read_from_other_module"  # self.k_proj(x) for the queries
            how = _SIBLING_WORDS.get(
                code,
                "a wrong key into the parameter tree, such as a second norm that reads the "
                "first norm's weights (SPEC.md §0.2)",
            )
            yield Alternative(
                code,
                f"the output is the spec's with the module {reader!r} computing with the "
                f"parameters of its sibling {source!r} (in every layer): {how}",
                params=out,
            )


def stack_module_from_layer_hypotheses(params: Arrays | None) -> Iterator[Alternative]:
    """A module of a stack outside its layers (the final norm) computing with the parameters
    of a module of the same leaves and shapes in the stack's first or last layer:
    ``self.layers[-1].final_layer_norm(x)`` for ``self.emb_layer_norm_after(x)``, the stack's
    own module loaded and never used (SPEC.md §0.2, §7.3)."""
    if not params:
        return
    # module prefix -> {leaf: key}, for every module of weight/bias leaves
    modules: dict[str, dict[str, str]] = {}
    for key in params:
        match = _MODULE_KEY.match(key)
        if match:
            modules.setdefault(f"{match['parent']}{match['module']}.", {})[match["leaf"]] = key
    for reader, leaves in modules.items():
        if _LAYER.match(reader):
            continue  # a layer's own module: other_module_hypotheses
        stack = reader.rsplit(".", 2)[0] + "." if reader.count(".") > 1 else ""
        indices = sorted(
            {int(m.group(2)) for k in modules if (m := _LAYER.match(k)) and k.startswith(stack)}
        )
        for index in {indices[0], indices[-1]} if indices else ():
            for source, theirs in modules.items():
                m = _LAYER.match(source)
                if (
                    m is None
                    or not source.startswith(stack)
                    or int(m.group(2)) != index
                    or set(theirs) != set(leaves)
                    or any(
                        np.shape(params[theirs[f]]) != np.shape(params[k])
                        for f, k in leaves.items()
                    )
                    or all(np.array_equal(params[theirs[f]], params[k]) for f, k in leaves.items())
                ):
                    continue
                yield Alternative(
                    "params.read_from_other_module",
                    f"the output is the spec's with the module {reader[:-1]!r} computing with "
                    f"the parameters of {source[:-1]!r}, a module of the stack's "
                    f"{'first' if index == indices[0] else 'last'} layer: a wrong attribute "
                    f"path, {reader[:-1]!r} loaded and never used (SPEC.md §0.2, §7.3)",
                    params={**params, **{k: params[theirs[f]] for f, k in leaves.items()}},
                )


def _activated_after_gating(x: Any, params: Any, *, activation: str = "silu") -> np.ndarray:
    """§11.3 with the activation applied to the gating product: down(act(gate(x) * up(x)))."""
    act = oracle.GATE_ACTIVATIONS[activation]
    hidden = act(oracle.linear(x, params, "gate.") * oracle.linear(x, params, "up."))
    return oracle.linear(hidden, params, "down.")


def gating_hypotheses(component: str) -> Iterator[Alternative]:
    """A gated FFN that activates the product gate(x) * up(x) instead of gate(x) alone."""
    if not reaches(component, "gated_feed_forward"):
        return
    yield Alternative(
        "ffn.activation_after_gating",
        "the output is the spec's with the gated FFN's activation applied after the gating "
        "product, down(act(gate(x) * up(x))), instead of to the gate alone, "
        "down(act(gate(x)) * up(x)) (SPEC.md §11.3)",
        pieces={"gated_feed_forward": _activated_after_gating},
    )


def _log_softmax(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def normalised_logits_hypotheses(component: str) -> Iterator[Alternative]:
    """A model whose output the record calls logits returning log-probabilities or
    probabilities instead (SPEC.md §8.2: the softmax belongs to the loss)."""
    if "logits" not in record(component).output:
        return
    yield Alternative(
        "model.returns_log_probabilities",
        "the output is the spec's with a log-softmax over the last axis applied to its "
        "logits: the model returns log-probabilities, not logits (SPEC.md §8.2)",
        after=_log_softmax,
    )
    yield Alternative(
        "model.returns_probabilities",
        "the output is the spec's with a softmax over the last axis applied to its logits: "
        "the model returns probabilities, not logits (SPEC.md §8.2)",
        after=lambda x: np.exp(_log_softmax(x)),
    )


def _norm_with_eps(name: str, eps: float) -> Callable[..., Any]:
    """§5.1-§5.3's norm with ``eps`` for the norms whose prefix ends in ``name``."""

    def norm(x: Any, params: Any, prefix: str, conventions: Any) -> Any:
        if prefix.endswith(name):
            conventions = dataclasses.replace(conventions, eps=eps)
        return oracle.norm(x, params, prefix, conventions)

    return norm


def one_norm_eps_hypotheses(component: str, params: Arrays | None) -> Iterator[Alternative]:
    """One norm (every norm of one name: ``norm1`` of each layer) at another eps of the
    catalogue's, the others at the declared one (a module built with its default eps,
    ``nn.LayerNorm(dim)``, beside ones given the config's). The eps of every norm at once is
    the convention field, tried first."""
    from .explain import alternatives

    if not params or not reaches(component, "norm"):
        return
    names = sorted({_leaf(k)[: -len("weight")] for k in params if _NORM_WEIGHT.search(k)})
    if len(names) < 2:
        return
    for name in names:
        for eps in alternatives("eps", None):
            yield Alternative(
                "layer_norm.eps_wrong",
                f"the output is the spec's with the {name[:-1]} norms at eps={eps!r} and the "
                "others at the declared eps: one norm is built with another eps (its "
                "module's default, such as nn.LayerNorm(dim)'s 1e-5) than the configuration "
                "gives the rest (SPEC.md §5.1)",
                pieces={"norm": _norm_with_eps(name, eps)},
            )


def more_hypotheses(
    component: str,
    params: Arrays | None,
    sublayers: int = 0,
    config: Any = None,
    conventions: Any = None,
    owners: Mapping[str, str] | None = None,
) -> Iterator[Alternative]:
    """Every hypothesis of this module for ``component`` with ``params``; ``sublayers``: how
    many sublayers the call runs (0: not counted, no one-sublayer hypotheses); ``config``:
    the instance's (the fused-qkv layouts need its head count); ``conventions``: the
    declared ones (the norm's placement); ``owners``: canonical parameter -> the tensor the
    subject holds it in, where the adapter says (``TorchHandle.owners``)."""
    yield from head_split_hypotheses(component)
    yield from head_merge_hypotheses(component)
    yield from residual_hypotheses(component, sublayers)
    yield from residual_from_layer_input_hypotheses(component, params)
    yield from sublayer_kind_hypotheses(component, params)
    yield from norm_bypass_hypotheses(component, conventions, params)
    yield from final_norm_one_stack_hypotheses(component, conventions)
    yield from final_norm_every_layer_hypotheses(component)
    yield from param_hypotheses_more(component, params)
    yield from qkv_hypotheses(config, params)
    yield from gain_unused_hypotheses(component, params)
    yield from shift_before_gain_hypotheses(component, params)
    yield from layer_params_hypotheses(params)
    yield from unchained_layer_hypotheses(component)
    yield from layer_input_added_hypotheses(component)
    yield from skipped_layer_hypotheses(component)
    yield from gating_hypotheses(component)
    yield from normalised_logits_hypotheses(component)
    yield from one_norm_eps_hypotheses(component, params)
    yield from other_module_hypotheses(params, owners)
    yield from stack_module_from_layer_hypotheses(params)
    yield from unused_param_hypotheses(component, params)
    yield from reshaped_weight_hypotheses(params)


def explained_by_one_other_field(
    tck: Any, inst: Any, inputs: Mapping[str, np.ndarray], test: np.ndarray, field: str
) -> dict[str, Any] | None:
    """For a convention probe of ``field`` that no value of ``field`` alone explains: another
    single field that explains the output by itself, ``field`` left at its declared value
    (``{other: value}``), else None.

    The smallest explanation wins: with BERT's eps 1e-12 left undeclared, eps alone
    reproduces the output, and so does "eps outside the sqrt, with eps 1e-12" (at that eps
    the two placements agree); the probe of eps_placement must not accuse the placement."""
    from .explain import matching_values

    for other in record(tck.component).fields:
        if other == field:
            continue
        values = matching_values(tck, inst, inputs, test, other)
        if values and getattr(inst.conventions, other) not in values:
            return {other: values[0]}
    return None
