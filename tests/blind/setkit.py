"""Shared pieces of the blind sets' verifiers and table tests (sets 4 on; sets 1 to 3 keep their
own frozen copies).

A blind set is a folder with implementations, ``implementations.json``, ``bugs.json`` and
``controls.json`` (see ``run.py``). Two things are checked without any tck check involved:

* **each bug changes the output and each control does not** (``verify``): every implementation
  and every patched copy is built through its own adapter with the same seed and the same moved
  parameters, and compared on float64 forwards (unpadded, right- and left-padded, an
  all-padding row, causal, causal with left padding, given positions), cached decoding (one
  token per call and chunks, with and without positions, and a left-padded row with
  ``key_padding`` over every token so far) and 16-bit forwards. A bug *changes the output* when
  some probe differs from the unpatched run (NaN patterns and exceptions included); a control
  must agree to 1e-9 relative in float64 and 1e-2 in 16-bit;
* **the tables are well formed** (``row_problems``, ``bug_problems``, ``offered_components``):
  each row is one line replaced, the line occurs exactly once and sits at the row's line number,
  the patched file compiles, the expected codes exist in the registry.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import run  # noqa: E402  (tests/blind/run.py: patched_source, the tables' loaders)

B, L = 2, 13
DECODER_COMPONENTS = ("causal_self_attention", "decoder_block", "causal_lm")


def load_module(name: str, source: str, tag: str = "verify") -> Any:
    """``source`` imported as a fresh module (a private copy saved as ``name``.py)."""
    folder = Path(tempfile.mkdtemp(prefix=f"blind-{tag}-"))
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"{tag}_{name}_{id(source)}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def probe_inputs(component: str, config: Any, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Input sets for one component: each a dict of numpy arrays (and 'causal')."""
    left = np.ones((B, L), dtype=bool)
    left[1, :5] = False
    right = np.ones((B, L), dtype=bool)
    right[1, 8:] = False
    empty = np.ones((B, L), dtype=bool)
    empty[1, :] = False
    shifted = np.stack([np.arange(L), np.maximum(np.arange(L) - 5, 0)])
    if component in DECODER_COMPONENTS:
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
        x = rng.standard_normal((B, config.n_heads, L, config.d_model // config.n_heads))
        return [{"x": x, "positions": np.arange(L)}, {"x": x, "positions": np.arange(L) + 8179}]
    if component in ("rms_norm", "layer_norm", "gated_ffn", "ffn"):
        x = rng.standard_normal((B, L, config.d_model))
        return [{"x": x}, {"x": x * 300.0}, {"x": x * 1e-4}]
    if component in ("encoder_layer", "encoder"):
        x = rng.standard_normal((B, L, config.d_model))
        sets = [{"x": x}, {"x": x, "key_padding": right}, {"x": x, "key_padding": empty}]
        causal_left = {"x": x, "key_padding": left, "causal": True}
        return [*sets, {"x": x, "causal": True}, causal_left, {"x": x * 300.0}]
    if component in ("decoder_layer", "decoder"):
        x = rng.standard_normal((B, 5, config.d_model))
        memory = rng.standard_normal((B, 7, config.d_model))
        mem_pad = np.ones((B, 7), dtype=bool)
        mem_pad[1, 4:] = False
        tgt_pad = np.ones((B, 5), dtype=bool)
        tgt_pad[1, 3:] = False
        return [
            {"x": x, "memory": memory},
            {"x": x, "memory": memory, "causal": True},
            {"x": x, "memory": memory, "memory_key_padding": mem_pad, "causal": True},
            {"x": x, "memory": memory, "key_padding": tgt_pad, "memory_key_padding": mem_pad},
            {"x": x * 300.0, "memory": memory, "causal": True},
        ]
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
    if component == "seq2seq":
        src = rng.integers(1, config.vocab_size, (B, 7))
        tgt = rng.integers(1, config.vocab_size, (B, 5))
        src_padded = src.copy()
        src_padded[1, 4:] = 0  # padding_idx 0: the model masks those source keys
        return [{"src_ids": src, "tgt_ids": tgt}, {"src_ids": src_padded, "tgt_ids": tgt}]
    if component in ("patch_embed", "vit"):
        return [{"images": rng.standard_normal((B, config.channels, 16, 16))}]
    raise ValueError(f"no probes for component {component}")


def _accepts(entry: Any, name: str) -> bool:
    params = inspect.signature(entry.forward).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def perturb(module: Any) -> None:
    """Move every parameter off its initial value (zero biases, unit gains), the same way in
    the patched and the unpatched build, so that a bias or gain the bug drops shows."""
    import torch

    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _, param in sorted(module.named_parameters()):
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float64)
            param.add_((0.1 * noise).to(param.dtype))


def safe(call: Callable[[], Any]) -> np.ndarray:
    try:
        return np.asarray(call(), dtype=np.float64)
    except Exception as err:  # an exception is a different output
        return np.array([float(hash(type(err).__name__) % 97)])


def component_outputs(module: Any, config: Any, component: str) -> list[tuple[str, np.ndarray]]:
    """Every probe's output for one component of one (patched) implementation, by dtype."""
    adapter = module.adapter
    subject = next(s for s in adapter.subjects() if s.component == component)
    entry = adapter._entries[subject.name]
    out: list[tuple[str, np.ndarray]] = []
    offered = adapter.dtypes(subject)
    for dtype in [d for d in ("float64", "float32", "float16", "bfloat16") if d in offered]:
        rng = np.random.default_rng(0)
        try:
            handle = adapter.build(subject, config, seed=0, dtype=dtype)
        except Exception as err:  # a patched copy that cannot be built changes the output too
            out.append((dtype, np.array([float(hash(type(err).__name__) % 97)])))
            continue
        perturb(handle.module)
        for inputs in probe_inputs(component, config, rng):
            inputs = {k: v for k, v in inputs.items() if _accepts(entry, k)}
            if "causal" in inputs:
                inputs["causal"] = np.array(True)
            out.append((dtype, safe(lambda h=handle, i=inputs: adapter.run(h, i))))
        if entry.step is not None and dtype == "float64":
            out.extend((dtype, o) for o in cached_outputs(adapter, handle, component, config))
    return out


def cached_outputs(adapter: Any, handle: Any, component: str, config: Any) -> list[np.ndarray]:
    """Cached decoding in four regimes: one token per call with and without positions, chunks,
    and a left-padded row with ``key_padding`` over every token so far."""
    rng = np.random.default_rng(1)
    main = (
        {"ids": rng.integers(0, config.vocab_size, (B, L))}
        if component == "causal_lm"
        else {"x": rng.standard_normal((B, L, config.d_model))}
    )
    ((name, full),) = main.items()
    left = np.ones((B, L), dtype=bool)
    left[1, :5] = False
    shifted = np.stack([np.arange(L), np.maximum(np.arange(L) - 5, 0)])
    regimes = (
        ((4, *[1] * 9), True, False),
        ((4, *[1] * 9), False, False),
        ((3, 4, 4, 2), False, False),
        ((6, *[1] * 7), True, True),
    )
    outs = []
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
        outs.append(np.concatenate([np.asarray(p, dtype=np.float64).reshape(-1) for p in pieces]))
    return outs


def largest_difference(a: list, b: list) -> dict[str, float]:
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


def verify(set_dir: Path, configs: Mapping[str, Any], wanted: list[str]) -> int:
    """Print, for each bug and control of the set (or the ``wanted`` ids), whether it changes
    the output; 1 when a bug does not or a control does."""
    bugs = json.loads((set_dir / "bugs.json").read_text(encoding="utf-8"))
    controls = json.loads((set_dir / "controls.json").read_text(encoding="utf-8"))
    base: dict[tuple[str, str], list] = {}
    clean_modules: dict[str, Any] = {}
    failures = []
    for row in [*bugs, *controls]:
        if wanted and row["id"] not in wanted:
            continue
        is_control = row["id"].startswith("control.")
        impl = row["impl"]
        if impl not in clean_modules:
            clean_modules[impl] = load_module(impl, (set_dir / f"{impl}.py").read_text("utf-8"))
        patched = load_module(impl, run.patched_source(row, set_dir))
        worst = {"float64": 0.0, "16-bit": 0.0}
        for component in row["components"]:
            key = (impl, component)
            if key not in base:
                base[key] = component_outputs(clean_modules[impl], configs[impl], component)
            diff = largest_difference(
                base[key], component_outputs(patched, configs[impl], component)
            )
            worst = {k: max(worst[k], diff[k]) for k in worst}
        if is_control:
            ok = worst["float64"] <= 1e-9 and worst["16-bit"] <= 1e-2
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


# ---- the table tests' checks (each returns the problems found; [] when the row is fine) ----


def row_problems(row: dict[str, Any], set_dir: Path, folder: str) -> list[str]:
    """One line replaced by another, occurring exactly once, at the row's line number, in the
    file the row names; the patched file compiles."""
    problems = []
    if "\n" in row["original"] or "\n" in row["replacement"]:
        problems.append("a row spans more than one line")
    if row["original"] == row["replacement"]:
        problems.append("the replacement is the original")
    if row["file"] != f"{folder}/{row['impl']}.py":
        problems.append(f"file {row['file']} is not {folder}/{row['impl']}.py")
    try:
        source = run.patched_source(row, set_dir)
    except ValueError as err:
        return [*problems, str(err)]
    try:
        compile(source, row["file"], "exec")
    except SyntaxError as err:
        problems.append(f"the patched file does not compile: {err}")
    lines = (set_dir / f"{row['impl']}.py").read_text(encoding="utf-8").split("\n")
    if not 0 < row["line"] <= len(lines) or lines[row["line"] - 1] != row["original"]:
        problems.append(f"line {row['line']} is not the original line")
    return problems


def bug_problems(bug: dict[str, Any], codes: Mapping[str, Any]) -> list[str]:
    """Expected codes exist in the registry; exactly one of codes or a described class."""
    problems = [f"unknown code {c}" for c in bug["expected_codes"] if c not in codes]
    if bool(bug["expected_codes"]) == bool(bug["class_without_code"]):
        problems.append("give either expected codes or class_without_code, exactly one")
    if not (bug["class"] and bug["family"]):
        problems.append("class and family are required")
    return problems


def offered_components(set_dir: Path, impl: str) -> list[str]:
    """The components the implementation's adapter offers (its subjects), sorted."""
    module = load_module(impl, (set_dir / f"{impl}.py").read_text(encoding="utf-8"), "table")
    return sorted(s.component for s in module.adapter.subjects())
