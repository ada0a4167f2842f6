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

import dataclasses
import hashlib
import os
import platform
import threading
from dataclasses import dataclass
from pathlib import Path

import tvm

from psa_tvm.compiler.compute import merge_backward, merge_forward
from psa_tvm.compiler.cpu_pairs import pairs_backward, pairs_forward
from psa_tvm.compiler.rules.cpu import CpuTiled
from psa_tvm.compiler.rules.cpu_lines import TARGET_MCPU as LINES_MCPU
from psa_tvm.compiler.rules.cpu_lines import CpuLines
from psa_tvm.compiler.rules.cpu_shuffle import CpuShuffle
from psa_tvm.config import OpConfig
from psa_tvm.runtime.cpu import (
    BACKWARD_SYMBOL,
    CPU_TARGET,
    FORWARD_SYMBOL,
    LINES_SYMBOL,
    forward_vec_symbol,
    pairs_symbol,
    prefetch_symbol,
)
from psa_tvm.runtime.env import cpu_mcpu

_HERE = Path(__file__).parent
POOL_SOURCE = _HERE / "cpu_pool.cc"
RULE = CpuTiled()
# The register-tile transposes: the two kernels of every configuration whose kd is a whole number
# of 128-bit lanes; RULE's kernel set (vec, pairs) only for the others.
SHUFFLE = CpuShuffle()
# The forward with aligned whole-line stores, for x86-64-v4 (AVX-512BW), in the same
# library: the run time takes it only on CPUs that have the instructions (cpu_pool.cc).
LINES = CpuLines()
# Editing the TensorIR, the schedule, the pool or this build must invalidate built libraries
# even without a version bump.
DEFINITION_DIGEST = hashlib.sha1(b"".join(
    path.read_bytes() for path in (_HERE / "compute.py", _HERE / "cpu_pairs.py",
                                   _HERE / "rules" / "cpu.py", _HERE / "rules" / "cpu_shuffle.py",
                                   _HERE / "rules" / "cpu_lines.py", POOL_SOURCE, Path(__file__))
) + (cpu_mcpu() or "").encode()).hexdigest()[:12]


def library_path(config: OpConfig) -> str:
    """Where the library of ``config`` lives inside an artifact directory."""
    return f"{config.tag}/cpu-{DEFINITION_DIGEST}.so"


@dataclass(frozen=True)
class CpuKernelSet:
    """The scheduled CPU kernels of one configuration and the facts that choose among them
    (:meth:`psa_tvm.runtime.cpu.CpuKernels.forward` / ``backward``, and the native library's
    CPU path, make the same choice from these)."""

    funcs: dict  # symbol (``prefix`` + the run time's name) -> scheduled PrimFunc
    forward_vec: int  # > 1: a forward kernel for N % forward_vec == 0
    pairs_forward_vec: int  # > 0 (16-bit): a forward kernel on words for N % (2 * it) == 0
    pairs_backward: bool  # 16-bit: a backward kernel on words for even N
    prefetch: bool = False  # both passes again, prefetching their slice first (large calls)
    # The aligned-line forward (symbol -> PrimFunc), compiled for lines_target(): the
    # run time takes it where psa_tvm_cpu_lines() says so (cpu_pool.cc).
    lines_funcs: dict = dataclasses.field(default_factory=dict)

    @property
    def lines(self) -> bool:
        return bool(self.lines_funcs)


def scheduled_cpu_kernels(config: OpConfig, prefix: str = "") -> CpuKernelSet:
    """Every CPU kernel of ``config``; symbols are ``prefix + FORWARD_SYMBOL`` etc. (see
    :mod:`psa_tvm.runtime.cpu` for the names).

    Where ``cpu_shuffle`` supports ``config`` its two kernels are the generic ones (any ``N``,
    any element-aligned view) and nothing else is built: measured faster than the ``cpu`` rule's
    vec and pairs kernels in every shape, so the run time's choice (the facts below) always
    lands on them, with a second pair that prefetches each slice first, for calls past the
    caches. Otherwise the ``cpu`` rule's kernels and pair kernels."""
    if SHUFFLE.supports(config):
        plain = SHUFFLE.default_params(config)
        variants = [(FORWARD_SYMBOL, "forward", plain), (BACKWARD_SYMBOL, "backward", plain)]
        prefetching = dataclasses.replace(plain, prefetch=True)
        variants += [(prefetch_symbol(pass_), pass_, prefetching)
                     for pass_ in ("forward", "backward")]
        funcs = {prefix + symbol: SHUFFLE.build(pass_, config, params, name=prefix + symbol)
                 for symbol, pass_, params in variants}
        lines_funcs = {}
        if _builds_lines(config):
            name = prefix + LINES_SYMBOL
            lines_funcs[name] = LINES.build(config, LINES.default_params(config), name=name)
        return CpuKernelSet(funcs, 1, 0, False, prefetch=True, lines_funcs=lines_funcs)
    params = RULE.default_params(config)
    kernels = [(FORWARD_SYMBOL, "forward", merge_forward, 1),
               (BACKWARD_SYMBOL, "backward", merge_backward, 1)]
    vec = RULE.forward_vec(config, params)
    if vec > 1:
        kernels.append((forward_vec_symbol(vec), "forward", merge_forward, vec))
    funcs = {}
    for symbol, pass_, compute, width in kernels:
        name = prefix + symbol
        func = compute(config, vec=width, index_dtype="int64", name=name, align=config.itemsize)
        funcs[name] = RULE.apply(func, pass_, config, params, width)
    pairs_vec = _pairs_vec(config)
    if pairs_vec:
        name = prefix + pairs_symbol("forward", pairs_vec)
        funcs[name] = RULE.apply(pairs_forward(config, vec=pairs_vec, name=name), "forward",
                                 config, params, pairs_vec, pairs=True)
        name = prefix + pairs_symbol("backward")
        funcs[name] = RULE.apply(pairs_backward(config, name=name), "backward", config,
                                 params, pairs=True)
    return CpuKernelSet(funcs, vec, pairs_vec, pairs_vec > 0)


