"""Load pair files in chunks of rows, with the rows, errors and skipped-row records of ``load_rows``.

``iter_row_chunks`` yields ``RowChunk``s whose ``rows`` concatenate to exactly ``load_rows(...).rows``;
once iterated to the end, the ``ChunkedLoad`` it returns holds the ``files``, ``mappings``, ``warnings``
and ``skipped`` of the ``LoadResult``. What is read how:

- JSON Lines files (``.jsonl``, ``.ndjson``, ``.json`` that is not one array) larger than one block are
  read in blocks of ``BLOCK_BYTES`` cut at line ends, twice: a first pass parses every block to learn the
  file's columns and their types (a key missing from a whole block, a column that is null in one block
  and text in another), so that the mapping and the types are the whole file's, as ``load_rows`` sees
  them; the second pass parses the blocks again and builds the rows. Memory is bounded by a block, not
  the file. A file that Arrow's reader does not take whole and block by block is read whole instead, as
  ``load_rows`` reads it: one with a line that is not a JSON object, a value of a type its column cannot
  hold (a float or boolean id, a number as anchor), deep nesting, a column whose type differs between
  blocks (an id that is a number in one block and a string in another), bytes that are not UTF-8, a
  compressed or UTF-16 file, or no line end before its end (one line, or CR-only line ends).
- Parquet files are read by record batches of ``rows_per_chunk`` rows (``pyarrow``), only the mapped
  columns; rows are numbered across batches.
- CSV/TSV files, JSON array files, standard input, FIFOs and files no larger than a block are read whole
  (``readers.read_raw``) and their rows cut into chunks.

Errors are those of ``load_rows``, raised where it raises them: a file's first bad row, then the first
repeated id (once every file is read: a ``--on-bad-row error`` or ``skip-empty`` load yields no chunk
after it finds one). When a Parquet file fails after some of its batches were read, the file is read
again whole to raise ``load_rows``' own error.

Where the result can differ: ``load_rows`` reads a JSON Lines file with Arrow in 64 MB blocks and, when
Arrow refuses a type change between its blocks that the blocks here accept (a column null, or lists of
nothing but nulls, in its first 64 MB and filled later), reads the file line by line; an id written
``-0`` then stays ``-0`` there and reads ``0`` here, and a bad row whose list holds only nulls is named
with another reason. And ``load_rows`` fails (a polars error) on a file whose anchor is null on every row
next to a file with rows, where the chunks here hold the other file's rows.

Repeated ids are found with a compact index of the ids seen so far: sorted runs of a 64-bit hash, a
second 32-bit hash to confirm a match, and each id's first location (file and line packed in 64 bits):
20 bytes a row, about 200 MB at 10 million rows. Ids within one chunk are compared exactly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from contrast_audit.config import ColumnMapping, NormaliseConfig
from contrast_audit.errors import InputError
from contrast_audit.io.load import (
    EMPTY_PROBLEM,
    BadRow,
    FileMapping,
    _canonical,
    _located,
    distinct_files,
    expand_paths,
    resolve_mapping,
)
from contrast_audit.io.readers import (
    COMPRESSED,
    KEY,
    PARQUET_MAGIC,
    STDIN,
    STDIN_NAME,
    TEXT,
    TEXTS,
    RawTable,
    _is_stream,
    _json_types_ok,
    _read_jsonl,
    display_name,
    file_kind,
    read_raw,
)

BLOCK_BYTES = 64 << 20  # bytes of a JSON Lines file read at once (cut at the last line end)
ROWS_PER_CHUNK = 500_000
# Runs of the id index are merged while the merged run stays under this many ids (a merge copies its runs).
MERGE_ROWS = 1 << 20
_LINE_BITS = 40  # a location packs the file's index above the line (or row) number
_SEEDS = (0x5EED, 0xC0FFEE)


@dataclass
class RowChunk:
    """Canonical rows (the columns ``load_rows`` gives) and the bad rows found since the previous chunk:
    the reader's and the row checks' in file order, then the repeated ids skipped from these rows. The
    complete list, in ``load_rows``' order, is ``ChunkedLoad.skipped``."""

    rows: pl.DataFrame
    skipped: list[BadRow]


