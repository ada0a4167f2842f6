"""The CPU build: the same TensorIR compiled for LLVM into a TVM-FFI shared library.

The library exports ``psa_merge_fwd_cpu(lo, hi, out5, N)`` and ``psa_merge_bwd_cpu(g5, d_lo,
d_hi, N)`` (the merged tensor viewed as ``[B, nh, 2, kd, N]``); the run time loads it with
``tvm_ffi`` alone (:mod:`psa_tvm.runtime.cpu`). Built with ``vec=1`` and int64 indexing, so any
size and any element-aligned view works.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import tvm

from psa_tvm.compiler.compute import merge_backward, merge_forward
from psa_tvm.config import OpConfig
from psa_tvm.runtime.cpu import BACKWARD_SYMBOL, CPU_TARGET, FORWARD_SYMBOL

# Editing the TensorIR or this build must invalidate built libraries even without a version bump.
DEFINITION_DIGEST = hashlib.sha1(
    Path(__file__).with_name("compute.py").read_bytes() + Path(__file__).read_bytes()
).hexdigest()[:12]


def library_path(config: OpConfig) -> str:
    """Where the library of ``config`` lives inside an artifact directory."""
    return f"{config.tag}/cpu-{DEFINITION_DIGEST}.so"


def compile_cpu(config: OpConfig, path: Path) -> None:
    """Compile both passes for LLVM and export them to ``path`` (a shared library)."""
    mod = tvm.IRModule({
        FORWARD_SYMBOL: merge_forward(config, index_dtype="int64", name=FORWARD_SYMBOL,
                                      align=config.itemsize),
        BACKWARD_SYMBOL: merge_backward(config, index_dtype="int64", name=BACKWARD_SYMBOL,
                                        align=config.itemsize),
    })
    executable = tvm.compile(mod, target=CPU_TARGET)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp.so")
    executable.export_library(str(tmp))
    tmp.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one


def build_cpu_library(config: OpConfig, out_dir: Path) -> dict:
    """Build ``config``'s CPU library into ``out_dir``; return its manifest entry."""
    relative = library_path(config)
    compile_cpu(config, out_dir / relative)
    return {"key_dim": config.key_dim, "num_heads": config.num_heads, "dtype": config.dtype,
            "path": relative, "target": CPU_TARGET, "definition": DEFINITION_DIGEST}
