# Sourced by this round's device scripts, from the repository root on the GPU host: the wheels
# it lacks (.whl/), one artifact tarball of .gpu/ unpacked, the environment the probes and
# tests read, and the GPU's serial in OUT/gpu.txt.
#   source docs/bench-tails/v38/setup.sh NAME OUT    (NAME: art41, ...)
setup_name=$1 setup_out=$2
mkdir -p "$setup_out"
pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
setup_dir=.artifacts${setup_name#art}
rm -rf "$setup_dir" && tar -xJf ".gpu/$setup_name.tar.xz"
export PYTHONPATH=/tmp/site:. PSA_TVM_ARTIFACTS=$PWD/$setup_dir PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=serial,name --format=csv,noheader > "$setup_out/gpu.txt"
