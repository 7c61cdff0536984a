"""Helpers shared by the test modules (importable because tests/conftest.py puts tests/ on the path)."""

from __future__ import annotations

import polars as pl

from contrast_audit.config import NormaliseConfig
from contrast_audit.corpus import Corpus, build_corpus


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
