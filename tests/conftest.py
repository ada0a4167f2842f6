"""Shared fixtures. GPU tests (``@pytest.mark.gpu``) skip unless a CUDA GPU, cuda-python and an
artifact directory (``$PSA_TVM_ARTIFACTS``, built by ``psa-tvm build``) are all present."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch


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
def artifacts() -> Path:
    return Path(os.environ["PSA_TVM_ARTIFACTS"])


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch) -> None:
    """CPU builds go to one per-session cache; never the user's."""
    if "PSA_TVM_CACHE" not in os.environ:
        monkeypatch.setenv("PSA_TVM_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
