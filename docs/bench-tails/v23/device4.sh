#!/usr/bin/env bash
# Device call 4 of docs/perf.md v23: the benchmark (every dtype, squares and tails) with the floor
# copied between the kernel's own buffers, three placements per row; v22's table (A, .gpu/oldtab)
# against HEAD's (B, the nh 6 16-bit forwards), alternated twice; then HEAD's once with v22's
# method (a copy between buffers of its own, one placement).
#   bash docs/bench-tails/v23/device4.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
for r in 1 2; do
  for side in A B; do
    if [ "$side" = A ]; then export PSA_TVM_SCHEDULES=$PWD/.gpu/oldtab
    else unset PSA_TVM_SCHEDULES; fi
    timeout 130 python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
      --placements 3 --out "$out/all_${side}$r" > "$out/all_${side}$r.log" 2>&1
    echo "$side$r rc=$?"
  done
done
timeout 60 python3 -m psa_tvm.cli bench --shapes all --schedules tiled --peers copy \
  --copy-buffers own --placements 1 --out "$out/all_own_B" > "$out/all_own_B.log" 2>&1
echo "own rc=$?"
for d in "$out"/all_A? "$out"/all_B? "$out"/all_own_B; do
  python3 scripts/bench_runs.py "$d" | tail -n 1
done
python3 scripts/bench_runs.py "$out"/all_B? | tail -n 1
tar -C "$out" -czf "$out.tgz" . && rm -r "$out"
