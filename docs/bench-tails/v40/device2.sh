#!/usr/bin/env bash
# Device calls 2 and 3 of docs/perf.md v40: every GPU test on this round's artifacts, in two
# calls (the whole suite ran past 470 s on one H200, more than a call can hold with its setup).
#   bash docs/bench-tails/v40/device2.sh OUT a|b
set -uo pipefail
out=$1 part=$2
source docs/bench-tails/v38/setup.sh art43 "$out"
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
