#!/usr/bin/env bash
# Device call 7 of docs/perf.md v32: the C++ example, compute-sanitizer and host times on this
# round's native library; the benchmark's CPU section on the Xeon twice (16 threads).
#   bash docs/bench-tails/v32/device7.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts32 && tar -xJf .gpu/art32.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts32 PYTHONUNBUFFERED=1
timeout 130 bash scripts/gpu_session.sh .artifacts32 "$out/session" native host 2>&1 | tail -n 12
for dir in "$out/bench1" "$out/bench2"; do
  mkdir -p "$dir"
  timeout 100 python3 -m psa_tvm.cli bench --cpu-only --out "$dir/cpu" > "$dir/cpu.log" 2>&1
  echo "cpu rc=$?"
  rm -f "$dir"/cpu/*.png "$dir"/cpu/bench.partial.jsonl "$dir"/cpu/bench.json
done