def compile_modules(funcs: dict, lines_funcs: dict
                    ) -> tuple[tvm.runtime.Module, tvm.runtime.Module | None]:
    """``funcs`` compiled for :func:`cpu_target` and ``lines_funcs`` (aligned-line forwards)
    for :func:`lines_target`: one LLVM module has one target, so two modules, the second None
    without any line forward. Both the per-configuration libraries (:func:`compile_cpu`) and
    the native library's objects (``psa_tvm.compiler.native.compile_cpu_object``) take them
    from here."""
    main = tvm.compile(tvm.IRModule(funcs), target=cpu_target()).mod
    lines = (tvm.compile(tvm.IRModule(lines_funcs), target=lines_target()).mod
             if lines_funcs else None)
    return main, lines


def compile_cpu(config: OpConfig, path: Path) -> None:
    """Compile both passes for LLVM and export them to ``path`` (a shared library)."""
    kernels = scheduled_cpu_kernels(config)
    module, lines = compile_modules(kernels.funcs, kernels.lines_funcs)
    if lines is not None:
        module.import_module(lines)  # export_library links both objects into one library
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp.so")
    module.export_library(str(tmp), addons=[str(POOL_SOURCE)],
                          options=["-O2", "-pthread", "-ldl"])  # -ldl: dlopen in cpu_pool.cc
    tmp.replace(path)  # atomic: a concurrent reader sees the old file or the whole new one


def build_cpu_library(config: OpConfig, out_dir: Path) -> dict:
    """Build ``config``'s CPU library into ``out_dir``; return its manifest entry."""
    relative = library_path(config)
    compile_cpu(config, out_dir / relative)
    return {"key_dim": config.key_dim, "num_heads": config.num_heads, "dtype": config.dtype,
            "path": relative, "target": str(cpu_target()), "definition": DEFINITION_DIGEST,
            **cpu_facts(config)}


def cpu_facts(config: OpConfig) -> dict:
    """The manifest's facts of ``config``'s CPU kernels (what :func:`scheduled_cpu_kernels`
    builds), without scheduling anything."""
    if SHUFFLE.supports(config):
        return {"forward_vec": 1, "pairs_forward_vec": 0, "pairs_backward": False,
                "prefetch": True, "lines": _builds_lines(config)}
    pairs_vec = _pairs_vec(config)
    return {"forward_vec": RULE.forward_vec(config, RULE.default_params(config)),
            "pairs_forward_vec": pairs_vec, "pairs_backward": pairs_vec > 0, "prefetch": False,
            "lines": False}


def _builds_lines(config: OpConfig) -> bool:
    """Whether ``config``'s library holds the aligned-line forward: x86-64 builds of the
    configurations ``cpu_shuffle`` builds (its callers ask only for those), ``kd`` a whole
    number of 16-byte channel groups."""
    return platform.machine() in ("x86_64", "AMD64") and LINES.supports(config)


def _pairs_vec(config: OpConfig) -> int:
    """Word lanes of the 16-bit pair kernels (0: none; they need 16-bit types and an even kd).
    Measured on this AVX2/AVX-512 host, 16x40x40 float16, same process: 1.6x faster than the
    element kernels in both passes."""
    if config.itemsize != 2 or config.key_dim % 2:
        return 0
    return RULE.default_params(config).vector_bytes // 4


def cpu_target() -> tvm.target.Target:
    """LLVM for ``$PSA_TVM_CPU_MCPU`` (e.g. ``native``), by default x86-64-v3 on x86-64 (AVX2 and
    its gathers: every x86 server CPU since 2015; the library may be built on one machine and
    loaded on another), the generic CPU elsewhere."""
    mcpu = cpu_mcpu()
    if mcpu == "native":
        from tvm.target import codegen

        mcpu = codegen.llvm_get_system_cpu()
    x86 = platform.machine() in ("x86_64", "AMD64")
    if mcpu is None and x86:
        mcpu = "x86-64-v3"
    # PREFETCHW: cpu_shuffle's write prefetch (without it LLVM emits a read prefetch). Every
    # AVX2 CPU but Haswell has it, and there the instruction is a NOP.
    mattr = {"mattr": ["+prfchw"]} if x86 else {}
    return tvm.target.Target({"kind": CPU_TARGET, **({"mcpu": mcpu} if mcpu else {}), **mattr})


def lines_target() -> tvm.target.Target:
    """LLVM for the aligned-line forward: x86-64-v4 (its ``vpermt2w`` needs AVX-512BW)."""
    return tvm.target.Target({"kind": CPU_TARGET, "mcpu": LINES_MCPU, "mattr": ["+prfchw"]})
