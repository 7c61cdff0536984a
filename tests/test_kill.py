"""Kill tests: ``scan --output`` killed with SIGKILL at random points, again and again. Afterwards
the report is the old one or a whole new one (never part of one), the next run leaves no temporary
behind, the cache is usable and the rerun's report is the one an uninterrupted run writes.

The default run kills a lexical scan (``--no-embeddings``); the slow variant kills a scan with the
model and a cold cache, mostly while it embeds. docs/reliability.md records a longer run
(``KILL_ROUNDS``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENTRY = "from contrast_audit.cli import main; main()"


def _data(path: Path, n: int) -> None:
    rows = (
        {"anchor": f"question {i % (n // 3)} about topic {i % 97}", "positive": f"answer {i % (n // 2)} number {i}"}
        for i in range(n)
    )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def _command(cache: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-c", ENTRY, "scan", "pairs.jsonl", "--output", "report.json", "--format", "json",
        "-q", "--batch-size", "64", "--cache-dir", str(cache), *extra,
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _strip_volatile(report: dict) -> dict:
    """The report less the cache directory and counts, which differ between the runs compared."""
    report["config"]["embedding"].pop("cache_dir", None)
    for info in report["detectors"].values():
        for key in ("embedded", "cached", "token_texts_encoded", "token_texts_cached"):
            info.pop(key, None)
    return report


def _temporaries(tmp: Path) -> list[Path]:
    return [p for p in tmp.rglob("*") if p.name.endswith(".tmp")]


def _kill_rounds(tmp: Path, extra: tuple[str, ...], rounds: int, seed: int) -> None:
    # The reference: an uninterrupted run with its own cache.
    started = time.monotonic()
    ref = subprocess.run(
        _command(tmp / "ref-cache", *extra), cwd=tmp, env=_env(), capture_output=True, text=True, timeout=900
    )
    duration = time.monotonic() - started
    assert ref.returncode == 0, ref.stderr
    expected = _strip_volatile(json.loads((tmp / "report.json").read_text()))
    (tmp / "report.json").write_text("old report\n")
    rng = random.Random(seed)
    for _ in range(rounds):
        proc = subprocess.Popen(
            _command(tmp / "cache", *extra), cwd=tmp, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            proc.wait(timeout=rng.uniform(0.05, duration * 1.1))  # it may finish first
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(60)
        text = (tmp / "report.json").read_text()
        if text != "old report\n":  # the run finished before the kill: a whole report
            assert _strip_volatile(json.loads(text)) == expected
            (tmp / "report.json").write_text("old report\n")
    rerun = subprocess.run(
        _command(tmp / "cache", *extra), cwd=tmp, env=_env(), capture_output=True, text=True, timeout=900
    )
    assert rerun.returncode == 0, rerun.stderr
    assert "damaged" not in rerun.stderr  # SIGKILL leaves temporaries, never half a shard
    assert _temporaries(tmp) == []  # those of killed runs were removed by the rerun
    assert _strip_volatile(json.loads((tmp / "report.json").read_text())) == expected


def test_sigkill_during_a_lexical_scan(tmp_path: Path) -> None:
    _data(tmp_path / "pairs.jsonl", 5_000)
    _kill_rounds(tmp_path, ("--no-embeddings",), int(os.environ.get("KILL_ROUNDS", "2")), seed=1)


@pytest.mark.slow
def test_sigkill_during_embedding_with_a_cold_cache(tmp_path: Path) -> None:
    _data(tmp_path / "pairs.jsonl", 1_500)
    _kill_rounds(tmp_path, ("--no-minhash",), int(os.environ.get("KILL_ROUNDS", "4")), seed=2)
    shards = list((tmp_path / "cache").rglob("shard-*.npz"))
    assert shards  # the killed runs kept what they had embedded
