"""Copy the builds of some configurations out of an artifact directory into a new one with its
own manifest, to carry to the GPU host under its size limit (no native library, no CPU
libraries: the runtime then launches through cuda-python, with the same kernels).

    python docs/bench-tails/v43/subset.py SRC DST 128:8 64:2 ...   (key_dim:num_heads)
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path


def main(src: Path, dst: Path, configs: list[tuple[int, int]]) -> None:
    manifest = json.loads((src / "manifest.json").read_text())
    builds = [b for b in manifest["builds"] if (b["key_dim"], b["num_heads"]) in configs]
    shutil.rmtree(dst, ignore_errors=True)
    for build in builds:
        for rel in (build["source"], *(b["path"] for b in build["binaries"])):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src / rel, dst / rel)
    (dst / "manifest.json").write_text(json.dumps({**manifest, "builds": builds,
                                                   "cpu_libraries": []}, indent=1))
    print(f"{dst}: {len(builds)} builds of {configs}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]),
         [tuple(int(v) for v in arg.split(":")) for arg in sys.argv[3:]])
