"""``psa-tvm bench --attention --replot-attention``: the table and plot of a stored run,
without a GPU (the stored H200 run in docs/ is the input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from psa_tvm.cli import main

STORED = Path(__file__).resolve().parents[1] / "docs" / "attention_bench_h200.json"


def test_replot_rewrites_the_stored_table(tmp_path):
    assert main(["bench", "--attention", "--replot-attention", str(STORED),
                 "--out", str(tmp_path)]) == 0
    table = (tmp_path / "bench_attention.md").read_text()
    assert table == (STORED.with_suffix(".md")).read_text()
    assert "| c2psa | 256, 1, 20x20 | float16 | inference | flash |" in table


def test_replot_draws_the_plot(tmp_path):
    pytest.importorskip("matplotlib")
    main(["bench", "--attention", "--replot-attention", str(STORED), "--out", str(tmp_path)])
    png = (tmp_path / "bench_attention.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_a_block_row_says_how_it_compared_within_rounds():
    """Patched block records carry the paired per-round comparison with stock."""
    from psa_tvm.tools.bench_attention import markdown

    base = {"part": "c2psa", "dim": 256, "batch": 1, "size": 20, "dtype": "float16",
            "mode": "inference", "gpu_us": 100.0, "wall_median_us": 800.0, "cpu_us": 700.0,
            "rounds": 41}
    table = markdown([{**base, "impl": "stock", "wall_us": 780.0},
                      {**base, "impl": "cudnn", "wall_us": 760.0, "round_ratio_median": 0.97,
                       "rounds_faster": 40}])
    assert "| 1.03 (per round 1.03, faster in 40/41) |" in table
