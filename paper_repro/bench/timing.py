"""Timers of PAPER.md 4.1: full call, device time, amortized, and CPU wall-clock.

* :func:`full_call_ms` -- each call bracketed by ``synchronize()``, CUDA start/stop events,
  ``synchronize()``; the median per trial, and the minimum over trials is reported;
  :func:`full_call_interleaved` takes the trials of a cell's providers in turn.
* :func:`device_ms` -- device time per call from replaying a CUDA graph of ``reps`` calls
  (no launch overhead); back-to-back event timing where capture is impossible.
* :func:`device_cold_ms` -- the same, with every call's inputs read from DRAM: the calls cycle
  through copies of the inputs that together overfill L2 (:func:`cold_copies`).
* :func:`profile_kernels` -- the paper's method: the sum of kernel times from
  ``torch.profiler``, and the kernel launches per call (run it after all other timing).
* :func:`amortized_ms` -- ``reps`` back-to-back calls inside one event pair, min over trials.
* :func:`wall_ms` -- ``perf_counter`` per call (CPU providers, and every provider when no
  CUDA device is present), repeated until ``min_seconds`` and ``min_calls`` are reached.

Every timer first warms up at the exact shape. Repetition counts follow the paper
(``n_iter = max(20, min(200, 20e6 // (N*T)))``) but are capped so a trial lasts at most
about ``trial_seconds``.
"""
from __future__ import annotations

import itertools
import math
import statistics
import time
from dataclasses import dataclass, field

import torch


@dataclass
class Timing:
    """A timing result in milliseconds per call, with how it was obtained."""

    ms: float
    n_trials: int
    n_iter: int
    method: str
    trials: list = field(default_factory=list)
    launches: float | None = None


