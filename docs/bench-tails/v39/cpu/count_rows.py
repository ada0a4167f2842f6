"""Rows of 1 MB or more within 1.5x ``copy_`` in ``psa-tvm bench --cpu-only`` JSON files, and
the misses: ``python count_rows.py A.json [B.json ...]``."""

import json
import sys

TARGET, MIN_BYTES = 1.5, 1e6

for path in sys.argv[1:]:
    with open(path) as f:
        records = json.load(f)["cpu_records"]
    rows = [r for r in records if r["impl"] == "psa_tvm" and r["bytes_moved"] >= MIN_BYTES]
    within = [r for r in rows if r["ratio_to_copy"] <= TARGET]
    print(f"{path}: {len(within)} of {len(rows)}")
    misses = [f"{r['dtype']} {r['pass']} {r['label']} {r['ratio_to_copy']}"
              for r in rows if r["ratio_to_copy"] > TARGET]
    print("  misses:", ", ".join(misses))
