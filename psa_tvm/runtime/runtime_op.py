"""``PsaMergeAttnRuntimeOp``: the seed's RuntimeOp surface, over prebuilt artifacts. No TVM.

A runtime asks the op for grid, block and packed kernel arguments for concrete tensors; all of it
comes from the artifact manifest, i.e. from what the schedule produced. Which kernel variant runs
(16-byte vectors or scalar, int32 or int64 indexing) is decided per call from the shapes and the
data pointers' alignment, so ``grid``/``block``/``pack_args`` given the same tensors agree.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from psa_tvm.config import OpConfig
from psa_tvm.runtime import env
from psa_tvm.runtime.artifacts import find_build
from psa_tvm.runtime.manifest import BuildSpec
from psa_tvm.runtime.memo import Memo
from psa_tvm.runtime.plan import (
    KernelChoice,
    LaunchPlan,
    choose,
    main_variant,
    make_plan,
    pointer_alignment,
)
from psa_tvm.runtime.protocol import ArgVisitor, RecordingVisitor, SingleLaunchSurface
from psa_tvm.runtime.tensors import CUDA, TensorInfo, tensor_info
from psa_tvm.runtime.tuned import DEFAULT_SCHEDULE, tuned_entry, tuned_shifted_entry
from psa_tvm.runtime.validation import (
    MergeDims,
    check_backward_input,
    check_forward_inputs,
    check_no_overlap,
    check_output,
)

__all__ = ["ArgVisitor", "LaunchPlan", "PsaMergeAttnRuntimeOp", "RecordingVisitor"]

_PASSES = ("forward", "backward")


def _as_shape_or_info(obj: object, name: str) -> TensorInfo:
    """Tensors and ``(ptr, shape)`` pairs as they are; a bare shape as an aligned placeholder."""
    if isinstance(obj, (list, tuple)) and all(isinstance(s, int) for s in obj) and not (
            len(obj) == 2 and isinstance(obj[1], (list, tuple))):
        return TensorInfo(ptr=0, shape=tuple(obj), strides=None, dtype=None, device=None)
    return tensor_info(obj, name)


class PsaMergeAttnRuntimeOp(SingleLaunchSurface):
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
                 arch: str | None = None, builds: Mapping[str, BuildSpec] | None = None) -> None:
        self.config = OpConfig(key_dim, num_heads, dtype)
        self.arch = arch or _detect_arch()
        if builds is not None:  # explicit builds (a tuning candidate): nothing to look up
            self.schedule = schedule or builds["forward"].schedule
            self._builds = {p: builds[p] for p in _PASSES}
        else:
            tuned = {p: tuned_entry(self.arch, p, self.config) for p in _PASSES}
            self.schedule = schedule or (tuned["forward"] or {}).get("schedule",
                                                                     DEFAULT_SCHEDULE)
            root = Path(artifacts) if artifacts is not None else env.default_artifacts_dir()
            # Only the default directory is built into; a directory the user names is theirs.
            may_build = artifacts is None and env.artifacts_override() is None
            shifted = tuned_shifted_entry(self.arch, self.config) \
                if self.schedule == "tiled" else None
            self._builds = {p: find_build(root, self.config, self.schedule,
                                          _tuned_params(tuned[p], self.schedule),
                                          may_build=may_build,
                                          shifted=shifted and shifted["params"])
                            for p in _PASSES}
        self._choices = Memo()  # (pass, B, N, numel, alignment) -> KernelChoice
        self._checked = Memo()  # call signature -> PreparedLaunch

    @classmethod
    def for_build(cls, build: BuildSpec, arch: str = env.DEFAULT_ARCH) -> PsaMergeAttnRuntimeOp:
        """An op running one specific build for both passes (e.g. a tuning candidate)."""
        config = build.config
        return cls(config.key_dim, config.num_heads, config.dtype, schedule=build.schedule,
                   arch=arch, builds={p: build for p in _PASSES})

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
        return main_variant(self._builds["forward"], "forward").entry

    def forward_source(self) -> str:
        """CUDA source of the forward build (a translation unit with every variant)."""
        return self._builds["forward"].source.read_text()

    def backward_source(self) -> str:
        """CUDA source of the backward build."""
        return self._builds["backward"].source.read_text()

    def n_activation_inputs(self) -> int:
        """Two activations: ``lo`` and ``hi``."""
        return 2

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
        alignment = pointer_alignment(tensors)
        key = (pass_, dims.batch, dims.n, dims.merged_numel, alignment)
        choice: KernelChoice | None = self._choices.get(key)
        if choice is None:
            choice = self._choices.put(key, choose(build, pass_, dims, alignment))
        return make_plan(build, choice, tensors)

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

    def _prepare(self, key: tuple, plan: LaunchPlan, infos: dict[str, TensorInfo]):
        for name, info in infos.items():
            if info.device is None:
                raise ValueError(f"{name}: a (pointer, shape) pair does not say its device; "
                                 "launch with tensors")
            if info.device != CUDA:
                raise ValueError(f"{name}: expected a CUDA tensor, got one on {info.device}")
        from psa_tvm.runtime.launcher import PreparedLaunch  # needs cuda-python

        return self._checked.put(key, PreparedLaunch(plan))


# Argument names in errors, and the (output, other) pairs that must not share memory: the
# kernels read and write in one pass.
_NAMES = {"lo": "lo", "hi": "hi", "out": "output", "g": "d_merged", "dlo": "d_lo",
          "dhi": "d_hi"}
_DISJOINT = {"forward": (("out", "lo"), ("out", "hi")),
             "backward": (("dlo", "g"), ("dhi", "g"), ("dhi", "dlo"))}


def _check_disjoint(pass_: str, infos: dict[str, TensorInfo]) -> None:
    for a, b in _DISJOINT[pass_]:
        check_no_overlap(_NAMES[a], infos[a], _NAMES[b], infos[b])


def _tuned_params(tuned: dict | None, schedule: str) -> dict | None:
    """Tuned parameters when the table's choice is the schedule in use."""
    return tuned["params"] if tuned and tuned.get("schedule") == schedule else None


def _three(shape: Sequence[int], name: str) -> tuple[int, int, int]:
    if len(shape) != 3:
        raise ValueError(f"{name}: expected [B*num_heads, H*W, key_dim], got {list(shape)}")
    return tuple(shape)  # type: ignore[return-value]


def _placeholder(shape: tuple[int, ...]) -> TensorInfo:
    return TensorInfo(ptr=0, shape=shape, strides=None, dtype=None, device=None)


def _detect_arch() -> str:
    from psa_tvm.runtime.launcher import cuda_available, device_arch

    return device_arch(0) if cuda_available() else env.DEFAULT_ARCH
