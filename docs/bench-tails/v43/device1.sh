#!/usr/bin/env bash
# v43 call 1 (H200): the sweep (8-300 MB, both passes, all dtypes, profiler time over a memcpy
# of the same bytes) of
#   - key_dim 128 (8 heads): v42's artifacts (old44) against this round's (art45: the 16-bit
#     shifted backward no longer runs at aligned N, bwd_aligned 0);
#   - key_dim 128 and 64 at the band grids with no band kernels (nb45), against which the bands'
#     call-size caps are read;
#   - key_dim 64 (2 heads) and 32 (2, 4, 6 heads), this round's artifacts (key_dim 32 last swept
#     on an H200 in v40);
# first the band candidates for N = 33 at key_dim 128 (proto/bands43.py, .gpu45a/tune43.tar.xz)
# and v41's for float32 key_dim 32 (b32, timed on an H100 in v42), timed by the profiler and
# ranked against the shipped kernels (build 0).
# Carry [".gpu45a", ".whl"] (art_s45: subset.py's copy of these configurations of art45).
#   bash docs/bench-tails/v43/device1.sh OUT
set -uo pipefail
source docs/bench-tails/v43/lib.sh .gpu45a art_s45 "$1"
for t in old44 nb45; do tar -xJf .gpu45a/$t.tar.xz; done
all="--dtypes float32 float16 bfloat16"
bands="--grids 20x15 37x29 40x23"
for t in tune43 b32; do tar -xJf .gpu45a/$t.tar.xz; done
tune_dir .tune43 b128_1x33 120 "16,1,33;32,1,33;64,1,33;128,1,33"
tune_dir .tune41 b32 60 "96,1,33;120,1,33;144,1,33;192,1,33"
python3 docs/bench-tails/v42/proto/rank_bands42.py .tune43 b128_1x33 > "$lib_out/rank_b128_1x33.txt" 2>&1
grep -h "best\|proposal" "$lib_out"/rank_b*.txt
# the most wanted first: a call cut short by its limit keeps what ran
sweep kd128_new 80 "$PSA_TVM_ARTIFACTS" --key-dim 128 --heads 8 $all
sweep kd128_noband 60 .artifacts_nb45 --key-dim 128 --heads 8 $bands $all
sweep kd32_new 200 "$PSA_TVM_ARTIFACTS" --key-dim 32 --heads 2 4 6 $all
sweep kd128_old 80 .artifacts_old44 --key-dim 128 --heads 8 $all
sweep kd64_new 80 "$PSA_TVM_ARTIFACTS" --key-dim 64 --heads 2 $all
sweep kd64_noband 60 .artifacts_nb45 --key-dim 64 --heads 2 $bands $all
