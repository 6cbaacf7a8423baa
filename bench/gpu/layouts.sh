#!/usr/bin/env bash
# Layout captures on a machine with a core per rank (the GPU machine's 16 CPU cores, gloo): the
# CPU captures of bench/layouts_proof.py without this project's 2-core oversubscription, so that
# a scaled job's simulated step can be held against a real capture's measured one (issue 25).
#   OUT=/tmp/out bash bench/gpu/layouts.sh      # after bench/gpu/wheels.sh, as capture.sh
# -> OUT/layouts.tar.gz: CASE/job.<rank>.et, job.comm_group.json, job.layout.json, job_summary.json
set -uo pipefail
OUT=${OUT:?OUT: the folder the results go to}
PY=${PY:-python3}
WORK=$(mktemp -d)
mkdir -p "$OUT"
exec > >(tee "$OUT/layouts.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
if [ "${SMOKE:-0}" != 1 ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
SIZE=${SIZE:-small}
nproc 2>/dev/null | sed 's/^/cores: /'
for spec in "ddp_np2:2:" "ddp_np8:8:" "fsdp_np2:2:--dp fsdp" "fsdp_np8:8:--dp fsdp" "tp2ddp_np4:4:--tp 2" "tp2ddp_np8:8:--tp 2"; do
    IFS=: read -r name ranks options <<<"$spec"
    case="small_$name"
    if [ "$SECONDS" -gt "${DEADLINE:-300}" ]; then echo "== $case: skipped, $SECONDS s spent"; continue; fi
    echo "== $case"
    start=$SECONDS
    # shellcheck disable=SC2086  # the layout options are words
    timeout -k 10 90 "$PY" -m chakra_convert_fast.profiler.cli --model gpt2 --size "$SIZE" --nproc "$ranks" $options \
        --device cpu --threads 1 --steps 3 --wait 1 --name job --convert --outdir "$WORK/$case" 2>&1 |
        grep -v '^\[rank0\] step\|Warning\|warn(\|USDT\|execution_trace_observer'
    echo "== $case: exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"
    rm -f "$WORK/$case"/*_rank*_host.json "$WORK/$case"/*_rank*_device.json  # the .et files are what the proof reads
done
tar -C "$WORK" -czf "$OUT/layouts.tar.gz" . && ls -l "$OUT/layouts.tar.gz"
rm -rf "$WORK"
