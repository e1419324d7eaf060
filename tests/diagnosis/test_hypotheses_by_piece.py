"""Hypotheses read off the oracle's pieces, so that every component holding the piece gets
them, from the op to the whole model: a norm with the other norm's statistics
(hypotheses_solved.norm_kind_hypotheses), RoPE's angles rounded to 16 bits before their cosine
or sine (hypotheses_solved.table_dtype_hypotheses), the sinusoidal table with another exponent
rule or read at p + k (hypotheses_fitted.pe_rule_hypotheses), heads left time-major for a
kernel that reads them head-major (hypotheses_more.head_split_hypotheses), a masked call
that raises judged by the nearest call that runs (shapes.masked_call_errors), a tiled kernel
without its ragged last key tile (hypotheses_layout.ragged_tile_hypotheses) and an image
reshaped from another axis order (structural.image_layout_hypotheses).

Each buggy subject here is written in the test, independently of the hypothesis that must
name it (a Marian-style table, a norm by hand), and named inside components other than the
op that holds the piece."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from test_hypotheses_solved import _explained

from tck.adapters import load_adapter
from tck.conformance.diagnosis.alternatives import Alternative, output_of
from tck.conformance.diagnosis.explain import explain
from tck.conformance.toolkit.harness import Harness
from tck.conformance.toolkit.results import CheckFailure
from tck.reference.inputs import Shape


def _layer_norm_by_hand(x: Any, weight: Any = None, bias: Any = None, **kw: Any) -> np.ndarray:
    """LayerNorm that divides by the root mean square and never subtracts the mean."""
    x = np.asarray(x, dtype=np.float64)
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + kw.get("eps", 1e-5))
    return (x / rms) * weight + (0.0 if bias is None else bias)


def _rms_norm_centred_by_hand(x: Any, weight: Any = None, *, eps: float = 1e-5) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x = x - x.mean(axis=-1, keepdims=True)
    return x / np.sqrt(np.var(x, axis=-1, keepdims=True) + eps) * weight


@pytest.mark.parametrize("component", ["encoder_layer", "decoder_layer", "vit", "encoder"])
def test_a_layer_norm_that_does_not_centre_is_named_in_any_component(component: str) -> None:
    (code, message), _ = _explained(
        component, Alternative("", "", pieces={"layer_norm": _layer_norm_by_hand})
    )
    assert code == "layer_norm.not_centred", message


def _explained_on(name: str, alternative: Alternative, **config: Any) -> tuple[str, str]:
    """``explain`` on the reference subject ``name`` (its config changed by ``config``)
    computing ``alternative``."""
    adapter = load_adapter("reference")
    subject = next(s for s in adapter.subjects() if s.name == name)
    tck = Harness(adapter, subject, seed=0)
    inst = tck.instance()
    if config:
        inst = tck.instance(dataclasses.replace(inst.config, **config))
    inputs = tck.inputs(inst, Shape())
    spec = tck.gold(inst, inputs)
    tck.run = lambda inst, inputs: output_of(  # type: ignore[method-assign]
        subject.component, inputs, inst.params, inst.config, inst.conventions, alternative
    )
    test = tck.run(inst, inputs)
    return explain(tck, inst, inputs, test, tck.compare(inst, test, spec))


@pytest.mark.parametrize("name", ["rms_norm", "decoder_block[llama]", "causal_lm[llama]"])
def test_an_rms_norm_that_centres_is_named(name: str) -> None:
    code, message = _explained_on(
        name, Alternative("", "", pieces={"rms_norm": _rms_norm_centred_by_hand})
    )
    assert code == "layer_norm.rms_wrong_statistics", message


def _rope_cos_of_half_angles(x: Any, positions: Any = None, **kw: Any) -> np.ndarray:
    """RoPE whose cosine is taken of the angles cast to float16 first."""
    x = np.asarray(x, dtype=np.float64)
    length, d = x.shape[-2:]
    positions = np.arange(length) if positions is None else np.asarray(positions)
    omega = kw.get("frequencies")
    if omega is None:
        omega = kw.get("base", 10000.0) ** (-np.arange(0, d, 2) / d)
    theta = positions[:, None] * omega
    cos = np.cos(theta.astype(np.float16)).astype(np.float16).astype(np.float64)
    sin = np.sin(theta)
    half = kw.get("layout", "interleaved") == "half_split"
    a, b = (x[..., : d // 2], x[..., d // 2 :]) if half else (x[..., 0::2], x[..., 1::2])
    rotated = (a * cos - b * sin, a * sin + b * cos)
    if half:
        return np.concatenate(rotated, axis=-1)
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = rotated
    return out


@pytest.mark.parametrize("name", ["rope", "decoder_block[llama]", "causal_lm[llama]"])
def test_rope_angles_cast_to_16_bits_before_the_cosine_are_named(name: str) -> None:
    code, message = _explained_on(
        name, Alternative("", "", pieces={"rope": _rope_cos_of_half_angles})
    )
    assert code == "numerics.rope_angles_low_precision", message
    assert "float16 before the cos" in message


def _marian_table(exponent: str, offset: int = 0):  # type: ignore[no-untyped-def]
    """HF Marian's sinusoidal table, written as its file writes it (sines in the first half,
    cosines in the second), with the exponent taken per feature or per pair, positions + k."""

    def sinusoidal_pe(length: int, d_model: int, **kw: Any) -> np.ndarray:
        base = kw.get("base", 10000.0)
        rule = {"pair": lambda j: 2 * (j // 2) / d_model, "feature": lambda j: j / d_model}
        enc = np.array(
            [
                [(pos + offset) / np.power(base, rule[exponent](j)) for j in range(d_model)]
                for pos in range(length)
            ]
        )
        table = np.empty_like(enc)
        half = d_model // 2
        table[:, :half], table[:, half:] = np.sin(enc[:, 0::2]), np.cos(enc[:, 1::2])
        if kw.get("layout", "interleaved") == "interleaved":
            table = np.stack([table[:, :half], table[:, half:]], axis=-1).reshape(length, -1)
        return table

    return sinusoidal_pe


@pytest.mark.parametrize("component", ["seq2seq", "sinusoidal_pe"])
@pytest.mark.parametrize(
    ("exponent", "offset", "code"),
    [
        ("feature", 0, "positional.frequency_wrong"),
        ("pair", 2, "positional.position_offset"),
        ("pair", 1, "positional.position_offset"),
    ],
)
def test_a_sinusoidal_table_built_or_read_wrong_is_named(
    component: str, exponent: str, offset: int, code: str
) -> None:
    table = Alternative("", "", pieces={"sinusoidal_pe": _marian_table(exponent, offset)})
    (found, message), _ = _explained(component, table)
    assert found == code, message


def test_the_marian_table_of_the_tests_is_the_spec_with_no_bug() -> None:
    from tck.reference import oracle

    for layout in ("interleaved", "concatenated"):
        spec = oracle.sinusoidal_pe(9, 8, layout=layout)
        assert np.allclose(_marian_table("pair")(9, 8, layout=layout), spec, atol=1e-12)


def test_heads_left_time_major_are_named_where_the_masked_call_raises() -> None:
    """shapes.masked_call_errors on its mutant: the masked call raises, the unmasked call
    with Lk = Lq runs and is named; the correct reference's masked call runs (a skip)."""
    from tck.conformance.checks import test_view_errors as check

    adapter = load_adapter("mutants.mha_heads_left_time_major")
    tck = Harness(adapter, adapter.subjects()[0], seed=0)
    with pytest.raises(CheckFailure) as failure:
        check.test_masked_call_errors(tck)
    assert failure.value.code == "attention.heads_split_wrong_order", failure.value.message
    assert "the masked call raises (RuntimeError" in failure.value.message
    reference = load_adapter("reference")
    subject = next(s for s in reference.subjects() if s.component == "encoder_layer")
    with pytest.raises(pytest.skip.Exception):
        check.test_masked_call_errors(Harness(reference, subject, seed=0))


