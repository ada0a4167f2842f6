"""GPU timing with CUDA events: L2 flushed before every run, medians over many runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

L2_FLUSH_BYTES = 256 << 20  # > 4x the H200's 60 MB L2
# After the flush the GPU spins this long, so the host has queued the timed launch before the
# start event fires: the events then bracket GPU time, not Python launch overhead.
SPIN_CYCLES = 200_000


class GpuTimer:
    """Times callables on the current stream; each run starts with a cold L2."""

    def __init__(self, reps: int = 50, warmup: int = 3) -> None:
        self.reps, self.warmup = reps, warmup
        self._flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self._events = [(torch.cuda.Event(enable_timing=True),
                         torch.cuda.Event(enable_timing=True)) for _ in range(reps)]

    def median_us(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        for start, end in self._events:
            self._flush.zero_()  # evicts the previous run's data from L2
            torch.cuda._sleep(SPIN_CYCLES)
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in self._events) * 1e3


def host_us_per_call(fn: Callable[[], object], calls: int = 2000) -> float:
    """Python wall time per call of a hot loop (asynchronous launches, one sync at the end)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6
