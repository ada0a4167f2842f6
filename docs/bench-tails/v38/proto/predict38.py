"""What an artifact directory's launch rule would run at every call of an oracle record
(oracle38.py), and that kernel's time there: the sweep of a build whose kernels the oracle timed
but whose launch records changed (v38: .artifacts43 against call 2's timings of .artifacts42,
the same kernel sources byte for byte). Run where the shipped tuned table is the one the
artifacts were built from: the runtime op picks its builds by it.

    python3 docs/bench-tails/v38/proto/predict38.py ARTIFACTS ORACLE.json [LIMIT]
"""

from __future__ import annotations

import collections
import json
import re
import sys

from psa_tvm.runtime.plan import choose_kernel, index_dtype_for
from psa_tvm.runtime.runtime_op import PsaMergeAttnRuntimeOp

CALL = re.compile(r"(\w+) (\w+) nh(\d+) (\d+)x(\d+)x(\d+) N=(\d+) B\*nh=(\d+)")


def main() -> int:
    artifacts = sys.argv[1]
    with open(sys.argv[2]) as f:
        oracle = json.load(f)
    limit = float(sys.argv[3]) if len(sys.argv) > 3 else 1.05
    ops, over, changed, missing = {}, collections.Counter(), 0, 0
    rows = []
    for r in oracle:
        p, dtype, nh, _, _, _, n, rows_ = CALL.match(r["call"]).groups()
        pass_ = "forward" if p == "for" else "backward"
        key = (r.get("kd", 32), int(nh), dtype)
        if key not in ops:
            ops[key] = PsaMergeAttnRuntimeOp(*key, schedule="tiled", artifacts=artifacts)
        build = ops[key].builds[pass_]
        numel = int(rows_) * 2 * key[0] * int(n)
        kernel = choose_kernel(build, pass_, int(n), index_dtype_for(numel), 16, numel)
        timed = r["kernels"].get(kernel.entry)
        if timed is None:
            missing += 1
            continue
        ratio = timed["ratio"]
        changed += kernel.entry != r["chosen"]
        rows.append((r["call"], kernel.entry, ratio))
        if ratio > limit:
            over[kernel.entry.removeprefix("psa_merge_").removesuffix("_i32_kernel")] += 1
    print(f"{sum(over.values())} of {len(rows)} calls above {limit}; {changed} choose another "
          f"kernel than the oracle's artifacts; {missing} chose a kernel the oracle did not time")
    for entry, count in over.most_common():
        print(f"  {count:4d}  {entry}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
