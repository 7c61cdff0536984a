"""Make the repository's ``bench`` package importable however pytest is started (``python -m pytest``
puts the working directory on sys.path; the ``pytest`` script does not)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
