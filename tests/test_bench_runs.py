"""scripts/bench_runs.py (several benchmark runs side by side) on made-up runs: no GPU, no TVM."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_runs.py"


def _module():
    spec = importlib.util.spec_from_file_location("bench_runs", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(label: str, ratio: float, mb: float, impl: str = "tiled",
            variant: dict | None = None) -> dict:
    return {"dtype": "float16", "pass": "forward", "label": label, "num_heads": 4, "key_dim": 32,
            "impl": impl, "bytes_moved": int(mb * 1e6), "prof_ratio": ratio,
            "variant": variant or {"vec_kd": 8, "vec": 8}}


def _run(tmp_path: Path, name: str, records: list[dict]) -> Path:
    run = tmp_path / name
    run.mkdir()
    (run / "bench.json").write_text(json.dumps({"meta": {}, "records": records}))
    return run


def test_rows_are_judged_per_run_by_median_and_in_every_run(tmp_path, capsys):
    bench_runs = _module()
    runs = [_run(tmp_path, f"r{i}", [_record("a", a, 20), _record("b", b, 20),
                                     _record("small", 2.0, 1), _record("a", 9.0, 20, "copy")])
            for i, (a, b) in enumerate([(1.00, 1.04), (1.02, 1.08), (1.01, 1.06)])]
    table, per_run = bench_runs.compare(
        [bench_runs.read_run(r, "tiled", 8.0) for r in runs], 1.05)
    # the copy row and the 1 MB row are not rows of the target
    assert {row["key"][2] for row in table} == {"a", "b"}
    b_row = next(row for row in table if row["key"][2] == "b")
    assert b_row["ratios"] == [1.04, 1.08, 1.06] and b_row["median"] == 1.06
    assert b_row["max"] == 1.08
    assert per_run == [2, 1, 1]
    bench_runs.main([str(r) for r in runs])
    out = capsys.readouterr().out
    assert "per run [2, 1, 1], by the median of the runs 1, in every run 1" in out


def test_runs_of_different_kernels_are_refused(tmp_path):
    bench_runs = _module()
    one = _run(tmp_path, "one", [_record("a", 1.0, 20)])
    other = _run(tmp_path, "other", [_record("a", 1.0, 20, variant={"vec_kd": 8, "vec": 4})])
    with pytest.raises(SystemExit, match="launched different kernels"):
        bench_runs.main([str(one), str(other)])


def test_a_folder_without_a_benchmark_is_named(tmp_path):
    bench_runs = _module()
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match=r"RUN_DIR .*empty: expected a psa-tvm bench\.json"):
        bench_runs.main([str(tmp_path / "empty")])


def _cpu_record(label: str, ratio: float, mb: float, impl: str = "psa_tvm",
                kernel: str = "generic") -> dict:
    return {"dtype": "float32", "pass": "backward", "label": label, "num_heads": 4,
            "key_dim": 32, "impl": impl, "bytes_moved": int(mb * 1e6), "us": 10.0,
            "ratio_to_copy": ratio, **({"kernel": kernel} if impl == "psa_tvm" else {})}


def test_cpu_rows_are_judged_on_their_own_target(tmp_path, capsys):
    """--cpu: the CPU section, psa-tvm's ratio to copy_, rows of 1 MB or more at <= 1.5x by
    default; a row's kernel kind must agree between runs."""
    bench_runs = _module()
    runs = []
    for i, (a, b) in enumerate([(1.2, 1.45), (1.3, 1.7), (1.25, 1.6)]):
        run = tmp_path / f"cpu{i}"
        run.mkdir()
        records = [_cpu_record("a", a, 3), _cpu_record("b", b, 30, kernel="prefetch"),
                   _cpu_record("tiny", 9.0, 0.5), _cpu_record("a", 1.0, 3, impl="copy")]
        (run / "bench.json").write_text(json.dumps({"meta": {}, "records": [],
                                                     "cpu_records": records}))
        runs.append(run)
    bench_runs.main(["--cpu", *map(str, runs)])
    out = capsys.readouterr().out
    assert "2 rows >= 1 MB; at <= 1.5: per run [2, 1, 1], by the median of the runs 1" in out
    other = tmp_path / "other"
    other.mkdir()
    (other / "bench.json").write_text(json.dumps(
        {"records": [], "cpu_records": [_cpu_record("a", 1.2, 3, kernel="prefetch")]}))
    with pytest.raises(SystemExit, match="launched different kernels"):
        bench_runs.main(["--cpu", str(runs[0]), str(other)])
