#!/usr/bin/env bash
# Device call 8 of docs/perf.md v33, on the final artifacts (the line forward for float32 too,
# on calls of at most 8 MiB): its choice and exactness in both launch paths (lines_check.py);
# v32's float32 CPU libraries against v33's in one process; the benchmark's CPU section twice.
#   bash docs/bench-tails/v33/device8.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts32 .artifacts33 && tar -xJf .gpu/art32.tar.xz && tar -xJf .gpu/art33.tar.xz
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1
timeout 150 python3 docs/bench-tails/v33/lines_check.py .artifacts33 > "$out/lines_check.txt" 2>&1
echo "lines_check rc=$? $(tail -n 1 "$out/lines_check.txt")"
timeout 80 python3 docs/bench-tails/v31/cpu_ab31.py --dirs .artifacts32 .artifacts33 \
  --threads 16 --rounds 15 --dtypes float32 > "$out/ab_f32_t16.txt" 2>&1
echo "ab rc=$?"
export PSA_TVM_ARTIFACTS=$PWD/.artifacts33
for run in 1 2; do
  timeout 100 python3 -m psa_tvm.cli bench --cpu-only --out /tmp/bench$run > "$out/bench$run.log" 2>&1
  echo "cpu bench $run rc=$?"
done
cat "$out/ab_f32_t16.txt"
