"""The browser test's Chromium: found on PATH, never installed by the tests (browser_support)."""

from __future__ import annotations

import pytest
from browser_support import find_chromium


@pytest.fixture(scope="session")
def chromium() -> str:
    return find_chromium()
