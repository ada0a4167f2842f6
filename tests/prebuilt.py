"""A small artifact directory (built once per test session, sm_90 only) for the CPU-only tests
of the RuntimeOp: planning, validation and argument packing need a manifest, not a GPU."""

from __future__ import annotations

from pathlib import Path

from psa_tvm.config import OpConfig

SMALL_CONFIGS = (OpConfig(32, 4, "float16"), OpConfig(32, 4, "float32"))
SMALL_ARCHS = ("sm_90",)
_BUILT: dict[str, Path] = {}


def small_artifacts(tmp_path_factory) -> Path:
    """``OpConfig(32, 4, float16)`` (seed and tiled) and ``OpConfig(32, 4, float32)`` (tiled)."""
    key = str(tmp_path_factory.getbasetemp())
    if key not in _BUILT:
        from psa_tvm.build.artifact import BuildRequest, build_artifacts

        out = tmp_path_factory.mktemp("small_artifacts")
        requests = [BuildRequest(SMALL_CONFIGS[0], "seed"), BuildRequest(SMALL_CONFIGS[0], "tiled"),
                    BuildRequest(SMALL_CONFIGS[1], "tiled")]
        build_artifacts(requests, out, list(SMALL_ARCHS))
        _BUILT[key] = out
    return _BUILT[key]
