"""Each call a band kernel ran in one sweep against the same call in a sweep of the same
configurations built without bands: where the band wins, where it loses, and the ``B * nh``
range it should keep (``band.max_numel``).

    python docs/bench-tails/v43/caps.py WITH_BANDS.json WITHOUT.json [--margin 0.01]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict

_CALL = re.compile(r"(\w+) (\w+) nh\d+ \d+x(\d+x\d+) N=\d+ B\*nh=(\d+)")


def calls(path: str) -> dict[tuple, dict]:
    out = {}
    with open(path) as f:
        sweep = json.load(f)
    for call in sweep["calls"]:
        if "rows" in call:  # v44's sweep records the call's fields beside its label
            out[(call["dtype"], call["grid"], call["pass"], call["rows"])] = call
            continue
        pass_, dtype, grid, rows = _CALL.match(call["call"]).groups()
        out[(dtype, grid, "forward" if pass_ == "for" else "backward", int(rows))] = call
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("with_bands")
    parser.add_argument("without")
    parser.add_argument("--margin", type=float, default=0.01)
    args = parser.parse_args()
    banded, plain = calls(args.with_bands), calls(args.without)
    groups: dict[tuple, list] = defaultdict(list)
    for key, call in sorted(banded.items()):
        if "band" in call["kernel"] and key in plain:
            groups[key[:3]].append((key[3], call, plain[key]))
    for group, rows in groups.items():
        print(" ".join(group))
        for rows_, band, other in rows:
            delta = band["ratio"] - other["ratio"]
            verdict = "LOSES" if delta > args.margin else ("wins" if delta < -args.margin
                                                            else "level")
            print(f"  B*nh={rows_:5d} {band['mb']:7.1f} MB  band {band['ratio']:.3f}"
                  f" ({band['kernel'].split('tiled_')[1].split('_i')[0]})"
                  f"  without {other['ratio']:.3f}"
                  f" ({other['kernel'].split('tiled_')[1].split('_i')[0]})  {verdict}")


if __name__ == "__main__":
    main()
