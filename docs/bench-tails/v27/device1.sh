#!/usr/bin/env bash
# Device call 1 of docs/perf.md v27: band forwards at N = 1065-1080 (gen_band27.py, built here
# into .gpu/band27.so) against the shipped artifacts (.gpu/art26full.tar.xz, v26's), then the
# CPU benchmark on this host's CPU (all cores, then 2 threads).
#   bash docs/bench-tails/v27/device1.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts && tar -xJf .gpu/art26full.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
{ nvidia-smi --query-gpu=serial,name --format=csv,noheader; nproc; lscpu | grep -E "Model name|L3"; } > "$out/gpu.txt"
timeout 330 python3 docs/bench-tails/v27/proto/probe27.py .artifacts .gpu/band27.so \
  "$out/band27.json" > "$out/band27.log" 2>&1
echo "probe rc=$?"
timeout 90 python3 -m psa_tvm.cli bench --cpu-only --out "$out/cpu_all" > "$out/cpu_all.log" 2>&1
echo "cpu all rc=$?"
timeout 90 python3 -m psa_tvm.cli bench --cpu-only --cpu-threads 2 --out "$out/cpu_2" \
  > "$out/cpu_2.log" 2>&1
echo "cpu 2 rc=$?"
rm -f "$out"/cpu_*/*.png "$out"/cpu_*/*.json
cat "$out/gpu.txt"
grep -v -i warn "$out/band27.log"
