"""The native library (one TVM-FFI shared library per artifact directory).

CPU tests build a small artifact directory once per session (its native library is written by
``build_artifacts``) and call the library with torch CPU tensors: exactness, every kind of bad
input (the right Python exception, nothing written), a hypothesis fuzz of every exported
function, calls from several threads, agreement with the RuntimeOp's kernel choice, and the
CPU path with TVM unimportable. GPU tests (``@pytest.mark.gpu``) run the same library on CUDA
tensors: exactness with canaries, stream ordering, CUDA graphs, threads, CuPy and JAX.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import psa_tvm
from psa_tvm import reference
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime.cpu import takes_lines
from tests.helpers import (
    bitwise_equal,
    cpu_has_avx512bw,
    inputs,
    mutate_arguments,
    poisoned,
    untouched_memory,
)

KD, NH = 32, 4
C = 2 * NH * KD
DTYPES = (torch.float16, torch.float32)
ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX", "g++")) is None,
                                reason="no C++ compiler (g++) to build the native library")


@pytest.fixture(scope="session")
def art(small_artifacts) -> Path:
    root = small_artifacts
    if native_rt.library_path(root) is None:
        pytest.skip("the native library was not built (see the build's warnings)")
    return root


@pytest.fixture(scope="session")
def lib(art) -> native_rt.NativeLibrary:
    library = native_rt.load(art)
    assert library is not None
    return library


@pytest.fixture
def use_native(art, monkeypatch):
    """psa_tvm.merge & co. use the small directory's library."""
    monkeypatch.setenv("PSA_TVM_ARTIFACTS", str(art))
    native_rt.forget()
    yield
    native_rt.forget()


def half(batch, n):
    return (batch * NH, n, KD)


def merged(batch, height, width):
    return (batch, C, height, width)


def ref_backward(grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """reference.merge_backward with N spelled out (it cannot infer it for B == 0)."""
    batch, n = grad.shape[0], grad.shape[2] * grad.shape[3]
    g = grad.reshape(batch, NH, 2, KD, n).permute(0, 1, 2, 4, 3)
    return (g[:, :, 0].reshape(batch * NH, n, KD).contiguous(),
            g[:, :, 1].reshape(batch * NH, n, KD).contiguous())


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# ----------------------------------------------------------------------- exactness
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 20, 20), (2, 7, 13), (3, 4, 4), (0, 5, 5),
                                   (2, 0, 3)])
def test_forward_and_backward_exact(lib, dtype, shape):
    batch, height, width = shape
    n = height * width
    lo, hi = inputs(half(batch, n), dtype, "cpu", 1), inputs(half(batch, n), dtype, "cpu", 2)
    expected = reference.merge(lo, hi, NH, height, width)
    out = poisoned(merged(batch, height, width), dtype, "cpu")
    lib.merge_forward(lo, hi, out.tensor)
    assert bitwise_equal(out.tensor, expected) and out.canaries_intact()
    out = poisoned(merged(batch, height, width), dtype, "cpu")
    assert lib.merge(lo, hi, NH, height, width, out.tensor) is None
    assert bitwise_equal(out.tensor, expected) and out.canaries_intact()
    fresh = lib.merge(lo, hi, NH, height, width, None)
    assert isinstance(fresh, torch.Tensor) and bitwise_equal(fresh, expected)
    assert bitwise_equal(lib.merge_forward_alloc(lo, hi, NH, height, width), expected)

    grad = inputs(merged(batch, height, width), dtype, "cpu", 3)
    ref_lo, ref_hi = ref_backward(grad)
    d_lo, d_hi = poisoned(half(batch, n), dtype, "cpu"), poisoned(half(batch, n), dtype, "cpu")
    lib.merge_backward(grad, d_lo.tensor, d_hi.tensor)
    assert bitwise_equal(d_lo.tensor, ref_lo) and bitwise_equal(d_hi.tensor, ref_hi)
    assert d_lo.canaries_intact() and d_hi.canaries_intact()
    new_lo, new_hi = lib.merge_backward_alloc(grad, NH, KD)
    assert bitwise_equal(new_lo, ref_lo) and bitwise_equal(new_hi, ref_hi)
    d_hi = poisoned(half(batch, n), dtype, "cpu")
    got = lib.merge_backward_grads(grad, NH, KD, None, d_hi.tensor)
    assert got[1] is None and bitwise_equal(got[0], ref_lo) and bitwise_equal(d_hi.tensor, ref_hi)


def test_flat_merged_shapes(lib):
    """``[B, c, N]`` for the merged side works like ``[B, c, H, W]``."""
    lo, hi = inputs(half(2, 35), torch.float16, "cpu", 1), inputs(half(2, 35), torch.float16,
                                                                    "cpu", 2)
    out = torch.empty(2, C, 35, dtype=torch.float16)
    lib.merge_forward(lo, hi, out)
    assert bitwise_equal(out, reference.merge(lo, hi, NH, 5, 7).view(2, C, 35))
    d_lo, d_hi = torch.empty_like(lo), torch.empty_like(lo)
    lib.merge_backward(out, d_lo, d_hi)
    assert bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)


def test_public_functions_use_the_library(use_native, lib, monkeypatch):
    """psa_tvm.merge/merge_backward run the native library: TVM's CPU path is never reached."""
    import psa_tvm.ops

    monkeypatch.setattr(psa_tvm.ops, "cpu_kernels",
                        lambda *a, **k: pytest.fail("the per-config CPU library was used"))
    lo, hi = inputs(half(2, 35), torch.float32, "cpu", 1), inputs(half(2, 35), torch.float32,
                                                                    "cpu", 2)
    expected = reference.merge(lo, hi, NH, 5, 7)
    assert bitwise_equal(psa_tvm.merge(lo, hi, NH, 5, 7), expected)
    out = poisoned(merged(2, 5, 7), torch.float32, "cpu")
    assert psa_tvm.merge(lo, hi, NH, 5, 7, out=out.tensor) is out.tensor
    assert bitwise_equal(out.tensor, expected) and out.canaries_intact()
    d_lo, d_hi = psa_tvm.merge_backward(expected, NH, KD)
    assert bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)
    given = torch.empty_like(lo)
    d_lo, d_hi = psa_tvm.merge_backward(expected, NH, KD, d_hi=given)
    assert d_hi is given and bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)


def test_numpy_arrays_through_the_library(use_native, lib):
    np = pytest.importorskip("numpy")
    lo = np.random.default_rng(0).standard_normal(half(1, 12)).astype(np.float32)
    hi = np.random.default_rng(1).standard_normal(half(1, 12)).astype(np.float32)
    got = psa_tvm.merge(lo, hi, NH, 3, 4)
    assert isinstance(got, np.ndarray)
    expected = reference.merge(torch.from_numpy(lo), torch.from_numpy(hi), NH, 3, 4).numpy()
    assert np.array_equal(got, expected)
    d_lo, d_hi = psa_tvm.merge_backward(got, NH, KD)
    assert isinstance(d_lo, np.ndarray) and np.array_equal(d_lo, lo) and np.array_equal(d_hi, hi)


def test_missing_config_falls_back(use_native, lib):
    """A configuration the library lacks takes the Python path, which says what is missing."""
    lo, hi = inputs((2, 12, 8), torch.float32, "cpu", 1), inputs((2, 12, 8), torch.float32,
                                                                 "cpu", 2)
    with pytest.raises(native_rt.NativeArtifactNotFound, match="key_dim=8"):
        lib.merge(lo, hi, 1, 3, 4, None)
    with pytest.raises(ArtifactNotFoundError, match="CPU library"):
        psa_tvm.merge(lo, hi, 1, 3, 4)


def test_library_info(lib):
    info = lib.info()
    configs = {(c["key_dim"], c["num_heads"], c["dtype"]) for c in info["configs"]}
    assert {(KD, NH, "float16"), (KD, NH, "float32")} <= configs
    assert all(c["cpu"] for c in info["configs"])
    pointer = json.loads((lib.path.parent / native_rt.POINTER_NAME).read_text())
    assert pointer["library"] == lib.path.name
    assert info["manifest_digest"] == pointer["manifest_sha1"]


# ----------------------------------------------------------------------- CPU kernels
ALL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# H*W hitting each CPU kernel: 1x33, 7x5 odd (generic); 20x20 (float32: vec; 16-bit: pairs both
# passes); 4x6 (float32: vec; 16-bit: generic forward, pairs backward).
CPU_SHAPES = [(1, 1, 33), (2, 7, 5), (2, 20, 20), (1, 4, 6)]


