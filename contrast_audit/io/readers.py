"""Readers per file format. Each returns a ``RawTable``: every column the file has, plus where
each row came from (its physical line, or its row number for Parquet).

Bad bytes, bad syntax and files that are not what their extension says are reported here with
the line; problems with the values of mapped columns are found later, in ``io.load``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import select
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from contrast_audit.errors import InputError

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
}

PARQUET_MAGIC = b"PAR1"
STDIN = "-"  # the path that means standard input
STDIN_NAME = "<stdin>"  # how standard input is named in messages and reports
FIFO_WAIT_S = 10.0
# Lines with more opening brackets than this are parsed by Python's json, which reports nesting it
# cannot follow; Arrow's reader could exhaust the stack on them.
FAST_JSON_MAX_BRACKETS = 256  # how long a FIFO may stay without a writer before it is refused

# A \uD800-\uDFFF escape: half of a UTF-16 surrogate pair, valid JSON only as a pair.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")

# What a column's JSON values must be, as ``json_types`` names them: one text, a text or a list of texts
# (positives, negatives), or a key (id, source, cohort, group: a string, number or boolean, kept as written).
TEXT = "text"
TEXTS = "texts"
KEY = "key"
ColumnKinds = Callable[[list[str]], dict[str, str]]


class _Number(str):
    """A JSON number kept as the digits written (ids beyond int64 or float precision stay exact)."""


@dataclass
class RawTable:
    """A file's rows before mapping. ``lines`` holds each row's physical line (1-based) for text
    formats; for Parquet it is ``None`` and rows are located by number."""

    path: str
    kind: str
    frame: pl.DataFrame
    lines: np.ndarray | None
    # Rows the reader itself had to drop under --on-bad-row skip: (line, reason), or (row, reason)
    # when ``lines`` is None.
    skipped: list[tuple[int, str]]
    # Each kept row's 0-based position among the file's rows, counting the rows skipped above, so
    # that row numbers do not shift when a row is skipped; None means 0, 1, 2, ...
    index: np.ndarray | None = None

    def where(self, index: int) -> dict[str, int]:
        """``line=`` or ``row=`` keyword for ``InputError`` locating row ``index`` (0-based)."""
        if self.lines is None:
            return {"row": index + 1}
        return {"line": int(self.lines[index])}


def display_name(path: Path) -> str:
    """How a path is named in messages: ``<stdin>`` for ``-``."""
    return STDIN_NAME if str(path) == STDIN else str(path)


def sniff_kind(data: bytes) -> str:
    """The format of a stream without a file name (stdin, a FIFO): Parquet by its magic bytes, JSON
    Lines when the first non-blank character opens an object or array, TSV when the first line
    holds a tab, else CSV."""
    if data.startswith(PARQUET_MAGIC):
        return "parquet"
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if head in (b"{", b"["):
        return "jsonl"
    first = data.lstrip(b"\xef\xbb\xbf\r\n").split(b"\n", 1)[0]
    return "tsv" if b"\t" in first else "csv"


def _is_stream(path: Path) -> bool:
    if str(path) == STDIN:
        return True
    try:
        return not stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def file_kind(path: Path) -> str:
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise InputError(
            str(path),
            f"unsupported file type '{path.suffix or '(none)'}'",
            fix="use .jsonl, .ndjson, .json, .csv, .tsv or .parquet",
        )
    return kind


def read_raw(path: Path, on_bad_row: str, json_types: ColumnKinds, delimiter: str | None = None) -> RawTable:
    """Read one file into a ``RawTable``.

    ``json_types`` maps a file's column names to the kind of value each mapped column must hold (``TEXT``,
    ``TEXTS`` or ``KEY``); JSON values of any other type in those columns are reported with their line.
    """
    stream = _is_stream(path)
    data = read_bytes(path)
    name = Path(display_name(path))
    kind = sniff_kind(data) if stream and path.suffix.lower() not in FORMATS else file_kind(path)
    path = name
    if not data.strip():
        raise InputError(str(path), "file is empty", fix="pass a file with a header and at least one row")
    if kind == "parquet":
        return _read_parquet(path, data)
    if data.startswith(PARQUET_MAGIC):
        raise InputError(str(path), f"is a Parquet file, not {kind.upper()}", fix="rename it to .parquet")
    text = _decode(path, data)
    if "\r" in text and "\n" not in text:
        text = text.replace("\r", "\n")  # classic Mac line endings: CR alone ends a line
    if kind == "jsonl":
        return _read_jsonl(path, text, on_bad_row, json_types)
    return _read_delimited(path, text, kind, on_bad_row, delimiter)


DATA_FIX = "pass a file, or pipe the data in (... | contrast-audit scan -)"


def read_bytes(path: Path, fix: str = DATA_FIX) -> bytes:
    """The whole file, standard input (``-``) or FIFO; a FIFO nobody writes to is refused, not waited
    on forever, and so is a device, a socket or a directory (``fix`` says what to pass instead). Any
    input read whole goes through here (data files, ``--baseline`` reports)."""
    if str(path) == STDIN:
        if sys.stdin is None or sys.stdin.isatty():
            raise InputError(
                STDIN_NAME,
                "standard input is a terminal, not data",
                fix="pipe the data in: ... | contrast-audit scan -",
            )
        try:
            mode = os.fstat(sys.stdin.fileno()).st_mode
        except (OSError, ValueError, io.UnsupportedOperation):
            mode = stat.S_IFIFO  # a stream without a descriptor (tests, embedding): read as given
        _refuse_device(STDIN_NAME, mode, fix)
        return sys.stdin.buffer.read()
    try:
        mode = path.stat().st_mode
        if stat.S_ISFIFO(mode):
            return _read_fifo(path)
        _refuse_device(str(path), mode, fix)
        return path.read_bytes()
    except OSError as exc:
        raise InputError(
            str(path), f"cannot be read ({exc.strerror})", fix="check the path and its permissions"
        ) from exc


def _refuse_device(name: str, mode: int, fix: str = DATA_FIX) -> None:
    """Only regular files, FIFOs and pipes are data: a device (``/dev/zero``, ``/dev/urandom``) or a socket
    never ends, and reading one would run until memory runs out."""
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return
    if stat.S_ISDIR(mode):
        raise InputError(name, "is a directory, not a file", fix=fix)
    kind = (
        "a character device"
        if stat.S_ISCHR(mode)
        else "a block device"
        if stat.S_ISBLK(mode)
        else "a socket"
        if stat.S_ISSOCK(mode)
        else "not a regular file"
    )
    raise InputError(
        name,
        f"is {kind}, not a data file: reading it might never end",
        fix=fix,
    )


def _read_fifo(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        if not poller.poll(FIFO_WAIT_S * 1000):
            raise InputError(
                str(path),
                f"is a FIFO that no process wrote to within {FIFO_WAIT_S:g} s",
                fix="start the writer first, or pass a file",
            )
        os.set_blocking(fd, True)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# Compressed files by their magic bytes: (magic, name, the command that decompresses one to stdout).
COMPRESSED = (
    (b"\x1f\x8b", "gzip", "gzip -dc"),
    (b"\x28\xb5\x2f\xfd", "zstd", "zstd -dc"),
    (b"BZh", "bzip2", "bzip2 -dc"),
    (b"\xfd7zXZ\x00", "xz", "xz -dc"),
    (b"PK\x03\x04", "zip", "unzip -p"),
)


def _decode(path: Path, data: bytes) -> str:
    for magic, name, command in COMPRESSED:
        if data.startswith(magic) and (name != "bzip2" or data[3:4].isdigit()):
            raise InputError(
                str(path),
                f"is {name}-compressed, not text",
                fix=f"decompress it first, or pipe it in: {command} {path} | contrast-audit scan -",
            )
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(
            str(path),
            "is UTF-16 text",
            line=1,
            fix="re-encode the file as UTF-8 (for example: iconv -f utf-16 -t utf-8)",
        )
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise InputError(
            str(path),
            "contains NUL bytes: this is a binary file, not text",
            line=line,
            fix="check the file type; Parquet files need the .parquet extension",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(
            str(path),
            f"byte 0x{data[exc.start]:02x} at character {col} is not valid UTF-8",
            line=line,
            fix="re-encode the file as UTF-8 (for example: iconv -f latin1 -t utf-8)",
        ) from exc


decode_text = _decode  # for other readers of UTF-8 text files (eval's BEIR files)


def _split_lines(text: str, first_line: int = 1) -> tuple[list[str], np.ndarray]:
    """Non-blank lines (CRLF and CR-less endings accepted) and their 1-based line numbers; ``first_line``
    is the file's number of the text's first line (a block of a file read in blocks)."""
    series = pl.Series("line", text.split("\n"), dtype=pl.String).str.strip_suffix("\r")
    frame = pl.DataFrame({"line": series}).with_row_index("no", offset=first_line)
    kept = frame.filter(pl.col("line").str.strip_chars() != "")
    return kept.get_column("line").to_list(), kept.get_column("no").to_numpy().astype(np.int64)


def _read_jsonl(path: Path, text: str, on_bad_row: str, json_types: ColumnKinds, first_line: int = 1) -> RawTable:
    """A JSON Lines text, or one block of it cut at a line end: ``first_line`` is the file's number of the
    block's first line. The checks of a file's start (a JSON array, an object spread over several lines, a
    CSV header) apply to the block that starts the file (``first_line`` 1)."""
    import pyarrow as pa
    import pyarrow.json as pj

    lines, numbers = _split_lines(text, first_line)
    stripped = text.lstrip()
    starts_file = first_line == 1
    if starts_file and path.suffix.lower() in (".json", "") and stripped.startswith("["):
        return _read_json_array(path, stripped, on_bad_row, json_types)
    if starts_file and stripped.startswith("{") and lines and _spread_over_lines(lines[0], stripped):
        raise InputError(
            str(path),
            "holds a JSON object spread over several lines; each line must hold one whole object (JSON Lines), "
            "or the file one array of objects",
            line=int(numbers[0]),
            fix="write one object per line (jq -c . FILE > FILE.jsonl), or wrap the objects in [ ... ] in a .json file",
        )
    try:
        brackets = pl.Series("l", lines, dtype=pl.String).str.count_matches(r"[\[{]").max() if lines else 0
        if brackets is None or int(brackets) > FAST_JSON_MAX_BRACKETS:  # type: ignore[arg-type]
            raise ValueError("deeply nested values: read line by line")
        table = pj.read_json(
            io.BytesIO("\n".join(lines).encode("utf-8")),
            read_options=pj.ReadOptions(block_size=1 << 26),
        )
        frame = pl.from_arrow(table)
        if not isinstance(frame, pl.DataFrame) or frame.height != len(lines):
            raise ValueError("rows and lines disagree")
        if not _json_types_ok(frame, json_types(frame.columns)):
            raise ValueError("a text column holds values of another type")
        return RawTable(str(path), "jsonl", frame, numbers, [])
    except (pa.ArrowException, ValueError, TypeError, OverflowError, pl.exceptions.PolarsError):
        pass
    return _read_jsonl_slow(path, lines, numbers, on_bad_row, json_types, starts_file)


def _spread_over_lines(first: str, text: str) -> bool:
    """Whether the first line is not JSON on its own but opens an object that a later line closes
    (pretty-printed JSON, which JSON Lines cannot be)."""
    try:
        json.loads(first)
        return False
    except (ValueError, RecursionError):
        pass
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, dict) and "\n" in text[:end]


class _JSONProblem(Exception):
    """Valid JSON syntax that still cannot be read: nesting too deep, a lone surrogate."""

    def __init__(self, reason: str, fix: str, line_offset: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fix = fix
        self.line_offset = line_offset


def _loads(text: str) -> object:
    """``json.loads`` that reports nesting too deep for Python and lone UTF-16 surrogates
    (``"\\ud800"``, which no UTF-8 output can hold) as ``_JSONProblem``."""
    try:
        value = json.loads(text, parse_int=_Number, parse_float=_Number)
    except RecursionError:
        raise _JSONProblem(
            "nests arrays or objects too deeply to read", "flatten the value; texts must be strings"
        ) from None
    if _SURROGATE_ESCAPE.search(text) and _has_surrogate(value):
        at = _lone_surrogate_at(text)
        line = text.count("\n", 0, at)
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        raise _JSONProblem(
            f"holds a lone UTF-16 surrogate ({text[at : at + 6]}) at character {column}, which is not text",
            "write the character as a valid surrogate pair or drop it, or pass --on-bad-row skip",
            line,
        )
    return value


def _plain(value: object) -> object:
    """``value`` with JSON numbers as Python numbers again (for a column that is not mapped)."""
    if isinstance(value, _Number):
        return int(value) if value.lstrip("-").isdigit() and len(value) < 4000 else float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _has_surrogate(value: object) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _lone_surrogate_at(text: str) -> int:
    """Offset of the first \\uD800-\\uDFFF escape that is not part of a valid pair."""
    matches = list(_SURROGATE_ESCAPE.finditer(text))
    taken = -1
    for match in matches:
        start = match.start()
        if start <= taken:
            continue
        high = text[start + 3].lower() in "89ab"
        following = text[start + 6 : start + 12]
        if high and _SURROGATE_ESCAPE.fullmatch(following) and following[3].lower() in "cdef":
            taken = start + 6
            continue
        return start
    return matches[0].start() if matches else 0


def _json_types_ok(frame: pl.DataFrame, kinds: dict[str, str]) -> bool:
    """Whether Arrow read every mapped column as its kind allows, exactly: keys only as text or int64
    (a number Arrow read as a float may have lost digits; the line-by-line reader keeps them)."""
    for name, kind in kinds.items():
        if name not in frame.columns:
            continue
        dtype = frame.schema[name]
        if dtype == pl.Null or dtype == pl.String:
            continue
        if kind == TEXTS and (dtype == pl.List(pl.String) or dtype == pl.List(pl.Null)):
            continue
        if kind == KEY and dtype == pl.Int64:
            continue
        return False
    return True


def _read_jsonl_slow(
    path: Path,
    lines: list[str],
    numbers: np.ndarray,
    on_bad_row: str,
    json_types: ColumnKinds,
    starts_file: bool = True,
) -> RawTable:
    """Line-by-line parsing, used only when the fast reader refuses the file: it finds the exact
    line and reason, and under ``--on-bad-row skip`` keeps every good line. ``starts_file``: the
    lines begin the file (so a first line that looks like a CSV header is reported as one)."""
    records: list[dict] = []
    kept: list[int] = []
    positions: list[int] = []
    skipped: list[tuple[int, str]] = []
    for position, (number, line) in enumerate(zip(numbers.tolist(), lines, strict=True)):
        try:
            value = _loads(line)
        except _JSONProblem as problem:
            _bad(path, number, problem.reason, on_bad_row, skipped, problem.fix)
            continue
        except json.JSONDecodeError as exc:
            # json's own message can end in "starting at": the position follows once, not twice.
            reason = f"is not valid JSON ({exc.msg.removesuffix(' at')} at character {exc.colno})"
            if "\r" in line:
                reason += "; the line holds a bare carriage return (mixed line endings?)"
            looks_delimited = ("," in line or "\t" in line) and not line.lstrip().startswith(("{", "["))
            if starts_file and not records and not skipped and number == numbers[0] and looks_delimited:
                raise InputError(
                    str(path),
                    reason,
                    line=number,
                    fix="this looks like CSV/TSV: give the file a .csv or .tsv extension",
                ) from exc
            _bad(path, number, reason, on_bad_row, skipped, "fix the line or pass --on-bad-row skip")
            continue
        if not isinstance(value, dict):
            reason = f"is a JSON {type(value).__name__}, not an object"
            _bad(path, number, reason, on_bad_row, skipped, 'write one {"column": value, ...} object per line')
            continue
        records.append(value)
        kept.append(number)
        positions.append(position)
    if not records:
        raise InputError(str(path), "no valid rows", fix="check the file's format")
    columns = list(dict.fromkeys(key for record in records for key in record))
    kinds = json_types(columns)
    good = _check_types(path, records, kept, kinds, on_bad_row, skipped, by_row=False)
    records = [r for r, ok in zip(records, good, strict=True) if ok]
    numbers_kept = np.asarray(kept, dtype=np.int64)[good]
    frame = pl.DataFrame(
        {name: _column(records, name, kinds.get(name)) for name in columns},
        strict=False,
    )
    index = np.asarray(positions, dtype=np.int64)[good]
    return RawTable(str(path), "jsonl", frame, numbers_kept, skipped, index)


def _check_types(
    path: Path,
    records: list[dict],
    where: list[int],
    kinds: dict[str, str],
    on_bad_row: str,
    skipped: list[tuple[int, str]],
    by_row: bool,
) -> np.ndarray:
    """Which records hold the kind of value each mapped column needs: text (or, where allowed, lists of
    text), or for a key column a string, number or boolean."""
    good = np.ones(len(records), dtype=bool)
    for index, record in enumerate(records):
        for name, kind in kinds.items():
            value = record.get(name)
            if value is None or (isinstance(value, str) and not isinstance(value, _Number)):
                continue
            if kind == KEY and isinstance(value, (_Number, bool)):
                continue
            if kind == TEXTS and isinstance(value, list) and all(_is_text(v) or v is None for v in value):
                continue
            if kind == KEY:
                reason = f"column '{name}' is a JSON {_json_type(value)}, not a string or number"
                fix = f"write '{name}' as a string or number, or pass --on-bad-row skip"
            else:
                reason = f"column '{name}' is a JSON {_json_type(value)}, not text"
                fix = "make the value a string or pass --on-bad-row skip"
            _bad(path, where[index], reason, on_bad_row, skipped, fix, by_row=by_row)
            good[index] = False
            break
    return good


def _is_text(value: object) -> bool:
    return isinstance(value, str) and not isinstance(value, _Number)


def _column(records: list[dict], name: str, kind: str | None) -> pl.Series:
    values = [record.get(name) for record in records]
    if kind in (TEXT, TEXTS):
        if any(isinstance(v, list) for v in values):
            return pl.Series(
                name, [v if isinstance(v, list) or v is None else [v] for v in values], dtype=pl.List(pl.String)
            )
        return pl.Series(name, values, dtype=pl.String)
    if all(v is None or isinstance(v, (str, bool)) for v in values):
        # Numbers as written (_Number is a str); booleans as JSON writes them.
        return pl.Series(
            name,
            [None if v is None else ("true" if v else "false") if v is True or v is False else str(v) for v in values],
            dtype=pl.String,
        )
    return pl.Series(name, [None if v is None else json.dumps(_plain(v)) for v in values], dtype=pl.String)


def _json_type(value: object) -> str:
    return {bool: "boolean", int: "number", float: "number", _Number: "number", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _bad(
    path: Path, line: int, reason: str, on_bad_row: str, skipped: list[tuple[int, str]], fix: str, by_row: bool = False
) -> None:
    if on_bad_row != "skip":
        raise InputError(str(path), reason, **({"row": line} if by_row else {"line": line}), fix=fix)
    skipped.append((line, reason))


def _read_json_array(path: Path, text: str, on_bad_row: str, json_types: ColumnKinds) -> RawTable:
    try:
        value = _loads(text)
    except _JSONProblem as problem:
        raise InputError(str(path), problem.reason, line=problem.line_offset + 1, fix=problem.fix) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            str(path), f"is not valid JSON ({exc.msg})", line=exc.lineno, fix="fix the JSON syntax"
        ) from exc
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise InputError(
            str(path),
            "a .json file must be JSON Lines or an array of objects",
            fix="write one object per line (.jsonl)",
        )
    if not value:
        raise InputError(str(path), "file is empty", fix="pass a file with at least one row")
    columns = list(dict.fromkeys(key for record in value for key in record))
    kinds = json_types(columns)
    skipped: list[tuple[int, str]] = []
    good = _check_types(path, value, list(range(1, len(value) + 1)), kinds, on_bad_row, skipped, by_row=True)
    records = [r for r, ok in zip(value, good, strict=True) if ok]
    frame = pl.DataFrame({name: _column(records, name, kinds.get(name)) for name in columns}, strict=False)
    return RawTable(str(path), "jsonl", frame, None, skipped, np.flatnonzero(good).astype(np.int64))


SEPARATORS = {",": "','", "\t": "tab", ";": "';'", "|": "'|'"}  # the separators detected, as messages name them


def parse_delimiter(value: str) -> str:
    """``--delimiter``: one character, or ``tab`` / ``\\t`` for a tab."""
    text = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|"}.get(value.strip().lower(), value)
    if len(text) != 1 or text in '\r\n"':
        raise InputError(
            "--delimiter",
            f"{value!r} is not one separator character",
            fix="pass one character such as ',' ';' '|', or tab",
        )
    return text


def _choose_separator(text: str, kind: str, given: str | None) -> tuple[str, str]:
    """The separator of a CSV/TSV text and why: ``--delimiter``, else the extension's (comma for CSV, tab
    for TSV) unless the header line lacks it and csv.Sniffer finds another of , tab ; | consistent over
    the first lines (a semicolon CSV, a TSV named .csv)."""
    if given is not None:
        return given, "--delimiter"
    default = "\t" if kind == "tsv" else ","
    origin = f"the .{kind} extension" if kind in ("csv", "tsv") else "the default"
    lines = [line for line in text.split("\n", 64)[:64] if line.strip()]
    header = lines[0] if lines else ""
    if default in header:
        return default, origin
    try:
        sniffed = csv.Sniffer().sniff("\n".join(lines[:50]), delimiters="".join(SEPARATORS)).delimiter
    except csv.Error:
        return default, origin
    if sniffed in header:
        return sniffed, "the header line (detected)"
    return default, origin


def _separator_note(sep: str, origin: str, header: str) -> str:
    """``separator ',' (from the .csv extension)``, and which other separator the header holds, if one."""
    note = f"separator {SEPARATORS.get(sep, repr(sep))}, from {origin}"
    others = [SEPARATORS[c] for c in SEPARATORS if c != sep and c in header]
    if others:
        note += f"; the header also holds {' and '.join(others)}"
    return note


def _read_delimited(path: Path, text: str, kind: str, on_bad_row: str, delimiter: str | None = None) -> RawTable:
    first = text.lstrip().split("\n", 1)[0]
    sep, origin = _choose_separator(text, kind, delimiter)
    note = _separator_note(sep, origin, first)
    other = "pass --delimiter with the file's separator" if origin != "--delimiter" else "check --delimiter"
    if first.startswith("{") or first.startswith("["):
        raise InputError(
            str(path),
            f"looks like JSON, not {kind.upper()}",
            line=1,
            fix="give the file a .jsonl extension",
        )
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep, strict=True)
    try:
        header = next(reader)
        while not any(cell.strip() for cell in header):
            header = next(reader)
    except StopIteration:
        raise InputError(str(path), "file is empty", fix="pass a file with a header and at least one row") from None
    except csv.Error as exc:
        raise InputError(
            str(path),
            f"is not valid {kind.upper()} ({exc}; {note})",
            line=reader.line_num or 1,
            fix=f"check the quoting, or {other}",
        ) from exc
    header_line = reader.line_num
    duplicates = sorted({h for h in header if header.count(h) > 1})
    if duplicates:
        raise InputError(
            str(path),
            f"header repeats column(s) {', '.join(map(repr, duplicates))}",
            line=header_line,
            fix="give every column a distinct name",
        )
    width = len(header)
    rows: list[list[str]] = []
    numbers: list[int] = []
    positions: list[int] = []
    skipped: list[tuple[int, str]] = []
    end = header_line  # last line of the record read before the current one
    try:
        for record in reader:
            end = reader.line_num
            if not record or (len(record) == 1 and not record[0].strip()):
                continue
            if len(record) != width:
                reason = f"has {len(record)} fields, the header has {width} ({note})"
                fix = f"quote fields that contain the separator, {other}, or pass --on-bad-row skip"
                _bad(path, reader.line_num, reason, on_bad_row, skipped, fix)
                continue
            rows.append(record)
            numbers.append(reader.line_num)
            positions.append(len(rows) + len(skipped) - 1)
    except csv.Error as exc:
        raise InputError(
            str(path),
            f"is not valid {kind.upper()} ({exc}; {note})",
            line=end + 1,
            fix=f"check the quoting, or {other}",
        ) from exc
    if not rows:
        raise InputError(str(path), "has a header but no rows", line=header_line, fix="add rows or drop the file")
    columns = list(zip(*rows, strict=True))
    frame = pl.DataFrame(
        {name: pl.Series(name, values, dtype=pl.String) for name, values in zip(header, columns, strict=True)}
    )
    frame = frame.with_columns(pl.all().replace("", None))
    index = np.asarray(positions, dtype=np.int64)
    return RawTable(str(path), kind, frame, np.asarray(numbers, dtype=np.int64), skipped, index)


def _read_parquet(path: Path, data: bytes) -> RawTable:
    if not data.startswith(PARQUET_MAGIC):
        raise InputError(
            str(path), "is not a Parquet file (no PAR1 header)", fix="check the file type and its extension"
        )
    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except Exception as exc:  # polars raises several types for corrupt files
        raise InputError(str(path), f"cannot be read as Parquet ({exc})", fix="re-export the file") from exc
    if frame.height == 0:
        raise InputError(str(path), "has no rows", fix="pass a file with at least one row")
    return RawTable(str(path), "parquet", frame, None, [])
