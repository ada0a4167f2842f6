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


def test_tune_select_averages_runs_on_given_shapes_and_keeps_the_table_within_min_gain(
        tmp_path):
    """``--results`` of two runs are averaged per shape, ``--shapes`` picks the shapes, and with
    ``--min-gain`` the table's params stay unless a candidate beats them by that much."""
    import json

    from psa_tvm.compiler.rules.base import params_as_dict
    from psa_tvm.compiler.rules.tiled import TiledParams
    from psa_tvm.tools import tune

    config = OpConfig(8, 1, "float32")
    tabled, other = (TiledParams(tile_n=64, threads=64, row_threads=2),
                     TiledParams(tile_n=128, threads=128, row_threads=2))
    build_artifacts([BuildRequest(config, "tiled", p, preferred=False)
                     for p in (tabled, other)], tmp_path, ["sm_90"], native=False)
    sources = {b.schedule_params["tile_n"]: str(b.source.relative_to(tmp_path))
               for b in Manifest.load(tmp_path).builds}
    shapes = ((64, 20, 12), (16, 20, 12))

    def run(path, fractions: dict) -> str:
        path.write_text("".join(json.dumps({
            "source": sources[tile], "pass": "forward", "shape": list(shape),
            "us": 10 / fractions[tile], "copy_us": 10.0, "variant": [1, 1]}) + "\n"
            for tile in (64, 128) for shape in shapes))
        return str(path)

    # tile 128 wins run 1 by 4% and loses run 2 by 2%: +1% on the mean
    runs = [run(tmp_path / "r1.jsonl", {64: 0.90, 128: 0.936}),
            run(tmp_path / "r2.jsonl", {64: 0.90, 128: 0.882})]
    out = tmp_path / "table.json"
    out.write_text(json.dumps({"entries": [{
        "pass": "forward", "dtype": "float32", "key_dim": 8, "num_heads": 1,
        "schedule": "tiled", "params": params_as_dict(tabled)}]}))
    select = ["select", "--artifacts", str(tmp_path), "-o", str(out), "--results", *runs,
              "--shapes", "64,20,12;16,20,12"]

    def chosen(*extra: str) -> tuple[int, float, list]:
        assert tune.main([*select, *extra]) == 0
        (entry,) = json.loads(out.read_text())["entries"]
        return (entry["params"]["tile_n"], entry["fraction_of_copy"],
                [t["shape"] for t in entry["tuned_on"]])

    assert chosen() == (128, 0.909, [list(s) for s in shapes])
    out.write_text(json.dumps({"entries": [{
        "pass": "forward", "dtype": "float32", "key_dim": 8, "num_heads": 1,
        "schedule": "tiled", "params": params_as_dict(tabled)}]}))
    assert chosen("--min-gain", "0.02")[:2] == (64, 0.9)  # +1% < 2%: the table's stays
    assert chosen("--min-gain", "0.005")[0] == 128


def test_tune_select_worst_objective_and_min_mb(tmp_path):
    """``--objective worst`` picks the set whose slowest shape is fastest, where the geometric
    mean picks the set faster on average; ``--min-mb`` leaves shapes that move fewer bytes out
    of the score (here the small one that decides the worst case otherwise)."""
    import json

    from psa_tvm.compiler.rules.tiled import TiledParams
    from psa_tvm.tools import tune

    config = OpConfig(8, 1, "float32")
    sets = {64: TiledParams(tile_n=64, threads=64, row_threads=2),
            128: TiledParams(tile_n=128, threads=128, row_threads=2)}
    build_artifacts([BuildRequest(config, "tiled", p, preferred=False) for p in sets.values()],
                    tmp_path, ["sm_90"], native=False)
    sources = {b.schedule_params["tile_n"]: str(b.source.relative_to(tmp_path))
               for b in Manifest.load(tmp_path).builds}
    big, other_big, small = (64, 80, 80), (64, 40, 40), (1, 20, 12)
    assert tune.moved_mb(big, "float32", 8, 1) >= 8 > tune.moved_mb(small, "float32", 8, 1)
    fractions = {64: {big: 0.90, other_big: 1.10, small: 0.99},   # geomean 0.993, worst 0.90
                 128: {big: 0.95, other_big: 0.96, small: 0.93}}  # geomean 0.947, worst 0.93
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps({
        "source": sources[tile], "pass": "forward", "shape": list(shape),
        "us": 10 / f, "copy_us": 10.0, "variant": [1, 1]}) + "\n"
        for tile, per_shape in fractions.items() for shape, f in per_shape.items()))
    out = tmp_path / "table.json"

    def chosen(*extra: str) -> tuple[int, float, list]:
        assert tune.main(["select", "--artifacts", str(tmp_path), "-o", str(out),
                          "--results", str(results), "--shapes",
                          "64,80,80;64,40,40;1,20,12", *extra]) == 0
        (entry,) = json.loads(out.read_text())["entries"]
        return (entry["params"]["tile_n"], entry["fraction_of_copy"],
                [t["shape"] for t in entry["tuned_on"]])

    assert chosen()[:2] == (64, 0.9933)
    # the table's fraction stays the geometric mean, whatever decided; the entry says which did
    assert chosen("--objective", "worst")[:2] == (128, 0.9466)
    assert json.loads(out.read_text())["entries"][0]["objective"] == "worst"
    assert chosen("--objective", "worst", "--min-mb", "8") == (
        128, 0.955, [list(big), list(other_big)])
    # 64's worst of the two big shapes (0.90) still loses to 128's (0.95)
    assert chosen("--min-mb", "8")[0] == 64  # geomean over the big ones: 0.995 vs 0.955


