"""Batch manifests: the contract between the auditor and a trainer (docs/manifest.md).

JSON Lines. The first line is a header (schema version, data fingerprint, column mapping, plan, loss and
detector settings, strategy, counts); then one line per global batch, in training order:
``{"batch": g, "epoch": e, "rows": [id, ...], "ranks": [n_0, ...], "mask": {direction: [entry, ...]},
"positives": {direction: [entry, ...]}}``. An entry is ``[a, c]`` or ``[a, c, role]``: positions in the
global batch of the anchor row and of the candidate row, and the candidate's role when it is not the
direction's default (``positive`` for ``*_to_doc``; ``anchor`` for ``*_to_query``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.config import DIRECTIONS
from contrast_audit.errors import InputError

KIND = "contrast-audit-manifest"
SCHEMA_VERSION = "1"
STRATEGIES = ("mask", "group", "multi-positive", "cluster")

Entry = tuple[int, int, str]


def default_role(direction: str) -> str:
    """The candidate role an entry of ``direction`` means when it names none."""
    return "anchor" if direction.endswith("_to_query") else "positive"


def data_fingerprint(rows: pl.DataFrame) -> str:
    """``sha256:<hex>`` over the mapped columns in row order: id, anchor, positive, hard negatives and
    group. Each column is hashed as its values' UTF-8 lengths then bytes, so no separator can collide with
    the text; list and null structure is hashed too. Stable across polars versions (no polars hashing)."""
    digest = hashlib.sha256()
    digest.update(f"{KIND}/{SCHEMA_VERSION} rows={rows.height}\n".encode())

    def column(name: str, values: pl.Series) -> None:
        nulls = values.is_null()
        text = values.fill_null("")
        digest.update(f"{name}\n".encode())
        digest.update(nulls.to_numpy().astype(np.uint8).tobytes())
        digest.update(text.str.len_bytes().cast(pl.UInt64).to_numpy().astype("<u8").tobytes())
        digest.update("".join(text.to_list()).encode("utf-8", "surrogatepass"))

    for name in ("id", "anchor", "positive"):
        column(name, rows.get_column(name).cast(pl.String))
    negatives = rows.get_column("negatives")
    digest.update(negatives.list.len().fill_null(0).cast(pl.UInt64).to_numpy().astype("<u8").tobytes())
    column("negatives", negatives.explode().cast(pl.String).drop_nulls())
    column("group", rows.get_column("group").cast(pl.String))
    return f"sha256:{digest.hexdigest()}"


@dataclass(frozen=True)
class ManifestBatch:
    """One global batch: row ids in gather order, each rank's share, and the relations to act on."""

    batch: int
    epoch: int
    rows: tuple[str, ...]
    ranks: tuple[int, ...]
    mask: dict[str, list[Entry]] = field(default_factory=dict)
    positives: dict[str, list[Entry]] = field(default_factory=dict)

    def to_json(self) -> str:
        record: dict[str, Any] = {"batch": self.batch, "epoch": self.epoch, "rows": list(self.rows)}
        record["ranks"] = list(self.ranks)
        for key, value in (("mask", self.mask), ("positives", self.positives)):
            if value:
                record[key] = {d: [_entry_json(e, d) for e in entries] for d, entries in value.items() if entries}
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _entry_json(entry: Entry, direction: str) -> list[Any]:
    a, c, role = entry
    return [a, c] if role == default_role(direction) else [a, c, role]


@dataclass(frozen=True)
class Manifest:
    header: dict[str, Any]
    batches: list[ManifestBatch]
    path: str = "<manifest>"

    @property
    def strategy(self) -> str:
        return str(self.header["strategy"])

    @property
    def world_size(self) -> int:
        return int(self.header["plan"]["world_size"])

    @property
    def epochs(self) -> int:
        return int(self.header["plan"]["epochs"])

    @property
    def directions(self) -> tuple[str, ...]:
        return tuple(self.header["loss"]["directions"])

    @property
    def fingerprint(self) -> str:
        return str(self.header["fingerprint"])

    def render(self) -> str:
        lines = [json.dumps(self.header, ensure_ascii=False, separators=(",", ":"), sort_keys=False)]
        lines.extend(b.to_json() for b in self.batches)
        return "\n".join(lines) + "\n"


def is_manifest_header(record: Any) -> bool:
    return isinstance(record, dict) and record.get("kind") == KIND


