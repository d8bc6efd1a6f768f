"""Print which GPU, date and software versions the recorded measurements come from.

``python -m paper_repro.bench.provenance_summary [DATA_DIR]`` reads every
``data/*/provenance.json`` (except ``data/paper``) and prints one line per suite.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from paper_repro.paths import DATA


def summaries(data_dir=DATA):
    """(directory name, suite, provenance dict) for every recorded suite."""
    found = []
    for path in sorted(Path(data_dir).glob("*/provenance.json")):
        suites = json.loads(path.read_text()).get("suites", {})
        for suite, info in sorted(suites.items()):
            found.append((path.parent.name, suite, info))
    return found


def earlier_runs(data_dir=DATA):
    """{(directory name, suite): [provenance dict, ...]} of runs whose rows a later run of
    other providers (or shapes) left in place."""
    found = {}
    for path in sorted(Path(data_dir).glob("*/provenance.json")):
        for suite, runs in json.loads(path.read_text()).get("earlier_runs", {}).items():
            found[(path.parent.name, suite)] = runs
    return found


def other_records(data_dir=DATA):
    """(relative path, provenance dict) of measurement files outside the benchmark suites."""
    found = []
    for path in sorted(Path(data_dir).glob("*/*.json")):
        if path.name == "provenance.json" or path.parent.name == "paper":
            continue
        info = json.loads(path.read_text())
        if isinstance(info, dict) and "date" in info:
            found.append((f"{path.parent.name}/{path.name}", info))
    return found


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    data_dir = Path(argv[0]) if argv else DATA
    found = summaries(data_dir)
    for name, info in other_records(data_dir):
        print(f"  {name}: {info.get('gpu') or info.get('device')}, {info.get('date')}, "
              f"torch {info.get('torch')}, triton {info.get('triton')}, "
              f"`{info.get('command')}`")
    if not found:
        print(f"No benchmark-suite measurements under {data_dir} yet (run `make bench` on a "
              "CUDA GPU); the tables show the paper's numbers beside what is recorded.")
        return 0
    print(f"Recorded measurements under {data_dir} (latest run; rows of earlier runs that it "
          "did not replace keep their own records):")
    earlier = earlier_runs(data_dir)
    for directory, suite, info in found:
        quick = " (quick subset)" if info.get("quick") else ""
        print(f"  {directory}/{suite}{quick}: {info.get('gpu') or 'CPU'}, {info.get('date')}, "
              f"torch {info.get('torch')}, triton {info.get('triton')}, CUDA {info.get('cuda')}, "
              f"driver {info.get('driver')}, commit {str(info.get('commit'))[:10]}")
        commits = sorted({str(r.get("commit"))[:10] for r in earlier.get((directory, suite), [])})
        if commits:
            print(f"      earlier runs: commits {', '.join(commits)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
