#!/usr/bin/env bash
# Device call 3 of docs/perf.md v31, on the shipped state (the run time picks the prefetching
# kernels from a quarter of the host's L3): v30's CPU libraries (.artifacts-cpu) against v31's
# (.artifacts31) on the GPU host's CPU, ratios per round (cpu_ab31.py) at 16 and 4 threads; the
# CPU section of the benchmark; the native library's C++ example, compute-sanitizer and host
# times (scripts/gpu_session.sh native host).
#   bash docs/bench-tails/v31/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts31 .artifacts-cpu && tar -xJf .gpu/art31.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts31 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)|L2|L3" > "$out/cpu.txt"
python3 -c "
import psa_tvm.runtime.cpu as c, psa_tvm.config as k
print('prefetch from', c.cpu_kernels(k.OpConfig(32, 4, 'float32')).prefetch_bytes, 'bytes')" \
  >> "$out/cpu.txt" 2>&1
for threads in 16 4; do
  timeout 150 python3 docs/bench-tails/v31/cpu_ab31.py --dirs .artifacts-cpu .artifacts31 \
    --threads "$threads" --rounds 11 > "$out/ab_t$threads.txt" 2>&1
  echo "ab t$threads rc=$?"
done
timeout 100 python3 -m psa_tvm.cli bench --cpu-only --out "$out/cpu" > "$out/cpu.log" 2>&1
echo "cpu rc=$?"
rm -f "$out"/cpu/*.png "$out"/cpu/bench.partial.jsonl "$out"/cpu/bench.json
timeout 150 bash scripts/gpu_session.sh .artifacts31 "$out/session" native host 2>&1 | tail -n 12
cat "$out/cpu.txt" "$out/ab_t16.txt"