@dataclass
class _Piece:
    """Rows one read of a file gave (a block, a batch, or the whole file) and the bad rows it found."""

    frame: pl.DataFrame
    skipped: list[BadRow]


@dataclass
class _Settings:
    user: ColumnMapping
    on_bad_row: str
    norm: NormaliseConfig
    delimiter: str | None
    rows_per_chunk: int
    block_bytes: int


@dataclass
class ChunkedLoad:
    """An iterable of ``RowChunk``; iterated once. After the last chunk, ``files``, ``mappings``,
    ``warnings`` and ``skipped`` equal those of ``load_rows``' ``LoadResult``; ``complete`` says so."""

    _paths: list[Path]
    _settings: _Settings
    files: list[str] = field(default_factory=list)
    mappings: list[FileMapping] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    skipped: list[BadRow] = field(default_factory=list)
    complete: bool = False
    _started: bool = False

    def __iter__(self) -> Iterator[RowChunk]:
        if self._started:
            raise RuntimeError("a ChunkedLoad is iterated once; call iter_row_chunks again to read again")
        self._started = True
        return self._chunks()

    def _chunks(self) -> Iterator[RowChunk]:
        s = self._settings
        names = [display_name(p) for p in self._paths]
        seen = _SeenIds(names, s.on_bad_row)
        file_skipped: list[BadRow] = []
        pending: list[pl.DataFrame] = []
        pending_rows = 0
        pending_skipped: list[BadRow] = []
        empty: pl.DataFrame | None = None  # an empty frame of the rows' schema, for a last chunk of no rows
        total = 0
        offset = 0
        for index, path in enumerate(self._paths):
            reader = _FileReader(path, offset, s)
            for piece in reader.pieces():
                file_skipped.extend(piece.skipped)
                pending_skipped.extend(piece.skipped)
                frame, dropped = seen.check(piece.frame, index)
                pending_skipped.extend(dropped)
                if seen.error is not None:
                    pending, pending_rows = [], 0  # a repeated id will be raised: no more rows
                    continue
                if frame.height:
                    if empty is None:
                        empty = frame.clear()
                    pending.append(frame)
                    pending_rows += frame.height
                    total += frame.height
                while pending_rows >= s.rows_per_chunk:
                    rows, pending = _take(pending, s.rows_per_chunk)
                    pending_rows -= rows.height
                    yield RowChunk(rows, pending_skipped)
                    pending_skipped = []
            self.mappings.append(reader.mapping)
            offset += reader.rows_read
        seen.raise_error()
        self.skipped = file_skipped + seen.skipped
        if total == 0:
            first = (
                f" ({len(self.skipped)} skipped; first: {self.skipped[0].location()}, {self.skipped[0].reason})"
                if self.skipped
                else ""
            )
            raise InputError(
                str(self._paths[0]), f"no valid rows left after skipping bad rows{first}", fix="fix the input"
            )
        self.files = [STDIN_NAME if str(f) == STDIN else str(f) for f in self._paths]
        bad_empty = [b for b in self.skipped if re.search(EMPTY_PROBLEM, b.reason)]
        if bad_empty and s.on_bad_row == "skip-empty":
            n = len(bad_empty)
            self.warnings.append(
                f"{n} row{'s' if n != 1 else ''} skipped because a text is empty or nothing but punctuation or "
                f"invisible characters (first: {bad_empty[0].location()}, {bad_empty[0].reason}); the report lists "
                "each, and --on-bad-row error stops at them instead"
            )
        self.complete = True
        if pending or pending_skipped:
            rows = pl.concat(pending).rechunk() if pending else empty
            yield RowChunk(rows, pending_skipped)


