"""Run suites on several GPUs at once: one process per GPU, each on its own share of the suites
(``python -m paper_repro.bench all --gpus 2``). Each process writes to its own folder; the
rows and provenance are then merged into the output folder. Device times are unaffected; the
host is shared, so full-call times may gain a little from the other processes' CPU work."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from paper_repro.bench.results import file_suite, read_results, upsert

# Minutes per suite measured on the H200 (every provider, full suite); used only to balance.
MINUTES = {"headline": 4.5, "grid": 4.0, "truncation": 1.5, "production": 0.8, "launch": 1.0,
           "retrace_t": 0.7, "pufferlib": 2.8, "long": 13.0, "roofline": 8.0, "short": 2.0}


def split(suites, n: int) -> list[list[str]]:
    """Longest first onto the least loaded of ``n`` lanes; each lane keeps the given order."""
    loads, lanes = [0.0] * n, [[] for _ in range(n)]
    for name in sorted(suites, key=lambda s: -MINUTES.get(s, 2.0)):
        i = loads.index(min(loads))
        lanes[i].append(name)
        loads[i] += MINUTES.get(name, 2.0)
    return [[s for s in suites if s in lane] for lane in lanes if lane]


def visible_gpus(n: int) -> list[str]:
    """The first ``n`` GPU ids this process may use, as CUDA_VISIBLE_DEVICES entries."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed:
        ids = [x.strip() for x in listed.split(",") if x.strip()]
    else:
        import torch

        ids = [str(i) for i in range(torch.cuda.device_count())]
    if len(ids) < n:
        raise SystemExit(f"--gpus {n}: only {len(ids)} GPU(s) visible")
    return ids[:n]


def run(suites, n: int, out: Path, argv_rest: list[str], command: str) -> int:
    """Start one ``python -m paper_repro.bench`` per lane, wait, merge; the worst exit code."""
    out = Path(out)
    lanes, gpus = split(suites, n), visible_gpus(n)
    procs = []
    for gpu, lane in zip(gpus, lanes):
        folder = out / ".lanes" / f"gpu{gpu}"
        folder.mkdir(parents=True, exist_ok=True)
        for name in lane:  # --resume continues from what the output folder already holds
            if (out / f"{name}.csv").exists():
                shutil.copy(out / f"{name}.csv", folder / f"{name}.csv")
        cmd = [sys.executable, "-m", "paper_repro.bench", *lane, "--out", str(folder), *argv_rest]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
        print(f"GPU {gpu}: {' '.join(lane)}", flush=True)
        procs.append((folder, lane, subprocess.Popen(cmd, env=env)))
    codes = [p.wait() for _, _, p in procs]
    for folder, lane, _ in procs:
        merge(folder, out, lane, command)
        shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(out / ".lanes", ignore_errors=True)
    return max(codes)


def merge(folder: Path, out: Path, suites, command: str) -> None:
    """Upsert a lane's rows into ``out`` and carry its provenance records over."""
    for name in suites:
        rows = read_results(folder / f"{name}.csv")
        if len(rows):
            upsert(out / f"{name}.csv", rows.to_dict("records"))
    lane_prov = folder / "provenance.json"
    if not lane_prov.exists():
        return
    new = json.loads(lane_prov.read_text())
    path = out / "provenance.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    for name, info in new.get("suites", {}).items():
        if name in suites:
            file_suite(data, name, dict(info, command=command, lane_command=info.get("command")))
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
