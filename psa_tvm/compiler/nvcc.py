"""CUDA C -> device binaries without a GPU: nvcc (fatbin) when present, NVRTC (cubins) otherwise."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from psa_tvm.runtime.env import cuda_roots, nvcc_candidates

_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


@dataclass
class CompiledBinaries:
    """Binaries for one CUDA source plus ptxas's per-kernel resource report."""

    binaries: list[dict] = field(default_factory=list)  # {"path", "format", "archs", "ptx"}
    resources: dict[str, dict[str, dict]] = field(default_factory=dict)  # entry -> arch -> report
    compiler: str = ""


def check_archs(archs: list[str] | tuple[str, ...]) -> list[str]:
    out = []
    for arch in archs:
        if not re.fullmatch(r"sm_\d{2,3}a?", arch):
            raise ValueError(f"arch: expected names like 'sm_90', got {arch!r}")
        out.append(arch)
    if not out:
        raise ValueError("arch: expected at least one architecture")
    return sorted(set(out), key=lambda a: (int(re.sub(r"\D", "", a)), a))


def find_nvcc() -> str | None:
    """The nvcc to use: ``$PSA_TVM_NVCC``, then ``$CUDA_HOME/bin/nvcc``, then ``PATH``."""
    for candidate in nvcc_candidates():
        if os.path.isfile(candidate):
            return candidate
    return shutil.which("nvcc")


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"release ([\d.]+)", out)
    return match.group(1) if match else out.strip().splitlines()[-1]


def parse_ptxas_report(text: str) -> dict[str, dict[str, dict]]:
    """``-Xptxas -v`` output -> {entry: {arch: {registers, smem_bytes, stack_frame, spill_*}}}."""
    report: dict[str, dict[str, dict]] = {}
    current: dict | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = report.setdefault(m.group(1), {}).setdefault(m.group(2), {})
        elif current is not None and (m := _FRAME.search(line)):
            current.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)),
                           spill_loads=int(m.group(3)))
        elif current is not None and (m := _USED.search(line)):
            current.update(registers=int(m.group(1)), smem_bytes=int(m.group(2) or 0))
    return report


def nvcc_gencode(archs: list[str], ptx: bool = True) -> list[str]:
    """nvcc's ``-gencode`` flags: SASS for each of ``archs``, and with ``ptx`` the newest one's
    PTX, which the driver JIT-compiles for GPUs newer than every arch built."""
    gencode = [f"-gencode=arch=compute_{n},code=sm_{n}"
               for n in (arch.removeprefix("sm_") for arch in archs)]
    if ptx:
        newest = archs[-1].removeprefix("sm_")
        gencode.append(f"-gencode=arch=compute_{newest},code=compute_{newest}")
    return gencode


def _compile_nvcc(nvcc: str, source: Path, stem: Path, archs: list[str],
                  ptx: bool = True) -> CompiledBinaries:
    gencode = nvcc_gencode(archs, ptx)
    newest = archs[-1].removeprefix("sm_")
    out = stem.with_suffix(".fatbin")
    cmd = [nvcc, "--fatbin", "-O3", "-std=c++17", "-Xptxas", "-v", *gencode, "-o", str(out),
           str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{proc.stderr}")
    return CompiledBinaries(
        binaries=[{"path": out.name, "format": "fatbin", "archs": archs,
                   "ptx": [f"compute_{newest}"] if ptx else []}],
        resources=parse_ptxas_report(proc.stderr),
        compiler=f"nvcc {nvcc_version(nvcc)}",
    )


def cuda_include_dirs() -> list[str]:
    """Header directories NVRTC needs (CUDA headers and CCCL, which TVM's source includes):
    ``$CUDA_HOME``/``$CUDA_PATH``, /usr/local/cuda, then pip's ``nvidia-*`` wheels."""
    found: list[str] = []
    for root in cuda_roots():
        for sub in ("include", "targets/x86_64-linux/include", "targets/sbsa-linux/include"):
            for candidate in (Path(root, sub), Path(root, sub, "cccl")):
                if candidate.is_dir() and str(candidate) not in found:
                    found.append(str(candidate))
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels

        for base in nvidia.__path__:
            for candidate in sorted(Path(base).glob("**/include")):
                for path in (candidate, candidate / "cccl"):
                    if path.is_dir() and str(path) not in found:
                        found.append(str(path))
    except ImportError:
        pass
    return found


def _compile_nvrtc(source: Path, stem: Path, archs: list[str]) -> CompiledBinaries:
    try:
        from cuda.bindings import nvrtc
    except ImportError as err:  # pragma: no cover - depends on the machine
        raise RuntimeError(
            "no nvcc found and NVRTC is unavailable: install the CUDA toolkit or "
            "`pip install cuda-bindings nvidia-cuda-nvrtc`"
        ) from err

    def check(result):
        err, *rest = result
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC error {err}")
        return rest[0] if len(rest) == 1 else rest

    text = source.read_bytes()
    result = CompiledBinaries(compiler="nvrtc")
    for arch in archs:
        program = check(nvrtc.nvrtcCreateProgram(text, source.name.encode(), 0, [], []))
        opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17", b"--ptxas-options=-v",
                *(f"-I{d}".encode() for d in cuda_include_dirs())]
        err, = nvrtc.nvrtcCompileProgram(program, len(opts), opts)
        log_size = check(nvrtc.nvrtcGetProgramLogSize(program))
        log = b" " * log_size
        check(nvrtc.nvrtcGetProgramLog(program, log))
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"NVRTC failed for {arch}:\n{log.decode(errors='replace')}")
        size = check(nvrtc.nvrtcGetCUBINSize(program))
        cubin = b" " * size
        check(nvrtc.nvrtcGetCUBIN(program, cubin))
        path = stem.with_name(f"{stem.name}.{arch}.cubin")
        path.write_bytes(cubin)
        result.binaries.append({"path": path.name, "format": "cubin", "archs": [arch], "ptx": []})
        for entry, per_arch in parse_ptxas_report(log.decode(errors="replace")).items():
            result.resources.setdefault(entry, {}).update(per_arch)
        nvrtc.nvrtcDestroyProgram(program)
    return result


def compile_source(source: Path, archs: list[str], compiler: str = "auto",
                   ptx: bool = True) -> CompiledBinaries:
    """Compile ``source`` next to itself for ``archs``; ``compiler`` is auto, nvcc or nvrtc.
    ``ptx=False`` leaves nvcc's fatbin without PTX (NVRTC's cubins never hold any): tuning
    candidates, timed on the arch they were built for, compress to a tenth of the size
    (v41's 370: 17 MB of tar.xz with PTX, 1.5 MB without; docs/perf.md v41)."""
    archs = check_archs(archs)
    stem = source.with_suffix("")
    nvcc = find_nvcc() if compiler in ("auto", "nvcc") else None
    if nvcc:
        return _compile_nvcc(nvcc, source, stem, archs, ptx)
    if compiler == "nvcc":
        raise RuntimeError("compiler='nvcc' but no nvcc was found (set PSA_TVM_NVCC or CUDA_HOME)")
    return _compile_nvrtc(source, stem, archs)