def iter_row_chunks(
    patterns: list[str],
    user: ColumnMapping,
    on_bad_row: str = "skip-empty",
    normalise: NormaliseConfig | None = None,
    delimiter: str | None = None,
    rows_per_chunk: int = ROWS_PER_CHUNK,
    *,
    block_bytes: int = BLOCK_BYTES,
) -> ChunkedLoad:
    """``load_rows`` in chunks of at most ``rows_per_chunk`` rows (the last may be smaller). The files are
    found (and a missing one reported) now; they are read as the chunks are iterated."""
    if rows_per_chunk < 1:
        raise ValueError(f"rows_per_chunk must be at least 1, not {rows_per_chunk}")
    if block_bytes < 1:
        raise ValueError(f"block_bytes must be at least 1, not {block_bytes}")
    files, warnings = distinct_files(expand_paths(patterns))
    settings = _Settings(user, on_bad_row, normalise or NormaliseConfig(), delimiter, rows_per_chunk, block_bytes)
    return ChunkedLoad(files, settings, warnings=warnings)


def _take(frames: list[pl.DataFrame], n: int) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
    """The first ``n`` rows of ``frames`` as one frame, and the frames left."""
    combined = pl.concat(frames) if len(frames) > 1 else frames[0]
    head, rest = combined.slice(0, n).rechunk(), combined.slice(n)
    return head, [rest] if rest.height else []


# --- one file ---------------------------------------------------------------------------------------


