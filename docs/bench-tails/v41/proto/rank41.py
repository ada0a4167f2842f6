"""Rank call 1's candidates (proto/tune41.py) per configuration and pass: each candidate's
fraction of copy at every shape, its worst and geometric mean, the shipped params' beside.

    python rank41.py ROOT DIR [DIR...]     # ROOT holds DIR/manifest.json, DIR/results.jsonl
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from psa_tvm.runtime.manifest import Manifest


def main() -> int:
    root = Path(sys.argv[1])
    for name in sys.argv[2:]:
        d = root / name
        builds = {str(b.source.relative_to(d)): b for b in Manifest.load(d).builds}
        table: dict = defaultdict(lambda: defaultdict(dict))
        for line in (d / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            b = builds[r["source"]]
            if not r["exact"]:
                print("INEXACT", name, r)
            key = (r["pass"], b.config.tag)
            table[key][r["source"]][tuple(r["shape"])] = (r["us"] / r["copy_us"], r["shifted"])
        for key, per in sorted(table.items()):
            shapes = sorted({s for v in per.values() for s in v})
            rows = []
            for src, v in per.items():
                fr = [v[s][0] for s in shapes if s in v]
                if len(fr) < len(shapes):
                    continue
                rows.append((max(fr), math.exp(sum(map(math.log, fr)) / len(fr)), src, fr,
                             [v[s][1] for s in shapes]))
            rows.sort()
            print(f"== {name} {key} {len(rows)} candidates; shapes {shapes}")
            for worst, gm, src, fr, sh in rows[:6]:
                b = builds[src]
                params = b.shifted_params if name[0] == "s" else (
                    b.schedule_params if name[0] == "t" else
                    [k.entry for k in b.kernels if "n33to33" in k.entry])
                print(f"  worst {worst:.3f} gm {gm:.3f} {' '.join(f'{x:.3f}' for x in fr)} "
                      f"shifted={sh} {src} {params}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
