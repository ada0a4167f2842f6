"""``PsaMergeAttnRuntimeOp``: the seed's RuntimeOp surface, over prebuilt artifacts. No TVM.

A runtime asks the op for grid, block and packed kernel arguments for concrete tensors; all of it
comes from the artifact manifest, i.e. from what the schedule produced. Which kernel variant runs
(16-byte vectors or scalar, int32 or int64 indexing) is decided per call from the shapes and the
data pointers' alignment, so ``grid``/``block``/``pack_args`` given the same tensors agree.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from psa_tvm.config import INT32_MAX, OpConfig
from psa_tvm.runtime.manifest import BuildSpec, KernelSpec, Manifest
from psa_tvm.runtime.memo import Memo
from psa_tvm.runtime.tensors import CUDA, TensorInfo, tensor_info
from psa_tvm.runtime.tuned import DEFAULT_SCHEDULE, tuned_entry
from psa_tvm.validation import (
    MergeDims,
    check_backward_input,
    check_forward_inputs,
    check_no_overlap,
    check_output,
)

_GRID_LIMITS = (2**31 - 1, 65535, 65535)
# Tail tiles index up to one tile past the end; keep int32 kernels clear of that margin.
_INT32_MARGIN = 1 << 20


class ArgVisitor(Protocol):
    """Receives a kernel's arguments in the kernel's parameter order."""

    def visit_ptr(self, value: int, name: str) -> None:
        """A device pointer (``name`` is the kernel parameter, e.g. ``lo_ptr``)."""

    def visit_i32(self, value: int, name: str) -> None:
        """A 32-bit shape symbol, e.g. ``B`` (batch) or ``NV`` (``N / vec``)."""

    def visit_i64(self, value: int, name: str) -> None:
        """A 64-bit shape symbol (int64-indexed kernels, for tensors past 2**31 elements)."""

    def visit_f32(self, value: float, name: str) -> None:
        """A 32-bit float (this op's kernels have none; part of the protocol)."""


class RecordingVisitor:
    """An :class:`ArgVisitor` that keeps ``(kind, name, value)`` triples, in order."""

    def __init__(self) -> None:
        self.args: list[tuple[str, str, int | float]] = []

    def visit_ptr(self, value: int, name: str) -> None:
        self.args.append(("ptr", name, value))

    def visit_i32(self, value: int, name: str) -> None:
        self.args.append(("int32", name, value))

    def visit_i64(self, value: int, name: str) -> None:
        self.args.append(("int64", name, value))

    def visit_f32(self, value: float, name: str) -> None:
        self.args.append(("float32", name, value))


@dataclass(frozen=True)
class LaunchPlan:
    """Everything one launch needs: which kernel, its dimensions and its arguments."""

    build: BuildSpec
    kernel: KernelSpec
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: tuple[tuple[str, str, int], ...]  # (kind, parameter name, value) in kernel order
    device_index: int | None

    def visit(self, visitor: ArgVisitor) -> None:
        visits = {"ptr": visitor.visit_ptr, "int32": visitor.visit_i32,
                  "int64": visitor.visit_i64, "float32": visitor.visit_f32}
        for kind, name, value in self.args:
            visits[kind](value, name)


def default_artifacts_dir() -> Path:
    """``$PSA_TVM_ARTIFACTS``, else ``<cache>/artifacts`` (``$PSA_TVM_CACHE`` or ~/.cache)."""
    if env := os.environ.get("PSA_TVM_ARTIFACTS"):
        return Path(env)
    return cache_dir() / "artifacts"


def cache_dir() -> Path:
    root = os.environ.get("PSA_TVM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "psa_tvm")
    return Path(root)


def _as_shape_or_info(obj: object, name: str) -> TensorInfo:
    """Tensors and ``(ptr, shape)`` pairs as they are; a bare shape as an aligned placeholder."""
    if isinstance(obj, (list, tuple)) and all(isinstance(s, int) for s in obj) and not (
            len(obj) == 2 and isinstance(obj[1], (list, tuple))):
        return TensorInfo(ptr=0, shape=tuple(obj), strides=None, dtype=None, device=None)
    return tensor_info(obj, name)


class PsaMergeAttnRuntimeOp:
    """The PSA attention-merge op: grid, block and packed arguments for prebuilt kernels.

    ``key_dim``, ``num_heads`` and ``dtype`` fix the build. ``schedule`` names the schedule rule
    (default: the tuned choice for ``arch``, else ``tiled``). ``artifacts`` is an artifact
    directory written by ``psa-tvm build``; without it the default artifact directory is used
    and, if the build is missing there and TVM is installed, built into it. ``arch`` (``sm_90``)
    picks tuned parameters and the binary; by default the current GPU's, else ``sm_90``.

    Methods taking ``inputs`` accept a list of tensors (torch, any ``__dlpack__`` object) or of
    the seed's ``(pointer, shape)`` pairs; ``grid``/``block`` also take bare shapes, assuming
    16-byte-aligned data.
    """

    def __init__(self, key_dim: int, num_heads: int, dtype: Any = "float32", *,
                 schedule: str | None = None, artifacts: str | os.PathLike | None = None,
                 arch: str | None = None) -> None:
        self.config = OpConfig(key_dim, num_heads, dtype)
        self.arch = arch or _detect_arch()
        tuned = {p: tuned_entry(self.arch, p, self.config) for p in ("forward", "backward")}
        self.schedule = schedule or (tuned["forward"] or {}).get("schedule", DEFAULT_SCHEDULE)
        root = Path(artifacts) if artifacts is not None else default_artifacts_dir()
        self._builds = {p: self._find_build(root, artifacts is None, tuned[p])
                        for p in ("forward", "backward")}
        self._plans = Memo()  # (pass, B, N, index dtype, aligned) -> kernel, grid, block, symbols
        self._checked = Memo()  # call signature -> validated, pre-packed launch

    @classmethod
    def for_build(cls, build: BuildSpec, arch: str = "sm_90") -> PsaMergeAttnRuntimeOp:
        """An op running one specific build for both passes (e.g. a tuning candidate)."""
        op = cls.__new__(cls)
        op.config, op.arch, op.schedule = build.config, arch, build.schedule
        op._builds = {"forward": build, "backward": build}
        op._plans, op._checked = Memo(), Memo()
        return op

    # ----------------------------------------------------------------- artifact lookup
    def _find_build(self, root: Path, may_build: bool, tuned: dict | None) -> BuildSpec:
        params = tuned["params"] if tuned and tuned.get("schedule") == self.schedule else None
        try:
            build = Manifest.load(root).find(self.config, self.schedule, params)
            if not may_build or params is None or build.schedule_params == params:
                return build
        except (FileNotFoundError, LookupError) as missing:
            if not may_build:
                raise
            try:
                from psa_tvm.build.ondemand import build_missing  # needs TVM
            except ImportError as err:
                raise LookupError(f"{missing}; building it here needs TVM ({err})") from err
        else:
            from psa_tvm.build.ondemand import build_missing  # tuned build missing: needs TVM
        build_missing(root, self.config, self.schedule, params)
        return Manifest.load(root).find(self.config, self.schedule, params)

    @property
    def builds(self) -> dict[str, BuildSpec]:
        """The manifest build used for each pass (``"forward"``, ``"backward"``)."""
        return dict(self._builds)

    # ----------------------------------------------------------------- seed surface
    def kernel_name(self, inputs: Sequence[Any] | None = None, output: Any = None) -> str:
        """Entry point of the forward kernel.

        Without ``inputs``: the main variant (16-byte vectors, int32 indexing). With them: the
        variant that :meth:`grid` and :meth:`pack_args` choose for those tensors (scalar for
        ``N`` tails or misaligned data, int64 past 2**31 elements). Launch the kernel named for
        the same inputs you pack.
        """
        if inputs is not None:
            return self.plan_forward(inputs, output).kernel.entry
        build = self._builds["forward"]
        return build.kernel("forward", _widest(build, "forward"), "int32").entry

    def forward_source(self) -> str:
        """CUDA source of the forward build (a translation unit with every variant)."""
        return self._builds["forward"].source.read_text()

    def backward_source(self) -> str:
        """CUDA source of the backward build."""
        return self._builds["backward"].source.read_text()

    def n_activation_inputs(self) -> int:
        """Two activations: ``lo`` and ``hi``."""
        return 2

    def param_shapes(self) -> list[tuple[int, ...]]:
        """The op has no learned parameters."""
        return []

    def param_names(self) -> list[str]:
        """The op has no learned parameters."""
        return []

    def param_init_data(self) -> list[Any]:
        """The op has no learned parameters."""
        return []

    def compute_concrete_output_shape(self, input_shapes: Sequence[Sequence[int]],
                                      spatial: tuple[int, int] | None = None) -> list[int]:
        """``[B, c, H, W]`` for inputs ``[B*nh, H*W, kd]`` (``[B, c, H*W]`` without ``spatial``)."""
        rows, n, key_dim = _three(input_shapes[0], "input_shapes[0]")
        height, width = spatial if spatial is not None else (n, 1)
        dims = check_forward_inputs(
            _placeholder((rows, n, key_dim)), _placeholder(tuple(input_shapes[1])),
            self.config.num_heads, height, width, self.config)
        return list(dims.merged_shape if spatial is not None else
                    (dims.batch, dims.channels, dims.n))

    def forward_output_row_stride(self, input_shapes: Sequence[Sequence[int]]) -> int:
        """Elements between consecutive channel rows of the merged output: ``N = H*W``."""
        return _three(input_shapes[0], "input_shapes[0]")[1]

    def backward_grad_output_row_stride(self, grad_output_shape: Sequence[int]) -> int:
        """Elements between consecutive channel rows of ``d_merged``: ``N = H*W``."""
        shape = list(grad_output_shape)
        return shape[2] * (shape[3] if len(shape) == 4 else 1)

    def block(self, inputs: Sequence[Any]) -> tuple[int, int, int]:
        """Forward thread-block dimensions for ``inputs = [lo, hi]``."""
        return self.plan_forward(inputs).block

    def grid(self, inputs: Sequence[Any]) -> tuple[int, int, int]:
        """Forward grid dimensions for ``inputs = [lo, hi]``."""
        return self.plan_forward(inputs).grid

    def pack_args(self, inputs: Sequence[Any], output: Any, visitor: ArgVisitor) -> None:
        """Visit the forward kernel's arguments in its parameter order: the data pointers of
        ``lo``, ``hi`` and ``output`` (as the kernel orders them) and the symbols ``B``, ``NV``."""
        self.plan_forward(inputs, output).visit(visitor)

    def has_backward(self) -> bool:
        """The op is differentiable: the backward kernel is the inverse gather."""
        return True

    def backward_block(self, grad_output: Any) -> tuple[int, int, int]:
        """Backward thread-block dimensions for ``d_merged`` (tensor, pair or shape)."""
        return self.plan_backward(grad_output).block

    def backward_grid(self, grad_output: Any) -> tuple[int, int, int]:
        """Backward grid dimensions for ``d_merged``."""
        return self.plan_backward(grad_output).grid

    def pack_backward_args(self, grad_output: Any, grad_inputs: Sequence[Any],
                           visitor: ArgVisitor) -> None:
        """Visit the backward kernel's arguments: pointers of ``d_merged``, ``d_lo``, ``d_hi``
        (in kernel order) and the symbols ``B``, ``NV``."""
        self.plan_backward(grad_output, grad_inputs).visit(visitor)

    def n_launches(self) -> int:
        """The forward pass is one launch."""
        return 1

    def pack_args_for_launch(self, launch: int, inputs: Sequence[Any], output: Any,
                             visitor: ArgVisitor) -> None:
        """:meth:`pack_args` for launch ``launch`` (only 0 exists)."""
        _check_launch(launch, self.n_launches())
        self.pack_args(inputs, output, visitor)

    def grid_for_launch(self, launch: int, inputs: Sequence[Any]) -> tuple[int, int, int]:
        """:meth:`grid` for launch ``launch`` (only 0 exists)."""
        _check_launch(launch, self.n_launches())
        return self.grid(inputs)

    def n_backward_launches(self) -> int:
        """The backward pass is one launch."""
        return 1

    def pack_backward_args_for_launch(self, launch: int, grad_output: Any,
                                      grad_inputs: Sequence[Any], visitor: ArgVisitor) -> None:
        """:meth:`pack_backward_args` for launch ``launch`` (only 0 exists)."""
        _check_launch(launch, self.n_backward_launches())
        self.pack_backward_args(grad_output, grad_inputs, visitor)

    def backward_grid_for_launch(self, launch: int, grad_output: Any) -> tuple[int, int, int]:
        """:meth:`backward_grid` for launch ``launch`` (only 0 exists)."""
        _check_launch(launch, self.n_backward_launches())
        return self.backward_grid(grad_output)

    # ----------------------------------------------------------------- planning
    def plan_forward(self, inputs: Sequence[Any], output: Any = None,
                     spatial: tuple[int, int] | None = None) -> LaunchPlan:
        """Validate a forward call and choose its kernel, grid, block and arguments."""
        if len(inputs) != 2:
            raise ValueError(f"inputs: expected [lo, hi], got {len(inputs)} tensors")
        lo, hi = (self._typed(_as_shape_or_info(x, n))
                  for x, n in zip(inputs, ("lo", "hi"), strict=True))
        height, width = spatial if spatial is not None else (lo.shape[1] if lo.shape[1:] else 0, 1)
        dims = check_forward_inputs(lo, hi, self.config.num_heads, height, width, self.config)
        tensors = {"lo": lo, "hi": hi}
        if output is not None:
            out = self._typed(tensor_info(output, "output"))
            check_output("output", out, dims.merged_shape if spatial else
                         (dims.batch, dims.channels, dims.n), "lo", lo)
            tensors["out"] = out
            _check_disjoint("forward", tensors)
        return self._plan("forward", dims, tensors)

    def plan_backward(self, grad_output: Any, grad_inputs: Sequence[Any] | None = None
                      ) -> LaunchPlan:
        """Validate a backward call and choose its kernel, grid, block and arguments."""
        grad = self._typed(_as_shape_or_info(grad_output, "d_merged"))
        dims = check_backward_input(grad, self.config.num_heads, self.config.key_dim, self.config)
        tensors = {"g": grad}
        if grad_inputs is not None:
            if len(grad_inputs) != 2:
                raise ValueError(f"grad_inputs: expected [d_lo, d_hi], got {len(grad_inputs)}")
            for key, name, obj in zip(("dlo", "dhi"), ("d_lo", "d_hi"), grad_inputs, strict=True):
                info = self._typed(tensor_info(obj, name))
                check_output(name, info, dims.half_shape, "d_merged", grad)
                tensors[key] = info
            _check_disjoint("backward", tensors)
        return self._plan("backward", dims, tensors)

    def _typed(self, info: TensorInfo) -> TensorInfo:
        """A ``(pointer, shape)`` pair holds this op's dtype: check its alignment and overlap
        like a tensor's. (Bare shapes, pointer 0, stay untyped placeholders.)"""
        if info.dtype is None and info.ptr:
            return dataclasses.replace(info, dtype=self.config.dtype)
        return info

    def _plan(self, pass_: str, dims: MergeDims, tensors: dict[str, TensorInfo]) -> LaunchPlan:
        build = self._builds[pass_]
        index_dtype = "int32" if dims.merged_numel + _INT32_MARGIN <= INT32_MAX else "int64"
        aligned = all(t.ptr % 16 == 0 for t in tensors.values())
        key = (pass_, dims.batch, dims.n, index_dtype, aligned)
        cached = self._plans.get(key)
        if cached is None:
            kernel = _choose_kernel(build, pass_, dims.n, index_dtype, aligned)
            symbols = kernel.bind_symbols(_kernel_shapes(dims))
            grid, block = kernel.launch_dims(symbols)
            for axis, (size, limit) in enumerate(zip(grid, _GRID_LIMITS, strict=True)):
                if size > limit:
                    raise ValueError(
                        f"shape: B={dims.batch}, N={dims.n} needs grid[{axis}]={size}, past the "
                        f"CUDA limit {limit} for schedule {build.schedule!r}"
                    )
            cached = self._plans.put(key, (kernel, grid, block, symbols))
        kernel, grid, block, symbols = cached
        args = tuple(
            ("ptr", p["name"], tensors[p["tensor"]].ptr if p["tensor"] in tensors else 0)
            if p["type"] == "ptr" else (p["type"], p["name"], symbols[p["symbol"]])
            for p in kernel.params
        )
        device_index = next((t.device_index for t in tensors.values() if t.device == CUDA), None)
        return LaunchPlan(build, kernel, grid, block, kernel.dynamic_smem_bytes, args,
                          device_index)

    # ----------------------------------------------------------------- launching
    def launch_forward(self, lo: Any, hi: Any, out: Any, stream: int = 0,
                       spatial: tuple[int, int] | None = None) -> None:
        """Run the forward kernel on ``stream``; every check happens before the launch."""
        infos = {"lo": tensor_info(lo, "lo"), "hi": tensor_info(hi, "hi"),
                 "out": tensor_info(out, _NAMES["out"])}
        self._run("forward", spatial, infos, stream)

    def launch_backward(self, grad: Any, d_lo: Any, d_hi: Any, stream: int = 0) -> None:
        """Run the backward kernel on ``stream``; every check happens before the launch."""
        infos = {"g": tensor_info(grad, _NAMES["g"]), "dlo": tensor_info(d_lo, _NAMES["dlo"]),
                 "dhi": tensor_info(d_hi, _NAMES["dhi"])}
        self._run("backward", None, infos, stream)

    def _run(self, pass_: str, spatial: tuple[int, int] | None,
             infos: dict[str, TensorInfo], stream: int) -> None:
        key = (pass_, spatial, tuple(info.signature() for info in infos.values()))
        launch = self._checked.get(key)
        if launch is None:
            if pass_ == "forward":
                plan = self.plan_forward([infos["lo"], infos["hi"]], infos["out"], spatial)
            else:
                plan = self.plan_backward(infos["g"], [infos["dlo"], infos["dhi"]])
            launch = self._prepare(key, plan, infos)
        else:  # same geometry as a validated call; only the addresses are new
            _check_disjoint(pass_, infos)
        launch(infos, stream)

    def _prepare(self, key: tuple, plan: LaunchPlan, infos: dict[str, TensorInfo]) -> _Launch:
        for name, info in infos.items():
            if info.device is None:
                raise ValueError(f"{name}: a (pointer, shape) pair does not say its device; "
                                 "launch with tensors")
            if info.device != CUDA:
                raise ValueError(f"{name}: expected a CUDA tensor, got one on {info.device}")
        return self._checked.put(key, _Launch(plan))


# Argument names in errors, and the (output, other) pairs that must not share memory: the
# kernels read and write in one pass.
_NAMES = {"lo": "lo", "hi": "hi", "out": "output", "g": "d_merged", "dlo": "d_lo",
          "dhi": "d_hi"}
_DISJOINT = {"forward": (("out", "lo"), ("out", "hi")),
             "backward": (("dlo", "g"), ("dhi", "g"), ("dhi", "dlo"))}


def _check_disjoint(pass_: str, infos: dict[str, TensorInfo]) -> None:
    for a, b in _DISJOINT[pass_]:
        check_no_overlap(_NAMES[a], infos[a], _NAMES[b], infos[b])


class _Launch:
    """A validated launch: kernel loaded, arguments pre-packed; only pointers change per call."""

    def __init__(self, plan: LaunchPlan) -> None:
        from psa_tvm.runtime.launcher import PackedArgs, shared_launcher

        self.empty = plan.grid[0] * plan.grid[1] * plan.grid[2] == 0 or any(
            value == 0 for kind, _, value in plan.args if kind != "ptr")
        self.plan = plan
        self.device_index = plan.device_index
        self.pointer_slots = [(i, p["tensor"]) for i, p in enumerate(plan.kernel.params)
                              if p["type"] == "ptr"]
        self.args = PackedArgs([(kind, value) for kind, _, value in plan.args])
        self.launcher = shared_launcher()
        if not self.empty:
            binary, _ = plan.build.binary_for(self.launcher.arch(plan.device_index))
            self.func = self.launcher.function(binary, plan.kernel.entry, plan.device_index)
        self.lock = threading.Lock()

    def __call__(self, infos: dict[str, TensorInfo], stream: int) -> None:
        if self.empty:
            return  # zero-sized tensors: nothing to move, and an empty grid is no valid launch
        with self.lock:  # the packed argument buffer is shared by threads using this launch
            for slot, tensor in self.pointer_slots:
                self.args.set(slot, infos[tensor].ptr)
            self.launcher.launch(self.func, self.plan.grid, self.plan.block,
                                 self.plan.shared_bytes, stream, self.args, self.device_index)


def _widest(build: BuildSpec, pass_: str) -> int:
    return max(k.vec for k in build.kernels if k.pass_ == pass_ and k.index_dtype == "int32")


def _choose_kernel(build: BuildSpec, pass_: str, n: int, index_dtype: str,
                   aligned: bool) -> KernelSpec:
    """Widest vector variant whose alignment needs ``N`` and the pointers meet."""
    candidates = sorted((k for k in build.kernels
                         if k.pass_ == pass_ and k.index_dtype == index_dtype),
                        key=lambda k: -k.vec)
    for kernel in candidates:
        if kernel.vec == 1 or (n % kernel.vec == 0 and aligned):
            return kernel
    raise LookupError(f"{build.source.name}: no scalar {pass_} kernel for {index_dtype}")


def _kernel_shapes(dims: MergeDims) -> dict[str, tuple[int, ...]]:
    half = dims.half_shape
    merged5 = (dims.batch, dims.num_heads, 2, dims.key_dim, dims.n)
    return {"lo": half, "hi": half, "out": merged5, "g": merged5, "dlo": half, "dhi": half}


def _three(shape: Sequence[int], name: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ValueError(f"{name}: expected [B*num_heads, H*W, key_dim], got {list(shape)}")
    return tuple(shape)  # type: ignore[return-value]


def _placeholder(shape: tuple[int, ...]) -> TensorInfo:
    return TensorInfo(ptr=0, shape=shape, strides=None, dtype=None, device=None)


def _check_launch(launch: int, count: int) -> None:
    if not 0 <= launch < count:
        raise ValueError(f"launch: expected an index in [0, {count}), got {launch}")


def _detect_arch() -> str:
    from psa_tvm.runtime.launcher import cuda_available, device_arch

    return device_arch(0) if cuda_available() else "sm_90"
