"""Device-side check of the aligned-line forward on an artifact directory built elsewhere (the
GPU host has no TVM, so tests/test_native.py's own fixtures skip there): tests/test_native.py's
_LINES_SCRIPT in a process of its own per configuration, both launch paths, bit-exact with
canaries; with PSA_TVM_CPU_LINES=1, =0, and unset (auto: on an Intel CPU with AVX-512 it must
choose as 1 does).

    python docs/bench-tails/v33/lines_check.py ART_DIR
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_native import _LINES_SCRIPT


def main() -> int:
    art = Path(sys.argv[1]).resolve()
    manifest = json.loads((art / "manifest.json").read_text())
    configs = sorted({(c["key_dim"], c["num_heads"]) for c in manifest["cpu_libraries"]})
    with open("/proc/cpuinfo") as f:
        cpuinfo = f.read()
    intel_avx512 = "GenuineIntel" in cpuinfo and " avx512bw" in cpuinfo and " avx512vl" in cpuinfo
    failed = 0
    for label, value, expect in (("1", "1", "1"), ("0", "0", "0"),
                                 ("auto", None, "1" if intel_avx512 else "0")):
        for kd, nh in configs:
            env = {**os.environ, "PSA_TVM_ARTIFACTS": str(art), "PSA_TVM_CPU_PREFETCH_BYTES": "0"}
            env.pop("PSA_TVM_CPU_LINES", None)
            if value is not None:
                env["PSA_TVM_CPU_LINES"] = value
            proc = subprocess.run([sys.executable, "-c", _LINES_SCRIPT, str(art), str(kd), str(nh),
                                   expect], capture_output=True, text=True, timeout=300, env=env)
            ok = proc.returncode == 0 and proc.stdout.strip() == "ok"
            failed += not ok
            print(f"PSA_TVM_CPU_LINES={label:4s} kd {kd:3d} nh {nh}: {'ok' if ok else 'FAILED'}"
                  + ("" if ok else f"\n{proc.stdout}\n{proc.stderr[-2000:]}"), flush=True)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
