"""The run-time half with TVM made unimportable: every run-time module, the torch op and the
CLI's run-time commands import, and run on artifacts built beforehand (``small_artifacts``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_MODULES = sorted(f"psa_tvm.runtime.{p.stem}" for p in (ROOT / "psa_tvm" / "runtime")
                         .glob("*.py") if p.stem != "__init__")

_HIDE_TVM = r"""
import importlib.abc, sys

class NoTVM(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tvm":
            raise ImportError(f"TVM is hidden: {name}")
        return None

sys.meta_path.insert(0, NoTVM())
"""

_RUN = _HIDE_TVM + r"""
import importlib, json
modules = json.loads(sys.argv[1])
for name in modules + ["psa_tvm", "psa_tvm.ops", "psa_tvm.torch", "psa_tvm.cli"]:
    importlib.import_module(name)

import torch
import psa_tvm
import psa_tvm.torch as psa_torch
from psa_tvm import reference
from psa_tvm.errors import ArtifactNotFoundError

results = {}
for dtype in (torch.float32, torch.float16):
    gen = torch.Generator().manual_seed(1)
    lo = torch.randn(2 * 4, 7 * 5, 32, generator=gen).to(dtype)
    hi = torch.randn(2 * 4, 7 * 5, 32, generator=gen).to(dtype)
    merged = psa_tvm.merge(lo, hi, 4, 7, 5)
    d_lo, d_hi = psa_tvm.merge_backward(merged, 4, 32)
    via_op = psa_torch.merge_attn(lo, hi, 4, 7, 5)
    results[str(dtype)] = [torch.equal(merged, reference.merge(lo, hi, 4, 7, 5)),
                           torch.equal(d_lo, lo) and torch.equal(d_hi, hi),
                           torch.equal(via_op, merged)]
try:
    psa_tvm.merge(torch.randn(2, 4, 16), torch.randn(2, 4, 16), 1, 2, 2)  # kd16 not built
    missing = "no error"
except ArtifactNotFoundError as err:
    missing = str(err)
print(json.dumps({"results": results, "missing": missing,
                  "tvm_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "tvm")}))
"""


def _run(code: str, *args: str, env_artifacts: Path, **kwargs) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, PSA_TVM_ARTIFACTS=str(env_artifacts))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT, **kwargs)


def test_runtime_modules_torch_op_and_cpu_kernels_run_without_tvm(small_artifacts):
    assert "psa_tvm.runtime.cpu" in RUNTIME_MODULES and "psa_tvm.runtime.plan" in RUNTIME_MODULES
    proc = _run(_RUN, json.dumps(RUNTIME_MODULES), env_artifacts=small_artifacts)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["tvm_loaded"] == []
    assert got["results"] == {"torch.float32": [True, True, True],
                              "torch.float16": [True, True, True]}
    assert "kd16_nh1_float32" in got["missing"] and "psa-tvm build" in got["missing"]


def test_cli_demo_runs_on_the_cpu_without_tvm(small_artifacts):
    code = _HIDE_TVM + "from psa_tvm.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = _run(code, "demo", "--device", "cpu", "--dtype", "float16",
                env_artifacts=small_artifacts)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "forward  exact: True" in proc.stdout and "backward exact: True" in proc.stdout


@pytest.mark.parametrize("command", [["build", "-o", "x"], ["inspect"]])
def test_compiler_commands_say_what_to_install_without_tvm(small_artifacts, command):
    code = _HIDE_TVM + "from psa_tvm.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = _run(code, *command, env_artifacts=small_artifacts)
    assert proc.returncode != 0
    assert "pip install 'psa-tvm[compiler]'" in proc.stderr


def test_demo_without_artifacts_or_tvm_says_what_is_missing(tmp_path):
    code = _HIDE_TVM + "from psa_tvm.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = _run(code, "demo", "--device", "cpu", env_artifacts=tmp_path / "none")
    assert proc.returncode == 2
    assert "manifest.json" in proc.stderr and "psa-tvm[compiler]" in proc.stderr
