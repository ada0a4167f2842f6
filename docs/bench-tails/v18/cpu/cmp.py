"""psa-tvm / `copy_` per CPU row of `psa-tvm bench --cpu-only` runs, one column per run; rows
>= 1 MB marked `*` where some run is above 1.3x; last line: per run, rows >= 1 MB above 1.5x and
the worst.

    python3 cmp.py RUN_DIR [RUN_DIR ...]
"""
import json
import sys


def read(run_dir: str) -> dict:
    with open(f"{run_dir}/bench.json") as f:
        records = json.load(f)["cpu_records"]
    return {(r["dtype"], r["pass"], r["label"]): (r["ratio_to_copy"], r["bytes_moved"])
            for r in records if r["impl"] == "psa_tvm"}


def main(run_dirs: list[str]) -> None:
    tables = [read(d) for d in run_dirs]
    print("row".ljust(40), " ".join(d[-12:].rjust(12) for d in run_dirs))
    over, worst = [0] * len(run_dirs), [0.0] * len(run_dirs)
    for key, (_, moved) in tables[0].items():
        mb = moved / 1e6
        row = [t.get(key, (float("nan"),))[0] for t in tables]
        if mb >= 1:
            for i, value in enumerate(row):
                over[i] += value > 1.5
                worst[i] = max(worst[i], value)
        flag = "*" if mb >= 1 and max(row) > 1.3 else " "
        print(f"{flag}{'/'.join(key):39s}", " ".join(f"{v:12.2f}" for v in row), f"{mb:.1f}MB")
    print("rows>=1MB over 1.5:", over, "worst:", worst)


if __name__ == "__main__":
    main(sys.argv[1:])
