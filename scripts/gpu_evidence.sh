#!/usr/bin/env bash
# The GPU evidence run (docs/devices.md, "On a GPU"): one command on a lent CUDA machine that
# has torch, transformers, timm and triton but no package index. It installs the kit without
# dependencies, runs `tck run --device cuda` on the built-in adapters, then `tck bench` alone
# on the GPU, and packs everything into $OUT/gpu.tar.gz (repacked after each phase, so a
# phase cut off by its time limit still leaves what came before).
#
#   OUT=/some/dir bash scripts/gpu_evidence.sh [BUDGET_S]
#   TCK_PHASES=conform,decoder OUT=... bash scripts/gpu_evidence.sh 300   # some phases only
#
# Phases: conform (tck run on every built-in adapter), attention (tck bench of torch.nn's
# attention and mha in bf16 and fp16, N 512 to 16384, every SDPA backend), long (the same at
# N 32768 and 65536 in bf16, without the math backend, which runs out of memory at 16384),
# decoder (hf.llama's decoder components in bf16).
#
# Wheels the machine lacks (jsonschema and its needs; transformers >= 5.23 where its own is
# older) are taken from .whl/ when that folder exists. Each phase runs under `timeout`, the
# whole under BUDGET_S seconds (default 540): what did not finish says so in steps.log.
set -u
BUDGET=${1:-540}
DEVICE=${TCK_DEVICE:-cuda} # TCK_DEVICE=cpu rehearses the script on a machine without one
PHASES=",${TCK_PHASES:-conform,attention,long,decoder},"
want() { [[ $PHASES == *",$1,"* ]]; }
START=$(date +%s)
W=/tmp/tck-gpu
rm -rf "$W" && mkdir -p "$W"
export PYTHONUNBUFFERED=1

elapsed() { echo $(($(date +%s) - START)); }
log() { echo "[$(elapsed)s] $*" | tee -a "$W/steps.log"; }
pack() { tar czf "$OUT/gpu.tar.gz" --exclude=.hypothesis -C "$W" . 2>/dev/null; cp "$W/steps.log" "$OUT/" 2>/dev/null; }
left() { echo $((BUDGET - $(elapsed))); }

if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$W/install.log" 2>&1 ||
    { log "install failed"; cat "$W/install.log"; pack; exit 1; }

{
    date -u +%Y-%m-%dT%H:%M:%SZ
    echo "commit ${TCK_COMMIT:-unknown}"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    python3 - <<'EOF'
import importlib, sys, torch
print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
for name in ("transformers", "timm", "triton", "numpy", "onnx", "onnxruntime", "hypothesis", "pytest"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as err:  # noqa: BLE001
        print(name, "unavailable:", type(err).__name__, err)
EOF
} >"$W/environment.txt" 2>&1
cat "$W/environment.txt"
log "installed"

# ---- phase 1: conformance on CUDA, the adapters side by side (16 cores; the oracle is CPU work)
conform() { # adapter workers
    local out="$W/run-${1}"
    timeout -s INT -k 15 "$CONFORM_S" python3 -m tck run --adapter "$1" --device "$DEVICE" -n "$2" --timeout 120 \
        --out "$out" >"$W/run-${1}.log" 2>&1
    echo "$1 rc=$?" >>"$W/steps.log"
}
if want conform; then
    CONFORM_S=$(($(left) * 45 / 100))
    log "phase 1: tck run --device $DEVICE, each under ${CONFORM_S}s"
    conform torch.nn 5 &
    conform reference 3 &
    conform hf.bert 2 &
    conform hf.vit 2 &
    conform hf.gpt2 2 &
    conform hf.llama 2 &
    conform timm.vit 1 &
    wait
    log "phase 1 done"
    grep -h "^tck " "$W"/run-*.log | tee -a "$W/steps.log"
    pack
fi

# ---- phase 2: tck bench, alone on the GPU
bench() { # name seconds args...
    local name=$1 secs=$2
    shift 2
    timeout -s INT -k 15 "$secs" python3 -m tck bench --device "$DEVICE" --warmup 0.02 \
        --min-rounds 5 --min-time 0.1 --max-time 0.25 --out "$W/bench-$name" "$@" >"$W/bench-$name.log" 2>&1
    echo "bench $name rc=$?" >>"$W/steps.log"
    tail -n 3 "$W/bench-$name.log"
}
log "phase 2: tck bench"
# one report per dtype and family, so that a sweep cut off by its limit loses only itself
ATTENTION=(--adapter torch.nn --components attention,mha --seq 512,...,16384 --batch 4
    --d-model 1024 --heads 16 --baselines flash,efficient,cudnn,math)
if want attention; then
    bench attention-bf16 $(($(left) * 40 / 100)) "${ATTENTION[@]}" --dtypes bf16
    pack
    bench attention-fp16 $(($(left) * 40 / 100)) "${ATTENTION[@]}" --dtypes fp16
    pack
fi
if want long; then
    bench attention-long $(($(left) * ${TCK_LONG_SHARE:-40} / 100)) --adapter torch.nn --components attention,mha \
        --seq 32768,65536 --batch 4 --d-model 1024 --heads 16 --baselines flash,efficient,cudnn \
        --dtypes bf16
    pack
fi
if want decoder; then
    bench decoder-bf16 $(($(left) - 10)) --adapter hf.llama --causal \
        --components "causal_self_attention[sdpa],causal_self_attention[eager],decoder_block[sdpa],gated_ffn" \
        --dtypes bf16 --seq 512,...,16384 --batch 4 --d-model 1024 --heads 16 --baselines flash,cudnn
fi
log "phase 2 done"
pack
cat "$W/steps.log"