class _FileReader:
    """The pieces of one file, read as its format allows; ``mapping`` and ``rows_read`` (the rows the file
    holds, skipped ones included, which default ids count) are set once the pieces are read."""

    def __init__(self, path: Path, offset: int, settings: _Settings) -> None:
        self.path = path
        self.offset = offset
        self.s = settings
        self.mapping: FileMapping | None = None
        self.rows_read = 0

    def column_kinds(self, columns: list[str]) -> dict[str, str]:
        m = resolve_mapping(str(self.path), columns, self.s.user)
        keys = [c for c in (m.id, m.source, m.cohort, m.group) if c is not None]
        return {**dict.fromkeys(keys, KEY), m.positive: TEXTS, **dict.fromkeys(m.negatives, TEXTS), m.anchor: TEXT}

    def pieces(self) -> Iterator[_Piece]:
        kind = self._kind()
        if kind == "jsonl":
            survey = self._survey_jsonl()
            if survey is not None:
                yield from self._jsonl_blocks(survey)
                return
        elif kind == "parquet":
            parquet = self._open_parquet()
            if parquet is not None:
                try:
                    yield from self._parquet_batches(parquet)
                except InputError as exc:
                    self._whole()  # raises load_rows' error for this file (a later batch may fail first)
                    raise exc from None
                return
        yield self._whole()

    def _kind(self) -> str | None:
        if _is_stream(self.path):
            return None
        try:
            return file_kind(self.path)
        except InputError:
            return None

    def _whole(self) -> _Piece:
        """The file read whole, as ``load_rows`` reads it."""
        path, s = self.path, self.s
        raw = read_raw(path, s.on_bad_row, self.column_kinds, s.delimiter)
        self.mapping = resolve_mapping(raw.path, raw.frame.columns, s.user)
        skipped = [
            BadRow(str(path), where, None, reason) if raw.lines is not None else BadRow(str(path), None, where, reason)
            for where, reason in raw.skipped
        ]
        frame, bad = _canonical(raw, self.mapping, self.offset, s.on_bad_row, s.norm)
        self.rows_read = raw.frame.height + len(raw.skipped)
        return _Piece(frame, skipped + bad)

    # --- JSON Lines in blocks

    def _survey_jsonl(self) -> _Survey | None:
        """The file's columns, their types over all blocks and its mapping; None when the file must be read
        whole (see the module docstring)."""
        path = self.path
        try:
            if path.stat().st_size <= self.s.block_bytes:
                return None
        except OSError:
            return None
        schema: dict[str, pl.DataType] = {}
        for number, (first_line, data) in enumerate(_blocks(path, self.s.block_bytes)):
            if number == 0 and (_odd_start(data) or not data.endswith(b"\n")):
                return None  # a binary, compressed or UTF-16 file, or no line end before the end
            text = _decode_block(data, number == 0)
            if text is None:
                return None
            if number == 0 and path.suffix.lower() == ".json" and text.lstrip().startswith("["):
                return None
            if not text.strip():
                continue
            try:
                raw = _read_jsonl(path, text, "error", lambda _columns: {}, first_line)
            except InputError:
                return None
            if raw.index is not None:
                return None  # Arrow's reader refused the block: read the file line by line, whole
            for name, dtype in raw.frame.schema.items():
                unified = _unify(schema.get(name), dtype)
                if unified is None:
                    return None
                schema[name] = unified
        if not schema:
            return None
        columns = list(schema)
        try:
            mapping = resolve_mapping(str(path), columns, self.s.user)
            kinds = self.column_kinds(columns)
        except InputError:
            return None
        if not _json_types_ok(pl.DataFrame(schema=schema), kinds):
            return None
        return _Survey(mapping, kinds, {name: schema[name] for name in kinds})

    def _jsonl_blocks(self, survey: _Survey) -> Iterator[_Piece]:
        self.mapping = survey.mapping
        path, s = self.path, self.s
        rows = 0
        for number, (first_line, data) in enumerate(_blocks(path, s.block_bytes)):
            text = data.decode("utf-8-sig" if number == 0 else "utf-8")
            if not text.strip():
                continue
            raw = _read_jsonl(path, text, s.on_bad_row, lambda _columns: survey.kinds, first_line)
            if raw.index is not None or raw.skipped:  # the first pass read this block with Arrow
                raise RuntimeError(f"{path}: block at line {first_line} changed between two reads")
            frame = _conform(raw.frame, survey.types)
            height = frame.height
            block = RawTable(raw.path, raw.kind, frame, raw.lines, [], np.arange(rows, rows + height, dtype=np.int64))
            out, bad = _canonical(block, survey.mapping, self.offset, s.on_bad_row, s.norm)
            rows += height
            yield _Piece(out, bad)
        self.rows_read = rows

    # --- Parquet in batches

    def _open_parquet(self) -> tuple[object, FileMapping] | None:
        import pyarrow.parquet as pq

        try:
            with open(self.path, "rb") as fh:
                if fh.read(len(PARQUET_MAGIC)) != PARQUET_MAGIC:
                    return None
            parquet = pq.ParquetFile(self.path)
            if parquet.metadata.num_rows == 0:
                return None
            mapping = resolve_mapping(str(self.path), parquet.schema_arrow.names, self.s.user)
        except Exception:  # noqa: BLE001 - any failure: read_raw reads the file and reports it
            return None
        return parquet, mapping

    def _parquet_batches(self, opened: tuple[object, FileMapping]) -> Iterator[_Piece]:
        parquet, mapping = opened
        self.mapping = mapping
        s = self.s
        names = [mapping.anchor, mapping.positive, *mapping.negatives]
        names += [c for c in (mapping.id, mapping.source, mapping.cohort, mapping.group) if c]
        start = 0
        batches = parquet.iter_batches(batch_size=s.rows_per_chunk, columns=list(dict.fromkeys(names)))  # type: ignore[attr-defined]
        while True:
            try:
                batch = next(batches, None)
                if batch is None:
                    break
                frame = pl.from_arrow(batch)
            except Exception as exc:  # noqa: BLE001 - pyarrow and polars raise several types for corrupt files
                raise InputError(
                    str(self.path), f"cannot be read as Parquet ({exc})", fix="re-export the file"
                ) from exc
            assert isinstance(frame, pl.DataFrame)
            height = frame.height
            raw = RawTable(str(self.path), "parquet", frame, None, [], np.arange(start, start + height, dtype=np.int64))
            out, bad = _canonical(raw, mapping, self.offset, s.on_bad_row, s.norm)
            start += height
            yield _Piece(out, bad)
        self.rows_read = start


