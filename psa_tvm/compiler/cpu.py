"""The CPU build: the same TensorIR, scheduled by the ``cpu`` rule, compiled for LLVM into a
TVM-FFI shared library.

The library exports ``psa_merge_fwd_cpu(lo, hi, out5, N)`` and ``psa_merge_bwd_cpu(g5, d_lo,
d_hi, N)`` (the merged tensor viewed as ``[B, nh, 2, kd, N]``); the run time loads it with
``tvm_ffi`` alone (:mod:`psa_tvm.runtime.cpu`). Built with ``vec=1`` and int64 indexing, so any
size and any element-aligned view works.

The schedule's parallel loop calls TVM's parallel-for ABI through the pointer
``__TVMBackendParallelLaunch``, which only libtvm_runtime fills in. ``cpu_pool.cc``, linked into
the library, fills it with a small thread pool when the library is loaded without TVM.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import tvm

from psa_tvm.compiler.compute import merge_backward, merge_forward
from psa_tvm.compiler.rules.cpu import CpuTiled
from psa_tvm.config import OpConfig
from psa_tvm.runtime.cpu import BACKWARD_SYMBOL, CPU_TARGET, FORWARD_SYMBOL

_HERE = Path(__file__).parent
POOL_SOURCE = _HERE / "cpu_pool.cc"
RULE = CpuTiled()
# Editing the TensorIR, the schedule, the pool or this build must invalidate built libraries
# even without a version bump.
DEFINITION_DIGEST = hashlib.sha1(b"".join(
    path.read_bytes() for path in (_HERE / "compute.py", _HERE / "rules" / "cpu.py",
                                   POOL_SOURCE, Path(__file__))
)).hexdigest()[:12]


def library_path(config: OpConfig) -> str:
    """Where the library of ``config`` lives inside an artifact directory."""
    return f"{config.tag}/cpu-{DEFINITION_DIGEST}.so"


def compile_cpu(config: OpConfig, path: Path) -> None:
    """Compile both passes for LLVM and export them to ``path`` (a shared library)."""
    params = RULE.default_params(config)
    funcs = {}
    for symbol, pass_, compute in ((FORWARD_SYMBOL, "forward", merge_forward),
                                   (BACKWARD_SYMBOL, "backward", merge_backward)):
        func = compute(config, index_dtype="int64", name=symbol, align=config.itemsize)
        funcs[symbol] = RULE.apply(func, pass_, config, params)
    executable = tvm.compile(tvm.IRModule(funcs), target=CPU_TARGET)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp.so")
    executable.export_library(str(tmp), addons=[str(POOL_SOURCE)],
                              options=["-O2", "-pthread"])
    tmp.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one


def build_cpu_library(config: OpConfig, out_dir: Path) -> dict:
    """Build ``config``'s CPU library into ``out_dir``; return its manifest entry."""
    relative = library_path(config)
    compile_cpu(config, out_dir / relative)
    return {"key_dim": config.key_dim, "num_heads": config.num_heads, "dtype": config.dtype,
            "path": relative, "target": CPU_TARGET, "definition": DEFINITION_DIGEST}
