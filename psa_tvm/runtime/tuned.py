"""Tuned schedule choices: ``<arch>.json`` tables written by ``psa-tvm tune select``.

:func:`tuned_entry` (per pass) and :func:`tuned_shifted_entry` (the shifted kernels of a
configuration, ``"shifted"`` in a table) own the lookup order: a user's table
(``$PSA_TVM_SCHEDULES/<arch>.json``), then the table shipped in the wheel (``schedules/`` in
the source tree), then nothing, which means the schedule rule's defaults.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path

from psa_tvm.config import OpConfig
from psa_tvm.runtime.env import user_schedules_dir

DEFAULT_SCHEDULE = "tiled"


# A checkout run through PYTHONPATH (not installed) has no ``psa_tvm.schedules`` package.
_SOURCE_TREE = Path(__file__).resolve().parents[2] / "schedules"


def shipped_table_path(arch: str) -> Path | None:
    """The tuned table for ``arch`` shipped as package data (``psa_tvm.schedules``), or the
    source tree's ``schedules/`` when running from a checkout that is not installed."""
    try:
        candidate = Path(str(resources.files("psa_tvm.schedules") / f"{arch}.json"))
    except ModuleNotFoundError:
        candidate = _SOURCE_TREE / f"{arch}.json"
    return candidate if candidate.is_file() else None


def table_paths(arch: str) -> list[Path]:
    """Tables searched for ``arch``, first match wins: the user's, then the shipped one."""
    paths = []
    user = user_schedules_dir()
    if user is not None and (user / f"{arch}.json").is_file():
        paths.append(user / f"{arch}.json")
    shipped = shipped_table_path(arch)
    if shipped is not None:
        paths.append(shipped)
    return paths


@lru_cache(maxsize=16)
def _load(path: Path, arch: str) -> dict:
    data = json.loads(path.read_text())
    if data.get("arch") != arch:
        raise ValueError(f"{path}: table is for {data.get('arch')}, expected {arch}")
    return data


def load_table(path: Path, arch: str) -> tuple[dict, ...]:
    """Entries of one tuned table (checked to be for ``arch``)."""
    return tuple(_load(path, arch)["entries"])


def load_shifted(path: Path, arch: str) -> tuple[dict, ...]:
    """The shifted-kernel entries of one tuned table (none in tables before them)."""
    return tuple(_load(path, arch).get("shifted", ()))


def tuned_entry(arch: str, pass_: str, config: OpConfig) -> dict | None:
    """The tuned ``{"schedule", "params", ...}`` for one pass and config; ``None`` means the
    rule's defaults."""
    key = (pass_, config.dtype, config.key_dim, config.num_heads)
    for path in table_paths(arch):
        for entry in load_table(path, arch):
            if (entry["pass"], entry["dtype"], entry["key_dim"], entry["num_heads"]) == key:
                return entry
    return None


#: Shifted-param flags recorded only where set (added after the first tables were written): a
#: record without one means 0, whatever the defaults.
SHIFTED_FLAGS = ("bwd_edge_first", "bwd_small_edge_first", "bwd_whole_edge_first",
                  "bwd_aligned")
#: The fields of an extra backward, recorded only where its switch field is set.
_EXTRA_BACKWARDS = {"bwd_small_": "bwd_small_below", "bwd_whole_": "bwd_whole_tile_n"}


def shifted_record(params: dict[str, int]) -> dict[str, int]:
    """Shifted params as manifests record them (compiler/shifted.py's ``as_record``): the
    split backward's ``bwd_small_*`` fields only where there is a split (``bwd_small_below``),
    the whole-row backward's ``bwd_whole_*`` only where there is one (``bwd_whole_tile_n``),
    the edge-first flags only where set, so a table or manifest from before those fields
    compares equal to today's."""
    absent = tuple(prefix for prefix, switch in _EXTRA_BACKWARDS.items()
                   if not params.get(switch))
    return {k: v for k, v in params.items()
            if not k.startswith(absent) and (k not in SHIFTED_FLAGS or v)}


def tuned_shifted_entry(arch: str, config: OpConfig) -> dict | None:
    """The tuned ``{"params", ...}`` of the shifted kernels of ``config``'s tiled merge builds
    (compiler/shifted.py's ``ShiftedParams``, both passes, as :func:`shifted_record`);
    ``None`` means their defaults."""
    key = (config.dtype, config.key_dim, config.num_heads)
    for path in table_paths(arch):
        for entry in load_shifted(path, arch):
            if (entry["dtype"], entry["key_dim"], entry["num_heads"]) == key:
                return {**entry, "params": shifted_record(entry["params"])}
    return None