def read_manifest(path: str | Path) -> Manifest:
    """Read and check a manifest; every problem is an ``InputError`` with its line."""
    from contrast_audit.plan.planfile import json_records

    name = str(path)
    header: dict[str, Any] | None = None
    batches: list[ManifestBatch] = []
    records = json_records(name, what="manifest", fix="pass a manifest written by contrast-audit manifest")
    for number, record in records:
        if header is None:
            if not is_manifest_header(record):
                raise InputError(
                    name,
                    f'the first line is not a manifest header (no "kind": "{KIND}")',
                    line=number,
                    fix="pass a manifest written by contrast-audit manifest (a plain plan goes to scan --plan)",
                )
            _check_header(name, number, record)
            header = record
            continue
        batches.append(_parse_batch(name, number, record, header))
    if header is None:
        raise InputError(name, "is empty", fix="regenerate the manifest")
    if not batches:
        raise InputError(name, "holds no batches", fix="regenerate the manifest")
    return Manifest(header, batches, name)


def _check_header(path: str, line: int, header: dict[str, Any]) -> None:
    version = header.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            path,
            f"manifest schema version {version!r} is not supported (this contrast-audit reads {SCHEMA_VERSION!r})",
            line=line,
            fix="regenerate the manifest with this version of contrast-audit",
        )
    for key in ("strategy", "fingerprint", "plan", "loss"):
        if key not in header:
            raise InputError(path, f"manifest header lacks '{key}'", line=line, fix="regenerate the manifest")
    if header["strategy"] not in STRATEGIES:
        raise InputError(
            path, f"unknown strategy {header['strategy']!r}", line=line, fix=f"one of {', '.join(STRATEGIES)}"
        )


def _parse_batch(path: str, line: int, record: Any, header: dict[str, Any]) -> ManifestBatch:
    def bad(message: str) -> InputError:
        return InputError(path, message, line=line, fix="regenerate the manifest")

    if not isinstance(record, dict) or not isinstance(record.get("rows"), list) or not record["rows"]:
        raise bad("a batch line needs a non-empty 'rows' list")
    rows = tuple(r if isinstance(r, str) else str(r) for r in record["rows"])
    if len(set(rows)) != len(rows):
        raise bad("a row id appears twice in one batch")
    ranks = record.get("ranks", [len(rows)])
    if not isinstance(ranks, list) or not all(isinstance(r, int) and r >= 0 for r in ranks) or sum(ranks) != len(rows):
        raise bad("'ranks' must be non-negative sizes that add up to the batch's rows")
    epoch = record.get("epoch", 0)
    batch = record.get("batch", 0)
    if not isinstance(epoch, int) or epoch < 0 or not isinstance(batch, int):
        raise bad("'batch' and 'epoch' must be non-negative integers")
    relations: dict[str, dict[str, list[Entry]]] = {}
    for key in ("mask", "positives"):
        value = record.get(key, {})
        if not isinstance(value, dict):
            raise bad(f"'{key}' must be an object keyed by direction")
        parsed: dict[str, list[Entry]] = {}
        for direction, entries in value.items():
            if direction not in DIRECTIONS:
                raise bad(f"unknown direction {direction!r} in '{key}'")
            if not isinstance(entries, list):
                raise bad(f"'{key}.{direction}' must be a list of [anchor, candidate(, role)] entries")
            out: list[Entry] = []
            for entry in entries:
                if (
                    not isinstance(entry, list)
                    or len(entry) not in (2, 3)
                    or not all(isinstance(x, int) and 0 <= x < len(rows) for x in entry[:2])
                    or (len(entry) == 3 and not _valid_role(entry[2], direction))
                ):
                    raise bad(f"bad entry {entry!r} in '{key}.{direction}'")
                out.append((entry[0], entry[1], entry[2] if len(entry) == 3 else default_role(direction)))
            parsed[direction] = out
        relations[key] = parsed
    return ManifestBatch(batch, epoch, rows, tuple(ranks), relations["mask"], relations["positives"])


def _valid_role(role: Any, direction: str) -> bool:
    if not isinstance(role, str):
        return False
    if direction.endswith("_to_query"):
        return role == "anchor"
    return role == "positive" or (role.startswith("negative_") and role[9:].isdigit() and int(role[9:]) >= 1)


def check_fingerprint(manifest: Manifest, rows: pl.DataFrame, data_label: str) -> None:
    """Refuse a manifest planned for other data."""
    actual = data_fingerprint(rows)
    if actual != manifest.fingerprint:
        raise InputError(
            manifest.path,
            f"was planned for other data: its fingerprint is {manifest.fingerprint}, but {data_label} "
            f"({rows.height} rows) has {actual}",
            fix="regenerate the manifest for this data (contrast-audit manifest DATA ...) or pass the data it was made for",
        )


__all__ = [
    "KIND",
    "SCHEMA_VERSION",
    "STRATEGIES",
    "Manifest",
    "ManifestBatch",
    "check_fingerprint",
    "data_fingerprint",
    "default_role",
    "is_manifest_header",
    "read_manifest",
]
