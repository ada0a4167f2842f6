"""Give the key_dim 32 builds at 2 and 6 heads the tuned params of 4 heads (v38, call 1).

A merge call's memory traffic is fixed by ``B * nh``, ``N``, ``key_dim`` and the dtype: the
kernels index ``lo``/``hi`` by ``b * nh + h`` and the merged tensor by ``(b * nh + h) * 2 + s``,
so a call of 2 heads moves the same bytes in the same order as one of 4 heads at half the
batch. The table's entries for 2, 4 and 6 heads were tuned apart, on a few shapes each, and
differ; call 1 timed each build's kernels at the same ``B * nh``, and the params of 4 heads
were the fastest or level in every family where they differ (docs/perf.md v38).

    python3 docs/bench-tails/v38/proto/share_heads38.py schedules/sm_90.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEY_DIM, SOURCE_HEADS, HEADS = 32, 4, (2, 6)
WHY = ("v38: the params of 4 heads, whose kernels move the same bytes in the same order at the "
       "same B * nh; at equal B * nh they were the fastest or level (docs/perf.md v38, call 1)")


def share(entries: list[dict], dtypes: tuple[str, ...]) -> list[dict]:
    def key(e: dict, heads: int):
        return (e.get("pass"), e["dtype"], e["key_dim"], heads)

    source = {key(e, e["num_heads"]): e for e in entries
              if e["key_dim"] == KEY_DIM and e["num_heads"] == SOURCE_HEADS
              and e["dtype"] in dtypes}
    kept = [e for e in entries if not (e["key_dim"] == KEY_DIM and e["num_heads"] in HEADS
                                       and e["dtype"] in dtypes)]
    for entry in source.values():
        for heads in HEADS:
            kept.append({**entry, "num_heads": heads, "params_from_num_heads": SOURCE_HEADS,
                         "why": WHY})
    # The table's order: by pass (entries), dtype, key_dim, heads.
    return sorted(kept, key=lambda e: (e.get("pass", ""), e["dtype"], e["key_dim"],
                                       e["num_heads"]))


def main() -> int:
    path = Path(sys.argv[1])
    table = json.loads(path.read_text())
    table["entries"] = share(table["entries"], ("float32", "float16", "bfloat16"))
    table["shifted"] = share(table["shifted"], ("float32",))
    path.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
