"""Rewrite the golden TVMScript files from the current schedule rules."""

from __future__ import annotations

from tests.golden import (
    CASES,
    PARAM_CASES,
    golden_param_path,
    golden_path,
    scheduled,
    scheduled_with,
)

if __name__ == "__main__":
    for case in CASES:
        path = golden_path(*case)
        path.write_text(scheduled(*case).script())
        print(f"wrote {path}")
    for stem in PARAM_CASES:
        path = golden_param_path(stem)
        path.write_text(scheduled_with(stem).script())
        print(f"wrote {path}")
