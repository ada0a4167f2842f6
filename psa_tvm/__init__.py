"""psa-tvm: the YOLO PSA attention-merge op, compiled ahead of time with TVM.

Two halves: :mod:`psa_tvm.compiler` (needs TVM: TensorIR, schedules, CUDA/LLVM builds into
artifact directories) and :mod:`psa_tvm.runtime` (no TVM: manifest, kernel choice, RuntimeOp,
launchers, CPU libraries through tvm_ffi). Importing this package imports neither TVM nor torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from psa_tvm._version import __version__
from psa_tvm.config import OpConfig
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.ops import merge, merge_backward
from psa_tvm.runtime.protocol import ArgVisitor, RecordingVisitor, RuntimeOp
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.runtime.stream_op import PsaPackQkvRuntimeOp, PsaStreamRuntimeOp

__all__ = [
    "ArgVisitor",
    "ArtifactNotFoundError",
    "OpConfig",
    "PsaMergeAttnRuntimeOp",
    "PsaPackQkvRuntimeOp",
    "PsaStreamRuntimeOp",
    "RecordingVisitor",
    "RuntimeOp",
    "__version__",
    "merge",
    "merge_backward",
    "reference",
]


def __getattr__(name: str) -> Any:
    if name in ("reference", "torch"):  # import torch only when asked for
        return importlib.import_module(f"psa_tvm.{name}")
    raise AttributeError(f"module 'psa_tvm' has no attribute {name!r}")
