"""scripts/sweep_batches.py (the shipped kernels at every batch): the calls it makes and how it
sums them up, without a GPU; on the GPU, a small sweep runs every call bit-exact."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sweep_batches.py"


def _module():
    spec = importlib.util.spec_from_file_location("sweep_batches", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_calls_keep_the_sizes_asked_for_in_a_fixed_order():
    sweep = _module()
    found = sweep.calls(["float16", "float32"], [4], [(20, 15)], ["forward"], [16, 64, 128],
                        8.0, 40.0)
    # float16 20x15 at 4 heads moves 4.9 MB at batch 16 (below 8), 19.7 at 64, 39.3 at 128;
    # float32 twice that (78.6 at 128: above 40).
    assert [(c.dtype, c.shape.batch, round(c.mb, 1)) for c in found] == [
        ("float16", 64, 19.7), ("float16", 128, 39.3), ("float32", 16, 9.8),
        ("float32", 64, 39.3)]
    assert found[0].rows == 256 and found[0].shape.n == 300
    assert found[0].label == "for float16 nh4 64x20x15 N=300 B*nh=256"
    assert found[0].fields == {"pass": "forward", "dtype": "float16", "key_dim": 32,
                               "num_heads": 4, "grid": "20x15", "n": 300, "rows": 256}
    default = sweep.calls(["float32", "float16"], [2, 4, 6], [sweep.parse_grid(g)
                                                             for g in sweep.GRIDS],
                          ["forward", "backward"], sweep.BATCHES, 8.0, 300.0)
    assert len(default) == 948  # docs/perf.md v37's sweep


def test_the_summary_counts_the_calls_above_the_limit_by_kernel():
    sweep = _module()
    rows = [{"call": f"c{i}", "mb": 10.0, "kernel": kernel, "ratio": ratio, "exact": exact}
            for i, (kernel, ratio, exact) in enumerate(
                [("a", 1.10, True), ("a", 1.06, True), ("b", 1.07, False), ("b", 1.00, True)])]
    text = sweep.summary(rows, 1.05, worst=2)
    assert text.splitlines()[0] == "3 of 4 calls above 1.05x the copy; 1 not bit-exact"
    assert "     2  a" in text and "     1  b" in text
    assert text.splitlines()[-2].startswith("   1.100") and "c2" in text.splitlines()[-1]


@pytest.mark.parametrize(("argv", "message"), [
    (["--grids", "20by15"], "expected HxW"),
    (["--grids", "0x15"], "must be positive"),
    (["--heads", "0"], "positive integers"),
    (["--min-mb", "9", "--max-mb", "8"], "--min-mb at most --max-mb"),
    (["--min-mb", "1e6", "--max-mb", "2e6"], "no call of the sweep"),
])
def test_bad_arguments_are_refused_before_any_gpu_work(tmp_path, capsys, argv, message):
    sweep = _module()
    with pytest.raises(SystemExit) as exc:
        sweep.main(["--out", str(tmp_path / "s.json"), *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.gpu
def test_a_small_sweep_runs_every_call_bit_exact(gpu_artifacts, tmp_path, capsys):
    sweep = _module()
    out = tmp_path / "sweep.json"
    code = sweep.main(["--out", str(out), "--artifacts", str(gpu_artifacts), "--dtypes",
                       "float16", "--heads", "4", "--grids", "20x15", "37x29", "--batches",
                       "32", "64", "--min-mb", "1", "--placements", "2", "--recheck", "0"])
    calls = json.loads(out.read_text())["calls"]
    assert code == 0 and len(calls) == 8 and all(c["exact"] for c in calls)
    assert all(c["placements"] == 2 and len(c["ratios"]) == 2 and 0.3 < c["ratio"] < 5
               for c in calls)
    assert {(c["grid"], c["pass"], c["rows"], c["key_dim"]) for c in calls} == {
        (g, p, r, 32) for g in ("20x15", "37x29") for p in ("forward", "backward")
        for r in (128, 256)}
    assert "calls above 1.05x the copy; 0 not bit-exact" in capsys.readouterr().out
