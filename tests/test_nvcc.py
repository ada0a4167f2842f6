"""nvcc's device code: SASS per arch, and the newest arch's PTX unless a build asks for none
(tuning candidates, timed on the arch they were built for)."""

from __future__ import annotations

import struct

import pytest

from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
from psa_tvm.compiler.nvcc import find_nvcc, nvcc_gencode
from psa_tvm.config import OpConfig
from psa_tvm.runtime.manifest import Manifest

FATBIN_MAGIC = 0xBA55ED50
FATBIN_PTX, FATBIN_ELF = 1, 2


def fatbin_entries(data: bytes) -> list[tuple[int, int]]:
    """(kind, arch) of each entry of a fatbin: a 16-byte header (magic, version, header size,
    payload size), then entries of kind, header size, payload size, ..., the arch at byte 28."""
    magic, _version, header_size, size = struct.unpack_from("<IHHQ", data, 0)
    assert magic == FATBIN_MAGIC
    offset, entries = header_size, []
    while offset < header_size + size:
        kind, _, entry_header, payload = struct.unpack_from("<HHIQ", data, offset)
        entries.append((kind, struct.unpack_from("<I", data, offset + 28)[0]))
        offset += entry_header + payload
    return entries


def test_gencode_adds_the_newest_arch_ptx_unless_asked_not_to():
    sass = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]
    assert nvcc_gencode(["sm_80", "sm_90"]) == [*sass, "-gencode=arch=compute_90,code=compute_90"]
    assert nvcc_gencode(["sm_80", "sm_90"], ptx=False) == sass


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found")
@pytest.mark.parametrize("ptx", [True, False])
def test_a_build_holds_ptx_only_where_asked(tmp_path, ptx):
    config = OpConfig(8, 1, "float32")
    build_artifacts([BuildRequest(config, "tiled")], tmp_path, ["sm_90"], native=False,
                    ptx=ptx)
    build = Manifest.load(tmp_path).find(config, "tiled")
    (binary,) = build.binaries
    assert binary.ptx == (("compute_90",) if ptx else ())
    entries = fatbin_entries(binary.path.read_bytes())
    assert (FATBIN_ELF, 90) in entries
    assert ((FATBIN_PTX, 90) in entries) == ptx
