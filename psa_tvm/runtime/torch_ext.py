"""The optional PyTorch extension: ``merge_attn`` with its allocation and autograd node in C++
over the native library (source: ``psa_torch_ext.cc``, docs/native.md).

It is built with ``torch.utils.cpp_extension`` against the installed torch (a C++ extension
has that torch's ABI), once per torch/tvm-ffi/source version, into
``$PSA_TVM_CACHE/torch_ext/<digest>`` (its own file lock makes concurrent builds safe), and
bound to an artifact directory's native library. It is a pybind11 module, not a
``torch.library`` op: eager calls on plain tensors only (the op ``psa_tvm::merge_attn`` serves
torch.compile, export and subclasses). Its functions (``merge``, ``merge_backward``,
``merge_attn``) take the library's arguments and raise its errors (a missing build: a
``RuntimeError`` starting with ``PsaArtifactNotFound``).

``$PSA_TVM_TORCH_EXT``: ``auto`` builds it on the first eager call on CUDA tensors when a C++
compiler and ninja are here, and otherwise quietly keeps the Python path; CPU calls load a build
already in the cache (``psa-tvm torch-ext`` builds one ahead of time) but never start one (a
CPU user should not wait a minute for a compiler on the first call); ``1`` builds it on any
call and raises when it cannot; ``0`` never uses it.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psa_tvm.runtime import env

SOURCE = Path(__file__).with_name("psa_torch_ext.cc")

_LOCK = threading.Lock()
_BOUND_PATH: Path | None = None  # the library the extension is bound to
_MODE: str | None = None  # $PSA_TVM_TORCH_EXT, read once (forget() reads it again)
_SUSPENDED = False  # inside suspended(): the paths without the extension run
_MODULE: Any = None  # the loaded extension
_FAILURE: str = ""  # why it could not be built or loaded
_CACHE_LOOKED = False  # auto mode, CPU calls: whether the cache was looked at for a build

LANE: tuple[Any, Any, Any] | None = None
"""``(library, module, torch.compiler.is_compiling)`` once a call has bound the extension to
that native library object: the eager lanes of ``psa_tvm.torch.merge_attn`` and the allocating
``psa_tvm.merge`` / ``merge_backward`` call the module's ``*_eager`` functions directly when the
library is still the one in use (each answers None for a call that is not a plain eager one).
None until then, and again after :func:`forget`, :func:`reset` or within :func:`suspended`."""


class TorchExtensionError(RuntimeError):
    """The extension was required (``PSA_TVM_TORCH_EXT=1``) and could not be built or loaded."""


# -fopenmp: at::parallel_for (the CPU kernels' parallel regions on torch's intra-op pool) is a
# header template whose `omp parallel` is ignored without it; the libgomp it links is torch's own
# where torch ships it as libgomp.so.1 (one OpenMP runtime, one set of threads). In the digest.
_FLAGS = ("-O2", "-fopenmp")


def _digest() -> str:
    import torch
    import tvm_ffi

    sha = hashlib.sha1(SOURCE.read_bytes())
    for part in (torch.__version__, str(torch.version.cuda), tvm_ffi.__version__,
                 sys.version, str(env.cxx_compiler()), *_FLAGS):
        sha.update(part.encode())
    return sha.hexdigest()[:12]


def _build_location() -> tuple[Path, str]:
    """The build directory and module name of the extension for this torch/tvm-ffi/source."""
    digest = _digest()
    return env.torch_ext_cache_dir() / digest, f"psa_tvm_torch_ext_{digest}"


def load_cached() -> Any:
    """The extension from the cache when a build for this torch and source is there (no
    compiler is run), else None."""
    import importlib.util

    build_dir, name = _build_location()
    built = sorted(build_dir.glob(f"{name}*.so"))
    if not built:
        return None
    import torch  # noqa: F401  (the module links against torch's libraries, loaded first)

    spec = importlib.util.spec_from_file_location(name, built[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_and_load(verbose: bool = False) -> Any:
    """Build (or reuse the cached build of) the extension; returns its Python module."""
    import torch
    import tvm_ffi.libinfo as libinfo
    from torch.utils import cpp_extension

    cuda = torch.version.cuda is not None
    build_dir, name = _build_location()
    if not any(build_dir.glob(f"{name}*.so")):
        print(f"psa-tvm: building the PyTorch extension of merge_attn into {build_dir} (once "
              "per torch version) ...", file=sys.stderr, flush=True)
    build_dir.mkdir(parents=True, exist_ok=True)
    lib_dir = str(Path(libinfo.find_libtvm_ffi()).parent)
    return cpp_extension.load(
        name=name, sources=[str(SOURCE)],
        extra_cflags=[*_FLAGS, f"-DPSA_EXT_CUDA={int(cuda)}"],
        extra_include_paths=[libinfo.find_include_path(), libinfo.find_dlpack_include_path()],
        extra_ldflags=[f"-L{lib_dir}", "-ltvm_ffi", f"-Wl,-rpath,{lib_dir}", "-fopenmp"],
        build_directory=str(build_dir), with_cuda=cuda, verbose=verbose)


def _why_not() -> str | None:
    if shutil.which(env.cxx_compiler() or "g++") is None and shutil.which("c++") is None:
        return "no C++ compiler (set $CXX or install g++)"
    if shutil.which("ninja") is None:
        try:
            import ninja  # noqa: F401
        except ImportError:
            return "no ninja (pip install ninja)"
    return None


def _load_if_cached() -> Any:
    """The cached build, loaded once per process if there is one (auto mode, CPU calls)."""
    global _MODULE, _CACHE_LOOKED
    if _MODULE is None and not _CACHE_LOOKED and not _FAILURE:
        _CACHE_LOOKED = True
        try:
            _MODULE = load_cached()
        except Exception:  # a stale or foreign file: the Python path, and a CUDA call rebuilds
            _MODULE = None
    return _MODULE


def _load() -> Any:
    """The extension module (built if needed), or None with the reason in ``_FAILURE``."""
    global _MODULE, _FAILURE
    if _MODULE is not None or _FAILURE:
        return _MODULE
    reason = _why_not()
    if reason is None:
        try:
            _MODULE = build_and_load()
        except Exception as err:  # a failed build leaves the Python path running
            reason = f"{type(err).__name__}: {str(err)[-2000:]}"
    _FAILURE = reason or ""
    return _MODULE


def module_for(library_path: Path, *, may_build: bool) -> Any:
    """The extension module bound to ``library_path`` (one library at a time: another path
    rebinds), or None when it is disabled or unavailable. ``may_build``: whether this call may
    build it (``auto`` builds only for CUDA calls; ``PSA_TVM_TORCH_EXT=1`` always builds and
    raises :class:`TorchExtensionError` when it cannot)."""
    global _BOUND_PATH, _MODE
    module = _MODULE
    if module is not None and library_path is _BOUND_PATH and not _SUSPENDED:  # per call
        return module
    if _SUSPENDED:
        return None
    mode = _MODE or env.torch_ext_mode()
    _MODE = mode
    if mode == "0" or (module is None and not may_build and mode != "1" and _CACHE_LOOKED):
        return None  # (CPU calls in auto mode with no cached build: no lock, no build)
    with _LOCK:
        if _MODULE is None and (may_build or mode == "1"):
            _load()  # sets _FAILURE when it cannot (once: a failure is not retried)
        elif _MODULE is None:
            _load_if_cached()
        if _MODULE is None:
            if mode == "1":
                raise TorchExtensionError(f"PSA_TVM_TORCH_EXT=1 but the PyTorch extension is "
                                          f"unavailable: {_FAILURE}")
            return None
        if library_path != _BOUND_PATH:
            from psa_tvm.runtime import native as native_rt

            library = native_rt.load(library_path.parent)
            stream_ops = library.stream_ops if library is not None else {}
            _MODULE.bind(str(library_path), stream_ops)
        _BOUND_PATH = library_path
        return _MODULE


def open_lane(library: Any, module: Any) -> None:
    """Record that ``module`` is bound to ``library`` (see :data:`LANE`)."""
    global LANE
    if not _SUSPENDED and module is _MODULE and module is not None:
        import torch

        LANE = (library, module, torch.compiler.is_compiling)


def unavailable_reason() -> str:
    """Why the extension could not be built or loaded ("" when it was, or was not tried)."""
    return _FAILURE


def forget() -> None:
    """Forget the binding and the mode read from ``$PSA_TVM_TORCH_EXT`` (the next call reads
    and binds again); the extension itself stays loaded."""
    global _BOUND_PATH, _MODE, LANE
    with _LOCK:
        _BOUND_PATH, _MODE, LANE = None, None, None


def reset() -> None:
    """Drop this module's reference to the extension (tests: the following calls take the
    paths without it until a call builds or loads it again, which is then a cached load)."""
    global _MODULE, _FAILURE, _BOUND_PATH, _MODE, LANE, _CACHE_LOOKED
    with _LOCK:
        _MODULE, _FAILURE, _BOUND_PATH, _MODE, LANE = None, "", None, None, None
        _CACHE_LOOKED = False


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Within: calls take the paths without the extension (benchmarks compare both)."""
    global _SUSPENDED, LANE
    previous, _SUSPENDED, LANE = _SUSPENDED, True, None
    try:
        yield
    finally:
        _SUSPENDED = previous
