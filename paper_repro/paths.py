"""Absolute paths of the reproduction package's folders.

``PAPER_REPRO_FIGURES`` redirects figures (tests render notebooks into a temporary folder).
"""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
FIGURES = Path(os.environ.get("PAPER_REPRO_FIGURES", ROOT / "figures"))
NOTEBOOKS = ROOT / "notebooks"
PROOFS = ROOT / "proofs"


def shown(path) -> str:
    """``path`` relative to the repository root when it lies inside it (so that rendered
    notebooks read the same on every checkout), else as given."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
