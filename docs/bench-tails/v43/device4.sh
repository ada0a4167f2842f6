#!/usr/bin/env bash
# v43, last call: the artifacts with key_dim 128's N = 33 bands and its float32 20x15 band
# backward capped at 16 batches (art47): the GPU tests of bands and tails for what changed
# (key_dim 128, float32 key_dim 32), the sweep of key_dim 128, then the other configurations'
# tests in what time is left of LIMIT seconds.
# Carry [".gpu47"] and the two wheels of .whl/ that are not ultralytics' (the carry limit).
#   LIMIT=380 bash docs/bench-tails/v43/device4.sh OUT
set -uo pipefail
start=$SECONDS
source docs/bench-tails/v43/lib.sh .gpu47 art47 "$1"
all="--dtypes float32 float16 bfloat16"
changed="kd128 or (kd32 and float32)"
gpu_tests band $(( ${LIMIT:-380} - (SECONDS - start) - 25 )) -k "$changed"
mv "$lib_out/test_band.log" "$lib_out/test_band_changed.log"
sweep kd128_final 25 "$PSA_TVM_ARTIFACTS" --key-dim 128 --heads 8 $all
gpu_tests band $(( ${LIMIT:-380} - (SECONDS - start) )) -k "not ($changed)"
