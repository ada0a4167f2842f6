#!/usr/bin/env bash
# PSA attention on the GPU host, from artifacts built elsewhere (`psa-tvm build --attention`):
# GPU tests (layout kernels, psa_attention, ultralytics models when importable), then the
# attention benchmark. bash scripts/gpu_attention.sh ARTIFACT_DIR OUT_DIR [TEST_S] [BENCH_S]
set -uo pipefail
cd "$(dirname "$0")/.."
art=${1:?artifact directory}; out=${2:?output directory}
test_s=${3:-900}; bench_s=${4:-600}
export PSA_TVM_ARTIFACTS=$art PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
mkdir -p "$out"
status=0
timeout "$test_s" python3 -m pytest -m gpu -q -p no:cacheprovider -rs \
  tests/test_attention_gpu.py tests/test_ultralytics.py tests/test_ddp.py \
  > "$out/pytest.log" 2>&1 || status=1
tail -n 30 "$out/pytest.log"
timeout "$bench_s" python3 -m psa_tvm.tools.bench_attention --out "$out/bench" \
  --budget-s $((bench_s - 30)) > "$out/bench.log" 2>&1 || status=1
tail -n 80 "$out/bench.log"
exit $status
