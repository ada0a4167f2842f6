"""On-demand builds: check, lock, check again, build, load. Two processes asking for the same
missing build at once must build it once and both run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm")

ROOT = Path(__file__).resolve().parents[1]

_WORKER = r"""
import json, sys, time
import psa_tvm.compiler.artifact as artifact
import psa_tvm.compiler.ondemand as ondemand
from psa_tvm.config import OpConfig

log = open(sys.argv[2], "a")
real_gpu, real_cpu = ondemand.build_missing, artifact.build_cpu_library

def gpu(*args, **kwargs):
    log.write("gpu\n"); log.flush()
    time.sleep(1.0)  # widen the window in which the other process would race
    return real_gpu(*args, **kwargs)

def cpu(*args, **kwargs):
    log.write("cpu\n"); log.flush()
    time.sleep(1.0)
    return real_cpu(*args, **kwargs)

ondemand.build_missing = gpu
artifact.build_cpu_library = cpu  # where build_artifacts looks it up
while time.time() < float(sys.argv[1]):  # start together
    time.sleep(0.01)
from psa_tvm import PsaMergeAttnRuntimeOp
from psa_tvm.runtime.cpu import cpu_kernels

op = PsaMergeAttnRuntimeOp(16, 2, "float32", schedule="tiled", arch="sm_90")
cpu = cpu_kernels(OpConfig(16, 2, "float32"))
print(json.dumps({"source": str(op.builds["forward"].source),
                  "cpu": str(cpu.library.path)}))
