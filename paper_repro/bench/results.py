"""Tidy result CSVs (one measurement per row), their upsert, and provenance.

Each suite writes ``<out>/<suite>.csv``; a rerun replaces the rows with the same
:data:`KEY` and keeps every other row. ``<out>/provenance.json`` records, per suite, the
machine, software versions, commit, date and exact command of the run that produced it.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import torch

from paper_repro.paths import DATA, ROOT

COLUMNS = ["suite", "algorithm", "implementation", "num_envs", "seq_len", "variant", "dtype",
           "layout", "metric", "value", "unit", "status", "note", "method", "n_trials",
           "n_iter", "device", "timestamp"]
KEY = ["suite", "algorithm", "implementation", "num_envs", "seq_len", "variant", "dtype",
       "layout", "metric"]
STATUSES = ("ok", "failed", "skipped", "unavailable", "error")


def gpu_slug(name=None):
    """Short directory name of a device: 'NVIDIA H200' -> 'h200', no CUDA -> 'cpu'."""
    if name is None:
        name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    words = re.sub(r"[^A-Za-z0-9 ]", " ", name).lower().split()
    noise = {"nvidia", "geforce", "tesla", "pcie", "sxm", "sxm5", "sxm4", "nvl", "generation"}
    words = [w for w in words if w not in noise and not re.fullmatch(r"\d+gb|hbm\d*e?", w)]
    slug = "-".join(words[:3])
    return slug or "unknown"


def default_out_dir():
    return DATA / gpu_slug()


def read_results(path):
    """A results CSV as a DataFrame with the schema's columns (empty if absent)."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.read_csv(path, keep_default_na=True)
    for column in COLUMNS:
        if column not in frame:
            frame[column] = None
    return frame[COLUMNS]


def upsert(path, rows):
    """Write ``rows`` (dicts with the schema's columns) into ``path``, replacing equal keys."""
    import pandas as pd

    if not rows:
        return read_results(path)
    new = pd.DataFrame(rows)
    for column in COLUMNS:
        if column not in new:
            new[column] = None
    new = new[COLUMNS].drop_duplicates(subset=KEY, keep="last")
    old = read_results(path)
    if len(old):
        as_key = [tuple(map(str, k)) for k in new[KEY].itertuples(index=False)]
        old_key = [tuple(map(str, k)) for k in old[KEY].itertuples(index=False)]
        keep = [k not in set(as_key) for k in old_key]
        merged = pd.concat([old[keep], new], ignore_index=True)
    else:
        merged = new
    merged = merged.sort_values(["algorithm", "implementation", "num_envs", "seq_len",
                                 "variant", "dtype", "layout", "metric"], kind="stable")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    merged.to_csv(path, index=False)
    return merged


def _run(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                              timeout=20).stdout.strip()
    except Exception:
        return ""


def provenance(command=None):
    """Machine, versions, commit and date of this run (a JSON-ready dict)."""
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command or " ".join([Path(sys.executable).name, "-m", "paper_repro.bench"]
                                       + sys.argv[1:]),
        # a copy of the tree without .git (e.g. on a GPU machine) names its commit here
        "commit": os.environ.get("PAPER_REPRO_GIT_COMMIT") or _run(["git", "rev-parse", "HEAD"]),
        "dirty": (False if os.environ.get("PAPER_REPRO_GIT_COMMIT") else
                  bool(_run(["git", "status", "--porcelain", "--untracked-files=no"]))),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    from paper_repro.kernels import _direct, _native

    # how our kernels were launched: full-call times depend on it
    info["launch_path"] = ("native" if _native.module() is not None else "direct") \
        if _direct.ENABLED else "triton"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info["sm_count"] = props.multi_processor_count
        info["memory_gb"] = round(props.total_memory / 2**30, 1)
        info["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version",
                               "--format=csv,noheader"]).splitlines()[:1]
        info["driver"] = info["driver"][0] if info["driver"] else None
    return info


def file_suite(data: dict, suite: str, info: dict) -> None:
    """Make ``info`` the provenance of ``suite`` in ``data``, keeping a different earlier run
    (e.g. ``--providers ours`` re-measured after a change: the peers' rows are older)."""
    earlier = data.setdefault("suites", {}).get(suite)
    if earlier and earlier.get("command") != info.get("command"):
        data.setdefault("earlier_runs", {}).setdefault(suite, []).append(earlier)
    data["suites"][suite] = info
    data["latest"] = info


def record_provenance(out_dir, suite, info):
    """Merge ``info`` for ``suite`` into ``<out_dir>/provenance.json``."""
    path = Path(out_dir) / "provenance.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    file_suite(data, suite, info)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def stream_csv(path, columns, rows) -> None:
    """Write ``rows`` (dicts) under a ``columns`` header to ``path``, or to stdout when it is
    None, flushing each row: a probe cut short by a time limit keeps what it measured."""
    import contextlib
    import csv

    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(path, "w", newline="")) if path else sys.stdout
        writer = csv.DictWriter(out, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow(row)
            out.flush()
