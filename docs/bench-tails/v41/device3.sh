#!/usr/bin/env bash
# v41 calls 3 and 4: every GPU test on the rebuilt artifacts, in two calls by file (v40: the
# suite takes some 510 s, more than one call holds with its setup).
#   LIMIT=... bash docs/bench-tails/v41/device3.sh OUT a|b
set -uo pipefail
out=$1 part=$2
mkdir -p .gpu && cp .gpu44/art44.tar.xz .gpu/
source docs/bench-tails/v38/setup.sh art44 "$out"
case $part in
  a) files="tests/test_gpu_tails.py tests/test_gpu_band.py tests/test_gpu.py" ;;
  b) files="tests/test_attention_gpu.py tests/test_ultralytics.py tests/test_native.py
            tests/test_torch_ext.py tests/test_ddp.py tests/test_sweep_batches.py" ;;
esac
start=$(date +%s)
timeout "${LIMIT:-520}" python3 -m pytest -m gpu -q -p no:cacheprovider -rs --durations=12 $files \
  > "$out/test_$part.log" 2>&1
echo "pytest $part rc=$? in $(( $(date +%s) - start )) s"
tail -n 30 "$out/test_$part.log"
