"""The CPU path at run time: load a configuration's LLVM-built library with ``tvm_ffi``. No TVM.

Libraries come from the artifact directory's manifest (``psa-tvm build`` writes them). Where
the compiler is installed and the default directory lacks one, it is built there on demand
(check, lock, check again, build, load).
"""

from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psa_tvm.config import OpConfig
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.runtime import cpu_pool, env
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime.artifacts import build_lock
from psa_tvm.runtime.manifest import CpuLibrarySpec, Manifest

CPU_TARGET = "llvm"
FORWARD_SYMBOL, BACKWARD_SYMBOL = "psa_merge_fwd_cpu", "psa_merge_bwd_cpu"
#: The forward with aligned whole-line stores (x86-64-v4; compiler/rules/cpu_lines.py).
LINES_SYMBOL = f"{FORWARD_SYMBOL}_lines"
#: Where the aligned-line forward runs (:func:`takes_lines`), measured on the Xeon (docs/perf.md
#: v33, 16 threads): rows that are not whole 64-byte lines (where they are, N 192 and 1600 at
#: 16 bits, the generic kernel's 32-byte stores never split a line and it ran level or up to
#: 0.15 lower), N >= 64 (at N 33 the line kernel's overlapping first and last blocks cost more
#: than the splits, 0.02-0.12), and for float32 only calls whose merged tensor has at most
#: LINES_FLOAT32_MAX_BYTES (20x15/b16, 4.9 MB: 1.83 -> 1.28 and 1.88 -> 1.36 a copy_; from
#: 15 MB up it ran up to 0.2 higher than the generic kernel).
LINES_MIN_N = 64
LINES_FLOAT32_MAX_BYTES = 8 << 20


