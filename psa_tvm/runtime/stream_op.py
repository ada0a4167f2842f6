"""RuntimeOps of the attention layout family (:mod:`psa_tvm.layouts`). No TVM, no torch.

:class:`PsaStreamRuntimeOp` launches one member of the family (both its passes) from the
artifact manifest, with the same kernel-choice rule as the merge (:mod:`psa_tvm.runtime.plan`).
:class:`PsaPackQkvRuntimeOp` is the seed's RuntimeOp surface for the pack: ``qkv [B, 4*nh*kd,
H, W]`` in, ``packed [B, H*W, nh, 4*kd]`` out (q | k | v_lo | v_hi per head), backward the
inverse.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psa_tvm.config import OpConfig
from psa_tvm.layouts import GATHER_OUTPUT, SCATTER_INPUT, SCATTER_OUTPUT, StreamOp, stream_op
from psa_tvm.runtime import env
from psa_tvm.runtime.artifacts import find_build
from psa_tvm.runtime.manifest import BuildSpec
from psa_tvm.runtime.memo import Memo
from psa_tvm.runtime.plan import (
    GRID_LIMITS,
    LaunchPlan,
    choose_kernel,
    index_dtype_for,
    main_variant,
    pointer_alignment,
)
from psa_tvm.runtime.protocol import SingleLaunchSurface
from psa_tvm.runtime.tensors import CUDA, TensorInfo, tensor_info
from psa_tvm.runtime.tuned import DEFAULT_SCHEDULE
from psa_tvm.runtime.validation import check_count, check_dtype, check_no_overlap

__all__ = ["PsaPackQkvRuntimeOp", "PsaStreamRuntimeOp"]


@dataclasses.dataclass(frozen=True)
class StreamDims:
    """Concrete sizes of one call."""

    batch: int
    n: int

    def numel(self, op: StreamOp, config: OpConfig) -> int:
        """Elements of the merged tensor (the largest of the call)."""
        return self.batch * op.num_streams * config.num_heads * config.key_dim * self.n


class PsaStreamRuntimeOp:
    """One op of the layout family, over prebuilt artifacts (see :mod:`psa_tvm.layouts`).

    ``launch(pass_, tensors, batch, n, stream)`` takes the kernel's tensors by name (the stream
    tensors of ``op.tensor_names(pass_)`` and the merged tensor, ``merge`` or ``g``); the merged
    tensor may have any contiguous shape of the right size (``[B, C, H, W]`` usually).
    """

    def __init__(self, op: str, key_dim: int, num_heads: int, dtype: Any = "float16", *,
                 schedule: str | None = None, artifacts: str | os.PathLike | None = None) -> None:
        self.op = stream_op(op)
        self.config = OpConfig(key_dim, num_heads, dtype)
        self.schedule = schedule or DEFAULT_SCHEDULE
        root = Path(artifacts) if artifacts is not None else env.default_artifacts_dir()
        may_build = artifacts is None and env.artifacts_override() is None
        self._builds = {p: find_build(root, self.config, self.schedule, None,
                                      may_build=may_build, op=self.op.name)
                        for p in self.op.passes}
        self._plans = Memo()

    @property
    def builds(self) -> dict[str, BuildSpec]:
        return dict(self._builds)

    def kernel_shapes(self, pass_: str, dims: StreamDims) -> dict[str, tuple[int, ...]]:
        return self.op.kernel_shapes(pass_, dims.batch, dims.n, self.config.num_heads,
                                     self.config.key_dim)

    def check(self, pass_: str, tensors: dict[str, TensorInfo], dims: StreamDims) -> None:
        """Every argument check of one call, before anything is launched or written."""
        if pass_ not in self._builds:
            raise ValueError(f"pass: op {self.op.name!r} has {list(self._builds)}, got {pass_!r}")
        check_count("batch", dims.batch, minimum=0)
        check_count("n", dims.n, minimum=0)
        shapes = self.kernel_shapes(pass_, dims)
        missing = set(shapes) - set(tensors)
        if missing or len(tensors) != len(shapes):
            raise ValueError(f"tensors: op {self.op.name!r} {pass_} expects {sorted(shapes)}, "
                             f"got {sorted(tensors)}")
        merged = GATHER_OUTPUT if pass_ == "forward" else SCATTER_INPUT
        device = None
        for name, info in tensors.items():
            check_dtype(name, info, self.config.dtype)
            expected = shapes[name]
            numel = 1
            for extent in expected:
                numel *= extent
            if name in (merged, SCATTER_OUTPUT):  # any contiguous shape of that size
                if info.numel != numel:
                    raise ValueError(f"{name}: expected {numel} elements ({list(expected)}), "
                                     f"got shape {list(info.shape)}")
            elif tuple(info.shape) != expected:
                raise ValueError(f"{name}: expected shape {list(expected)}, got "
                                 f"{list(info.shape)}")
            if not info.is_contiguous():
                raise ValueError(f"{name}: expected a contiguous tensor, got strides "
                                 f"{list(info.strides or ())}")
            if info.device is not None:
                if device is not None and (info.device, info.device_index) != device:
                    raise ValueError(f"{name}: expected every tensor on one device, got "
                                     f"{info.device}:{info.device_index} and {device}")
                device = (info.device, info.device_index)
        output = GATHER_OUTPUT if pass_ == "forward" else SCATTER_OUTPUT
        for name, info in tensors.items():
            if name != output:
                check_no_overlap(output, tensors[output], name, info)

    def plan(self, pass_: str, tensors: dict[str, TensorInfo], dims: StreamDims) -> LaunchPlan:
        """Validate a call and choose its kernel, grid, block and arguments."""
        self.check(pass_, tensors, dims)
        build = self._builds[pass_]
        numel = dims.numel(self.op, self.config)
        kernel = choose_kernel(build, pass_, dims.n, index_dtype_for(numel),
                               pointer_alignment(tensors), numel)
        symbols = kernel.bind_symbols(self.kernel_shapes(pass_, dims))
        grid, block = kernel.launch_dims(symbols)
        for axis, (size, limit) in enumerate(zip(grid, GRID_LIMITS, strict=True)):
            if size > limit:
                raise ValueError(f"shape: B={dims.batch}, N={dims.n} needs grid[{axis}]={size}, "
                                 f"past the CUDA limit {limit}")
        args = tuple(("ptr", p.name, tensors[p.tensor].ptr) if p.kind == "ptr"
                     else (p.kind, p.name, symbols[p.symbol]) for p in kernel.params)
        device_index = next((t.device_index for t in tensors.values() if t.device == CUDA), None)
        return LaunchPlan(build, kernel, grid, block, kernel.dynamic_smem_bytes, args,
                          device_index)

    def launch(self, pass_: str, tensors: dict[str, Any], batch: int, n: int,
               stream: int = 0) -> None:
        """Run ``pass_`` on ``stream``; every check happens before the launch."""
        infos = {name: tensor_info(t, name) for name, t in tensors.items()}
        key = (pass_, batch, n, tuple((k, i.signature()) for k, i in infos.items()))
        launch = self._plans.get(key)
        if launch is None:
            dims = StreamDims(batch, n)
            plan = self.plan(pass_, infos, dims)
            for name, info in infos.items():
                if info.device != CUDA:
                    raise ValueError(f"{name}: expected a CUDA tensor, got one on {info.device}")
            from psa_tvm.runtime.launcher import PreparedLaunch  # needs cuda-python

            launch = self._plans.put(key, PreparedLaunch(plan))
        else:  # same geometry as a validated call; only the addresses are new
            output = GATHER_OUTPUT if pass_ == "forward" else SCATTER_OUTPUT
            for name, info in infos.items():
                if name != output:
                    check_no_overlap(output, infos[output], name, info)
        launch(infos, stream)


def _shape_or_info(obj: object, name: str, dtype: str) -> TensorInfo:
    """Tensors and ``(ptr, shape)`` pairs; a bare shape as an aligned placeholder."""
    if isinstance(obj, (list, tuple)) and all(isinstance(s, int) for s in obj) and not (
            len(obj) == 2 and isinstance(obj[1], (list, tuple))):
        return TensorInfo(ptr=0, shape=tuple(obj), strides=None, dtype=None, device=None)
    info = tensor_info(obj, name)
    if info.dtype is None and info.ptr:  # a (pointer, shape) pair holds this op's dtype
        info = dataclasses.replace(info, dtype=dtype)
    return info


class PsaPackQkvRuntimeOp(SingleLaunchSurface):
    """The pack as a RuntimeOp with the seed's surface.

    Forward: ``qkv [B, 4*nh*kd, H, W]`` (the ``qkv`` conv's output) -> ``packed [B, H*W, nh,
    4*kd]``, whose ``kd``-chunks per head are ``q``, ``k``, ``v_lo``, ``v_hi`` (``v_lo|v_hi`` is
    the full ``v``). Backward: ``d_packed`` -> ``d_qkv``. Both come from the family op ``qkv``.
    """

    def __init__(self, key_dim: int, num_heads: int, dtype: Any = "float16", *,
                 schedule: str | None = None, artifacts: str | os.PathLike | None = None) -> None:
        self.stream = PsaStreamRuntimeOp("qkv", key_dim, num_heads, dtype, schedule=schedule,
                                         artifacts=artifacts)
        self.config = self.stream.config

    # Our forward is the family's scatter ("backward"), our backward its gather ("forward").
    def _qkv_dims(self, shape: Sequence[int]) -> StreamDims:
        cfg = self.config
        channels = 4 * cfg.num_heads * cfg.key_dim
        if len(shape) != 4 or shape[1] != channels:
            raise ValueError(f"qkv: expected [B, {channels}, H, W], got {list(shape)}")
        return StreamDims(shape[0], shape[2] * shape[3])

    def _packed_dims(self, shape: Sequence[int]) -> StreamDims:
        cfg = self.config
        if len(shape) != 4 or tuple(shape[2:]) != (cfg.num_heads, 4 * cfg.key_dim):
            raise ValueError(f"d_packed: expected [B, H*W, {cfg.num_heads}, "
                             f"{4 * cfg.key_dim}], got {list(shape)}")
        return StreamDims(shape[0], shape[1])

    def plan_forward(self, inputs: Sequence[Any], output: Any = None) -> LaunchPlan:
        if len(inputs) != 1:
            raise ValueError(f"inputs: expected [qkv], got {len(inputs)} tensors")
        qkv = _shape_or_info(inputs[0], "qkv", self.config.dtype)
        dims = self._qkv_dims(qkv.shape)
        shapes = self.stream.kernel_shapes("backward", dims)
        out = (_shape_or_info(output, "output", self.config.dtype) if output is not None else
               TensorInfo(0, shapes[SCATTER_OUTPUT], None, None, None))
        return self.stream.plan("backward", {SCATTER_INPUT: qkv, SCATTER_OUTPUT: out}, dims)

    def plan_backward(self, grad_output: Any, grad_inputs: Sequence[Any] | None = None
                      ) -> LaunchPlan:
        grad = _shape_or_info(grad_output, "d_packed", self.config.dtype)
        dims = self._packed_dims(grad.shape)
        shapes = self.stream.kernel_shapes("forward", dims)
        if grad_inputs is not None and len(grad_inputs) != 1:
            raise ValueError(f"grad_inputs: expected [d_qkv], got {len(grad_inputs)}")
        out = (_shape_or_info(grad_inputs[0], "d_qkv", self.config.dtype) if grad_inputs
               else TensorInfo(0, shapes[GATHER_OUTPUT], None, None, None))
        return self.stream.plan("forward", {"p": grad, GATHER_OUTPUT: out}, dims)

    # ----------------------------------------------------------------- seed surface
    def kernel_name(self, inputs: Sequence[Any] | None = None, output: Any = None) -> str:
        if inputs is not None:
            return self.plan_forward(inputs, output).kernel.entry
        build = self.stream.builds["backward"]
        return main_variant(build, "backward").entry

    def forward_source(self) -> str:
        return self.stream.builds["backward"].source.read_text()

    def backward_source(self) -> str:
        return self.stream.builds["forward"].source.read_text()

    def n_activation_inputs(self) -> int:
        """One activation: ``qkv``."""
        return 1

    def compute_concrete_output_shape(self, input_shapes: Sequence[Sequence[int]],
                                      spatial: tuple[int, int] | None = None) -> list[int]:
        """``[B, H*W, nh, 4*kd]`` for ``qkv [B, 4*nh*kd, H, W]`` (``spatial`` is in the
        input's shape already)."""
        dims = self._qkv_dims(list(input_shapes[0]))
        return [dims.batch, dims.n, self.config.num_heads, 4 * self.config.key_dim]

    def forward_output_row_stride(self, input_shapes: Sequence[Sequence[int]]) -> int:
        """Elements between consecutive spatial rows of the packed output: ``nh*4*kd``."""
        return self.config.num_heads * 4 * self.config.key_dim

    def backward_grad_output_row_stride(self, grad_output_shape: Sequence[int]) -> int:
        return self.config.num_heads * 4 * self.config.key_dim

    def launch_forward(self, qkv: Any, packed: Any, stream: int = 0) -> None:
        dims = self._qkv_dims(tensor_info(qkv, "qkv").shape)
        self.stream.launch("backward", {SCATTER_INPUT: qkv, SCATTER_OUTPUT: packed},
                           dims.batch, dims.n, stream)

    def launch_backward(self, d_packed: Any, d_qkv: Any, stream: int = 0) -> None:
        dims = self._packed_dims(tensor_info(d_packed, "d_packed").shape)
        self.stream.launch("forward", {"p": d_packed, GATHER_OUTPUT: d_qkv},
                           dims.batch, dims.n, stream)
