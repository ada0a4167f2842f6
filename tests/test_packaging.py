"""The distribution ships every subpackage and the tuned tables."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_and_the_schedules_are_listed_in_pyproject():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "psa_tvm").rglob("__init__.py")}
    assert on_disk <= listed, f"not packaged: {sorted(on_disk - listed)}"
    assert config["package-dir"]["psa_tvm.schedules"] == "schedules"
    assert "*.json" in config["package-data"]["psa_tvm.schedules"]
    assert "*.cc" in config["package-data"]["psa_tvm.compiler"]  # the CPU thread pool
    assert (ROOT / "psa_tvm" / "compiler" / "cpu_pool.cc").is_file()
    assert (ROOT / "schedules" / "sm_90.json").is_file()


@pytest.mark.parametrize("command", ["demo", "build", "inspect", "bench", "tune"])
def test_every_cli_command_builds_its_parser(command, capsys):
    """Options merged from several tools (bench's merge, tails and attention groups) must not
    collide: argparse raises at parser construction, before any GPU work."""
    from psa_tvm.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: psa-tvm" in capsys.readouterr().out


def test_scripts_share_the_cli_arguments(capsys):
    from psa_tvm.tools import bench, bench_attention, tune

    for tool in (bench, bench_attention, tune):
        with pytest.raises(SystemExit) as exit_info:
            tool.main(["--help"])
        assert exit_info.value.code == 0
