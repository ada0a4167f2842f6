"""``cpu_lines``: the CPU forward with every inner store a whole aligned 64-byte line.

The forward writes rows of the merged tensor, ``N`` elements each; where a row is not a whole
number of 64-byte lines the rows start anywhere in a line, and the ``cpu_shuffle`` tiles'
32-byte stores split a line about every other time. On the Xeon that is what the 16-bit tail
forwards paid for (docs/perf.md v32: rows padded to whole units ran 0.1-0.5 lower), and v32's
ways of aligning them with AVX2 cost more than the splits. With AVX-512 it costs one shuffle a
line (docs/perf.md v33). With ``line = 64 / itemsize`` and ``group = 16 / itemsize`` (32 and 8
for 16-bit types, 16 and 4 for float32):

- a *block* is ``line`` positions x ``group`` channels. Vector ``k`` is ``line / group``
  16-byte loads, positions ``n0 + k``, ``+ group``, ``+ 2 * group`` ..., so the in-lane
  transpose of the ``group`` vectors
  (:func:`~psa_tvm.compiler.rules.cpu_shuffle.lane_transpose`) leaves channel ``k``'s ``line``
  positions in order in result ``k``;
- a row's offset inside its lines, ``o``, is the same at every block (blocks step by a line),
  so one ``vpermt2w`` / ``vpermt2d`` with the index ``iota + line - o`` (run-time, the row's
  own) joins the previous block's row and this one's into the aligned line ending inside this
  block, stored whole;
- each pass (one channel group over ``[p0, p1)``) stores its first block, its last whole block
  and, if the pass is not whole blocks, a block at ``p1 - line`` as they are (unaligned): no
  store reaches outside the pass, so passes and rows need no masks. ``3 * group`` vectors are
  live: no spill with 32 zmm registers;
- a slice goes in chunks of ``chunk`` positions (the last one takes the rest, so every pass has
  at least a line), each in ``kd / group`` passes: the chunk's input rows stay in L1 for its
  passes.

Offsets are taken from the element index, i.e. they are right when the merged tensor starts on
a 64-byte boundary (torch's CPU allocations do); elsewhere the same stores are merely unaligned.
Needs AVX-512BW (the permutes): the kernel is built for its own LLVM target
(:data:`TARGET_MCPU`) and the run time takes it only on CPUs that have it and where it was
measured faster: Intel's, for rows that are not whole lines (:func:`psa_tvm.runtime.cpu.
takes_lines`). ``N`` below one line runs a scalar loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.tirx import PrimFunc
from tvm.tirx.script.builder import ir as T

from psa_tvm.compiler.rules.cpu_shuffle import lane_transpose
from psa_tvm.config import OpConfig

#: The LLVM CPU the kernel is compiled for: AVX-512 F/BW/VL/DQ/CD (x86-64 microarchitecture
#: level 4; Skylake-SP and later Xeons, Zen 4 and later).
TARGET_MCPU = "x86-64-v4"
#: The two-source permute of 32-bit / 16-bit elements (vpermt2d / vpermt2w).
_PERMUTE = {4: "llvm.x86.avx512.vpermi2var.d.512", 2: "llvm.x86.avx512.vpermi2var.hi.512"}


class _Geometry(NamedTuple):
    """A block's shape for one element size: ``line`` positions (one 64-byte line) x ``group``
    channels (one 128-bit lane), moved as ``bits``-bit integers."""

    line: int
    group: int
    bits: str

    @classmethod
    def of(cls, itemsize: int) -> _Geometry:
        return cls(64 // itemsize, 16 // itemsize, f"int{8 * itemsize}")


@dataclass(frozen=True)
class CpuLinesParams:
    """Tunable parameters of :class:`CpuLines`."""

    chunk: int = 256
    """Positions per chunk (a multiple of the line: 32 16-bit or 16 float32 elements): a chunk's
    ``chunk * kd`` input elements are read once per pass of one channel group, so they should
    stay in L1 (256 x 32 x 2 bytes = 16 KB; float32's default is 128).
    Measured on the Xeon, 16 threads (docs/perf.md v33, the C prototype and this kernel): 256
    within 0.08 of the best of 128, 384, 512 and whole rows in every 16-bit batch-16/64 row,
    and 0.07-0.27 lower than 384 and up at ``N`` 920 and 1073. Any ``N < 2 * chunk`` is one
    chunk."""


def _i32(value: int) -> tirx.IntImm:
    return tirx.IntImm("int32", value)


def _i64(value: int) -> tirx.IntImm:
    return tirx.IntImm("int64", value)


class CpuLines:
    """The aligned-line forward; see the module docstring."""

    name: ClassVar[str] = "cpu_lines"
    Params: ClassVar[type] = CpuLinesParams

    def default_params(self, config: OpConfig) -> CpuLinesParams:
        # float32: 128 positions, the same 16 KB of input rows at kd 32 as 256 16-bit ones;
        # measured on the Xeon (docs/perf.md v33, call 7) lowest or within 0.02 of chunks 256
        # and 512 in every row, up to 0.9 lower.
        return CpuLinesParams(chunk=256 if config.itemsize == 2 else 128)

    def supports(self, config: OpConfig) -> bool:
        """16-bit and 32-bit types with ``kd`` a whole number of 128-bit channel groups."""
        return config.itemsize in _PERMUTE and config.key_dim % (16 // config.itemsize) == 0

    def check_params(self, config: OpConfig, params: CpuLinesParams) -> None:
        if not self.supports(config):
            raise ValueError(f"cpu_lines cannot build {config}: it needs a 16- or 32-bit dtype "
                             f"and key_dim a multiple of 16 bytes")
        line = _Geometry.of(config.itemsize).line
        if params.chunk < line or params.chunk % line:
            raise ValueError(f"cpu_lines params {params}: chunk must be a positive multiple "
                             f"of {line} for {config.dtype}")

    def build(self, config: OpConfig, params: CpuLinesParams, *, name: str) -> PrimFunc:
        """The forward PrimFunc ``(lo, hi, out, NV)``, ``N = NV``, shapes as in
        :mod:`psa_tvm.compiler.compute` (``out`` viewed as ``[B, nh, 2, kd, N]``)."""
        self.check_params(config, params)
        kd, nh, dtype = config.key_dim, config.num_heads, config.dtype
        geo = _Geometry.of(config.itemsize)
        with IRBuilder() as builder, T.prim_func():
            T.func_name(name)
            T.func_attr({"global_symbol": name, "tirx.noalias": True})
            handles = [T.arg(arg, T.handle()) for arg in ("lo", "hi", "out")]
            n_total = T.arg("NV", T.int64())
            batch = IRBuilder.name("B", T.int64())
            half_shape, merged_shape = (batch * nh, n_total, kd), (batch, nh, 2, kd, n_total)
            align = config.itemsize
            lo = T.match_buffer(handles[0], half_shape, dtype, align=align)
            hi = T.match_buffer(handles[1], half_shape, dtype, align=align)
            merged = T.match_buffer(handles[2], merged_shape, dtype, align=align)
            for buf, label in ((lo, "lo"), (hi, "hi"), (merged, "out")):
                IRBuilder.name(label, buf)
            # Integer views of the same memory: the shuffles move bits (bit-exact for every
            # dtype, NaN payloads included).
            half_elems = batch * nh * n_total * kd
            sources = [T.decl_buffer((half_elems,), geo.bits, data=buf.data) for buf in (lo, hi)]
            out = T.decl_buffer((half_elems * 2,), geo.bits, data=merged.data)
            with T.parallel(_i64(0), batch * nh * 2) as task:
                row = task // 2
                for side, src in enumerate(sources):
                    with T.If(task % 2 == side), T.Then(), T.If(n_total >= geo.line):
                        with T.Then():
                            self._slice(src, out, row * n_total * kd, task * kd * n_total,
                                        n_total, kd, params.chunk, geo)
                        # N below one line: a few positions, one element at a time
                        with T.Else(), T.serial(_i64(0), n_total) as n, \
                                T.serial(_i64(0), _i64(kd)) as d:
                            T.buffer_store(out, tirx.BufferLoad(
                                src, [row * n_total * kd + n * kd + d]),
                                [task * kd * n_total + d * n_total + n])
        return builder.get()

    @staticmethod
    def _block(src, in_base, n0, c0, kd, geo: _Geometry) -> list:
        """Positions ``n0 .. n0 + line - 1`` x channels ``c0 .. c0 + group - 1``: result ``k``
        is channel ``c0 + k`` at the ``line`` positions in order."""
        line, group = geo.line, geo.group
        vectors = []
        for k in range(group):
            parts = [tirx.BufferLoad(src, [tirx.Ramp(in_base + (n0 + q * group + k) * kd + c0,
                                                     _i64(1), group)])
                     for q in range(line // group)]
            vectors.append(T.Bind(tirx.Shuffle(parts, [_i32(i) for i in range(line)])))
        results, labels = lane_transpose(vectors, line, group, T.Bind)
        for k, label in enumerate(labels):
            # lane m of input vector j: position group * (m // group) + j, channel m % group
            source = [(group * (m // group) + j, m % group) for j, m in label]
            assert source == [(i, k) for i in range(line)], source
        return results

    @staticmethod
    def _slice(src, out, in_base, out_base, n_total, kd, chunk, geo: _Geometry) -> None:
        """One ``(b, h, s)`` slice, ``N`` at least one line: chunks, each in passes of one
        channel group."""
        line, group, bits = geo
        # "global" scope: constant and under 1 KB, the allocation stays an LLVM alloca (and
        # then registers); "local" would become a TVMBackendAllocWorkspace call, which a library
        # loaded without TVM does not have.
        prev = T.alloc_buffer((group * line,), bits, scope="global")
        chunks = T.Bind(T.max(n_total // chunk, _i64(1)))
        iota = tirx.Ramp(tirx.IntImm(bits, 0), tirx.IntImm(bits, 1), line)

        def store(position, value) -> None:
            T.buffer_store(out, value, [tirx.Ramp(position, _i64(1), line)])

        def keep(k, value) -> None:
            T.buffer_store(prev, value, [tirx.Ramp(_i64(k * line), _i64(1), line)])

        def kept(k):
            return tirx.BufferLoad(prev, [tirx.Ramp(_i64(k * line), _i64(1), line)])

        with T.serial(_i64(0), chunks) as c:
            p0 = T.Bind(c * chunk)
            p1 = T.Bind(T.if_then_else(c == chunks - 1, n_total, p0 + chunk))
            whole = T.Bind((p1 - p0) // line)  # >= 1: every pass has at least one line
            with T.serial(_i64(0), _i64(kd // group)) as g:
                c0 = T.Bind(g * group)
                rows = [T.Bind(out_base + (c0 + k) * n_total) for k in range(group)]
                # The first block as it is (unaligned): nothing before p0 is touched.
                for k, value in enumerate(CpuLines._block(src, in_base, p0, c0, kd, geo)):
                    store(rows[k] + p0, value)
                    keep(k, value)
                offsets = [T.Bind((rows[k] + p0) % line) for k in range(group)]
                with T.serial(_i64(1), whole) as j:
                    n0 = T.Bind(p0 + j * line)
                    for k, value in enumerate(CpuLines._block(src, in_base, n0, c0, kd, geo)):
                        index = iota + tirx.Broadcast(
                            tirx.Cast(bits, _i64(line) - offsets[k]), line)
                        # concat(prev, cur)[line - o + e]: the aligned line at n0 - o
                        joined = T.call_llvm_pure_intrin(
                            f"{bits}x{line}", _PERMUTE[64 // line], kept(k), index, value)
                        store(rows[k] + n0 - offsets[k], joined)
                        keep(k, value)
                # The last whole block as it is, and the rest by a block at p1 - line.
                last = T.Bind(p0 + (whole - 1) * line)
                for k in range(group):
                    store(rows[k] + last, kept(k))
                with T.If(p1 > last + line), T.Then():
                    tail = T.Bind(p1 - line)
                    for k, value in enumerate(CpuLines._block(src, in_base, tail, c0, kd, geo)):
                        store(rows[k] + tail, value)
