#!/usr/bin/env bash
# v44, second call: the GPU tests that device4.sh (v43) does not run (test_gpu.py and the files
# of half b, ultralytics' included), then the sweep of key_dim 32 at 2/4/6 heads, all dtypes,
# in what is left of LIMIT seconds. The artifacts are device4.sh's (art47).
# Carry [".gpu47", ".whl"].
#   LIMIT=560 bash docs/bench-tails/v44/device5.sh OUT
set -uo pipefail
start=$SECONDS
source docs/bench-tails/v43/lib.sh .gpu47 art47 "$1"
gpu_tests rest $(( ${LIMIT:-560} - (SECONDS - start) - 150 ))
sweep kd32_all $(( ${LIMIT:-560} - (SECONDS - start) )) "$PSA_TVM_ARTIFACTS" --key-dim 32 \
  --heads 2 4 6 --dtypes float32 float16 bfloat16
