"""Several runs of ``psa-tvm bench`` side by side: per row, the profiler ratio (kernel time /
copy time of the same bytes) of every run, their median and max; per run, the rows >= 8 MB at
<= 1.05x. A device call may land on another GPU, and a row's ratio moves between runs (0.015 in
the median, up to 0.05-0.1 at single rows; docs/perf.md v19), so a row is judged on several runs.

    python3 scripts/bench_runs.py RUN_DIR [RUN_DIR ...] [--schedule tiled] [--min-mb 8]
        [--limit 1.05] [--markdown] [--cpu]

Each RUN_DIR holds the ``bench.json`` of one ``psa-tvm bench --out RUN_DIR``; runs of one
artifact set and table are what the comparison is for (their ``variant`` must agree).
``--cpu`` reads the CPU section instead (``--cpu-only`` runs): psa-tvm's wall time / ``copy_``
per row, rows of 1 MB or more at <= 1.5x by default (issue 11's CPU target), the kernel kind
standing for the variant. On a shared 2-core host one run's CPU row is a sample of that
host's state over time (docs/perf.md v39), so those rows are judged on several runs as well.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
from pathlib import Path

RowKey = tuple[str, str, str, int, int]  # dtype, pass, label, num_heads, key_dim


def read_run(run_dir: Path, schedule: str, min_mb: float,
             cpu: bool = False) -> dict[RowKey, dict]:
    """The run's rows of ``schedule`` with a profiler ratio (``cpu``: psa-tvm's CPU rows and
    their ratio to ``copy_``), at ``min_mb`` MB moved or more, as ``{"ratio", "variant",
    "bytes_moved"}``."""
    path = run_dir / "bench.json"
    section = "cpu_records" if cpu else "records"
    try:
        records = json.loads(path.read_text())[section]
    except (OSError, KeyError, json.JSONDecodeError) as err:
        raise SystemExit(f"RUN_DIR {run_dir}: expected a psa-tvm bench.json with "
                         f"{section} there ({err})") from None
    impl, ratio, variant = (("psa_tvm", "ratio_to_copy", "kernel") if cpu
                            else (schedule, "prof_ratio", "variant"))
    rows = {}
    for r in records:
        if (r["impl"] == impl and r.get(ratio) is not None
                and r["bytes_moved"] >= min_mb * 1e6):
            rows[(r["dtype"], r["pass"], r["label"], r["num_heads"], r["key_dim"])] = {
                "ratio": r[ratio], "variant": r.get(variant), "bytes_moved": r["bytes_moved"]}
    return rows


def compare(runs: list[dict[RowKey, dict]], limit: float) -> tuple[list[dict], list[int]]:
    """Per row (present in every run): the ratios, median and max; per run: rows at <= limit.
    Rows whose kernel variant differs between runs are refused (not one build)."""
    common = [key for key in runs[0] if all(key in run for run in runs[1:])]
    table = []
    for key in common:
        variants = {json.dumps(run[key].get("variant"), sort_keys=True) for run in runs}
        if len(variants) > 1:
            raise SystemExit(f"row {key}: the runs launched different kernels {variants}; "
                             f"compare runs of one artifact set")
        ratios = [run[key]["ratio"] for run in runs]
        table.append({"key": key, "mb": runs[0][key]["bytes_moved"] / 1e6, "ratios": ratios,
                      "median": statistics.median(ratios), "max": max(ratios)})
    per_run = [sum(row["ratios"][i] <= limit for row in table) for i in range(len(runs))]
    return table, per_run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    parser.add_argument("--schedule", default="tiled")
    parser.add_argument("--min-mb", type=float, default=None,
                        help="rows moving at least this many MB (default 8; --cpu: 1)")
    parser.add_argument("--limit", type=float, default=None,
                        help="the target ratio (default 1.05; --cpu: 1.5)")
    parser.add_argument("--markdown", action="store_true", help="a markdown table")
    parser.add_argument("--cpu", action="store_true",
                        help="the CPU section: psa-tvm's wall time over copy_'s")
    args = parser.parse_args(argv)
    if args.min_mb is None:
        args.min_mb = 1.0 if args.cpu else 8.0
    if args.limit is None:
        args.limit = 1.5 if args.cpu else 1.05
    runs = [read_run(d, args.schedule, args.min_mb, args.cpu) for d in args.runs]
    table, per_run = compare(runs, args.limit)
    names = [d.name for d in args.runs]
    sep, end = (" | ", " |") if args.markdown else ("  ", "")
    start = "| " if args.markdown else ""
    print(start + sep.join(["dtype", "pass", "shape", "nh", "MB", *names, "median", "max"]) + end)
    if args.markdown:
        print("|---" * (7 + len(names)) + "|")
    for row in sorted(table, key=lambda r: -r["median"]):
        dtype, pass_, label, nh, _ = row["key"]
        cells = [dtype, pass_, label, str(nh), f"{row['mb']:.1f}",
                 *(f"{v:.3f}" for v in row["ratios"]), f"{row['median']:.3f}",
                 f"{row['max']:.3f}"]
        print(start + sep.join(cells) + end)
    by_median = sum(row["median"] <= args.limit for row in table)
    every = sum(row["max"] <= args.limit for row in table)
    print(f"\n{len(table)} rows >= {args.min_mb:g} MB; at <= {args.limit}: per run {per_run}, "
          f"by the median of the runs {by_median}, in every run {every}")


if __name__ == "__main__":
    # A reader piping the table into `head` closes the pipe early: end quietly, as `ls` does.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
