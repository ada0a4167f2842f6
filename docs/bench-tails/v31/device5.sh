#!/usr/bin/env bash
# Device call 5 of docs/perf.md v31: the benchmark's CPU section on the GPU host's Xeon with this
# round's benchmark (median of per-round ratios, the kernel each row ran), v31's libraries.
#   bash docs/bench-tails/v31/device5.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts31 .artifacts-cpu && tar -xJf .gpu/art31.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts31 PYTHONUNBUFFERED=1
timeout 200 python3 -m psa_tvm.cli bench --cpu-only --out "$out/cpu" > "$out/cpu.log" 2>&1
echo "cpu rc=$?"
rm -f "$out"/cpu/*.png "$out"/cpu/bench.partial.jsonl "$out"/cpu/bench.json
grep -c "prefetch |" "$out/cpu/bench.md"
