"""The CPU kernels' parallel regions on torch's GNU OpenMP threads without the PyTorch extension
(runtime/cpu_pool.py, psa_tvm_use_gomp in compiler/cpu_pool.cc): installed when a library loads
in a process with torch, exact through it, not installed when turned off or without torch, never
over another launcher (the extension's wins), task errors returned. CPU only."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading

import pytest
import torch

import psa_tvm
from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime import cpu_pool
from psa_tvm.runtime.cpu import cpu_kernels
from tests.helpers import DTYPES, bitwise_equal, inputs, poisoned


def _loaded(prefix: str) -> str | None:
    """The path of a loaded library whose file name starts with ``prefix`` (Linux)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if prefix in line]
    except OSError:
        return None
    return next((p for p in paths if os.path.basename(p).startswith(prefix)), None)


pytestmark = pytest.mark.skipif(
    cpu_pool.torch_cpu_library() is None or _loaded("libgomp") is None,
    reason="torch here does not run on GNU OpenMP (libgomp)")

KD, NH = 32, 4
# TVM's parallel-for ABI (c_backend_api.h) as ctypes types, to call the installed launcher.
LAMBDA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
LAUNCHER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)


class GroupEnv(ctypes.Structure):
    _fields_ = [("sync_handle", ctypes.c_void_p), ("num_task", ctypes.c_int32)]


def _library(dtype: str) -> str:
    return str(cpu_kernels(OpConfig(KD, NH, dtype)).library.path)


def _set_launcher(library: str, fn: int | None) -> int | None:
    """``psa_tvm_set_parallel_launcher(fn)`` of ``library``: the previous launcher's address."""
    import _ctypes

    lib = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    try:
        lib.psa_tvm_set_parallel_launcher.argtypes = [ctypes.c_void_p]
        lib.psa_tvm_set_parallel_launcher.restype = ctypes.c_void_p
        return lib.psa_tvm_set_parallel_launcher(fn)
    finally:
        _ctypes.dlclose(lib._handle)


@pytest.fixture
def on_gomp():
    """A factory: ``library`` on GNU OpenMP's launcher for the test, whatever was installed
    before (the extension's, when another module bound it) restored afterwards."""
    restore = []

    def install(library: str) -> str:
        previous = _set_launcher(library, None)
        assert cpu_pool.use_gomp(library, cpu_pool.torch_cpu_library()) == cpu_pool.INSTALLED
        restore.append((library, previous))
        assert cpu_pool.launcher_kind(library) == "torch_openmp"
        return library

    yield install
    for library, previous in reversed(restore):
        cpu_pool.use_gomp(library, None)
        _set_launcher(library, previous)


def _check_exact(dtype: torch.dtype, batch: int, height: int, width: int) -> None:
    where = f"{dtype} B={batch} {height}x{width} threads={torch.get_num_threads()}"
    half = (batch * NH, height * width, KD)
    lo, hi = inputs(half, dtype, "cpu", 1), inputs(half, dtype, "cpu", 2)
    out = poisoned((batch, 2 * NH * KD, height, width), dtype, "cpu")
    psa_tvm.merge(lo, hi, NH, height, width, out=out.tensor)
    assert bitwise_equal(out.tensor, reference.merge(lo, hi, NH, height, width)), where
    assert out.canaries_intact(), where
    grad = inputs((batch, 2 * NH * KD, height, width), dtype, "cpu", 3)
    d_lo, d_hi = poisoned(half, dtype, "cpu"), poisoned(half, dtype, "cpu")
    psa_tvm.merge_backward(grad, NH, KD, d_lo=d_lo.tensor, d_hi=d_hi.tensor)
    want_lo, want_hi = reference.merge_backward(grad, NH, KD)
    assert bitwise_equal(d_lo.tensor, want_lo) and bitwise_equal(d_hi.tensor, want_hi), where
    assert d_lo.canaries_intact() and d_hi.canaries_intact(), where


@pytest.mark.parametrize("dtype", DTYPES)
def test_installed_when_a_library_loads_with_torch_and_exact(dtype, monkeypatch):
    """Loading a CPU library in a process with torch puts its regions on torch's OpenMP threads
    (no extension involved: the CPU libraries are not the native library it binds); the
    kernels are bit-exact through it, with poisoned outputs and canaries, 1-3 threads."""
    monkeypatch.setenv("PSA_TVM_NATIVE", "0")  # the CPU library itself, not the native one
    library = _library(dtype)
    assert cpu_pool.launcher_kind(library) == "torch_openmp"
    previous = torch.get_num_threads()
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            for batch, height, width in ((4, 40, 40), (3, 37, 29), (1, 1, 33), (2, 3, 2)):
                _check_exact(DTYPES[dtype], batch, height, width)
    finally:
        torch.set_num_threads(previous)


def test_turned_off_by_the_environment_and_on_again(monkeypatch):
    library = _library("float32")
    assert cpu_pool.use_gomp(library, None) == cpu_pool.INSTALLED  # back to the own pool
    try:
        monkeypatch.setenv("PSA_TVM_TORCH_OPENMP", "0")
        assert cpu_pool.share_torch_threads(library) == "own"
        monkeypatch.setenv("PSA_TVM_TORCH_OPENMP", "1")
        assert cpu_pool.share_torch_threads(library) == "torch_openmp"
    finally:
        cpu_pool.share_torch_threads(library)


