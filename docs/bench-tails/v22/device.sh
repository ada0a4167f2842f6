#!/usr/bin/env bash
# The device call of docs/perf.md v22 (a range kernel for the nh 2 16-bit tiled forward), from
# the checkout root:  bash docs/bench-tails/v22/device.sh OUT
# One call (this session had 6.6 device-minutes): the range kernel's GPU test, then the 16-bit
# squares with v21's table (A, .gpu/oldtab) against HEAD's (B), alternated twice.
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
# The artifacts travel as .gpu/art.tar.xz (fatbins, manifests, the native library; no sources).
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -rs tests/test_gpu_tails.py \
  -k "range_kernel" > "$out/range_test.log" 2>&1
echo "range test rc=$?"; tail -n 2 "$out/range_test.log"
for r in 1 2; do
  for side in A B; do
    if [ "$side" = A ]; then export PSA_TVM_SCHEDULES=$PWD/.gpu/oldtab
    else unset PSA_TVM_SCHEDULES; fi
    timeout 60 python3 -m psa_tvm.cli bench --shapes yolo --dtypes float16 bfloat16 \
      --schedules tiled --peers copy --out "$out/sq_${side}$r" > "$out/sq_${side}$r.log" 2>&1
    echo "$side$r rc=$?"
  done
done
python3 scripts/bench_runs.py "$out"/sq_A?/ | tail -n 4
python3 scripts/bench_runs.py "$out"/sq_B?/ | tail -n 4
# A device call brings back only a few files: everything in one archive.
tar -C "$out" -czf "$out.tgz" . && rm -r "$out"
