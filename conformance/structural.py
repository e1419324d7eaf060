"""Structural hypotheses (issue 19): an implementation that adds a step the papers do not
have, such as a LayerNorm before the first layer (CLIP's ``ln_pre``, timm's ``norm_pre``) or
inside the patch embedding (timm's ``PatchEmbed(norm_layer=...)``), left undeclared.

Each hypothesis recomputes the oracle with that one step added, by wrapping the oracle
function it comes after (``tck.reference.oracle`` calls its pieces by module-global name),
and is judged like a convention: does it reproduce the implementation's output within the
failed comparison's bound? The added LayerNorm has unit gain and zero bias: what an extra
``nn.LayerNorm`` holds when nothing in the canonical parameters maps onto it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from tck.reference import oracle

EXTRA_NORM_EPS = (1e-5, 1e-6)

# component -> (oracle function to wrap, where, code, plain words)
EXTRA_NORMS: dict[str, tuple[tuple[str, str, str, str], ...]] = {
    "patch_embed": (
        (
            "patch_embed",
            "output",
            "vit.extra_norm_in_patch_embed",
            "normalises the patch embeddings (a LayerNorm inside the patch embedding), which "
            "the ViT paper does not have",
        ),
    ),
    "vit": (
        (
            "patch_embed",
            "output",
            "vit.extra_norm_in_patch_embed",
            "normalises the patch embeddings (a LayerNorm inside the patch embedding), which "
            "the ViT paper does not have",
        ),
        (
            "encoder",
            "input",
            "blocks.extra_norm_before_layers",
            "normalises the tokens before the first encoder layer (an extra LayerNorm, like "
            "CLIP's ln_pre), which the ViT paper does not have",
        ),
    ),
    "encoder": (
        (
            "encoder_layer",
            "first_input",
            "blocks.extra_norm_before_layers",
            "normalises its input before the first layer (an extra LayerNorm), which the "
            "Transformer paper does not have",
        ),
    ),
    "seq2seq": (
        (
            "encoder",
            "input",
            "blocks.extra_norm_before_layers",
            "normalises the embedded source before the first encoder layer (an extra "
            "LayerNorm), which the Transformer paper does not have",
        ),
    ),
}


def _normalise(x: Any, eps: float) -> Any:
    return oracle.layer_norm(x, eps=eps)


@contextlib.contextmanager
def _wrapped(name: str, where: str, eps: float) -> Iterator[None]:
    original: Callable[..., Any] = getattr(oracle, name)
    first = [True]

    def wrapper(x: Any, *args: Any, **kwargs: Any) -> Any:
        if where == "output":
            return _normalise(original(x, *args, **kwargs), eps)
        if where == "first_input":
            if first[0]:
                first[0] = False
                x = _normalise(x, eps)
            return original(x, *args, **kwargs)
        return original(_normalise(x, eps), *args, **kwargs)

    setattr(oracle, name, wrapper)
    try:
        yield
    finally:
        setattr(oracle, name, original)


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


def patch_order_hypotheses(
    component: str, compute: Callable[[], Any]
) -> Iterator[tuple[str, str, Any]]:
    """A patch flattened channels-last against a weight flattened channels-first."""
    if component not in ("patch_embed", "vit"):
        return
    original = oracle.patch_embed
    oracle.patch_embed = _patch_embed_channels_last
    try:
        gold = compute()
    except (ValueError, KeyError):
        return
    finally:
        oracle.patch_embed = original
    yield (
        "vit.patch_flatten_order",
        "flattens each patch channels-last, (y, x, c) as einops' 'b c (h p1) (w p2) -> b (h w) "
        "(p1 p2 c)' does, while its projection weight is flattened channels-first, (c, y, x) as "
        "a conv's: the patch pixels meet the wrong weights (SPEC.md §9.1)",
        gold,
    )


def _vit_mean_with_class_token(images: Any, params: Any, config: Any, *, conventions: Any) -> Any:
    """§9.5 pooled as the mean over every token, the class token included."""
    tokens = oracle.vit_tokens(images, params, config, conventions)
    return oracle.linear(tokens.mean(axis=1), params, "head.")


def pooling_hypotheses(
    component: str, compute: Callable[[], Any]
) -> Iterator[tuple[str, str, Any]]:
    """A mean pool that counts the class token among the patch tokens."""
    if component != "vit":
        return
    original = oracle.vit
    oracle.vit = _vit_mean_with_class_token
    try:
        gold = compute()
    except (ValueError, KeyError):
        return
    finally:
        oracle.vit = original
    yield (
        "vit.pooling_mean_with_cls",
        "pools the mean of every token, the class token included (x.mean(dim=1) over all "
        "N_p + 1 tokens), where the spec pools the class token (or, declared, the mean of the "
        "patch tokens only; SPEC.md §9.5)",
        gold,
    )


def extra_norm_hypotheses(
    component: str, compute: Callable[[], Any]
) -> Iterator[tuple[str, str, Any]]:
    """(code, message, the oracle's output with the extra norm) per hypothesis for
    ``component``; ``compute`` evaluates the oracle as the failed comparison did."""
    for name, where, code, words in EXTRA_NORMS.get(component, ()):
        for eps in EXTRA_NORM_EPS:
            with _wrapped(name, where, eps):
                try:
                    gold = compute()
                except (ValueError, KeyError):
                    continue
            yield code, f"{words} (eps {eps:g}, unit gain, zero bias)", gold
