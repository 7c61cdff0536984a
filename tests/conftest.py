"""Shared fixtures: small pair files written by the tests themselves."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/support.py


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(autouse=True, scope="session")
def _embedding_cache(tmp_path_factory: pytest.TempPathFactory):
    """Embeddings are cached in a directory of the test session, never in the user's cache."""
    import os

    os.environ["CONTRAST_AUDIT_CACHE_DIR"] = str(tmp_path_factory.mktemp("embedding-cache"))
    yield


@pytest.fixture
def pairs_file(tmp_path: Path):
    def make(rows: list[dict], name: str = "pairs.jsonl") -> Path:
        return write_jsonl(tmp_path / name, rows)

    return make
