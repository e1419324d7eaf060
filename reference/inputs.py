"""Canonical inputs for each component (tck.adapters.INPUTS), built where bugs hide.

Every builder is deterministic in its numpy Generator. Defaults reach the usual hiding
places: batch > 1 with a different length in each row, Lq != Lk for attention, lengths
that are not multiples of 8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tck.reference import Config

Inputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class Shape:
    """Sizes of one call. ``lengths`` are the real (unpadded) lengths of the key/source rows."""

    batch: int = 2
    lq: int = 5  # query / target / sequence length
    lk: int = 7  # key / source length (self-attention components use lq)
    lengths: tuple[int, ...] | None = None  # per-row kept keys; default: lk, then shorter
    masked: bool = True  # pass a key-padding mask
    causal: bool = False
    magnitude: float = 1.0  # scale of float inputs (large: softmax overflow)

    def key_lengths(self, lk: int) -> np.ndarray:
        if self.lengths is not None:
            if len(self.lengths) != self.batch:
                raise ValueError(f"{len(self.lengths)} lengths for batch {self.batch}")
            return np.asarray(self.lengths)
        # first row full, later rows shorter, never empty
        return np.array([max(1, lk - 2 * i) for i in range(self.batch)])


DEFAULT_SHAPE = Shape()


def padding(lengths: np.ndarray, length: int) -> np.ndarray:
    """(B, length) keep-mask: True for the first lengths[b] positions."""
    return np.arange(length)[None, :] < np.asarray(lengths)[:, None]


def make_inputs(
    component: str, config: Config, rng: np.random.Generator, shape: Shape = DEFAULT_SHAPE
) -> Inputs:
    c, s = config, shape
    b, m = s.batch, s.magnitude

    def normal(*dims: int) -> np.ndarray:
        return rng.standard_normal(dims) * m

    def self_masks(length: int) -> Inputs:
        out: Inputs = {}
        if s.masked:
            out["key_padding"] = padding(s.key_lengths(length), length)
        if s.causal:
            out["causal"] = np.array(True)
        return out

    if component == "embedding":
        return {"ids": rng.integers(0, c.vocab_size, size=(b, s.lq))}
    if component == "sinusoidal_pe":
        return {"positions": np.arange(s.lq)}
    if component == "rope":
        return {"x": normal(b, c.n_heads, s.lq, c.head_dim_k), "positions": np.arange(s.lq)}
    if component == "attention":
        dk, dv, h = c.head_dim_k, c.head_dim_v, c.n_heads
        out = {
            "q": normal(b, h, s.lq, dk),
            "k": normal(b, h, s.lk, dk),
            "v": normal(b, h, s.lk, dv),
        }
        if s.masked:
            out["keep_mask"] = padding(s.key_lengths(s.lk), s.lk)[:, None, None, :]
        if s.causal:
            out["causal"] = np.array(True)
        return out
    if component == "mha":
        query, key = normal(b, s.lq, c.d_model), normal(b, s.lk, c.d_model)
        out = {"query": query, "key": key, "value": normal(b, s.lk, c.d_model)}
        if s.masked:
            out["key_padding"] = padding(s.key_lengths(s.lk), s.lk)
        if s.causal:
            out["causal"] = np.array(True)
        return out
    if component in ("layer_norm", "rms_norm", "ffn"):
        return {"x": normal(b, s.lq, c.d_model)}
    if component in ("encoder_layer", "encoder"):
        return {"x": normal(b, s.lq, c.d_model), **self_masks(s.lq)}
    if component in ("decoder_layer", "decoder"):
        out = {"x": normal(b, s.lq, c.d_model), "memory": normal(b, s.lk, c.d_model)}
        if s.masked:
            out["key_padding"] = padding(np.array([max(1, s.lq - i) for i in range(b)]), s.lq)
            out["memory_key_padding"] = padding(s.key_lengths(s.lk), s.lk)
        out["causal"] = np.array(True)
        return out
    if component == "seq2seq":
        pad = c.padding_idx
        low = 0 if pad is None else 1 if pad == 0 else 0

        def ids(length: int, lengths: np.ndarray) -> np.ndarray:
            tokens = rng.integers(low, c.vocab_size, size=(b, length))
            if pad is not None:
                tokens = np.where(tokens == pad, (pad + 1) % c.vocab_size, tokens)
                if s.masked:
                    tokens = np.where(padding(lengths, length), tokens, pad)
            return tokens

        tgt_lengths = np.array([max(1, s.lq - i) for i in range(b)])
        return {"src_ids": ids(s.lk, s.key_lengths(s.lk)), "tgt_ids": ids(s.lq, tgt_lengths)}
    # §11 decoder-only: always causal; key padding (an optional input a minimal GPT does not
    # take) only when a shape asks for row lengths, so that every check runs unpadded on them
    padded = s.masked and s.lengths is not None
    if component in ("causal_self_attention", "decoder_block", "gated_ffn"):
        out = {"x": normal(b, s.lq, c.d_model)}
        if padded and component != "gated_ffn":
            out["key_padding"] = padding(s.key_lengths(s.lq), s.lq)
        return out
    if component == "causal_lm":
        out = {"ids": rng.integers(0, c.vocab_size, size=(b, s.lq))}
        if padded:
            out["key_padding"] = padding(s.key_lengths(s.lq), s.lq)
        return out
    if component in ("patch_embed", "vit"):
        return {"images": normal(b, c.channels, c.image_size, c.image_size)}
    raise ValueError(f"no input builder for component {component!r}")
