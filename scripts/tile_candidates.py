"""Tile/thread candidates around the tuned entries, timed per shape (docs/perf.md, v7).

    python scripts/tile_candidates.py build OUT_DIR      # here (TVM + nvcc): kd=32, nh 4 and 6
    python scripts/tile_candidates.py run OUT_DIR OUT.jsonl [BUDGET_S]   # on the GPU host

``build`` makes, per configuration, the tuned build of each pass with tiles of 1, 1/2 and 1/4
its size and threads of 1, 1/2, 64, 128 and 256 (those the rule accepts; at least 64 threads).
``run`` times every build of a configuration, each pinned with
``PsaMergeAttnRuntimeOp(builds=...)``, and a ``copy_`` of the same bytes with the profiler
(``KernelProfiler``), one JSON line per (dtype, nh, shape).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

CONFIGS = [(32, nh, dtype) for nh in (4, 6) for dtype in ("float16", "bfloat16", "float32")]
SHAPES = {4: [(16, 20, 15), (64, 20, 15), (16, 37, 29), (64, 37, 29), (16, 40, 23), (64, 40, 23),
              (64, 64, 3), (64, 20, 12), (16, 40, 40), (64, 40, 40), (16, 20, 20), (64, 20, 20)],
          6: [(64, 20, 12), (64, 20, 15), (64, 40, 23), (64, 20, 20), (64, 40, 40)]}
PARAM_KEYS = ("tile_n", "threads", "row_threads", "pad_bytes")


def build(out_dir: str) -> None:
    from psa_tvm.compiler.artifact import BuildRequest, build_artifacts
    from psa_tvm.compiler.rules import get_rule
    from psa_tvm.config import OpConfig
    from psa_tvm.runtime.tuned import tuned_entry

    rule = get_rule("tiled")
    requests = []
    for kd, nh, dtype in CONFIGS:
        config = OpConfig(kd, nh, dtype)
        seen = set()
        for pass_ in ("forward", "backward"):
            tuned = rule.params_from_dict(tuned_entry("sm_90", pass_, config)["params"])
            for tile in (tuned.tile_n, tuned.tile_n // 2, tuned.tile_n // 4):
                for threads in (tuned.threads, tuned.threads // 2, 64, 128, 256):
                    candidate = dataclasses.replace(tuned, tile_n=tile, threads=threads)
                    try:
                        rule.check_params(config, candidate)
                    except ValueError:
                        continue
                    if threads >= 64 and candidate not in seen:
                        seen.add(candidate)
                        requests.append(BuildRequest(config, "tiled", candidate,
                                                     preferred=candidate == tuned))
    build_artifacts(requests, out_dir, ["sm_90"], native=False, keep_going=True)


def run(artifacts: str, out_path: str, budget_s: float = 1e9) -> None:
    import torch

    from psa_tvm import PsaMergeAttnRuntimeOp
    from psa_tvm.config import OpConfig
    from psa_tvm.runtime.manifest import Manifest
    from psa_tvm.tools.timing import GpuTimer, KernelProfiler

    dtypes = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    start = time.time()
    manifest = Manifest.load(artifacts)
    prof = KernelProfiler(GpuTimer(reps=5), reps=15)
    stream = torch.cuda.current_stream().cuda_stream
    with open(out_path, "w") as sink:
        for kd, nh, dtype in CONFIGS:
            config = OpConfig(kd, nh, dtype)
            ops = {b.source.name: PsaMergeAttnRuntimeOp(kd, nh, dtype, arch="sm_90",
                                                        builds={"forward": b, "backward": b})
                   for b in manifest.builds if b.config == config}
            for batch, h, w in SHAPES[nh]:
                if time.time() - start > budget_s:
                    return
                n = h * w
                lo = torch.randn(batch * nh, n, kd, device="cuda", dtype=dtypes[dtype]) + 3
                hi = torch.randn_like(lo) - 3
                merged = torch.empty(batch, 2 * nh * kd, h, w, device="cuda", dtype=lo.dtype)
                grad = torch.randn_like(merged) + 3
                d_lo, d_hi = torch.empty_like(lo), torch.empty_like(hi)
                src = torch.cat([lo.view(-1), hi.view(-1)])
                dst = torch.empty_like(merged).view(-1)
                row = {"dtype": dtype, "nh": nh, "shape": [batch, h, w], "n": n,
                       "copy": prof.median_us(lambda: dst.copy_(src)),  # noqa: B023
                       "fwd": {}, "bwd": {}, "params": {}}
                for name, op in ops.items():
                    params = op.builds["forward"].schedule_params
                    row["params"][name] = [params[k] for k in PARAM_KEYS] + [
                        op.builds["forward"].preferred]
                    row["fwd"][name] = prof.median_us(
                        lambda op=op: op.launch_forward(lo, hi, merged, stream, (h, w)))  # noqa: B023
                    row["bwd"][name] = prof.median_us(
                        lambda op=op: op.launch_backward(grad, d_lo, d_hi, stream))  # noqa: B023
                sink.write(json.dumps(row) + "\n")
                sink.flush()


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3], *(float(a) for a in sys.argv[4:]))
