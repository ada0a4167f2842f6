"""The benchmark and tuning tools without a GPU: the profiler's split into runs, the benchmark's
shape list, and ``tune select`` over the square and tail tuning shapes."""

from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")

from psa_tvm.compiler.artifact import BuildRequest, build_artifacts  # noqa: E402
from psa_tvm.config import OpConfig  # noqa: E402
from psa_tvm.runtime.manifest import Manifest  # noqa: E402


def test_profiler_runs_are_split_at_the_flush_and_spin():
    from psa_tvm.tools.timing import split_runs

    flush, spin = "FillFunctor<int>", "spin_kernel"
    acts = [(0, 50, flush), (50, 60, spin), (60, 64, "ours"),  # run 1: one kernel, 4 ns
            (70, 120, flush), (120, 130, spin), (130, 133, "a"), (135, 140, "b"),  # run 2: 8 ns
            (150, 200, flush), (200, 210, spin)]
    assert split_runs(acts, {flush, spin}) == [0.004, 0.008]
    assert split_runs(acts[:2], {flush, spin}) == []


def test_bench_covers_the_issue_shapes():
    from psa_tvm.tools.bench import bench_shapes

    tails = {(s.batch, s.num_heads, s.height, s.width) for s in bench_shapes("tails")}
    for grid in ((20, 15), (20, 12), (40, 23), (37, 29), (1, 33), (64, 3)):
        assert {(b, 4, *grid) for b in (1, 16, 64)} <= tails
    assert (64, 6, 20, 12) in tails


def test_tune_select_weighs_tails_and_records_the_variants(tmp_path):
    """Two candidates timed on the square and the tail tuning shapes: the one with the better
    geometric mean over all four wins, and the table says which variant ran where."""
    import json

    from psa_tvm.compiler.rules.tiled import TiledParams
    from psa_tvm.tools import tune

    config = OpConfig(8, 1, "float32")
    fast_square = TiledParams(tile_n=64, threads=64, row_threads=2)
    even = TiledParams(tile_n=128, threads=128, row_threads=2)
    build_artifacts([BuildRequest(config, "tiled", p, preferred=False)
                     for p in (fast_square, even)], tmp_path, ["sm_90"])
    manifest = Manifest.load(tmp_path)
    sources = {b.schedule_params["tile_n"]: str(b.source.relative_to(tmp_path))
               for b in manifest.builds}
    variants = {(16, 40, 40): [1, 1], (64, 40, 40): [1, 1], (64, 20, 15): [1, 1],
                (16, 37, 29): [1, 1]}
    # tile 64: at the copy on the squares, 0.5 on the tails; tile 128: 0.9 everywhere.
    speed = {64: lambda s: 1.0 if s[1] == 40 else 0.5, 128: lambda s: 0.9}
    lines = [json.dumps({"source": sources[tile], "pass": "forward", "shape": list(shape),
                         "us": 10 / speed[tile](shape), "copy_us": 10.0,
                         "variant": variants[shape]})
             for tile in (64, 128) for shape in tune.TUNE_SHAPES]
    (tmp_path / tune.RESULTS).write_text("\n".join(lines) + "\n")
    out = tmp_path / "table.json"
    assert tune.main(["select", "--artifacts", str(tmp_path), "-o", str(out)]) == 0
    (entry,) = json.loads(out.read_text())["entries"]
    assert entry["params"]["tile_n"] == 128 and entry["fraction_of_copy"] == 0.9
    assert [t["shape"] for t in entry["tuned_on"]] == [list(s) for s in tune.TUNE_SHAPES]
    assert all(t["variant"] == [1, 1] for t in entry["tuned_on"])