def test_tune_select_adds_a_range_kernel_where_n_is_in_the_range(tmp_path):
    """`--n-range FIRST:LAST`: a candidate whose full-width kernel differs from the chosen
    set's only in tile_n and threads is fastest at the shape whose N is in the range; the entry
    keeps the chosen set and adds the candidate's tile as its range kernel, that shape's record
    marked "range". A candidate whose full-width kernel differs in anything else is never the
    range kernel; a gain within
    SHIFTED_MIN_GAIN is not taken, nor is one without the flag; a bad range is refused."""
    import json

    from psa_tvm.compiler.rules.base import params_as_dict
    from psa_tvm.compiler.rules.tiled import TiledParams
    from psa_tvm.tools import tune

    config = OpConfig(8, 1, "float32")
    # "small"'s full-width kernel differs from "main"'s only in its tile (its narrow_* fields
    # are read by the narrower kernels alone); "other"'s also in row_threads
    sets = {"main": TiledParams(tile_n=128, threads=128, row_threads=2),
            "small": TiledParams(tile_n=64, threads=64, row_threads=2, narrow_tile_n=32),
            "other": TiledParams(tile_n=64, threads=64, row_threads=1)}
    build_artifacts([BuildRequest(config, "tiled", p, preferred=False) for p in sets.values()],
                    tmp_path, ["sm_90"], native=False)
    by_params = {json.dumps(b.schedule_params, sort_keys=True): str(b.source.relative_to(tmp_path))
                 for b in Manifest.load(tmp_path).builds}
    source = {name: by_params[json.dumps(params_as_dict(p), sort_keys=True)]
              for name, p in sets.items()}
    in_range, shapes = (64, 40, 40), ((64, 40, 40), (64, 80, 80), (64, 20, 20))
    results = tmp_path / "r.jsonl"

    def write(range_gain: float, other_in_range: float = 0.5) -> None:
        # main: 0.90 in the range and 1.0 elsewhere; small: 1.0 in the range, 0.6 elsewhere
        fractions = {"main": {s: 0.9 if s == in_range else 1.0 for s in shapes},
                     "small": {s: 0.9 * (1 + range_gain) if s == in_range else 0.6
                               for s in shapes},
                     "other": {s: other_in_range if s == in_range else 0.5 for s in shapes}}
        results.write_text("".join(json.dumps({
            "source": source[name], "pass": "forward", "shape": list(shape), "us": 10 / f,
            "copy_us": 10.0, "variant": [1, 1]}) + "\n"
            for name, per_shape in fractions.items() for shape, f in per_shape.items()))

    out = tmp_path / "table.json"

    def select(*extra: str) -> dict:
        assert tune.main(["select", "--artifacts", str(tmp_path), "-o", str(out), "--results",
                          str(results), "--shapes", "64,40,40;64,80,80;64,20,20",
                          "--objective", "worst", *extra]) == 0
        (entry,) = [e for e in json.loads(out.read_text())["entries"] if e["pass"] == "forward"]
        return entry

    write(0.1)
    entry = select("--n-range", "1024:2048")
    assert entry["params"] == {**params_as_dict(sets["main"]), "range_min_n": 1024,
                               "range_max_n": 2048, "range_tile_n": 64, "range_threads": 64}
    assert [(t["shape"], t.get("kernel"), t["fraction_of_copy"]) for t in entry["tuned_on"]] == [
        ([64, 40, 40], "range", 0.99), ([64, 80, 80], None, 1.0), ([64, 20, 20], None, 1.0)]
    assert TiledParams(**entry["params"]).n_range() == (1024, 2048)
    # without the flag, or with a range no tuned shape is in: the chosen set alone
    assert select()["params"] == params_as_dict(sets["main"])
    assert select("--n-range", "2000:3000")["params"] == params_as_dict(sets["main"])
    # a range kernel within the noise of the chosen set is not taken
    write(0.005)
    assert select("--n-range", "1024:2048")["params"] == params_as_dict(sets["main"])
    # "other" (another row_threads) is faster in the range but may not be the range kernel
    write(0.005, other_in_range=0.99)
    assert select("--n-range", "1024:2048")["params"] == params_as_dict(sets["main"])
    for bad in ("2048:1024", "0:10", "1024"):
        with pytest.raises(SystemExit, match="--n-range"):
            select("--n-range", bad)


