#!/usr/bin/env bash
# Device call 9 of docs/perf.md v24: the sector-exact prototype with one row per warp store
# (proto/sector.cu as committed), timed (probe_sector.py) and under Nsight Compute.
#   bash docs/bench-tails/v24/device9.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 docs/bench-tails/v24/proto/probe_sector.py .gpu/sector.so .gpu/proto.so \
  "$out/sector.json" > "$out/sector.log" 2>&1
echo "probe rc=$?"
grep -v -i warn "$out/sector.log"
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,lts__t_requests_op_write.sum,lts__t_sectors_op_read.sum,gpu__time_duration.sum
timeout 200 ncu --csv --metrics "$metrics" -k "regex:psa_merge_fwd|fwd" \
  python3 docs/bench-tails/v24/ncu_rows.py .gpu/sector.so .gpu/proto.so > "$out/ncu.csv" 2> "$out/ncu.err"
echo "ncu rc=$?"
