"""The shipped tuning table: it parses, every entry schedules and compiles, and the RuntimeOp
picks it by default (falling back to the rule's defaults for untuned configurations)."""

from __future__ import annotations

import json

import pytest

from psa_tvm.cli import main as cli
from psa_tvm.compiler.artifact import BuildRequest, schedule_module
from psa_tvm.compiler.lower import lower_cuda
from psa_tvm.compiler.rules import get_rule
from psa_tvm.compiler.rules.base import params_as_dict
from psa_tvm.config import OpConfig
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp
from psa_tvm.runtime.tuned import load_table, shipped_table_path, table_paths, tuned_entry

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
    monkeypatch.delenv("PSA_TVM_SCHEDULES")
    assert tuned_entry(ARCH, entry["pass"], config)["params"] == SHIPPED[0]["params"]


def test_tune_select_needs_an_explicit_output():
    from psa_tvm.tools import tune

    with pytest.raises(SystemExit):
        tune.main(["select", "--artifacts", "nowhere"])
