"""Replace each fatbin under a directory by its sm_90 ELF (the cubin inside it), in place.

    python fat2cubin.py DIR

v41's tuning candidates carry no PTX to the GPU host this way: the fatbins' compressed PTX
does not compress further, the ELFs of similar candidates do (370 builds: 17 MB -> 1.5 MB of
tar.xz), and the carry to the device is 64 MB with the tree. ``cuModuleLoadData`` (the
launcher's) takes a cubin as it takes a fatbin. Fatbin layout: a 16-byte header (magic
0xBA55ED50, version, header size, payload size), then entries of kind (1 PTX, 2 ELF), header
size, payload size, ..., the arch at byte 28.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50


def elf_of(data: bytes, arch: int = 90) -> bytes:
    magic, _version, header_size, size = struct.unpack_from("<IHHQ", data, 0)
    if magic != FATBIN_MAGIC:
        raise ValueError(f"not a fatbin: magic {magic:#x}")
    offset, end, seen = header_size, header_size + size, []
    while offset < end:
        kind, _, entry_header, payload_size = struct.unpack_from("<HHIQ", data, offset)
        entry_arch = struct.unpack_from("<I", data, offset + 28)[0]
        payload = data[offset + entry_header: offset + entry_header + payload_size]
        seen.append((kind, entry_arch))
        if kind == 2 and entry_arch == arch and payload[:4] == b"\x7fELF":
            return payload
        offset += entry_header + payload_size
    raise ValueError(f"no uncompressed sm_{arch} ELF among (kind, arch) {seen}")


def main() -> int:
    before = after = 0
    for path in Path(sys.argv[1]).rglob("*.fatbin"):
        data = path.read_bytes()
        elf = elf_of(data)
        before, after = before + len(data), after + len(elf)
        path.write_bytes(elf)
    print(f"{before} -> {after} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
