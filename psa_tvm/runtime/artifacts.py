"""Finding a build in an artifact directory, building it on demand where the compiler is here.

On-demand builds follow check, lock, check again, build, load: two processes asking for the same
missing build serialise on a file lock in the artifact directory, and the second finds the first
one's build instead of compiling it again.
"""

from __future__ import annotations

import fcntl
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from psa_tvm.config import OpConfig
from psa_tvm.errors import ArtifactNotFoundError
from psa_tvm.runtime.manifest import BuildSpec, Manifest

BUILD_LOCK_NAME = ".build.lock"
_THREAD_LOCK = threading.Lock()  # flock is per open file: threads of one process need their own


@contextmanager
def build_lock(root: Path):
    """Exclusive, cross-process lock on an artifact directory (held while building into it)."""
    root.mkdir(parents=True, exist_ok=True)
    with _THREAD_LOCK, open(root / BUILD_LOCK_NAME, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lookup(root: Path, config: OpConfig, schedule: str, params: dict[str, Any] | None,
            op: str = "merge", shifted: dict[str, int] | None = None,
            definition: str | None = None) -> BuildSpec | None:
    """The build when it is there (with ``params`` exactly, when given, its shifted kernels
    built with ``shifted``, when given and recorded, and by the compiler of ``definition``,
    when given), else ``None``."""
    try:
        build = Manifest.load(root).find(config, schedule, params, op, shifted, definition)
    except ArtifactNotFoundError:
        return None
    if shifted is not None and build.shifted_params not in (None, shifted):
        return None
    return build if params is None or build.schedule_params == params else None


def find_build(root: Path, config: OpConfig, schedule: str, params: dict[str, Any] | None,
               *, may_build: bool, op: str = "merge",
               shifted: dict[str, int] | None = None) -> BuildSpec:
    """The build of ``config`` with ``schedule`` (and tuned ``params``, and tuned ``shifted``
    params of its shifted kernels) in ``root``.

    Without ``may_build`` (a user's own artifact directory) a missing build raises
    :class:`ArtifactNotFoundError`; with it, the build is made here when TVM is installed. There
    a build by another compiler (an older psa-tvm's, whose default kernels may differ under the
    same file name) counts as missing; without TVM it runs, being correct if not the newest.
    """
    definition = missing_compiler = None
    if may_build:  # its own compiler's builds only, where that compiler can make them
        try:
            from psa_tvm.compiler.ondemand import DEFINITION_DIGEST, build_missing
        except ImportError as err:
            missing_compiler = err
        else:
            definition = DEFINITION_DIGEST
    build = _lookup(root, config, schedule, params, op, shifted, definition)
    if build is not None:
        return build
    if not may_build:
        if (params is not None or shifted is not None) and (
                fallback := _lookup(root, config, schedule, params, op)
                or _lookup(root, config, schedule, None, op)):
            return fallback  # the user's directory lacks the tuned build: run what they built
        Manifest.load(root).find(config, schedule, op=op)  # raises, saying what is missing and how
        raise AssertionError("unreachable")
    if missing_compiler is not None:
        raise ArtifactNotFoundError(
            f"no {schedule!r} build of {config.tag} in {root}, and building it here needs the "
            f"compiler ({missing_compiler}): `pip install 'psa-tvm[compiler]'` (plus nvcc), or "
            f"build it elsewhere with `psa-tvm build --key-dim {config.key_dim} --num-heads "
            f"{config.num_heads} --dtype {config.dtype} -o DIR` and set PSA_TVM_ARTIFACTS=DIR"
        ) from missing_compiler
    with build_lock(root):
        # Another process may have built it.
        build = _lookup(root, config, schedule, params, op, shifted, definition)
        if build is None:
            build_missing(root, config, schedule, params, op=op)
            build = _lookup(root, config, schedule, params, op, shifted, definition) \
                or _lookup(root, config, schedule, params, op, definition=definition)
    if build is None:
        raise ArtifactNotFoundError(f"building {config.tag} {schedule} into {root} left no build")
    return build
