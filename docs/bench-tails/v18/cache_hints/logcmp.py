"""Time / copy per row from `scripts/bench.py` logs (profiler column), one column per log; the
rows whose copy takes >= 2.5 us, their geometric mean and the count above 1.05.

    python3 logcmp.py sq_base.log sq_scs.log ...
"""
import re
import statistics
import sys

ROW = re.compile(r"^(\w+)\s+(forward|backward)\s+(\S+)\s+copy=\s*([\d.]+)/\s*([\d.]+)"
                 r"\s+tiled=\s*([\d.]+)/\s*([\d.]+)")


def read(path: str) -> dict:
    table = {}
    with open(path) as log:
        for line in log:
            if m := ROW.match(line):
                table[(m[1], m[2], m[3])] = (float(m[5]), float(m[7]))
    return table


def main(paths: list[str]) -> None:
    tables = [read(p) for p in paths]
    print("row".ljust(38), "".join(p.split("/")[-1][:10].rjust(11) for p in paths))
    ratios: list[list[float]] = [[] for _ in paths]
    for key, (copy, _) in tables[0].items():
        if copy < 2.5:
            continue  # launch-bound rows
        row = [t[key][1] / t[key][0] if key in t else float("nan") for t in tables]
        for column, value in zip(ratios, row, strict=True):
            column.append(value)
        print("/".join(key).ljust(38), "".join(f"{v:11.3f}" for v in row), f"  copy {copy}")
    print("geomean".ljust(38), "".join(f"{statistics.geometric_mean(c):11.4f}" for c in ratios))
    print("n>1.05".ljust(38), "".join(f"{sum(x > 1.05 for x in c):11d}" for c in ratios))


if __name__ == "__main__":
    main(sys.argv[1:])
