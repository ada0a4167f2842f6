"""Tuned schedule choices shipped in ``schedules/<arch>.json`` (written by ``scripts/tune.py``)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from psa_tvm.config import OpConfig

DEFAULT_SCHEDULE = "tiled"
_SOURCE_TREE = Path(__file__).resolve().parents[2] / "schedules"


def table_path(arch: str) -> Path | None:
    """The tuned table for ``arch``: installed package data, else the source tree's."""
    try:
        candidate = Path(str(resources.files("psa_tvm.schedules") / f"{arch}.json"))
        if candidate.is_file():
            return candidate
    except ModuleNotFoundError:
        pass
    candidate = _SOURCE_TREE / f"{arch}.json"
    return candidate if candidate.is_file() else None


@lru_cache(maxsize=16)
def load_table(arch: str) -> tuple[dict, ...]:
    """Entries of the tuned table for ``arch`` (empty when nothing was tuned)."""
    path = table_path(arch)
    if path is None:
        return ()
    data = json.loads(path.read_text())
    if data.get("arch") != arch:
        raise ValueError(f"{path}: table is for {data.get('arch')}, expected {arch}")
    return tuple(data["entries"])


def tuned_entry(arch: str, pass_: str, config: OpConfig) -> dict | None:
    """The tuned ``{"schedule", "params", ...}`` for one pass and config, or ``None``."""
    for entry in load_table(arch):
        if (entry["pass"], entry["dtype"], entry["key_dim"], entry["num_heads"]) == (
                pass_, config.dtype, config.key_dim, config.num_heads):
            return entry
    return None
