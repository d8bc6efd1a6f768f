"""Absolute paths of the reproduction package's folders."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
FIGURES = ROOT / "figures"
NOTEBOOKS = ROOT / "notebooks"
PROOFS = ROOT / "proofs"