def _words_view(shape, dtype, offset):
    """A tensor of ``shape`` at element ``offset`` of a fresh buffer (odd offsets of 16-bit
    types are 2 bytes past 4-byte alignment)."""
    numel = 1
    for s in shape:
        numel *= s
    return torch.empty(offset + numel, dtype=dtype)[offset:].view(shape)


def _runtime_cpu(art, dtype):
    from psa_tvm.config import OpConfig
    from psa_tvm.runtime.cpu import cpu_kernels

    return cpu_kernels(OpConfig(KD, NH, str(dtype).removeprefix("torch.")), art)


def test_library_info_cpu_kernels_match_the_cpu_libraries(art, lib):
    """The native library holds the per-configuration library's kernels (same facts, same
    symbols): both come from psa_tvm.compiler.cpu.scheduled_cpu_kernels."""
    import tvm_ffi

    from psa_tvm.runtime.manifest import Manifest

    manifest = Manifest.load(art)
    info = {(c["key_dim"], c["num_heads"], c["dtype"]): c for c in lib.info()["configs"]}
    for spec in manifest.cpu_libraries:
        kernels = info[(spec.config.key_dim, spec.config.num_heads, spec.config.dtype)][
            "cpu_kernels"]
        assert kernels["forward_vec"] == spec.forward_vec
        assert kernels["pairs_forward_vec"] == spec.pairs_forward_vec
        assert kernels["pairs_backward"] == spec.pairs_backward
        assert kernels["prefetch"] == spec.prefetch
        assert kernels["lines"] == spec.lines
        module = tvm_ffi.load_module(str(spec.path))
        for symbol in kernels["symbols"]:  # the per-config library exports the same kernels
            assert module[symbol] is not None
        expected = {"psa_merge_fwd_cpu", "psa_merge_bwd_cpu"}
        if spec.forward_vec > 1:
            expected.add(f"psa_merge_fwd_cpu_v{spec.forward_vec}")
        if spec.pairs_forward_vec:
            expected |= {f"psa_merge_fwd_cpu_pairs_v{spec.pairs_forward_vec}",
                         "psa_merge_bwd_cpu_pairs"}
        if spec.prefetch:
            expected |= {"psa_merge_fwd_cpu_prefetch", "psa_merge_bwd_cpu_prefetch"}
        if spec.lines:
            expected.add("psa_merge_fwd_cpu_lines")
        assert set(kernels["symbols"]) == expected
    assert {c.dtype for c in (s.config for s in manifest.cpu_libraries)} == {
        "float32", "float16", "bfloat16"}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", CPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("offset", [0, 1])
def test_cpu_kernels_exact_and_choice_agrees(art, lib, dtype, shape, offset):
    """Every CPU kernel (pairs, vec, lines, generic) is bit-exact with canaries intact, and the
    library picks the kernel psa_tvm.runtime.cpu picks (offset 1: 16-bit data 2 bytes off 4-byte
    alignment must not take the pairs kernels)."""
    batch, height, width = shape
    n = height * width
    lo = _words_view(half(batch, n), dtype, offset)
    hi = _words_view(half(batch, n), dtype, offset)
    lo.copy_(inputs(half(batch, n), dtype, "cpu", 1))
    hi.copy_(inputs(half(batch, n), dtype, "cpu", 2))
    expected = reference.merge(lo, hi, NH, height, width)
    out = poisoned(merged(batch, height, width), dtype, "cpu", offset=64 + offset)
    runtime = _runtime_cpu(art, dtype)
    out5 = out.tensor.view(batch, NH, 2, KD, n)
    want = list(runtime.plan_forward(lo, hi, out5, n))
    got = list(lib.module["plan_cpu_forward"](lo, hi, out.tensor))
    assert got == want
    aligned = offset == 0 or dtype == torch.float32
    facts = runtime.library  # kd=32: cpu_shuffle's kernels alone (generic), else vec / pairs
    if facts.pairs_forward_vec:
        assert (got[0] == "pairs") == (aligned and n % (2 * facts.pairs_forward_vec) == 0)
    elif facts.forward_vec > 1 and n % facts.forward_vec == 0:
        assert got[0] == "vec"
    else:  # the aligned-line forward where this CPU takes it (psa_tvm_cpu_lines), by call
        itemsize = torch.tensor([], dtype=dtype).element_size()
        takes = takes_lines(n, itemsize, out.tensor.numel() * itemsize)
        assert got[0] == ("lines" if runtime.forward_lines_fn is not None and takes
                          else "generic")
    lib.merge_forward(lo, hi, out.tensor)
    assert bitwise_equal(out.tensor, expected) and out.canaries_intact()

    grad = _words_view(merged(batch, height, width), dtype, offset)
    grad.copy_(inputs(merged(batch, height, width), dtype, "cpu", 3))
    ref_lo, ref_hi = ref_backward(grad)
    d_lo = poisoned(half(batch, n), dtype, "cpu", offset=64 + offset)
    d_hi = poisoned(half(batch, n), dtype, "cpu", offset=64 + offset)
    want = list(runtime.plan_backward(grad.view(batch, NH, 2, KD, n), d_lo.tensor, d_hi.tensor, n))
    got = list(lib.module["plan_cpu_backward"](grad, d_lo.tensor, d_hi.tensor))
    assert got == want
    assert (got[0] == "pairs") == (facts.pairs_backward and aligned and n % 2 == 0)
    assert got[0] in ("pairs", "generic")
    lib.merge_backward(grad, d_lo.tensor, d_hi.tensor)
    assert bitwise_equal(d_lo.tensor, ref_lo) and bitwise_equal(d_hi.tensor, ref_hi)
    assert d_lo.canaries_intact() and d_hi.canaries_intact()


# In a process of its own: the threshold is read once per process (cpu_pool.cc).
_PREFETCH_SCRIPT = r"""
import sys
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime.cpu import cpu_kernels
from tests.helpers import bitwise_equal, inputs, poisoned

art, kd, nh = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lib = native_rt.load(art)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    runtime = cpu_kernels(OpConfig(kd, nh, str(dtype).removeprefix("torch.")), art)
    assert runtime.library.prefetch and runtime.prefetch_bytes == 1, runtime.prefetch_bytes
    for batch, height, width in ((1, 1, 1), (1, 1, 33), (2, 7, 5), (2, 37, 29)):
        n = height * width
        lo = inputs((batch * nh, n, kd), dtype, "cpu", n)
        hi = inputs((batch * nh, n, kd), dtype, "cpu", n + 1)
        expected = reference.merge(lo, hi, nh, height, width)
        for run in ("native", "runtime"):
            out = poisoned(expected.shape, dtype, "cpu", 1)
            out5 = out.tensor.view(batch, nh, 2, kd, n)
            want = list(runtime.plan_forward(lo, hi, out5, n))
            got = list(lib.module["plan_cpu_forward"](lo, hi, out.tensor))
            assert got == want and want[0] == "prefetch", (got, want)
            if run == "native":
                lib.merge_forward(lo, hi, out.tensor)
            else:
                runtime.forward(lo, hi, out5, n)
            assert bitwise_equal(out.tensor, expected) and out.canaries_intact(), (run, n)
            d_lo = poisoned(lo.shape, dtype, "cpu", 1)
            d_hi = poisoned(lo.shape, dtype, "cpu", 1)
            want = list(runtime.plan_backward(expected.view(batch, nh, 2, kd, n), d_lo.tensor,
                                              d_hi.tensor, n))
            got = list(lib.module["plan_cpu_backward"](expected, d_lo.tensor, d_hi.tensor))
            assert got == want and want[0] == "prefetch", (got, want)
            if run == "native":
                lib.merge_backward(expected, d_lo.tensor, d_hi.tensor)
            else:
                runtime.backward(expected.view(batch, nh, 2, kd, n), d_lo.tensor, d_hi.tensor, n)
            assert bitwise_equal(d_lo.tensor, lo) and bitwise_equal(d_hi.tensor, hi), (run, n)
            assert d_lo.canaries_intact() and d_hi.canaries_intact(), (run, n)
        if dtype == torch.float32:  # numpy arrays take the same choice (sized by shape)
            out = poisoned(expected.shape, dtype, "cpu", 1)
            arrays = (lo.numpy(), hi.numpy(), out.tensor.view(batch, nh, 2, kd, n).numpy())
            assert runtime.plan_forward(*arrays, n)[0] == "prefetch"
            runtime.forward(*arrays, n)
            assert bitwise_equal(out.tensor, expected) and out.canaries_intact(), ("numpy", n)
print("ok")
"""


