"""Rewrite the golden TVMScript files from the current schedule rules."""

from __future__ import annotations

from tests.golden import (
    BAND_CONFIGS,
    CASES,
    CPU_LINES_CASES,
    CPU_SHUFFLE_CASES,
    PARAM_CASES,
    SHIFTED_PASSES,
    band_kernel,
    cpu_lines_kernel,
    cpu_shuffle_kernel,
    golden_band_path,
    golden_cpu_lines_path,
    golden_cpu_shuffle_path,
    golden_param_path,
    golden_path,
    golden_shifted_path,
    scheduled,
    scheduled_with,
    shifted_kernel,
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
    for pass_ in SHIFTED_PASSES:
        path = golden_shifted_path(pass_)
        path.write_text(shifted_kernel(pass_).script())
        print(f"wrote {path}")
    for name in BAND_CONFIGS:
        path = golden_band_path(name)
        path.write_text(band_kernel(name).script())
        print(f"wrote {path}")
    for name in CPU_SHUFFLE_CASES:
        path = golden_cpu_shuffle_path(name)
        path.write_text(cpu_shuffle_kernel(name).script())
        print(f"wrote {path}")
    for name in CPU_LINES_CASES:
        path = golden_cpu_lines_path(name)
        path.write_text(cpu_lines_kernel(name).script())
        print(f"wrote {path}")
