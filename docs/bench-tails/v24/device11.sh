#!/usr/bin/env bash
# Device call 11 of docs/perf.md v24: ncu_rows.py with L2 full of dirty lines before each launch
# (`dirty`, ncu --cache-control none): the DRAM traffic the write-back adds.
#   bash docs/bench-tails/v24/device11.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,gpu__time_duration.sum
timeout 200 ncu --csv --cache-control none --metrics "$metrics" -k "regex:psa_merge_fwd|fwd" \
  python3 docs/bench-tails/v24/ncu_rows.py .gpu/sector.so .gpu/proto.so dirty \
  > "$out/ncu_dirty.csv" 2> "$out/ncu_dirty.err"
echo "ncu rc=$?"
tail -2 "$out/ncu_dirty.err"
