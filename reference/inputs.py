"""Canonical inputs for each component (tck.adapters.INPUTS), built where bugs hide.

Every builder is deterministic in its numpy Generator. Defaults reach the usual hiding
places: batch > 1 with a different length in each row, Lq != Lk for attention, lengths
that are not multiples of 8.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tck.reference import Config, record

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


def _lengths(rule: str, shape: Shape, length: int) -> np.ndarray:
    """A padding mask's row lengths over ``length`` (tck.reference.components.LENGTHS)."""
    if rule == "target":  # first row full, each later one a position shorter
        return np.array([max(1, length - i) for i in range(shape.batch)])
    return shape.key_lengths(length)


def _made(when: str, shape: Shape) -> bool:
    """Whether the builder makes an input (tck.reference.components.WHEN) for ``shape``."""
    return {
        "always": True,
        "masked": shape.masked,
        "padded": shape.masked and shape.lengths is not None,
        "causal": shape.causal,
        "never": False,
    }[when]


def make_inputs(
    component: str, config: Config, rng: np.random.Generator, shape: Shape = DEFAULT_SHAPE
) -> Inputs:
    """The inputs of one call of ``component``, as its record describes them
    (``record(component).inputs``: each input's kind, dims and when it is made), drawn from
    ``rng`` in the record's order."""
    c, s = config, shape
    sizes = {
        "B": s.batch,
        "H": c.n_heads,
        "Lq": s.lq,
        "Lk": s.lk,
        "D": c.d_model,
        "dk": c.head_dim_k,
        "dv": c.head_dim_v,
        "C": c.channels,
        "S": c.image_size,
    }
    out: Inputs = {}
    for spec in record(component).inputs:
        if not _made(spec.when, s):
            continue
        dims = tuple(sizes[d] for d in spec.dims)
        if spec.kind == "normal":
            out[spec.name] = rng.standard_normal(dims) * s.magnitude
        elif spec.kind == "ids":
            out[spec.name] = rng.integers(0, c.vocab_size, size=dims)
        elif spec.kind == "tokens":
            out[spec.name] = _tokens(c, s, rng, dims, _lengths(spec.lengths, s, dims[1]))
        elif spec.kind == "positions":
            out[spec.name] = np.arange(dims[0])
        elif spec.kind == "key_padding":
            out[spec.name] = padding(_lengths(spec.lengths, s, dims[1]), dims[1])
        elif spec.kind == "keep_mask":  # [B, 1, 1, Lk]: the attention core's form
            out[spec.name] = padding(_lengths(spec.lengths, s, dims[1]), dims[1])[:, None, None, :]
        elif spec.kind == "causal":
            out[spec.name] = np.array(True)
        else:
            raise ValueError(
                f"{component}: the input builder makes no {spec.kind!r} input "
                f"({spec.name!r}); give it when='never'"
            )
    return out


def _tokens(
    c: Config, s: Shape, rng: np.random.Generator, dims: tuple[int, ...], lengths: np.ndarray
) -> np.ndarray:
    """Token ids that avoid ``padding_idx``, and hold it past each row's length when the
    shape is masked (§1.3, §8.1)."""
    pad = c.padding_idx
    low = 0 if pad is None else 1 if pad == 0 else 0
    tokens = rng.integers(low, c.vocab_size, size=dims)
    if pad is not None:
        tokens = np.where(tokens == pad, (pad + 1) % c.vocab_size, tokens)
        if s.masked:
            tokens = np.where(padding(lengths, dims[1]), tokens, pad)
    return tokens
