"""The training dataset a manifest refers to: the data loaded with the manifest's column mapping,
checked against its fingerprint, as a ``datasets.Dataset``.

Columns: ``anchor``, ``positive``, ``negative_1`` .. ``negative_k`` (texts; sentence-transformers reads
them in this order) and ``label``: the row's index in the data, which the trainer's collator hands to the
loss as ``labels`` so :class:`MaskedMultipleNegativesRankingLoss` can look up the batch's masks.

Rows with fewer hard negatives than the most any row has are padded: the missing ``negative_k`` cells hold
:data:`PAD_TEXT` and ``TrainingData.padded`` says which, so the masked loss excludes them from every
anchor's softmax (no row and no real negative is dropped).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.config import ColumnMapping
from contrast_audit.errors import InputError
from contrast_audit.io.load import load_rows
from contrast_audit.manifest.format import Manifest, check_fingerprint

LOG = logging.getLogger("contrast_audit.train")
PAD_TEXT = ""  # the text of a padded hard-negative cell; the masked loss never scores it


@dataclass(frozen=True)
class TrainingData:
    """The dataset and what the loss needs to read it.

    ``padded``: a boolean array (rows × ``n_negatives``), True where row i had no ``negative_{k+1}`` and
    the cell holds :data:`PAD_TEXT`; pass the whole ``TrainingData`` to the loss so it masks them.
    """

    dataset: Any  # datasets.Dataset
    row_ids: list[str]
    n_negatives: int
    rows: pl.DataFrame
    padded: np.ndarray | None = None

    @property
    def padded_negatives(self) -> int:
        """Hard-negative cells filled with padding (masked in the loss)."""
        return int(self.padded.sum()) if self.padded is not None else 0

    @property
    def padded_rows(self) -> int:
        """Rows with at least one padded hard-negative cell."""
        return int(self.padded.any(axis=1).sum()) if self.padded is not None and self.padded.size else 0


def mapping_from_manifest(manifest: Manifest, user: ColumnMapping | None = None) -> ColumnMapping:
    """The column mapping the manifest was planned with (the user's, when given, wins)."""
    if user is not None and user != ColumnMapping():
        return user
    mapping = manifest.header.get("mapping") or {}
    if isinstance(mapping, list):
        mapping = mapping[0] if mapping else {}
    if isinstance(mapping, dict) and isinstance(mapping.get("files"), list) and mapping["files"]:
        mapping = mapping["files"][0]
    if not isinstance(mapping, dict):
        return ColumnMapping()
    return ColumnMapping(
        anchor=mapping.get("anchor"),
        positive=mapping.get("positive"),
        negatives=tuple(mapping.get("negatives") or ()),
        id=mapping.get("id"),
        source=mapping.get("source"),
        cohort=mapping.get("cohort"),
        group=mapping.get("group"),
    )


def on_bad_row_of(manifest: Manifest) -> str:
    """How the manifest's rows were loaded (bad rows skipped or not), so the trainer reads the same rows."""
    from contrast_audit.config import ON_BAD_ROW

    config = manifest.header.get("config")
    value = config.get("on_bad_row") if isinstance(config, dict) else None
    return value if value in ON_BAD_ROW else "error"


def rows_dataset(rows: pl.DataFrame, data_label: str = "data") -> TrainingData:
    """A ``datasets.Dataset`` (anchor, positive, negative_k..., label = row index) from canonical rows.

    Rows with fewer hard negatives than the most any row has get :data:`PAD_TEXT` in the missing cells,
    recorded in ``padded`` (and logged), for the loss to mask.
    """
    from datasets import Dataset

    counts = rows.get_column("negatives").list.len().fill_null(0).to_numpy().astype(np.int64)
    n_negatives = int(counts.max()) if counts.size else 0
    padded = np.arange(n_negatives)[None, :] >= counts[:, None]
    columns: dict[str, list] = {
        "anchor": rows.get_column("anchor").to_list(),
        "positive": rows.get_column("positive").to_list(),
    }
    negatives = rows.get_column("negatives")
    for k in range(n_negatives):
        columns[f"negative_{k + 1}"] = negatives.list.get(k, null_on_oob=True).fill_null(PAD_TEXT).to_list()
    columns["label"] = list(range(rows.height))
    data = TrainingData(
        dataset=Dataset.from_dict(columns),
        row_ids=rows.get_column("id").cast(pl.String).to_list(),
        n_negatives=n_negatives,
        rows=rows,
        padded=padded,
    )
    if data.padded_negatives:
        LOG.info(
            "%s: %d of %d rows have fewer than %d hard negatives; %d missing cells padded and masked in the loss",
            data_label,
            data.padded_rows,
            rows.height,
            n_negatives,
            data.padded_negatives,
        )
    return data


def manifest_dataset(
    data: str | Sequence[str], manifest: Manifest, mapping: ColumnMapping | None = None
) -> TrainingData:
    """Load ``data`` as the manifest was planned, refuse a fingerprint mismatch, build the dataset."""
    patterns = [data] if isinstance(data, str) else list(data)
    try:
        config = manifest.header.get("config")
        delimiter = config.get("delimiter") if isinstance(config, dict) else None
        loaded = load_rows(
            patterns,
            mapping_from_manifest(manifest, mapping),
            on_bad_row_of(manifest),
            delimiter=delimiter if isinstance(delimiter, str) and len(delimiter) == 1 else None,
        )
    except InputError as exc:
        if "not found (columns:" not in exc.message:
            raise
        # The data lacks a column the manifest was planned with: other data, not a mapping mistake.
        raise InputError(
            manifest.path,
            f"was planned for other data: its fingerprint is {manifest.fingerprint}, and its column mapping "
            f"does not fit {', '.join(patterns)} ({exc.message.split(': ', 1)[-1]})",
            fix="regenerate the manifest for this data (contrast-audit manifest DATA ...) or pass the data it was made for",
        ) from None
    check_fingerprint(manifest, loaded.rows, ", ".join(patterns))
    return rows_dataset(loaded.rows, ", ".join(patterns))
