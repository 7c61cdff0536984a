"""pyproject.toml builds without setuptools' deprecation warnings (PEP 639 license metadata)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parent.parent


def test_license_is_an_spdx_expression_with_a_setuptools_that_reads_it():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert meta["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in meta["build-system"]["requires"] if r.startswith("setuptools")]
    minimum = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools)
    assert minimum and int(minimum.group(1)) >= 77, setuptools  # PEP 639 support came in setuptools 77.0


@pytest.mark.slow  # builds a wheel
def test_wheel_builds_without_deprecation_warnings(tmp_path: Path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "contrast_audit", source / "contrast_audit", ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "deprecated" not in (done.stdout + done.stderr).lower(), done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("contrast_audit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        assert "License-Expression: Apache-2.0" in archive.read(name).decode("utf-8")


def test_ray_is_an_extra_the_core_install_does_not_pull_in():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(dep.startswith("ray") for dep in project["dependencies"])
    assert any(dep.startswith("ray[data]") for dep in project["optional-dependencies"]["ray"])
