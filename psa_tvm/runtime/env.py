"""Every environment variable and default path psa-tvm reads, in one place.

Nothing else in the package reads ``os.environ``: a reader of this module sees every knob.

| variable | meaning |
|---|---|
| ``PSA_TVM_ARTIFACTS`` | artifact directory to run from (``psa-tvm build -o DIR``) |
| ``PSA_TVM_CACHE`` | root of the on-demand build cache (default ``$XDG_CACHE_HOME/psa_tvm``) |
| ``PSA_TVM_SCHEDULES`` | a tuned-table directory searched before the shipped one, entry by |
| | entry: a configuration (or pass) its table lacks takes the shipped table's entry |
| ``PSA_TVM_NVCC`` | the ``nvcc`` to compile with (else ``$CUDA_HOME/bin/nvcc``, then ``PATH``) |
| ``PSA_TVM_NATIVE`` | ``0`` runs the Python launcher instead of the native library |
| ``PSA_TVM_NATIVE_ON_DEMAND`` | ``1`` (default): a build made on demand (GPU or CPU) relinks the |
| | default directory's native library, a few seconds more, growing with the directory's |
| | configurations; ``0``: it does not, and the Python path runs what it built (the test suite) |
| ``PSA_TVM_TORCH_EXT`` | the C++ PyTorch extension of ``merge_attn``: ``auto`` (default: built |
| | on first CUDA use when a compiler is here), ``1`` (required), ``0`` (never) |
| ``PSA_TVM_CPU_THREADS`` | CPU pool threads (read by ``compiler/cpu_pool.cc``, then |
| | ``TVM_NUM_THREADS``, ``OMP_NUM_THREADS``; default: all cores); on torch's threads |
| | ``torch.set_num_threads`` decides instead |
| ``PSA_TVM_TORCH_OPENMP`` | ``1`` (default): without the PyTorch extension, CPU kernels run their |
| | parallel regions on torch's GNU OpenMP threads when torch is loaded (``runtime/cpu_pool.py``); |
| | ``0``: on the libraries' own pool (the extension, when bound, uses torch's pool anyway) |
| ``PSA_TVM_CPU_MCPU`` | LLVM ``-mcpu`` of CPU builds (default: x86-64-v3 on x86-64) |
| ``PSA_TVM_CPU_PREFETCH_BYTES`` | CPU calls whose merged tensor has at least this many bytes |
| | run the kernels that prefetch each slice first (read by ``compiler/cpu_pool.cc``; default: |
| | a quarter of the L3; ``0``: never; digits only, else a ``ValueError`` before any launch) |
| ``PSA_TVM_CPU_LINES`` | CPU forwards on the aligned-line kernel (x86-64-v4): ``auto`` |
| | (default: Intel CPUs with AVX-512BW/VL), ``0`` (never), ``1`` (wherever the CPU has them; |
| | a ``ValueError`` where it has not); read by ``compiler/cpu_pool.cc`` for both launch paths |
| ``CXX`` | the C++ compiler that builds the native library (else ``g++``, then ``c++``) |
| ``CUDA_HOME``, ``CUDA_PATH`` | CUDA roots: nvcc, headers for NVRTC and the native library |
"""

from __future__ import annotations

import os
from pathlib import Path

#: The architecture assumed where none is detected or named (the H100/H200 generation).
DEFAULT_ARCH = "sm_90"
#: Architectures ``psa-tvm build`` compiles SASS for by default (PTX of the newest is added).
DEFAULT_ARCHS = ("sm_80", "sm_90")


def artifacts_override() -> Path | None:
    """``$PSA_TVM_ARTIFACTS`` when set: a directory the user built, never written to on demand."""
    value = os.environ.get("PSA_TVM_ARTIFACTS")
    return Path(value) if value else None


def cache_dir() -> Path:
    """``$PSA_TVM_CACHE``, else ``$XDG_CACHE_HOME/psa_tvm`` (``~/.cache/psa_tvm``)."""
    root = os.environ.get("PSA_TVM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "psa_tvm")
    return Path(root)


def default_artifacts_dir() -> Path:
    """Where the run time looks for artifacts: ``$PSA_TVM_ARTIFACTS``, else the cache."""
    # Read on every CPU call of the Python path: the Path is made once per value of the
    # variables it comes from (building one costs more than the rest of the lookup).
    environ = os.environ
    key = (environ.get("PSA_TVM_ARTIFACTS"), environ.get("PSA_TVM_CACHE"),
           environ.get("XDG_CACHE_HOME"), environ.get("HOME"))
    path = _DEFAULT_DIRS.get(key)
    if path is None:
        if len(_DEFAULT_DIRS) > 64:
            _DEFAULT_DIRS.clear()
        path = _DEFAULT_DIRS[key] = artifacts_override() or cache_dir() / "artifacts"
    return path


_DEFAULT_DIRS: dict[tuple, Path] = {}


def cpu_cache_dir() -> Path:
    """Where CPU libraries built on demand are kept."""
    return cache_dir() / "cpu"


def user_schedules_dir() -> Path | None:
    """``$PSA_TVM_SCHEDULES``: tuned tables searched before the shipped ones."""
    value = os.environ.get("PSA_TVM_SCHEDULES")
    return Path(value) if value else None


def nvcc_candidates() -> list[str]:
    """Explicit nvcc locations, most specific first (``PATH`` is searched after these)."""
    return [c for c in (os.environ.get("PSA_TVM_NVCC"),
                        os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "nvcc")) if c]


