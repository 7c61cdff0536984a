"""The HTML report in a real headless browser: the plots render, and no request leaves the page."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

import pytest
from ci_support import full_result, write_rows

from contrast_audit.report.html import render

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # nothing resolves: a request would fail, not leak
]
RED = (211, 47, 47)  # the plots' colour for flagged rows (#d32f2f)


def browse(chromium: str, page: Path, tmp: Path, *extra: str) -> tuple[str, list[str]]:
    """Load ``page``; return chromium's stdout and the URLs the page itself requested (from the
    net log: requests whose network isolation key is the page's file:// origin)."""
    net_log = tmp / f"net-{len(list(tmp.glob('net-*')))}.json"
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    done = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={profile}", f"--log-net-log={net_log}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    events = json.loads(net_log.read_text(encoding="utf-8"))["events"]
    starts = {e["source"]["id"] for e in events if "file://" in str(e.get("params", {}).get("network_isolation_key"))}
    urls = sorted({e["params"]["url"] for e in events if e["source"]["id"] in starts and "url" in e.get("params", {})})
    return done.stdout, urls


@pytest.mark.slow
def test_report_plots_render_offline(chromium: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "report.html"
    page.write_text(render(full_result(write_rows(tmp_path / "pairs.jsonl"))), encoding="utf-8")

    # The detector works: a page that fetches something is caught.
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><img src="http://contrast-audit.invalid/x.png">', encoding="utf-8")
    assert browse(chromium, control, tmp_path, "--dump-dom")[1] == ["http://contrast-audit.invalid/x.png"]

    dom, urls = browse(chromium, page, tmp_path, "--dump-dom")
    assert urls == []
    assert "Content-Security-Policy" in dom
    images = re.findall(
        r'<figure class="plot" id="plot-(\w+)">.*?<img alt="[^"]*" src="data:image/svg\+xml;base64,([^"]+)"', dom
    )
    assert [key for key, _ in images] == ["clusters", "overlaps"]  # the others say why they are missing
    for _, data in images:
        svg = base64.b64decode(data).decode("utf-8")
        assert svg.lstrip().startswith("<?xml") and "<svg" in svg and svg.count("<path") > 10
    assert "Embedding evidence is off" in dom

    shot = tmp_path / "shot.png"
    browse(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1280,4000")
    import numpy as np
    from PIL import Image

    with Image.open(shot) as image:
        red = int((np.asarray(image.convert("RGB")) == RED).all(axis=2).sum())
    assert red > 20000, red  # the bars are drawn (a severity badge alone is a few hundred pixels)


def test_a_missing_chromium_skips_loudly_and_installs_nothing(monkeypatch: pytest.MonkeyPatch):
    import shutil

    import browser_support as browser

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"the tests ran a command: {args}")

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    monkeypatch.delenv(browser.REQUIRE, raising=False)
    with pytest.raises(pytest.skip.Exception, match="make test-browser"):
        browser.find_chromium()
    monkeypatch.setenv(browser.REQUIRE, "require")
    with pytest.raises(pytest.fail.Exception, match="chromium is not on PATH"):
        browser.find_chromium()
