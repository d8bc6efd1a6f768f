"""Per-stage timers for one PPO update: CUDA events on a GPU, perf_counter on the CPU.

A stage may be entered many times per update (16 minibatch steps); its times are summed.
The whole update sits inside one more interval, the "true total". On a GPU nothing is read
until `read()`, which synchronises once, so timing does not serialise the stages (per-stage
synchronisation overstated the GAE share ~10-25x in the paper's early runs).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


class StageTimer:
    """Collects `(stage, start, end)` marks for one update and turns them into milliseconds.

    Args:
        device (torch.device | str): CUDA → events on the current stream; else perf_counter.
    """

    def __init__(self, device: torch.device | str):
        self.cuda = torch.device(device).type == "cuda"
        self._pool: list[torch.cuda.Event] = []
        self._marks: list[tuple[str, object, object]] = []
        self._used = 0

    def _mark(self) -> object:
        if not self.cuda:
            return time.perf_counter()
        # events are reused across updates; creating ~200 per update would add host overhead
        if self._used == len(self._pool):
            self._pool.append(torch.cuda.Event(enable_timing=True))
        ev = self._pool[self._used]
        self._used += 1
        ev.record()
        return ev

    def reset(self) -> None:
        """Forget the marks of the previous update."""
        self._marks.clear()
        self._used = 0

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the enclosed block as (one more interval of) stage `name`."""
        start = self._mark()
        yield
        self._marks.append((name, start, self._mark()))

    def read(self) -> dict[str, float]:
        """Milliseconds per stage (summed over its intervals), synchronising once on a GPU."""
        if self.cuda:
            torch.cuda.synchronize()
        out: dict[str, float] = {}
        for name, start, end in self._marks:
            ms = start.elapsed_time(end) if self.cuda else (end - start) * 1e3
            out[name] = out.get(name, 0.0) + ms
        return out
