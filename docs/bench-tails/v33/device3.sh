#!/usr/bin/env bash
# Device call 3 of docs/perf.md v33, on this round's artifacts (v30's GPU builds, v33's CPU
# libraries with the aligned-line forward and the native library): the line forward's choice and
# exactness in both launch paths on the Xeon (lines_check.py); v32's CPU libraries against v33's
# in one process, twice (v31/cpu_ab31.py, 16 threads); the benchmark's CPU section twice; the
# C++ example, compute-sanitizer and host times.
#   bash docs/bench-tails/v33/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts32 .artifacts33 && tar -xJf .gpu/art32.tar.xz && tar -xJf .gpu/art33.tar.xz
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
timeout 200 python3 docs/bench-tails/v33/lines_check.py .artifacts33 2>&1 | tail -n 30 \
  | tee "$out/lines_check.txt"
for run in 1 2; do
  timeout 150 python3 docs/bench-tails/v31/cpu_ab31.py --dirs .artifacts32 .artifacts33 \
    --threads 16 --rounds 15 --dtypes float16 bfloat16 > "$out/ab_t16_run$run.txt" 2>&1
  echo "ab run $run rc=$?"
done
export PSA_TVM_ARTIFACTS=$PWD/.artifacts33
for dir in "$out/bench1" "$out/bench2"; do
  mkdir -p "$dir"
  timeout 100 python3 -m psa_tvm.cli bench --cpu-only --out "$dir/cpu" > "$dir/cpu.log" 2>&1
  echo "cpu rc=$?"
  rm -f "$dir"/cpu/*.png "$dir"/cpu/bench.partial.jsonl "$dir"/cpu/bench.json
done
timeout 130 bash scripts/gpu_session.sh .artifacts33 "$out/session" native host 2>&1 | tail -n 12
cat "$out"/ab_t16_run*.txt