def test_prefetch_kernels_chosen_alike_and_exact_past_the_threshold(art):
    """With ``PSA_TVM_CPU_PREFETCH_BYTES=1`` every call takes the prefetching kernels, in the
    native library and in psa_tvm.runtime.cpu alike (one threshold, ``cpu_pool.cc``), and both
    are bit-exact with canaries intact, tails and a single position included."""
    env = {**os.environ, "PSA_TVM_CPU_PREFETCH_BYTES": "1", "PSA_TVM_ARTIFACTS": str(art)}
    proc = subprocess.run([sys.executable, "-c", _PREFETCH_SCRIPT, str(art), str(KD), str(NH)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}")


# A malformed threshold: both launch paths refuse it before any launch (own process: the
# library reads the variable once).
_BAD_PREFETCH_SCRIPT = r"""
import sys
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime.cpu import cpu_kernels
from tests.helpers import inputs, poisoned

art, kd, nh = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
lib = native_rt.load(art)
lo = inputs((nh, 33, kd), torch.float32, "cpu", 1)
hi = inputs((nh, 33, kd), torch.float32, "cpu", 2)
out = poisoned(reference.merge(lo, hi, nh, 1, 33).shape, torch.float32, "cpu", 1)
before = out.tensor.clone()
messages = []
for call in (lambda: lib.merge_forward(lo, hi, out.tensor),
             lambda: cpu_kernels(OpConfig(kd, nh, "float32"), art)):
    try:
        call()
    except ValueError as error:
        messages.append(str(error))
    else:
        raise SystemExit("no error")
assert torch.equal(out.tensor.view(torch.int32), before.view(torch.int32))
assert out.canaries_intact()
for message in messages:
    assert "PSA_TVM_CPU_PREFETCH_BYTES" in message and "8M" in message, message
    assert "whole number of bytes" in message, message
print("ok")
"""


@pytest.mark.parametrize("value", ["8M", "-1", " 8", "99999999999999999999"])
def test_malformed_prefetch_threshold_is_an_error_in_both_launch_paths(art, value):
    """``PSA_TVM_CPU_PREFETCH_BYTES`` that is not digits only (or overflows) is a ValueError
    naming the variable and its value, from the native library's C++ path and from
    psa_tvm.runtime.cpu alike, with the output untouched; not a silent fallback to the L3
    default."""
    script = _BAD_PREFETCH_SCRIPT.replace('"8M" in message', f"{value!r} in message")
    env = {**os.environ, "PSA_TVM_CPU_PREFETCH_BYTES": value, "PSA_TVM_ARTIFACTS": str(art)}
    proc = subprocess.run([sys.executable, "-c", script, str(art), str(KD), str(NH)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}")


def test_prefetch_threshold_is_a_quarter_of_the_l3(art, lib):
    """By default the prefetching kernels start at a quarter of cpu0's L3 (sysfs), in both
    launch paths; below it the plain kernels run."""
    import glob

    if os.environ.get("PSA_TVM_CPU_PREFETCH_BYTES"):
        pytest.skip("PSA_TVM_CPU_PREFETCH_BYTES is set")
    l3 = 0
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        with open(f"{index}/level") as f:
            if f.read().strip() == "3":
                with open(f"{index}/size") as f:
                    size = f.read().strip()
                shift = {"K": 10, "M": 20}.get(size[-1], 0)
                l3 = (int(size[:-1]) if shift else int(size)) << shift
    runtime = _runtime_cpu(art, torch.float32)
    assert runtime.prefetch_bytes == l3 // 4
    lo = inputs(half(1, 33), torch.float32, "cpu", 1)
    out = torch.empty(merged(1, 1, 33))
    kind, _, _ = lib.module["plan_cpu_forward"](lo, lo, out)
    assert kind == "generic"


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_public_functions_run_the_cpu_kernels(use_native, lib, dtype, monkeypatch):
    """psa_tvm.merge / merge_backward on CPU go through the native library's scheduled kernels
    (allocating and into given outputs), never the per-config library."""
    import psa_tvm.ops

    monkeypatch.setattr(psa_tvm.ops, "cpu_kernels",
                        lambda *a, **k: pytest.fail("the per-config CPU library was used"))
    for batch, height, width in CPU_SHAPES:
        n = height * width
        lo = inputs(half(batch, n), dtype, "cpu", 1)
        hi = inputs(half(batch, n), dtype, "cpu", 2)
        expected = reference.merge(lo, hi, NH, height, width)
        assert bitwise_equal(psa_tvm.merge(lo, hi, NH, height, width), expected)
        out = poisoned(merged(batch, height, width), dtype, "cpu")
        psa_tvm.merge(lo, hi, NH, height, width, out=out.tensor)
        assert bitwise_equal(out.tensor, expected) and out.canaries_intact()
        d_lo, d_hi = psa_tvm.merge_backward(expected, NH, KD)
        assert bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)


def test_plan_cpu_validates_like_a_call(lib):
    lo = inputs(half(1, 12), torch.float32, "cpu", 1)
    with pytest.raises(ValueError):
        lib.module["plan_cpu_forward"](lo, lo, torch.empty(1, C, 3, 5))
    with pytest.raises(TypeError):
        lib.module["plan_cpu_forward"](lo, lo.double(), torch.empty(1, C, 3, 4))
    with pytest.raises(ArtifactNotFoundError):
        small = inputs((1, 12, 8), torch.float32, "cpu", 1)
        lib.module["plan_cpu_forward"](small, small, torch.empty(1, 16, 3, 4))


# ----------------------------------------------------------------------- agreement
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n,offset", [(400, 0), (400, 1), (401, 0), (64, 3), (1, 0),
                                      (7 * 13, 0)])
def test_choice_agrees_with_the_runtime_op(art, lib, arch, dtype, n, offset):
    """Entry, grid, block, shared memory and arguments: library == PsaMergeAttnRuntimeOp."""
    op = psa_tvm.PsaMergeAttnRuntimeOp(KD, NH, str(dtype).removeprefix("torch."),
                                       artifacts=art, arch=arch)
    numel = 2 * NH * n * KD  # of lo; the merged output has twice as many
    base = torch.empty(4 * numel + 64, dtype=dtype)
    lo = base[offset: offset + numel].view(half(2, n))
    hi = base[numel + 16: 2 * numel + 16].view(half(2, n))
    out = base[2 * numel + 32: 4 * numel + 32].view(2, C, n, 1)
    plan = op.plan_forward([lo, hi], out, (n, 1))
    entry, grid, block, smem, args, source, schedule = lib.plan_forward(lo, hi, out, arch)
    assert (entry, tuple(grid), tuple(block), smem) == (plan.kernel.entry, plan.grid,
                                                         plan.block, plan.shared_bytes)
    assert [tuple(a) for a in args] == [tuple(a) for a in plan.args]
    assert source == str(plan.build.source.relative_to(art)) and schedule == plan.build.schedule

    g, d_lo, d_hi = out, lo, hi
    plan = op.plan_backward(g, [d_lo, d_hi])
    entry, grid, block, smem, args, source, _ = lib.plan_backward(g, d_lo, d_hi, arch)
    assert (entry, tuple(grid), tuple(block), smem) == (plan.kernel.entry, plan.grid,
                                                         plan.block, plan.shared_bytes)
    assert [tuple(a) for a in args] == [tuple(a) for a in plan.args]


def _fake_huge(shape, dtype="float16"):
    """A huge array backed by untouched anonymous memory (MAP_NORESERVE: no RAM is used until
    written): planning reads shapes and pointers only, never the memory."""
    np = pytest.importorskip("numpy")
    count = 1
    for size in shape:
        count *= size
    region = untouched_memory(count * np.dtype(dtype).itemsize)
    return np.frombuffer(region, dtype=dtype, count=count).reshape(shape)