def test_not_found_in_a_library_without_openmp():
    """A loaded library that resolves no GOMP_parallel (libc), or one not loaded: nothing
    installed, the own pool stays."""
    library = _library("float32")
    previous = _set_launcher(library, None)
    try:
        assert cpu_pool.use_gomp(library, _loaded("libc.")) == cpu_pool.NOT_FOUND
        assert cpu_pool.use_gomp(library, "/nonexistent/libgomp.so.1") == cpu_pool.NOT_FOUND
        assert cpu_pool.launcher_kind(library) == "own"
    finally:
        _set_launcher(library, previous)


# torch made unimportable (tvm_ffi imports it where it is installed): a host without torch.
_NO_TORCH_SCRIPT = """
import sys
sys.modules["torch"] = None
import numpy as np
import psa_tvm
from psa_tvm.config import OpConfig
from psa_tvm.runtime import cpu_pool
from psa_tvm.runtime.cpu import cpu_kernels
lo = np.arange(1, 1 + 8 * 400 * 32, dtype=np.float32).reshape(8, 400, 32)
out = psa_tvm.merge(lo, lo + 0.5, 4, 20, 20)
assert not any(lib in open("/proc/self/maps").read() for lib in ("libgomp", "libtorch"))
print(cpu_pool.launcher_kind(cpu_kernels(OpConfig(32, 4, "float32")).library.path))
"""


@pytest.mark.parametrize("torch_openmp", ["1", "0"])
def test_a_process_without_torch_or_turned_off_keeps_the_own_pool(torch_openmp):
    """numpy alone (torch never imported) runs on the own pool; so does a torch process with
    PSA_TVM_TORCH_OPENMP=0."""
    _library("float32")  # built here, in the session's cache, before the child loads it
    child_env = {**os.environ, "PSA_TVM_NATIVE": "0", "PSA_TVM_TORCH_OPENMP": torch_openmp}
    script = _NO_TORCH_SCRIPT if torch_openmp == "1" else (
        _NO_TORCH_SCRIPT.replace('sys.modules["torch"] = None', "import torch").replace(
            "assert not any(", "assert all("))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=child_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "own"


def test_another_launcher_takes_precedence(monkeypatch):
    """Another launcher in place (what the PyTorch extension installs): psa_tvm_use_gomp leaves
    it (OTHER_LAUNCHER), the kernels run through it; set over GNU OpenMP's, it replaces it."""
    monkeypatch.setenv("PSA_TVM_NATIVE", "0")
    library = _library("float32")
    assert cpu_pool.launcher_kind(library) == "torch_openmp"
    calls = []

    @LAUNCHER
    def serial(f, cdata, num_task):  # every task on the calling thread, in order
        calls.append(num_task)
        tasks = num_task or 3
        env = GroupEnv(None, tasks)
        return next((rc for task in range(tasks)
                     if (rc := LAMBDA(f)(task, ctypes.addressof(env), cdata)) != 0), 0)

    previous = _set_launcher(library, ctypes.cast(serial, ctypes.c_void_p).value)
    try:
        assert cpu_pool.launcher_kind(library) == "external"
        assert cpu_pool.share_torch_threads(library) == "external"
        assert cpu_pool.use_gomp(library, cpu_pool.torch_cpu_library()) == \
            cpu_pool.OTHER_LAUNCHER
        assert cpu_pool.use_gomp(library, None) == cpu_pool.OTHER_LAUNCHER  # not removed
        _check_exact(torch.float32, 4, 40, 40)
        assert calls, "the kernels did not run through the installed launcher"
    finally:
        _set_launcher(library, previous)
    assert cpu_pool.launcher_kind(library) == "torch_openmp"


def _gomp_launch(library: str):
    """The installed GNU OpenMP launcher as a ctypes function (read by swapping it out and back)."""
    address = _set_launcher(library, None)
    _set_launcher(library, address)
    return LAUNCHER(address)


@pytest.mark.parametrize("threads", [1, 2])
def test_launcher_contract_tasks_threads_and_errors(on_gomp, threads):
    """Through GNU OpenMP's launcher: tasks 0..n-1 each run once with num_task = n (n = the
    requested count, or torch.get_num_threads() for 0), on torch's OpenMP threads, and a failing
    task's code is returned."""
    launch = _gomp_launch(on_gomp(_library("float32")))
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for num_task, fail in ((0, None), (5, None), (5, 3), (0, 0)):
            seen, lock = [], threading.Lock()

            @LAMBDA
            def task(task_id, penv, cdata, seen=seen, lock=lock, fail=fail):
                with lock:
                    seen.append((task_id, GroupEnv.from_address(penv).num_task,
                                 threading.get_native_id()))
                return -7 if task_id == fail else 0

            rc = launch(ctypes.cast(task, ctypes.c_void_p).value, None, num_task)
            n = num_task or threads
            assert sorted(t for t, _, _ in seen) == list(range(n)), (num_task, seen)
            assert {m for _, m, _ in seen} == {n}
            assert rc == (-7 if fail is not None else 0)
            assert len({tid for _, _, tid in seen}) <= min(n, threads)
    finally:
        torch.set_num_threads(previous)


