"""Shared fixtures.

GPU tests (``@pytest.mark.gpu``) skip unless a CUDA GPU, cuda-python and an artifact directory
(``$PSA_TVM_ARTIFACTS``, built by ``psa-tvm build``) are all present; they use ``gpu_artifacts``.
CPU tests that need a manifest (planning, validation, packing, the TVM-free run time) use
``small_artifacts``, built once per session here (needs TVM and nvcc).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

# JAX (tests/test_native.py) would otherwise take 75% of the GPU's memory when it starts and keep
# it for the rest of the session: a later test that needs tens of GB (the > 2**31-element merge
# in tests/test_gpu.py) then runs out of memory whenever it runs after the JAX test.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from psa_tvm.config import OpConfig

#: What ``small_artifacts`` holds: (config, GPU schedules); CPU libraries for each config too
#: (bfloat16: CPU only, for the native library's CPU kernels).
SMALL_BUILDS = ((OpConfig(32, 4, "float16"), ("rowwise", "tiled")),
                (OpConfig(32, 4, "float32"), ("tiled",)),
                (OpConfig(32, 4, "bfloat16"), ()))
SMALL_ARCHS = ("sm_90",)

# A run-time-only host (the GPU host: no TVM) collects no module that imports the compiler
# at import time; the others skip their compiler tests with importorskip.
def _compiler_importable() -> bool:
    try:
        return importlib.util.find_spec("tvm") is not None
    except ImportError:  # a finder that refuses it
        return False


if not _compiler_importable():
    collect_ignore = ["test_build.py", "test_nvrtc.py", "test_tuned.py"]


def _gpu_skip_reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return "cuda-python is not installed"
    artifacts = os.environ.get("PSA_TVM_ARTIFACTS")
    if not artifacts or not (Path(artifacts) / "manifest.json").is_file():
        return "no artifacts: set PSA_TVM_ARTIFACTS to a `psa-tvm build` directory"
    return None


def pytest_collection_modifyitems(config, items) -> None:
    reason = _gpu_skip_reason()
    if reason is None:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def gpu_artifacts() -> Path:
    """The artifact directory GPU tests run from (``$PSA_TVM_ARTIFACTS``)."""
    return Path(os.environ["PSA_TVM_ARTIFACTS"])


@pytest.fixture(scope="session")
def small_artifacts(tmp_path_factory) -> Path:
    """A small artifact directory (sm_90 GPU builds + CPU libraries) of ``SMALL_BUILDS``."""
    from psa_tvm.compiler.artifact import BuildRequest, build_artifacts

    out = tmp_path_factory.mktemp("small_artifacts")
    requests = [BuildRequest(config, schedule)
                for config, schedules in SMALL_BUILDS for schedule in schedules]
    build_artifacts(requests, out, list(SMALL_ARCHS),
                    cpu_configs=[config for config, _ in SMALL_BUILDS])
    return out


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch) -> None:
    """On-demand builds go to one per-session cache; never the user's. They do not relink the
    cache's native library: the session builds some 30 CPU configurations on demand, and
    relinking after each would add about ten minutes (test_ondemand.py tests the relink)."""
    if "PSA_TVM_CACHE" not in os.environ:
        monkeypatch.setenv("PSA_TVM_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    if "PSA_TVM_NATIVE_ON_DEMAND" not in os.environ:
        monkeypatch.setenv("PSA_TVM_NATIVE_ON_DEMAND", "0")


#: What ``attention_artifacts`` holds: every layout-family op of this configuration (tiled).
ATTENTION_CONFIG = OpConfig(32, 4, "float16")


@pytest.fixture(scope="session")
def attention_artifacts(tmp_path_factory) -> Path:
    """sm_90 builds of every layout-family op (:mod:`psa_tvm.layouts`) for ``ATTENTION_CONFIG``,
    and their native library when a C++ compiler is here."""
    pytest.importorskip("tvm")
    from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
    from psa_tvm.layouts import STREAM_OPS

    out = tmp_path_factory.mktemp("attention_artifacts")
    build_artifacts([BuildRequest(ATTENTION_CONFIG, "tiled", op=op) for op in STREAM_OPS], out,
                    ["sm_90"])
    return out
