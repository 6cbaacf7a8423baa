#!/usr/bin/env bash
# Issue 27's one prepared run on a GPU machine (one H100/H200, its own python3 with torch + CUDA,
# no network): install this project and its missing dependencies from carried wheels (never
# torch), record the machine, capture GPT-2 and BERT (base shapes) on one GPU over NCCL with
# chakra-profile, and pack each capture (host + Kineto trace + summary) as OUT/NAME.tar.gz.
# Conversion and simulation happen afterwards on the CPU machine (bench/gpu/analyze.py).
# First the GPU's device profile (`chakra-profile device-profile`, issue 35) and the memory
# captures (issue 36); the captures are packed into bundles of at most 12 MiB as they finish
# (OUT/bundle_N.tar, each holding NAME.tar.gz files), since a lent machine returns 8 files at most.
#
#   # on the CPU machine, once: the wheels the GPU machine lacks, and this project's own
#   bash bench/gpu/wheels.sh                 # -> .whl/ (git-ignored; carried to the GPU machine)
#   # on the GPU machine (OUT: where the results go):
#   OUT=/tmp/out bash bench/gpu/capture.sh
#   # a smoke run on CPU (tiny shapes, 3 steps), with an interpreter that has torch:
#   SMOKE=1 PY=.venv/bin/python OUT=/tmp/out bash bench/gpu/capture.sh
set -uo pipefail
OUT=${OUT:?OUT: the folder the results go to}
PY=${PY:-python3}
WORK=$(mktemp -d)
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [ "${SMOKE:-0}" = 1 ]; then
    SIZE=tiny STEPS=(--steps 3 --wait 1 --warmup 0 --active 1) LIMIT=300
else
    SIZE=base STEPS=(--steps 30 --wait 10 --warmup 2 --active 1) LIMIT=110
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi

echo "== machine"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv 2>/dev/null
    "$PY" - <<'PY'
import sys
import torch
print("python", sys.version.split()[0])
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(0), "nccl", torch.cuda.nccl.version())
    p = torch.cuda.get_device_properties(0)
    print("sms", p.multi_processor_count, "memory", p.total_memory)
PY
    "$PY" -m pip show transformers tokenizers datasets pyarrow fsspec msgspec 2>/dev/null | grep -E '^(Name|Version)'
}  # (in run.log)
"$PY" -c "import datasets, msgspec, chakra_convert_fast.profiler.train" || { echo "== the profiler does not import"; exit 1; }

capture() {  # NAME ARGS...: one capture, packed whatever its outcome
    local name=$1
    shift
    if [ "${LIGHT_ONLY:-0}" = 1 ] && [[ $name != kineto_* ]]; then return; fi
    case $name in ${ONLY:-*}*) ;; *) return ;; esac  # ONLY=gpt2: the captures whose names start so
    # END: the seconds this script may take in all (the device call's limit is 600 s); a capture
    # gets what is left, at most LIMIT, and none starts with under 40 s left
    local left=$((${END:-470} - SECONDS))
    if [ "$left" -lt 40 ]; then
        echo "== $name: skipped, $SECONDS s spent"
        return
    fi
    echo "== $name: chakra-profile $* ${STEPS[*]}"
    local start=$SECONDS
    timeout -k 5 "$((left < LIMIT ? left : LIMIT))" "$PY" -m chakra_convert_fast.profiler.cli "$@" "${STEPS[@]}" \
        --outdir "$WORK/$name" --name "$name"
    echo "== $name: exit $? after $((SECONDS - start)) s"
    tar -C "$WORK" -czf "$WORK/$name.tar.gz" "$name" && bundle "$WORK/$name.tar.gz"
}

BUNDLE=1
bundle() {  # FILE: appended to OUT/bundle_N.tar, a new bundle once this one passes 12 MiB
    local tarball="$OUT/bundle_$BUNDLE.tar"
    if [ -f "$tarball" ] && [ $(($(stat -c %s "$tarball") + $(stat -c %s "$1"))) -gt $((12 << 20)) ]; then
        BUNDLE=$((BUNDLE + 1))
        tarball="$OUT/bundle_$BUNDLE.tar"
    fi
    tar -C "$(dirname "$1")" -rf "$tarball" "$(basename "$1")" && echo "== $(basename "$1") -> $(basename "$tarball")"
}

if [ "${SMOKE:-0}" != 1 ] && [ "${DEVICE_PROFILE:-1}" = 1 ]; then
    # issue 35: what this GPU reaches per op class by shape (a minute or two), before the captures
    echo "== device profile"
    start=$SECONDS
    timeout -k 10 150 "$PY" -m chakra_convert_fast.profiler.cli device-profile --out "$OUT/device_profile.json"
    echo "== device profile: exit $? after $((SECONDS - start)) s"
fi
# issue 36: Kineto's memory events and the step's max_memory_allocated (the GPU memory table:
# `python -m bench.memory_table` on the unpacked captures; ONLY=mem runs these alone)
capture mem_gpt2_base_bf16_b8 --model gpt2 --size "$SIZE" --precision bf16 --batch-size 8 --profile-memory
capture mem_bert_base_bf16_b8 --model bert --size "$SIZE" --precision bf16 --batch-size 8 --profile-memory

# bf16 (autocast): the arithmetic the roofline's BF16 peak models, at a batch that leaves the GPU
# waiting for the host (8) and one that keeps it busy (32); fp32: the profiler's default
# (the most telling first, should time run short)
capture gpt2_base_bf16_b32 --model gpt2 --size "$SIZE" --precision bf16 --batch-size 32
capture bert_base_bf16_b32 --model bert --size "$SIZE" --precision bf16 --batch-size 32
capture gpt2_base_bf16_b8 --model gpt2 --size "$SIZE" --precision bf16 --batch-size 8
capture bert_base_bf16_b8 --model bert --size "$SIZE" --precision bf16 --batch-size 8
capture gpt2_base_fp32_b4 --model gpt2 --size "$SIZE" --precision fp32 --batch-size 4
# the Kineto trace alone, without shapes: the lightest capture (bench/gpu/overhead.py: what each
# hook costs an op), converted by the Kineto front end; LIGHT_ONLY=1 runs these alone
for cfg in "gpt2 bf16 32" "bert bf16 32" "gpt2 bf16 8" "bert bf16 8" "gpt2 fp32 4"; do
    read -r model precision batch <<<"$cfg"
    capture "kineto_${model}_base_${precision}_b${batch}" --model "$model" --size "$SIZE" --precision "$precision" \
        --batch-size "$batch" --no-host-trace --no-record-shapes --convert
done
# the Kineto trace alone with shapes (what a roofline of a Kineto trace reads)
capture kineto_gpt2_base_bf16_b32_shapes --model gpt2 --size "$SIZE" --precision bf16 --batch-size 32 \
    --no-host-trace --convert
# more memory captures, the GPU kept busy
capture mem_gpt2_base_bf16_b32 --model gpt2 --size "$SIZE" --precision bf16 --batch-size 32 --profile-memory
capture mem_bert_base_bf16_b32 --model bert --size "$SIZE" --precision bf16 --batch-size 32 --profile-memory
left=$((${END:-470} - SECONDS))
if [ "${OVERHEAD:-1}" = 1 ] && [ "$left" -ge 40 ]; then
    echo "== tracing overhead per op"
    timeout -k 5 "$((left < 120 ? left : 120))" "$PY" -m bench.gpu.overhead --json "$OUT/overhead.json"
fi
rm -rf "$WORK"
echo "== done after $SECONDS s"
