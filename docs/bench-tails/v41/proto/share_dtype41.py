"""bfloat16 takes float16's tuned params at key_dim 64 and 128 (v41 tuned float16 only): the
kernels of the two 16-bit dtypes move the same bytes in the same order, and at key_dim 32,
tuned apart, they came out equal in every pass (schedules/sm_90.json).

    python share_dtype41.py schedules/sm_90.json
"""

from __future__ import annotations

import json
import sys

KEY_DIMS = (64, 128)
WHY = ("v41: float16's params (tuned by the profiler, docs/perf.md v41): the two 16-bit dtypes' "
       "kernels move the same bytes in the same order, and key_dim 32's separate tunes chose "
       "the same params for both")


def share(entries: list[dict]) -> list[dict]:
    kept = [e for e in entries if not (e["dtype"] == "bfloat16" and e["key_dim"] in KEY_DIMS)]
    shared = [{**e, "dtype": "bfloat16", "params_from_dtype": "float16", "why": WHY}
              for e in entries if e["dtype"] == "float16" and e["key_dim"] in KEY_DIMS]
    return kept + shared


def main() -> int:
    path = sys.argv[1]
    with open(path) as f:
        table = json.load(f)
    table["entries"] = sorted(share(table["entries"]),
                              key=lambda e: (e["pass"], e["dtype"], e["key_dim"], e["num_heads"]))
    if "shifted" in table:
        table["shifted"] = sorted(share(table["shifted"]),
                                  key=lambda e: (e["dtype"], e["key_dim"], e["num_heads"]))
    with open(path, "w") as f:
        f.write(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
