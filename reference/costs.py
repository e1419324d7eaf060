"""Analytic FLOPs per component (SPEC.md §10.4). A multiply-add counts as 2 FLOPs.

Only matrix products are counted: softmax, norms, activations and additions are
lower-order terms (O(L*D) or O(Lq*Lk) against O(L*D^2) and O(Lq*Lk*d)). Parameter counts
live in ``params.param_count`` (§10.3).
"""

from __future__ import annotations

from .conventions import Config

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


def flops(
    component: str,
    config: Config,
    *,
    batch: int,
    seq_len: int,
    tgt_len: int | None = None,
    causal: bool = False,
    backward: bool = False,
) -> float:
    """Forward FLOPs of one call of ``component`` (times 1 + 2.5 with ``backward``).

    ``seq_len`` is the (source) sequence length; ``tgt_len`` the target length for the
    decoder and seq2seq (default ``seq_len``). For the ViT, ``seq_len`` is ignored: the
    sequence is the N_p + 1 tokens the image size implies.
    """
    c = config
    tgt_len = seq_len if tgt_len is None else tgt_len
    enc_layer = mha_flops(c, batch, seq_len, causal=causal) + ffn_flops(c, batch, seq_len)
    dec_layer = (
        mha_flops(c, batch, tgt_len, causal=True)
        + mha_flops(c, batch, tgt_len, seq_len)
        + ffn_flops(c, batch, tgt_len)
    )
    if component == "attention":
        total = attention_flops(
            batch, c.n_heads, seq_len, seq_len, c.head_dim_k, c.head_dim_v, causal=causal
        )
    elif component == "mha":
        total = mha_flops(c, batch, seq_len, causal=causal)
    elif component == "ffn":
        total = ffn_flops(c, batch, seq_len)
    elif component == "encoder_layer":
        total = enc_layer
    elif component == "decoder_layer":
        total = dec_layer
    elif component == "encoder":
        total = c.n_layers * enc_layer
    elif component == "decoder":
        total = c.n_decoder_layers * dec_layer
    elif component == "seq2seq":
        logits = linear_flops(batch, tgt_len, c.d_model, c.vocab_size)
        total = c.n_layers * enc_layer + c.n_decoder_layers * dec_layer + logits
    elif component == "vit":
        tokens = c.n_patches + 1
        patches = linear_flops(batch, c.n_patches, c.channels * c.patch_size**2, c.d_model)
        layer = mha_flops(c, batch, tokens) + ffn_flops(c, batch, tokens)
        total = patches + c.n_layers * layer + linear_flops(batch, 1, c.d_model, c.n_classes)
    else:
        raise ValueError(
            f"no FLOP formula for component {component!r} (its cost is O(B*L*D), not a matmul)"
        )
    return total * (1 + BACKWARD_FACTOR) if backward else float(total)
