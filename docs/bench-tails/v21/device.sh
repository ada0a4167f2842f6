#!/usr/bin/env bash
# The device calls of docs/perf.md v21 (the whole-row shifted backward), from the checkout root:
#   bash docs/bench-tails/v21/device.sh STEP OUT       (ab: ROUNDS="1 2" by default)
# STEP: test (every GPU test + the native step), tails (tests/test_gpu_tails.py), sanitize (the whole-row kernel), tune (the whole-row candidates' backwards,
# profiler, two runs), ab (the 16-bit squares, v20's table (A) against HEAD's (B), alternated).
set -uo pipefail
step=$1 out=$2
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
# The artifacts travel as .gpu/art.tar.xz and .gpu/tune.tar.xz (fatbins, manifests, the native
# library; no sources): a carry holds 64 MiB.
rm -rf .artifacts .tune && tar -xJf .gpu/art.tar.xz && tar -xJf .gpu/tune.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
case $step in
  test) bash scripts/gpu_session.sh .artifacts "$out" test native ;;
  tails) timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_gpu_tails.py \
          > "$out/tails.log" 2>&1; echo "tails rc=$?"; tail -n 3 "$out/tails.log" ;;
  sanitize)  # compute-sanitizer over the whole-row kernel, inside and at both ends of its rows
    bash scripts/sanitize.sh --schedules tiled --dtypes float16 bfloat16 --configs "32,4" \
      --shapes "64,20,20;64,21,21;33,1,249;64,1,504;64,1,505" > "$out/sanitize.log" 2>&1
    echo "sanitize rc=$?"; tail -n 5 "$out/sanitize.log" ;;
  tune)
    shapes="16,37,29;64,37,29;64,25,25;64,40,23;64,20,20;32,20,20;64,21,21;16,40,40;64,40,40"
    for r in 1 2; do
      timeout 150 python3 -m psa_tvm.cli tune run --artifacts .tune --profiler \
        --passes backward --reps 10 --shapes "$shapes" > "$out/tune_r$r.log" 2>&1
      cp .tune/results.jsonl "$out/tune_r$r.jsonl"; rm .tune/results.jsonl
    done ;;
  ab)
    for r in ${ROUNDS:-1 2}; do
      for side in A B; do
        if [ "$side" = A ]; then export PSA_TVM_SCHEDULES=$PWD/.gpu/oldtab
        else unset PSA_TVM_SCHEDULES; fi
        timeout 140 python3 -m psa_tvm.cli bench --shapes yolo --dtypes float16 bfloat16 \
          --schedules tiled --peers copy --out "$out/sq_${side}$r" > "$out/sq_${side}$r.log" 2>&1
        echo "$side$r rc=$?"
      done
    done
    python3 scripts/bench_runs.py "$out"/sq_A?/ | tail -n 4
    python3 scripts/bench_runs.py "$out"/sq_B?/ | tail -n 4 ;;
esac
# A device call brings back only a few files: everything in one archive.
tar -C "$out" -czf "$out.tgz" . && rm -r "$out"
