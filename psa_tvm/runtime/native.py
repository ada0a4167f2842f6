"""The native library of an artifact directory, loaded with ``tvm_ffi`` (no TVM, no cuda-python).

``psa-tvm build`` writes ``psa_tvm_native-<digest>.so`` next to ``manifest.json`` (``digest``:
of the manifest's bytes, so a library always matches the manifest it was generated from). This
module loads it once per directory and hands out its exported functions; ``psa_tvm.merge``,
``psa_tvm.merge_backward`` and ``psa_tvm.torch.merge_attn`` call them. Set
``PSA_TVM_NATIVE=0`` to use the Python launcher instead.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.runtime import cpu_pool
from psa_tvm.runtime.env import native_enabled

LIBRARY_PREFIX = "psa_tvm_native-"
#: ``{"library": file name, "manifest_sha1": ...}``: the library ``psa-tvm build`` wrote last.
POINTER_NAME = "native.json"
# The C++ error kind for "no build for this configuration/architecture in the library".
MISSING_KIND = "PsaArtifactNotFound"


class NativeArtifactNotFound(ArtifactNotFoundError):
    """The native library has no build for the call (the caller may fall back)."""


@dataclass(frozen=True)
class NativeLibrary:
    """The exported functions of one artifact directory's library (``tvm_ffi.Function``)."""

    path: Path
    module: Any
    merge: Any  # (lo, hi, num_heads, H, W, out|None) -> new out | None
    merge_forward: Any  # (lo, hi, out)
    merge_forward_alloc: Any  # (lo, hi, num_heads, H, W) -> out
    merge_backward: Any  # (d_merged, d_lo, d_hi)
    merge_backward_grads: Any  # (d_merged, num_heads, key_dim, d_lo|None, d_hi|None)
    merge_backward_alloc: Any  # (d_merged, num_heads, key_dim) -> [d_lo, d_hi]
    plan_forward: Any  # (lo, hi, out, arch) -> [entry, grid, block, smem, args, source, sched]
    plan_backward: Any  # (d_merged, d_lo, d_hi, arch) -> the same
    tensor_type: type  # tvm_ffi.Tensor: what allocating calls return without torch tensors
    # The attention layout family (psa_tvm.layouts; None in libraries built before it):
    stream_run: Any  # (op index, pass 0|1, batch, n, num_heads, key_dim, *tensors)
    stream_plan: Any  # (op index, pass, batch, n, num_heads, key_dim, arch, *tensors) -> plan
    stream_ops: dict[str, int]  # op name -> index

    def info(self) -> dict:
        """What the library holds: configurations, the build per pass and arch, CPU kernels."""
        return json.loads(self.module["library_info"]())


_LOADED: dict[Path, tuple[tuple[int, int], NativeLibrary | None]] = {}
_LOCK = threading.Lock()
_REGISTERED = False


def enabled() -> bool:
    return native_enabled()


def library_path(root: Path) -> Path | None:
    """The library ``psa-tvm build`` last wrote into ``root``, if any. (A manifest changed
    since, e.g. by an on-demand CPU build, leaves it valid for the builds it holds; calls it
    cannot serve raise :class:`NativeArtifactNotFound` and take the Python path.)"""
    try:
        name = json.loads((root / POINTER_NAME).read_text())["library"]
    except (OSError, ValueError, KeyError):
        return None
    path = root / name
    return path if path.is_file() and name.startswith(LIBRARY_PREFIX) else None


def _stamp(root: Path) -> tuple[int, int]:
    try:
        st = (root / POINTER_NAME).stat()
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def load(root: str | os.PathLike, *, refresh: bool = False) -> NativeLibrary | None:
    """The native library of ``root`` (``None`` when there is none, or it is disabled).

    Loaded once per directory; ``refresh=True`` looks again if a build wrote a new library.
    """
    root = Path(root)
    if not enabled():
        return None
    entry = _LOADED.get(root)
    if entry is not None and not refresh:
        return entry[1]
    with _LOCK:
        stamp = _stamp(root)
        entry = _LOADED.get(root)
        if entry is not None and (not refresh or entry[0] == stamp):
            return entry[1]
        path = library_path(root)
        library = _open(path) if path is not None else None
        _LOADED[root] = (stamp, library)
        return library


def _open(path: Path) -> NativeLibrary:
    global _REGISTERED
    import tvm_ffi

    if not _REGISTERED:
        tvm_ffi.register_error(MISSING_KIND, NativeArtifactNotFound)
        _REGISTERED = True
    module = tvm_ffi.load_module(str(path))
    # Its CPU kernels' parallel regions on torch's OpenMP threads where torch is loaded
    # (runtime/cpu_pool.py; the PyTorch extension replaces this with at::parallel_for).
    cpu_pool.share_torch_threads(path)
    names = ("merge", "merge_forward", "merge_forward_alloc", "merge_backward",
             "merge_backward_grads", "merge_backward_alloc", "plan_forward", "plan_backward")
    try:
        stream = (module["stream_run"], module["stream_plan"])
        stream_ops = {name: i for i, name in
                      enumerate(json.loads(module["library_info"]())["stream_ops"])}
    except (AttributeError, KeyError):  # a library from before the layout family
        stream, stream_ops = (None, None), {}
    return NativeLibrary(path, module, *(module[name] for name in names), tvm_ffi.Tensor,
                         *stream, stream_ops)


# Callbacks run by forget(): callers that cache a library (psa_tvm.ops) register here.
ON_FORGET: list = []


def forget() -> None:
    """Drop every loaded library handle (tests that rebuild a directory or change
    ``$PSA_TVM_ARTIFACTS``); the next call looks again."""
    with _LOCK:
        _LOADED.clear()
    for callback in ON_FORGET:
        callback()


def as_framework_array(like: Any, tensor: Any) -> Any:
    """A library-allocated ``tvm_ffi.Tensor`` as an array of ``like``'s framework (numpy, CuPy,
    JAX...), through DLPack; torch results arrive as torch tensors already."""
    module = type(like).__module__.split(".")[0]
    if module == "numpy":
        import numpy as np

        return np.from_dlpack(tensor)
    if module == "cupy":
        import cupy

        return cupy.from_dlpack(tensor)
    if module in ("jax", "jaxlib"):
        import jax.dlpack

        return jax.dlpack.from_dlpack(tensor)
    return tensor
