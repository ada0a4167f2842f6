"""The NVRTC fallback (no nvcc): cubins per arch with ptxas reports, where NVRTC is installed
(`pip install 'psa-tvm[nvrtc]'`) and CUDA/CCCL headers are found."""

from __future__ import annotations

import pytest

from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
from psa_tvm.compiler.nvcc import cuda_include_dirs
from psa_tvm.config import OpConfig
from psa_tvm.runtime.manifest import Manifest


def _nvrtc_usable() -> bool:
    try:
        from cuda.bindings import nvrtc

        return nvrtc.nvrtcVersion()[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    except Exception:
        return False


@pytest.mark.skipif(not _nvrtc_usable() or not cuda_include_dirs(),
                    reason="NVRTC or CUDA headers not available")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_nvrtc_builds_cubins_for_each_arch(tmp_path, dtype):
    config = OpConfig(32, 4, dtype)
    build_artifacts([BuildRequest(config, "tiled")], tmp_path, ["sm_80", "sm_90"],
                    compiler="nvrtc")
    build = Manifest.load(tmp_path).find(config, "tiled")
    assert sorted(b.archs[0] for b in build.binaries) == ["sm_80", "sm_90"]
    for binary in build.binaries:
        data = binary.path.read_bytes()
        assert binary.format == "cubin" and data[:4] == b"\x7fELF"
    for kernel in build.kernels:
        assert set(kernel.resources) == {"sm_80", "sm_90"}
        assert kernel.resources["sm_90"]["spill_stores"] == 0
    assert build.binary_for("sm_90").path.name.endswith("sm_90.cubin")
    assert build.binary_for("sm_86").path.name.endswith("sm_80.cubin")
