"""``copy_`` us, psa-tvm us, ratio and kernel per CPU row of 1 MB or more, one column per
``psa-tvm bench --cpu-only`` JSON file: ``python side_by_side.py A.json [B.json ...]``."""

import json
import sys

tables = []
for path in sys.argv[1:]:
    with open(path) as f:
        records = json.load(f)["cpu_records"]
    table: dict = {}
    for r in records:
        table.setdefault((r["dtype"], r["pass"], r["label"]), {})[r["impl"]] = r
    tables.append(table)
print("row".ljust(36), " | ".join(f"copy psa ratio kernel ({p})" for p in sys.argv[1:]))
for key, first in tables[0].items():
    moved = first["copy"]["bytes_moved"]
    if moved < 1e6:
        continue
    cells = []
    for table in tables:
        row = table.get(key)
        if row is None:
            cells.append("-")
            continue
        psa = row["psa_tvm"]
        cells.append(f"{row['copy']['us']:7.0f} {psa['us']:7.0f} {psa['ratio_to_copy']:5.2f} "
                     f"{psa.get('kernel', '?')[:8]:8s}")
    print(f"{key[0]:8s} {key[1]:8s} {key[2]:10s} {moved / 1e6:5.1f}MB", " | ".join(cells))