def _shifted_pair(tmp_path):
    """Two shifted candidates of one tiled build: one with a faster forward set, one with a
    faster backward set (their fields differ from the defaults); their sources by name."""
    import json
    from dataclasses import replace

    from psa_tvm.compiler import shifted
    from psa_tvm.tools import tune

    config = OpConfig(16, 2, "float16")
    base = shifted.default_params(config)
    fast_fwd = replace(base, fwd_positions=1)
    fast_bwd = replace(base, bwd_tile_n=120, bwd_threads=128)
    params = tune._tuned_tiled_params(config)
    build_artifacts([BuildRequest(config, "tiled", params, preferred=False, shifted_params=p)
                     for p in (fast_fwd, fast_bwd)], tmp_path, ["sm_90"])
    manifest = Manifest.load(tmp_path)
    assert len(manifest.builds) == 2
    by_fields = {json.dumps(b.shifted_params, sort_keys=True): str(b.source.relative_to(tmp_path))
                 for b in manifest.builds}
    source = {name: by_fields[json.dumps(shifted.as_record(p), sort_keys=True)]
              for name, p in (("fwd", fast_fwd), ("bwd", fast_bwd))}
    return base, fast_fwd, fast_bwd, source


def test_tune_select_tunes_shifted_params_per_pass(tmp_path):
    """Shifted candidates (`tune build --shifted`): the forward fields come from the candidate
    whose shifted forward was fastest, the backward fields from the backward's; timings where a
    plain kernel ran are left out, and no tiled entry is written (one set of tiled params)."""
    import json
    from dataclasses import replace

    from psa_tvm.compiler import shifted
    from psa_tvm.tools import tune

    base, fast_fwd, fast_bwd, source = _shifted_pair(tmp_path)
    lines = []
    for shape in tune.SHIFTED_TUNE_SHAPES:
        for name in ("fwd", "bwd"):
            for pass_ in ("forward", "backward"):
                wins = (pass_ == "forward") == (name == "fwd")
                lines.append({"source": source[name], "pass": pass_, "shape": list(shape),
                              "us": 10.0 if wins else 12.0, "copy_us": 9.0, "variant": [8, 1],
                              "shifted": True})
        # A plain kernel ran here (say the forward at 40x23): it must not count.
        lines.append({"source": source["bwd"], "pass": "forward", "shape": list(shape),
                      "us": 1.0, "copy_us": 9.0, "variant": [8, 8], "shifted": False})
    (tmp_path / tune.RESULTS).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "table.json"
    assert tune.main(["select", "--artifacts", str(tmp_path), "-o", str(out)]) == 0
    table = json.loads(out.read_text())
    assert table["entries"] == []
    (entry,) = table["shifted"]
    assert (entry["dtype"], entry["key_dim"], entry["num_heads"]) == ("float16", 16, 2)
    want = {**{k: getattr(fast_fwd, k) for k in shifted.PASS_FIELDS["forward"]},
            **{k: getattr(fast_bwd, k) for k in shifted.PASS_FIELDS["backward"]}}
    assert entry["params"] == shifted.as_record(replace(base, **want))
    assert entry["fraction_of_copy"] == {"forward": 0.9, "backward": 0.9}
    assert [t["shape"] for t in entry["tuned_on"]["backward"]] == [
        list(s) for s in tune.SHIFTED_TUNE_SHAPES]
    assert all(t["variant"] == [8, 1, "s"] for t in entry["tuned_on"]["forward"])
    # A candidate that was inexact in any timing run is never chosen.
    marked = [dict(x, exact=False) if x["source"] == source["bwd"] and x["shifted"] else x
              for x in lines[:3]] + lines[3:]
    (tmp_path / tune.RESULTS).write_text("\n".join(json.dumps(x) for x in marked) + "\n")
    assert tune.main(["select", "--artifacts", str(tmp_path), "-o", str(out)]) == 0
    assert "shifted" not in json.loads(out.read_text())  # "bwd" left out: nothing compared
    # A gain within the noise (under SHIFTED_MIN_GAIN) keeps the defaults' fields.
    for line in lines:
        if line["shifted"]:
            line["us"] = 10.0 if line["us"] == 10.0 else 10.05
    (tmp_path / tune.RESULTS).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert tune.main(["select", "--artifacts", str(tmp_path), "-o", str(out)]) == 0
    (entry,) = json.loads(out.read_text())["shifted"]
    assert entry["params"] == shifted.as_record(base)


