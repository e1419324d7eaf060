"""A functional numpy Transformer encoder (blind benchmark implementation).

No classes for the model: weights live in one flat dict keyed the implementation's own way
(``"attn/w_q"`` stored ``[in, out]``, ``"ln1/gamma"``, ``"mlp/w_in"``), and every piece is a
pure function of (weights, inputs). Post-LN encoder layer of "Attention Is All You Need"
(ReLU FFN, LayerNorm eps 1e-5 inside the square root, biased variance). Masks arrive as
boolean keep-masks and are turned into an additive bias; a query with no key gets zeros.

The adapter at the bottom (``adapter``) implements the ``Adapter`` contract directly and
exposes attention, mha, layer_norm, ffn, encoder_layer and encoder. This file is correct;
tests/blind/bugs.json holds one-line changes to it.
"""

# bugs.json names lines of this file verbatim: the formatter must not rewrite them.
# fmt: off
# ruff: noqa: E501
from __future__ import annotations

from typing import Any

import numpy as np

from tck.adapters.base import Adapter, Subject, Unsupported
from tck.reference import Config

NEG_INF = -np.inf


# --------------------------------------------------------------------------- the model


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    peak = np.max(scores, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    e = np.exp(scores - peak)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def keep_to_bias(keep: np.ndarray) -> np.ndarray:
    """True (may attend) -> 0, False -> -inf, added to the scores."""
    return np.where(keep, 0.0, NEG_INF)


def causal_keep(n_q: int, n_k: int) -> np.ndarray:
    """Query i sees keys 0 .. i (aligned top-left)."""
    return np.tril(np.ones((n_q, n_k), dtype=bool))


def combine_masks(n_q, n_k, batch, key_padding=None, attn_mask=None, causal=False):
    """One keep-mask [B, 1, n_q, n_k] from the optional pieces."""
    keep = np.ones((batch, 1, n_q, n_k), dtype=bool)
    if key_padding is not None:
        keep = keep & key_padding[:, None, None, :]
    if attn_mask is not None:
        keep = keep & attn_mask[None, None, :, :]
    if causal:
        keep = keep & causal_keep(n_q, n_k)[None, None]
    return keep


def sdpa(q, k, v, keep=None):
    """q [B, H, Lq, d], k [B, H, Lk, d], v [B, H, Lk, dv]; keep broadcastable to the scores."""
    d_k = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_k)
    if keep is not None:
        scores = scores + keep_to_bias(keep)
    weights = softmax(scores, axis=-1)
    return weights @ v


def split_heads(x, n_heads):
    """[B, L, H * d] -> [B, H, L, d]."""
    b, length, width = x.shape
    return x.reshape(b, length, n_heads, width // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x):
    """[B, H, L, d] -> [B, L, H * d]."""
    b, h, length, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, length, h * d)


def linear(x, w, b):
    """w stored [in, out]."""
    return x @ w + b


def multi_head_attention(w, query, key, value, n_heads, keep=None, prefix="attn/"):
    q = split_heads(linear(query, w[prefix + "w_q"], w[prefix + "b_q"]), n_heads)
    k = split_heads(linear(key, w[prefix + "w_k"], w[prefix + "b_k"]), n_heads)
    v = split_heads(linear(value, w[prefix + "w_v"], w[prefix + "b_v"]), n_heads)
    heads = sdpa(q, k, v, keep)
    return linear(merge_heads(heads), w[prefix + "w_o"], w[prefix + "b_o"])


def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def relu(x):
    return np.maximum(x, 0.0)


def feed_forward(w, x, prefix="mlp/"):
    hidden = relu(linear(x, w[prefix + "w_in"], w[prefix + "b_in"]))
    return linear(hidden, w[prefix + "w_out"], w[prefix + "b_out"])


def encoder_layer(w, x, n_heads, keep=None, prefix=""):
    """Post-LN: x = LN(x + MHA(x)); x = LN(x + FFN(x))."""
    attended = multi_head_attention(w, x, x, x, n_heads, keep, prefix=prefix + "attn/")
    x = layer_norm(x + attended, w[prefix + "ln1/gamma"], w[prefix + "ln1/beta"])
    x = layer_norm(x + feed_forward(w, x, prefix=prefix + "mlp/"), w[prefix + "ln2/gamma"], w[prefix + "ln2/beta"])
    return x


def encoder(w, x, n_heads, n_layers, keep=None):
    for i in range(n_layers):
        x = encoder_layer(w, x, n_heads, keep, prefix=f"layer{i}/")
    return x


# --------------------------------------------------------------------------- weights


def init_attention(rng, d, prefix):
    w = {}
    for part in "qkvo":
        w[f"{prefix}w_{part}"] = rng.normal(0, d**-0.5, (d, d))
        w[f"{prefix}b_{part}"] = rng.normal(0, 0.1, d)
    return w


def init_norm(rng, d, prefix):
    return {prefix + "gamma": 1.0 + rng.normal(0, 0.1, d), prefix + "beta": rng.normal(0, 0.1, d)}


def init_mlp(rng, d, d_ff, prefix):
    return {
        prefix + "w_in": rng.normal(0, d**-0.5, (d, d_ff)),
        prefix + "b_in": rng.normal(0, 0.1, d_ff),
        prefix + "w_out": rng.normal(0, d_ff**-0.5, (d_ff, d)),
        prefix + "b_out": rng.normal(0, 0.1, d),
    }


def init_layer(rng, c: Config, prefix=""):
    return {
        **init_attention(rng, c.d_model, prefix + "attn/"),
        **init_norm(rng, c.d_model, prefix + "ln1/"),
        **init_mlp(rng, c.d_model, c.d_ff, prefix + "mlp/"),
        **init_norm(rng, c.d_model, prefix + "ln2/"),
    }


