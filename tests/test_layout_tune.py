"""The layout family's tuning tool (CPU only): the tiled rule's ``slices_on_x`` option, the
candidate grid and the ranking of a timing run. The GPU timings themselves are in
docs/attention.md (``python -m psa_tvm.tools.layout_tune time`` on the H200)."""

from __future__ import annotations

import json

import pytest

from psa_tvm.config import OpConfig
from psa_tvm.tools import layout_tune

pytest.importorskip("tvm")

from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
from psa_tvm.compiler.rules import get_rule
from psa_tvm.compiler.rules.base import params_as_dict
from psa_tvm.compiler.rules.tiled import TiledParams

CONFIG = OpConfig(32, 4, "float16")
SWAPPED = TiledParams(tile_n=64, threads=128, row_threads=4, slices_on_x=True)


def test_a_new_option_at_its_default_leaves_the_stored_params_as_they_were():
    """Builds and tuned tables written before ``slices_on_x`` keep their digests and still
    compare equal; the option round-trips when set."""
    default = get_rule("tiled").default_params(CONFIG)
    assert params_as_dict(default) == {"tile_n": 128, "threads": 128, "row_threads": 2,
                                       "vec_bytes": 16, "pad_bytes": 16}
    # attn has its own params since v12 (compiler/family_defaults.py): the default given
    assert BuildRequest(CONFIG, "tiled", default, op="attn").stem == \
        "kd32_nh4_float16/attn-tiled-7a4df693"
    assert params_as_dict(SWAPPED)["slices_on_x"] is True
    for params in (default, SWAPPED):
        assert get_rule("tiled").params_from_dict(params_as_dict(params)) == params


def test_slices_on_x_swaps_the_grid(tmp_path):
    default = get_rule("tiled").default_params(CONFIG)
    build_artifacts([BuildRequest(CONFIG, "tiled", default, op="attn"),
                     BuildRequest(CONFIG, "tiled", SWAPPED, op="attn")], tmp_path, ["sm_90"],
                    native=False)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    grids = {b["schedule_params"].get("slices_on_x", False): {tuple(k["grid"][:2])
                                                              for k in b["kernels"]}
             for b in manifest["builds"]}
    # attn: S = 2 streams per head, so B * 8 slices; int64 kernels spell it B * T.int64(8)
    slices = {f"B * {CONFIG.num_heads * 2}", f"B * T.int64({CONFIG.num_heads * 2})"}
    assert all(y in slices and x.startswith("NV + ") for x, y in grids[False])
    assert all(x in slices and y.startswith("NV + ") for x, y in grids[True])


def test_the_candidate_grid_holds_the_default_and_only_valid_params():
    rule = get_rule("tiled")
    for dtype in ("float16", "bfloat16"):
        config = OpConfig(32, 6, dtype)
        grid = [TiledParams(**p) for p in layout_tune.candidate_params(config)]
        assert len(grid) == len(set(grid)) == 56
        assert rule.default_params(config) in grid
        for params in grid:
            rule.check_params(config, params)


def test_the_gather_grid_varies_tiles_and_threads_around_the_gather_s_own_params():
    """``--grid gather``: the forward's own params (not a scatter's own set) with 64/128-position
    tiles, 128-512 threads and 1, 2 or the own threads per kd row; the CTA grouping kept."""
    rule = get_rule("tiled")
    for op in ("attn", "qkv_grad_cudnn"):
        own = BuildRequest(CONFIG, "tiled", op=op).resolved_pass_params()["forward"]
        grid = [TiledParams(**p) for p in layout_tune.gather_candidate_params(CONFIG, op)]
        assert grid and own not in grid and len(grid) == len(set(grid))
        assert {(p.slices_per_cta, p.heads_inner, p.group_pad_bytes) for p in grid} == {
            (own.slices_per_cta, own.heads_inner, own.group_pad_bytes)}
        assert {p.tile_n for p in grid} == {64, 128} and {p.row_threads for p in grid} == (
            {1, 2, own.row_threads})
        for params in grid:
            rule.check_params(CONFIG, params)


def test_the_stage_grid_stages_every_candidate_around_each_pass_s_own_params():
    """``--grid stage``: the register stage at 64/128-position tiles and 128/256 threads, the
    rest of each pass's own set kept; keys mark it ``/s``."""
    rule = get_rule("tiled")
    for op in ("attn", "qkv_grad_flash"):
        owns = BuildRequest(CONFIG, "tiled", op=op).resolved_pass_params().values()
        grid = [TiledParams(**p) for p in layout_tune.stage_candidate_params(CONFIG, op)]
        assert grid and len(grid) == len(set(grid)) and not set(grid) & set(owns)
        assert all(p.stage_loads for p in grid)
        assert {p.tile_n for p in grid} == {64, 128} and {p.threads for p in grid} == {128, 256}
        assert {(p.row_threads, p.slices_per_cta, p.heads_inner, p.group_pad_bytes)
                for p in grid} == {(o.row_threads, o.slices_per_cta, o.heads_inner,
                                    o.group_pad_bytes) for o in owns}
        for params in grid:
            rule.check_params(CONFIG, params)
            assert layout_tune.params_key(params_as_dict(params)).endswith("/s")


