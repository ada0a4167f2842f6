"""Bad inputs: each raises the right error type, naming the argument with the expected and the
received values, before anything is written (pre-poisoned outputs stay bit-for-bit intact)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import psa_tvm
from psa_tvm import PsaMergeAttnRuntimeOp, RecordingVisitor, reference
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.runtime.tensors import TensorInfo
from tests.helpers import bitwise_equal, inputs, poisoned

KD, NH, B, H, W = 16, 4, 2, 7, 13
N = H * W
C = 2 * NH * KD
HALF = (B * NH, N, KD)
MERGED = (B, C, H, W)
F16 = torch.float16


def lo_hi(dtype=F16, shape=HALF):
    return inputs(shape, dtype, "cpu", 1), inputs(shape, dtype, "cpu", 2)


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def rejected(call, error, *fragments, untouched=()):
    """``call()`` raises ``error`` whose message contains every fragment; buffers unchanged."""
    before = [t.clone() for t in untouched]
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in error message {message!r}"
    for t, snapshot in zip(untouched, before, strict=True):
        assert same_bytes(t, snapshot), "a rejected call wrote to an output"
    return message


# ----------------------------------------------------------------------- forward inputs
def test_wrong_rank_lo():
    lo, hi = lo_hi()
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo[0], hi[0], NH, H, W, out=out.tensor), ValueError,
             "lo", "3-D", str([N, KD]), untouched=[out.buffer])


def test_wrong_rank_hi():
    lo, hi = lo_hi()
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi[None], NH, H, W, out=out.tensor), ValueError,
             "hi", "3-D", str([1, *HALF]), untouched=[out.buffer])


def test_wrong_rank_d_merged():
    grad = inputs((B, C), F16, "cpu")
    d_lo, d_hi = poisoned(HALF, F16, "cpu"), poisoned(HALF, F16, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=d_lo.tensor, d_hi=d_hi.tensor),
             ValueError, "d_merged", "4-D", str([B, C]), untouched=[d_lo.buffer, d_hi.buffer])


def test_lo_hi_shape_mismatch():
    lo, _ = lo_hi()
    hi = inputs((B * NH, N, KD // 2), F16, "cpu")
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor), ValueError,
             "hi", str(list(HALF)), str([B * NH, N, KD // 2]), untouched=[out.buffer])


def test_lo_hi_dtype_mismatch():
    lo, hi = lo_hi()
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi.float(), NH, H, W, out=out.tensor), TypeError,
             "hi", "float16", "float32", untouched=[out.buffer])


def test_n_not_equal_h_times_w():
    lo, hi = lo_hi(shape=(B * NH, N - 1, KD))
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor), ValueError,
             "lo", f"{H}*{W}", str(N), str(N - 1), untouched=[out.buffer])


def test_batch_dim_not_divisible_by_num_heads():
    rows = B * NH + 2
    lo, hi = lo_hi(shape=(rows, N, KD))
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor), ValueError,
             "lo", f"num_heads={NH}", str(rows), untouched=[out.buffer])


def test_d_merged_channels_not_2_nh_kd():
    grad = inputs((B, C - 2, H, W), F16, "cpu")
    d_lo, d_hi = poisoned(HALF, F16, "cpu"), poisoned(HALF, F16, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=d_lo.tensor, d_hi=d_hi.tensor),
             ValueError, "d_merged", "2*num_heads*key_dim", str(C), str(C - 2),
             untouched=[d_lo.buffer, d_hi.buffer])


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32], ids=str)
def test_unsupported_dtype_forward(dtype):
    lo, hi = (t.to(dtype) for t in lo_hi(torch.float32))
    out = torch.full(MERGED, 7, dtype=dtype)
    name = str(dtype).removeprefix("torch.")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out), TypeError,
             "lo", name, "float32", "bfloat16", untouched=[out])


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32], ids=str)
def test_unsupported_dtype_backward(dtype):
    grad = inputs(MERGED, torch.float32, "cpu").to(dtype)
    d_lo, d_hi = torch.full(HALF, 7, dtype=dtype), torch.full(HALF, 7, dtype=dtype)
    rejected(lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=d_lo, d_hi=d_hi), TypeError,
             "d_merged", str(dtype).removeprefix("torch."), "float16", untouched=[d_lo, d_hi])


def test_unsupported_numpy_dtype():
    lo = np.ones(HALF, dtype=np.float64)
    rejected(lambda: psa_tvm.merge(lo, lo.copy(), NH, H, W), TypeError, "lo", "float64")


def test_non_contiguous_input():
    lo = inputs((B * NH, KD, N), F16, "cpu").transpose(1, 2)  # right shape, wrong strides
    _, hi = lo_hi()
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor), ValueError,
             "lo", "contiguous", str(list(lo.stride())), untouched=[out.buffer])


def test_broadcast_input_with_zero_stride():
    lo = inputs((1, N, KD), F16, "cpu").expand(*HALF)
    _, hi = lo_hi()
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor), ValueError,
             "lo", "contiguous", untouched=[out.buffer])


def test_transposed_grad():
    grad = inputs((B, C, W, H), F16, "cpu").transpose(2, 3)
    d_lo, d_hi = poisoned(HALF, F16, "cpu"), poisoned(HALF, F16, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=d_lo.tensor, d_hi=d_hi.tensor),
             ValueError, "d_merged", "contiguous", untouched=[d_lo.buffer, d_hi.buffer])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_negatively_strided_input(axis):
    lo = np.flip(np.ones(HALF, dtype=np.float32), axis)
    hi = np.ones(HALF, dtype=np.float32)
    out = np.full(MERGED, np.nan, dtype=np.float32)
    message = rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out), ValueError,
                       "lo", "non-negative", str([s // 4 for s in lo.strides]))
    assert np.isnan(out).all(), message


# ----------------------------------------------------------------------- outputs
def test_out_of_wrong_shape():
    lo, hi = lo_hi()
    out = poisoned((B, C, W, H), F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor), ValueError,
             "out", str(list(MERGED)), str([B, C, W, H]), untouched=[out.buffer])


def test_out_of_wrong_numel():
    lo, hi = lo_hi()
    out = poisoned((B, C, H, W + 1), F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor), ValueError,
             "out", str(list(MERGED)), untouched=[out.buffer])


def test_out_of_wrong_dtype():
    lo, hi = lo_hi()
    out = poisoned(MERGED, torch.bfloat16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor), TypeError,
             "out", "float16", "bfloat16", untouched=[out.buffer])


def test_out_non_contiguous():
    lo, hi = lo_hi()
    out = torch.full((B, C, W, H), float("nan"), dtype=F16).transpose(2, 3)
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out), ValueError,
             "out", "contiguous", untouched=[out])


def test_d_lo_of_wrong_shape_and_d_hi_of_wrong_dtype():
    grad = inputs(MERGED, F16, "cpu")
    bad_shape = poisoned((B * NH, N, KD + 1), F16, "cpu")
    ok = poisoned(HALF, F16, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=bad_shape.tensor,
                                            d_hi=ok.tensor),
             ValueError, "d_lo", str(list(HALF)), str([B * NH, N, KD + 1]),
             untouched=[bad_shape.buffer, ok.buffer])
    bad_dtype = poisoned(HALF, torch.float32, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=ok.tensor,
                                            d_hi=bad_dtype.tensor),
             TypeError, "d_hi", "float16", "float32", untouched=[bad_dtype.buffer, ok.buffer])


@pytest.mark.parametrize("victim", ["lo", "hi"])
def test_out_overlapping_an_input(victim):
    numel = B * NH * N * KD
    buffer = inputs((numel + 2 * numel + 64,), F16, "cpu")
    shared = buffer[:numel].view(HALF)
    other = inputs(HALF, F16, "cpu", 5)
    out = buffer[64:64 + 2 * numel].view(MERGED)  # starts inside `shared`
    lo, hi = (shared, other) if victim == "lo" else (other, shared)
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=out), ValueError,
             "out", victim, "overlap", untouched=[buffer])


def test_out_covering_both_inputs():
    """An in-place merge (``out`` is the memory of ``lo`` and ``hi``) is refused."""
    numel = B * NH * N * KD
    buffer = inputs((2 * numel,), F16, "cpu")
    lo, hi = buffer[:numel].view(HALF), buffer[numel:].view(HALF)
    rejected(lambda: psa_tvm.merge(lo, hi, NH, H, W, out=buffer.view(MERGED)), ValueError,
             "out", "overlap", untouched=[buffer])


def test_backward_outputs_overlapping():
    grad = inputs(MERGED, F16, "cpu")
    d = poisoned(HALF, F16, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=d.tensor, d_hi=d.tensor),
             ValueError, "d_hi", "d_lo", "overlap", untouched=[d.buffer])
    inside = grad.view(-1)[: B * NH * N * KD].view(HALF)
    other = poisoned(HALF, F16, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, NH, KD, d_lo=inside, d_hi=other.tensor),
             ValueError, "d_lo", "d_merged", "overlap", untouched=[grad, other.buffer])


# ----------------------------------------------------------------------- zero-size tensors
def test_zero_batch_forward_returns_without_writing():
    lo, hi = lo_hi(shape=(0, N, KD))
    out = poisoned((0, C, H, W), F16, "cpu")
    before = out.buffer.clone()
    result = psa_tvm.merge(lo, hi, NH, H, W, out=out.tensor)
    assert result.shape == (0, C, H, W)
    assert bitwise_equal(out.buffer, before)
    allocated = psa_tvm.merge(lo, hi, NH, H, W)
    assert allocated.shape == reference.merge(lo, hi, NH, H, W).shape


def test_zero_batch_backward_returns_without_writing():
    grad = torch.empty((0, C, H, W), dtype=F16)
    d_lo, d_hi = poisoned((0, N, KD), F16, "cpu"), poisoned((0, N, KD), F16, "cpu")
    before = d_lo.buffer.clone(), d_hi.buffer.clone()
    got_lo, got_hi = psa_tvm.merge_backward(grad, NH, KD, d_lo=d_lo.tensor, d_hi=d_hi.tensor)
    assert got_lo.shape == got_hi.shape == (0, N, KD)
    assert bitwise_equal(d_lo.buffer, before[0]) and bitwise_equal(d_hi.buffer, before[1])


@pytest.mark.parametrize("height", [0, H])
def test_zero_spatial_size_returns_without_writing(height):
    width = 0 if height else W
    lo, hi = (torch.empty((B * NH, 0, KD), dtype=F16) for _ in range(2))
    out = poisoned((B, C, height, width), F16, "cpu")
    before = out.buffer.clone()
    assert psa_tvm.merge(lo, hi, NH, height, width, out=out.tensor).shape == (B, C, height,
                                                                               width)
    assert bitwise_equal(out.buffer, before)
    grad = torch.empty((B, C, height, width), dtype=F16)
    d_lo, d_hi = psa_tvm.merge_backward(grad, NH, KD)
    assert d_lo.shape == d_hi.shape == (B * NH, 0, KD)


# ----------------------------------------------------------------------- counts
@pytest.mark.parametrize("value", [0, -1, True, False, 4.0, "4"], ids=repr)
def test_bad_num_heads(value):
    height, width = 3, 5  # shapes no valid call in this module uses
    lo, hi = lo_hi(shape=(B * NH, height * width, KD))
    out = poisoned((B, C, height, width), F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, value, height, width, out=out.tensor), ValueError,
             "num_heads", repr(value), untouched=[out.buffer])
    grad = inputs((B, C, height, width), F16, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, value, KD), ValueError,
             "num_heads", repr(value))


@pytest.mark.parametrize("value", [0, -KD, True])
def test_bad_key_dim(value):
    grad = inputs(MERGED, F16, "cpu")
    d_lo, d_hi = poisoned(HALF, F16, "cpu"), poisoned(HALF, F16, "cpu")
    rejected(lambda: psa_tvm.merge_backward(grad, NH, value, d_lo=d_lo.tensor,
                                            d_hi=d_hi.tensor),
             ValueError, "key_dim", repr(value), untouched=[d_lo.buffer, d_hi.buffer])


@pytest.mark.parametrize("name", ["H", "W"])
def test_negative_spatial_size(name):
    lo, hi = lo_hi(shape=(B * NH, 1, KD))
    height, width = (-1, -1) if name == "H" else (1, -1)
    rejected(lambda: psa_tvm.merge(lo, hi, NH, height, width), ValueError, name, "-1")


def test_bad_num_heads_is_rejected_after_a_valid_call_with_the_same_shapes():
    lo, hi = lo_hi()
    psa_tvm.merge(lo, hi, NH, H, W)
    out = poisoned(MERGED, F16, "cpu")
    rejected(lambda: psa_tvm.merge(lo, hi, float(NH), H, W, out=out.tensor), ValueError,
             "num_heads", repr(float(NH)), untouched=[out.buffer])


# ----------------------------------------------------------------------- numpy rough edges
def test_read_only_numpy_input():
    lo = np.ones(HALF, dtype=np.float32)
    lo.setflags(write=False)
    hi = np.ones(HALF, dtype=np.float32)
    try:
        merged = psa_tvm.merge(lo, hi, NH, H, W)
    except (ValueError, TypeError) as err:  # an explicit refusal naming `lo` is fine too
        assert "lo" in str(err)
    else:
        expected = reference.merge(torch.from_numpy(lo.copy()), torch.from_numpy(hi), NH, H, W)
        assert np.array_equal(merged, expected.numpy())


def test_numpy_inputs_with_a_torch_cpu_output():
    lo = np.random.default_rng(0).standard_normal(HALF).astype(np.float32)
    hi = np.random.default_rng(1).standard_normal(HALF).astype(np.float32)
    out = torch.full(MERGED, float("nan"))
    psa_tvm.merge(lo, hi, NH, H, W, out=out)
    assert torch.equal(out, reference.merge(torch.from_numpy(lo), torch.from_numpy(hi), NH, H,
                                            W))


# ----------------------------------------------------------------------- RuntimeOp
P_LO, P_HI, P_OUT = 1 << 32, 2 << 32, 3 << 32  # fake, 16-byte aligned, far apart
RKD, RNH = 32, 4


@pytest.fixture(scope="module")
def artifacts(small_artifacts):
    return small_artifacts


@pytest.fixture(scope="module")
def tiled(artifacts):
    return PsaMergeAttnRuntimeOp(RKD, RNH, "float16", schedule="tiled", artifacts=artifacts,
                                 arch="sm_90")


@pytest.fixture(scope="module")
def rowwise(artifacts):
    return PsaMergeAttnRuntimeOp(RKD, RNH, "float16", schedule="rowwise", artifacts=artifacts,
                                 arch="sm_90")


def pairs(batch, n, key_dim=RKD, rows=None):
    shape = (batch * RNH if rows is None else rows, n, key_dim)
    return [(P_LO, shape), (P_HI, shape)]


def test_runtime_op_key_dim_mismatch(tiled):
    rejected(lambda: tiled.grid(pairs(2, 400, key_dim=16)), ValueError,
             "lo", f"key_dim = {RKD}", "16")
    rejected(lambda: tiled.pack_args(pairs(2, 400, key_dim=16), (P_OUT, (2, 2 * RNH * 16, 400)),
                                     RecordingVisitor()), ValueError, f"key_dim = {RKD}")


def test_runtime_op_num_heads_mismatch(tiled):
    rejected(lambda: tiled.grid(pairs(0, 400, rows=6)), ValueError, f"num_heads={RNH}", "6")
    channels = 2 * RNH * RKD
    rejected(lambda: tiled.backward_grid((P_LO, (2, channels // 2, 20, 20))), ValueError,
             "d_merged", str(channels), str(channels // 2))


def test_runtime_op_backward_key_dim_in_outputs(tiled):
    grad = (P_LO, (2, 2 * RNH * RKD, 20, 20))
    bad = [(P_HI, (2 * RNH, 400, RKD // 2)), (P_OUT, (2 * RNH, 400, RKD))]
    rejected(lambda: tiled.pack_backward_args(grad, bad, RecordingVisitor()), ValueError,
             "d_lo", str([2 * RNH, 400, RKD]))


def test_runtime_op_dtype_mismatch_with_tensors(tiled):
    lo, hi = (inputs((2 * RNH, 400, RKD), torch.float32, "cpu", s) for s in (1, 2))
    rejected(lambda: tiled.plan_forward([lo, hi]), TypeError, "lo", "float16", "float32")


def test_runtime_op_for_a_config_that_was_not_built(artifacts):
    message = rejected(lambda: PsaMergeAttnRuntimeOp(16, 4, "float16", schedule="tiled",
                                                     artifacts=artifacts, arch="sm_90"),
                       ArtifactNotFoundError, "kd16_nh4_float16", "psa-tvm build")
    assert "--key-dim 16" in message
    rejected(lambda: PsaMergeAttnRuntimeOp(RKD, RNH, "float16", schedule="nonesuch",
                                           artifacts=artifacts, arch="sm_90"),
             (LookupError, ValueError), "nonesuch")


def test_runtime_op_without_a_manifest(tmp_path):
    rejected(lambda: PsaMergeAttnRuntimeOp(RKD, RNH, "float16", artifacts=tmp_path,
                                           arch="sm_90"),
             ArtifactNotFoundError, "manifest.json", str(tmp_path))


def test_grid_past_cuda_limits_raises(tiled, rowwise):
    batch = 65535 // (2 * RNH) + 1  # tiled: grid.y = B * nh * 2 > 65535
    grid_y = batch * RNH * 2
    rejected(lambda: tiled.grid(pairs(batch, 1)), ValueError,
             "grid[1]", str(grid_y), "65535", f"B={batch}")
    rejected(lambda: tiled.backward_grid((P_LO, (batch, 2 * RNH * RKD, 1, 1))), ValueError,
             "grid[1]", "65535")
    # The rowwise layout puts everything on grid.x: the same shape is fine there ...
    assert rowwise.grid(pairs(batch, 1))[0] == batch * RNH
    # ... until B*nh*N passes 2**31 - 1.
    n = 2**31 // RNH
    rejected(lambda: rowwise.grid(pairs(1, n)), ValueError, "grid[0]", str(2**31 - 1))


def test_negative_extent_in_a_pair(tiled):
    rejected(lambda: tiled.grid([(P_LO, (8, -1, RKD)), (P_HI, (8, -1, RKD))]), ValueError,
             "lo", "negative")


def test_launch_with_cpu_tensors_raises_before_any_launch(tiled, monkeypatch):
    import psa_tvm.runtime.launcher as launcher

    def no_launch(*args, **kwargs):
        raise AssertionError("a kernel launch was attempted")

    monkeypatch.setattr(launcher, "shared_launcher", no_launch)
    monkeypatch.setattr(launcher, "CudaLauncher", no_launch)
    lo, hi = (inputs((2 * RNH, 400, RKD), F16, "cpu", s) for s in (1, 2))
    out = poisoned((2, 2 * RNH * RKD, 20, 20), F16, "cpu")
    rejected(lambda: tiled.launch_forward(lo, hi, out.tensor, 0, (20, 20)), ValueError,
             "CUDA", "cpu", untouched=[out.buffer])
    grad = inputs((2, 2 * RNH * RKD, 20, 20), F16, "cpu")
    d_lo, d_hi = (poisoned((2 * RNH, 400, RKD), F16, "cpu") for _ in range(2))
    rejected(lambda: tiled.launch_backward(grad, d_lo.tensor, d_hi.tensor, 0), ValueError,
             "CUDA", "cpu", untouched=[d_lo.buffer, d_hi.buffer])


def test_launch_with_pointer_pairs_raises_before_any_launch(tiled, monkeypatch):
    import psa_tvm.runtime.launcher as launcher

    def no_launch(*args, **kwargs):
        raise AssertionError("a kernel launch was attempted")

    monkeypatch.setattr(launcher, "shared_launcher", no_launch)
    monkeypatch.setattr(launcher, "CudaLauncher", no_launch)
    lo, hi = pairs(2, 400)
    with pytest.raises(ValueError, match=r"(?i)pointer|pair"):
        tiled.launch_forward(lo, hi, (P_OUT, (2, 2 * RNH * RKD, 20, 20)), 0, (20, 20))


def test_runtime_op_overlapping_pointer_pairs(tiled):
    lo, hi = pairs(2, 400)
    out = (P_LO + 64, (2, 2 * RNH * RKD, 400))  # starts inside lo
    rejected(lambda: tiled.pack_args([lo, hi], out, RecordingVisitor()), ValueError,
             "output", "lo", "overlap")


def test_runtime_op_pointer_pair_not_element_aligned(tiled):
    lo, hi = pairs(2, 400)
    rejected(lambda: tiled.grid([(P_LO + 1, lo[1]), hi]), ValueError, "lo", "aligned")


def _on_gpu(ptr: int, shape: tuple[int, ...], index: int) -> TensorInfo:
    """A CUDA tensor as the RuntimeOp sees it, on GPU ``index`` (no GPU needed to plan)."""
    strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return TensorInfo(ptr=ptr, shape=shape, strides=strides, dtype="float16", device="cuda",
                      device_index=index)


def test_tensors_on_different_gpus_are_refused_before_any_launch(tiled, monkeypatch):
    def no_launch(*args, **kwargs):
        raise AssertionError("launched")

    monkeypatch.setattr("psa_tvm.runtime.launcher.PreparedLaunch.__call__", no_launch)
    shape, merged = (2 * RNH, 400, RKD), (2, 2 * RNH * RKD, 20, 20)
    lo, hi = _on_gpu(P_LO, shape, 0), _on_gpu(P_HI, shape, 1)
    rejected(lambda: tiled.launch_forward(lo, hi, _on_gpu(P_OUT, merged, 0), 0, (20, 20)),
             ValueError, "hi", "cuda:0", "cuda:1")
    rejected(lambda: tiled.launch_forward(lo, _on_gpu(P_HI, shape, 0),
                                          _on_gpu(P_OUT, merged, 1), 0, (20, 20)),
             ValueError, "output", "cuda:0", "cuda:1")
    rejected(lambda: tiled.launch_backward(_on_gpu(P_OUT, merged, 1), lo,
                                           _on_gpu(P_HI, shape, 1)),
             ValueError, "d_lo", "cuda:1", "cuda:0")


@pytest.mark.parametrize("value", ["8M", "-1", " 8", "1e6", "８", "0x10", str(1 << 63)])
def test_malformed_cpu_prefetch_bytes_names_the_variable(monkeypatch, value):
    """``PSA_TVM_CPU_PREFETCH_BYTES`` takes digits only; anything else is a ValueError naming
    the variable and the value (the libraries' C++ reading refuses the same values:
    tests/test_native.py)."""
    from psa_tvm.runtime import env

    monkeypatch.setenv("PSA_TVM_CPU_PREFETCH_BYTES", value)
    with pytest.raises(ValueError, match=r"PSA_TVM_CPU_PREFETCH_BYTES=.*whole number of bytes"):
        env.cpu_prefetch_bytes()


@pytest.mark.parametrize(("value", "expected"), [("", None), ("0", 0), ("8388608", 8 << 20)])
def test_cpu_prefetch_bytes_reads_whole_numbers(monkeypatch, value, expected):
    from psa_tvm.runtime import env

    monkeypatch.setenv("PSA_TVM_CPU_PREFETCH_BYTES", value)
    assert env.cpu_prefetch_bytes() == expected


def test_malformed_cpu_prefetch_bytes_refuses_every_cpu_load(monkeypatch, tmp_path):
    """The Python run time refuses a malformed threshold when it loads any configuration's CPU
    kernels (with prefetching kernels or not), before it looks for a library, as the native
    library's CPU path refuses every call."""
    from psa_tvm.config import OpConfig
    from psa_tvm.runtime.cpu import cpu_kernels

    monkeypatch.setenv("PSA_TVM_CPU_PREFETCH_BYTES", "8M")
    for config in (OpConfig(32, 4, "float32"), OpConfig(6, 1, "float16")):
        with pytest.raises(ValueError, match="PSA_TVM_CPU_PREFETCH_BYTES='8M'"):
            cpu_kernels(config, tmp_path)