def cuda_roots() -> list[str]:
    """CUDA toolkit roots to search for headers and libraries."""
    return [r for r in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                        "/usr/local/cuda") if r]


def set_artifacts_dir(path: str | os.PathLike) -> None:
    """Make ``path`` this process's artifact directory (what ``--artifacts`` of a tool sets)."""
    os.environ["PSA_TVM_ARTIFACTS"] = str(path)


def native_enabled() -> bool:
    """``$PSA_TVM_NATIVE`` (default on): whether calls go through the native library."""
    return os.environ.get("PSA_TVM_NATIVE", "1") not in ("0", "false", "no", "off")


def native_on_demand() -> bool:
    """``$PSA_TVM_NATIVE_ON_DEMAND`` (default on): whether a build made on demand relinks the
    default directory's native library; never where the native library is off
    (``$PSA_TVM_NATIVE``)."""
    value = os.environ.get("PSA_TVM_NATIVE_ON_DEMAND", "1").strip().lower()
    return native_enabled() and value not in ("0", "false", "no", "off")


def torch_ext_mode() -> str:
    """``$PSA_TVM_TORCH_EXT``: ``auto`` (default), ``1`` or ``0`` (see the table above)."""
    value = os.environ.get("PSA_TVM_TORCH_EXT", "auto").strip().lower()
    return {"": "auto", "true": "1", "on": "1", "false": "0", "off": "0"}.get(value, value)


def torch_openmp_enabled() -> bool:
    """``$PSA_TVM_TORCH_OPENMP`` (default on): whether CPU kernels may run on torch's GNU OpenMP
    threads without the PyTorch extension (``runtime/cpu_pool.py``)."""
    return os.environ.get("PSA_TVM_TORCH_OPENMP", "1").strip().lower() not in (
        "0", "false", "no", "off")


def torch_ext_cache_dir() -> Path:
    """Where the PyTorch extension is built, per torch version."""
    return cache_dir() / "torch_ext"


def cxx_compiler() -> str | None:
    """``$CXX`` when set: the C++ compiler for the native library."""
    return os.environ.get("CXX") or None


def cpu_mcpu() -> str | None:
    """``$PSA_TVM_CPU_MCPU``: the LLVM ``-mcpu`` CPU libraries are built for."""
    return os.environ.get("PSA_TVM_CPU_MCPU") or None


def set_cpu_threads(threads: int) -> None:
    """Threads of the CPU libraries' pool (read once, when the first library loads; the pool
    itself is C++ and reads ``PSA_TVM_CPU_THREADS`` from the environment)."""
    os.environ["PSA_TVM_CPU_THREADS"] = str(threads)


CPU_PREFETCH_BYTES = "PSA_TVM_CPU_PREFETCH_BYTES"


def cpu_prefetch_bytes_error(value: str) -> ValueError:
    """The error for a ``$PSA_TVM_CPU_PREFETCH_BYTES`` that is not a whole number of bytes (the
    native library's C++ path reports the same in its own words)."""
    return ValueError(f"{CPU_PREFETCH_BYTES}={value!r}: expected a whole number of bytes "
                      "(digits only, e.g. 8388608; 0: never prefetch), or unset for a quarter "
                      "of the L3")


def cpu_prefetch_bytes() -> int | None:
    """``$PSA_TVM_CPU_PREFETCH_BYTES`` as a number of bytes; None when unset or empty (the
    default, a quarter of the L3, comes from ``compiler/cpu_pool.cc``, which reads the variable
    itself). Anything but digits raises :func:`cpu_prefetch_bytes_error`, before any launch:
    a threshold the user set and the run time ignored would change which kernels run."""
    value = os.environ.get(CPU_PREFETCH_BYTES, "")
    if not value:
        return None
    if not value.isascii() or not value.isdigit() or int(value) >= 1 << 63:  # int64 in C++
        raise cpu_prefetch_bytes_error(value)
    return int(value)


CPU_LINES = "PSA_TVM_CPU_LINES"


def cpu_lines_error(value: str, code: int = -1) -> ValueError:
    """The error for a ``$PSA_TVM_CPU_LINES`` the CPU path cannot follow: malformed (``code``
    -1), or ``1`` on a CPU without AVX-512BW/VL (-2), as ``compiler/cpu_pool.cc`` reports them
    (the native library's C++ path says the same in its own words)."""
    if code == -2:
        return ValueError(f"{CPU_LINES}={value!r}: this CPU lacks AVX-512BW/VL, which the "
                          "aligned-line kernel needs; use auto or 0")
    return ValueError(f"{CPU_LINES}={value!r}: expected auto (default), 0 or 1")


def cpu_lines() -> str:
    """``$PSA_TVM_CPU_LINES``: ``auto`` (unset or empty too), ``0`` or ``1``; anything else
    raises :func:`cpu_lines_error` before any launch. Whether the CPU can run the kernel is
    the library's answer (``psa_tvm_cpu_lines`` in ``compiler/cpu_pool.cc``)."""
    value = os.environ.get(CPU_LINES, "")
    if value in ("", "auto", "0", "1"):
        return value or "auto"
    raise cpu_lines_error(value)
