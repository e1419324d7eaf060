"""The full verdict on real-size checkpoints: a benchmark, not a test.

    python benchmarks/real_size.py                    # the four shapes, then a Markdown table
    python benchmarks/real_size.py gpt2 llama         # some of them
    python benchmarks/real_size.py bert --layers 2,6,12 [--seq 512] [--out DIR] [-- TCK-ARGS]
    python benchmarks/real_size.py gpt2 --per-check --out DIR   # CPU s and memory per check

The shapes, each with random weights (seed 0) saved by ``save_pretrained`` into a temporary
folder:

- ``gpt2``: GPT-2 small (12 layers, d 768, 12 heads, d_ff 3072, 1024 positions, vocabulary
  50257, tied);
- ``llama``: a small Llama, SmolLM-135M's shape (30 layers, d 576, 9 query heads over 3
  key/value heads, d_ff 1536, 2048 positions, vocabulary 49152, tied, theta 10000);
- ``bert``: BERT-base (12 layers, d 768, 12 heads, d_ff 3072, 512 positions, no pooler);
- ``vit``: ViT-B/16 at 224 px (12 layers, d 768, patch 16, 1000 classes).

Each is checked by the real ``tck run --model DIR -n 0`` (the adapter picked from
config.json) in a child process, waited for with ``os.wait4``: its wall time, user and
system CPU seconds and peak resident memory (``ru_maxrss``, the child's own) are the
kernel's accounting. One JSON line per run (timing, verdict, slowest checks), then a
Markdown table with the date, the machine (cores, CPU model), the load average before and
after each run, the torch and transformers versions. Nothing here asserts a time: machines
differ, and on a shared machine the CPU seconds are the figure to compare
(docs/performance.md, "Real sizes").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = {"d_model": 768, "heads": 12, "d_ff": 3072}


KINDS = ("gpt2", "llama", "bert", "vit")
DEFAULT_LAYERS = {"gpt2": 12, "llama": 30, "bert": 12, "vit": 12}
DEFAULT_SEQ = {"gpt2": 1024, "llama": 2048, "bert": 512, "vit": 512}  # ViT: 224 px, 197


def save_checkpoint(kind: str, layers: int, folder: Path, seq: int = 512) -> int:
    """A randomly initialised model of ``kind``'s shape, saved as safetensors; its number of
    parameters (a tied table once)."""
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
    return sum({id(p): p.numel() for p in model.parameters()}.values())


def run_child(command: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run ``command``, output to ``log``; the kernel's accounting of that one child."""
    with log.open("wb") as sink:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    return {
        "exit": child.returncode,
        "wall_s": round(wall, 1),
        "user_s": round(usage.ru_utime, 1),
        "sys_s": round(usage.ru_stime, 1),
        "max_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: kilobytes
    }


