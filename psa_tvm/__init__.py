"""psa-tvm: the YOLO PSA attention-merge op, compiled ahead of time with TVM.

Two halves: :mod:`psa_tvm.build` (needs TVM: TensorIR, schedules, CUDA/LLVM builds) and
:mod:`psa_tvm.runtime` (needs no TVM: manifest, RuntimeOp, CUDA launcher). Importing this
package imports neither TVM nor torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from psa_tvm._version import __version__
from psa_tvm.config import OpConfig
from psa_tvm.ops import merge, merge_backward
from psa_tvm.runtime.runtime_op import ArgVisitor, PsaMergeAttnRuntimeOp, RecordingVisitor

__all__ = [
    "ArgVisitor",
    "OpConfig",
    "PsaMergeAttnRuntimeOp",
    "RecordingVisitor",
    "__version__",
    "merge",
    "merge_backward",
    "reference",
]


def __getattr__(name: str) -> Any:
    if name in ("reference", "torch"):  # import torch only when asked for
        return importlib.import_module(f"psa_tvm.{name}")
    raise AttributeError(f"module 'psa_tvm' has no attribute {name!r}")
