"""Calibration of the semantic bars from the data itself.

Every row is a pair of texts the user says belong together, so the distribution of the data's own
anchor–positive cosines, set against the cosines of random pairs of rows, says what "positive" looks
like in this data and this model. For each role pairing (query–query, doc–doc, query–doc):

- query–doc: the bar is the ``quantile`` of the rows' own sim(anchor, positive);
- query–query and doc–doc have no labelled positives; their bar sits as many standard deviations
  above that pairing's random pairs as the query–doc bar sits above random query–doc pairs;
- every bar is held at or above its floor: the larger of ``floor`` and the 99th percentile of
  that pairing's random pairs, so a data set of loose pairs cannot make everything a duplicate.

Rows whose positive is their anchor (SimCSE style) say nothing about what a positive looks like;
when fewer than ``MIN_ROWS`` rows have a positive of their own, or when ``calibration`` is off, every
bar is the fixed one (``pair_threshold``, else ``positive_threshold``). An explicit
``pair_threshold`` always wins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

PAIRINGS = ("query_query", "doc_doc", "query_doc")
MIN_ROWS = 50
RANDOM_PAIRS = 20_000
FLOOR_QUANTILE = 0.99
_SHOWN = (0.05, 0.25, 0.5, 0.75, 0.95)


@dataclass(frozen=True)
class Calibration:
    """The bars the pair evidence uses and how they were derived (recorded in reports)."""

    mode: str  # "calibrated" or "fixed"
    reason: str
    bars: dict[str, float]
    floors: dict[str, float] = field(default_factory=dict)
    quantile: float | None = None
    rows: int = 0
    random_pairs: int = 0
    positive_quantiles: dict[str, float] = field(default_factory=dict)
    random_quantiles: dict[str, dict[str, float]] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One readable line for the text reports."""
        bars = ", ".join(f"{k.replace('_', '–')} {v:.3f}" for k, v in self.bars.items())
        if self.mode != "calibrated":
            return f"pair bars fixed ({self.reason}): {bars}"
        return (
            f"pair bars calibrated on {self.rows:,} rows' own anchor–positive cosines (quantile {self.quantile:g}) "
            f"against {self.random_pairs:,} random pairs: {bars}"
        )


def _quantiles(values: np.ndarray, qs: tuple[float, ...] = _SHOWN) -> dict[str, float]:
    if values.size == 0:
        return {}
    return {f"q{round(q * 1000) / 10:g}": round(float(v), 4) for q, v in zip(qs, np.quantile(values, qs), strict=True)}


def fixed(bar: float, reason: str) -> Calibration:
    return Calibration(mode="fixed", reason=reason, bars=dict.fromkeys(PAIRINGS, round(float(bar), 4)))


def calibrate(
    positive: np.ndarray,
    random: dict[str, np.ndarray],
    *,
    quantile: float,
    floor: float,
    fallback: float,
) -> Calibration:
    """Bars from the rows' own cosines ``positive`` (rows whose anchor is not their positive) and
    random pairs' cosines per pairing ``random``."""
    positive = np.asarray(positive, dtype=np.float64)
    shown = {k: _quantiles(np.asarray(v, dtype=np.float64), (0.5, FLOOR_QUANTILE)) for k, v in random.items()}
    n_random = int(min((v.shape[0] for v in random.values()), default=0))
    if positive.shape[0] < MIN_ROWS or n_random == 0:
        out = fixed(fallback, f"{positive.shape[0]} rows with a positive of their own, fewer than {MIN_ROWS}")
        return Calibration(
            **{**asdict(out), "rows": int(positive.shape[0]), "positive_quantiles": _quantiles(positive)}
        )
    qd = float(np.quantile(positive, quantile))
    rand_qd = np.asarray(random["query_doc"], dtype=np.float64)
    mu_qd, sd_qd = float(rand_qd.mean()), float(rand_qd.std())
    z = (qd - mu_qd) / sd_qd if sd_qd > 1e-6 else 0.0
    bars: dict[str, float] = {}
    floors: dict[str, float] = {}
    for pairing in PAIRINGS:
        values = np.asarray(random[pairing], dtype=np.float64)
        raw = qd if pairing == "query_doc" else float(values.mean() + z * values.std())
        floors[pairing] = round(max(floor, float(np.quantile(values, FLOOR_QUANTILE))), 4)
        bars[pairing] = round(min(max(raw, floors[pairing]), 0.99), 4)
    return Calibration(
        mode="calibrated",
        reason="the rows' own anchor–positive cosines against random pairs",
        bars=bars,
        floors=floors,
        quantile=quantile,
        rows=int(positive.shape[0]),
        random_pairs=n_random,
        positive_quantiles=_quantiles(positive),
        random_quantiles=shown,
    )


def random_row_pairs(n_rows: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` seeded pairs of distinct rows (all of them when there are fewer)."""
    if n_rows < 2:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    total = n_rows * (n_rows - 1)
    rng = np.random.default_rng(seed)
    if total <= count:
        i, j = np.nonzero(~np.eye(n_rows, dtype=bool))
        return i.astype(np.int64), j.astype(np.int64)
    i = rng.integers(0, n_rows, count)
    j = (i + rng.integers(1, n_rows, count)) % n_rows
    return i.astype(np.int64), j.astype(np.int64)