@pytest.mark.parametrize("n", [2**31 // (2 * NH * KD) + 64, 2**31 // (2 * NH * KD) + 3])
def test_int64_choice_agrees_past_2_to_31(art, lib, n):
    lo, hi, out = _fake_huge(half(1, n)), _fake_huge(half(1, n)), _fake_huge((1, C, n, 1))
    op = psa_tvm.PsaMergeAttnRuntimeOp(KD, NH, "float16", artifacts=art, arch="sm_90")
    plan = op.plan_forward([lo, hi], out, (n, 1))
    entry, grid, block, _, args, *_ = lib.plan_forward(lo, hi, out, "sm_90")
    assert plan.kernel.index_dtype == "int64" and entry == plan.kernel.entry
    assert (tuple(grid), tuple(block)) == (plan.grid, plan.block)
    assert [tuple(x) for x in args] == [tuple(x) for x in plan.args]


# ----------------------------------------------------------------------- bad inputs
def _bad_cases():
    f16 = torch.float16
    lo, hi = inputs(half(2, 35), f16, "cpu", 1), inputs(half(2, 35), f16, "cpu", 2)
    g = inputs(merged(2, 5, 7), f16, "cpu", 3)
    return lo, hi, g


BAD_FORWARD = [
    # (description, args builder(lo, hi, out) -> args, error, fragments)
    ("rank lo", lambda lo, hi, o: (lo[0], hi, NH, 5, 7, o), ValueError, ["lo", "3-D"]),
    ("rank hi", lambda lo, hi, o: (lo, hi[None], NH, 5, 7, o), ValueError, ["hi", "3-D"]),
    ("shape hi", lambda lo, hi, o: (lo, hi[:, :, :16].contiguous(), NH, 5, 7, o), ValueError,
     ["hi", "shape of lo"]),
    ("dtype hi", lambda lo, hi, o: (lo, hi.float(), NH, 5, 7, o), TypeError,
     ["hi", "float16", "float32"]),
    ("dtype both", lambda lo, hi, o: (lo.double(), hi.double(), NH, 5, 7, o), TypeError,
     ["lo", "float64"]),
    ("int dtype", lambda lo, hi, o: (lo.to(torch.int16), hi.to(torch.int16), NH, 5, 7, o),
     TypeError, ["lo", "int16"]),
    ("heads", lambda lo, hi, o: (lo, hi, 3, 5, 7, o), ValueError, ["num_heads=3"]),
    ("H*W", lambda lo, hi, o: (lo, hi, NH, 5, 8, o), ValueError, ["H*W", "5*8"]),
    ("bool heads", lambda lo, hi, o: (lo, hi, True, 5, 7, o), ValueError, ["num_heads", "True"]),
    ("float heads", lambda lo, hi, o: (lo, hi, 4.0, 5, 7, o), ValueError, ["num_heads", "4.0"]),
    ("str H", lambda lo, hi, o: (lo, hi, NH, "5", 7, o), ValueError, ["H"]),
    ("negative W", lambda lo, hi, o: (lo, hi, NH, 5, -7, o), ValueError, ["W", "-7"]),
    ("zero heads", lambda lo, hi, o: (lo, hi, 0, 5, 7, o), ValueError, ["num_heads", ">= 1"]),
    ("strided lo", lambda lo, hi, o: (lo.transpose(1, 2).contiguous().transpose(1, 2), hi, NH,
                                      5, 7, o), ValueError, ["lo", "contiguous"]),
    ("out shape", lambda lo, hi, o: (lo, hi, NH, 5, 7, o[:1]), ValueError, ["out", "shape"]),
    ("out dtype", lambda lo, hi, o: (lo, hi, NH, 5, 7, o.float()), TypeError, ["out", "dtype"]),
    ("out strides", lambda lo, hi, o: (lo, hi, NH, 5, 7, o.transpose(2, 3).contiguous()
                                       .transpose(2, 3)), ValueError, ["out", "contiguous"]),
]


@pytest.mark.parametrize("case", BAD_FORWARD, ids=[c[0] for c in BAD_FORWARD])
def test_bad_forward_inputs(lib, case):
    _, build, error, fragments = case
    lo, hi, _ = _bad_cases()
    out = poisoned(merged(2, 5, 7), torch.float16, "cpu")
    args = build(lo, hi, out.tensor)
    before = out.buffer.clone()
    with pytest.raises(error) as info:
        lib.merge(*args)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert same_bytes(out.buffer, before), "a rejected call wrote"


def test_overlapping_output_refused(lib):
    buf = inputs((4 * 2 * NH * 35 * KD,), torch.float16, "cpu")
    lo = buf[: NH * 35 * KD].view(half(1, 35))
    hi = buf[NH * 35 * KD: 2 * NH * 35 * KD].view(half(1, 35))
    before = buf.clone()
    for start in (0, NH * 35 * KD // 2, NH * 35 * KD):  # on lo, half on lo, on hi
        out = buf[start: start + 2 * NH * 35 * KD].view(1, C, 5, 7)
        with pytest.raises(ValueError, match="disjoint"):
            lib.merge_forward(lo, hi, out)
        assert same_bytes(buf, before)
    d_lo = buf[: NH * 35 * KD].view(half(1, 35))
    g = buf[NH * 35 * KD // 2: NH * 35 * KD // 2 + 2 * NH * 35 * KD].view(1, C, 5, 7)
    with pytest.raises(ValueError, match="disjoint"):
        lib.merge_backward(g, d_lo, torch.empty_like(d_lo))
    with pytest.raises(ValueError, match=r"d_hi.*disjoint from d_lo"):
        lib.merge_backward(inputs((1, C, 5, 7), torch.float16, "cpu"), d_lo, d_lo)
    assert same_bytes(buf, before)


def test_misaligned_pointer_refused(lib):
    np = pytest.importorskip("numpy")
    count = 2 * NH * 35 * KD  # elements of lo
    raw = np.zeros(2 * count + 2, dtype=np.uint8)
    lo = np.frombuffer(raw.data, dtype=np.float16, count=count, offset=1).reshape(half(2, 35))
    hi = np.ones(half(2, 35), dtype=np.float16)
    out = np.full(merged(2, 5, 7), np.nan, dtype=np.float16)
    with pytest.raises(ValueError, match=r"lo: data pointer .* not aligned"):
        lib.merge_forward(lo, hi, out)
    assert np.isnan(out).all()


def test_backward_bad_inputs(lib):
    _, _, g = _bad_cases()
    d_lo, d_hi = poisoned(half(2, 35), torch.float16, "cpu"), poisoned(half(2, 35),
                                                                        torch.float16, "cpu")
    before = [d_lo.buffer.clone(), d_hi.buffer.clone()]
    cases = [
        ((g[0, 0], NH, KD, d_lo.tensor, d_hi.tensor), ValueError, "4-D"),
        ((g[:, :-2].contiguous(), NH, KD, d_lo.tensor, d_hi.tensor), ValueError,
         "2*num_heads*key_dim"),
        ((g.float(), NH, KD, d_lo.tensor, d_hi.tensor), TypeError, "d_lo"),
        ((g.double(), NH, KD, None, None), TypeError, "float64"),
        ((g.transpose(2, 3), NH, KD, d_lo.tensor, d_hi.tensor), ValueError, "contiguous"),
        ((g, NH, KD, d_lo.tensor[:1], d_hi.tensor), ValueError, "d_lo"),
        ((g, NH, KD, d_lo.tensor, "x"), TypeError, "d_hi"),
        ((g, NH, 0, None, None), ValueError, "key_dim"),
        ((g, 2, 2 * KD, None, None), LookupError, "num_heads=2"),
    ]
    for args, error, fragment in cases:
        with pytest.raises(error, match=re.escape(fragment)):
            lib.merge_backward_grads(*args)
    assert same_bytes(d_lo.buffer, before[0]) and same_bytes(d_hi.buffer, before[1])


def test_wrong_argument_counts_and_types(lib):
    lo, hi, g = _bad_cases()
    out = torch.empty(merged(2, 5, 7), dtype=torch.float16)
    for fn, args in [(lib.merge_forward, (lo, hi)), (lib.merge_forward, (lo, hi, out, out)),
                     (lib.merge_forward, (lo, hi, 3)), (lib.merge_forward, (lo, "hi", out)),
                     (lib.merge_backward, (g,)), (lib.merge, (lo, hi, NH, 5, 7)),
                     (lib.merge_forward_alloc, (lo, None, NH, 5, 7)),
                     (lib.plan_forward, (lo, hi, out)), (lib.plan_forward, (lo, hi, out, 90)),
                     (lib.merge_backward_alloc, (g, NH))]:
        with pytest.raises(TypeError):
            fn(*args)
    with pytest.raises(ValueError, match="arch"):
        lib.plan_forward(lo, hi, out, "volta")
    with pytest.raises(ValueError, match="arch"):
        lib.plan_forward(lo, hi, out, "")  # CPU tensors: the arch must be named


def test_huge_dims_refused_before_any_work(lib):
    """Shapes whose element count overflows, grids past CUDA's limits: ValueError."""
    small = torch.zeros(1, dtype=torch.float16)
    huge = small.expand(2**22, 2**20, KD)  # zero strides: refused as not contiguous
    with pytest.raises(ValueError, match="contiguous"):
        lib.merge(huge, huge, NH, 2**10, 2**10, None)
    # B = 8192 needs blockIdx.y = B * 8 = 65536 > 65535 (planning checks it, CPU tensors too)
    lo = torch.zeros(8192 * NH, 1, KD, dtype=torch.float16)
    out = torch.empty(8192, C, 1, 1, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"grid\[1\]=65536"):
        lib.plan_forward(lo, lo.clone(), out, "sm_90")
    np = pytest.importorskip("numpy")
    empty = np.lib.stride_tricks.as_strided(np.zeros(1, np.float16), shape=(0, 2**31, 2**20),
                                            strides=(0, 0, 0))
    with pytest.raises(ValueError, match="too large"):  # 2*num_heads*key_dim overflows
        lib.merge(empty, empty, 2**61, 2**31, 1, None)
    with pytest.raises(ValueError, match="H\\*W"):  # H*W overflows
        lib.merge(empty, empty, NH, 2**62, 2**62, None)
    with pytest.raises(ValueError):
        lib.merge_backward_alloc(empty, 2**61, 2**40)


def test_zero_size_is_a_no_op(lib):
    lo = torch.empty(0, 5, KD, dtype=torch.float16)
    out = torch.empty(0, C, 1, 5, dtype=torch.float16)
    lib.merge_forward(lo, lo.clone(), out)
    assert lib.merge(lo, lo.clone(), NH, 1, 5, None).shape == (0, C, 1, 5)
    # A configuration the library lacks is no error when there is nothing to do (as in Python).
    lo8 = torch.empty(0, 5, 8, dtype=torch.float16)
    assert lib.merge(lo8, lo8.clone(), 2, 5, 1, None).shape == (0, 32, 5, 1)


# ----------------------------------------------------------------------- fuzz
def test_fuzz_every_export(lib):
    """Random, mostly wrong arguments to every exported function: a Python exception (ValueError,
    TypeError, LookupError) or an exact result, never a crash, never a write when refused."""
    hypothesis = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")

    dtypes = st.sampled_from([torch.float16, torch.float32, torch.bfloat16, torch.float64,
                              torch.int32, torch.uint8, torch.bool])
    dims = st.integers(0, 40) | st.sampled_from([KD, C, NH, 2 * NH, 35, 2**31, 2**62])

    @st.composite
    def tensor(draw):
        rank = draw(st.integers(0, 5))
        shape = [draw(dims) for _ in range(rank)]
        numel = 1
        for s in shape:
            numel *= s
        dtype = draw(dtypes)
        extent = 1
        for s in shape:
            extent *= max(s, 1)
        hypothesis.assume(extent <= 1 << 50)  # torch's own limit on strides
        if numel > 1 << 16:
            t = torch.zeros(1, dtype=dtype).expand(*shape) if all(shape) else \
                torch.empty(shape, dtype=dtype)
        else:
            t = inputs(shape, torch.float32, "cpu", draw(st.integers(0, 5))).to(dtype) \
                if numel else torch.empty(shape, dtype=dtype)
            if rank >= 2 and draw(st.booleans()):
                t = t.transpose(0, rank - 1)
        return t

    def good_fwd(draw):
        batch, height, width = draw(st.integers(0, 3)), draw(st.integers(0, 6)), \
            draw(st.integers(0, 6))
        dtype = draw(st.sampled_from(DTYPES))
        lo = inputs(half(batch, height * width), dtype, "cpu", 1)
        return lo, lo.clone() + 1, poisoned(merged(batch, height, width), dtype, "cpu"), \
            (batch, height, width)

    scalars = st.integers(-3, 70) | st.sampled_from([True, 2.5, "4", None, 2**62, -(2**62)])
    allowed = (ValueError, TypeError, LookupError)
    names = ("merge", "merge_forward", "merge_forward_alloc", "merge_backward",
             "merge_backward_grads", "merge_backward_alloc", "plan_forward", "plan_backward")

    @hypothesis.settings(max_examples=400, deadline=None, derandomize=True)
    @hypothesis.given(data=st.data())
    def run(data):
        draw = data.draw
        name = draw(st.sampled_from(names))
        fn = getattr(lib, name)
        lo, hi, out, (_, height, width) = good_fwd(draw)
        # start from a valid call, then break some arguments
        valid = {"merge": [lo, hi, NH, height, width, out.tensor],
                 "merge_forward": [lo, hi, out.tensor],
                 "merge_forward_alloc": [lo, hi, NH, height, width],
                 "merge_backward": [out.tensor, lo.clone(), hi.clone()],
                 "merge_backward_grads": [out.tensor, NH, KD, lo.clone(), None],
                 "merge_backward_alloc": [out.tensor, NH, KD],
                 "plan_forward": [lo, hi, out.tensor, "sm_90"],
                 "plan_backward": [out.tensor, lo.clone(), hi.clone(), "sm_80"]}[name]
        args = mutate_arguments(draw, valid, tensor(), scalars, st)
        snapshot = out.buffer.clone()
        try:
            fn(*args)
        except allowed:
            assert same_bytes(out.buffer, snapshot), "a refused call wrote"
            return
        if args == valid and name in ("merge", "merge_forward"):
            assert bitwise_equal(out.tensor, reference.merge(lo, hi, NH, height, width))
        assert out.canaries_intact()

    run()


# ----------------------------------------------------------------------- threads
def test_calls_from_several_threads(lib):
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            dtype = DTYPES[seed % 2]
            for i in range(100):
                batch, height, width = 1 + (seed + i) % 3, 3 + i % 5, 2 + seed % 4
                n = height * width
                lo = inputs(half(batch, n), dtype, "cpu", seed)
                hi = inputs(half(batch, n), dtype, "cpu", seed + 1)
                out = lib.merge(lo, hi, NH, height, width, None)
                assert bitwise_equal(out, reference.merge(lo, hi, NH, height, width))
                d_lo, d_hi = lib.merge_backward_alloc(out, NH, KD)
                assert bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ----------------------------------------------------------------------- no TVM at run time
def test_cpu_path_without_tvm(art, lib):
    """psa_tvm.merge on CPU tensors with TVM unimportable: the library's LLVM kernels."""
    script = f"""
import sys
sys.modules["tvm"] = None  # import tvm -> ImportError
import torch, psa_tvm
from psa_tvm import reference
lo = torch.randn({NH}, 35, {KD}).half(); hi = torch.randn({NH}, 35, {KD}).half()
out = psa_tvm.merge(lo, hi, {NH}, 5, 7)
assert torch.equal(out.view(torch.int16), reference.merge(lo, hi, {NH}, 5, 7).view(torch.int16))
d_lo, d_hi = psa_tvm.merge_backward(out, {NH}, {KD})
assert torch.equal(d_lo, lo) and torch.equal(d_hi, hi)
assert "tvm" not in [m.split(".")[0] for m, v in sys.modules.items() if v is not None]
print("ok")
"""
    env = {**os.environ, "PSA_TVM_ARTIFACTS": str(art), "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


# ----------------------------------------------------------------------- torch op
def test_merge_attn_eager_autograd_compile_export(use_native, lib):
    import psa_tvm.torch as ptorch

    lo = inputs(half(2, 35), torch.float32, "cpu", 1)
    hi = inputs(half(2, 35), torch.float32, "cpu", 2)
    expected = reference.merge(lo, hi, NH, 5, 7)
    with torch.no_grad():
        assert bitwise_equal(ptorch.merge_attn(lo, hi, NH, 5, 7), expected)
    with torch.inference_mode():
        assert bitwise_equal(ptorch.merge_attn(lo, hi, NH, 5, 7), expected)
    a, b = lo.clone().requires_grad_(), hi.clone().requires_grad_()
    merged_ = ptorch.merge_attn(a, b, NH, 5, 7)
    assert merged_.grad_fn is not None and bitwise_equal(merged_.detach(), expected)
    grad = inputs(merged(2, 5, 7), torch.float32, "cpu", 3)
    merged_.backward(grad)
    ref_lo, ref_hi = reference.merge_backward(grad, NH, KD)
    assert bitwise_equal(a.grad, ref_lo) and bitwise_equal(b.grad, ref_hi)

    def f(x, y):
        return ptorch.merge_attn(x, y, NH, 5, 7) * 2

    for dynamic in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(f, fullgraph=True, dynamic=dynamic, backend="aot_eager")
        assert bitwise_equal(compiled(lo, hi), expected * 2)

    class M(torch.nn.Module):
        def forward(self, x, y):
            return ptorch.merge_attn(x, y, NH, 5, 7)

    exported = torch.export.export(M(), (lo, hi))
    assert "psa_tvm.merge_attn" in str(exported.graph)
    assert bitwise_equal(exported.module()(lo, hi), expected)


# ----------------------------------------------------------------------- building
def test_missing_compiler_says_what_to_install(monkeypatch):
    from psa_tvm.compiler import native as gen

    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(gen.NativeBuildError, match=r"g\+\+"):
        gen.find_toolchain()


def test_line_rule_constants_come_from_the_python_run_time(monkeypatch):
    """The native line rule (``TakesLines``) reads two constants that the generator writes from
    ``psa_tvm.runtime.cpu`` (the header defines none): a change there changes the generated
    source and the library's name, so no library keeps an old rule."""
    from psa_tvm.compiler import native as gen
    from psa_tvm.runtime import cpu as cpu_rt

    assert gen._run_time_constants() == [
        f"constexpr int64_t kLinesMinN = {cpu_rt.LINES_MIN_N};",
        f"constexpr int64_t kLinesFloat32MaxBytes = {cpu_rt.LINES_FLOAT32_MAX_BYTES};"]
    header = (gen.TEMPLATE_DIR / "psa_native_impl.h").read_text()
    assert "kLinesMinN =" not in header and "kLinesFloat32MaxBytes =" not in header
    before = gen._generator_digest()
    monkeypatch.setattr(gen, "LINES_MIN_N", cpu_rt.LINES_MIN_N + 1)
    assert gen._run_time_constants()[0] == (
        f"constexpr int64_t kLinesMinN = {cpu_rt.LINES_MIN_N + 1};")
    assert gen._generator_digest() != before


def test_library_without_cuda_runs_on_the_cpu(small_artifacts, tmp_path, monkeypatch):
    """No CUDA toolkit: a CPU-only library, and a warning saying what to install."""
    from psa_tvm.compiler import native as gen

    root = tmp_path / "art"
    shutil.copytree(small_artifacts, root)
    for old in root.glob(f"{native_rt.LIBRARY_PREFIX}*.so"):
        old.unlink()
    monkeypatch.setattr(gen, "_cuda_home", lambda: None)
    result = gen.write_native_library(root)
    assert not result.cuda and result.cpu
    assert any("CUDA toolkit" in w for w in result.warnings)
    library = native_rt._open(result.path)
    lo, hi = inputs(half(1, 6), torch.float32, "cpu", 1), inputs(half(1, 6), torch.float32,
                                                                 "cpu", 2)
    assert bitwise_equal(library.merge(lo, hi, NH, 2, 3, None), reference.merge(lo, hi, NH, 2, 3))


@pytest.mark.parametrize("expr,symbols,expected", [
    ("NV + 7 >> 3", {"NV": 17}, 3), ("B * T.int64(8)", {"B": 5}, 40),
    ("(NV + 127) // 128", {"NV": 129}, 2), ("T.min(B, 4) % 3", {"B": 7}, 1),
    ("T.Cast(\"int64\", NV) - 1", {"NV": 0}, -1), ("-7 // 2", {}, -4), ("-7 % 3", {}, 2),
    # a tile of 80 positions at vec 8: ceil(NV / 10) as TIR lowers a floor division by 10
    ("T.Div(NV + 9, 10) + (T.truncmod(NV + 9, 10) >> 31)", {"NV": 41}, 5),
    ("T.Div(NV + 9, 10) + (T.truncmod(NV + 9, 10) >> 31)", {"NV": 50}, 5),
    ("T.Div(-7, 2)", {}, -3), ("T.truncmod(-7, 3)", {}, -1),
])
def test_launch_expressions_compile_to_the_same_values(tmp_path, expr, symbols, expected):
    """The manifest's TVMScript expressions in C++: floor // and %, casts, min/max."""
    from psa_tvm.compiler.native import cxx_expression
    from psa_tvm.runtime.manifest import evaluate

    assert evaluate(expr.replace("-7", "(0 - 7)"), symbols) == expected
    names = {n: i for i, n in enumerate(symbols)}
    body = cxx_expression(expr.replace("-7", "(0 - 7)"), names)
    values = ", ".join(str(v) for v in symbols.values()) or "0"
    src = tmp_path / "e.cc"
    src.write_text(f"""#include <cstdint>
#include <cstdio>
static __int128 psa_floordiv(__int128 a, __int128 b) {{
  __int128 q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }}
static __int128 psa_floormod(__int128 a, __int128 b) {{
  __int128 r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }}
static __int128 psa_min(__int128 a, __int128 b) {{ return a < b ? a : b; }}
static __int128 psa_max(__int128 a, __int128 b) {{ return a < b ? b : a; }}
int main() {{ const int64_t s[] = {{{values}}}; (void)s;
  std::printf("%lld", static_cast<long long>({body})); }}
""")
    exe = tmp_path / "e"
    subprocess.run([os.environ.get("CXX", "g++"), "-std=c++17", str(src), "-o", str(exe)],
                   check=True)
    assert int(subprocess.run([str(exe)], capture_output=True, text=True).stdout) == expected


def test_unsupported_expressions_are_refused():
    from psa_tvm.compiler.native import cxx_expression

    for expr in ("NV / 2", "foo(NV)", "NV if B else 1", "M + 1", "1.5"):
        with pytest.raises(ValueError):
            cxx_expression(expr, {"NV": 0, "B": 1})


def test_cpp_example_on_the_cpu(art, tmp_path):
    """examples/cpp: CMake against tvm-ffi's package, forward + backward, no Python."""
    if shutil.which("cmake") is None:
        pytest.skip("no cmake")
    import tvm_ffi.libinfo

    build = tmp_path / "build"
    configure = subprocess.run(
        ["cmake", "-S", str(ROOT / "examples" / "cpp"), "-B", str(build),
         f"-DPython_EXECUTABLE={sys.executable}",
         f"-Dtvm_ffi_ROOT={tvm_ffi.libinfo.find_cmake_path()}"],
        capture_output=True, text=True)
    assert configure.returncode == 0, configure.stderr
    compiled = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    run = subprocess.run([str(build / "psa_native_example"), str(native_rt.library_path(art)),
                          "cpu"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "exact" in run.stdout, run.stdout + run.stderr
    assert "refused as expected: ValueError" in run.stdout


# ======================================================================= GPU
def _gpu_lib(gpu_artifacts) -> native_rt.NativeLibrary:
    library = native_rt.load(gpu_artifacts)
    if library is None:
        pytest.skip(f"no native library in {gpu_artifacts} (psa-tvm build writes it)")
    configs = {(c["key_dim"], c["num_heads"], c["dtype"]) for c in library.info()["configs"]}
    if not {(KD, NH, "float16"), (KD, NH, "float32")} <= configs:
        pytest.skip("the GPU artifacts lack kd=32 nh=4 float16/float32")
    return library


@pytest.fixture
def gpu_lib(gpu_artifacts, monkeypatch) -> native_rt.NativeLibrary:
    monkeypatch.setenv("PSA_TVM_ARTIFACTS", str(gpu_artifacts))
    native_rt.forget()
    yield _gpu_lib(gpu_artifacts)
    native_rt.forget()


GPU_SHAPES = ((1, 1, 1), (1, 20, 20), (2, 7, 13), (3, 40, 40), (1, 33, 17), (0, 4, 4))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("offset", [0, 1, 8])  # 1: misaligned (scalar kernel); 8: 16-B for fp16
def test_gpu_exact_with_canaries(gpu_lib, dtype, offset):
    for batch, height, width in GPU_SHAPES:
        n = height * width
        where = f"B={batch} H={height} W={width} offset={offset} {dtype}"
        lo = inputs((batch * NH * n * KD + offset,), dtype, "cuda", 1)[offset:].view(half(batch, n))
        hi = inputs(half(batch, n), dtype, "cuda", 2)
        expected = reference.merge(lo, hi, NH, height, width)
        out = poisoned(merged(batch, height, width), dtype, "cuda", 64 + offset)
        gpu_lib.merge_forward(lo, hi, out.tensor)
        torch.cuda.synchronize()
        assert bitwise_equal(out.tensor, expected) and out.canaries_intact(), where
        assert bitwise_equal(gpu_lib.merge(lo, hi, NH, height, width, None), expected), where
        grad = inputs(merged(batch, height, width), dtype, "cuda", 3)
        ref_lo, ref_hi = ref_backward(grad)
        d_lo = poisoned(half(batch, n), dtype, "cuda", 64 + offset)
        d_hi = poisoned(half(batch, n), dtype, "cuda", 64)
        gpu_lib.merge_backward(grad, d_lo.tensor, d_hi.tensor)
        torch.cuda.synchronize()
        assert bitwise_equal(d_lo.tensor, ref_lo) and bitwise_equal(d_hi.tensor, ref_hi), where
        assert d_lo.canaries_intact() and d_hi.canaries_intact(), where
        new_lo, new_hi = gpu_lib.merge_backward_alloc(grad, NH, KD)
        assert bitwise_equal(new_lo, ref_lo) and bitwise_equal(new_hi, ref_hi), where


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1])
def test_gpu_choice_agrees_with_the_runtime_op(gpu_lib, gpu_artifacts, offset):
    major, minor = torch.cuda.get_device_capability()
    op = psa_tvm.PsaMergeAttnRuntimeOp(KD, NH, "float16", artifacts=gpu_artifacts,
                                       arch=f"sm_{major}{minor}")
    for n in (400, 401, 1, 64):
        lo = torch.empty(2 * NH * n * KD + offset, dtype=torch.float16, device="cuda")[offset:]
        lo = lo.view(half(2, n))
        hi, out = torch.empty_like(lo), torch.empty(2, C, n, 1, dtype=torch.float16,
                                                    device="cuda")
        plan = op.plan_forward([lo, hi], out, (n, 1))
        entry, grid, block, _, args, *_ = gpu_lib.plan_forward(lo, hi, out, "")
        assert (entry, tuple(grid), tuple(block)) == (plan.kernel.entry, plan.grid, plan.block)
        assert [tuple(a) for a in args] == [tuple(a) for a in plan.args]


def _entry_points(lib):
    """(name, call(lo, hi, grad) -> tensors to compare with (merged, d_lo, d_hi))."""
    import psa_tvm.torch as ptorch

    def lib_out(lo, hi, grad):
        out = torch.empty(merged(lo.shape[0] // NH, 20, 20), dtype=lo.dtype, device="cuda")
        lib.merge_forward(lo, hi, out)
        return out, None, None

    return [
        ("merge_forward", lib_out),
        ("merge", lambda lo, hi, g: (lib.merge(lo, hi, NH, 20, 20, None), None, None)),
        ("merge_backward_alloc", lambda lo, hi, g: (None, *lib.merge_backward_alloc(g, NH, KD))),
        ("psa_tvm.merge", lambda lo, hi, g: (psa_tvm.merge(lo, hi, NH, 20, 20), None, None)),
        ("psa_tvm.merge_backward", lambda lo, hi, g: (None, *psa_tvm.merge_backward(g, NH, KD))),
        ("merge_attn", lambda lo, hi, g: (ptorch.merge_attn(lo, hi, NH, 20, 20), None, None)),
        ("merge_attn(op)", lambda lo, hi, g: (torch.ops.psa_tvm.merge_attn(lo, hi, NH, 20, 20),
                                              None, None)),
    ]


@pytest.mark.gpu
def test_gpu_launches_on_the_current_side_stream(gpu_lib):
    """Inputs written on a busy side stream: a kernel launched on any other stream would read
    them before they are written."""
    side = torch.cuda.Stream()
    src_lo, src_hi = inputs(half(4, 400), torch.float16, "cuda", 1), inputs(
        half(4, 400), torch.float16, "cuda", 2)
    src_g = inputs(merged(4, 20, 20), torch.float16, "cuda", 3)
    expected = reference.merge(src_lo, src_hi, NH, 20, 20)
    ref_lo, ref_hi = ref_backward(src_g)
    for name, call in _entry_points(gpu_lib):
        torch.cuda.synchronize()
        lo, hi, g = (torch.zeros_like(t) for t in (src_lo, src_hi, src_g))
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # tens of ms
            lo.copy_(src_lo)
            hi.copy_(src_hi)
            g.copy_(src_g)
            got = call(lo, hi, g)
        side.synchronize()
        if got[0] is not None:
            assert bitwise_equal(got[0], expected), name
        if got[1] is not None:
            assert bitwise_equal(got[1], ref_lo) and bitwise_equal(got[2], ref_hi), name


@pytest.mark.gpu
def test_gpu_cuda_graph_capture(gpu_lib):
    import psa_tvm.torch as ptorch

    lo, hi = inputs(half(2, 400), torch.float16, "cuda", 1), inputs(half(2, 400),
                                                                    torch.float16, "cuda", 2)
    out = torch.empty(merged(2, 20, 20), dtype=torch.float16, device="cuda")
    gpu_lib.merge_forward(lo, hi, out)  # warm up: fatbins load outside the capture
    psa_tvm.merge_backward(ptorch.merge_attn(lo, hi, NH, 20, 20), NH, KD)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gpu_lib.merge_forward(lo, hi, out)
        fresh = ptorch.merge_attn(lo, hi, NH, 20, 20)  # allocates inside the capture
        d_lo, d_hi = psa_tvm.merge_backward(fresh, NH, KD)
    for seed in (5, 6):
        lo.copy_(inputs(lo.shape, torch.float16, "cuda", seed))
        hi.copy_(inputs(hi.shape, torch.float16, "cuda", seed + 10))
        graph.replay()
        torch.cuda.synchronize()
        expected = reference.merge(lo, hi, NH, 20, 20)
        assert bitwise_equal(out, expected) and bitwise_equal(fresh, expected)
        assert bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)


@pytest.mark.gpu
def test_gpu_threads_each_on_its_own_stream(gpu_lib):
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            stream = torch.cuda.Stream()
            dtype = DTYPES[seed % 2]
            with torch.cuda.stream(stream):
                for i in range(40):
                    batch, height, width = 1 + (seed + i) % 3, 5 + i % 7, 3 + seed % 5
                    n = height * width
                    lo = inputs(half(batch, n), dtype, "cuda", seed)
                    hi = inputs(half(batch, n), dtype, "cuda", seed + 1)
                    if i % 10 == 0:
                        torch.cuda._sleep(1_000_000)
                    out = gpu_lib.merge(lo, hi, NH, height, width, None)
                    d_lo, d_hi = gpu_lib.merge_backward_alloc(out, NH, KD)
                    expected = reference.merge(lo, hi, NH, height, width)
                    stream.synchronize()
                    assert bitwise_equal(out, expected)
                    assert bitwise_equal(d_lo, lo) and bitwise_equal(d_hi, hi)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.gpu
def test_gpu_merge_attn_compile_export_autograd(gpu_lib):
    import psa_tvm.torch as ptorch

    lo = inputs(half(2, 400), torch.float16, "cuda", 1)
    hi = inputs(half(2, 400), torch.float16, "cuda", 2)
    expected = reference.merge(lo, hi, NH, 20, 20)
    with torch.no_grad():
        assert bitwise_equal(ptorch.merge_attn(lo, hi, NH, 20, 20), expected)
    a, b = lo.clone().requires_grad_(), hi.clone().requires_grad_()
    result = ptorch.merge_attn(a, b, NH, 20, 20)
    grad = inputs(merged(2, 20, 20), torch.float16, "cuda", 3)
    result.backward(grad)
    ref_lo, ref_hi = ref_backward(grad)
    assert bitwise_equal(result.detach(), expected)
    assert bitwise_equal(a.grad, ref_lo) and bitwise_equal(b.grad, ref_hi)

    def f(x, y):
        return ptorch.merge_attn(x, y, NH, 20, 20) + 1

    for dynamic in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(f, fullgraph=True, dynamic=dynamic)
        assert bitwise_equal(compiled(lo, hi), expected + 1)

    class M(torch.nn.Module):
        def forward(self, x, y):
            return ptorch.merge_attn(x, y, NH, 20, 20)

    assert bitwise_equal(torch.export.export(M(), (lo, hi)).module()(lo, hi), expected)


@pytest.mark.gpu
def test_gpu_cupy_arrays(gpu_lib):
    cupy = pytest.importorskip("cupy")
    lo = cupy.asarray(inputs(half(2, 35), torch.float32, "cpu", 1).numpy())
    hi = cupy.asarray(inputs(half(2, 35), torch.float32, "cpu", 2).numpy())
    got = psa_tvm.merge(lo, hi, NH, 5, 7)
    cupy.cuda.Device().synchronize()
    assert isinstance(got, cupy.ndarray)
    expected = reference.merge(torch.from_numpy(lo.get()), torch.from_numpy(hi.get()), NH, 5, 7)
    assert (got.get() == expected.numpy()).all()
    out = cupy.full(expected.shape, cupy.nan, dtype=cupy.float32)
    assert psa_tvm.merge(lo, hi, NH, 5, 7, out=out) is out
    d_lo, d_hi = psa_tvm.merge_backward(out, NH, KD)
    cupy.cuda.Device().synchronize()
    assert (d_lo == lo).all() and (d_hi == hi).all() and (out.get() == expected.numpy()).all()


@pytest.mark.gpu
def test_gpu_jax_arrays(gpu_lib):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")
    lo_t, hi_t = inputs(half(2, 35), torch.float32, "cpu", 1), inputs(half(2, 35),
                                                                      torch.float32, "cpu", 2)
    lo = jax.device_put(jnp.asarray(lo_t.numpy()), gpus[0]).block_until_ready()
    hi = jax.device_put(jnp.asarray(hi_t.numpy()), gpus[0]).block_until_ready()
    got = psa_tvm.merge(lo, hi, NH, 5, 7)
    torch.cuda.synchronize()  # the library ran on the legacy default stream
    assert isinstance(got, jax.Array)
    expected = reference.merge(lo_t, hi_t, NH, 5, 7).numpy()
    assert (jax.device_get(got) == expected).all()
    d_lo, d_hi = psa_tvm.merge_backward(got, NH, KD)
    torch.cuda.synchronize()
    assert (jax.device_get(d_lo) == lo_t.numpy()).all()
    assert (jax.device_get(d_hi) == hi_t.numpy()).all()


@pytest.mark.gpu
def test_gpu_int64_kernels_past_2_to_31(gpu_lib):
    """lo/hi of 2**31+ elements each: the library picks the int64 variants, still exact."""
    batch, height, width = 65, 512, 512
    n = height * width
    assert batch * NH * n * KD > 2**31 - 1
    lo = torch.empty(half(batch, n), dtype=torch.float16, device="cuda")
    hi = torch.empty_like(lo)
    lo.view(-1)[: 1 << 20].copy_(inputs((1 << 20,), torch.float16, "cuda"))
    lo.view(-1)[1 << 20:].fill_(1.5)
    lo.view(-1)[-(1 << 20):].copy_(inputs((1 << 20,), torch.float16, "cuda", 1))
    hi.fill_(-2.25)
    hi.view(-1)[-(1 << 20):].copy_(inputs((1 << 20,), torch.float16, "cuda", 2))
    out = torch.full(merged(batch, height, width), float("nan"), dtype=torch.float16,
                     device="cuda")
    entry = gpu_lib.plan_forward(lo, hi, out, "")[0]
    assert entry.endswith("_i64_kernel"), entry
    gpu_lib.merge_forward(lo, hi, out)
    assert bitwise_equal(out, reference.merge(lo, hi, NH, height, width))
    lo.fill_(float("nan"))
    hi.fill_(float("nan"))
    gpu_lib.merge_backward(out, lo, hi)
    ref_lo, ref_hi = ref_backward(out)
    assert bitwise_equal(lo, ref_lo) and bitwise_equal(hi, ref_hi)


# The aligned-line forward's switch, PSA_TVM_CPU_LINES, read once per process (cpu_pool.cc):
# each case in a process of its own.
_LINES_SCRIPT = r"""
import sys
from pathlib import Path

import torch

from psa_tvm import reference
from psa_tvm.config import OpConfig
from psa_tvm.runtime import native as native_rt
from psa_tvm.runtime.cpu import cpu_kernels, takes_lines
from tests.helpers import bitwise_equal, inputs, poisoned

art, kd, nh, setting = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
lib = native_rt.load(art)
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    runtime = cpu_kernels(OpConfig(kd, nh, str(dtype).removeprefix("torch.")), art)
    lines = setting == "1"
    assert runtime.library.lines, runtime.library
    assert (runtime.forward_lines_fn is not None) == lines
    for batch, height, width in ((1, 1, 31), (1, 1, 33), (1, 1, 64), (1, 5, 13), (2, 20, 15),
                                 (1, 37, 29), (1, 16, 16), (1, 1, 513)):
        n = height * width
        lo = inputs((batch * nh, n, kd), dtype, "cpu", n)
        hi = inputs((batch * nh, n, kd), dtype, "cpu", n + 1)
        expected = reference.merge(lo, hi, nh, height, width)
        for run in ("native", "runtime"):
            for offset in (1, 32):  # element offsets: lines split, and 64-byte aligned
                out = poisoned(expected.shape, dtype, "cpu", offset)
                out5 = out.tensor.view(batch, nh, 2, kd, n)
                want = list(runtime.plan_forward(lo, hi, out5, n))
                got = list(lib.module["plan_cpu_forward"](lo, hi, out.tensor))
                itemsize = expected.element_size()
                takes = takes_lines(n, itemsize, expected.numel() * itemsize)
                kind = "lines" if lines and takes else "generic"
                assert got == want and want[0] == kind, (got, want, kind)
                if run == "native":
                    lib.merge_forward(lo, hi, out.tensor)
                else:
                    runtime.forward(lo, hi, out5, n)
                assert bitwise_equal(out.tensor, expected) and out.canaries_intact(), (run, n)
print("ok")
"""


@pytest.mark.parametrize("setting", ["1", "0"])
def test_line_forward_chosen_alike_and_exact(art, setting):
    """``PSA_TVM_CPU_LINES=1`` sends every forward whose rows are not whole lines (``N >= 64``,
    ``N`` not a multiple of a line; takes_lines) to the aligned-line kernel and ``0`` none, in
    the native library and in psa_tvm.runtime.cpu alike (one answer, ``psa_tvm_cpu_lines`` in
    cpu_pool.cc); ``N`` 31, 33, 64 and 256 keep the generic kernel. Both paths bit-exact with
    canaries, every dtype, outputs off line alignment and on it."""
    if setting == "1" and not cpu_has_avx512bw():
        pytest.skip("the CPU lacks AVX-512BW/VL")
    env = {**os.environ, "PSA_TVM_CPU_LINES": setting, "PSA_TVM_ARTIFACTS": str(art),
           "PSA_TVM_CPU_PREFETCH_BYTES": "0"}
    proc = subprocess.run([sys.executable, "-c", _LINES_SCRIPT, str(art), str(KD), str(NH),
                           setting], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}")


_BAD_LINES_SCRIPT = _BAD_PREFETCH_SCRIPT.replace(
    '''    assert "PSA_TVM_CPU_PREFETCH_BYTES" in message and "8M" in message, message
    assert "whole number of bytes" in message, message''',
    '''    assert "PSA_TVM_CPU_LINES" in message and "VALUE" in message, message
    assert "auto" in message, message''')


@pytest.mark.parametrize("value", ["yes", "2", " 1", "on"])
def test_malformed_lines_switch_is_an_error_in_both_launch_paths(art, value):
    """``PSA_TVM_CPU_LINES`` other than auto, 0 or 1 is a ValueError naming the variable and its
    value from both launch paths, before any launch (the output untouched), for every
    configuration (float32 too, as the prefetch threshold)."""
    assert "PSA_TVM_CPU_LINES" in _BAD_LINES_SCRIPT
    script = _BAD_LINES_SCRIPT.replace('"VALUE"', repr(value))
    env = {**os.environ, "PSA_TVM_CPU_LINES": value, "PSA_TVM_ARTIFACTS": str(art)}
    env.pop("PSA_TVM_CPU_PREFETCH_BYTES", None)
    proc = subprocess.run([sys.executable, "-c", script, str(art), str(KD), str(NH)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}")


def test_lines_setting_in_python():
    from psa_tvm.runtime import env as env_mod

    for value, expected in (("", "auto"), ("auto", "auto"), ("0", "0"), ("1", "1")):
        os.environ[env_mod.CPU_LINES] = value
        try:
            assert env_mod.cpu_lines() == expected
        finally:
            del os.environ[env_mod.CPU_LINES]
    os.environ[env_mod.CPU_LINES] = "true"
    try:
        with pytest.raises(ValueError, match="PSA_TVM_CPU_LINES='true'"):
            env_mod.cpu_lines()
    finally:
        del os.environ[env_mod.CPU_LINES]
    assert "AVX-512" in str(env_mod.cpu_lines_error("1", -2))
