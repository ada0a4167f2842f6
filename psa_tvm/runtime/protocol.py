"""The host-runtime interface ("the seed surface"): what a runtime that launches kernels itself
asks an op for. :class:`RuntimeOp` is the protocol; ``PsaMergeAttnRuntimeOp`` implements it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


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


Dims3 = tuple[int, int, int]


@runtime_checkable
class RuntimeOp(Protocol):
    """An op a host runtime launches itself: kernel names and sources, grid, block and packed
    arguments for concrete inputs, forward and backward, per launch."""

    def kernel_name(self, inputs: Sequence[Any] | None = None, output: Any = None) -> str: ...
    def forward_source(self) -> str: ...
    def backward_source(self) -> str: ...
    def n_activation_inputs(self) -> int: ...
    def param_shapes(self) -> list[tuple[int, ...]]: ...
    def param_names(self) -> list[str]: ...
    def param_init_data(self) -> list[Any]: ...
    def compute_concrete_output_shape(self, input_shapes: Sequence[Sequence[int]],
                                      spatial: tuple[int, int] | None = None) -> list[int]: ...
    def block(self, inputs: Sequence[Any]) -> Dims3: ...
    def grid(self, inputs: Sequence[Any]) -> Dims3: ...
    def pack_args(self, inputs: Sequence[Any], output: Any, visitor: ArgVisitor) -> None: ...
    def has_backward(self) -> bool: ...
    def backward_block(self, grad_output: Any) -> Dims3: ...
    def backward_grid(self, grad_output: Any) -> Dims3: ...
    def pack_backward_args(self, grad_output: Any, grad_inputs: Sequence[Any],
                           visitor: ArgVisitor) -> None: ...
    def n_launches(self) -> int: ...
    def n_backward_launches(self) -> int: ...


class NoLearnedParams:
    """The parameter part of the surface for ops without learned parameters."""

    def param_shapes(self) -> list[tuple[int, ...]]:
        """The op has no learned parameters."""
        return []

    def param_names(self) -> list[str]:
        """The op has no learned parameters."""
        return []

    def param_init_data(self) -> list[Any]:
        """The op has no learned parameters."""
        return []


class SingleLaunchSurface(NoLearnedParams):
    """The launch part of the surface for an op whose passes are one launch each, derived from
    its ``plan_forward(inputs, output=None)`` and ``plan_backward(grad_output,
    grad_inputs=None)`` (each returning a plan with ``grid``, ``block`` and ``visit``)."""

    def plan_forward(self, inputs: Sequence[Any], output: Any = None) -> Any:
        raise NotImplementedError

    def plan_backward(self, grad_output: Any, grad_inputs: Sequence[Any] | None = None) -> Any:
        raise NotImplementedError

    def block(self, inputs: Sequence[Any]) -> Dims3:
        """Forward thread-block dimensions for ``inputs``."""
        return self.plan_forward(inputs).block

    def grid(self, inputs: Sequence[Any]) -> Dims3:
        """Forward grid dimensions for ``inputs``."""
        return self.plan_forward(inputs).grid

    def pack_args(self, inputs: Sequence[Any], output: Any, visitor: ArgVisitor) -> None:
        """Visit the forward kernel's arguments in its parameter order: the data pointers (as
        the kernel orders them), then the shape symbols ``B``, ``NV``."""
        self.plan_forward(inputs, output).visit(visitor)

    def has_backward(self) -> bool:
        """Differentiable: the backward kernel is the inverse permutation."""
        return True

    def backward_block(self, grad_output: Any) -> Dims3:
        """Backward thread-block dimensions for the gradient of the output."""
        return self.plan_backward(grad_output).block

    def backward_grid(self, grad_output: Any) -> Dims3:
        """Backward grid dimensions for the gradient of the output."""
        return self.plan_backward(grad_output).grid

    def pack_backward_args(self, grad_output: Any, grad_inputs: Sequence[Any],
                           visitor: ArgVisitor) -> None:
        """Visit the backward kernel's arguments: pointers in kernel order, then symbols."""
        self.plan_backward(grad_output, grad_inputs).visit(visitor)

    def n_launches(self) -> int:
        """The forward pass is one launch."""
        return 1

    def n_backward_launches(self) -> int:
        """The backward pass is one launch."""
        return 1

    def pack_args_for_launch(self, launch: int, inputs: Sequence[Any], output: Any,
                             visitor: ArgVisitor) -> None:
        """:meth:`pack_args` for launch ``launch`` (only 0 exists)."""
        check_launch_index(launch, self.n_launches())
        self.pack_args(inputs, output, visitor)

    def grid_for_launch(self, launch: int, inputs: Sequence[Any]) -> Dims3:
        """:meth:`grid` for launch ``launch`` (only 0 exists)."""
        check_launch_index(launch, self.n_launches())
        return self.grid(inputs)

    def pack_backward_args_for_launch(self, launch: int, grad_output: Any,
                                      grad_inputs: Sequence[Any], visitor: ArgVisitor) -> None:
        """:meth:`pack_backward_args` for launch ``launch`` (only 0 exists)."""
        check_launch_index(launch, self.n_backward_launches())
        self.pack_backward_args(grad_output, grad_inputs, visitor)

    def backward_grid_for_launch(self, launch: int, grad_output: Any) -> Dims3:
        """:meth:`backward_grid` for launch ``launch`` (only 0 exists)."""
        check_launch_index(launch, self.n_backward_launches())
        return self.backward_grid(grad_output)


def check_launch_index(launch: int, count: int) -> None:
    if not 0 <= launch < count:
        raise ValueError(f"launch: expected an index in [0, {count}), got {launch}")
