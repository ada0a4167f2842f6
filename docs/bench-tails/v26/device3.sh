#!/usr/bin/env bash
# Device call 3 of docs/perf.md v26: the library's band forward (built here into
# .gpu/art26.tar.xz: kd32, nh 2/4/6, every dtype; the store loop with one trip count per CTA)
# against v23's shipped artifacts, the prototype and the kernel as generated, compiled alone
# (gen_tirband.py); then its GPU tests and the tail tests of the same configurations.
#   bash docs/bench-tails/v26/device3.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
rm -rf .artifacts .art26 && tar -xJf .gpu/art.tar.xz && tar -xJf .gpu/art26.tar.xz
export PYTHONPATH=/tmp/site:.
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 240 python3 docs/bench-tails/v26/proto/probe_band_lib.py .artifacts .art26 \
  .gpu "$out/band_lib.json" > "$out/band_lib.log" 2>&1
echo "probe rc=$?"
PSA_TVM_ARTIFACTS=$PWD/.art26 timeout 300 python3 -m pytest -m gpu -q -rs -p no:cacheprovider \
  tests/test_gpu_band.py tests/test_gpu_tails.py -k "kd32" > "$out/test.log" 2>&1
echo "tests rc=$?"
grep -v -i warn "$out/band_lib.log"
tail -15 "$out/test.log"
