"""Helpers shared by the test modules (importable because tests/conftest.py puts tests/ on the path)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from contrast_audit.config import NormaliseConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus, build_corpus
from contrast_audit.evidence import Pairs

# Tests about loading, plans and reports: lexical evidence only, no model.
LEXICAL = ("--no-embeddings", "--no-minhash")
RUNNER = CliRunner()


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in ``tmp_path``: relative paths keep messages short and no stray contrast-audit.toml is picked up."""
    monkeypatch.chdir(tmp_path)


def row_json(i: int, **extra: object) -> str:
    """One JSON Lines record: anchor "query i", positive "document i", and ``extra`` columns."""
    return json.dumps({"anchor": f"query {i}", "positive": f"document {i}", **extra})


def corpus_of(rows: list[tuple], groups: list[str | None] | None = None, cfg: NormaliseConfig | None = None) -> Corpus:
    """A corpus from (anchor, positive, *hard negatives) tuples; row ids are "0", "1", …"""
    frame = pl.DataFrame(
        {
            "id": [str(i) for i in range(len(rows))],
            "anchor": [r[0] for r in rows],
            "positive": [r[1] for r in rows],
            "negatives": [list(r[2:]) for r in rows],
            "group": groups or [None] * len(rows),
        },
        schema_overrides={"negatives": pl.List(pl.String), "group": pl.String},
    )
    return build_corpus(frame, cfg or NormaliseConfig())


def pairs(corpus: Corpus, anchor_rows, cand_rows, roles=None, direction: str = "query_to_doc") -> Pairs:
    """Candidate pairs whose candidate texts follow from the rows and roles (-1 anchor, 0 positive, k negative)."""
    anchor_rows = np.asarray(anchor_rows)
    cand_rows = np.asarray(cand_rows)
    roles = np.full(len(cand_rows), POSITIVE_ROLE) if roles is None else np.asarray(roles)
    tids = np.where(roles == ANCHOR_ROLE, corpus.anchor[cand_rows], corpus.positive[cand_rows])
    neg = roles > 0
    tids[neg] = corpus.negatives[cand_rows[neg], roles[neg] - 1]
    return Pairs(direction, anchor_rows, cand_rows, roles, tids)


def run(detector, corpus: Corpus, p: Pairs):
    detector.prepare(corpus)
    return detector.detect(p)


def write_jsonl(path, rows: list[dict]):
    """Write ``rows`` as JSON Lines to ``path`` and return it."""
    import json

    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def fake_hub_cache(cache: Path, repo_id: str, source: Path, commit: str = "0123456789abcdef" * 2 + "01234567") -> Path:
    """A Hugging Face hub cache at ``cache`` holding ``repo_id`` as huggingface_hub lays it out
    (``models--ORG--NAME/refs/main`` naming ``commit``, ``snapshots/<commit>/`` linking to each file and
    folder of ``source``), so hub ids resolve offline; returns the snapshot directory."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit, encoding="utf-8")  # no newline, as huggingface_hub writes it
    for entry in source.iterdir():
        (snapshot / entry.name).symlink_to(entry.resolve())
    return snapshot


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; its standard output."""
    import subprocess

    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def init_repo(repo: Path) -> Path:
    """An empty git repository at ``repo`` (branch ``main``) with an author set; returns it."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "ci@example.com")
    git(repo, "config", "user.name", "CI")
    return repo
