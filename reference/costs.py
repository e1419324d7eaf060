"""Analytic FLOPs per component (SPEC.md §10.4). A multiply-add counts as 2 FLOPs.

Only matrix products are counted: softmax, norms, activations and additions are
lower-order terms (O(L*D) or O(Lq*Lk) against O(L*D^2) and O(Lq*Lk*d)). Parameter counts
live in ``params.param_count`` (§10.3).
"""

from __future__ import annotations

from .conventions import Config, Conventions

# Backward of a matmul costs two matmuls of the same size (grad of both operands); the
# attention backward also recomputes scores in flash-style kernels, hence the usual 2.5x.
BACKWARD_FACTOR = 2.5


def linear_flops(batch: int, length: int, n_in: int, n_out: int) -> int:
    """[B, L, in] @ [in, out]: 2 * B * L * in * out."""
    return 2 * batch * length * n_in * n_out


def attention_flops(
    batch: int,
    heads: int,
    lq: int,
    lk: int,
    d_k: int,
    d_v: int | None = None,
    *,
    causal: bool = False,
) -> float:
    """QK^T (2*B*H*Lq*Lk*d_k) plus PV (2*B*H*Lq*Lk*d_v); about half of that when causal.

    With Lq = Lk = N and d_k = d_v = D this is the familiar 4*B*H*N^2*D.
    """
    d_v = d_k if d_v is None else d_v
    total = 2 * batch * heads * lq * lk * (d_k + d_v)
    return total / 2 if causal else total


def mha_flops(
    config: Config, batch: int, lq: int, lk: int | None = None, *, causal: bool = False
) -> float:
    """Projections of q (Lq rows), k and v (Lk rows), the attention core, the output projection."""
    lk = lq if lk is None else lk
    c = config
    hk, hv = c.n_heads * c.head_dim_k, c.n_heads * c.head_dim_v
    return (
        linear_flops(batch, lq, c.d_model, hk)
        + linear_flops(batch, lk, c.d_model, hk)
        + linear_flops(batch, lk, c.d_model, hv)
        + attention_flops(batch, c.n_heads, lq, lk, c.head_dim_k, c.head_dim_v, causal=causal)
        + linear_flops(batch, lq, hv, c.d_model)
    )


def ffn_flops(config: Config, batch: int, length: int) -> int:
    return linear_flops(batch, length, config.d_model, config.d_ff) + linear_flops(
        batch, length, config.d_ff, config.d_model
    )


def causal_self_attention_flops(config: Config, batch: int, length: int) -> float:
    """§11.1-11.2: q from d_model to H*d_k, k and v to the n_kv_heads heads only (grouped
    queries), the causal core, the output projection."""
    c = config
    return (
        linear_flops(batch, length, c.d_model, c.n_heads * c.head_dim_k)
        + linear_flops(batch, length, c.d_model, c.kv_heads * (c.head_dim_k + c.head_dim_v))
        + attention_flops(batch, c.n_heads, length, length, c.head_dim_k, c.head_dim_v, causal=True)
        + linear_flops(batch, length, c.n_heads * c.head_dim_v, c.d_model)
    )


def gated_ffn_flops(config: Config, batch: int, length: int) -> int:
    """§11.3: the gate and up projections (d_model to d_ff each), then down."""
    return 2 * linear_flops(batch, length, config.d_model, config.d_ff) + linear_flops(
        batch, length, config.d_ff, config.d_model
    )


def decoder_block_flops(config: Config, batch: int, length: int, conventions: Conventions) -> float:
    """§11.4: causal self-attention, then the gated or the plain FFN (``ffn_kind``)."""
    ffn = gated_ffn_flops if conventions.ffn_kind == "gated" else ffn_flops
    return causal_self_attention_flops(config, batch, length) + ffn(config, batch, length)


def flops(
    component: str,
    config: Config,
    *,
    batch: int,
    seq_len: int,
    tgt_len: int | None = None,
    causal: bool = False,
    backward: bool = False,
    conventions: Conventions | None = None,
) -> float:
    """Forward FLOPs of one call of ``component`` (times 1 + 2.5 with ``backward``).

    ``seq_len`` is the (source) sequence length; ``tgt_len`` the target length for the
    decoder and seq2seq (default ``seq_len``). For the ViT, ``seq_len`` is ignored: the
    sequence is the N_p + 1 tokens the image size implies. ``conventions`` (default: the
    component's canonical ones) matter where they change the products, e.g. a decoder
    block's gated or plain FFN.
    """
    from .components import record  # the records' formulas use this module's helpers
    from .params import canonical_conventions

    cost = record(component).cost
    if cost is None:
        raise ValueError(
            f"no FLOP formula for component {component!r} (its cost is O(B*L*D), not a matmul)"
        )
    tgt_len = seq_len if tgt_len is None else tgt_len
    if conventions is None:
        conventions = canonical_conventions(component)
    total = cost(config, batch, seq_len, tgt_len, causal, conventions)
    return total * (1 + BACKWARD_FACTOR) if backward else float(total)
