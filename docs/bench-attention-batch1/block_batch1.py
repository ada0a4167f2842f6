"""Batch-1 C2PSA eager inference (float16), stock vs patched (flash, cuDNN = `auto` on the
H200), in 41 interleaved rounds of 100 calls, paired within rounds (docs/perf.md v15):

    PSA_TVM_ARTIFACTS=DIR python3 block_batch1.py OUT_DIR   # writes block1.json, block1.md
"""

import json
import sys
import time
from pathlib import Path

import torch

from psa_tvm.tools.bench_attention import bench_block, markdown


def main(out: Path) -> None:
    records: list[dict] = []
    start = time.time()
    for size in (20, 40):
        for c1 in (256, 512, 768):  # C2PSA(c1) runs Attention with nh = c1 / 128
            records += bench_block(c1, 1, size, torch.float16, rounds=41)
            print(f"c1={c1} size={size} done at {time.time() - start:.0f} s", flush=True)
            (out / "block1.json").write_text(json.dumps({"records": records}, indent=1))
    text = markdown(records)
    (out / "block1.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
