"""The README's two commands install nothing beyond the virtualenv; the browser test has its own target."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent


def dry_run(target: str) -> str:
    """The commands `make TARGET` would run (make -n: nothing is executed)."""
    done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_installs_no_browser_and_make_test_browser_does():
    assert "apt-get" not in dry_run("test") and "chromium" not in dry_run("test")
    browser = dry_run("test-browser")
    assert "apt-get install" in browser and "chromium" in browser
    assert "CONTRAST_AUDIT_BROWSER_TEST=require" in browser and "tests/report/test_browser.py" in browser


def test_skips_say_why_and_ci_runs_both_targets():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    assert "-rs" in options["addopts"].split()
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert "make test" in ci and "make test-browser" in ci


def test_readme_quickstart_is_two_commands_and_names_the_browser_target():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Quickstart\n\n```sh\n(.*?)```", readme, re.S)
    assert block
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    assert "make test-browser" in readme


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_build_shows_its_packages_and_takes_an_index_for_torch_s_cpu_build():
    done = subprocess.run(
        ["make", "-n", "-B", "demo", "PIP_EXTRA=--extra-index-url https://download.pytorch.org/whl/cpu"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    install = next(line for line in done.stdout.splitlines() if "-e '.[dev]'" in line)
    assert "--quiet" not in install  # pip lists each package: a long first build shows progress
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in install and "-c constraints.txt" in install
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert 'PIP_EXTRA="--extra-index-url https://download.pytorch.org/whl/cpu"' in readme and "2.5 GB" in readme
