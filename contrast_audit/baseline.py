"""``--baseline REPORT.json``: only what the rows new since an earlier JSON report bring is counted, so
a data set that grows (rows appended, inserted or moved) passes the gate when its new rows bring
nothing, whatever batches the new row count re-plans.

A row is named by its content, not its id or line: ``row_hash`` is a 64-bit digest (16 hex digits) of
its normalised texts in role order (anchor, positive, negative_1…) and its group. The JSON report lists
the hash of every row (``input.row_hashes``); a row is *old* when the baseline holds its hash, counted
as a multiset in row order (a baseline with one row of some content makes the first row with that
content old and a second copy new). Then:

- an in-batch finding counts (is new) when its anchor's or its candidate's row is new; a finding
  between two old rows is in the baseline, whether or not the baseline's batches paired them;
- a mislabelled negative counts when its row is new;
- an overlap or leak counts when its row is new; an old row's overlap counts only when the matched
  reference row is not one of the scanned rows and the baseline lacks the match (same role, target
  kind, target role and both texts' hashes): reference data that changed, such as a new eval row.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from contrast_audit.errors import InputError
from contrast_audit.io.readers import STDIN, read_bytes

if TYPE_CHECKING:
    from contrast_audit.corpus import Corpus

OVERLAP_KEY = ("role", "target", "target_role", "text_hash", "target_text_hash")

_SEED = np.uint64(0x636F6E7472617374)  # "contrast"


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def hash_ints(texts: pl.Series) -> np.ndarray:
    """The first 8 bytes of each string's SHA-256 as uint64 (the 16 hex digits of ``text_hashes``)."""
    import hashlib

    return np.array(
        [int.from_bytes(hashlib.sha256(t.encode("utf-8")).digest()[:8], "big") for t in texts.to_list()],
        dtype=np.uint64,
    )


def row_hashes(norms: pl.Series, tids: np.ndarray, groups: pl.Series) -> pl.Series:
    """Each row's content hash (16 hex digits): ``tids`` is rows × (anchor, positive, negatives…) text
    ids into ``norms`` (the normalised texts), -1 where a row has fewer negatives; ``groups`` the rows'
    group values (null: none)."""
    return hex_hashes(row_hash_values(norms, tids, groups))


def corpus_row_hashes(corpus: Corpus) -> pl.Series:
    """:func:`row_hashes` of every row of an in-memory corpus."""
    tids = np.concatenate([corpus.anchor[:, None], corpus.positive[:, None], corpus.negatives], axis=1)
    return row_hashes(corpus.texts.get_column("norm"), tids, corpus.rows.get_column("group"))


def hex_hashes(values: np.ndarray) -> pl.Series:
    """uint64 row hashes as the 16 hex digits reports and baselines carry."""
    parts = [pl.Series("row_hash", [], dtype=pl.String)]
    for lo in range(0, values.shape[0], _HEX_PER_PART):  # in parts: the numpy text arrays are 4 bytes a character
        part = values[lo : lo + _HEX_PER_PART]
        hexed = np.frombuffer(part.astype(">u8").tobytes().hex().encode("ascii"), dtype="S16").astype("U16")
        parts.append(pl.Series("row_hash", hexed, dtype=pl.String))
    return pl.concat(parts)


_HEX_PER_PART = 1 << 20


def row_hash_values(norms: pl.Series, tids: np.ndarray, groups: pl.Series) -> np.ndarray:
    """:func:`row_hashes` as uint64 (a row's hash depends on that row alone: rows can be hashed in parts)."""
    n = tids.shape[0]
    text = hash_ints(norms)
    values = (
        np.where(tids >= 0, text[np.maximum(tids, 0)], np.uint64(0)) if text.size else np.zeros(tids.shape, np.uint64)
    )
    group_values = groups.cast(pl.String)
    distinct = group_values.drop_nulls().unique().sort()
    group = np.zeros(n, dtype=np.uint64)
    if distinct.len():
        codes = group_values.replace_strict(distinct, pl.Series(np.arange(distinct.len())), default=-1).to_numpy()
        digests = hash_ints(distinct)
        group = np.where(codes >= 0, digests[np.maximum(codes, 0)], np.uint64(0))
    h = np.full(n, _SEED, dtype=np.uint64)
    with np.errstate(over="ignore"):
        # A slot a row does not fill leaves the hash alone: the same row hashes the same whatever the
        # widest row of its data (how many negative columns the other rows have).
        for slot, column in enumerate(values.T):
            h = np.where(tids[:, slot] >= 0, _mix(h ^ _mix(column + np.uint64(slot + 1))), h)
        h = _mix(h ^ _mix(group + np.uint64(0xFFFF)))
    return h


