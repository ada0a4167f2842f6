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


def merge_halves(rows: int, n: int, key_dim: int, dtype: torch.dtype,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """``lo`` and ``hi`` as the two halves of one ``[2, rows, n, key_dim]`` CUDA buffer, never
    zero (normal + 3 and normal - 3). The floor copies the whole buffer where the kernel reads
    (backward: writes) its halves, so both move the same bytes at the same addresses: at
    L2-sized calls a copy between other buffers takes up to 5% more or less (docs/perf.md v23)."""
    halves = torch.randn((2, rows, n, key_dim), device="cuda", dtype=dtype, generator=generator)
    halves[0] += 3
    halves[1] -= 3
    return halves


def flat_copy(src: torch.Tensor, dst: torch.Tensor) -> Callable[[], object]:
    """The floor of a pass: ``dst``'s bytes overwritten by ``src``'s, both viewed flat (torch
    hands a contiguous same-dtype copy to the driver's device-to-device ``cudaMemcpyAsync``)."""
    return lambda: dst.view(-1).copy_(src.view(-1))


def flat_copy_kernel(src: torch.Tensor, dst: torch.Tensor) -> Callable[[], object]:
    """The same bytes moved by an elementwise kernel (``dst = src * 1``) instead of the driver's
    memcpy. On the H200 the memcpy's time jumps with the byte count: 3.3 TB/s at multiples of
    4 KiB, 2.6-2.8 TB/s a few bytes off, where this kernel stays at 3.4 TB/s (docs/perf.md
    v30). Beside :func:`flat_copy` it shows which of a row's ratio is the floor's own step."""
    return lambda: torch.mul(src.view(-1), 1, out=dst.view(-1))


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


class KernelProfiler:
    """Device time per call of a callable's kernels and copies, read from CUPTI through
    ``torch.profiler``: the time the GPU spends in the work itself, with no host time in it.

    Every run starts, as with :class:`GpuTimer`, with an L2 flush and a spin; the profile is split
    into runs at those two (their device activities are learnt first by profiling them alone),
    and the durations of the activities in between are summed: one run's kernel time, also for
    callables that launch several kernels (eager PyTorch). Medians over ``reps`` runs.
    """

    def __init__(self, timer: GpuTimer, reps: int = 20) -> None:
        self.timer, self.reps = timer, reps
        self._overhead: set[str] | None = None

    def _prologue(self) -> None:
        self.timer._flush.zero_()
        torch.cuda._sleep(SPIN_CYCLES // 10)

    def _device_activities(self, body: Callable[[], None]) -> list[tuple[int, int, str]]:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            body()
            torch.cuda.synchronize()
        found = []
        for event in prof.profiler.kineto_results.events():
            if event.device_type() == DeviceType.CUDA:
                found.append((event.start_ns(), event.end_ns(), event.name()))
        return sorted(found)

    def median_us(self, fn: Callable[[], object]) -> float | None:
        """Median kernel time of ``fn`` in microseconds; ``None`` if the profiler saw nothing."""
        if self._overhead is None:
            self._overhead = {name for *_, name in self._device_activities(self._prologue)}
        for _ in range(3):
            fn()
        torch.cuda.synchronize()

        def runs() -> None:
            for _ in range(self.reps):
                self._prologue()
                fn()
            self._prologue()  # closes the last run

        per_run = split_runs(self._device_activities(runs), self._overhead)
        return statistics.median(per_run) if per_run else None


def split_runs(activities: list[tuple[int, int, str]], separators: set[str]) -> list[float]:
    """Microseconds of device work per run: ``activities`` ``(start_ns, end_ns, name)`` in time
    order, runs separated by activities named in ``separators`` (the flush and the spin)."""
    per_run: list[float] = []
    current, inside = 0.0, False
    for start, end, name in activities:
        if name in separators:
            if inside:
                per_run.append(current)
            current, inside = 0.0, False
        else:
            current += (end - start) / 1e3
            inside = True
    return per_run
