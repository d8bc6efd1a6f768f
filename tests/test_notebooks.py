"""Every notebook executes top to bottom on the CPU (quick mode) without a cell error."""
import os
import time

import papermill  # noqa: E402,F401  (a declared test dependency)
import pytest

from paper_repro.notebooks_runner import ordered, run
from paper_repro.paths import NOTEBOOKS, ROOT, shown

NOTEBOOK_PATHS = ordered(NOTEBOOKS)


def test_runner_order_puts_the_claims_report_last():
    names = [p.stem for p in NOTEBOOK_PATHS]
    if "claims_report" in names:
        assert names[-1] == "claims_report"


def test_paths_shown_from_the_repository_root(tmp_path):
    """Rendered notebooks name data folders from the repository root, the same on every
    checkout; a folder outside it keeps its own path."""
    assert shown(ROOT / "data" / "h200") == os.path.join("data", "h200")
    assert shown(tmp_path) == str(tmp_path)


@pytest.mark.parametrize("path", NOTEBOOK_PATHS, ids=[p.stem for p in NOTEBOOK_PATHS])
def test_notebook_executes(path, tmp_path, monkeypatch):
    started = time.time()
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("PAPER_REPRO_FIGURES", str(tmp_path / "figures"))
    run(path, output=tmp_path / path.name, quick=True, cwd=NOTEBOOKS)
    assert (tmp_path / path.name).exists()
    assert not any(p.stat().st_mtime > started for p in ROOT.joinpath("figures").iterdir()), \
        "a notebook wrote into figures/"
