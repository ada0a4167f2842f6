"""The CPU path: the same PrimFuncs built for LLVM, cached on disk, called through DLPack.

The forward/backward PrimFuncs are the unscheduled definitions from :mod:`psa_tvm.build.compute`
(``vec=1``, int64 indexing, so any size works), exported as a shared library keyed by
``(op, key_dim, num_heads, dtype, target, psa-tvm version, TVM version)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tvm

from psa_tvm._version import __version__
from psa_tvm.build.compute import merge_backward, merge_forward
from psa_tvm.config import OpConfig
from psa_tvm.runtime.runtime_op import cache_dir

CPU_TARGET = "llvm"
_FORWARD, _BACKWARD = "psa_merge_fwd_cpu", "psa_merge_bwd_cpu"
_LOADED: dict[tuple[OpConfig, Path], CpuKernels] = {}
# Editing the TensorIR must invalidate cached libraries even without a version bump.
_DEFINITION_DIGEST = hashlib.sha1(
    Path(__file__).with_name("compute.py").read_bytes() + Path(__file__).read_bytes()
).hexdigest()[:12]
_LOCK = threading.Lock()


@dataclass(frozen=True)
class CpuKernels:
    """Loaded CPU kernels of one configuration."""

    config: OpConfig
    module: Any
    path: Path
    from_cache: bool  # True when loaded from disk without compiling

    def forward(self, lo: Any, hi: Any, out5: Any, n: int) -> None:
        """``out5`` is the merged output viewed as ``[B, nh, 2, kd, N]``."""
        self.module[_FORWARD](lo, hi, out5, n)

    def backward(self, g5: Any, d_lo: Any, d_hi: Any, n: int) -> None:
        """``g5`` is ``d_merged`` viewed as ``[B, nh, 2, kd, N]``."""
        self.module[_BACKWARD](g5, d_lo, d_hi, n)


def cache_key(config: OpConfig) -> str:
    fields = {"op": "psa_merge", "key_dim": config.key_dim, "num_heads": config.num_heads,
              "dtype": config.dtype, "target": CPU_TARGET, "psa_tvm": __version__,
              "tvm": tvm.__version__, "definition": _DEFINITION_DIGEST}
    digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
    return f"{config.tag}-{digest}"


def compile_cpu(config: OpConfig, path: Path) -> None:
    """Compile both passes for LLVM and export them to ``path`` (a shared library)."""
    mod = tvm.IRModule({
        _FORWARD: merge_forward(config, index_dtype="int64", name=_FORWARD,
                                align=config.itemsize),
        _BACKWARD: merge_backward(config, index_dtype="int64", name=_BACKWARD,
                                  align=config.itemsize),
    })
    executable = tvm.compile(mod, target=CPU_TARGET)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp.so")
    executable.export_library(str(tmp))
    tmp.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one


def cpu_kernels(config: OpConfig, root: Path | None = None) -> CpuKernels:
    """The CPU kernels of ``config``: from memory, else from the disk cache, else compiled."""
    root = root or cache_dir() / "cpu"
    with _LOCK:
        loaded = _LOADED.get((config, root))
        if loaded is not None:
            return loaded
        path = root / f"{cache_key(config)}.so"
        from_cache = path.is_file()
        if not from_cache:
            compile_cpu(config, path)
        loaded = CpuKernels(config, tvm.runtime.load_module(str(path)), path, from_cache)
        _LOADED[(config, root)] = loaded
        return loaded


def clear_memory_cache() -> None:
    """Forget loaded modules (the disk cache stays); for tests."""
    with _LOCK:
        _LOADED.clear()