"""


def test_two_processes_build_a_missing_config_once(tmp_path):
    import time

    env = {k: v for k, v in os.environ.items() if k != "PSA_TVM_ARTIFACTS"}
    env["PSA_TVM_CACHE"] = str(tmp_path / "cache")
    log = tmp_path / "builds.log"
    start = str(time.time() + 3.0)
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, start, str(log)], env=env,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert results[0] == results[1]
    assert Path(results[0]["source"]).is_file() and Path(results[0]["cpu"]).is_file()
    assert sorted(log.read_text().split()) == ["cpu", "gpu"], "built more than once"
    manifest = json.loads((tmp_path / "cache" / "artifacts" / "manifest.json").read_text())
    assert len(manifest["builds"]) == 1 and len(manifest["cpu_libraries"]) == 1


def test_a_named_artifact_directory_is_never_built_into(tmp_path):
    from psa_tvm import PsaMergeAttnRuntimeOp
    from psa_tvm.errors import ArtifactNotFoundError

    with pytest.raises(ArtifactNotFoundError, match=r"manifest\.json"):
        PsaMergeAttnRuntimeOp(16, 2, "float32", artifacts=tmp_path, arch="sm_90")
    assert not (tmp_path / "manifest.json").exists()


def test_a_build_by_another_compiler_is_rebuilt_once(tmp_path, monkeypatch):
    """A build's file names hold its config and schedule params only, so a newer psa-tvm whose
    default kernels differ (v37's band.default_params) finds an older one's build under the
    same name: the on-demand cache rebuilds what another compiler definition built, once, in
    place; a directory the user names runs what it holds."""
    import psa_tvm.compiler.ondemand as ondemand
    from psa_tvm import PsaMergeAttnRuntimeOp

    monkeypatch.delenv("PSA_TVM_ARTIFACTS", raising=False)
    monkeypatch.setenv("PSA_TVM_CACHE", str(tmp_path / "cache"))
    built = []
    real_build = ondemand.build_missing

    def counting_build(*args, **kwargs):
        built.append(args[1].tag)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(ondemand, "build_missing", counting_build)

    def op(**kwargs):
        return PsaMergeAttnRuntimeOp(16, 2, "float32", schedule="tiled", arch="sm_90", **kwargs)

    manifest_path = tmp_path / "cache" / "artifacts" / "manifest.json"

    def record_definition(definition: str | None) -> None:
        manifest = json.loads(manifest_path.read_text())
        (entry,) = manifest["builds"]
        if definition is None:
            del entry["definition"]  # as builds from before v37
        else:
            entry["definition"] = definition
        manifest_path.write_text(json.dumps(manifest))

    first = op().builds["forward"]
    assert built == ["kd16_nh2_float32"] and first.definition == ondemand.DEFINITION_DIGEST
    for older in ("0123456789ab", None):
        record_definition(older)
        again = op().builds["forward"]
        assert again.definition == ondemand.DEFINITION_DIGEST and again.source == first.source
        assert len(json.loads(manifest_path.read_text())["builds"]) == 1  # replaced in place
    assert len(built) == 3
    op()  # current: nothing to build
    assert len(built) == 3
    record_definition("0123456789ab")
    named = op(artifacts=manifest_path.parent).builds["forward"]
    assert named.definition == "0123456789ab" and len(built) == 3


_CPU_USER = r"""
import json
import torch
import psa_tvm
from psa_tvm import ops
from psa_tvm.runtime import env, native

lo = torch.randn(2 * 2, 7 * 5, 16) + 3
hi = torch.randn_like(lo) - 3
expected = psa_tvm.reference.merge(lo, hi, 2, 7, 5)
first = psa_tvm.merge(lo, hi, 2, 7, 5)  # builds the CPU library, then the native library
second = torch.full_like(expected, float("nan"))
psa_tvm.merge(lo, hi, 2, 7, 5, out=second)  # through the native library
library = native.load(env.default_artifacts_dir())
info = json.loads(library.module["library_info"]()) if library else {"configs": []}
print(json.dumps({
    "exact": bool(torch.equal(first, expected) and torch.equal(second, expected)),
    "ops_native": bool(ops._NATIVE) and ops._NATIVE is library,
    "cpu_configs": [[c["key_dim"], c["num_heads"], c["dtype"]] for c in info["configs"]
                    if c["cpu"]],
}))
"""


def test_an_on_demand_cpu_build_writes_the_native_library(tmp_path):
    """A CPU user without artifacts gets the native library as a GPU user's on-demand build
    does: the first call builds the CPU library and relinks the directory's native library,
    and the next call in the same process goes through it (the Python path costs 20-45 us a
    call more: docs/perf.md v39)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PSA_TVM_ARTIFACTS", "PSA_TVM_NATIVE")}
    env.update(PSA_TVM_CACHE=str(tmp_path / "cache"), PSA_TVM_NATIVE_ON_DEMAND="1")
    proc = subprocess.run([sys.executable, "-c", _CPU_USER], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"exact": True, "ops_native": True, "cpu_configs": [[16, 2, "float32"]]}
    assert "CUDA" not in proc.stderr, "a CPU-only directory warned about the CUDA toolkit"


@pytest.mark.parametrize(("on_demand", "native", "expected"), [
    (None, None, True), ("1", None, True), ("0", None, False), ("off", None, False),
    (" No ", None, False), ("1", "0", False)])
def test_native_on_demand_reads_its_variable(monkeypatch, on_demand, native, expected):
    from psa_tvm.runtime import env

    for name, value in (("PSA_TVM_NATIVE_ON_DEMAND", on_demand), ("PSA_TVM_NATIVE", native)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert env.native_on_demand() is expected


def test_an_on_demand_cpu_build_without_the_relink_writes_no_native_library(tmp_path,
                                                                             monkeypatch):
    """PSA_TVM_NATIVE_ON_DEMAND=0 (the test suite's setting): the CPU library only."""
    from psa_tvm.config import OpConfig
    from psa_tvm.runtime import cpu as runtime_cpu
    from psa_tvm.runtime.native import library_path

    monkeypatch.delenv("PSA_TVM_ARTIFACTS", raising=False)
    monkeypatch.setenv("PSA_TVM_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PSA_TVM_NATIVE_ON_DEMAND", "0")
    library = runtime_cpu.find_cpu_library(OpConfig(8, 1, "float32"))
    assert library.path.is_file()
    assert library_path(tmp_path / "cache" / "artifacts") is None
