"""A headless Chromium for the browser test: found on PATH, or installed with apt-get when the
tests run as root on Debian (CI machines start without it); otherwise the test skips, saying why."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

NAMES = ("chromium", "chromium-browser")


def _find() -> str | None:
    return next((path for name in NAMES if (path := shutil.which(name))), None)


@pytest.fixture(scope="session")
def chromium() -> str:
    found = _find()
    if found:
        return found
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and cannot be installed here (needs root and apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200, check=False)
        if done.returncode != 0:
            pytest.skip(f"installing chromium failed ({' '.join(command)}): {done.stderr.strip()[-300:]}")
    found = _find()
    if not found:
        pytest.skip("apt-get installed chromium but no chromium executable is on PATH")
    return found