def paper_n_iter(num_envs, seq_len):
    """The paper's per-trial call count for ``[N, T]`` (PAPER.md 4.1)."""
    return max(20, min(200, 20_000_000 // max(1, num_envs * seq_len)))


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _estimate_seconds(call, device, calls=3):
    _sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    _sync(device)
    return (time.perf_counter() - start) / calls


def _budgeted(n, seconds_per_call, budget, floor=3):
    return int(max(floor, min(n, budget / max(seconds_per_call, 1e-9))))


def full_call_ms(call, n_iter=100, trials=5, warmup=20, trial_seconds=0.5):
    """Full-call GPU time: min over trials of the per-trial median of event-timed calls."""
    return full_call_interleaved({0: call}, n_iter, trials, warmup, trial_seconds)[0]


def full_call_interleaved(calls: dict, n_iter=100, trials=5, warmup=20, trial_seconds=0.5):
    """:func:`full_call_ms` of several calls of one cell, their trials taken in turn (a trial
    of each call, then again), so that every call meets the host's state of the moment: on
    the H200 host, full calls of microsecond kernels fall in two modes, some 13 and 20 us,
    lasting about a second. ``{name: Timing}``, the method ``cuda-events-interleaved`` where
    there is more than one call."""
    method = "cuda-events" if len(calls) == 1 else "cuda-events-interleaved"
    counts = {}
    for name, call in calls.items():
        per_call = _estimate_seconds(call, "cuda")
        for _ in range(_budgeted(warmup, per_call, 2 * trial_seconds, floor=1)):
            call()
        counts[name] = _budgeted(n_iter, per_call, trial_seconds)
    medians = {name: [] for name in calls}
    for _ in range(trials):
        for name, call in calls.items():
            medians[name].append(_full_call_trial(call, counts[name]))
    return {name: Timing(min(m), trials, counts[name], method, m) for name, m in medians.items()}


def _full_call_trial(call, n_iter: int) -> float:
    return statistics.median(full_call_times(call, n_iter))


def full_call_times(call, n_iter: int) -> list:
    """``n_iter`` event-timed calls (ms), each between two synchronisations."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(n_iter):
        torch.cuda.synchronize()
        start.record()
        call()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return times


def amortized_ms(call, reps=100, trials=5, trial_seconds=0.5):
    """``reps`` back-to-back calls in one event pair; min over trials, per call."""
    reps = _budgeted(reps, _estimate_seconds(call, "cuda"), trial_seconds)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    results = []
    for _ in range(trials):
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            call()
        stop.record()
        torch.cuda.synchronize()
        results.append(start.elapsed_time(stop) / reps)
    return Timing(min(results), trials, reps, "cuda-events-amortized", results)


def _graph_device_ms(call, reps, trials, warmup=3):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            call()
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    results = []
    for _ in range(trials):
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        results.append(start.elapsed_time(stop) / reps)
    del graph
    return Timing(min(results), trials, reps, "cuda-graph", results)


def _kernel_events(prof):
    """(total device microseconds, kernel count) of the profiled CUDA kernels."""
    total, count = 0.0, 0
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        name = event.name.lower()
        if name.startswith(("memcpy", "memset")):
            continue
        total += getattr(event, "device_time", None) or getattr(event, "cuda_time", 0.0)
        count += 1
    return total, count


def profiled(call, reps=20, warmup=5, sync_each=False):
    """``torch.profiler``'s record of ``reps`` calls after ``warmup`` (``sync_each``: each call
    followed by a synchronisation, as the full call times them)."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(reps):
            call()
            if sync_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
    return prof


def profile_kernels(call, reps=20, warmup=5):
    """Device time per call (sum of kernel times) and kernel launches per call."""
    total_us, count = _kernel_events(profiled(call, reps, warmup))
    return Timing(total_us / reps / 1000.0, 1, reps, "profiler", [], count / reps)


def device_ms(call, reps=20, trials=5, trial_seconds=0.5, graph=True):
    """Device-only time per call from CUDA-graph replay.

    Where capture is refused (host syncs, data-dependent allocations) or not trusted
    (``graph=False``: kernels launched on the legacy default stream escape the capture),
    back-to-back event timing is used instead: it equals device time once the kernel
    outlasts its launch. The profiler is kept out of this pass because CUPTI, once
    started, slows every later launch in the process.
    """
    reps = _budgeted(reps, _estimate_seconds(call, "cuda"), trial_seconds, floor=1)
    return _replayed(call, reps, trials, graph, trial_seconds=trial_seconds)


def _replayed(call, reps, trials, graph, warmup=3, trial_seconds=float("inf")):
    """Graph replay of ``reps`` calls, or back-to-back event timing where capture fails."""
    if graph:
        try:
            return _graph_device_ms(call, reps, trials, warmup)
        except Exception:  # capture refused
            torch.cuda.synchronize()
    timed = amortized_ms(call, reps=reps, trials=trials, trial_seconds=trial_seconds)
    timed.method = "cuda-events-amortized"
    return timed


def cold_copies(n_bytes, l2_bytes, factor=3):
    """How many copies of a call's inputs of ``n_bytes`` to cycle through so that, between two
    reads of one copy, the others move ``factor`` times the L2's ``l2_bytes``."""
    return 1 + math.ceil(factor * l2_bytes / max(1, n_bytes))


def device_cold_ms(calls, reps=20, trials=5, trial_seconds=0.5, graph=True):
    """:func:`device_ms` of calls that take turns: ``calls[i]`` runs on copy ``i`` of the
    inputs, so a call's inputs were last read ``len(calls) - 1`` calls before and come from
    DRAM (the repeats of :func:`device_ms` read them from L2 where they fit). The replay holds
    a whole number of turns, so the cycle continues across replays."""
    turn = itertools.cycle(calls)

    def call():
        return next(turn)()

    k = len(calls)
    reps = _budgeted(reps, _estimate_seconds(call, "cuda", calls=k), trial_seconds, floor=1)
    return _replayed(call, k * math.ceil(reps / k), trials, graph, warmup=k)


def cold_turns(call, case, build):
    """``call`` (on ``case``'s inputs), then ``build(copy)`` for copies of those inputs: enough
    copies (:func:`cold_copies`) that, taking turns, each call finds its inputs out of L2."""
    from paper_repro.bench.inputs import case_tensors, copy_case

    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    n_bytes = sum(t.numel() * t.element_size() for t in case_tensors(case))
    return [call] + [build(copy_case(case)) for _ in range(cold_copies(n_bytes, l2) - 1)]


def wall_ms(call, device="cpu", warmup=3, min_seconds=0.5, min_calls=5, max_calls=1000):
    """Wall-clock milliseconds per call with ``perf_counter`` (synchronising on CUDA)."""
    for _ in range(warmup):
        call()
    _sync(device)
    times = []
    total = 0.0
    while (total < min_seconds or len(times) < min_calls) and len(times) < max_calls:
        start = time.perf_counter()
        call()
        _sync(device)
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        total += elapsed
    return Timing(1000.0 * statistics.median(times), 1, len(times), "perf_counter",
                  [1000.0 * t for t in times[:5]])
