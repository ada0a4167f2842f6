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