def _repeat_kv_tiling(tiled: str):  # type: ignore[no-untyped-def]
    """Pieces whose ``repeat_kv`` tiles the keys or the values (by the order the oracle asks:
    keys, then values), as ``k[:, None]`` broadcast on the wrong axis does."""

    def pieces() -> dict[str, Any]:
        calls = []

        def repeat_kv(x: Any, n_rep: int) -> np.ndarray:
            calls.append(None)
            is_key = len(calls) % 2 == 1
            x = np.asarray(x, dtype=np.float64)
            if is_key == (tiled == "keys"):
                return np.concatenate([x] * n_rep, axis=1)  # head h reads h mod H_kv
            return np.repeat(x, n_rep, axis=1)

        return {"repeat_kv": repeat_kv}

    return pieces


@pytest.mark.parametrize("name", ["causal_self_attention", "decoder_block[llama]"])
@pytest.mark.parametrize("tiled", ["keys", "values"])
def test_keys_or_values_alone_tiled_over_the_query_heads_are_named(name: str, tiled: str) -> None:
    code, message = _explained_on(
        name, Alternative("", "", pieces=_repeat_kv_tiling(tiled)), n_kv_heads=2
    )
    assert code == "attention.kv_heads_tiled", message
    assert f"the {tiled} alone" in message