def test_tune_select_scores_shifted_params_on_given_shapes_by_the_worst(tmp_path):
    """`--shifted-shapes` with a YOLO square (where the 16-bit shifted backward also runs) and
    `--objective worst`: a backward set that wins on the odd-N shapes' geometric mean but is
    slow at the square loses to a steadier one; `--min-mb` leaves a small shape out."""
    import json
    from dataclasses import asdict

    from psa_tvm.compiler import shifted
    from psa_tvm.tools import tune

    base, _, fast_bwd, source = _shifted_pair(tmp_path)
    square, small = (64, 20, 20), (1, 20, 20)  # 1x20x20 at nh=2, kd=16: 0.05 MB moved
    # "fwd" (default backward fields): 1.0x everywhere but 1.25x at the small shape;
    # "bwd": 0.9x at the odd shapes (the better mean), 1.2x at the square
    us = {("fwd", s): 10.0 for s in (*tune.SHIFTED_TUNE_SHAPES, square)}
    us.update({("bwd", s): 9.0 for s in tune.SHIFTED_TUNE_SHAPES})
    us[("bwd", square)], us[("fwd", small)], us[("bwd", small)] = 12.0, 12.5, 10.0
    lines = [{"source": source[name], "pass": "backward", "shape": list(shape), "us": t,
              "copy_us": 10.0, "variant": [8, 8], "shifted": True}
             for (name, shape), t in us.items()]
    (tmp_path / tune.RESULTS).write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "table.json"

    def backward_fields(*extra: str) -> dict:
        assert tune.main(["select", "--artifacts", str(tmp_path), "-o", str(out), *extra]) == 0
        (entry,) = json.loads(out.read_text())["shifted"]
        params = shifted.ShiftedParams(**entry["params"])
        return entry, {k: getattr(params, k) for k in shifted.PASS_FIELDS["backward"]}

    defaults = {k: getattr(base, k) for k in shifted.PASS_FIELDS["backward"]}
    fast = {k: getattr(fast_bwd, k) for k in shifted.PASS_FIELDS["backward"]}
    assert backward_fields()[1] == fast  # the odd-N shapes alone, geometric mean
    shapes = ";".join(",".join(map(str, s)) for s in (*tune.SHIFTED_TUNE_SHAPES, square, small))
    entry, fields = backward_fields("--shifted-shapes", shapes, "--objective", "worst",
                                    "--min-mb", "1")
    assert fields == defaults  # worst 1.0 (the small shape left out) against 1.2
    assert entry["objective"] == "worst"
    assert [t["shape"] for t in entry["tuned_on"]["backward"]] == [
        list(s) for s in (*tune.SHIFTED_TUNE_SHAPES, square)]
    assert json.loads(out.read_text())["shifted_tune_shapes"][-1] == list(small)
    # without --min-mb the small shape decides: "fwd" 1.25x against "bwd" 1.2x
    assert backward_fields("--shifted-shapes", shapes, "--objective", "worst")[1] == fast
    assert asdict(base) != asdict(fast_bwd)


