"""Poisoned outputs with canaries, non-zero inputs, and bitwise comparison."""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import torch

from psa_tvm.config import DTYPE_ITEMSIZE

_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
# NaN payloads no input or correct output contains.
_POISON = {torch.float32: 0x7FC0DEAD, torch.float16: 0x7E5A, torch.bfloat16: 0x7FDA}
CANARY = 64  # elements of poison before and after every output (keeps 16-byte alignment)

DTYPES = {name: getattr(torch, name) for name in DTYPE_ITEMSIZE}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_BITS[t.dtype])


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def inputs(shape, dtype: torch.dtype, device, seed: int = 0) -> torch.Tensor:
    """Random normal values, never zero: an unwritten or misplaced element cannot hide."""
    gen = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=gen)
    t = torch.where(t == 0, torch.ones_like(t), t)
    return t.to(device=device, dtype=dtype)


@dataclass
class Poisoned:
    """An output tensor in the middle of a poisoned buffer."""

    buffer: torch.Tensor
    tensor: torch.Tensor
    offset: int

    def canaries_intact(self) -> bool:
        poison = _POISON[self.buffer.dtype]
        raw = self.buffer.view(_BITS[self.buffer.dtype])
        head, tail = raw[: self.offset], raw[self.offset + self.tensor.numel():]
        return bool((head == _signed(poison, raw.dtype)).all() and
                    (tail == _signed(poison, raw.dtype)).all())


def _signed(value: int, dtype: torch.dtype) -> int:
    width = torch.iinfo(dtype).bits
    return value - (1 << width) if value >= 1 << (width - 1) else value


def poisoned(shape, dtype: torch.dtype, device, offset: int = CANARY) -> Poisoned:
    """A poisoned tensor of ``shape`` at element ``offset`` of a buffer with canaries around."""
    numel = 1
    for s in shape:
        numel *= s
    buffer = torch.empty(offset + numel + CANARY, dtype=dtype, device=device)
    buffer.view(_BITS[dtype]).fill_(_signed(_POISON[dtype], _BITS[dtype]))
    return Poisoned(buffer, buffer[offset: offset + numel].view(shape), offset)


def mutate_arguments(draw, args: list, tensors, scalars, st) -> list:
    """Break a valid argument list for a fuzz test: up to three times, drop an argument, add
    one, or replace one by a tensor or a scalar drawn from the given hypothesis strategies."""
    args = list(args)
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(args)))
        kind = draw(st.sampled_from(["tensor", "scalar", "drop", "add"]))
        if kind == "drop" and args:
            args.pop(min(i, len(args) - 1))
        elif kind == "add":
            args.insert(i, draw(tensors | scalars))
        elif args:
            args[min(i, len(args) - 1)] = draw(tensors) if kind == "tensor" else draw(scalars)
    return args


_UNTOUCHED: list = []  # the regions handed out below, alive for the whole session


def untouched_memory(nbytes: int):
    """``nbytes`` of anonymous memory that is never touched (MAP_NORESERVE: no RAM is used until
    written), for huge tensors or arrays whose planning reads shapes and pointers only; skips
    the test when the address space cannot be reserved."""
    import pytest

    try:
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
                           | getattr(mmap, "MAP_NORESERVE", 0))
    except OSError as err:
        pytest.skip(f"cannot reserve {nbytes} bytes of address space: {err}")
    _UNTOUCHED.append(region)
    return region


def rule_n_side_bytes(kernel, itemsize: int) -> float:
    """A kernel's N-side width in the launch rule as docs/native.md states it, written apart
    from runtime/plan.py: a plain kernel's ``vec * itemsize``; a shifted one (any N) counts as
    6 bytes, between an 8- and a 4-byte N side, and its second record (a backward with
    ``bwd_aligned``, for N % 8 == 0) as just over its 16 bytes."""
    if kernel.shifted:
        return 6 if kernel.vec == 1 else kernel.vec * itemsize + 1
    return kernel.vec * itemsize


def shifted_backward_at_aligned_n(build) -> bool:
    """Whether ``build`` also runs its shifted backward where ``N`` is a multiple of the vector
    width: its shifted params set ``bwd_aligned`` (records leave the flag out where it is 0)."""
    return bool((build.shifted_params or {}).get("bwd_aligned", 0))


def cpu_has_avx512bw() -> bool:
    """Whether this CPU has AVX-512BW and VL (the aligned-line CPU forward's instructions), from
    /proc/cpuinfo; False where there is none."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return " avx512bw" in flags and " avx512vl" in flags
