"""What a real-size checkpoint's whole stack runs (docs/performance.md, "Real sizes").

A checkpoint checked as it is (``tck.adapters.pretrained``) offers its layer as subjects of
their own (``mha`` and ``encoder_layer``: layer 0, with its own weights) and its whole stack
(``encoder``, and ``vit`` for the whole ViT). The layer subjects run every check. At real
size (a layer of more than ``REAL_SIZE_LAYER_PARAMS`` parameters, BERT-base's has 7.1 M), the
whole stack runs the set below, which is what depth can change:

- ``equality.oracle``: every layer's weights against the float64 oracle, on the usual seven
  calls and one at the checkpoint's own length (512 tokens for BERT-base, 197 for ViT-B/16
  at 224 px). A wrong weight, a wrong layer order or a bug in any one layer fails here. The
  full-length call is made once per checkpoint: by the ``[sdpa]`` stack when it runs in
  float64 (the cheaper kernel at long contexts), else by the ``[eager]`` one, the other
  twin (the same weights) making the usual calls only (``pretrained._AsIs.twin_made_it``).
  A language model's (``causal_lm``) full-length call
  is judged layer by layer (``tck.conformance.toolkit.teacher``: the oracle's block fed
  the model's own output of the layer before, at 64 positions spread over the context,
  keys and values at every position), the whole comparison where any part fails;
- ``masks.padding_invariance``: padding through every layer;
- ``gradients.gradients`` in float64 only: the backward pass through every layer, against
  float64 autograd through the reference (one call), judged for every parameter outside
  the layers after the first (``judged_gradients``);
- a stack its adapter does not offer in float64 (hf.vit's eager subjects: a float32
  softmax) runs ``numerics.dtype_sweep`` and ``gradients.gradients`` in its most precise
  dtype instead (the oracle comparison and gradients of that dtype's tolerance rule);
- the parameter checks (``params.round_trip``, ``params.count``) and, for ``vit``, the
  ViT checks (``vit.*``); an ``[sdpa]`` stack whose ``[eager]`` twin runs in float64 leaves
  ``TWIN_LEAVES`` (the float64 gradients) to that twin, with a skip row saying so.

``shapes.output_shapes`` is not run on the stack: each call of its oracle comparison
(batch 1 to 3, lengths 1 to 113 and the checkpoint's own) is held to the spec's output
shape before its values (``Harness.compare``), and the layer subjects run the check itself
(``COVERED``; GPT-2 small: six forwards of the whole model, 6 CPU s).

The other checks (masks, batching, permutation, determinism, fingerprints, numerics, the
gradients in float32, float16 and bfloat16) are properties of the layer's code, which every
layer of the stack shares: they run on the layer subjects and are skipped on the stack with
this reason, never silently (a skip row in the results, its reason in the report). Each of
them on a 12-layer stack costs twelve times its run on layer 0.

A real-size layer leaves the checks of the attention's own code (``ATTENTION_OWN``: the
16-bit long-row softmax) to its attention subject of the same implementation, layer 0's
own module (``decoder_block[sdpa]`` to ``causal_self_attention[sdpa]``), with a skip row
saying so (``attention_skip``).

``TCK_STACK_PLAN`` decides: ``auto`` (default: the rule above), ``on`` (the stated set at any
size, which is how the tests exercise it on small checkpoints), ``off`` (every check on the
stack: the full verdict, at 12 times the layer subjects' cost).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import Subject

ENV = "TCK_STACK_PLAN"
PRECISIONS = ("float64", "float32", "float16", "bfloat16")
STACKS = ("encoder", "decoder", "vit", "causal_lm")  # the subjects that hold every layer
REAL_SIZE_LAYER_PARAMS = 1_000_000
KEPT = frozenset(
    {
        "equality.oracle",
        "masks.padding_invariance",
        "gradients.gradients",  # in float64 only (below)
        "params.round_trip",
        "params.count",
        # a decoder's cache and its left padding run through every layer's own cache slot
        # (SPEC.md §11.6, §11.7): a layer index wired wrongly shows only on the whole stack
        "decoder.kv_cache",
        "decoder.kv_cache_left_padded",
        "decoder.left_padding",
    }
)

# Checks a real-size stack leaves to another it runs, and why.
COVERED = {
    "shapes.output_shapes": "every call of the stack's oracle comparison (batch 1 to 3, "
    "lengths 1 to 113 and the checkpoint's own) is held to the spec's output shape before "
    "its values, and the layer subjects run this check",
}

# What a real-size stack's ``[sdpa]`` twin leaves to its ``[eager]`` twin (the same weights
# and code but the attention kernel, whose own checks the sdpa layer subjects run): the
# float64 gradients through every layer, a forward and backward of the whole model (GPT-2
# small: 9 CPU s; the sdpa kernel's own backward is judged on the sdpa layer subjects, in
# every dtype). A skip row says so (``pretrained._AsIs.stack_plan``).
TWIN_LEAVES = frozenset({"gradients.gradients"})


# Checks of the attention's own code. On a real-size checkpoint a layer subject runs them
# through its attention, which is the attention subject of the same implementation (layer 0's
# own module): there they repeat that subject's run at a whole layer's cost (GPT-2 small's
# block in float16 at 1024 tokens: about 20 CPU s a dtype, where the attention alone takes
# 8; this CPU has no fast half-precision matrix product). A skip row says so.
ATTENTION_OWN = frozenset({"numerics.softmax_long_rows"})
ATTENTION_OF = {"decoder_block": "causal_self_attention"}  # the layers that run them
# ...and on the CPU, in bfloat16 alone: the same accumulation judged with 3 fewer mantissa
# bits than float16's, where the error of a 16-bit running sum shows first. A float16 run
# would repeat it at a real layer's cost on a CPU without half-precision matrix kernels
# (GPT-2 small's attention at 1024 tokens: 5 CPU s, its Conv1D's row-major weight taking
# torch's slow 16-bit path); on a GPU both run.
LONG_ROW_DTYPES_ON_CPU = ("bfloat16",)


def layer_params(subject: Subject) -> int | None:
    """Parameters of one layer at the subject's fixed sizes (``layer_size``), None when its
    ConfigSpace does not fix them."""
    fixed = dict(getattr(subject.supports, "fixed", None) or {})
    return layer_size(fixed.get("d_model"), fixed.get("d_ff"))


def layer_size(d: Any, f: Any) -> int | None:
    """Parameters of one layer of width ``d`` and FFN width ``f`` (attention and FFN weights
    and biases, two norms), None unless both are integers."""
    if not isinstance(d, int) or not isinstance(f, int):
        return None
    return 4 * (d * d + d) + 2 * d * f + f + d + 4 * d


def is_real_size(subject: Subject) -> bool:
    """Whether ``TCK_STACK_PLAN`` (default auto) treats ``subject`` (a stack or a layer) as
    real-size."""
    mode = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"${ENV}={mode!r}: use auto, on or off")
    if mode != "auto":
        return mode == "on"
    size = layer_params(subject)
    return size is not None and size > REAL_SIZE_LAYER_PARAMS


def applies(subject: Subject) -> bool:
    """Whether ``subject`` runs the stated set (``TCK_STACK_PLAN``, default auto)."""
    return subject.component in STACKS and is_real_size(subject)


def stack_skip(
    subject: Subject, check: str, params: dict[str, Any], dtypes: tuple[str, ...] = ("float64",)
) -> str | None:
    """Why ``check`` (with its parameters, e.g. ``dtype``) is skipped on ``subject``, whose
    adapter offers ``dtypes``, or None when it runs."""
    if not applies(subject) or ("dtype" in params and params["dtype"] not in dtypes):
        return None  # a dtype it does not offer skips with the adapter's own reason
    top = next((d for d in PRECISIONS if d in dtypes), "float64")  # its most precise dtype
    kept = check in KEPT or (subject.component == "vit" and check.startswith("vit."))
    if top != "float64" and check in ("numerics.dtype_sweep", "decoder.oracle_lengths"):
        kept = True  # no float64, no equality.oracle: these compare with the oracle instead
    if check in ("gradients.gradients", "numerics.dtype_sweep"):
        kept = kept and params.get("dtype", "float64") == top
    if kept:
        return None
    if check in COVERED:
        return f"real-size stack: {subject.name} holds every layer; {COVERED[check]}"
    return (
        f"real-size stack: {subject.name} holds every layer of the checkpoint; {check} is a "
        "property of the layer's code and runs on the layer subjects (mha, encoder_layer: "
        "layer 0, its own weights); the stack runs the oracle comparison (at its full length "
        f"too), padding invariance and float64 gradients (${ENV}=off runs everything here)"
    )


def attention_skip(subject: Subject, check: str, subjects: list[Subject]) -> str | None:
    """Why ``check``, one of the attention's own (``ATTENTION_OWN``), is skipped on
    ``subject``, a real-size layer whose attention is offered as a subject of its own with
    the same implementation (``decoder_block[sdpa]`` and ``causal_self_attention[sdpa]``);
    None when it runs."""
    attention = ATTENTION_OF.get(subject.component)
    if check not in ATTENTION_OWN or attention is None or not is_real_size(subject):
        return None
    twin = _same_implementation(subject, attention, subjects)
    if twin is None:
        return None
    return (
        f"real-size layer: {check} judges the attention's own code, which {twin.name} is "
        f"(layer 0's attention, the same implementation); it runs there, not again at "
        f"{subject.name}'s cost"
    )


def _same_implementation(
    subject: Subject, component: str, subjects: list[Subject]
) -> Subject | None:
    """The subject of ``component`` with ``subject``'s attention implementation (the
    ``[sdpa]`` of ``decoder_block[sdpa]``), if ``subjects`` offer one."""
    implementation = subject.name.partition("[")[2]
    return next(
        (
            s
            for s in subjects
            if s.component == component and s.name.partition("[")[2] == implementation
        ),
        None,
    )


# A later layer's parameter (``layers.3.ffn.fc1.weight``, ``encoder.layers.11.norm1.bias``).
LATER_LAYER = re.compile(r"(?:^|\.)layers\.[1-9][0-9]*\.")


def judged_gradients(subject: Subject, names: Collection[str]) -> frozenset[str] | None:
    """The canonical parameters whose gradients a real-size stack's gradient check judges,
    of ``names``; None: every one (any other subject). Every parameter but the layers'
    after the first: the embeddings, position tables, class token, final norm and head
    (the stack's own) and layer 0's, whose gradients come back through every layer above
    it, so a wrong backward in any layer changes them (the gradient of the token table
    passes through all of them). A later layer's parameter gradients are formed by the
    same code as layer 0's, from an upstream gradient those judged ones already verify,
    and the layer subjects judge that code in every dtype. Not forming them takes the
    gradient check of GPT-2 small from 1 GB of float64 gradients per side (the
    reference's and the model's) to 0.37 GB."""
    if not applies(subject):
        return None
    kept = frozenset(n for n in names if not LATER_LAYER.search(n))
    return kept if len(kept) < len(set(names)) else None


# The images a real-size image model's whole stack takes per call (ViT-B/16: 197 tokens an
# image, about 2.5 CPU s an image for the model's float64 forward and the oracle's, three
# times that with the backward): two in the oracle comparison's calls (a batch of one and a
# batch of two: the calls of one batch size differ by the draw alone), one in the gradient
# check. Batch sizes, rows' independence and their gradients are the layer subjects' checks.
IMAGES_PER_CALL = {"equality.oracle": 2, "gradients.gradients": 1}


def images_per_call(subject: Subject, check: str) -> int | None:
    """At most how many images ``check`` gives ``subject`` in one call; None: no limit."""
    return IMAGES_PER_CALL.get(check) if applies(subject) else None


# A real-size stack that a larger stack of the same adapter holds whole, with the same
# attention implementation (a ViT's encoder in the ``vit`` subject): the larger one's oracle
# comparison and float64 gradients go through every layer of it, on the checkpoint's own
# inputs (images of its size: 197 tokens for ViT-B/16, the length the encoder's full-length
# call makes), so the contained stack leaves ``CONTAINER_RUNS`` to it (ViT-B/16: 12 CPU s)
# and keeps padding invariance, which an image has no input for.
CONTAINED_IN = {"encoder": "vit"}
CONTAINER_RUNS = frozenset({"equality.oracle", "gradients.gradients"})


def container_skip(subject: Subject, check: str, subjects: list[Subject]) -> str | None:
    """Why ``check`` is skipped on ``subject``, a real-size stack held whole by another
    subject that runs it (``CONTAINED_IN``); None when it runs."""
    outer = CONTAINED_IN.get(subject.component)
    if outer is None or check not in CONTAINER_RUNS or not applies(subject):
        return None
    holder = _same_implementation(subject, outer, subjects)
    if holder is None or not applies(holder):
        return None
    return (
        f"real-size stack: {holder.name} holds {subject.name} whole (the same layers and "
        f"attention implementation); {check} runs there, through every layer, on the "
        "checkpoint's own inputs"
    )


@dataclass
class LayerStates:
    """What the model computed on the way to its output, captured during the call (float64,
    (B, L, D) each): the input to layer 0 and every layer's output, in order.

    ``keep_rows``, set by the caller before the call, names the positions whose output the
    call needs, given the length (the judged positions); an adapter that can form the
    output head at those positions alone does so, and says which in ``logits_rows``: the
    output is then (B, len(logits_rows), V), the head's work and the output's memory cut
    by L / len(logits_rows) (GPT-2 small at 1024 tokens: 79 of the call's 250 GFLOP, and a
    412 MB float64 array)."""

    n_layers: int
    first: np.ndarray | None = None
    outputs: list[np.ndarray | None] = field(default_factory=list)
    keep_rows: Callable[[int], np.ndarray] | None = None
    logits_rows: np.ndarray | None = None

    def complete(self) -> bool:
        return (
            self.first is not None
            and len(self.outputs) == self.n_layers
            and all(o is not None and o.shape == self.first.shape for o in self.outputs)
        )
