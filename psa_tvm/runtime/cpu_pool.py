"""Which threads run the CPU kernels' parallel regions: torch's OpenMP threads where torch is here.

The CPU libraries and the native library link ``compiler/cpu_pool.cc``: their ``parallel``
loops run on that file's own thread pool, unless a launcher is installed in its place. Two can
be, both running the regions on the threads torch's CPU ops use:

1. psa-tvm's PyTorch extension (``runtime/torch_ext.py``) installs ``at::parallel_for`` when it
   binds the native library (``psa_tvm_set_parallel_launcher``).
2. Without the extension (no C++ compiler, ``PSA_TVM_TORCH_EXT=0``, or a CPU library loaded on
   its own), :func:`share_torch_threads` -- called by ``runtime/cpu.py`` and ``runtime/native.py``
   when they load a library -- installs GNU OpenMP's ``GOMP_parallel`` from the libgomp that
   torch has loaded (``psa_tvm_use_gomp``): the same workers as torch's intra-op pool, with
   ``torch.get_num_threads()`` threads. Nothing is compiled.

Why: after each torch CPU op its OpenMP workers spin for a while on every core; the library's
own pool then waits for the scheduler, and single calls ran 5-18x their usual time on a 2-core
host (docs/perf.md, v10 and v11).

Precedence: the extension's launcher wins. The GNU OpenMP one is installed only where no
launcher is, and the extension replaces it when it binds. Torch must be imported before the
library loads (a torch caller's first call loads it; ``tvm_ffi`` itself imports torch where it
is installed, so in practice: torch is installed); where it is not, or torch runs on another
OpenMP runtime (``libgomp`` is not the library that provides its ``GOMP_parallel``), or
``PSA_TVM_TORCH_OPENMP=0``, the own pool runs. Linux only (``/proc/self/maps``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from psa_tvm.runtime import env

#: ``psa_tvm_parallel_launcher_kind()`` answers: the library's own pool, GNU OpenMP (torch's
#: threads through ``psa_tvm_use_gomp``), another launcher (the PyTorch extension's).
KINDS = ("own", "torch_openmp", "external")
UNKNOWN = "unknown"  # a library built before the query (or without CPU kernels)
INSTALLED, NOT_FOUND, OTHER_LAUNCHER = 0, 1, 2  # psa_tvm_use_gomp's answers

_TORCH_CPU: list[str | None] = []  # libtorch_cpu's path once found (looked up per process)


def torch_cpu_library() -> str | None:
    """The path of the ``libtorch_cpu`` this process has loaded, or None (torch not imported,
    not Linux). GOMP_parallel resolved from it is the OpenMP runtime torch's ops run on."""
    if _TORCH_CPU:
        return _TORCH_CPU[0]
    if sys.modules.get("torch") is None:
        return None  # not cached: torch may be imported later
    found = None
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            path = line.rstrip("\n").split(maxsplit=5)[-1]
            if os.path.basename(path).startswith("libtorch_cpu."):
                found = path
                break
    _TORCH_CPU.append(found)
    return found


@contextlib.contextmanager
def _exports(library: str | os.PathLike) -> Iterator[ctypes.CDLL | None]:
    """``library`` (already loaded by tvm_ffi) through ctypes, or None when it is not loaded;
    the extra reference is dropped afterwards."""
    try:
        handle = ctypes.CDLL(str(library), mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except (OSError, AttributeError):  # AttributeError: no dlopen flags (not a POSIX host)
        yield None
        return
    try:
        yield handle
    finally:
        import _ctypes

        _ctypes.dlclose(handle._handle)


def share_torch_threads(library: str | os.PathLike) -> str:
    """Run ``library``'s parallel regions on torch's OpenMP threads when it can (see the module
    docstring); returns :func:`launcher_kind` afterwards (``"own"`` when it could not;
    libraries built before this function, or without CPU kernels, are left as they are:
    ``"unknown"``)."""
    torch_cpu = torch_cpu_library() if env.torch_openmp_enabled() else None
    with _exports(library) as lib:
        if lib is None:
            return UNKNOWN
        if torch_cpu is not None:
            use = getattr(lib, "psa_tvm_use_gomp", None)
            if use is not None:
                use.argtypes, use.restype = [ctypes.c_char_p], ctypes.c_int
                use(os.fsencode(torch_cpu))
        return _kind(lib)


def launcher_kind(library: str | os.PathLike) -> str:
    """``"own"``, ``"torch_openmp"`` or ``"external"``: what runs ``library``'s parallel
    regions now; ``"unknown"`` for a library without the query or not loaded."""
    with _exports(library) as lib:
        return UNKNOWN if lib is None else _kind(lib)


def use_gomp(library: str | os.PathLike, path: str | os.PathLike | None) -> int:
    """``psa_tvm_use_gomp(path)`` of ``library`` (``path`` None: back to the own pool if GNU
    OpenMP's launcher is installed): :data:`INSTALLED`, :data:`NOT_FOUND` or
    :data:`OTHER_LAUNCHER`. For tests and experiments; the run time calls
    :func:`share_torch_threads`."""
    with _exports(library) as lib:
        if lib is None:
            raise FileNotFoundError(f"library: {library} is not loaded in this process")
        use = lib.psa_tvm_use_gomp
        use.argtypes, use.restype = [ctypes.c_char_p], ctypes.c_int
        return use(None if path is None else os.fsencode(Path(path)))


def _kind(lib: ctypes.CDLL) -> str:
    query = getattr(lib, "psa_tvm_parallel_launcher_kind", None)
    if query is None:
        return UNKNOWN
    query.restype = ctypes.c_int
    return KINDS[query()]


def prefetch_bytes(library: str | os.PathLike) -> int:
    """The merged-tensor size in bytes from which ``library``'s prefetching kernels run (its
    ``psa_tvm_cpu_prefetch_bytes``, ``compiler/cpu_pool.cc``: ``$PSA_TVM_CPU_PREFETCH_BYTES``,
    else a quarter of the host's L3); 0 (never) for a library without the query or not loaded.
    The caller, :func:`psa_tvm.runtime.cpu.cpu_kernels`, has already checked the variable
    (:func:`psa_tvm.runtime.env.cpu_prefetch_bytes`); should the library still read it as
    malformed, this raises the same ``ValueError``."""
    with _exports(library) as lib:
        query = getattr(lib, "psa_tvm_cpu_prefetch_bytes", None) if lib is not None else None
        if query is None:
            return 0
        query.argtypes, query.restype = [], ctypes.c_int64
        bytes_ = int(query())
        if bytes_ < 0:  # the library read a malformed $PSA_TVM_CPU_PREFETCH_BYTES
            raise env.cpu_prefetch_bytes_error(os.environ.get(env.CPU_PREFETCH_BYTES, ""))
        return bytes_


def lines(library: str | os.PathLike) -> bool:
    """Whether forwards take ``library``'s aligned-line kernel on this CPU (its
    ``psa_tvm_cpu_lines``, ``compiler/cpu_pool.cc``: ``$PSA_TVM_CPU_LINES``, else Intel CPUs with
    AVX-512BW/VL); False for a library without the query or not loaded. A value the library
    cannot follow (malformed, or ``1`` on a CPU without AVX-512BW/VL) raises ``ValueError``."""
    with _exports(library) as lib:
        query = getattr(lib, "psa_tvm_cpu_lines", None) if lib is not None else None
        if query is None:
            return False
        query.argtypes, query.restype = [], ctypes.c_int
        answer = int(query())
        if answer < 0:
            raise env.cpu_lines_error(os.environ.get(env.CPU_LINES, ""), answer)
        return answer == 1
