"""(The third blind set's copy of tests/blind2/verify_bugs.py: its own configurations, and a
left-padded causal probe for the encoders.)

Check, without tck's checks, that every bug of bugs.json changes its implementation's
output on some input and that every control of controls.json does not.

Each implementation (and each patched copy) is built through its own adapter with the same
seed, then driven by the probes below: float64 forwards (unpadded, right- and left-padded,
a row that is all padding, causal with Lq != Lk where the component takes it, given position
ids), cached decoding (prefill then one token per call, and chunks) with and without
position ids and with a left-padded row, and 16-bit forwards (outlier channels, positions
near 8191). A bug *changes
the output* when some probe differs from the unpatched run (NaN patterns included);
a control must agree with the unpatched run to 1e-9 relative in float64 and 1e-2 in 16-bit.

    python tests/blind3/verify_bugs.py              # every bug and control
    python tests/blind3/verify_bugs.py paged.gqa_tiled
"""

from __future__ import annotations

import importlib.util
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "blind"))
import run  # noqa: E402  (tests/blind/run.py: patched_source)

from tck.reference import Config  # noqa: E402

CONFIGS = {
    "paged_llama": Config(
        n_kv_heads=2,
        attention_bias=False,
        attention_out_bias=False,
        ffn_bias=False,
        tie_weights=False,
    ),
    "timm_vit": Config(),
    "varlen_encoder": Config(),
}
B, L = 2, 13


def _load(name: str, source: str):
    folder = Path(tempfile.mkdtemp(prefix="blind3-verify-"))
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"verify_{name}_{id(source)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _inputs(component: str, config: Config, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Input sets for one component: each a dict of numpy arrays (and 'causal')."""
    left = np.ones((B, L), dtype=bool)
    left[1, :5] = False
    right = np.ones((B, L), dtype=bool)
    right[1, 8:] = False
    empty = np.ones((B, L), dtype=bool)
    empty[1, :] = False
    shifted = np.stack([np.arange(L), np.maximum(np.arange(L) - 5, 0)])
    if component in ("causal_self_attention", "decoder_block", "causal_lm"):
        main = (
            {"ids": rng.integers(0, config.vocab_size, (B, L))}
            if component == "causal_lm"
            else {"x": rng.standard_normal((B, L, config.d_model))}
        )
        return [
            dict(main),
            {**main, "key_padding": right},
            {**main, "key_padding": left, "positions": shifted},
            {**main, "key_padding": left},
            {**main, "positions": np.tile(np.arange(L) + 3, (B, 1))},
        ]
    if component == "rope":
        x = rng.standard_normal((B, config.n_heads, L, config.head_dim_k))
        return [{"x": x, "positions": np.arange(L)}, {"x": x, "positions": np.arange(L) + 8179}]
    if component in ("rms_norm", "layer_norm", "gated_ffn", "ffn"):
        x = rng.standard_normal((B, L, config.d_model))
        return [{"x": x}, {"x": x * 300.0}, {"x": x * 1e-4}]
    if component in ("encoder_layer", "encoder"):
        x = rng.standard_normal((B, L, config.d_model))
        sets = [{"x": x}, {"x": x, "key_padding": right}, {"x": x, "key_padding": empty}]
        causal_left = {"x": x, "key_padding": left, "causal": True}
        return [*sets, {"x": x, "causal": True}, causal_left, {"x": x * 300.0}]
    if component == "mha":
        q = rng.standard_normal((B, 5, config.d_model))
        kv = rng.standard_normal((B, 7, config.d_model))
        pad = np.ones((B, 7), dtype=bool)
        pad[1, 4:] = False
        none = pad.copy()
        none[1, :] = False
        return [
            {"query": q, "key": kv, "value": rng.standard_normal((B, 7, config.d_model))},
            {"query": q, "key": kv, "value": kv, "key_padding": pad},
            {"query": q, "key": kv, "value": kv, "key_padding": none},
            {"query": q, "key": kv, "value": kv, "causal": True},
        ]
    if component in ("patch_embed", "vit"):
        return [{"images": rng.standard_normal((B, config.channels, 16, 16))}]
    raise ValueError(component)


def _accepts(entry, name: str) -> bool:
    import inspect

    params = inspect.signature(entry.forward).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _outputs(module, impl: str, component: str) -> list[tuple[str, np.ndarray]]:
    """Every probe's output for one component of one (patched) implementation, by dtype."""
    adapter = module.adapter
    subject = next(s for s in adapter.subjects() if s.component == component)
    entry = adapter._entries[subject.name]
    config = CONFIGS[impl]
    out: list[tuple[str, np.ndarray]] = []
    offered = adapter.dtypes(subject)
    for dtype in [d for d in ("float64", "float32", "float16", "bfloat16") if d in offered]:
        rng = np.random.default_rng(0)
        handle = adapter.build(subject, config, seed=0, dtype=dtype)
        _perturb(handle.module)
        for inputs in _inputs(component, config, rng):
            inputs = {k: v for k, v in inputs.items() if _accepts(entry, k)}
            if "causal" in inputs:
                inputs["causal"] = np.array(True)
            out.append((dtype, _safe(lambda h=handle, i=inputs: adapter.run(h, i))))
        if entry.step is not None and dtype == "float64":
            out.extend((dtype, o) for o in _steps(adapter, handle, component, config))
    return out