# Canonical name -> (our name, transposed): linear weights are stored [in, out].
def _attention_names(ours: str, theirs: str) -> dict[str, tuple[str, bool]]:
    names = {}
    for part in "qkvo":
        names[f"{ours}{part}.weight"] = (f"{theirs}w_{part}", True)
        names[f"{ours}{part}.bias"] = (f"{theirs}b_{part}", False)
    return names


def _norm_names(ours: str, theirs: str) -> dict[str, tuple[str, bool]]:
    return {f"{ours}weight": (f"{theirs}gamma", False), f"{ours}bias": (f"{theirs}beta", False)}


def _mlp_names(ours: str, theirs: str) -> dict[str, tuple[str, bool]]:
    return {
        f"{ours}fc1.weight": (f"{theirs}w_in", True),
        f"{ours}fc1.bias": (f"{theirs}b_in", False),
        f"{ours}fc2.weight": (f"{theirs}w_out", True),
        f"{ours}fc2.bias": (f"{theirs}b_out", False),
    }


def _layer_names(ours: str, theirs: str) -> dict[str, tuple[str, bool]]:
    return {
        **_attention_names(f"{ours}self_attn.", f"{theirs}attn/"),
        **_norm_names(f"{ours}norm1.", f"{theirs}ln1/"),
        **_mlp_names(f"{ours}ffn.", f"{theirs}mlp/"),
        **_norm_names(f"{ours}norm2.", f"{theirs}ln2/"),
    }


# --------------------------------------------------------------------------- the adapter

COMPONENTS = ("attention", "mha", "layer_norm", "ffn", "encoder_layer", "encoder")


class FunctionalAdapter(Adapter):
    """The numpy model behind the Adapter contract: a handle is (component, config, weights)."""

    name = "blind.np_functional"

    def subjects(self) -> list[Subject]:
        return [Subject(name=c, component=c) for c in COMPONENTS]

    def build(self, subject: Subject, config: Config, *, seed: int) -> dict[str, Any]:
        c = subject.component
        sized = c != "attention"  # the attention core has no weights: any head width
        if sized and (config.head_dim_k * config.n_heads != config.d_model or config.head_dim_v != config.head_dim_k):
            raise Unsupported("heads are d_model / n_heads wide for q, k and v here")
        if sized and not (config.has_attention_bias and config.has_ffn_bias and config.norm_bias):
            raise Unsupported("every linear layer and norm here carries a bias")
        rng = np.random.default_rng(seed)
        if c == "mha":
            weights = init_attention(rng, config.d_model, "attn/")
        elif c == "layer_norm":
            weights = init_norm(rng, config.d_model, "")
        elif c == "ffn":
            weights = init_mlp(rng, config.d_model, config.d_ff, "mlp/")
        elif c == "encoder_layer":
            weights = init_layer(rng, config)
        elif c == "encoder":
            weights = {}
            for i in range(config.n_layers):
                weights.update(init_layer(rng, config, f"layer{i}/"))
        else:
            weights = {}
        return {"component": c, "config": config, "weights": weights}

    def _names(self, handle) -> dict[str, tuple[str, bool]]:
        c, config = handle["component"], handle["config"]
        if c == "mha":
            return _attention_names("", "attn/")
        if c == "layer_norm":
            return _norm_names("", "")
        if c == "ffn":
            return _mlp_names("", "mlp/")
        if c == "encoder_layer":
            return _layer_names("", "")
        if c == "encoder":
            names = {}
            for i in range(config.n_layers):
                names.update(_layer_names(f"layers.{i}.", f"layer{i}/"))
            return names
        return {}

    def params(self, handle) -> dict[str, np.ndarray]:
        w = handle["weights"]
        return {k: (w[n].T if t else w[n]).copy() for k, (n, t) in self._names(handle).items()}

    def load(self, handle, params) -> None:
        names = self._names(handle)
        if set(params) != set(names):
            raise ValueError(f"expected parameters {sorted(names)}, got {sorted(params)}")
        for k, (n, t) in names.items():
            value = np.asarray(params[k], dtype=np.float64)
            if (value.T if t else value).shape != handle["weights"][n].shape:
                raise ValueError(f"{k}: shape {value.shape} does not fit {n}")
            handle["weights"][n] = (value.T if t else value).copy()

    def run(self, handle, inputs) -> np.ndarray:
        c, config, w = handle["component"], handle["config"], handle["weights"]
        causal = bool(np.asarray(inputs["causal"])) if "causal" in inputs else False
        if c == "attention":
            q, k, v = inputs["q"], inputs["k"], inputs["v"]
            keep = inputs.get("keep_mask")
            if causal:
                tri = causal_keep(q.shape[-2], k.shape[-2])
                keep = tri if keep is None else keep & tri
            return sdpa(q, k, v, keep)
        if c == "layer_norm":
            return layer_norm(inputs["x"], w["gamma"], w["beta"])
        if c == "ffn":
            return feed_forward(w, inputs["x"])
        if c == "mha":
            query, key = inputs["query"], inputs["key"]
            keep = combine_masks(
                query.shape[1], key.shape[1], query.shape[0],
                inputs.get("key_padding"), inputs.get("attn_mask"), causal,
            )
            return multi_head_attention(w, query, key, inputs["value"], config.n_heads, keep)
        x = inputs["x"]
        keep = combine_masks(
            x.shape[1], x.shape[1], x.shape[0], inputs.get("key_padding"), inputs.get("attn_mask"), causal
        )
        if c == "encoder_layer":
            return encoder_layer(w, x, config.n_heads, keep)
        return encoder(w, x, config.n_heads, config.n_layers, keep)


adapter = FunctionalAdapter()
