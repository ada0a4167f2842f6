"""A bounded memo for per-geometry work (validation, launch plans) on the hot path."""

from __future__ import annotations

from typing import Any


class Memo(dict):
    """A dict that forgets everything once it holds ``limit`` entries.

    Keys are call geometries; with dynamic shapes they are unbounded, and recomputing an
    evicted entry costs one validation, so wholesale clearing is the simplest safe policy.
    """

    def __init__(self, limit: int = 4096) -> None:
        super().__init__()
        self.limit = limit

    def put(self, key: Any, value: Any) -> Any:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value