def _perturb(module) -> None:
    """Move every parameter off its initial value (zero biases, unit gains), the same way in
    the patched and the unpatched build, so that a bias or gain the bug drops shows."""
    import torch

    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _, param in sorted(module.named_parameters()):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float64)
            param.add_((0.1 * noise).to(param.dtype))


def _steps(adapter, handle, component: str, config: Config) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    main = (
        {"ids": rng.integers(0, config.vocab_size, (B, L))}
        if component == "causal_lm"
        else {"x": rng.standard_normal((B, L, config.d_model))}
    )
    ((name, full),) = main.items()
    outs = []
    # the last regime: row 1 left-padded by 5, positions shifted, key_padding over every
    # token so far (Adapter.step's contract for padded rows)
    left = np.ones((B, L), dtype=bool)
    left[1, :5] = False
    shifted = np.stack([np.arange(L), np.maximum(np.arange(L) - 5, 0)])
    regimes = (
        ((4, *[1] * 9), True, False),
        ((4, *[1] * 9), False, False),
        ((3, 4, 4, 2), False, False),
        ((6, *[1] * 7), True, True),
    )
    for chunks, with_positions, padded in regimes:
        cache, start, pieces = None, 0, []
        for n in chunks:
            inputs = {name: full[:, start : start + n]}
            if padded:
                inputs["positions"] = shifted[:, start : start + n]
                inputs["key_padding"] = left[:, : start + n]
            elif with_positions:
                inputs["positions"] = np.tile(np.arange(start, start + n), (B, 1))
            try:
                piece, cache = adapter.step(handle, inputs, cache)
            except Exception as err:  # a patched copy may fail: that changes the output too
                pieces = [np.array([float(hash(type(err).__name__) % 97)])]
                break
            pieces.append(piece)
            start += n
        outs.append(np.concatenate([p.reshape(-1) for p in pieces]))
    return outs


def _safe(call) -> np.ndarray:
    try:
        return np.asarray(call(), dtype=np.float64)
    except Exception as err:  # an exception is a different output
        return np.array([float(hash(type(err).__name__) % 97)])


def _differs(a, b) -> dict[str, float]:
    """The largest relative difference over the probes, float64 and 16-bit apart (inf where
    shapes or NaN patterns differ)."""
    worst = {"float64": 0.0, "16-bit": 0.0}
    for (dtype, x), (_, y) in zip(a, b, strict=True):
        kind = "float64" if dtype == "float64" else "16-bit"  # float32 counted with 16-bit
        if x.shape != y.shape or not np.array_equal(np.isnan(x), np.isnan(y)):
            worst[kind] = float("inf")
            continue
        ok = np.isfinite(x) & np.isfinite(y)
        if not np.array_equal(np.isfinite(x), np.isfinite(y)):
            worst[kind] = float("inf")
        elif ok.any():
            scale = max(1.0, float(np.abs(x[ok]).max()))
            worst[kind] = max(worst[kind], float(np.abs(x[ok] - y[ok]).max()) / scale)
    return worst


def main(argv: list[str]) -> int:
    bugs = json.loads((HERE / "bugs.json").read_text(encoding="utf-8"))
    controls = json.loads((HERE / "controls.json").read_text(encoding="utf-8"))
    wanted = set(argv)
    base: dict[tuple[str, str], list[np.ndarray]] = {}
    failures = []
    for row in [*bugs, *controls]:
        if wanted and row["id"] not in wanted:
            continue
        is_control = row["id"].startswith("control.")
        clean = _load(row["impl"], (HERE / f"{row['impl']}.py").read_text(encoding="utf-8"))
        patched = _load(row["impl"], run.patched_source(row, HERE))
        worst = {"float64": 0.0, "16-bit": 0.0}
        for component in row["components"]:
            key = (row["impl"], component)
            if key not in base:
                base[key] = _outputs(clean, row["impl"], component)
            diff = _differs(base[key], _outputs(patched, row["impl"], component))
            worst = {k: max(worst[k], diff[k]) for k in worst}
        if is_control:
            # a control that computes a step in float32 on purpose agrees to float32's precision
            island = "float32" in row["replacement"]
            ok = worst["float64"] <= (1e-6 if island else 1e-9) and worst["16-bit"] <= 1e-2
            verdict = "stays correct" if ok else "CHANGES THE OUTPUT"
        else:
            ok = worst["float64"] > 1e-12 or worst["16-bit"] > 0.0
            verdict = "changes the output" if ok else "NO CHANGE"
        print(
            f"{row['id']:45s} {verdict:20s} max rel diff float64 {worst['float64']:.3g}, "
            f"16-bit {worst['16-bit']:.3g}",
            flush=True,
        )
        if not ok:
            failures.append(row["id"])
    if failures:
        print("not as intended: " + ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
