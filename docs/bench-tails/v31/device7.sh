#!/usr/bin/env bash
# Device call 7 of docs/perf.md v31: as call 5 (device5.sh), the benchmark's CPU section on the
# Xeon, with each round timing psa-tvm right after its copy_ and eager last; twice (OUT/cpu and
# OUTb/cpu: the record's call7/ and call7b/).
#   bash docs/bench-tails/v31/device7.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts31 .artifacts-cpu && tar -xJf .gpu/art31.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts31 PYTHONUNBUFFERED=1
for dir in "$out" "${out}b"; do
  mkdir -p "$dir"
  timeout 100 python3 -m psa_tvm.cli bench --cpu-only --out "$dir/cpu" > "$dir/cpu.log" 2>&1
  echo "cpu rc=$?"
  rm -f "$dir"/cpu/*.png "$dir"/cpu/bench.partial.jsonl "$dir"/cpu/bench.json
done