def _write_backward_timings(root, source: dict, us: dict, variant: list) -> None:
    """A tune run's records of shifted backwards: ``us[(name, shape)]`` against a 10 us copy,
    for the candidate ``source[name]``."""
    import json

    from psa_tvm.tools import tune

    lines = [{"source": source[name], "pass": "backward", "shape": list(shape), "us": t,
              "copy_us": 10.0, "variant": variant, "shifted": True}
             for (name, shape), t in us.items()]
    (root / tune.RESULTS).write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def _select_shifted_entry(root, shapes, *extra: str) -> dict:
    """`tune select --objective worst` over ``shapes`` into ``root/table.json``: the one
    shifted entry it writes."""
    import json

    from psa_tvm.tools import tune

    out = root / "table.json"
    spec = ";".join(",".join(map(str, s)) for s in shapes)
    assert tune.main(["select", "--artifacts", str(root), "-o", str(out), "--shifted-shapes",
                      spec, "--objective", "worst", *extra]) == 0
    (entry,) = json.loads(out.read_text())["shifted"]
    return entry


def test_tune_select_splits_the_shifted_backward_by_call_size(tmp_path, monkeypatch):
    """`--split-backward`: one candidate's backward is fastest on the smallest shape, the
    other's on the larger ones; the entry keeps the second as the main backward and the first
    as the small-call one, below the geometric mean of the sizes either side of the cut. A
    split that gains less than SHIFTED_MIN_GAIN over the best single set is not taken, nor
    is one without the flag."""
    import json
    import math
    from dataclasses import asdict, replace

    from psa_tvm.compiler import shifted

    base, _, fast_bwd, source = _shifted_pair(tmp_path)
    # kd=16, nh=2: 64 * B * H * W merged elements; all three from 2**21 up (shifted runs)
    small_shape, shapes = (64, 25, 25), ((64, 25, 25), (64, 40, 23), (64, 37, 29))
    numel = {s: 64 * s[0] * s[1] * s[2] for s in shapes}
    assert min(numel.values()) >= shifted.MIN_NUMEL

    def write(small_gain: float) -> None:
        # "bwd" (120-position tiles) wins at the small shape, "fwd" (the defaults) elsewhere
        us = {("bwd", s): 10.0 if s == small_shape else 11.0 for s in shapes}
        us.update({("fwd", s): 10.0 * (1 + small_gain) if s == small_shape else 10.0
                   for s in shapes})
        _write_backward_timings(tmp_path, source, us, [8, 1])

    def select(*extra: str) -> dict:
        return _select_shifted_entry(tmp_path, shapes, *extra)

    # The forward was not timed: its fields stay what the table says builds take now.
    table_dir = tmp_path / "schedules"
    table_dir.mkdir()
    tabled = replace(base, fwd_positions=1)
    (table_dir / "sm_90.json").write_text(json.dumps({"arch": "sm_90", "entries": [], "shifted": [
        {"dtype": "float16", "key_dim": 16, "num_heads": 2, "params": asdict(tabled)}]}))
    monkeypatch.setenv("PSA_TVM_SCHEDULES", str(table_dir))
    write(0.2)
    entry = select("--split-backward")
    params = shifted.ShiftedParams(**entry["params"])
    below = math.isqrt(numel[(64, 25, 25)] * numel[(64, 40, 23)])
    assert params == shifted.split_backward(tabled, fast_bwd, below)
    assert (params.bwd_tile_n, params.bwd_small_tile_n, params.bwd_small_threads) == (
        base.bwd_tile_n, fast_bwd.bwd_tile_n, fast_bwd.bwd_threads)
    assert [(t["shape"], t["kernel"], t["fraction_of_copy"])
            for t in entry["tuned_on"]["backward"]] == [
        ([64, 25, 25], "small", 1.0), ([64, 40, 23], "main", 1.0), ([64, 37, 29], "main", 1.0)]
    assert entry["fraction_of_copy"]["backward"] == 1.0
    # without the flag: the best single set by the worst shape ("bwd": 1/1.1 against 1/1.2)
    assert shifted.ShiftedParams(**select()["params"]).bwd_small_below == 0
    # a split within the noise of the best single set is not taken
    write(0.005)
    assert shifted.ShiftedParams(**select("--split-backward")["params"]) == tabled