def test_the_staged_wide_and_dividing_grids_keep_the_stage_and_the_cta_grouping():
    """``--grid stage-wide`` (32-128 tiles, 64-256 threads), ``--grid stage-divides``
    (40/80/200 tiles) and ``--grid stage-coalesced`` (the stage in the unstaged load order):
    every candidate staged, valid, grouped as the gather's own set, keyed apart."""
    rule = get_rule("tiled")
    for grid, tiles in ((layout_tune.stage_wide_candidate_params, {32, 64, 128}),
                        (layout_tune.stage_divides_candidate_params, {40, 80, 200}),
                        (layout_tune.stage_coalesced_candidate_params, {64, 128})):
        for op in ("qkv", "qkv_grad_cudnn"):
            own = BuildRequest(CONFIG, "tiled", op=op).resolved_pass_params()["forward"]
            found = [TiledParams(**p) for p in grid(CONFIG, op)]
            assert found and len(found) == len(set(found)) and own not in found
            assert all(p.stage_loads for p in found) and {p.tile_n for p in found} <= tiles
            assert {(p.slices_per_cta, p.heads_inner) for p in found} == {
                (own.slices_per_cta, own.heads_inner)}
            coalesced = grid is layout_tune.stage_coalesced_candidate_params
            assert all(p.stage_coalesced == coalesced for p in found)
            for params in found:
                rule.check_params(CONFIG, params)
                key = layout_tune.params_key(params_as_dict(params))
                assert key.endswith("/sc" if coalesced else "/s")


def test_time_shapes_are_parsed_or_refused_with_the_expected_form():
    assert layout_tune._parse_shapes("256,16,20;384,1,80") == ((256, 16, 20), (384, 1, 80))
    assert layout_tune._parse_shapes(None) == (*layout_tune.SHAPES, *layout_tune.EXTRA_SHAPES)
    for bad in ("256,16", "100,16,20", "256,x,20", "256,0,20"):
        with pytest.raises(ValueError, match="--shapes: expected 'DIM,B,HW"):
            layout_tune._parse_shapes(bad)


def test_the_divides_grid_and_each_pass_s_own_params_in_the_same_session(tmp_path, monkeypatch):
    """``--grid divides``: 40/80-position tiles around each pass's own params; ``build`` adds
    every pass's own set (attn's scatter has one of its own) beside the candidates."""
    import psa_tvm.compiler.artifact as artifact

    grid = [TiledParams(**p) for p in layout_tune.divides_candidate_params(CONFIG, "attn")]
    assert grid and {p.tile_n for p in grid} == {40, 80}
    for params in grid:
        get_rule("tiled").check_params(CONFIG, params)
    built = []
    monkeypatch.setattr(artifact, "build_artifacts",
                        lambda requests, *a, **k: built.extend(requests))
    for name in ("variant_widths", "INDEX_DTYPES"):  # build() narrows them for its process
        monkeypatch.setattr(artifact, name, getattr(artifact, name))
    layout_tune.build(tmp_path, [4], ["float16"], ["attn"], 1, grid="divides")
    owns = BuildRequest(CONFIG, "tiled", op="attn").resolved_pass_params()
    assert set(owns.values()) <= {r.params for r in built}
    assert len(built) == len(grid) + len(set(owns.values()))


def _record(cand: str, fraction: float, dim: int, batch: int, size: int,
            mismatch: bool = False) -> dict:
    return {"op": "attn", "pass": "forward", "dim": dim, "nh": dim // 64, "batch": batch,
            "size": size, "dtype": "float16", "cand": cand, "fraction": fraction,
            "mismatch": mismatch}


def test_ranking_takes_the_best_worst_case_and_skips_wrong_or_partial_candidates():
    shapes = ((256, 64, 80), (256, 16, 40))
    records = [_record("steady", f, *s) for f, s in zip((0.90, 0.88), shapes, strict=True)]
    records += [_record("peaky", f, *s) for f, s in zip((0.97, 0.80), shapes, strict=True)]
    records += [_record("wrong", f, *s, mismatch=True)
                for f, s in zip((0.99, 0.99), shapes, strict=True)]
    records += [_record("partial", 0.99, *shapes[0])]
    assert layout_tune.rank(records, "attn", "forward", 4, "float16") == ["steady", "peaky"]
    default = {"tile_n": 0, "threads": 0, "row_threads": 0, "pad_bytes": 0}
    assert layout_tune.params_key({**default, "slices_on_x": True}) == "t0/0/r0/p0/x"
    table = layout_tune.table(records, {CONFIG.tag: default})
    assert "| attn/forward | float16 4 | 256,64,80 256,16,40 | nan nan | steady | 0.90 0.88 |" \
        in table and "(2 MISMATCH)" in table
