"""The corpus: unique normalised texts with integer ids, and each row's roles as text ids.

Every later stage (detectors, samplers, the judge) works on these integer arrays, so each text is
normalised, hashed or embedded once however many rows repeat it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from contrast_audit.config import NormaliseConfig
from contrast_audit.normalise import normalise_series

ANCHOR_ROLE = -1  # candidate role codes: -1 anchor (query), 0 positive, k >= 1 negative_k
POSITIVE_ROLE = 0


def role_codes(names: pl.Series) -> np.ndarray:
    """Role names (``anchor``, ``positive``, ``negative_k``) as role codes, the inverse of :func:`role_name`;
    a name that is none of them reads as the positive."""
    codes = names.replace_strict(
        {"anchor": ANCHOR_ROLE, "positive": POSITIVE_ROLE}, default=None, return_dtype=pl.Int64
    )
    negative = names.str.extract(r"^negative_(\d+)$").cast(pl.Int64)
    return codes.fill_null(negative).fill_null(POSITIVE_ROLE).to_numpy()


def role_name(code: int) -> str:
    if code == ANCHOR_ROLE:
        return "anchor"
    if code == POSITIVE_ROLE:
        return "positive"
    return f"negative_{code}"


@dataclass
class Corpus:
    """Rows as text-id arrays. ``negatives`` is (rows × max negatives), padded with -1."""

    rows: pl.DataFrame
    texts: pl.DataFrame  # tid, text (first spelling seen), norm
    anchor: np.ndarray
    positive: np.ndarray
    negatives: np.ndarray
    group: np.ndarray  # -1 where the row has no group
    raw: np.ndarray  # (rows × (2 + max negatives)) ids of the exact strings, -1 padded
    raw_texts: pl.Series  # exact string of each raw id

    def spelling(self, rows: np.ndarray, roles: np.ndarray) -> pl.Series:
        """Each row's own spelling of the text in ``roles`` (anchor -1, positive 0, negative k)."""
        rids = self.raw[np.asarray(rows, dtype=np.int64), np.asarray(roles, dtype=np.int64) + 1]
        return self.raw_texts.gather(rids)

    def norms(self, tids: pl.Series) -> pl.Series:
        """The normalised text of each text id."""
        return self.texts.get_column("norm").gather(tids)

    @property
    def n_rows(self) -> int:
        return int(self.anchor.shape[0])

    @property
    def n_texts(self) -> int:
        return self.texts.height


def group_codes(groups: pl.Series) -> np.ndarray:
    """An integer per distinct group value (equal values, equal codes); -1 where a row has none."""
    if groups.null_count() == groups.len():
        return np.full(groups.len(), -1, dtype=np.int64)
    return groups.cast(pl.Categorical).to_physical().cast(pl.Int64).fill_null(-1).to_numpy()


def build_corpus(rows: pl.DataFrame, cfg: NormaliseConfig) -> Corpus:
    """Normalise every text once and give each distinct normal form an id."""
    n = rows.height
    k = int(rows.get_column("negatives").list.len().max() or 0)
    long = pl.concat(
        [
            rows.select(
                pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
                pl.lit(0, pl.Int32).alias("slot"),
                pl.col("anchor").alias("raw"),
            ),
            rows.select(
                pl.int_range(pl.len(), dtype=pl.Int64).alias("row"),
                pl.lit(1, pl.Int32).alias("slot"),
                pl.col("positive").alias("raw"),
            ),
            rows.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"), pl.col("negatives").alias("raw"))
            .with_columns(pl.int_ranges(2, pl.col("raw").list.len() + 2, dtype=pl.Int32).alias("slot"))
            .explode("raw", "slot")
            .drop_nulls("raw")
            .select("row", "slot", "raw"),
        ]
    )
    raws = long.select(pl.col("raw").unique(maintain_order=True))
    raws = raws.with_columns(normalise_series(raws.get_column("raw"), cfg).alias("norm"))
    norms = raws.select(pl.col("norm").unique(maintain_order=True)).with_row_index("tid")
    raws = raws.with_row_index("rid").join(norms, on="norm", how="left")
    texts = (
        raws.group_by("tid", maintain_order=True)
        .agg(pl.col("raw").first().alias("text"), pl.col("norm").first())
        .sort("tid")
    )
    long = long.join(raws.select("raw", "rid", "tid"), on="raw", how="left")
    row_idx = long.get_column("row").to_numpy()
    slot = long.get_column("slot").to_numpy()
    tid_mat = np.full((n, 2 + k), -1, dtype=np.int64)
    raw_mat = np.full((n, 2 + k), -1, dtype=np.int64)
    tid_mat[row_idx, slot] = long.get_column("tid").to_numpy()
    raw_mat[row_idx, slot] = long.get_column("rid").to_numpy()
    return Corpus(
        rows=rows,
        texts=texts,
        anchor=tid_mat[:, 0].copy(),
        positive=tid_mat[:, 1].copy(),
        negatives=tid_mat[:, 2:].copy(),
        group=group_codes(rows.get_column("group")),
        raw=raw_mat,
        raw_texts=raws.sort("rid").get_column("raw"),
    )


def alike_rows(corpus: Corpus, doc_ratio: float) -> np.ndarray:
    """Per row: its positive has fewer than ``doc_ratio`` times its anchor's words, so the two texts are
    of one kind (paraphrases, captions, duplicate questions) rather than a query and its document.
    A ratio of 0 calls no row alike."""
    words = corpus.texts.select(pl.col("norm").str.split(" ").list.len()).to_series().to_numpy()
    return words[corpus.positive] < doc_ratio * words[corpus.anchor]