@dataclass
class _Survey:
    mapping: FileMapping
    kinds: dict[str, str]
    types: dict[str, pl.DataType]  # each mapped column's type over the whole file


def _blocks(path: Path, block_bytes: int) -> Iterator[tuple[int, bytes]]:
    """(number of the first line, bytes) of each block of a file: about ``block_bytes`` each, cut after the
    last line end in them (a longer line makes a longer block); the last block may lack a line end."""
    line = 1
    parts: list[bytes] = []
    with open(path, "rb") as fh:
        while data := fh.read(block_bytes):
            cut = data.rfind(b"\n")
            if cut < 0:
                parts.append(data)
                continue
            block = b"".join([*parts, data[: cut + 1]])
            parts = [data[cut + 1 :]]
            yield line, block
            line += block.count(b"\n")
    rest = b"".join(parts)
    if rest:
        yield line, rest


def _odd_start(data: bytes) -> bool:
    """Whether a file starts like no UTF-8 text: compressed, UTF-16 or Parquet (``read_raw`` says which)."""
    starts = [magic for magic, _, _ in COMPRESSED] + [b"\xff\xfe", b"\xfe\xff", PARQUET_MAGIC]
    return data.startswith(tuple(starts))


def _decode_block(data: bytes, first: bool) -> str | None:
    """A block as text (the BOM dropped at the file's start); None for a NUL byte or bytes that are not
    UTF-8, which ``read_raw`` reports with the file's line."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError:
        return None


def _unify(known: pl.DataType | None, dtype: pl.DataType) -> pl.DataType | None:
    """The type of a column read as ``known`` in earlier blocks and ``dtype`` in this one, as Arrow's
    reader of the whole file infers it (null, and lists of nothing but nulls, take the other type); None
    when the blocks disagree."""
    if known is None or known == dtype or known == pl.Null:
        return dtype
    if dtype == pl.Null:
        return known
    if isinstance(known, pl.List) and isinstance(dtype, pl.List):
        if dtype == pl.List(pl.Null):
            return known
        if known == pl.List(pl.Null):
            return dtype
    return None


def _conform(frame: pl.DataFrame, types: dict[str, pl.DataType]) -> pl.DataFrame:
    """A block's mapped columns with the whole file's types: a column missing from the block is null, and
    one null (or all empty lists) in the block takes the type it has in the file."""
    return frame.select(
        (pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype)).alias(name)
        for name, dtype in types.items()
    )


# --- repeated ids -----------------------------------------------------------------------------------


class _SeenIds:
    """The ids of the rows so far, to find repeats across chunks as ``load_rows``' ``_check_ids`` does:
    under ``skip`` a later repeat is dropped (``skipped``); otherwise ``error`` keeps the repeat that
    ``load_rows`` reports (of the id whose first row comes first) for ``raise_error``."""

    def __init__(self, names: list[str], on_bad_row: str) -> None:
        self.names = names
        self.on_bad_row = on_bad_row
        self.runs: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (hash, check hash, location), sorted
        self.skipped: list[BadRow] = []
        self.error: tuple[tuple[int, int], str, int, str, int] | None = None

    def check(self, frame: pl.DataFrame, file_index: int) -> tuple[pl.DataFrame, list[BadRow]]:
        """``frame`` without the rows that repeat an earlier id under ``skip``, and their bad-row records."""
        n = frame.height
        if n == 0:
            return frame, []
        ids = frame.get_column("id")
        lines = frame.get_column("line").to_numpy().astype(np.int64)
        if lines.size and int(lines.max()) >= 1 << _LINE_BITS:
            raise InputError(self.names[file_index], "has too many lines to check its ids", fix="split the file")
        keys = ids.hash(seed=_SEEDS[0]).to_numpy()
        checks = (ids.hash(seed=_SEEDS[1]).to_numpy() >> np.uint64(32)).astype(np.uint32)
        earlier = self._lookup(keys, checks)  # location of an earlier chunk's row with the id, or -1
        here = np.int64(file_index) << np.int64(_LINE_BITS) | lines
        # The position in this chunk of each id's first row.
        first_in_chunk = (
            frame.select("id").with_row_index("i").select(pl.col("i").min().over("id")).to_series().to_numpy()
        )
        repeat = (earlier >= 0) | (first_in_chunk != np.arange(n))
        new = ~repeat
        self._add(keys[new], checks[new], here[new])
        if not repeat.any():
            return frame, []
        first_at = np.where(earlier >= 0, earlier, here[first_in_chunk])
        rows = np.flatnonzero(repeat)
        if self.on_bad_row == "skip":
            bad = [
                BadRow(self.names[file_index], int(lines[i]), None, f"id '{ids[int(i)]}' repeats an earlier row's id")
                for i in rows
            ]
            self.skipped.extend(bad)
            return frame.filter(pl.Series(new)), bad
        for i in rows:
            where = int(first_at[i])
            ident = ids[int(i)]
            order = (where, _explode_position(ident))
            if self.error is None or order < self.error[0]:
                self.error = (order, ident, where, self.names[file_index], int(lines[i]))
        return frame, []

    def raise_error(self) -> None:
        if self.error is None:
            return
        _, ident, where, file, line = self.error
        first_file = self.names[where >> _LINE_BITS]
        first, _ = _located(first_file, where & ((1 << _LINE_BITS) - 1))
        _, second = _located(file, line)
        raise InputError(
            file,
            f"id '{ident}' repeats the id of {first}",
            **second,
            fix="ids must be unique: fix the id column, or drop --id to number rows instead",
        )

    def _lookup(self, keys: np.ndarray, checks: np.ndarray) -> np.ndarray:
        found = np.full(keys.size, -1, dtype=np.int64)
        for run_keys, run_checks, run_where in self.runs:
            left = np.searchsorted(run_keys, keys, side="left")
            right = np.searchsorted(run_keys, keys, side="right")
            for i in np.flatnonzero((right > left) & (found < 0)):
                for j in range(left[i], right[i]):  # more than one only when two ids share a 64-bit hash
                    if run_checks[j] == checks[i]:
                        found[i] = run_where[j]
                        break
        return found

    def _add(self, keys: np.ndarray, checks: np.ndarray, where: np.ndarray) -> None:
        if keys.size == 0:
            return
        order = np.lexsort((checks, keys))
        self.runs.append((keys[order], checks[order], where[order]))
        while len(self.runs) > 1:
            a, b = self.runs[-2], self.runs[-1]
            if a[0].size + b[0].size > MERGE_ROWS or a[0].size > 2 * b[0].size:
                break
            merged = tuple(np.concatenate((x, y)) for x, y in zip(a, b, strict=True))
            order = np.lexsort((merged[1], merged[0]))
            self.runs[-2:] = [(merged[0][order], merged[1][order], merged[2][order])]


def _explode_position(ident: str) -> int:
    """The ``k`` of an id ``base#k`` (rows of one line, one per positive, come in ``k`` order). Only the
    loader writes ``#k`` with more than one row per line, a small ASCII number; any other ending (``#²``,
    ``#`` and 5,000 digits, which ``int()`` refuses) is an id of one row, whose position is 0."""
    _, sep, k = ident.rpartition("#")
    if not (sep and k.isascii() and k.isdecimal()) or len(k) > 18:  # not isdigit(): "²" passes it
        return 0
    return int(k)
