"""The shipped tuning table: it parses, every entry schedules and compiles, and the RuntimeOp
picks it by default (falling back to the rule's defaults for untuned configurations)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from psa_tvm.cli import main as cli
from psa_tvm.compiler import shifted
from psa_tvm.compiler.artifact import BuildRequest, schedule_module
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.compiler.rules import get_rule
from psa_tvm.compiler.rules.base import params_as_dict
from psa_tvm.config import OpConfig
from psa_tvm.runtime.manifest import Manifest
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.runtime.tuned import (
    SHIFTED_FLAGS,
    load_table,
    shipped_table_path,
    table_paths,
    tuned_entry,
    tuned_shifted_entry,
)

ARCH = "sm_90"


def test_table_parses_and_names_known_rules():
    path = shipped_table_path(ARCH)
    assert path is not None, "schedules/sm_90.json is missing: run scripts/tune.py select"
    data = json.loads(path.read_text())
    assert data["arch"] == ARCH and data["generated_by"].startswith("scripts/tune.py")
    keys = set()
    for entry in data["entries"]:
        assert entry["pass"] in ("forward", "backward")
        get_rule(entry["schedule"])
        assert 0 < entry["fraction_of_copy"] < 2
        keys.add((entry["pass"], entry["dtype"], entry["key_dim"], entry["num_heads"]))
    assert len(keys) == len(data["entries"]), "one entry per (pass, dtype, key_dim, num_heads)"
    shifted_keys = set()
    for entry in data.get("shifted", []):  # `psa-tvm tune build --shifted`
        config = OpConfig(entry["key_dim"], entry["num_heads"], entry["dtype"])
        assert shifted.fits(config, shifted.ShiftedParams(**entry["params"])) is None
        assert set(entry["tuned_on"]) <= {"forward", "backward"}
        shifted_keys.add((entry["dtype"], entry["key_dim"], entry["num_heads"]))
    assert len(shifted_keys) == len(data.get("shifted", []))


SHIPPED = load_table(shipped_table_path(ARCH), ARCH)


@pytest.mark.parametrize("entry", SHIPPED, ids=lambda e: "{pass}-{dtype}-kd{key_dim}-nh"
                         "{num_heads}".format(**e))
def test_every_entry_builds(entry):
    config = OpConfig(entry["key_dim"], entry["num_heads"], entry["dtype"])
    rule = get_rule(entry["schedule"])
    params = rule.params_from_dict(entry["params"])
    rule.check_params(config, params)
    scheduled = schedule_module(BuildRequest(config, entry["schedule"], params))
    lowered = lower_cuda({symbol: func for symbol, (_, func) in scheduled.items()})
    assert len(lowered.kernels) == len(scheduled)
    assert "__global__" in lowered.source


def test_runtime_op_uses_the_tuned_entry_by_default(tmp_path):
    entry = next(e for e in SHIPPED if e["pass"] == "forward")
    config = OpConfig(entry["key_dim"], entry["num_heads"], entry["dtype"])
    assert cli(["build", "--key-dim", str(config.key_dim), "--num-heads",
                str(config.num_heads), "--dtype", config.dtype, "--schedule", "tiled",
                "--arch", ARCH, "-o", str(tmp_path), "-q"]) == 0
    op = PsaMergeAttnRuntimeOp(config.key_dim, config.num_heads, config.dtype,
                               artifacts=tmp_path, arch=ARCH)
    assert op.schedule == entry["schedule"]
    for pass_ in ("forward", "backward"):
        tuned = tuned_entry(ARCH, pass_, config)
        assert op._builds[pass_].schedule_params == tuned["params"]


def test_untuned_configuration_falls_back_to_the_rule_default(tmp_path):
    config = OpConfig(24, 5, "float32")  # a key_dim no preset or tuning run uses
    assert tuned_entry(ARCH, "forward", config) is None
    assert cli(["build", "--key-dim", "24", "--num-heads", "5", "--dtype", "float32",
                "--schedule", "tiled", "--arch", ARCH, "-o", str(tmp_path), "-q"]) == 0
    op = PsaMergeAttnRuntimeOp(24, 5, "float32", artifacts=tmp_path, arch=ARCH)
    default = get_rule("tiled").default_params(config)
    assert op._builds["forward"].schedule_params == params_as_dict(default)


def test_a_user_table_comes_before_the_shipped_one(tmp_path, monkeypatch):
    entry = dict(SHIPPED[0], params={"tile_n": 32}, fraction_of_copy=1.0)
    (tmp_path / f"{ARCH}.json").write_text(json.dumps(
        {"arch": ARCH, "generated_by": "test", "entries": [entry]}))
    monkeypatch.setenv("PSA_TVM_SCHEDULES", str(tmp_path))
    config = OpConfig(entry["key_dim"], entry["num_heads"], entry["dtype"])
    assert table_paths(ARCH) == [tmp_path / f"{ARCH}.json", shipped_table_path(ARCH)]
    assert tuned_entry(ARCH, entry["pass"], config)["params"] == {"tile_n": 32}
    # entry by entry: what the user's table lacks comes from the shipped one
    other = next(e for e in SHIPPED if (e["pass"], e["dtype"], e["key_dim"], e["num_heads"])
                 != (entry["pass"], entry["dtype"], entry["key_dim"], entry["num_heads"]))
    other_config = OpConfig(other["key_dim"], other["num_heads"], other["dtype"])
    assert tuned_entry(ARCH, other["pass"], other_config)["params"] == other["params"]
    monkeypatch.delenv("PSA_TVM_SCHEDULES")
    assert tuned_entry(ARCH, entry["pass"], config)["params"] == SHIPPED[0]["params"]


def test_builds_take_the_tuned_shifted_params(tmp_path, monkeypatch):
    """A table's ``"shifted"`` entry reaches every tiled build of its configuration (`psa-tvm
    build`), and the manifest records what the shifted kernels were built with."""
    from dataclasses import asdict, replace

    config = OpConfig(16, 2, "float16")
    tuned = replace(shifted.default_params(config), bwd_tile_n=120, bwd_threads=128)
    schedules = tmp_path / "schedules"
    schedules.mkdir()
    (schedules / f"{ARCH}.json").write_text(json.dumps(
        {"arch": ARCH, "generated_by": "test", "entries": [], "shifted": [
            {"dtype": "float16", "key_dim": 16, "num_heads": 2, "params": asdict(tuned)}]}))
    monkeypatch.setenv("PSA_TVM_SCHEDULES", str(schedules))
    assert shifted.tuned_params(config, [ARCH]) == tuned
    out = tmp_path / "art"
    assert cli(["build", "--key-dim", "16", "--num-heads", "2", "--dtype", "float16",
                "--schedule", "tiled", "--arch", ARCH, "-o", str(out), "-q"]) == 0
    raw = json.loads((out / "manifest.json").read_text())
    tiled = [b for b in raw["builds"] if b["schedule"] == "tiled"]
    assert tiled and all(b["shifted_params"] == shifted.as_record(tuned) for b in tiled)
    # The run time takes the build with the table's shifted params, where a directory also
    # holds one with the same tiled params and other shifted params (built before the table).
    op = PsaMergeAttnRuntimeOp(16, 2, "float16", artifacts=out, arch=ARCH)
    assert all(b.shifted_params == shifted.as_record(tuned) for b in op.builds.values())
    manifest = Manifest.load(out)
    chosen = op.builds["forward"]
    older = dataclasses.replace(
        chosen, shifted_params=shifted.as_record(shifted.default_params(config)))
    doubled = dataclasses.replace(manifest, builds=(older, *manifest.builds))
    assert doubled.find(config, "tiled", chosen.schedule_params) is older
    assert doubled.find(config, "tiled", chosen.schedule_params,
                        shifted_params=shifted.as_record(tuned)) is chosen
    # A table written with every field (the split's and the whole-row kernel's unset) names
    # the same builds as one without those fields; a split keeps its own, a whole-row
    # backward its own.
    assert tuned_shifted_entry(ARCH, config)["params"] == shifted.as_record(tuned)
    split = shifted.split_backward(tuned, shifted.default_params(config), 1 << 22)
    assert shifted.as_record(split) == {k: v for k, v in asdict(split).items()
                                        if k not in SHIFTED_FLAGS and "whole" not in k}
    whole = shifted.with_whole_backward(tuned, replace(tuned, bwd_tile_n=504))
    assert shifted.as_record(whole) == {k: v for k, v in asdict(whole).items()
                                        if k not in SHIFTED_FLAGS and "small" not in k}
    # the edge-first and aligned backwards are recorded where they are set, and only there
    for flag in ("bwd_edge_first", "bwd_aligned"):
        flagged = dataclasses.replace(tuned, **{flag: 1})
        assert shifted.as_record(flagged) == {**shifted.as_record(tuned), flag: 1}
        assert BuildRequest(config, shifted_params=flagged).stem != BuildRequest(
            config, shifted_params=tuned).stem
    # Non-default shifted params have their own stem: they never overwrite a default build.
    assert BuildRequest(config, shifted_params=tuned).stem != BuildRequest(config).stem
    assert BuildRequest(config, shifted_params=shifted.default_params(config)).stem == (
        BuildRequest(config).stem)


def test_tune_select_needs_an_explicit_output():
    from psa_tvm.tools import tune

    with pytest.raises(SystemExit):
        tune.main(["select", "--artifacts", "nowhere"])


def test_stage_candidates_are_what_runs_now_without_and_with_the_register_stage():
    """``psa-tvm tune build --stage``: each pass's tuned set as it is and staged at its own,
    half and twice its threads, all valid, no duplicates."""
    from psa_tvm.tools.tune import stage_candidates

    config = OpConfig(32, 4, "float16")
    rule = get_rule("tiled")
    found = stage_candidates(config)
    assert len(found) == len(set(found))
    for pass_ in ("forward", "backward"):
        own = rule.params_from_dict(tuned_entry("sm_90", pass_, config)["params"])
        assert own in found and dataclasses.replace(own, stage_loads=True) in found
    for params in found:
        rule.check_params(config, params)
    assert {p.threads for p in found if p.stage_loads} >= {64, 128, 256}


def test_tune_grid_takes_any_tiled_param_and_flags_as_bools():
    """``psa-tvm tune build --grid``: a tiled param outside the default grid (here the register
    stage) joins it, a flag's 0/1 become bools (so stored params and digests match the ones a
    ``TiledParams(stage_loads=True)`` has), and every candidate of such a grid is valid."""
    from psa_tvm.tools.tune import GRID, candidates, parse_grid

    grid = parse_grid(["tile_n=128,256", "threads=128,256", "group_pad_bytes=0,32",
                       "stage_loads=1"])
    assert grid["stage_loads"] == (True,) and grid["tile_n"] == (128, 256)
    assert grid["row_threads"] == GRID["row_threads"]
    config = OpConfig(32, 4, "float16")
    rule = get_rule("tiled")
    found = candidates(config, grid)
    staged = [p for p in found if p.stage_loads]
    assert staged and all(p.stage_loads is True for p in staged)
    assert params_as_dict(staged[0])["stage_loads"] is True
    for params in found:
        rule.check_params(config, params)
    for bad, needle in ((["bogus=1"], "expected one of"), (["stage_loads=2"], "0 or 1"),
                        (["tile_n=64,x"], "comma-separated ints")):
        with pytest.raises(ValueError, match=needle):
            parse_grid(bad)


def test_tune_run_refuses_to_mix_timers_in_one_results_file(tmp_path):
    """``tune run --profiler`` on a directory whose results.jsonl holds event timings (or the
    reverse) stops before timing anything: ``select`` would compare the two."""
    from psa_tvm.tools import tune

    (tmp_path / tune.RESULTS).write_text(json.dumps(
        {"pass": "forward", "shape": [16, 40, 40], "us": 5.0, "copy_us": 5.0,
         "source": "kd32_nh4_float16/tiled-x.cu"}) + "\n")
    with pytest.raises(ValueError,
                       match="taken with CUDA events, this run takes them with the profiler"):
        tune.main(["run", "--artifacts", str(tmp_path), "--profiler"])
