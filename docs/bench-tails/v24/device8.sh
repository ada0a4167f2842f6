#!/usr/bin/env bash
# Device call 8 of docs/perf.md v24: DRAM and L2 traffic of the forwards under Nsight Compute.
#   bash docs/bench-tails/v24/device8.sh OUT
set -uo pipefail
out=$1
mkdir -p "$out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
rm -rf .artifacts && tar -xJf .gpu/art.tar.xz
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/.artifacts
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$out/gpu.txt"
metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_write.sum,lts__t_requests_op_write.sum,lts__t_sectors_op_read.sum,gpu__time_duration.sum
timeout 300 ncu --csv --metrics "$metrics" -k "regex:psa_merge_fwd|fwd_sector|fwd_f_|fwd_h_" \
  python3 docs/bench-tails/v24/ncu_rows.py .gpu/sector.so .gpu/proto.so > "$out/ncu.csv" 2> "$out/ncu.err"
rc=$?
echo "ncu rc=$rc"
if [ "$rc" != 0 ]; then  # a metric this ncu does not know: the DRAM ones alone
  timeout 200 ncu --csv --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
    -k "regex:psa_merge_fwd|fwd_sector|fwd_f_|fwd_h_" \
    python3 docs/bench-tails/v24/ncu_rows.py .gpu/sector.so .gpu/proto.so > "$out/ncu.csv" 2> "$out/ncu.err"
  echo "ncu (DRAM only) rc=$?"
fi
grep -v '^==PROF==' "$out/ncu.csv" | grep -E '^"|^case' | cut -c1-300 | head -5
tail -3 "$out/ncu.err"
