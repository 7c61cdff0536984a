"""Finding a headless Chromium for the browser test on PATH. The tests never install it: `make
test-browser` does (apt-get, as root), then runs the browser test with CONTRAST_AUDIT_BROWSER_TEST=require,
under which a missing browser fails instead of skipping."""

from __future__ import annotations

import os
import shutil

import pytest

NAMES = ("chromium", "chromium-browser")
REQUIRE = "CONTRAST_AUDIT_BROWSER_TEST"
MISSING = (
    "chromium is not on PATH, so the HTML report was not checked in a browser: "
    "`make test-browser` installs it (apt-get, as root) and runs this test"
)


def find_chromium() -> str:
    """The chromium executable on PATH; otherwise skip (or fail, when the browser test is required)."""
    found = next((path for name in NAMES if (path := shutil.which(name))), None)
    if found:
        return found
    if os.environ.get(REQUIRE) == "require":
        pytest.fail(MISSING.split(":")[0] + f", and {REQUIRE}=require asks for the browser test", pytrace=False)
    pytest.skip(MISSING)