def _ffn_residual_from_layer_input():  # type: ignore[no-untyped-def]
    """Pieces whose last sublayer of each layer (norm2 of two, norm3 of three) adds the
    layer's input: HF's ``self.output(intermediate, hidden_states)`` for ``attention_output``."""
    from tck.reference import oracle

    def pieces() -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def sublayer(x, params, norm_prefix, conventions, fn):  # type: ignore[no-untyped-def]
            if norm_prefix == "norm1.":
                seen["x0"] = x
            last = "norm3." if "norm3.weight" in params else "norm2."
            if norm_prefix != last:
                return oracle._sublayer(x, params, norm_prefix, conventions, fn)
            if conventions.norm_placement == "post":
                return oracle.norm(seen["x0"] + fn(x), params, norm_prefix, conventions)
            return seen["x0"] + fn(oracle.norm(x, params, norm_prefix, conventions))

        return {"_sublayer": sublayer}

    return pieces


@pytest.mark.parametrize(
    "name", ["encoder_layer", "encoder", "decoder_layer", "decoder_block[llama]", "vit"]
)
def test_a_residual_from_the_layer_input_is_named(name: str) -> None:
    code, message = _explained_on(
        name, Alternative("", "", pieces=_ffn_residual_from_layer_input())
    )
    assert code == "blocks.residual_from_layer_input", message


def _tiled_attention_whole_tiles_only(tile: int):  # type: ignore[no-untyped-def]
    """An online softmax over key tiles whose loop stops at the last whole tile, by hand."""

    def sdpa(q, k, v, keep_mask=None, *, scale=None, fully_masked_rows="zero"):  # type: ignore[no-untyped-def]
        q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        lq, lk = q.shape[-2], k.shape[-2]
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        keep = np.ones((*lead, lq, lk), bool) if keep_mask is None else keep_mask
        keep = np.broadcast_to(keep, (*lead, lq, lk))
        m = np.full((*lead, lq, 1), -np.inf)
        total = np.zeros((*lead, lq, 1))
        acc = np.zeros((*lead, lq, v.shape[-1]))
        for start in range(0, lk - tile + 1, tile):
            cut = slice(start, start + tile)
            s = np.where(keep[..., cut], q @ np.swapaxes(k[..., cut, :], -1, -2) * scale, -np.inf)
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
            safe = np.where(np.isinf(m_new), 0.0, m_new)
            p = np.exp(s - safe)
            alpha = np.exp(m - safe)
            total = total * alpha + p.sum(axis=-1, keepdims=True)
            acc = acc * alpha + p @ v[..., cut, :]
            m = m_new
        return acc / np.where(total > 0, total, 1.0)

    return {"scaled_dot_product_attention": sdpa}


