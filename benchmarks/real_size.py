"""The full verdict on a real-size checkpoint: a benchmark, not a test.

    python benchmarks/real_size.py bert --layers 12 [--seq 512] [--out DIR] [-- TCK-ARGS]
    python benchmarks/real_size.py vit --layers 12
    python benchmarks/real_size.py gpt2 --layers 12         # GPT-2 small: d 768, 1024 positions
    python benchmarks/real_size.py llama --layers 30        # SmolLM-135M's shape, 9 over 3 heads

It saves a checkpoint of BERT-base's shape (d 768, 12 heads, d_ff 3072, 512 positions) or
ViT-B/16's (224 px, patch 16, d 768, 12 heads, d_ff 3072), or a decoder: GPT-2 small's
(d 768, 12 heads, d_ff 3072, 1024 positions, vocabulary 50257, tied) or a small Llama's
(SmolLM-135M: d 576, 9 query heads over 3 key/value heads, d_ff 1536, 2048 positions,
vocabulary 49152, tied, theta 10000) with random weights (seed 0) via ``save_pretrained``
into a temporary folder, then times ``tck run --model DIR -n 0`` (the adapter picked from
config.json) under ``/usr/bin/time -v`` when it exists (wall, user and system CPU
seconds, peak memory), and prints one JSON line: the timing, the verdict's summary and the
checks that took longest. ``--layers 2,6,12`` scans depths to show the cost per layer.
Nothing here asserts a time: machines differ (docs/performance.md, "Real sizes").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = {"d_model": 768, "heads": 12, "d_ff": 3072}


def save_checkpoint(kind: str, layers: int, folder: Path, seq: int = 512) -> None:
    """A randomly initialised BERT-base- or ViT-B/16-shaped model, saved as safetensors."""
    import torch
    import transformers

    torch.manual_seed(0)
    common = {
        "hidden_size": SIZES["d_model"],
        "num_hidden_layers": layers,
        "num_attention_heads": SIZES["heads"],
        "intermediate_size": SIZES["d_ff"],
    }
    if kind == "bert":
        config = transformers.BertConfig(max_position_embeddings=seq, **common)
        model = transformers.BertModel(config, add_pooling_layer=False)
    elif kind == "gpt2":
        config = transformers.GPT2Config(
            n_embd=768, n_layer=layers, n_head=12, n_positions=seq, vocab_size=50257
        )
        model = transformers.GPT2LMHeadModel(config)
    elif kind == "llama":
        config = transformers.LlamaConfig(
            hidden_size=576,
            num_hidden_layers=layers,
            num_attention_heads=9,
            num_key_value_heads=3,
            intermediate_size=1536,
            max_position_embeddings=seq,
            vocab_size=49152,
            tie_word_embeddings=True,
            bos_token_id=None,
            eos_token_id=None,
        )
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.ViTConfig(image_size=224, patch_size=16, num_labels=1000, **common)
        model = transformers.ViTForImageClassification(config)
    model.save_pretrained(folder, safe_serialization=True)


def _time_v(stderr: str) -> dict[str, float]:
    """user, system, wall seconds and peak RSS from GNU time -v's report."""
    found: dict[str, float] = {}
    for key, pattern in (
        ("user_s", r"User time \(seconds\): ([\d.]+)"),
        ("sys_s", r"System time \(seconds\): ([\d.]+)"),
        ("max_rss_mb", r"Maximum resident set size \(kbytes\): (\d+)"),
        ("cpu_percent", r"Percent of CPU this job got: (\d+)%"),
    ):
        match = re.search(pattern, stderr)
        if match:
            found[key] = float(match.group(1))
    if "max_rss_mb" in found:
        found["max_rss_mb"] = round(found["max_rss_mb"] / 1024, 1)
    return found


def measure(kind: str, layers: int, out: Path, seq: int, extra: list[str]) -> dict[str, Any]:
    model = out / f"{kind}-{layers}L"
    shutil.rmtree(model, ignore_errors=True)
    started = time.perf_counter()
    save_checkpoint(kind, layers, model, seq)
    saved_s = time.perf_counter() - started
    results = out / f"run-{kind}-{layers}L"
    shutil.rmtree(results, ignore_errors=True)
    command = [sys.executable, "-m", "tck", "run", "--model", str(model)]  # adapter: auto
    command += ["-n", "0", "--out", str(results), *extra]
    timer = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    load_before = os.getloadavg()[0]  # a shared machine: the figures need their load
    started = time.perf_counter()
    done = subprocess.run(timer + command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    row: dict[str, Any] = {
        "kind": kind,
        "layers": layers,
        "seq": seq,
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "save_s": round(saved_s, 1),
        **_time_v(done.stderr),
    }
    document_path = results / "results.json"
    if document_path.is_file():
        document = json.loads(document_path.read_text())
        row["summary"] = document["summary"]
        slow = sorted(document["results"], key=lambda r: -(r.get("duration_s") or 0))
        row["slowest"] = [f"{r['check']}[{r['subject']}]={r.get('duration_s')}s" for r in slow[:12]]
        calls = [
            c.get("seq_len") or 0
            for r in document["results"]
            if r["check"] in ("equality.oracle", "decoder.oracle_lengths")
            for c in (r.get("metrics") or {}).get("calls", [])
        ]
        row["longest_oracle_call"] = max(calls, default=0)
        row["stack_plan_skips"] = sum(
            "real-size stack" in ((r.get("diagnosis") or {}).get("message") or "")
            for r in document["results"]
            if r["status"] == "skip"
        )
        row["not_passed"] = [
            f"{r['check']}[{r['subject']}]: {r['status']}"
            for r in document["results"]
            if r["status"] in ("fail", "error")
        ]
    else:
        row["stderr"] = done.stderr[-2000:]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("bert", "vit", "gpt2", "llama"))
    parser.add_argument("--layers", default="12", help="comma-separated depths (default 12)")
    parser.add_argument(
        "--seq",
        type=int,
        default=None,
        help="positions (default: BERT 512, GPT-2 1024, Llama 2048)",
    )
    parser.add_argument("--out", default=None, help="keep checkpoints and results here")
    parser.add_argument("tck_args", nargs="*", help="passed on to tck run (after --)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tck-real-size-"))
    out.mkdir(parents=True, exist_ok=True)
    seq = args.seq or {"gpt2": 1024, "llama": 2048}.get(args.kind, 512)
    for layers in (int(n) for n in args.layers.split(",")):
        print(json.dumps(measure(args.kind, layers, out, seq, args.tck_args)), flush=True)
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
