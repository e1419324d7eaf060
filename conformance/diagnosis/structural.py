"""Structural hypotheses: an implementation that adds a step the papers do not
have, such as a LayerNorm before the first layer (CLIP's ``ln_pre``, timm's ``norm_pre``) or
inside the patch embedding (timm's ``PatchEmbed(norm_layer=...)``), left undeclared.

Each hypothesis is an ``Alternative`` (``tck.conformance.diagnosis.alternatives``): the oracle with
that one step added, by a replacement of the oracle function it comes after, in a separate
oracle passed to the comparison (``tck.reference.variants``; the real oracle is never
changed). It applies to every component whose oracle runs that function (read from the
record's oracle call), and is judged like a convention: does it reproduce the
implementation's output within the failed comparison's bound, while differing from the
spec's? The added LayerNorm has unit gain and zero bias: what an extra ``nn.LayerNorm``
holds when nothing in the canonical parameters maps onto it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tck.reference import oracle
from tck.reference.variants import oracle_variant, reaches

from .alternatives import Alternative

EXTRA_NORM_EPS = (1e-5, 1e-6)

# Where an undeclared extra LayerNorm can sit: (the oracle function it wraps, on its output or
# its input, code, plain words). Every component whose oracle runs that function can have it.
EXTRA_NORM_SITES: tuple[tuple[str, str, str, str], ...] = (
    (
        "patch_embed",
        "output",
        "vit.extra_norm_in_patch_embed",
        "normalises the patch embeddings (a LayerNorm inside the patch embedding, like timm's "
        "PatchEmbed(norm_layer=...)), which the ViT paper does not have",
    ),
    (
        "encoder",
        "input",
        "blocks.extra_norm_before_layers",
        "normalises the tokens before the first encoder layer (an extra LayerNorm, like "
        "CLIP's ln_pre or timm's norm_pre), which the Transformer and ViT papers do not have",
    ),
)


def _normalise(x: Any, eps: float) -> Any:
    return oracle.layer_norm(x, eps=eps)


def _wrapped(name: str, where: str, eps: float) -> dict[str, Callable[..., Any]]:
    """The piece ``name`` with a unit-gain LayerNorm on its output or its input."""
    original: Callable[..., Any] = getattr(oracle, name)

    def wrapper(x: Any, *args: Any, **kwargs: Any) -> Any:
        if where == "output":
            return _normalise(original(x, *args, **kwargs), eps)
        return original(_normalise(x, eps), *args, **kwargs)

    return {name: wrapper}


def _patch_embed_channels_last(images: Any, weight: Any, bias: Any, *, patch_size: int) -> Any:
    """§9.1 with each patch flattened in (y, x, c) order (einops ``(p1 p2 c)``) while the
    weight stays flattened in the conv's (c, y, x) order."""
    images = oracle._f64(images)
    b, c, h, w = images.shape
    p = patch_size
    patches = images.reshape(b, c, h // p, p, w // p, p).transpose(0, 2, 4, 3, 5, 1)
    patches = patches.reshape(b, (h // p) * (w // p), p * p * c)
    weight = oracle._f64(weight)
    return patches @ weight.reshape(weight.shape[0], -1).T + oracle._f64(bias)


def patch_order_hypotheses(component: str) -> Iterator[Alternative]:
    """A patch flattened channels-last against a weight flattened channels-first."""
    if not reaches(component, "patch_embed"):
        return
    yield Alternative(
        "vit.patch_flatten_order",
        "flattens each patch channels-last, (y, x, c) as einops' 'b c (h p1) (w p2) -> b (h w) "
        "(p1 p2 c)' does, while its projection weight is flattened channels-first, (c, y, x) as "
        "a conv's: the patch pixels meet the wrong weights (SPEC.md §9.1)",
        pieces={"patch_embed": _patch_embed_channels_last},
    )


# The image reshaped (B, C, gh, p, gw, p) has, after the batch, these axes; the spec's tokens
# are (gh, gw) and each token's vector (C, py, px), the order a conv's weight (D, C, p, p)
# flattens in. An implementation may cut its patches with the axes in another order and
# flatten its kernel in another one (a Dense kernel stored HWIO flattens (py, px, C)).
PATCH_AXES = ("C", "gh", "py", "gw", "px")
SPEC_PATCH_ORDER = (1, 3, 0, 2, 4)  # (gh, gw, C, py, px)
KERNEL_ORDERS = ((0, 1, 2), (1, 2, 0))  # the weight's (C, py, px) as (C, py, px), (py, px, C)


def _patch_embed_axes(order: tuple[int, ...], kernel: tuple[int, ...]) -> Callable[..., Any]:
    """§9.1 with the image's axes (``PATCH_AXES``) permuted to ``order`` and then read
    row-major as (N_p, C p p) tokens, against the weight flattened in ``kernel`` order."""

    def patch_embed(images: Any, weight: Any, bias: Any, *, patch_size: int) -> Any:
        images = oracle._f64(images)
        b, c, h, w = images.shape
        p = patch_size
        if h % p or w % p:
            raise ValueError("the image does not divide into patches")
        parts = images.reshape(b, c, h // p, p, w // p, p)  # (B, C, gh, py, gw, px)
        tokens = parts.transpose(0, *(a + 1 for a in order)).reshape(b, -1, c * p * p)
        weight = oracle._f64(weight)  # (D, C, py, px)
        flat = weight.transpose(0, *(a + 1 for a in kernel)).reshape(weight.shape[0], -1)
        return tokens @ flat.T + oracle._f64(bias)

    return patch_embed


def _patch_axes_code(order: tuple[int, ...], kernel: tuple[int, ...]) -> tuple[str, str]:
    """The class of a patch extraction: which axes make the tokens and how each is read."""
    grid, content = order[:2], order[2:]
    read = ", ".join(PATCH_AXES[a] for a in order)
    flattened = ", ".join(("C", "py", "px")[k] for k in kernel)
    words = (
        f"cuts its patches with the image's axes in the order ({read}) of (C, gh, py, gw, px) "
        f"and a kernel flattened ({flattened})"
    )
    if set(grid) != {1, 3}:
        return "vit.patch_extraction_wrong", (
            f"{words}: the tokens are not the p x p squares of the patch grid but strips of "
            "rows or columns across it (a reshape without the transpose that brings the grid "
            "axes together; SPEC.md §9.1)"
        )
    if grid != (1, 3):
        return "vit.patch_order", f"{words}: the grid is read column-major (SPEC.md §9.1)"
    as_kernel = tuple({0: 0, 2: 1, 4: 2}[a] for a in content)  # the pixels in kernel terms
    if as_kernel.index(0) != kernel.index(0):
        return "vit.patch_flatten_order", (
            f"{words}: each patch's pixels meet the weights of another channel (SPEC.md §9.1)"
        )
    return "vit.patch_kernel_transposed", (
        f"{words}: each patch's rows meet the kernel's columns (SPEC.md §9.1)"
    )


def patch_axes_hypotheses(component: str) -> Iterator[Alternative]:
    """Every way to cut the patches by permuting the image's axes, against either kernel
    flattening, in every component whose oracle runs the patch embedding: the spec's grid
    order with another pixel order (a flatten order, a transposed kernel), the grid
    column-major, and tokens that are no squares of the grid at all (a reshape without the
    transpose). The spec's own cut and its equals never fit (``alternatives.fits``)."""
    if not reaches(component, "patch_embed"):
        return
    for kernel in KERNEL_ORDERS:
        for order in itertools.permutations(range(5)):
            code, message = _patch_axes_code(order, kernel)
            yield Alternative(
                code,
                f"the output is the spec's if the model {message}",
                pieces={"patch_embed": _patch_embed_axes(order, kernel)},
            )


_IMAGE_AXES = {1: "C", 2: "H", 3: "W"}


def _image_read_as_nchw(order: tuple[int, int, int]) -> Callable[..., Any]:
    """§9.1's patch embedding of an image laid out (B, *order) in memory and reshaped, not
    permuted, to (B, C, H, W)."""
    original = oracle.patch_embed

    def patch_embed(images, weight, bias, *, patch_size):
        images = np.asarray(images)
        scrambled = images.transpose(0, *order).reshape(images.shape)
        return original(scrambled, weight, bias, patch_size=patch_size)

    return patch_embed


def _nchw_reshaped_to(order: tuple[int, int, int]) -> Callable[..., Any]:
    """§9.1's patch embedding of a (B, C, H, W) image reshaped, not permuted, to (B, *order)
    and then handled, correctly, as laid out in that order."""
    original = oracle.patch_embed

    def patch_embed(images, weight, bias, *, patch_size):
        images = np.asarray(images)
        taken = images.reshape(images.shape[0], *(images.shape[a] for a in order))
        back = np.argsort((0, *order))  # the layout it is then read in, back to (B, C, H, W)
        return original(taken.transpose(*back), weight, bias, patch_size=patch_size)

    return patch_embed


def image_layout_hypotheses(component: str) -> Iterator[Alternative]:
    """The image moved between axis orders by a reshape where a permute belongs, both ways:
    a channels-last buffer (B, H, W, C) read as (B, C, H, W), and a (B, C, H, W) image
    reshaped to (B, H, W, C) for a channels-last pipeline (a JAX or Keras port), with the other
    orders that move the channels. (H and W swapped alone is a transposed image: the patch
    cuts of ``patch_axes_hypotheses``.)"""
    if not reaches(component, "patch_embed"):
        return
    for order in itertools.permutations((1, 2, 3)):
        if order[0] == 1:  # the identity, or H and W swapped behind the channels
            continue
        laid_out = "(B, " + ", ".join(_IMAGE_AXES[a] for a in order) + ")"
        yield Alternative(
            "vit.image_layout_wrong",
            f"the output is the spec's if the model reads the image from a buffer laid out "
            f"{laid_out} by a reshape to (B, C, H, W) where a permute belongs (e.g. "
            "images.reshape(B, C, H, W) of a channels-last image for permute(0, 3, 1, 2)): "
            "pixels and channels interleave (SPEC.md §9.1)",
            pieces={"patch_embed": _image_read_as_nchw(order)},
        )
        yield Alternative(
            "vit.image_layout_wrong",
            f"the output is the spec's if the model brings the (B, C, H, W) image to "
            f"{laid_out} by a reshape where a permute belongs (e.g. images.reshape(B, H, W, C) "
            "for permute(0, 2, 3, 1)) and then reads it in that layout: pixels and channels "
            "interleave (SPEC.md §9.1)",
            pieces={"patch_embed": _nchw_reshaped_to(order)},
        )


def _vit_mean_with_class_token(images: Any, params: Any, config: Any, *, conventions: Any) -> Any:
    """§9.5 pooled as the mean over every token, the class token included."""
    tokens = oracle.vit_tokens(images, params, config, conventions)
    return oracle.linear(tokens.mean(axis=1), params, "head.")


def _vit_mean_before_final_norm(first: int) -> Callable[..., Any]:
    """§9.5 pooled as the mean of the tokens from ``first`` on (0: the class token included)
    taken before the encoder's final norm, which then normalises the mean (a head of
    ``LayerNorm`` and ``Linear`` applied to the pooled token)."""

    def vit(images: Any, params: Any, config: Any, *, conventions: Any) -> Any:
        bare = dataclasses.replace(conventions, final_norm="never")
        pooled = oracle.vit_tokens(images, params, config, bare)[:, first:].mean(axis=1)
        pooled = oracle._final_norm(pooled, oracle.subparams(params, "encoder."), conventions)
        return oracle.linear(pooled, params, "head.")

    return vit


def pooling_hypotheses(component: str) -> Iterator[Alternative]:
    """A mean pool that counts the class token among the patch tokens; a mean pool taken
    before the final norm (where the norm sits in the head: equal to the spec's for the class
    token, not for a mean)."""
    if not reaches(component, "vit"):
        return
    yield Alternative(
        "vit.pooling_mean_with_cls",
        "pools the mean of every token, the class token included (x.mean(dim=1) over all "
        "N_p + 1 tokens), where the spec pools the class token (or, declared, the mean of the "
        "patch tokens only; SPEC.md §9.5)",
        pieces={"vit": _vit_mean_with_class_token},
    )
    for first, code, tokens in (
        (0, "vit.pooling_mean_with_cls", "every token, the class token included"),
        (1, "vit.pooling_mean", "the patch tokens"),
    ):
        yield Alternative(
            code,
            f"pools the mean of {tokens} before the encoder's final norm (the norm then "
            "applied to the mean, as a head of LayerNorm and Linear does), where the spec "
            "pools the class token after the norm (SPEC.md §9.5, §7.3)",
            pieces={"vit": _vit_mean_before_final_norm(first)},
        )


def _encoder_across_batch(x: Any, *args: Any, **kwargs: Any) -> Any:
    """§7.3's encoder given (B, L, D) tokens as a sequence-first module reads them: (L, B, D)
    read as (B, L, D), so each position's attention runs over the batch."""
    return np.swapaxes(oracle.encoder(np.swapaxes(x, 0, 1), *args, **kwargs), 0, 1)


def _vit_batch_as_sequence(first_image: bool) -> Callable[..., Any]:
    """§9 with the tokens handed to a sequence-first encoder batch-first (attention across
    the batch at each position); pooled as the spec pools, or (``first_image``) as
    sequence-first code pools, ``x[0]``: every token of the first image."""

    def vit(images: Any, params: Any, config: Any, *, conventions: Any) -> Any:
        variant = oracle_variant({"encoder": _encoder_across_batch})
        tokens = variant.vit_tokens(images, params, config, conventions)  # (B, N + 1, D)
        pooled = tokens[0] if first_image else tokens[:, 0]
        return oracle.linear(pooled, params, "head.")

    return vit


def batch_as_sequence_hypotheses(component: str) -> Iterator[Alternative]:
    """A ViT whose batch-first tokens reach sequence-first encoder blocks (the transpose to
    (L, B, D) dropped, ``nn.TransformerEncoder`` or ``nn.MultiheadAttention`` without
    ``batch_first=True``): the batch is attended as the sequence; pooled as the spec pools,
    or by the sequence-first ``x[0]``, which then gives every token of the first image (an
    output of another shape, explained by ``explain_shape``)."""
    if not reaches(component, "vit"):
        return
    for first_image, pooled in (
        (False, "the class token of each image"),
        (True, "x[0] of the sequence-first layout: every token of the first image"),
    ):
        yield Alternative(
            "batch.rows_interact",
            "the output is the spec's with the (B, N + 1, D) tokens handed to sequence-first "
            "encoder blocks as they are (the transpose to (N + 1, B, D) dropped): each "
            f"position attends over the batch instead of the sequence, and the pooled token "
            f"is {pooled} (SPEC.md §10.2, §9.4, §9.5)",
            pieces={"vit": _vit_batch_as_sequence(first_image)},
        )


def extra_norm_hypotheses(component: str) -> Iterator[Alternative]:
    """An extra LayerNorm at every site ``component``'s oracle runs, at each usual eps; the
    message says that the adapter does not declare it."""
    for name, where, code, words in EXTRA_NORM_SITES:
        if not reaches(component, name):
            continue
        for eps in EXTRA_NORM_EPS:
            yield Alternative(
                code,
                f"{words} (eps {eps:g}, unit gain, zero bias), and its adapter does not declare it",
                pieces=_wrapped(name, where, eps),
            )
