"""Rewrite the golden TVMScript files from the current schedule rules."""

from __future__ import annotations

from tests.golden import CASES, golden_path, scheduled

if __name__ == "__main__":
    for case in CASES:
        path = golden_path(*case)
        path.write_text(scheduled(*case).script())
        print(f"wrote {path}")