def test_tune_select_adds_a_whole_row_backward_where_n_fits_its_tile(tmp_path):
    """`--whole-backward`: a candidate with a larger backward tile is fastest only at the shape
    whose N fits that tile and not the chosen one's; the entry keeps the chosen backward and
    adds the larger one as its whole-row kernel, that shape's record marked "whole". A gain
    within SHIFTED_MIN_GAIN is not taken, nor is one without the flag."""
    import json
    from dataclasses import replace

    from psa_tvm.compiler import shifted
    from psa_tvm.tools import tune

    config = OpConfig(16, 2, "float16")
    base = shifted.default_params(config)
    big = replace(base, bwd_tile_n=504, bwd_threads=512)
    build_artifacts([BuildRequest(config, "tiled", tune._tuned_tiled_params(config),
                                  preferred=False, shifted_params=p) for p in (base, big)],
                    tmp_path, ["sm_90"])
    source = {json.dumps(b.shifted_params, sort_keys=True): str(b.source.relative_to(tmp_path))
              for b in Manifest.load(tmp_path).builds}
    source = {name: source[json.dumps(shifted.as_record(p), sort_keys=True)]
              for name, p in (("base", base), ("big", big))}
    # kd=16, nh=2: N = 400 is past 248 and within 504; all from 2**21 merged elements up
    whole_shape, shapes = (96, 20, 20), ((96, 20, 20), (64, 40, 23), (64, 37, 29))
    assert min(64 * b * h * w for b, h, w in shapes) >= shifted.MIN_NUMEL

    def write(whole_gain: float) -> None:
        # "big" (504-position tiles) wins where N = 400 fits it, "base" (248) elsewhere
        us = {("base", s): 10.0 * (1 + whole_gain) if s == whole_shape else 10.0
              for s in shapes}
        us.update({("big", s): 10.0 if s == whole_shape else 13.0 for s in shapes})
        _write_backward_timings(tmp_path, source, us, [8, 8])

    def select(*extra: str) -> dict:
        return _select_shifted_entry(tmp_path, shapes, *extra)

    write(0.15)
    entry = select("--whole-backward")
    params = shifted.ShiftedParams(**entry["params"])
    assert params == shifted.with_whole_backward(base, big)
    assert (params.bwd_tile_n, params.bwd_whole_tile_n, params.bwd_whole_threads) == (248, 504,
                                                                                      512)
    assert [(t["shape"], t.get("kernel"), t["fraction_of_copy"])
            for t in entry["tuned_on"]["backward"]] == [
        ([96, 20, 20], "whole", 1.0), ([64, 40, 23], None, 1.0), ([64, 37, 29], None, 1.0)]
    assert entry["fraction_of_copy"]["backward"] == 1.0
    # without the flag: the best single set by the worst shape (base: 1/1.15 against 1/1.3)
    assert shifted.ShiftedParams(**select()["params"]) == base
    # a whole-row kernel within the noise of the chosen set is not taken
    write(0.005)
    assert shifted.ShiftedParams(**select("--whole-backward")["params"]) == base


def test_select_update_keeps_the_record_of_a_pass_it_did_not_time():
    """`select --update` after a backward-only run: the forward's earlier fraction, candidate
    count and per-shape record stay in the entry, and where the two passes were chosen by
    different objectives the entry names each pass's."""
    from psa_tvm.tools import tune

    earlier = {"fraction_of_copy": {"backward": 0.95, "forward": 0.93},
               "candidates": {"backward": 25, "forward": 25},
               "tuned_on": {"backward": [{"shape": [1]}], "forward": [{"shape": [2]}]}}
    entry = {"fraction_of_copy": {"backward": 0.97}, "candidates": {"backward": 6},
             "objective": "worst", "tuned_on": {"backward": [{"shape": [3]}]}}
    tune._keep_untimed_passes(entry, earlier)
    assert entry == {"fraction_of_copy": {"backward": 0.97, "forward": 0.93},
                     "candidates": {"backward": 6, "forward": 25},
                     "objective": {"backward": "worst", "forward": "geomean"},
                     "tuned_on": {"backward": [{"shape": [3]}], "forward": [{"shape": [2]}]}}
    # passes chosen by the same objective: the entry keeps naming one
    same = {**earlier, "objective": "worst"}
    again = {"fraction_of_copy": {"backward": 0.97}, "candidates": {"backward": 6},
             "objective": "worst", "tuned_on": {"backward": [{"shape": [3]}]}}
    tune._keep_untimed_passes(again, same)
    assert again["objective"] == "worst" and again["candidates"] == {"backward": 6,
                                                                     "forward": 25}


