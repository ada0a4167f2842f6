"""The shifted-kernel sweep of docs/perf.md v14 (aligned N too): v13's harness
(docs/bench-tiles/shifted/bench_variants.py: each variant against the library's own choice and
a copy of the same bytes, profiler kernel times after an L2 flush, exactness vs
psa_tvm.reference with NaN-poisoned outputs) over the cubins of gen_variants.py in CUBIN_DIR
and the shapes below. Needs CuPy.

    python bench_variants.py ARTIFACTS CUBIN_DIR OUT.jsonl
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# The tails benchmark's rows >= 8 MB (odd and aligned N), the squares 20x20 / 40x40 / 80x80.
SHAPES = [(16, 37, 29), (64, 37, 29), (16, 40, 23), (64, 40, 23), (64, 20, 15), (64, 20, 12),
          (64, 64, 3), (64, 20, 20), (16, 40, 40), (64, 40, 40), (64, 25, 25), (16, 37, 37),
          (16, 80, 80)]


def main(artifacts: str, cubins: str, out_path: str) -> None:
    spec = importlib.util.spec_from_file_location(
        "shifted_v13_bench", Path(__file__).parent.parent / "shifted" / "bench_variants.py")
    v13 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(v13)
    v13.main(artifacts, out_path, Path(cubins), SHAPES)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