def measure(
    kind: str, layers: int, out: Path, seq: int, extra: list[str], per_check: bool = False
) -> dict[str, Any]:
    model = out / f"{kind}-{layers}L"
    shutil.rmtree(model, ignore_errors=True)
    started = time.perf_counter()
    params = save_checkpoint(kind, layers, model, seq)
    saved_s = time.perf_counter() - started
    results = out / f"run-{kind}-{layers}L"
    shutil.rmtree(results, ignore_errors=True)
    command = [sys.executable, "-m", "tck", "run", "--model", str(model)]  # adapter: auto
    command += ["-n", "0", "--out", str(results), *extra]
    if not any(arg.startswith("--threads") for arg in extra):
        # what tck run gives a real-size checkpoint on an idle machine: the cores it may use
        # (its own rule counts the load average, which the run before this one leaves up)
        command += ["--threads", str(len(os.sched_getaffinity(0)))]
    # numpy's BLAS: its default unless the caller sets OMP_NUM_THREADS
    env = dict(os.environ)
    env.setdefault("HYPOTHESIS_PROFILE", "ci")
    checks = out / f"run-{kind}-{layers}L.checks.jsonl"
    if per_check:  # each check's CPU seconds and memory high-water mark (check_profile.py)
        checks.unlink(missing_ok=True)
        here = str(Path(__file__).resolve().parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
        env["PYTEST_ADDOPTS"] = f"{env.get('PYTEST_ADDOPTS', '')} -p check_profile".strip()
        env["TCK_CHECK_PROFILE"] = str(checks)
    load_before = os.getloadavg()[0]  # a shared machine: the figures need their load
    timing = run_child(command, env, out / f"run-{kind}-{layers}L.log")
    row: dict[str, Any] = {
        "kind": kind,
        "layers": layers,
        "seq": seq,
        "params": params,
        "float64_mb": round(params * 8 / 2**20, 1),
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "save_s": round(saved_s, 1),
        **timing,
    }
    row["rss_over_float64"] = round(row["max_rss_mb"] / row["float64_mb"], 2)
    if per_check and checks.is_file():
        profile = [json.loads(line) for line in checks.read_text().splitlines() if line]
        row["checks_cpu_s"] = round(sum(c["cpu_s"] for c in profile), 1)
        row["heaviest_checks"] = sorted(profile, key=lambda c: -c["cpu_s"])[:8]
        row["highest_checks"] = sorted(profile, key=lambda c: -c.get("rss_peak_gb", 0))[:3]
    document_path = results / "results.json"
    if document_path.is_file():
        document = json.loads(document_path.read_text())
        row["summary"] = document["summary"]
        row["torch_threads"] = document.get("environment", {}).get("torch_threads")
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
        row["log_tail"] = (out / f"run-{kind}-{layers}L.log").read_text(errors="replace")[-2000:]
    return row


SHAPES = {
    "gpt2": "GPT-2 small: {layers} layers, d 768, 12 heads, {seq} positions, vocabulary 50257",
    "llama": "small Llama: {layers} layers, d 576, 9 over 3 KV heads, d_ff 1536, tied, "
    "{seq} positions",
    "bert": "BERT-base: {layers} layers, d 768, 12 heads, {seq} positions",
    "vit": "ViT-B/16: {layers} layers, d 768, 224 px (197 tokens)",
}


def machine() -> str:
    """Cores, CPU model, torch and transformers versions: the table's heading."""
    import torch
    import transformers

    model = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [
            ln.split(":", 1)[1].strip()
            for ln in cpuinfo.read_text().splitlines()
            if ln.startswith("model name")
        ]
        model = names[0] if names else model
    return (
        f"{os.cpu_count()} cores ({model}), torch {torch.__version__}, transformers "
        f"{transformers.__version__}, OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, hypothesis profile "
        f"{os.environ.get('HYPOTHESIS_PROFILE', 'ci')}"
    )


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of ``rows`` (one per run), with its heading."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Measured {now} on {machine()}.",
        "",
        "| checkpoint | torch threads | load (1 min, before / after) | wall | user + sys CPU "
        "| peak RSS (float64 size, ratio) | verdict (exit code) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        summary = row.get("summary") or {}
        verdict = (
            f"{summary.get('passed', 0)} passed, {summary.get('failed', 0)} failed, "
            f"{summary.get('errors', 0)} errors, {summary.get('skipped', 0)} skipped "
            f"(exit {row['exit']})"
            if summary
            else f"no results (exit {row['exit']})"
        )
        cpu = row["user_s"] + row["sys_s"]
        lines.append(
            f"| {SHAPES[row['kind']].format(layers=row['layers'], seq=row['seq'])} "
            f"| {row.get('torch_threads') or '?'} "
            f"| {row['load_1min'][0]:.1f} / {row['load_1min'][1]:.1f} | {row['wall_s']:.0f} s "
            f"| {row['user_s']:.0f} + {row['sys_s']:.0f} = {cpu:.0f} s "
            f"| {row['max_rss_mb'] / 1024:.2f} GB ({row['float64_mb'] / 1024:.2f} GB, "
            f"{row['rss_over_float64']:.1f}x) | {verdict} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kinds", nargs="*", help=f"of {', '.join(KINDS)} (default: all four)")
    parser.add_argument(
        "--layers", default=None, help="comma-separated depths (default: the shape's)"
    )
    parser.add_argument("--seq", type=int, default=None, help="positions (default: the shape's)")
    parser.add_argument("--out", default=None, help="keep checkpoints and results here")
    parser.add_argument("--tck-args", default="", help="passed on to tck run (one string)")
    parser.add_argument(
        "--per-check",
        action="store_true",
        help="each check's CPU seconds and memory high-water mark (run-*.checks.jsonl in --out)",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown shape {', '.join(unknown)}: choose from {', '.join(KINDS)}")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tck-real-size-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for kind in args.kinds or KINDS:
        depths = args.layers or str(DEFAULT_LAYERS[kind])
        for layers in (int(n) for n in depths.split(",")):
            seq = args.seq or DEFAULT_SEQ[kind]
            row = measure(kind, layers, out, seq, args.tck_args.split(), args.per_check)
            print(json.dumps(row), flush=True)
            rows.append(row)
            if not args.out:  # a checkpoint at a time on disk
                shutil.rmtree(out / f"{kind}-{layers}L", ignore_errors=True)
    print()
    print(table(rows))
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
