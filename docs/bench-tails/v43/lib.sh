# v43: the helpers this round's device scripts source (the review of v42: one helper, not a copy
# of the setup and run lines per script). From the repository root on the GPU host:
#   source docs/bench-tails/v43/lib.sh CARRY NAME OUT   (CARRY/NAME.tar.xz: the artifacts)
# (v44: tar the artifact directory with XZ_OPT=-9e: 6.6 MB where xz's default made 15 MB.)
# sets up as v38/setup.sh does (wheels, PSA_TVM_ARTIFACTS, OUT/gpu.txt) and defines:
#   sweep NAME LIMIT ARTIFACTS ARGS...   scripts/sweep_batches.py to OUT/NAME.{json,log}
#   tune_dir ROOT DIR LIMIT [SHAPES]     scripts/tune.py run (profiler) of ROOT/DIR's candidates,
#                                        to OUT/run_DIR.log and OUT/results_DIR.jsonl; SHAPES
#                                        omitted: ROOT/DIR/timed.txt (v44: written by the build)
#   gpu_tests a|b|band|rest LIMIT [ARGS...]   pytest -m gpu, one half of the files (band: bands
#                                        and tails; rest: all but those), to OUT/test_*.log
lib_carry=$1 lib_name=$2 lib_out=$3
mkdir -p .gpu && cp "$lib_carry/$lib_name.tar.xz" .gpu/
source docs/bench-tails/v38/setup.sh "$lib_name" "$lib_out"

sweep() {
  local name=$1 limit=$2 artifacts=$3; shift 3
  local t0=$SECONDS
  timeout "$limit" python3 scripts/sweep_batches.py --artifacts "$artifacts" "$@" \
    --out "$lib_out/$name.json" > "$lib_out/$name.log" 2>&1
  echo "$name rc=$? $((SECONDS - t0)) s"; grep -A 6 "calls above" "$lib_out/$name.log" | head -n 7
}

tune_dir() {  # resumable: a directory's results.jsonl keeps what a cut-short call timed
  local root=$1 dir=$2 limit=$3 shapes=${4:-$(cat "$1/$2/timed.txt")}
  local t0=$SECONDS
  timeout "$limit" python3 scripts/tune.py run --artifacts "$root/$dir" --profiler \
    --placements 1 --reps 20 --shapes "$shapes" > "$lib_out/run_$dir.log" 2>&1
  echo "$dir rc=$? $((SECONDS - t0)) s $(wc -l < "$root/$dir/results.jsonl") records"
  cp "$root/$dir/results.jsonl" "$lib_out/results_$dir.jsonl"
}

gpu_tests() {  # v40: the whole suite takes some 510 s, more than one call holds with its setup
  local part=$1 limit=$2 files; shift 2
  case $part in
    a) files="tests/test_gpu_tails.py tests/test_gpu_band.py tests/test_gpu.py" ;;
    band) files="tests/test_gpu_band.py tests/test_gpu_tails.py" ;;
    b) files="tests/test_attention_gpu.py tests/test_ultralytics.py tests/test_native.py
              tests/test_torch_ext.py tests/test_ddp.py tests/test_sweep_batches.py" ;;
    rest) files="tests/test_gpu.py tests/test_attention_gpu.py tests/test_ultralytics.py
                 tests/test_native.py tests/test_torch_ext.py tests/test_ddp.py
                 tests/test_sweep_batches.py" ;;
  esac
  local t0=$SECONDS
  timeout "$limit" python3 -m pytest -m gpu -q -p no:cacheprovider -rs --durations=12 "$@" $files \
    > "$lib_out/test_$part.log" 2>&1
  echo "pytest $part rc=$? in $((SECONDS - t0)) s"; tail -n 30 "$lib_out/test_$part.log"
}
