"""Build a missing configuration into an artifact directory when the run time asks for it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from psa_tvm.build.artifact import BuildRequest, build_artifacts
from psa_tvm.build.nvcc import DEFAULT_ARCHS
from psa_tvm.build.rules import get_rule
from psa_tvm.config import OpConfig

_LOCK = threading.Lock()


def build_missing(root: Path, config: OpConfig, schedule: str,
                  params: dict[str, Any] | None = None) -> None:
    """Build ``config`` with ``schedule`` (tuned ``params`` if given) into ``root``."""
    rule = get_rule(schedule)
    request = BuildRequest(config, schedule,
                           rule.params_from_dict(params) if params is not None else None)
    with _LOCK:
        build_artifacts([request], root, DEFAULT_ARCHS)
