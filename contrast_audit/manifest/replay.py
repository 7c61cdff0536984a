"""A manifest read back: its batches as a plan (``scan --plan manifest.jsonl``) and the judged findings it
masks or marks as positives, matched by their positions in global batches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE
from contrast_audit.judge import Judgement
from contrast_audit.manifest.format import Manifest, ManifestBatch, is_manifest_header, negative_index
from contrast_audit.plan.batches import GlobalBatches, Plan

_ROLE_CODE_SCHEMA = {"batch": pl.Int64, "direction": pl.String, "anchor_row": pl.Int64, "cand_row": pl.Int64}


def is_manifest_file(path: str) -> bool:
    """Whether the plan file's first non-blank line is a manifest header."""
    try:
        with Path(path).open(encoding="utf-8-sig") as handle:
            for line in handle:
                if line.strip():
                    return is_manifest_header(json.loads(line))
    except (OSError, ValueError, RecursionError):  # ValueError: bad JSON, bad UTF-8, numbers too long
        return False  # the plan-file reader reports what is wrong
    return False


def manifest_plan(manifest: Manifest, ids: pl.Series, negatives: np.ndarray | None = None) -> Plan:
    """The manifest's device batches (each global batch cut into its ranks' slices), rows as indices.
    ``negatives``: each row's number of hard negatives (aligned with ``ids``); an entry naming a
    ``negative_k`` its candidate's row does not have is refused with its line."""
    from contrast_audit.errors import InputError

    index = {value: i for i, value in enumerate(ids.to_list())}
    batches: list[np.ndarray] = []
    epochs: list[int] = []
    for number, batch in enumerate(manifest.batches, start=2):
        line = batch.line or number
        unknown = [r for r in batch.rows if r not in index]
        if unknown:
            raise InputError(
                manifest.path,
                f"unknown row id {json.dumps(unknown[0], ensure_ascii=False)}",
                line=line,
                fix="regenerate the manifest for this data",
            )
        rows = np.fromiter((index[r] for r in batch.rows), dtype=np.int64, count=len(batch.rows))
        if negatives is not None:
            _check_negatives(manifest.path, line, batch, rows, negatives)
        start = 0
        for size in batch.ranks:
            batches.append(rows[start : start + size])
            epochs.append(batch.epoch)
            start += size
    return Plan.from_batches(batches, epochs, f"manifest:{manifest.strategy}:{manifest.path}")


def _check_negatives(path: str, line: int, batch: ManifestBatch, rows: np.ndarray, negatives: np.ndarray) -> None:
    """Refuse an entry whose ``negative_k`` is beyond the hard negatives of its candidate's row."""
    from contrast_audit.errors import InputError

    for key, relation in (("mask", batch.mask), ("positives", batch.positives)):
        for direction, entries in relation.items():
            for a, c, role in entries:
                k = negative_index(role) if role.startswith("negative_") else None
                if k is not None and k > (have := int(negatives[rows[c]])):
                    raise InputError(
                        path,
                        f"entry [{a}, {c}, \"{role}\"] in '{key}.{direction}' names hard negative {k} of row "
                        f"{json.dumps(batch.rows[c], ensure_ascii=False)}, which has {have}",
                        line=line,
                        fix="regenerate the manifest for this data",
                    )


def positions(gb: GlobalBatches) -> pl.DataFrame:
    """(batch, row, pos): each row's position in each global batch."""
    batch = np.repeat(np.arange(len(gb), dtype=np.int64), gb.sizes)
    pos = np.arange(gb.rows.shape[0], dtype=np.int64) - np.repeat(gb.offsets[:-1], gb.sizes)
    return pl.DataFrame({"batch": batch, "row": gb.rows.astype(np.int64), "pos": pos})


def with_positions(findings: pl.DataFrame, gb: GlobalBatches) -> pl.DataFrame:
    """Findings with ``a_pos`` and ``c_pos``, their rows' positions in the finding's global batch."""
    occ = positions(gb)
    return findings.join(
        occ.rename({"row": "anchor_row", "pos": "a_pos"}), on=["batch", "anchor_row"], how="left"
    ).join(occ.rename({"row": "cand_row", "pos": "c_pos"}), on=["batch", "cand_row"], how="left")


def manifest_relations(manifest: Manifest, ids: pl.Series) -> pl.DataFrame:
    """Every masked or positive entry as (batch, direction, anchor_row, cand_row, cand_role) with the
    batch numbered as the plan's global batches are (the manifest's line order)."""
    index = {value: i for i, value in enumerate(ids.to_list())}
    codes: dict[str, int] = {}
    frames = [pl.DataFrame(schema={**_ROLE_CODE_SCHEMA, "cand_role": pl.Int64})]
    for g, batch in enumerate(manifest.batches):
        rows = np.fromiter((index[r] for r in batch.rows), dtype=np.int64, count=len(batch.rows))
        for relation in (batch.mask, batch.positives):
            for d, entries in relation.items():
                if not entries:
                    continue
                a, c, role = (np.asarray(column) for column in zip(*entries, strict=True))
                frames.append(
                    pl.DataFrame(
                        {
                            "batch": np.full(a.shape[0], g, dtype=np.int64),
                            "direction": [d] * a.shape[0],
                            "anchor_row": rows[a.astype(np.int64)],
                            "cand_row": rows[c.astype(np.int64)],
                            "cand_role": [codes.setdefault(r, _role_code(r)) for r in role.tolist()],
                        },
                        schema={**_ROLE_CODE_SCHEMA, "cand_role": pl.Int64},
                    )
                )
    return pl.concat(frames).unique()


def _role_code(role: str) -> int:
    if role == "anchor":
        return ANCHOR_ROLE
    if role == "positive":
        return POSITIVE_ROLE
    return int(role.removeprefix("negative_"))


def mark_masked(judgement: Judgement, manifest: Manifest, ids: pl.Series) -> Judgement:
    """Flag the findings (and own hard negatives) that the manifest masks or marks as positives."""
    relations = manifest_relations(manifest, ids).with_columns(pl.lit(True).alias("_hit"))
    keys = ["batch", "direction", "anchor_row", "cand_row", "cand_role"]
    findings = (
        judgement.findings.join(relations, on=keys, how="left")
        .with_columns(pl.col("_hit").fill_null(False).alias("masked"))
        .drop("_hit")
    )
    own = (
        relations.filter((pl.col("anchor_row") == pl.col("cand_row")) & (pl.col("cand_role") > 0))
        .select("anchor_row", "cand_role")
        .unique()
        .with_columns(pl.lit(True).alias("_hit"))
    )
    mislabelled = (
        judgement.mislabelled.join(own, on=["anchor_row", "cand_role"], how="left")
        .with_columns(pl.col("_hit").fill_null(False).alias("masked"))
        .drop("_hit")
    )
    judgement.findings = findings.select(judgement.findings.columns)
    judgement.mislabelled = mislabelled.select(judgement.mislabelled.columns)
    return judgement


__all__ = ["is_manifest_file", "manifest_plan", "manifest_relations", "mark_masked", "positions", "with_positions"]