def takes_lines(n: int, itemsize: int, merged_bytes: int) -> bool:
    """Whether a forward of ``N = n`` (elements of ``itemsize`` bytes, a merged tensor of
    ``merged_bytes``) takes the aligned-line kernel, on a CPU that runs it
    (:func:`psa_tvm.runtime.cpu_pool.lines`) and a library that has it."""
    return (n >= LINES_MIN_N and n % (64 // itemsize) != 0
            and (itemsize == 2 or merged_bytes <= LINES_FLOAT32_MAX_BYTES))


def forward_vec_symbol(vec: int) -> str:
    """The forward kernel for ``N = NV * vec`` (``NV`` is its last argument)."""
    return f"{FORWARD_SYMBOL}_v{vec}"


def pairs_symbol(pass_: str, vec: int = 1) -> str:
    """A 16-bit kernel on 32-bit words (element pairs): forward for ``N = 2 * NV * vec``,
    backward for ``N = 2 * NP``."""
    return (f"{FORWARD_SYMBOL}_pairs_v{vec}" if pass_ == "forward"
            else f"{BACKWARD_SYMBOL}_pairs")


def prefetch_symbol(pass_: str) -> str:
    """The generic kernel of ``pass_`` that prefetches each task's slice first (any ``N``)."""
    return f"{FORWARD_SYMBOL if pass_ == 'forward' else BACKWARD_SYMBOL}_prefetch"


def _as_words(t: Any) -> Any:
    """The same memory as 32-bit words (pairs of 16-bit elements), or ``None`` where the view
    does not exist (odd last dimension, data not 4-byte aligned, not torch/numpy)."""
    try:
        if type(t).__module__.split(".")[0] == "torch":
            import torch

            return t.view(torch.int32)
        if type(t).__module__.split(".")[0] == "numpy":
            import numpy

            return t.view(numpy.int32)
    except (RuntimeError, ValueError, TypeError):
        return None
    return None
_LOADED: dict[tuple[OpConfig, Path], CpuKernels] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class CpuKernels:
    """Loaded CPU kernels of one configuration."""

    config: OpConfig
    library: CpuLibrarySpec
    forward_fn: Any
    backward_fn: Any
    forward_vec_fn: Any = None  # N = NV * library.forward_vec: vector stores without a tail test
    pairs_forward_fn: Any = None  # 16-bit: on 32-bit words, N = 2 * NV * pairs_forward_vec
    pairs_backward_fn: Any = None  # 16-bit: on 32-bit words, N even
    forward_prefetch_fn: Any = None  # the generic kernels, prefetching each slice first
    backward_prefetch_fn: Any = None
    prefetch_bytes: int = 0  # calls with a merged tensor of this many bytes take them (0: none)
    forward_lines_fn: Any = None  # the aligned-line forward, where this CPU should run it

    def forward(self, lo: Any, hi: Any, out5: Any, n: int) -> None:
        """``out5`` is the merged output viewed as ``[B, nh, 2, kd, N]``."""
        kind, _, arg, words = self._forward_plan(lo, hi, out5, n)
        if kind == "pairs":
            self.pairs_forward_fn(*words, arg)
        elif kind == "vec":
            self.forward_vec_fn(lo, hi, out5, arg)
        elif kind == "prefetch":
            self.forward_prefetch_fn(lo, hi, out5, arg)
        elif kind == "lines":
            self.forward_lines_fn(lo, hi, out5, arg)
        else:
            self.forward_fn(lo, hi, out5, arg)

    def backward(self, g5: Any, d_lo: Any, d_hi: Any, n: int) -> None:
        """``g5`` is ``d_merged`` viewed as ``[B, nh, 2, kd, N]``."""
        kind, _, arg, words = self._backward_plan(g5, d_lo, d_hi, n)
        if kind == "pairs":
            self.pairs_backward_fn(*words, arg)
        elif kind == "prefetch":
            self.backward_prefetch_fn(g5, d_lo, d_hi, arg)
        else:
            self.backward_fn(g5, d_lo, d_hi, arg)

    def _merged_bytes(self, merged: Any) -> int:
        """Bytes of ``merged`` (the ``[B, nh, 2, kd, N]`` tensor), by shape: torch tensors,
        numpy arrays and other DLPack producers alike."""
        return math.prod(merged.shape) * self.config.itemsize

    def _prefetches(self, merged_bytes: int, has_kernel: bool) -> bool:
        """Whether a call on a merged tensor of ``merged_bytes`` takes the prefetching kernel:
        the library has it and the tensor reaches :attr:`prefetch_bytes`."""
        return has_kernel and 0 < self.prefetch_bytes <= merged_bytes

    def plan_forward(self, lo: Any, hi: Any, out5: Any, n: int) -> tuple[str, str, int]:
        """``(kind, symbol, last argument)`` that :meth:`forward` would run."""
        return self._forward_plan(lo, hi, out5, n)[:3]

    def plan_backward(self, g5: Any, d_lo: Any, d_hi: Any, n: int) -> tuple[str, str, int]:
        """``(kind, symbol, last argument)`` that :meth:`backward` would run."""
        return self._backward_plan(g5, d_lo, d_hi, n)[:3]

    def _forward_plan(self, lo: Any, hi: Any, out5: Any, n: int) -> tuple:
        pairs_vec = self.library.pairs_forward_vec if self.pairs_forward_fn is not None else 0
        words = None
        if pairs_vec and n % (2 * pairs_vec) == 0:
            words = _all_words((lo, hi, out5))
        vec = self.library.forward_vec if self.forward_vec_fn is not None else 1
        merged_bytes = self._merged_bytes(out5)
        prefetch = self._prefetches(merged_bytes, self.forward_prefetch_fn is not None)
        lines = self.forward_lines_fn is not None and takes_lines(
            n, self.config.itemsize, merged_bytes)
        return (*forward_choice(vec, pairs_vec, n, words is not None, prefetch, lines), words)

    def _backward_plan(self, g5: Any, d_lo: Any, d_hi: Any, n: int) -> tuple:
        words = None
        if self.pairs_backward_fn is not None and n % 2 == 0:
            words = _all_words((g5, d_lo, d_hi))
        prefetch = self._prefetches(self._merged_bytes(g5), self.backward_prefetch_fn is not None)
        return (*backward_choice(self.pairs_backward_fn is not None, n, words is not None,
                                 prefetch), words)


def _all_words(tensors: tuple) -> list | None:
    words = [_as_words(t) for t in tensors]
    return words if all(w is not None for w in words) else None


def forward_choice(forward_vec: int, pairs_forward_vec: int, n: int, words: bool,
                   prefetch: bool = False, lines: bool = False) -> tuple[str, str, int]:
    """``(kind, symbol, last argument)`` of the forward kernel for ``N = n``: ``"pairs"`` (16-bit
    on 32-bit words: ``pairs_forward_vec > 0``, ``N % (2 * pairs_forward_vec) == 0`` and
    ``words``, i.e. every tensor has an ``int32`` view: 4-byte aligned data), else ``"vec"``
    (``forward_vec > 1`` and ``N % forward_vec == 0``), else ``"prefetch"`` (``prefetch``: the
    library has the prefetching kernels and the merged tensor reaches the host's
    ``psa_tvm_cpu_prefetch_bytes``), else ``"lines"`` (``lines``: the library has the
    aligned-line forward, this CPU should run it, ``psa_tvm_cpu_lines``, and the call is one
    :func:`takes_lines` picks), else ``"generic"``. The native library's CPU path makes the
    same choice (``plan_cpu_forward``)."""
    if pairs_forward_vec and n % (2 * pairs_forward_vec) == 0 and words:
        return "pairs", pairs_symbol("forward", pairs_forward_vec), n // (2 * pairs_forward_vec)
    if forward_vec > 1 and n % forward_vec == 0:
        return "vec", forward_vec_symbol(forward_vec), n // forward_vec
    if prefetch:
        return "prefetch", prefetch_symbol("forward"), n
    if lines:
        return "lines", LINES_SYMBOL, n
    return "generic", FORWARD_SYMBOL, n


def backward_choice(pairs_backward: bool, n: int, words: bool,
                    prefetch: bool = False) -> tuple[str, str, int]:
    """As :func:`forward_choice` for the backward pass: ``"pairs"`` for even ``N`` with
    ``int32`` views, else ``"prefetch"``, else ``"generic"``."""
    if pairs_backward and n % 2 == 0 and words:
        return "pairs", pairs_symbol("backward"), n // 2
    if prefetch:
        return "prefetch", prefetch_symbol("backward"), n
    return "generic", BACKWARD_SYMBOL, n


def _current(root: Path, config: OpConfig, definition: str | None) -> CpuLibrarySpec | None:
    try:
        library = Manifest.load(root).find_cpu(config)
    except ArtifactNotFoundError:
        return None
    if definition is not None and library.definition != definition:
        return None  # built from another TensorIR: rebuild where the compiler is here
    return library if library.path.is_file() else None


def find_cpu_library(config: OpConfig, root: Path | None = None) -> CpuLibrarySpec:
    """The CPU library of ``config`` in ``root`` (default: the run time's artifact directory),
    built there first when it is the default directory and the compiler is installed."""
    may_build = root is None and env.artifacts_override() is None
    root = root or env.default_artifacts_dir()
    if not may_build:
        return Manifest.load(root).find_cpu(config)
    try:
        from psa_tvm.compiler.artifact import build_artifacts
        from psa_tvm.compiler.cpu import DEFINITION_DIGEST
    except ImportError as err:
        library = _current(root, config, None)
        if library is not None:
            return library
        raise ArtifactNotFoundError(
            f"no CPU library for {config.tag} in {root}, and building it here needs the "
            f"compiler ({err}): `pip install 'psa-tvm[compiler]'`, or build it elsewhere with "
            f"`psa-tvm build --target cpu --key-dim {config.key_dim} --num-heads "
            f"{config.num_heads} --dtype {config.dtype} -o DIR` and set PSA_TVM_ARTIFACTS=DIR"
        ) from err
    library = _current(root, config, DEFINITION_DIGEST)
    relink = False
    if library is None:
        with build_lock(root):
            library = _current(root, config, DEFINITION_DIGEST)
            if library is None:
                # Built as an on-demand GPU build is (compiler/ondemand.py), native library
                # included, so that calls go straight to C++: the Python path costs 20-45 us a
                # call in validation and dispatch, more than the copy_ of a whole 1-4 MB call
                # (docs/perf.md v39).
                relink = env.native_on_demand()
                build_artifacts([], root, cpu_configs=[config], native=relink)
                library = _current(root, config, DEFINITION_DIGEST)
    if relink:
        native_rt.forget()  # psa_tvm.ops looks for the new native library at its next call
    if library is None:
        raise ArtifactNotFoundError(f"building the CPU library of {config.tag} left none")
    return library


def cpu_kernels(config: OpConfig, root: Path | None = None) -> CpuKernels:
    """The CPU kernels of ``config``, loaded once per process and artifact directory.

    A malformed ``$PSA_TVM_CPU_PREFETCH_BYTES`` or ``$PSA_TVM_CPU_LINES`` (or ``1`` on a CPU
    without AVX-512BW/VL) raises ``ValueError`` here, for every configuration, as the native
    library's CPU path refuses every call then."""
    key = (config, root or env.default_artifacts_dir())
    loaded = _LOADED.get(key)
    if loaded is not None:
        return loaded
    env.cpu_prefetch_bytes()
    env.cpu_lines()
    with _LOCK:
        loaded = _LOADED.get(key)
        if loaded is None:
            import tvm_ffi

            library = find_cpu_library(config, root)
            module = tvm_ffi.load_module(str(library.path))
            # The library's own thread pool, also where TVM is imported (cpu_pool.cc); a
            # library built before the pool had the function runs as it is.
            with contextlib.suppress(AttributeError, KeyError, RuntimeError, ValueError):
                module["psa_tvm_own_pool"]()
            # ... or torch's OpenMP threads, where torch is loaded (runtime/cpu_pool.py).
            cpu_pool.share_torch_threads(library.path)
            forward_vec = (module[forward_vec_symbol(library.forward_vec)]
                           if library.forward_vec > 1 else None)
            pairs_fwd = (module[pairs_symbol("forward", library.pairs_forward_vec)]
                         if library.pairs_forward_vec else None)
            pairs_bwd = module[pairs_symbol("backward")] if library.pairs_backward else None
            prefetch = ((module[prefetch_symbol("forward")], module[prefetch_symbol("backward")])
                        if library.prefetch else (None, None))
            # Asked of every library (as the native path asks on every call), so that
            # PSA_TVM_CPU_LINES=1 on a CPU without AVX-512 fails here for every configuration.
            use_lines = cpu_pool.lines(library.path)
            lines = module[LINES_SYMBOL] if library.lines and use_lines else None
            loaded = _LOADED[key] = CpuKernels(
                config, library, module[FORWARD_SYMBOL], module[BACKWARD_SYMBOL], forward_vec,
                pairs_fwd, pairs_bwd, *prefetch,
                prefetch_bytes=cpu_pool.prefetch_bytes(library.path) if library.prefetch else 0,
                forward_lines_fn=lines)
        return loaded


def clear_memory_cache() -> None:
    """Forget loaded modules (the files stay); for tests."""
    with _LOCK:
        _LOADED.clear()