def test_shifted_grid_takes_backward_tiles_as_given():
    """`tune build --shifted --grid`: axes of the shifted grid replace its defaults, backward
    tiles used as given (the default grid's are powers of two less one vector); other names
    and non-integers are refused."""
    from psa_tvm.compiler import shifted
    from psa_tvm.tools import tune

    config = OpConfig(32, 4, "float16")
    grid = tune.parse_shifted_grid(["fwd_threads=256", "fwd_row_threads=2", "fwd_positions=2",
                                    "grain=2", "bwd_tile_n=56,200", "bwd_threads=128,256",
                                    "bwd_row_threads=4"])
    found = tune.shifted_candidates(config, grid)
    assert found[0] == shifted.default_params(config)
    # then the shipped table's set where it differs (nh 4 16-bit: a whole-row backward), then
    # the grid's
    tuned = shifted.tuned_params(config, ["sm_90"])
    assert tuned in found[:2]
    assert {(p.bwd_tile_n, p.bwd_threads) for p in found if p not in (found[0], tuned)} <= {
        (56, 128), (56, 256), (200, 128), (200, 256)}
    assert {p.fwd_positions for p in found} == {2}
    assert {(p.bwd_tile_n, p.bwd_threads) for p in tune.shifted_candidates(config)} >= {
        (56, 128), (248, 256), (504, 512)}  # the default grid: 64 - 8, 256 - 8, 512 - 8
    with pytest.raises(ValueError, match="with --shifted: expected one of"):
        tune.parse_shifted_grid(["tile_n=64"])
    with pytest.raises(ValueError, match="comma-separated ints"):
        tune.parse_shifted_grid(["bwd_tile_n=a"])


def test_shifted_candidates_are_valid_and_start_with_the_defaults():
    from psa_tvm.compiler import shifted
    from psa_tvm.tools import tune

    for config in (OpConfig(32, 4, "float16"), OpConfig(32, 4, "float32"),
                   OpConfig(128, 8, "bfloat16")):
        found = tune.shifted_candidates(config)
        assert found[0] == shifted.default_params(config)
        assert len(found) == len(set(found)) > 10
        assert all(shifted.fits(config, p) is None for p in found)


def test_tune_shapes_are_checked_before_anything_runs():
    from psa_tvm.tools import tune

    assert tune._parse_shapes("64,20,12;16,40,40") == ((64, 20, 12), (16, 40, 40))
    assert tune._parse_shapes(None) == tune.TUNE_SHAPES
    for bad in ("64,20", "64,20,x", "64,0,12", "1,2,3;"):
        with pytest.raises(ValueError, match="--shapes: expected 'B,H,W;B,H,W'"):
            tune._parse_shapes(bad)
    # select's --shifted-shapes is named as itself, before any table is written
    with pytest.raises(ValueError, match="--shifted-shapes: expected 'B,H,W;B,H,W'"):
        tune.main(["select", "--artifacts", "/nonexistent", "-o", "/nonexistent/t.json",
                   "--shifted-shapes", "64,20"])


def test_bench_refuses_a_placement_count_below_one(capsys):
    from psa_tvm.tools import bench

    assert bench.main(["--placements", "0"]) == 2
    assert "--placements: expected a count of 1 or more, got 0" in capsys.readouterr().err


def test_tune_run_refuses_to_append_to_timings_against_another_copy(tmp_path):
    """Records before v23 timed the floor between buffers of its own; `select` compares every
    line of a results file, so a run against the kernel's own buffers must not join them."""
    import json

    from psa_tvm.tools import tune

    old = {"pass": "forward", "shape": [16, 40, 40], "us": 5.0, "copy_us": 5.0,
           "variant": [8, 8], "source": "kd32_nh2_float16/tiled-x.cu", "timer": "profiler"}
    (tmp_path / tune.RESULTS).write_text(json.dumps(old) + "\n")
    with pytest.raises(ValueError, match="buffers of its own"):
        tune.main(["run", "--artifacts", str(tmp_path), "--profiler"])
    with pytest.raises(ValueError, match="--placements: expected a count of 1 or more, got 0"):
        tune.main(["run", "--artifacts", str(tmp_path), "--profiler", "--placements", "0"])
    # a record of this method passes the check (and fails only later, at the missing manifest)
    (tmp_path / tune.RESULTS).write_text(json.dumps({**old, "copy": tune.COPY_METHOD}) + "\n")
    with pytest.raises(Exception) as err:
        tune.main(["run", "--artifacts", str(tmp_path), "--profiler"])
    assert "buffers of its own" not in str(err.value)


