"""The manifest API the trainer reads: ``contrast_audit.plan.manifest`` when it is installed, else a
reader of the same JSON Lines contract (header line, then one line per global batch).

Roles are always explicit after reading: ``positive`` / ``negative_k`` for the document directions,
``anchor`` for the query directions.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from contrast_audit.errors import InputError

MANIFEST_KIND = "contrast-audit-manifest"
DEFAULT_ROLE = {
    "query_to_doc": "positive",
    "doc_to_doc": "positive",
    "query_to_query": "anchor",
    "doc_to_query": "anchor",
}

try:  # pragma: no cover - exercised once the planner's module is present
    from contrast_audit.plan.manifest import (  # type: ignore[import-not-found]
        Manifest,
        ManifestBatch,
        check_fingerprint,
        data_fingerprint,
        read_manifest,
    )
except ImportError:

    @dataclass(frozen=True)
    class ManifestBatch:
        """One global batch: row ids in gather order, rank slice sizes, masks and extra positives."""

        batch: int
        epoch: int
        rows: tuple[str, ...]
        ranks: tuple[int, ...]
        mask: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)
        positives: dict[str, list[tuple[int, int, str]]] = field(default_factory=dict)

    @dataclass(frozen=True)
    class Manifest:
        header: dict
        batches: list[ManifestBatch]

        @property
        def strategy(self) -> str:
            return str(self.header.get("strategy"))

        @property
        def world_size(self) -> int:
            return int(self.header.get("plan", {}).get("world_size", 1))

        @property
        def epochs(self) -> int:
            return int(self.header.get("plan", {}).get("epochs", 1))

        @property
        def directions(self) -> tuple[str, ...]:
            return tuple(self.header.get("loss", {}).get("directions", ["query_to_doc"]))

        @property
        def fingerprint(self) -> str:
            return str(self.header.get("fingerprint"))

    def _entries(path: str, line: int, value: object) -> dict[str, list[tuple[int, int, str]]]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise InputError(path, "'mask'/'positives' must be an object keyed by direction", line=line)
        out: dict[str, list[tuple[int, int, str]]] = {}
        for direction, entries in value.items():
            if direction not in DEFAULT_ROLE:
                raise InputError(path, f"unknown direction {direction!r}", line=line)
            parsed = []
            for entry in entries:
                if not isinstance(entry, list) or len(entry) not in (2, 3):
                    raise InputError(path, f"entry {entry!r} is not [anchor, candidate(, role)]", line=line)
                role = entry[2] if len(entry) == 3 else DEFAULT_ROLE[direction]
                parsed.append((int(entry[0]), int(entry[1]), str(role)))
            out[direction] = parsed
        return out

    def read_manifest(path: str | Path) -> Manifest:
        """Read a manifest file; a malformed line is an ``InputError`` naming ``file:line``."""
        path = str(path)
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InputError(path, f"cannot read the manifest ({exc.strerror})", fix="check the path") from exc
        if not lines:
            raise InputError(path, "empty manifest", fix="write it with `contrast-audit manifest`")
        try:
            header = json.loads(lines[0])
        except json.JSONDecodeError as exc:
            raise InputError(path, f"header is not JSON ({exc.msg})", line=1) from exc
        if not isinstance(header, dict) or header.get("kind") != MANIFEST_KIND:
            raise InputError(path, f"not a manifest (header 'kind' is not {MANIFEST_KIND!r})", line=1)
        batches = []
        for number, text in enumerate(lines[1:], 2):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"not JSON ({exc.msg})", line=number) from exc
            rows = tuple(str(r) for r in obj["rows"])
            batches.append(
                ManifestBatch(
                    batch=int(obj["batch"]),
                    epoch=int(obj.get("epoch", 0)),
                    rows=rows,
                    ranks=tuple(int(r) for r in obj.get("ranks", [len(rows)])),
                    mask=_entries(path, number, obj.get("mask")),
                    positives=_entries(path, number, obj.get("positives")),
                )
            )
        return Manifest(header=header, batches=batches)

    def data_fingerprint(rows: pl.DataFrame) -> str:
        """Content hash of the mapped columns (id, anchor, positive, negatives) in row order."""
        digest = hashlib.sha256()
        frame = rows.select(
            pl.col("id").cast(pl.String),
            pl.col("anchor"),
            pl.col("positive"),
            pl.col("negatives").list.join("\x1f").fill_null(""),
        )
        for column in frame.columns:
            digest.update(column.encode())
            for value in frame.get_column(column).to_list():
                text = "" if value is None else str(value)
                digest.update(len(text.encode()).to_bytes(8, "little"))
                digest.update(text.encode())
        return "sha256:" + digest.hexdigest()

    def check_fingerprint(manifest: Manifest, rows: pl.DataFrame, data_label: str) -> None:
        """Refuse a manifest planned for other data, naming both fingerprints."""
        actual = data_fingerprint(rows)
        if actual != manifest.fingerprint:
            raise InputError(
                data_label,
                f"the manifest was planned for other data (manifest fingerprint {manifest.fingerprint}, "
                f"data fingerprint {actual})",
                fix="rewrite the manifest for this data with `contrast-audit manifest`",
            )


__all__ = [
    "DEFAULT_ROLE",
    "MANIFEST_KIND",
    "Manifest",
    "ManifestBatch",
    "check_fingerprint",
    "data_fingerprint",
    "read_manifest",
]