def first_bad_hash(hashes: list[str]) -> int | None:
    """The position of the first item that is not exactly 16 hex digits (``0-9``, ``a-f``, ``A-F``), or
    None. ``bytes.fromhex`` alone would take spaces between digits (``"0123 4567 89ab cd"``)."""
    if not hashes:
        return None
    ok = pl.Series(hashes, dtype=pl.String).str.contains(r"^[0-9a-fA-F]{16}$")
    return None if ok.all() else int(ok.arg_min())


def from_hex(hashes: list[str]) -> np.ndarray:
    """Row hashes (16 hex digits each) as uint64; ValueError for anything else."""
    if first_bad_hash(hashes) is not None:
        raise ValueError("a row hash is not 16 hex digits")
    return np.frombuffer(bytes.fromhex("".join(hashes)), dtype=">u8").astype(np.uint64)


@dataclass(frozen=True)
class Baseline:
    """An earlier report's row hashes (a multiset) and the keys of its overlaps."""

    path: str
    row_hashes: np.ndarray  # uint64, one per baseline row
    overlaps: pl.DataFrame

    def new_rows(self, hashes: pl.Series) -> np.ndarray:
        """Which rows (their hashes in row order) the baseline lacks: of the rows sharing a hash, as many
        as the baseline holds are old, the first ones in row order."""
        now = from_hex(hashes.to_list())
        if now.size == 0:
            return np.zeros(0, dtype=bool)
        # Each row's occurrence among the rows of its hash (0 for the first), by a stable sort.
        order = np.argsort(now, kind="stable")
        ordered = now[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        sizes = np.diff(np.r_[starts, ordered.size])
        occurrence = np.empty(now.size, dtype=np.int64)
        occurrence[order] = np.arange(now.size) - np.repeat(starts, sizes)
        # How many rows of each hash the baseline holds.
        kept, counts = np.unique(self.row_hashes, return_counts=True)
        held = np.zeros(now.size, dtype=np.int64)
        if kept.size:
            at = np.minimum(np.searchsorted(kept, now), kept.size - 1)
            hit = kept[at] == now
            held[hit] = counts[at[hit]]
        return occurrence >= held

    def mark_overlaps(self, table: pl.DataFrame, row_new: np.ndarray, target_scanned: np.ndarray) -> pl.Series:
        """``baseline`` flags of overlaps (``table`` holds ``OVERLAP_KEY``): see the module's rules."""
        if table.height == 0:
            return pl.Series("baseline", [], dtype=pl.Boolean)
        held = (
            table.select(OVERLAP_KEY)
            .with_row_index("_i")
            .join(self.overlaps.with_columns(pl.lit(True).alias("_hit")), on=list(OVERLAP_KEY), how="left")
            .unique("_i", keep="first")
            .sort("_i")
            .get_column("_hit")
            .fill_null(False)
            .to_numpy()
        )
        return pl.Series("baseline", ~row_new & (target_scanned | held), dtype=pl.Boolean)


def read_baseline(path: str | Path, schema_version: str) -> Baseline:
    """Read a JSON report written by ``scan --format json``; exit 2 when it is not one of this
    schema version."""
    where = str(path)
    fix = "regenerate it on the base commit: contrast-audit scan ... --format json --output baseline.json"
    if where == STDIN:
        raise InputError(
            where, "a baseline is read from a file, not standard input", fix="save the report and pass its path"
        )
    if not os.path.exists(path):
        raise InputError(where, "baseline report not found", fix="check the --baseline path")
    # As data files are read: a device or a directory is refused, a FIFO nobody writes to is not waited on.
    raw = read_bytes(Path(path), fix="pass the JSON report of an earlier scan (--baseline REPORT.json)")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise InputError(where, "baseline is nested too deeply to be a JSON report", fix=fix) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(where, f"baseline is not a readable JSON report ({exc})", fix=fix) from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise InputError(where, "baseline is not a contrast-audit JSON report (no schema_version)", fix=fix)
    if str(data["schema_version"]) != schema_version:
        raise InputError(
            where,
            f"baseline report has schema version {data['schema_version']!r}; this version reads {schema_version!r}",
            fix=fix,
        )
    hashes = data.get("input", {}).get("row_hashes") if isinstance(data.get("input"), dict) else None
    if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
        raise InputError(where, "baseline 'input.row_hashes' is missing or not a list of strings", fix=fix)
    bad = first_bad_hash(hashes)
    if bad is not None:
        shown = json.dumps(hashes[bad][:40] + ("…" if len(hashes[bad]) > 40 else ""), ensure_ascii=False)
        raise InputError(
            where,
            f"baseline 'input.row_hashes' item {bad} is {shown}, not 16 hex digits",
            fix=fix,
        )
    return Baseline(where, from_hex(hashes), _keys(where, data.get("overlaps", [])))


def _keys(where: str, items: Any) -> pl.DataFrame:
    schema = {k: pl.String for k in OVERLAP_KEY}
    if not isinstance(items, list):
        raise InputError(where, "baseline 'overlaps' is not a list", fix="pass a JSON report written by scan")
    rows = []
    for number, item in enumerate(items):
        if not isinstance(item, dict) or any(k not in item for k in OVERLAP_KEY):
            missing = [k for k in OVERLAP_KEY if not isinstance(item, dict) or k not in item]
            raise InputError(
                where,
                f"baseline 'overlaps' item {number} lacks {', '.join(missing)}",
                fix="pass a JSON report written by this version of contrast-audit scan",
            )
        rows.append({k: None if item[k] is None else str(item[k]) for k in OVERLAP_KEY})
    return pl.DataFrame(rows, schema=schema).unique()


def scanned_targets(rows: pl.DataFrame, overlaps: pl.DataFrame) -> np.ndarray:
    """Whether each overlap's matched reference row (``target_file``, ``target_line``) is one of the
    scanned ``rows`` (a file both scanned and given as reference data; paths compared resolved)."""
    if overlaps.height == 0:
        return np.zeros(0, dtype=bool)
    real = {f: os.path.realpath(f) for f in {*rows.get_column("file").unique().to_list()} if f}
    scanned = rows.select(
        pl.col("file").replace_strict(real, default=None, return_dtype=pl.String).alias("_f"),
        pl.col("line").cast(pl.Int64).alias("_l"),
        pl.lit(True).alias("_scanned"),
    ).unique(["_f", "_l"])
    targets = {f: os.path.realpath(f) for f in overlaps.get_column("target_file").unique().to_list() if f}
    joined = overlaps.select(
        pl.col("target_file").replace_strict(targets, default=None, return_dtype=pl.String).alias("_f"),
        pl.col("target_line").cast(pl.Int64).alias("_l"),
    ).join(scanned, on=["_f", "_l"], how="left", maintain_order="left")
    return joined.get_column("_scanned").fill_null(False).to_numpy()


def overlap_rows(rows: pl.DataFrame, overlaps: pl.DataFrame) -> np.ndarray:
    """The scanned row of each overlap, by its ``file`` and ``line`` (-1 when none matches)."""
    if overlaps.height == 0:
        return np.zeros(0, dtype=np.int64)
    index = rows.select(
        pl.col("file").cast(pl.String),  # categorical in a streamed corpus
        pl.col("line").cast(pl.Int64),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
    ).unique(["file", "line"], keep="first")
    joined = overlaps.select("file", pl.col("line").cast(pl.Int64)).join(
        index, on=["file", "line"], how="left", maintain_order="left"
    )
    return joined.get_column("_row").fill_null(-1).to_numpy()


__all__ = [
    "OVERLAP_KEY",
    "Baseline",
    "corpus_row_hashes",
    "overlap_rows",
    "read_baseline",
    "row_hashes",
    "scanned_targets",
]