def _bench_record(impl: str, label: str, prof_us: float, copy_us: float,
                  moved: int = 35_000_000) -> dict:
    return {"dtype": "float32", "pass": "forward", "label": label, "impl": impl, "n": 1073,
            "bytes_moved": moved, "us": prof_us + 3, "prof_us": prof_us,
            "prof_copy_us": copy_us, "prof_ratio": prof_us / copy_us,
            "fraction_of_copy": copy_us / prof_us, "variant": None}


def test_bench_tables_set_each_row_beside_the_elementwise_copy():
    """The ``copy_kernel`` peer gets its own column in every row, and the target table adds the
    >= 8 MB rows' worst ratio to it beside the worst ratio to the memcpy; without the peer the
    target table keeps its five columns."""
    from psa_tvm.tools.bench import markdown, summary

    records = []
    for label, memcpy, kernel_copy, tiled in (("37x29/b16", 10.4, 10.6, 11.0),
                                              ("37x29/b15", 12.2, 9.7, 10.8)):
        records += [_bench_record("copy", label, memcpy, memcpy),
                    _bench_record("copy_kernel", label, kernel_copy, memcpy),
                    _bench_record("tiled", label, tiled, memcpy)]
    table = summary(records)
    head, rule, row = table.splitlines()
    assert head.endswith("| >= 8 MB: max ratio to the copy kernel (shape) |")
    assert rule.count("---") == 6
    # worst to the memcpy: b16 (11.0 / 10.4); worst to the kernel copy: b15 (10.8 / 9.7)
    assert row == ("| float32 | forward | 1.058 (37x29/b16) | - | - | 1.113 (37x29/b15) |")
    rows = markdown(records, ["tiled"]).splitlines()
    assert "copy_kernel us (events / profiler) [x copy]" in rows[0]
    assert rows[0].index("copy_kernel") < rows[0].index("tiled us")
    assert "| 13.6 / 10.6 [1.02] | 14.0 / 11.0 [1.06] |" in rows[2]

    plain = summary([r for r in records if r["impl"] != "copy_kernel"])
    assert "copy kernel" not in plain and plain.splitlines()[1].count("---") == 5


def test_cpu_section_ratio_is_the_median_of_per_round_ratios(monkeypatch):
    """The CPU section's [x copy] is the median over rounds of (time / that round's copy), not
    the best time over the best copy (on a shared host those may come from different spells);
    its times stay the best round's. The kernels still run once for the exactness check."""
    from itertools import cycle

    from psa_tvm.tools import bench

    # Per round: copy, psa_tvm (right after its copy), eager. Round 2 is a fast spell for the
    # copy only.
    rounds = [(10.0, 12.0, 100.0), (5.0, 14.0, 100.0), (10.0, 30.0, 100.0), (10.0, 13.0, 100.0),
              (10.0, 11.0, 100.0)]
    assert len(rounds) == bench.CPU_ROUNDS
    script = cycle([us for round_ in rounds for us in round_])
    monkeypatch.setattr(bench, "_wall_us", lambda fn, reps: next(script))
    shape = bench.Shape("2x3/b1", 1, 4, 32, 2, 3)
    records = bench.time_cpu_shape(shape, "float32", reps=1)
    forward = {r["impl"]: r for r in records if r["pass"] == "forward"}
    assert forward["copy"]["us"] == 5.0 and forward["psa_tvm"]["us"] == 11.0
    # per-round ratios 1.2, 2.8, 3.0, 1.3, 1.1: median 1.3 (best over best would say 2.2)
    assert forward["psa_tvm"]["ratio_to_copy"] == 1.3
    assert forward["copy"]["ratio_to_copy"] == 1.0
    # a call this small stays in the caches: the plain kernel, named in the record and table
    assert forward["psa_tvm"]["kernel"] == "generic"
    assert "| generic |" in bench.cpu_markdown(records)
