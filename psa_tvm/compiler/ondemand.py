"""Build a missing configuration into an artifact directory when the run time asks for it.

The caller (:func:`psa_tvm.runtime.artifacts.find_build`) holds the directory's build lock. A
build recorded with another :data:`DEFINITION_DIGEST` (an older psa-tvm's) counts as missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from psa_tvm.compiler.artifact import DEFINITION_DIGEST, BuildRequest, build_artifacts
from psa_tvm.compiler.rules import get_rule
from psa_tvm.compiler.shifted import tuned_params
from psa_tvm.config import OpConfig
from psa_tvm.runtime.env import DEFAULT_ARCHS, native_on_demand

__all__ = ["DEFINITION_DIGEST", "build_missing"]


def build_missing(root: Path, config: OpConfig, schedule: str,
                  params: dict[str, Any] | None = None, *, op: str = "merge") -> None:
    """Build ``config`` with ``schedule`` (tuned ``params`` if given) into ``root``."""
    rule = get_rule(schedule)
    shifted = tuned_params(config, DEFAULT_ARCHS) if (op, schedule) == ("merge", "tiled") else None
    request = BuildRequest(config, schedule,
                           rule.params_from_dict(params) if params is not None else None,
                           op=op, shifted_params=shifted)
    build_artifacts([request], root, DEFAULT_ARCHS, native=native_on_demand())
