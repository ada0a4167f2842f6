#!/usr/bin/env bash
# v43, one call (the device was refused for most of the session and its budget ran low): the
# N = 33 band candidates (key_dim 128: proto/bands43.py; float32 key_dim 32: v41's b32), the
# sweep of key_dim 128 (this round, without bands at the band grids, v42's) and key_dim 32,
# then the GPU tests of what changed (bands and tails of key_dim 128 and float32 key_dim 32)
# in what time is left of LIMIT seconds.
# Carry [".gpu46"] and the two wheels of .whl/ that are not ultralytics' (the carry limit).
#   LIMIT=580 bash docs/bench-tails/v43/device3.sh OUT
set -uo pipefail
start=$SECONDS
source docs/bench-tails/v43/lib.sh .gpu46 art45 "$1"
for t in old44 nb45 tune43 b32; do tar -xJf .gpu46/$t.tar.xz; done
all="--dtypes float32 float16 bfloat16"
tune_dir .tune43 b128_1x33 90 "16,1,33;32,1,33;64,1,33;128,1,33"
tune_dir .tune41 b32 40 "96,1,33;120,1,33;144,1,33;192,1,33"
python3 docs/bench-tails/v42/proto/rank_bands42.py .tune43 b128_1x33 > "$lib_out/rank_b128_1x33.txt" 2>&1
grep "best\|proposal" "$lib_out/rank_b128_1x33.txt"
sweep kd128_new 60 "$PSA_TVM_ARTIFACTS" --key-dim 128 --heads 8 $all
sweep kd128_noband 40 .artifacts_nb45 --key-dim 128 --heads 8 --grids 20x15 37x29 40x23 $all
sweep kd32_new 120 "$PSA_TVM_ARTIFACTS" --key-dim 32 --heads 2 4 6 $all
sweep kd128_old 60 .artifacts_old44 --key-dim 128 --heads 8 $all
gpu_tests band $(( ${LIMIT:-580} - (SECONDS - start) )) -k "kd128 or (kd32 and float32)"
