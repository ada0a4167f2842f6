"""The layout ops around attention: one family, ``S`` streams of ``key_dim`` channels per head.

The merged side is an NCHW tensor ``[B, S*nh*kd, H, W]``, viewed by the kernels as
``[B, nh, S, kd, N]`` (per head, ``S`` chunks of ``kd`` channels). The stream side is in the
layout flash attention keeps natively, ``bnhd``: tensors ``[B, N, nh, w*kd]`` (a tensor holds
``w`` consecutive streams), or ``bhnd``: ``[B, nh, N, w*kd]`` (the merge's ``[B*nh, N, kd]``).

Two passes, named like the merge's (whose ``forward`` is a gather and ``backward`` a scatter):

- ``forward``, the *gather*: ``merged[b, h, s, d, n] = sum(t[b, n, h, j*kd + d] for (t, j) in
  streams[s])``. A stream is read from one tensor chunk, or is the sum of several (the two
  flash calls' ``dq`` and ``dk``), so no separate add kernel runs.
- ``backward``, the *scatter*: ``split[b, n, h, s, d] = g[b, h, s, d, n]``, one contiguous
  ``[B, N, nh, S*kd]`` output whose chunks are the streams (views for SDPA); or, for an op
  with ``separate``, ``split[s, b, n, h, d]``: each stream a contiguous tensor.

Measured on the H200 (docs/attention.md): SDPA's flash and cuDNN backends take those chunk views
with no copy, write their outputs in ``[B, N, nh, d]`` memory when ``q`` is so laid out, and their
backward passes return gradients in that layout with no copy either (the ``[B, nh, N, d]``
layout costs four extra copy kernels in the flash backward).

Nothing here imports TVM: the run time reads these specs to name and shape kernel tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The merged (NCHW) tensor's name in each pass's kernels.
GATHER_OUTPUT = "merge"
SCATTER_INPUT = "g"
SCATTER_OUTPUT = "split"
LAYOUTS = ("bnhd", "bhnd")

Source = tuple[str, int]  # (tensor, chunk index inside it)


@dataclass(frozen=True)
class StreamOp:
    """One member of the family: which tensors feed each stream, which passes it has."""

    name: str
    streams: tuple[tuple[Source, ...], ...]
    passes: tuple[str, ...] = ("forward", "backward")
    layout: str = "bnhd"
    doc: str = ""
    separate: bool = False
    """The scatter writes ``[S, ...]``: each stream a contiguous tensor of its own (flash's
    backward copies a ``grad_out`` that is a chunk view; cuDNN and the forward calls don't)."""

    @property
    def num_streams(self) -> int:
        return len(self.streams)

    @property
    def tensor_widths(self) -> dict[str, int]:
        """Stream tensors of the gather, in first-use order, with their width in chunks."""
        widths: dict[str, int] = {}
        for sources in self.streams:
            for tensor, chunk in sources:
                widths[tensor] = max(widths.get(tensor, 0), chunk + 1)
        return widths

    def tensor_names(self, pass_: str) -> tuple[str, ...]:
        """The kernel's tensors for ``pass_``: inputs first, output last."""
        if pass_ == "forward":
            return (*self.tensor_widths, GATHER_OUTPUT)
        return (SCATTER_INPUT, SCATTER_OUTPUT)

    def stream_shape(self, batch: int, n: int, num_heads: int, key_dim: int,
                     width: int) -> tuple[int, ...]:
        if self.layout == "bnhd":
            return (batch, n, num_heads, width * key_dim)
        return (batch, num_heads, n, width * key_dim)

    def kernel_shapes(self, pass_: str, batch: int, n: int, num_heads: int,
                      key_dim: int) -> dict[str, tuple[int, ...]]:
        """Every tensor of ``pass_`` as its kernel views it (merged side 5-D)."""
        merged = (batch, num_heads, self.num_streams, key_dim, n)
        if pass_ == "forward":
            shapes = {t: self.stream_shape(batch, n, num_heads, key_dim, w)
                      for t, w in self.tensor_widths.items()}
            shapes[GATHER_OUTPUT] = merged
            return shapes
        rows = (batch, n, num_heads) if self.layout == "bnhd" else (batch, num_heads, n)
        split = ((self.num_streams, *rows, key_dim) if self.separate
                 else (*rows, self.num_streams, key_dim))
        return {SCATTER_INPUT: merged, SCATTER_OUTPUT: split}


def _chunks(*tensors: str) -> tuple[tuple[Source, ...], ...]:
    return tuple(((t, 0),) for t in tensors)


def _one_tensor(name: str, streams: int) -> tuple[tuple[Source, ...], ...]:
    return tuple(((name, j),) for j in range(streams))


STREAM_OPS: dict[str, StreamOp] = {op.name: op for op in (
    StreamOp("qkv", _one_tensor("p", 4),
             doc="qkv [B, 4*nh*kd, H, W] <-> packed [B, N, nh, 4*kd] (q | k | v_lo | v_hi)"),
    StreamOp("qkv_grad_flash",
             ((("dq1", 0), ("dq2", 0)), (("dk1", 0), ("dk2", 0)), (("dv_lo", 0),),
              (("dv_hi", 0),)), passes=("forward",),
             doc="the two flash calls' gradients (dq, dk summed) -> d_qkv"),
    StreamOp("qkv_grad_cudnn", (*_chunks("dq", "dk"), (("dv", 0),), (("dv", 1),)),
             passes=("forward",), doc="the cuDNN call's gradients (full-width dv) -> d_qkv"),
    StreamOp("attn_flash", _chunks("lo", "hi"), separate=True,
             doc="the two flash outputs [B, N, nh, kd] <-> [B, 2*nh*kd, H, W]; the scatter "
                 "writes [2, B, N, nh, kd] (d_lo, d_hi contiguous for flash's backward)"),
    StreamOp("attn", _one_tensor("o", 2),
             doc="attention output [B, N, nh, 2*kd] <-> [B, 2*nh*kd, H, W]"),
)}


def stream_op(name: str) -> StreamOp:
    try:
        return STREAM_OPS[name]
    except KeyError:
        raise ValueError(f"op: expected one of {sorted(STREAM_OPS)}, got {name!r}") from None
