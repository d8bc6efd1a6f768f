"""Where a repeated public call's time goes: host work, its launch, the device, the full call.

``python -m paper_repro.bench.call_parts [--shape 4096x128] [--out FILE] [--profile FILE]``
(CUDA only) writes one row per op and layout (fp32, plain), every part in microseconds a call:

* ``host``: our Python host work with the launch stubbed (``host_path``'s "plan" column);
* ``launched``: back-to-back calls with their real launch, wall time (the host rate);
* ``launch``: the direct launch alone, repeated on the call's own pointers;
* ``outputs``: allocating the call's outputs (``empty_like``);
* ``device``: CUDA-graph replay; ``full_call``: the suites' event-timed call.

``--profile`` adds ``torch.profiler``'s table of each case's ops and its kernel time with
each call synchronised against back to back, after every timing. These are the parts of the
Python repeat: plans never go native here (``native_ab`` times the native repeat).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import sys

import torch

from paper_repro.bench import timing
from paper_repro.bench.host_path import cases, stubbed_launch, us_per_call
from paper_repro.kernels import _direct as D
from paper_repro.kernels import _launch as L
from paper_repro.kernels import _native as N

COLUMNS = ["case", "host", "launched", "launch", "outputs", "device", "full_call"]


def captured_launch(call):
    """The arguments of the direct launch a repeat of ``call`` makes (None: it makes none)."""
    seen, real = [], D.launch_pointers

    def spy(*args):
        seen.append(args)
        return real(*args)
    D.launch_pointers = spy
    try:
        call()
    finally:
        D.launch_pointers = real
    return seen[0] if len(seen) == 1 else None


def parts(call, calls: int, trials: int) -> dict:
    """Every part of one case, microseconds a call."""
    sync = torch.cuda.synchronize
    result = call()  # records the plan
    outs = result if isinstance(result, tuple) else (result,)
    with stubbed_launch("cuda"):
        host = us_per_call(call, calls, trials)
    row = {"host": host, "launched": us_per_call(call, calls, trials, sync)}
    launch = captured_launch(call)
    row["launch"] = us_per_call(lambda: D.launch_pointers(*launch), calls, trials, sync) \
        if launch else float("nan")
    row["outputs"] = us_per_call(lambda: [torch.empty_like(o) for o in outs], calls, trials)
    row["device"] = 1e3 * timing.device_ms(call).ms
    row["full_call"] = 1e3 * timing.full_call_ms(call, n_iter=200).ms
    return row


def profile_table(call, reps: int = 200) -> str:
    """``torch.profiler``'s ops of ``reps`` calls each followed by a synchronisation, as the
    full call times them, by self time; then the kernel's own time a call there, against its
    time back to back."""
    back_to_back = timing._kernel_events(timing.profiled(call, reps))[0] / reps
    prof = timing.profiled(call, reps, sync_each=True)
    alone = timing._kernel_events(prof)[0] / reps
    return (f"{prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=12)}\n"
            f"kernel us a call: back to back {back_to_back:.2f}, each call synchronised "
            f"{alone:.2f}\n")


def write_rows(writer, out, args, num_envs: int, seq_len: int) -> list:
    """One row a plain case (``args.only``: those labels), flushed as it comes; then, when
    ``args.profile``, the profiler's tables (after every timing: a profiled process's later
    host ops are slower: ``empty_like`` 3-6x on the H200's host)."""
    writer.writeheader()
    timed = []
    for label, call, _ in cases(num_envs, seq_len, "cuda"):
        if "trunc" in label or (args.only and label not in args.only):
            continue
        row = parts(call, args.calls, args.trials)
        writer.writerow({"case": label, **{k: f"{v:.2f}" for k, v in row.items()}})
        out.flush()
        timed.append((label, call))
    if not args.profile:
        return []
    return [f"== {label}\n{profile_table(call)}" for label, call in timed]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper_repro.bench.call_parts",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4096x128", help="NUM_ENVSxSEQ_LEN")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="case labels to keep, e.g. 'gae plain NT'")
    parser.add_argument("--out", help="CSV file (default: stdout)")
    parser.add_argument("--profile", help="text file for the profiler's tables")
    args = parser.parse_args(argv)
    if L.INTERPRETED or not torch.cuda.is_available():
        parser.error("needs a CUDA GPU and TRITON_INTERPRET unset")
    num_envs, seq_len = (int(n) for n in args.shape.lower().split("x"))
    N.ENABLED = False  # the Python repeat's parts
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(args.out, "w", newline="")) if args.out else sys.stdout
        tables = write_rows(csv.DictWriter(out, COLUMNS), out, args, num_envs, seq_len)
    if args.profile:
        with open(args.profile, "w") as f:
            f.write("\n".join(tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
