"""Execute every notebook in notebooks/ in place with papermill (``make figures``).

``python -m paper_repro.notebooks_runner [--quick] [--data-dir DIR] [NAME ...]`` runs the
notebooks in a fixed order (derivations and boundary cases first, the claims report last;
any other notebook in between, alphabetically) with kernel ``python3``. Each notebook gets
only the parameters its ``parameters`` cell declares among ``data_dir`` and ``quick``.
Exits non-zero if any notebook fails, after trying all of them.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from paper_repro.paths import DATA, NOTEBOOKS

ORDER = ("derivations", "boundary_cases", "precision", "speedup_tables", "pufferlib",
         "long_sequences", "launch_overhead", "ppo_amdahl")
LAST = ("claims_report",)


def ordered(notebooks_dir=NOTEBOOKS, names=None):
    """Notebook paths in run order (``names`` restricts by base name)."""
    found = {p.stem: p for p in sorted(Path(notebooks_dir).glob("*.ipynb"))}
    if names:
        missing = [n for n in names if n not in found]
        if missing:
            raise SystemExit(f"no such notebook(s): {missing}; found {sorted(found)}")
        found = {n: found[n] for n in names}
    first = [found[n] for n in ORDER if n in found]
    last = [found[n] for n in LAST if n in found]
    middle = [p for n, p in found.items() if n not in ORDER and n not in LAST]
    return first + middle + last


def parameters_for(path, data_dir, quick):
    """The subset of {data_dir, quick} that the notebook's parameters cell declares."""
    import papermill

    declared = papermill.inspect_notebook(str(path))
    wanted = {"data_dir": str(data_dir) if data_dir else None, "quick": quick}
    return {k: v for k, v in wanted.items() if k in declared and (v is not None or k == "quick")}


def run(path, output=None, data_dir=None, quick=False, cwd=None):
    """Execute one notebook with papermill (in place unless ``output`` is given)."""
    import papermill

    papermill.execute_notebook(str(path), str(output or path),
                               parameters=parameters_for(path, data_dir, quick),
                               kernel_name="python3", cwd=str(cwd or Path(path).parent),
                               progress_bar=False)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m paper_repro.notebooks_runner",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="notebook base names (default: all)")
    parser.add_argument("--quick", action="store_true", help="pass quick=True")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help=f"measurements to read (default: {DATA})")
    args = parser.parse_args(argv)
    failed = []
    for path in ordered(NOTEBOOKS, args.names):
        start = time.perf_counter()
        try:
            run(path, data_dir=args.data_dir, quick=args.quick)
            print(f"ok      {path.name} ({time.perf_counter() - start:.0f} s)", flush=True)
        except Exception as exc:  # report every failing notebook, not only the first
            failed.append(path.name)
            print(f"FAILED  {path.name}: {type(exc).__name__}: {str(exc)[:500]}", flush=True)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
