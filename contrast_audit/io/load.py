"""Load pair files into one canonical frame.

Canonical columns: ``id`` (text), ``anchor``, ``positive``, ``negatives`` (list of text),
``source``, ``cohort``, ``group`` (text or null), ``file`` and ``line`` (where the row came from;
``line`` is the row number for Parquet files).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from contrast_audit.config import ColumnMapping, NormaliseConfig
from contrast_audit.errors import InputError
from contrast_audit.io.readers import KEY, STDIN, STDIN_NAME, TEXT, TEXTS, RawTable, read_raw
from contrast_audit.normalise import normalise_expr, nothing_left

# Recognised layouts, tried in order: (name, anchor, positive candidates, negative patterns).
LAYOUTS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("anchor/positive/negative", "anchor", ("positive",), r"^negatives?(_?\d+)?$"),
    ("query/pos/neg", "query", ("pos", "positive", "positives"), r"^(neg|negatives?)(_?\d+)?$"),
    ("sentence1/sentence2", "sentence1", ("sentence2",), r"^sentence3$"),
    ("question/answer", "question", ("answer",), r"^negative(_?\d+)?$"),
    ("text1/text2", "text1", ("text2",), r"^text3$"),
)
OPTIONAL = {"id": ("id", "_id"), "source": ("source",), "cohort": ("cohort",), "group": ("group",)}
SKIP_FIX = "drop the row or pass --on-bad-row skip"
# The problems of a text that is empty, blank or nothing after normalisation: rows that real data has
# (a question that is only "?"), skipped and reported under the default --on-bad-row skip-empty.
EMPTY_PROBLEM = r"\bempty\b"


@dataclass(frozen=True)
class FileMapping:
    """The columns one file was read with, and how they were chosen."""

    path: str
    layout: str
    anchor: str
    positive: str
    negatives: tuple[str, ...]
    id: str | None
    source: str | None
    cohort: str | None
    group: str | None

    def to_dict(self) -> dict:
        return {
            "file": self.path,
            "layout": self.layout,
            "anchor": self.anchor,
            "positive": self.positive,
            "negatives": list(self.negatives),
            "id": self.id,
            "source": self.source,
            "cohort": self.cohort,
            "group": self.group,
        }


@dataclass(frozen=True)
class BadRow:
    file: str
    line: int | None
    row: int | None
    reason: str

    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else f"{self.file}: row {self.row}"


@dataclass
class LoadResult:
    rows: pl.DataFrame
    mappings: list[FileMapping]
    skipped: list[BadRow] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    # Things that did not stop the load but change what it means (the same file given twice).
    warnings: list[str] = field(default_factory=list)


def expand_paths(patterns: list[str]) -> list[Path]:
    """Files named directly or matched by a glob, in argument order (globs sorted)."""
    out: list[Path] = []
    for pattern in patterns:
        if pattern == STDIN:
            if any(str(p) == STDIN for p in out):
                raise InputError(STDIN_NAME, "standard input is given twice", fix="pass - once")
            out.append(Path(STDIN))
            continue
        if any(ch in pattern for ch in "*?[") and not Path(pattern).is_file():
            matched = sorted(glob.glob(pattern, recursive=True))
            files = [Path(m) for m in matched if Path(m).is_file()]
            if not files:
                raise InputError(
                    pattern,
                    "no files match this pattern",
                    fix="check the glob and quote it so the shell does not expand it",
                )
            out.extend(files)
            continue
        if not pattern.strip():
            raise InputError(
                "''", "an empty file name was given", fix="pass a file name or a glob (check the variable that held it)"
            )
        path = Path(pattern)
        if path.is_dir():
            raise InputError(
                pattern, "is a directory", fix=f"pass files or a glob such as '{pattern.rstrip('/')}/*.jsonl'"
            )
        if not path.exists():
            if path.is_symlink():
                raise _broken_link(pattern)
            raise InputError(pattern, "file not found", fix="check the path")
        out.append(path)
    if not out:
        raise InputError("DATA", "no input files given", fix="pass one or more pair files")
    return out


def _broken_link(pattern: str) -> InputError:
    """A symbolic link that loops or points to nothing."""
    import errno

    try:
        os.stat(pattern)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return InputError(pattern, "is a symbolic link that loops (it points back to itself)", fix="fix the link")
    return InputError(
        pattern, f"is a symbolic link to {os.readlink(pattern)}, which does not exist", fix="fix the link"
    )


def distinct_files(files: list[Path]) -> tuple[list[Path], list[str]]:
    """The files, each once, and one warning per file named more than once (by path, link or hard link):
    it is read once, so its rows are not all exact duplicates (and repeated ids) of themselves."""
    seen: dict[tuple[int, int], str] = {}
    kept: list[Path] = []
    warnings: list[str] = []
    for path in files:
        try:
            st = os.stat(path) if str(path) != STDIN else None
        except OSError:
            st = None
        key = (st.st_dev, st.st_ino) if st is not None else None
        if key is not None and key in seen:
            same = "" if seen[key] == str(path) else f" (as {seen[key]})"
            warnings.append(f"{path} is given twice{same}: it is read once")
            continue
        if key is not None:
            seen[key] = str(path)
        kept.append(path)
    return kept, warnings


def resolve_mapping(path: str, columns: list[str], user: ColumnMapping) -> FileMapping:
    """Columns for each role: flags first, then the first recognised layout."""
    present = set(columns)
    for role, name in (
        ("anchor", user.anchor),
        ("positive", user.positive),
        ("id", user.id),
        ("source", user.source),
        ("cohort", user.cohort),
        ("group", user.group),
    ):
        if name is not None and name not in present:
            raise _missing(path, name, columns, f"--{role}")
    for name in user.negatives:
        if name not in present:
            raise _missing(path, name, columns, "--negative")

    layout = "flags" if user.anchor and user.positive else None
    anchor, positive, negatives = user.anchor, user.positive, tuple(user.negatives)
    if layout is None:
        for name, a, positives, neg_pattern in LAYOUTS:
            pos = next((p for p in positives if p in present), None)
            if a in present and pos is not None:
                layout = name
                anchor = anchor or a
                positive = positive or pos
                if not negatives:
                    negatives = tuple(c for c in columns if re.match(neg_pattern, c))
                break
    if layout is None or anchor is None or positive is None:
        fix = "name them with --anchor COLUMN --positive COLUMN (and --negative COLUMN for hard negatives)"
        if len(columns) == 1 and any(c in columns[0] for c in ",\t;|"):
            fix = "the header was read as one column: pass --delimiter with the file's separator"
        elif Path(path).suffix.lower() in (".csv", ".tsv", ".tab"):
            fix += "; the first line of a CSV/TSV file is its header"
        raise InputError(path, f"no anchor/positive columns recognised among: {', '.join(columns)}", fix=fix)
    optional = {
        role: getattr(user, role) or next((c for c in names if c in present), None) for role, names in OPTIONAL.items()
    }
    return FileMapping(path, layout, anchor, positive, negatives, **optional)


def _missing(path: str, name: str, columns: list[str], flag: str) -> InputError:
    return InputError(
        path, f"column '{name}' not found (columns: {', '.join(columns)})", fix=f"pass {flag} with one of these columns"
    )


def load_rows(
    patterns: list[str],
    user: ColumnMapping,
    on_bad_row: str = "skip-empty",
    normalise: NormaliseConfig | None = None,
    delimiter: str | None = None,
) -> LoadResult:
    """Read, map and validate every file; concatenate into the canonical frame.

    A text is empty when nothing is left of it after ``normalise`` (the scan's normal form):
    whitespace, punctuation or invisible characters alone are not text.
    """
    files, warnings = distinct_files(expand_paths(patterns))
    norm = normalise or NormaliseConfig()
    frames: list[pl.DataFrame] = []
    mappings: list[FileMapping] = []
    skipped: list[BadRow] = []
    offset = 0
    for path in files:

        def column_kinds(columns: list[str], _path: str = str(path)) -> dict[str, str]:
            m = resolve_mapping(_path, columns, user)
            keys = [c for c in (m.id, m.source, m.cohort, m.group) if c is not None]
            # Lists of texts are allowed for positives and negatives, never for the anchor.
            return {**dict.fromkeys(keys, KEY), m.positive: TEXTS, **dict.fromkeys(m.negatives, TEXTS), m.anchor: TEXT}

        raw = read_raw(path, on_bad_row, column_kinds, delimiter)
        mapping = resolve_mapping(raw.path, raw.frame.columns, user)
        skipped.extend(
            BadRow(str(path), where, None, reason) if raw.lines is not None else BadRow(str(path), None, where, reason)
            for where, reason in raw.skipped
        )
        frame, bad = _canonical(raw, mapping, offset, on_bad_row, norm)
        skipped.extend(bad)
        offset += raw.frame.height + len(raw.skipped)
        frames.append(frame)
        mappings.append(mapping)
    rows = pl.concat(frames, how="vertical") if len(frames) > 1 else frames[0]
    rows = _check_ids(rows, on_bad_row, skipped)
    if rows.height == 0:
        first = f" ({len(skipped)} skipped; first: {skipped[0].location()}, {skipped[0].reason})" if skipped else ""
        raise InputError(str(files[0]), f"no valid rows left after skipping bad rows{first}", fix="fix the input")
    names = [STDIN_NAME if str(f) == STDIN else str(f) for f in files]
    empty = [b for b in skipped if re.search(EMPTY_PROBLEM, b.reason)]
    if empty and on_bad_row == "skip-empty":
        n = len(empty)
        warnings.append(
            f"{n} row{'s' if n != 1 else ''} skipped because a text is empty or nothing but punctuation or "
            f"invisible characters (first: {empty[0].location()}, {empty[0].reason}); the report lists each, "
            "and --on-bad-row error stops at them instead"
        )
    return LoadResult(rows=rows, mappings=mappings, skipped=skipped, files=names, warnings=warnings)


def _nothing_left(expr: pl.Expr, norm: NormaliseConfig, element: bool = False) -> pl.Expr:
    """True where a text has nothing left after normalisation (but was not blank to begin with). A
    column is checked as a whole (``normalise.nothing_left`` normalises only the texts that could
    come out empty); an ``element`` of a list column, inside ``list.eval``, as an expression."""
    if element:
        return normalise_expr(expr, norm).str.strip_chars() == ""
    return expr.map_batches(lambda texts: nothing_left(texts, norm), return_dtype=pl.Boolean)


def _text_problem(name: str, dtype: pl.DataType, norm: NormaliseConfig) -> pl.Expr:
    col = pl.col(name)
    if dtype == pl.String:
        return (
            pl.when(col.is_null())
            .then(pl.lit(f"column '{name}' is null"))
            .when(col.str.strip_chars() == "")
            .then(pl.lit(f"column '{name}' is empty"))
            .when(_nothing_left(col, norm))
            .then(pl.lit(f"column '{name}' is empty after normalisation (only punctuation or invisible characters)"))
        )
    if dtype == pl.Null:
        return pl.lit(f"column '{name}' is null")
    return pl.lit(f"column '{name}' is {dtype}, not text")


def _list_problem(name: str, dtype: pl.DataType, required: bool, norm: NormaliseConfig) -> pl.Expr:
    """Problems of a list-of-text column (FlagEmbedding ``pos`` / ``neg``)."""
    col = pl.col(name)
    if dtype == pl.List(pl.Null):
        empty = pl.lit(f"column '{name}' holds nulls") if required else pl.lit(None, pl.String)
        return pl.when(col.list.len() > 0).then(pl.lit(f"column '{name}' holds nulls")).otherwise(empty)
    if dtype != pl.List(pl.String):
        return pl.lit(f"column '{name}' is {dtype}, not a list of text")
    expr = pl.when(col.list.eval(pl.element().is_null()).list.any()).then(pl.lit(f"column '{name}' holds a null item"))
    expr = expr.when(col.list.eval(pl.element().str.strip_chars() == "").list.any()).then(
        pl.lit(f"column '{name}' holds an empty item")
    )
    expr = expr.when(col.list.eval(_nothing_left(pl.element(), norm, element=True)).list.any()).then(
        pl.lit(f"column '{name}' holds an item that is empty after normalisation")
    )
    if required:
        expr = expr.when(col.is_null() | (col.list.len() == 0)).then(pl.lit(f"column '{name}' has no items"))
    return expr


# Key columns (id, source, cohort, group) hold text or scalars, read as the text they were written as.


def _as_text(frame: pl.DataFrame, path: str, names: list[str]) -> pl.DataFrame:
    """Dictionary-encoded (Categorical, Enum) text columns and lists of them as plain text; a Binary
    column as text when every value is UTF-8 (else the first value that is not is an error)."""
    casts = []
    for name in dict.fromkeys(names):
        dtype = frame.schema[name]
        inner = dtype.inner if isinstance(dtype, pl.List) else dtype
        if isinstance(inner, (pl.Categorical, pl.Enum)):
            casts.append(pl.col(name).cast(pl.List(pl.String) if isinstance(dtype, pl.List) else pl.String))
        elif dtype == pl.Binary:
            try:
                frame = frame.with_columns(pl.col(name).cast(pl.String))
            except pl.exceptions.PolarsError:
                values = frame.get_column(name).to_list()
                row = next(i for i, v in enumerate(values) if v is not None and not _utf8(v))
                raise InputError(
                    path,
                    f"column '{name}' holds bytes that are not UTF-8 text",
                    row=row + 1,
                    fix=f"store '{name}' as UTF-8 strings (or integers for ids)",
                ) from None
    return frame.with_columns(casts) if casts else frame


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _key_problem(name: str, dtype: pl.DataType, role: str) -> pl.Expr | None:
    """A key column (id, source, cohort, group) of a type that has no text form."""
    if dtype.is_numeric() or dtype.is_temporal() or dtype in (pl.String, pl.Null, pl.Boolean):
        return None
    return pl.lit(f"column '{name}' (the {role}) is {dtype}, not a string or number")


def _canonical(
    raw: RawTable, m: FileMapping, offset: int, on_bad_row: str, norm: NormaliseConfig
) -> tuple[pl.DataFrame, list[BadRow]]:
    keys = {"id": m.id, "source": m.source, "cohort": m.cohort, "group": m.group}
    frame = _as_text(raw.frame, raw.path, [m.anchor, m.positive, *m.negatives, *(c for c in keys.values() if c)])
    schema = frame.schema
    n = frame.height
    index = raw.index if raw.index is not None else np.arange(n, dtype=np.int64)
    where = raw.lines if raw.lines is not None else index + 1
    frame = frame.with_columns(pl.Series("__where", where, dtype=pl.Int64))

    checks: list[pl.Expr] = []
    anchor_dtype = schema[m.anchor]
    if isinstance(anchor_dtype, pl.List):
        checks.append(pl.lit(f"column '{m.anchor}' is a list; an anchor must be one text"))
    else:
        checks.append(_text_problem(m.anchor, anchor_dtype, norm))
    pos_dtype = schema[m.positive]
    pos_is_list = isinstance(pos_dtype, pl.List)
    checks.append(
        _list_problem(m.positive, pos_dtype, True, norm) if pos_is_list else _text_problem(m.positive, pos_dtype, norm)
    )
    for name in m.negatives:
        dtype = schema[name]
        if isinstance(dtype, pl.List):
            checks.append(_list_problem(name, dtype, False, norm))
        elif dtype != pl.Null:
            checks.append(
                pl.when(pl.col(name).is_not_null()).then(_text_problem(name, dtype, norm))
                if dtype == pl.String
                else _text_problem(name, dtype, norm)
            )
    for role, name in keys.items():
        problem = None if name is None else _key_problem(name, schema[name], role)
        if problem is not None:
            checks.append(problem)
    if m.id is not None:
        checks.append(pl.when(pl.col(m.id).is_null()).then(pl.lit(f"column '{m.id}' (the id) is null")))

    problem = pl.coalesce(checks) if len(checks) > 1 else checks[0]
    frame = frame.with_columns(problem.cast(pl.String).alias("__problem"))
    bad_frame = frame.filter(pl.col("__problem").is_not_null())
    bad: list[BadRow] = []
    if bad_frame.height:
        # skip-empty (the default) skips rows whose text is empty or normalises to nothing, and stops at
        # any other bad row; error stops at every bad row; skip skips them all.
        stopping = bad_frame
        if on_bad_row == "skip-empty":
            stopping = bad_frame.filter(~pl.col("__problem").str.contains(EMPTY_PROBLEM))
        first = stopping.row(0, named=True) if stopping.height else None
        if first is not None and on_bad_row != "skip":
            loc = {"line": first["__where"]} if raw.lines is not None else {"row": first["__where"]}
            fix = SKIP_FIX
            if "not a string or number" in first["__problem"]:
                fix = "store the column as strings or integers, map another with --id/--source/--cohort/--group, or pass --on-bad-row skip"
            elif "not text" in first["__problem"] or "is a list" in first["__problem"]:
                fix = "map a text column with --anchor/--positive/--negative, or pass --on-bad-row skip"
            raise InputError(raw.path, first["__problem"], **loc, fix=fix)
        lines_col = bad_frame.get_column("__where").to_list()
        reasons = bad_frame.get_column("__problem").to_list()
        bad = [
            BadRow(raw.path, w if raw.lines is not None else None, None if raw.lines is not None else w, r)
            for w, r in zip(lines_col, reasons, strict=True)
        ]
    frame = frame.with_columns(pl.Series("__index", index + offset, dtype=pl.Int64))
    frame = frame.filter(pl.col("__problem").is_null())

    negatives = _negatives_expr(m, schema)
    ident = pl.col(m.id).cast(pl.String) if m.id else pl.col("__index").cast(pl.String)
    out = frame.select(
        ident.alias("id"),
        pl.col(m.anchor).alias("anchor"),
        pl.col(m.positive).alias("positive"),
        negatives.alias("negatives"),
        *(
            (pl.col(name).cast(pl.String) if name else pl.lit(None, pl.String)).alias(role)
            for role, name in (("source", m.source), ("cohort", m.cohort), ("group", m.group))
        ),
        pl.lit(raw.path).alias("file"),
        pl.col("__where").alias("line"),
    )
    if pos_is_list:
        # One row per positive: FlagEmbedding's ``pos`` list holds several valid documents.
        out = (
            out.with_columns(pl.col("positive").list.len().alias("__n"))
            .explode("positive")
            .with_columns(
                pl.when(pl.col("__n") > 1)
                .then(pl.col("id") + "#" + pl.int_range(pl.len()).over("id", "line").cast(pl.String))
                .otherwise(pl.col("id"))
                .alias("id")
            )
            .drop("__n")
        )
    return out, bad


def _negatives_expr(m: FileMapping, schema: pl.Schema) -> pl.Expr:
    parts: list[pl.Expr] = []
    for name in m.negatives:
        dtype = schema[name]
        if dtype == pl.Null or dtype == pl.List(pl.Null):
            continue
        if isinstance(dtype, pl.List):
            parts.append(pl.col(name).fill_null(pl.lit([], pl.List(pl.String))))
        else:
            parts.append(pl.concat_list(pl.col(name)).list.drop_nulls())
    if not parts:
        return pl.lit([], pl.List(pl.String))
    return pl.concat_list(parts)


def _check_ids(rows: pl.DataFrame, on_bad_row: str, skipped: list[BadRow]) -> pl.DataFrame:
    dup = rows.with_row_index("__i").filter(pl.col("id").is_duplicated())
    if dup.height == 0:
        return rows
    if on_bad_row == "skip":
        later = dup.filter(pl.col("__i") != pl.col("__i").min().over("id"))
        for r in later.iter_rows(named=True):
            skipped.append(BadRow(r["file"], r["line"], None, f"id '{r['id']}' repeats an earlier row's id"))
        return rows.with_row_index("__i").filter(~pl.col("__i").is_in(later.get_column("__i").implode())).drop("__i")
    first_id = dup.row(0, named=True)["id"]
    both = dup.filter(pl.col("id") == first_id).head(2).rows(named=True)
    first, second = (_located(r["file"], r["line"]) for r in both)
    raise InputError(
        both[1]["file"],
        f"id '{first_id}' repeats the id of {first[0]}",
        **second[1],
        fix="ids must be unique: fix the id column, or drop --id to number rows instead",
    )


def _located(path: str, where: int) -> tuple[str, dict[str, int]]:
    """``file:line`` for text formats, ``file: row N`` for Parquet (whose rows have no lines)."""
    if Path(path).suffix.lower() in (".parquet", ".pq"):
        return f"{path}: row {where}", {"row": where}
    return f"{path}:{where}", {"line": where}