def test_regions_share_torchs_threads(on_gomp):
    """The point of it: after torch's CPU ops, a region runs on the OpenMP workers torch's ops
    used -- no thread of the library's own pool is started."""
    library = on_gomp(_library("float32"))
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = torch.randn(1 << 20)
        (a + a).sum()  # torch's OpenMP team exists
        before = set(os.listdir("/proc/self/task"))
        seen, lock = set(), threading.Lock()

        @LAMBDA
        def task(task_id, penv, cdata):
            with lock:
                seen.add(threading.get_native_id())
            return 0

        assert _gomp_launch(library)(ctypes.cast(task, ctypes.c_void_p).value, None, 2) == 0
        assert set(os.listdir("/proc/self/task")) == before
        assert {str(t) for t in seen} <= before and len(seen) == 2
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_library_cpu_kernels_exact_on_torchs_openmp(small_artifacts, on_gomp,
                                                           monkeypatch, dtype):
    """The native library links the same cpu_pool.cc: loaded with torch here, it gets the GNU
    OpenMP launcher (or the extension's, where a module bound it), and its CPU kernels are exact
    through it at sizes that run parallel (> 64 KB moved)."""
    from psa_tvm.runtime import native as native_rt

    if native_rt.library_path(small_artifacts) is None:
        pytest.skip("the native library was not built")
    monkeypatch.setenv("PSA_TVM_ARTIFACTS", str(small_artifacts))
    monkeypatch.setenv("PSA_TVM_TORCH_EXT", "0")
    native_rt.forget()
    try:
        library = native_rt.load(small_artifacts)
        assert cpu_pool.launcher_kind(library.path) in ("torch_openmp", "external")
        on_gomp(str(library.path))
        previous = torch.get_num_threads()
        try:
            for threads in (1, 2):
                torch.set_num_threads(threads)
                for batch, height, width in ((4, 40, 40), (3, 37, 29), (2, 1, 33)):
                    _check_exact(DTYPES[dtype], batch, height, width)
        finally:
            torch.set_num_threads(previous)
    finally:
        native_rt.forget()


def test_concurrent_calls_from_several_threads_are_exact(monkeypatch):
    """The own pool runs one region at a time; on GNU OpenMP each calling thread gets its own
    team: calls from several Python threads at once stay exact."""
    monkeypatch.setenv("PSA_TVM_NATIVE", "0")
    library = _library("float32")
    assert cpu_pool.launcher_kind(library) == "torch_openmp"
    failures: list[str] = []

    def work(seed: int) -> None:
        half = (4 * NH, 40 * 40, KD)
        lo, hi = inputs(half, torch.float32, "cpu", seed), inputs(half, torch.float32, "cpu",
                                                                  seed + 1)
        want = reference.merge(lo, hi, NH, 40, 40)
        for _ in range(20):
            out = poisoned((4, 2 * NH * KD, 40, 40), torch.float32, "cpu")
            psa_tvm.merge(lo, hi, NH, 40, 40, out=out.tensor)
            if not (bitwise_equal(out.tensor, want) and out.canaries_intact()):
                failures.append(f"thread {seed}")
                return

    threads = [threading.Thread(target=work, args=(10 * i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


_LIBGOMP_SCRIPT = """
import torch
import psa_tvm
from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime import cpu_pool
from psa_tvm.runtime.cpu import cpu_kernels
torch.set_num_threads(2)
path = str(cpu_kernels(OpConfig(32, 4, "float32")).library.path)
assert cpu_pool.launcher_kind(path) == "own"  # PSA_TVM_TORCH_OPENMP=0 in this process
gomp = next(line.split()[-1] for line in open("/proc/self/maps") if "libgomp" in line)
assert cpu_pool.use_gomp(path, gomp) == cpu_pool.INSTALLED
lo = torch.randn(16, 1600, 32)
hi = torch.randn(16, 1600, 32)
out = torch.full((4, 256, 40, 40), float("nan"))
psa_tvm.merge(lo, hi, 4, 40, 40, out=out)
assert torch.equal(out, reference.merge(lo, hi, 4, 40, 40))
print(cpu_pool.launcher_kind(path))
"""


def test_libgomp_itself_as_the_source():
    """psa_tvm_use_gomp also takes libgomp's own path (no at::get_num_threads then: the calling
    thread's OpenMP default, which torch.set_num_threads set); a fresh process, so that these
    are the first symbols it installs."""
    if _loaded("libgomp") is None:
        pytest.skip("no libgomp loaded")
    _library("float32")  # built here first
    child_env = {**os.environ, "PSA_TVM_NATIVE": "0", "PSA_TVM_TORCH_OPENMP": "0"}
    proc = subprocess.run([sys.executable, "-c", _LIBGOMP_SCRIPT], capture_output=True,
                          text=True, timeout=300, env=child_env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "torch_openmp"
