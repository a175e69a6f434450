"""Imported for its effect: puts the repository root on ``sys.path``, so a benchmark run as a
script (``python benchmarks/fleet.py``) imports ``devservers``, which lives beside ``src/`` and
is never installed."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(1, ROOT)
