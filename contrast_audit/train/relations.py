"""The manifest's masks and extra positives as (anchor row, candidate row, role) relations per
direction, keyed by dataset row index, so a loss can look them up for whatever batch it is given; and each
dataset row's weight in the loss (the manifest's ``weights``; 1 where it has none).

Roles are coded as integers: 0 is the direction's default (``positive`` for ``query_to_doc`` and
``doc_to_doc``, ``anchor`` for ``query_to_query`` and ``doc_to_query``), k is ``negative_k``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from contrast_audit.errors import InputError
from contrast_audit.manifest.format import Manifest, default_role, negative_index

DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")


def role_code(direction: str, role: str) -> int:
    """0 for the direction's default role, k for ``negative_k``."""
    if role == default_role(direction):
        return 0
    k = negative_index(role)  # None unless 1 <= k <= 2^63 - 1
    if k is not None and direction in ("query_to_doc", "doc_to_doc"):
        return k
    raise ValueError(f"role {role!r} is not valid for direction {direction!r}")


@dataclass(frozen=True)
class Relations:
    """Sorted int64 keys ``(anchor * n_rows + candidate) * n_roles + role`` per direction, and ``weights``:
    each dataset row's weight in the loss (float64; ones when none are given, and then ``weighted`` is
    False)."""

    n_rows: int
    n_roles: int
    masked: dict[str, np.ndarray]
    positives: dict[str, np.ndarray]
    weights: np.ndarray | None = None
    weighted: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "weighted", self.weights is not None)
        weights = np.ones(self.n_rows) if self.weights is None else np.asarray(self.weights, dtype=np.float64)
        if weights.shape != (self.n_rows,):
            raise ValueError(f"weights must hold one number per row ({self.n_rows}), got shape {weights.shape}")
        object.__setattr__(self, "weights", weights)

    def key(self, anchor: np.ndarray, candidate: np.ndarray, role: np.ndarray) -> np.ndarray:
        return (anchor.astype(np.int64) * self.n_rows + candidate.astype(np.int64)) * self.n_roles + role.astype(
            np.int64
        )

    def lookup(self, kind: str, direction: str, keys: np.ndarray) -> np.ndarray:
        """Boolean array: which ``keys`` are in the ``kind`` ("masked"/"positives") relation."""
        table = getattr(self, kind).get(direction)
        if table is None or table.size == 0:
            return np.zeros(keys.shape, dtype=bool)
        at = np.searchsorted(table, keys.ravel()).clip(max=table.size - 1)
        return (table[at] == keys.ravel()).reshape(keys.shape)

    @property
    def counts(self) -> dict[str, int]:
        return {
            "masked": int(sum(v.size for v in self.masked.values())),
            "positives": int(sum(v.size for v in self.positives.values())),
        }


def build_relations(manifest: Manifest, row_ids: Sequence[str], n_negatives: int) -> Relations:
    """Collect every batch's entries as relations between dataset rows (``row_ids[i]`` is row i)."""
    index = {rid: i for i, rid in enumerate(row_ids)}
    if len(index) != len(row_ids):
        raise InputError("data", "row ids are not unique", fix="give every row a unique id")
    n_rows, n_roles = len(row_ids), n_negatives + 1
    collected: dict[str, dict[str, list[np.ndarray]]] = {"masked": {}, "positives": {}}
    weighted_rows: list[np.ndarray] = []
    for batch in manifest.batches:
        try:
            rows = np.fromiter((index[r] for r in batch.rows), dtype=np.int64, count=len(batch.rows))
        except KeyError as exc:
            raise InputError(
                manifest.path,
                f"batch {batch.batch} names row id {json.dumps(exc.args[0], ensure_ascii=False)}, which the data "
                "does not have",
                line=batch.line,
                fix="regenerate the manifest for this data",
            ) from exc
        if batch.weights is not None:
            weighted_rows.append(rows)
        for kind, entries_by_direction in (("masked", batch.mask), ("positives", batch.positives)):
            for direction, entries in entries_by_direction.items():
                if not entries:
                    continue
                arr = np.asarray([(a, c, role_code(direction, r)) for a, c, r in entries], dtype=np.int64)
                if arr[:, 2].max() > n_negatives:
                    raise InputError(
                        manifest.path,
                        f"batch {batch.batch} '{'mask' if kind == 'masked' else kind}.{direction}' addresses "
                        f"negative_{int(arr[:, 2].max())}, but the data's rows have at most {n_negatives} hard "
                        "negatives",
                        line=batch.line,
                        fix="regenerate the manifest for this data",
                    )
                a, c, role = rows[arr[:, 0]], rows[arr[:, 1]], arr[:, 2]
                keys = (a * n_rows + c) * n_roles + role
                collected[kind].setdefault(direction, []).append(keys)
    tables = {
        kind: {d: np.unique(np.concatenate(parts)) for d, parts in by_direction.items()}
        for kind, by_direction in collected.items()
    }
    weights = _row_weights(manifest, row_ids, weighted_rows) if weighted_rows else None
    return Relations(
        n_rows=n_rows,
        n_roles=n_roles,
        masked=tables["masked"],
        positives=tables["positives"],
        weights=weights,
    )


def _row_weights(manifest: Manifest, row_ids: Sequence[str], weighted_rows: list[np.ndarray]) -> np.ndarray:
    """One weight per dataset row from the batches' ``weights`` (1 for a row no batch holds). A row planned
    in several batches must have the same weight in each."""
    weighted = [b for b in manifest.batches if b.weights is not None]
    if len(weighted) != len(manifest.batches):
        raise InputError(
            manifest.path,
            f"{len(weighted)} of {len(manifest.batches)} batches give their rows weights; a weighted manifest "
            "gives every batch's rows one",
            fix="regenerate the manifest",
        )
    rows = np.concatenate(weighted_rows)
    values = np.concatenate([np.asarray(b.weights, dtype=np.float64) for b in weighted])
    batch_of = np.repeat(np.asarray([b.batch for b in weighted]), [len(b.rows) for b in weighted])
    unique, first = np.unique(rows, return_index=True)
    out = np.ones(len(row_ids), dtype=np.float64)
    out[unique] = values[first]  # each row's weight in the first batch that holds it
    differs = np.flatnonzero(out[rows] != values)
    if differs.size:
        at = int(differs[0])
        first_batch = int(batch_of[first[np.searchsorted(unique, rows[at])]])
        raise InputError(
            manifest.path,
            f"row id {row_ids[rows[at]]!r} has weight {float(out[rows[at]])!r} in batch {first_batch} and "
            f"{float(values[at])!r} in batch {int(batch_of[at])}: a row has one weight",
            fix="regenerate the manifest",
        )
    return out
