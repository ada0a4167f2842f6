"""``cpu_lines``: the 16-bit CPU forward with every inner store a whole aligned 64-byte line.

The forward writes rows of the merged tensor, ``N`` elements each; where ``2 * N`` is not a
multiple of 64 the rows start anywhere in a cache line, and the ``cpu_shuffle`` tiles' 32-byte
stores split a line about every other time. On the Xeon that is what the 16-bit tail forwards
pay for (docs/perf.md v32: rows padded to whole units ran 0.1-0.5 lower), and v32's ways of
aligning them with AVX2 cost more than the splits. With AVX-512 it costs one shuffle a line
(docs/perf.md v33):

- a *block* is 32 positions x 8 channels. Vector ``k`` is four 16-byte loads, positions
  ``n0 + k``, ``+ 8``, ``+ 16``, ``+ 24`` (8 channels each), so the in-lane 8x8 transpose of
  the 8 vectors (24 interleaves, :func:`~psa_tvm.compiler.rules.cpu_shuffle.lane_transpose`)
  leaves channel ``k``'s 32 positions in order in result ``k``;
- a row's offset inside its lines, ``o``, is the same at every block (blocks step by 32
  elements), so one ``vpermt2w`` with the index ``iota + 32 - o`` (run-time, the row's own)
  joins the previous block's row and this one's into the aligned line ending inside this
  block, stored whole;
- each pass (8 channels over ``[p0, p1)``) stores its first block, its last whole block and, if
  the pass is not whole blocks, a block at ``p1 - 32`` as they are (unaligned): no store
  reaches outside the pass, so passes and rows need no masks. 8 rows, 8 previous rows and 8
  indices are live: no spill with 32 zmm registers;
- a slice goes in chunks of ``chunk`` positions (the last one takes the rest, so every pass has
  at least 32), each in ``kd / 8`` passes: the chunk's input rows stay in L1 for its passes.

Offsets are taken from the element index, i.e. they are right when the merged tensor starts on
a 64-byte boundary (torch's CPU allocations do); elsewhere the same stores are merely unaligned.
Needs AVX-512BW (the ``vpermt2w`` intrinsic): the kernel is built for its own LLVM target
(:data:`TARGET_MCPU`) and the run time takes it only on CPUs that have it and where it was
measured faster: Intel's, for rows that are not whole lines (``N >= 64``, ``N % 32 != 0``;
:func:`psa_tvm.runtime.cpu.takes_lines`). ``N < 32`` runs a scalar loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx import PrimFunc
from tvm.tirx.script.builder import ir as T

from psa_tvm.compiler.rules.cpu_shuffle import lane_transpose
from psa_tvm.config import OpConfig

#: The LLVM CPU the kernel is compiled for: AVX-512 F/BW/VL/DQ/CD (x86-64 microarchitecture
#: level 4; Skylake-SP and later Xeons, Zen 4 and later).
TARGET_MCPU = "x86-64-v4"
_LINE = 32  # elements of one 64-byte line (16-bit elements)
_GROUP = 8  # channels of a block: one 128-bit lane of 16-bit elements


@dataclass(frozen=True)
class CpuLinesParams:
    """Tunable parameters of :class:`CpuLines`."""

    chunk: int = 256
    """Positions per chunk (a multiple of 32): a chunk's ``chunk * kd`` input elements are read
    once per pass of 8 channels, so they should stay in L1 (256 x 32 x 2 bytes = 16 KB).
    Measured on the Xeon, 16 threads (docs/perf.md v33, the C prototype and this kernel): 256
    within 0.08 of the best of 128, 384, 512 and whole rows in every 16-bit batch-16/64 row,
    and 0.07-0.27 lower than 384 and up at ``N`` 920 and 1073. Any ``N < 2 * chunk`` is one
    chunk."""


def _i32(value: int) -> tirx.IntImm:
    return tirx.IntImm("int32", value)


def _i64(value: int) -> tirx.IntImm:
    return tirx.IntImm("int64", value)


class CpuLines:
    """The aligned-line 16-bit forward; see the module docstring."""

    name: ClassVar[str] = "cpu_lines"
    Params: ClassVar[type] = CpuLinesParams

    def default_params(self, config: OpConfig) -> CpuLinesParams:
        return CpuLinesParams()

    def supports(self, config: OpConfig) -> bool:
        """16-bit types with ``kd`` a whole number of 8-channel groups."""
        return config.itemsize == 2 and config.key_dim % _GROUP == 0

    def check_params(self, config: OpConfig, params: CpuLinesParams) -> None:
        if params.chunk < _LINE or params.chunk % _LINE:
            raise ValueError(f"cpu_lines params {params}: chunk must be a positive multiple "
                             f"of {_LINE}")
        if not self.supports(config):
            raise ValueError(f"cpu_lines cannot build {config}: it needs a 16-bit dtype and "
                             f"key_dim a multiple of {_GROUP}")

    def build(self, config: OpConfig, params: CpuLinesParams, *, name: str) -> PrimFunc:
        """The forward PrimFunc ``(lo, hi, out, NV)``, ``N = NV``, shapes as in
        :mod:`psa_tvm.compiler.compute` (``out`` viewed as ``[B, nh, 2, kd, N]``)."""
        self.check_params(config, params)
        kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
        with IRBuilder() as builder, T.prim_func():
            T.func_name(name)
            T.func_attr({"global_symbol": name, "tirx.noalias": True})
            handles = [T.arg(arg, T.handle()) for arg in ("lo", "hi", "out")]
            n_total = T.arg("NV", T.int64())
            batch = IRBuilder.name("B", T.int64())
            half_shape, merged_shape = (batch * nh, n_total, kd), (batch, nh, 2, kd, n_total)
            lo = T.match_buffer(handles[0], half_shape, dtype, align=2)
            hi = T.match_buffer(handles[1], half_shape, dtype, align=2)
            merged = T.match_buffer(handles[2], merged_shape, dtype, align=2)
            for buf, label in ((lo, "lo"), (hi, "hi"), (merged, "out")):
                IRBuilder.name(label, buf)
            # Integer views of the same memory: the shuffles move bits (bit-exact for float16
            # and bfloat16 alike).
            half_elems = batch * nh * n_total * kd
            sources = [T.decl_buffer((half_elems,), "int16", data=buf.data) for buf in (lo, hi)]
            out = T.decl_buffer((half_elems * 2,), "int16", data=merged.data)
            with T.parallel(_i64(0), batch * nh * 2) as task:
                row = task // 2
                for side, src in enumerate(sources):
                    with T.If(task % 2 == side), T.Then(), T.If(n_total >= _LINE):
                        with T.Then():
                            self._slice(src, out, row * n_total * kd, task * kd * n_total,
                                        n_total, kd, params.chunk)
                        # N < 32: a few positions, one element at a time
                        with T.Else(), T.serial(_i64(0), n_total) as n, \
                                T.serial(_i64(0), _i64(kd)) as d:
                            T.buffer_store(out, tirx.BufferLoad(
                                src, [row * n_total * kd + n * kd + d]),
                                [task * kd * n_total + d * n_total + n])
        return builder.get()

    @staticmethod
    def _block(src, in_base, n0, c0, kd) -> list:
        """Positions ``n0..n0+31`` x channels ``c0..c0+7``: result ``k`` is channel ``c0 + k``
        at the 32 positions in order."""
        vectors = []
        for k in range(_GROUP):
            parts = [tirx.BufferLoad(src, [tirx.Ramp(in_base + (n0 + q * _GROUP + k) * kd + c0,
                                                     _i64(1), _GROUP)])
                     for q in range(_LINE // _GROUP)]
            vectors.append(T.Bind(tirx.Shuffle(parts, [_i32(i) for i in range(_LINE)])))
        results, labels = lane_transpose(vectors, _LINE, _GROUP, T.Bind)
        for k, label in enumerate(labels):
            # lane m of input vector j: position 8 * (m // 8) + j, channel m % 8
            source = [(_GROUP * (m // _GROUP) + j, m % _GROUP) for j, m in label]
            assert source == [(i, k) for i in range(_LINE)], source
        return results

    @staticmethod
    def _slice(src, out, in_base, out_base, n_total, kd, chunk) -> None:
        """One ``(b, h, s)`` slice, ``N >= 32``: chunks, each in passes of 8 channels."""
        # "global" scope: constant and under 1 KB, the allocation stays an LLVM alloca (and
        # then registers); "local" would become a TVMBackendAllocWorkspace call, which a library
        # loaded without TVM does not have.
        prev = T.alloc_buffer((_GROUP * _LINE,), "int16", scope="global")
        chunks = T.Bind(T.max(n_total // chunk, _i64(1)))
        iota = tirx.Ramp(tirx.IntImm("int16", 0), tirx.IntImm("int16", 1), _LINE)

        def store(position, value) -> None:
            T.buffer_store(out, value, [tirx.Ramp(position, _i64(1), _LINE)])

        def keep(k, value) -> None:
            T.buffer_store(prev, value, [tirx.Ramp(_i64(k * _LINE), _i64(1), _LINE)])

        def kept(k):
            return tirx.BufferLoad(prev, [tirx.Ramp(_i64(k * _LINE), _i64(1), _LINE)])

        with T.serial(_i64(0), chunks) as c:
            p0 = T.Bind(c * chunk)
            p1 = T.Bind(T.if_then_else(c == chunks - 1, n_total, p0 + chunk))
            whole = T.Bind((p1 - p0) // _LINE)  # >= 1: every pass has at least 32 positions
            with T.serial(_i64(0), _i64(kd // _GROUP)) as g:
                c0 = T.Bind(g * _GROUP)
                rows = [T.Bind(out_base + (c0 + k) * n_total) for k in range(_GROUP)]
                # The first block as it is (unaligned): nothing before p0 is touched.
                for k, value in enumerate(CpuLines._block(src, in_base, p0, c0, kd)):
                    store(rows[k] + p0, value)
                    keep(k, value)
                offsets = [T.Bind((rows[k] + p0) % _LINE) for k in range(_GROUP)]
                with T.serial(_i64(1), whole) as j:
                    n0 = T.Bind(p0 + j * _LINE)
                    for k, value in enumerate(CpuLines._block(src, in_base, n0, c0, kd)):
                        index = iota + tirx.Broadcast(
                            tirx.Cast("int16", _i64(_LINE) - offsets[k]), _LINE)
                        # concat(prev, cur)[32 - o + e]: the aligned line at n0 - o
                        line = T.call_llvm_pure_intrin(
                            "int16x32", "llvm.x86.avx512.vpermi2var.hi.512", kept(k), index,
                            value)
                        store(rows[k] + n0 - offsets[k], line)
                        keep(k, value)
                # The last whole block as it is, and the rest by a block at p1 - 32.
                last = T.Bind(p0 + (whole - 1) * _LINE)
                for k in range(_GROUP):
                    store(rows[k] + last, kept(k))
                with T.If(p1 > last + _LINE), T.Then():
                    tail = T.Bind(p1 - _LINE)
                    for k, value in enumerate(CpuLines._block(src, in_base, tail, c0, kd)):
                        store(rows[k] + tail, value)

