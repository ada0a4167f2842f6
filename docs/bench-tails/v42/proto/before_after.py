"""The tiled params chosen against the shipped ones, in call 1's timings (docs/perf.md v42,
section 2): per configuration and pass, kernel/copy at every tuning shape and the worst.

    python before_after.py OLD_TABLE NEW_TABLE [ROOT]   # ROOT holds t64/ and t128/ (.tune41)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from psa_tvm.runtime.manifest import Manifest


def tiled_params(table: dict, pass_: str, config) -> dict | None:
    for entry in table["entries"]:
        if (entry["pass"], entry["dtype"], entry["key_dim"], entry["num_heads"]) == (
                pass_, config.dtype, config.key_dim, config.num_heads):
            return entry["params"]
    return None


def main() -> int:
    old, new = (json.loads(Path(p).read_text()) for p in sys.argv[1:3])
    root = Path(sys.argv[3] if len(sys.argv) > 3 else ".tune41")
    for name in ("t64", "t128"):
        d = root / name
        builds = {str(b.source.relative_to(d)): b for b in Manifest.load(d).builds}
        timed: dict = {}
        for line in (d / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            timed.setdefault((r["source"], r["pass"]), {})[tuple(r["shape"])] = \
                r["us"] / r["copy_us"]
        for config in sorted({b.config for b in builds.values()}, key=lambda c: c.tag):
            for pass_ in ("forward", "backward"):
                line = [f"{name} {config.tag} {pass_[:3]}:"]
                for label, table in (("before", old), ("after", new)):
                    wanted = tiled_params(table, pass_, config)
                    found = next((timed.get((src, pass_)) for src, b in builds.items()
                                  if b.config == config and b.schedule_params == wanted), None)
                    shapes = " ".join(f"{s[0]}x{s[1]}x{s[2]}:{v:.3f}"
                                      for s, v in sorted((found or {}).items()))
                    worst = f"worst {max(found.values()):.3f} " if found else "n/a "
                    line.append(f"{label} {worst}{shapes}")
                print(" | ".join(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