@pytest.mark.parametrize("name", ["mha", "causal_self_attention", "encoder_layer"])
@pytest.mark.parametrize("tile", [2, 4])
def test_a_tiled_kernel_without_its_ragged_last_tile_is_named(name: str, tile: int) -> None:
    # the default call has 7 keys (5 on self-attention): a ragged tile for 2 and 4, which
    # cut 5 keys at the same place, so the message may name either
    alternative = Alternative("", "", pieces=_tiled_attention_whole_tiles_only(tile))
    code, message = _explained_on(name, alternative)
    assert code == "attention.ragged_key_tile_dropped", message


def _image_from_buffer(layout: str):  # type: ignore[no-untyped-def]
    """The patch embedding of an image handed over in ``layout`` ("BHWC", "BHCW") and
    reshaped to (B, C, H, W) without a permute."""
    from tck.reference import oracle

    def patch_embed(images, weight, bias, *, patch_size):  # type: ignore[no-untyped-def]
        images = np.asarray(images)
        handed = np.einsum(f"BCHW->{layout}", images)  # what the loader gives
        return oracle.patch_embed(handed.reshape(images.shape), weight, bias, patch_size=patch_size)

    return {"patch_embed": patch_embed}


@pytest.mark.parametrize("name", ["patch_embed", "vit"])
@pytest.mark.parametrize("layout", ["BHWC", "BHCW"])
def test_an_image_reshaped_from_another_layout_is_named(name: str, layout: str) -> None:
    code, message = _explained_on(name, Alternative("", "", pieces=_image_from_buffer(layout)))
    assert code == "vit.image_layout_wrong", message
    assert f"laid out (B, {', '.join(layout[1:])})" in message


def _image_reshaped_to(layout: str):  # type: ignore[no-untyped-def]
    """The patch embedding of a (B, C, H, W) image reshaped to ``layout`` ("BHWC", "BWCH")
    without a permute, then read in that layout (a channels-last port's own)."""
    from tck.reference import oracle

    def patch_embed(images, weight, bias, *, patch_size):  # type: ignore[no-untyped-def]
        images = np.asarray(images)
        sizes = dict(zip("BCHW", images.shape, strict=True))
        taken = images.reshape([sizes[a] for a in layout])  # the bug: no permute
        read = np.einsum(f"{layout}->BCHW", taken)  # the port then reads it as laid out
        return oracle.patch_embed(read, weight, bias, patch_size=patch_size)

    return {"patch_embed": patch_embed}


@pytest.mark.parametrize("name", ["patch_embed", "vit"])
@pytest.mark.parametrize("layout", ["BHWC", "BWCH"])
def test_an_image_reshaped_to_another_layout_is_named(name: str, layout: str) -> None:
    code, message = _explained_on(name, Alternative("", "", pieces=_image_reshaped_to(layout)))
    assert code == "vit.image_layout_wrong", message
    assert f"to (B, {', '.join(layout[1:])}) by a reshape" in message


def _ffn_normalised_on_its_branch():  # type: ignore[no-untyped-def]
    """Pieces whose last sublayer of each layer normalises its own output before the add:
    x + norm(f(x)) for the FFN, the other sublayers as declared."""
    from tck.reference import oracle

    def sublayer(x, params, norm_prefix, conventions, fn):  # type: ignore[no-untyped-def]
        last = "norm3." if "norm3.weight" in params else "norm2."
        if norm_prefix != last:
            return oracle._sublayer(x, params, norm_prefix, conventions, fn)
        return x + oracle.norm(fn(x), params, norm_prefix, conventions)

    return {"_sublayer": sublayer}


@pytest.mark.parametrize("name", ["encoder_layer", "decoder_block[llama]", "vit"])
def test_a_norm_on_the_sublayer_branch_is_named(name: str) -> None:
    code, message = _explained_on(name, Alternative("", "", pieces=_ffn_normalised_on_its_branch()))
    assert code == "blocks.norm_on_branch", message
