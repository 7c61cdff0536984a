"""The streaming engine: an audit whose peak memory follows its run size and a few hundred bytes a row,
not the input's texts.

The in-memory engine holds every text of the input, normalised and signed, at once. This one holds
only what is global, a few integers per row, and keeps the texts on disk (docs/scale.md):

1. **Read** the input in row chunks (``io.chunks``) and spill each chunk's texts to an Arrow IPC file
   in a private directory. Per row it keeps two 64-bit hashes of each normalised text, the row's
   content hash and its ids, source, cohort, group, file and line.
2. **Normalise**: text ids from the hashes, in the order the in-memory corpus gives them (first seen
   among all anchors, then positives, then hard negatives), so findings name the same ids.
3. **Plan** the batches from the row count (and, for ``no_duplicates``, ids of the exact strings).
4. **Judge** runs of consecutive global batches: the rows of a run are read back from the spill, made
   into a corpus of their own, and the detectors are prepared on it and compare its batches exactly
   as the in-memory judge does. Evidence that needs the whole dataset (``linked``: chains of positive
   pairs across rows) is prepared once on the global text ids and consulted through the run's ids.
   Each row's own hard negatives are judged in the first run that holds the row.
5. **Report** from the same ``AuditResult``: texts of the rows a report shows are read back from the
   spill.

Embedding evidence decides what it needs of the whole data before the runs (``engine.vectors``: the
rows the first stage selects, the idf weights, the link bar); each run embeds its own texts, from the
cache where it holds them, and reads the whole data's chunks of batches (``judge.chunk_bounds``: runs are
cut where one begins), so every similarity matrix is the in-memory engine's.

Findings are those of the in-memory engine, row for row. What differs: ``minhash``'s corpus-wide
counts (``candidate_checks``, ``near_duplicate_pairs``, ``skipped_buckets``) are not computed (null in
the report), since no run sees the whole corpus. Reference data (``--against``, ``--eval``), manifests
as plans, and pair evidence, the rule above the positive and the verifier (calibrated on every row's
vectors) need the in-memory engine.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.baseline import hex_hashes, row_hash_values
from contrast_audit.config import AuditConfig
from contrast_audit.corpus import ANCHOR_ROLE, POSITIVE_ROLE, Corpus, build_corpus, group_codes
from contrast_audit.errors import ConfigError, InputError
from contrast_audit.evidence import Detector, Hits, Pairs, default_detectors
from contrast_audit.evidence.linked import LinkedDetector
from contrast_audit.io.chunks import iter_row_chunks
from contrast_audit.io.load import LoadResult
from contrast_audit.judge import (
    Judgement,
    candidate_counts,
    chunk_bounds,
    compare_batches,
    finish_findings,
    finish_mislabelled,
    finish_vetoed,
    mislabelled_negatives,
)
from contrast_audit.normalise import normalise_series
from contrast_audit.plan import GlobalBatches, Plan, make_plan, read_plan_file

TEXT_COLUMNS = ("anchor", "positive", "negatives")
_SEEDS = (0x5EED_0001, 0x5EED_0002)  # two polars hashes of a normalised text: 128 bits name it
# Memory the global state holds per row (ids, content hash, plan, the linked graph) and per text slot
# of the widest row (text ids, and numbering them): about 204 bytes a row of three slots measured on
# bench/scan_scale.py data with lexical evidence (docs/scale.md), with some room. A row of a run costs
# what the in-memory engine's estimate gives its texts (resources.BYTES_PER_TEXT a text,
# BYTES_PER_TEXT_BYTE a byte: 3.6 KB a row of that data, where 2.4 KB was measured).
GLOBAL_BYTES_PER_ROW = 90
GLOBAL_BYTES_PER_SLOT = 48
# With embedding evidence, per text: its cache key (16 bytes) and whether the full model embeds it.
EMBEDDING_BYTES_PER_SLOT = 17
VECTOR_DIM = 384  # the default model's; a run's estimate counts this many floats a vector
# The model, its runtime's working memory (ONNX Runtime's arena: 815 MB RSS after one batch of 64 texts of
# 240 tokens with the default model, 270 MB after short ones) and, on the first scan with a model, torch and
# sentence-transformers for its export (about 800 MB more: 3,901 MiB peak cold against 3,128 MiB warm on
# the 1,000,000-row benchmark at a 4 GiB limit before this allowance, docs/scale.md).
MODEL_BYTES = 1 << 30
READ_BYTES_PER_ROW = 2_500
MIN_RUN_ROWS = 20_000
MAX_RUN_ROWS = 1_000_000
CHUNK_ROWS = 250_000


def unsupported(cfg: AuditConfig) -> str | None:
    """Why ``cfg`` needs the in-memory engine, or None when the streaming engine can run it."""
    e = cfg.embedding
    if e.enabled and (e.pair_evidence or e.above_positive > 0 or e.verifier):
        return (
            "pair evidence (--pair), the rule above the positive (--above-positive) and the verifier (--verifier) "
            "calibrate on every row's vectors (leave them off)"
        )
    if cfg.reference.against or cfg.reference.eval:
        return "checking against existing or eval data (--against, --eval) needs every text at once"
    if cfg.plan.plan_file:
        from contrast_audit.manifest.replay import is_manifest_file

        if is_manifest_file(cfg.plan.plan_file):
            return "a manifest as plan is checked against every row's texts"
    return None


@dataclass
class Sizes:
    """Rows read at once, and rows a judged run of batches may hold (None: from the memory limit and
    the row count, once it is known)."""

    limit: int | None = None
    chunk_rows: int | None = None
    run_rows: int | None = None

    def reading(self) -> int:
        if self.chunk_rows is not None:
            return self.chunk_rows
        if self.limit is None:
            return CHUNK_ROWS
        return int(max(MIN_RUN_ROWS // 4, min(CHUNK_ROWS, self.limit // (4 * READ_BYTES_PER_ROW))))

    def judging(self, shape: Shape, where: str) -> int:
        """Rows per run for an input of ``shape``; refuses (exit 2) when the global state leaves too
        little of the limit for a run of ``MIN_RUN_ROWS``."""
        if self.run_rows is not None:
            return self.run_rows
        if self.limit is None:
            return MAX_RUN_ROWS
        from contrast_audit.resources import BASE_BYTES, check_memory

        held = BASE_BYTES + shape.fixed_bytes() + shape.global_bytes()
        floor = shape.run_bytes_per_row() * MIN_RUN_ROWS  # a run's need does not shrink with the input
        limit = self.limit

        def parts(_share: float) -> str | None:
            # The rows whose global state fits beside a run: splitting the input shrinks only that.
            rows = (limit - BASE_BYTES - shape.fixed_bytes() - floor) // max(
                shape.global_bytes() // max(shape.rows, 1), 1
            )
            return f"audit the data in parts of at most {rows:,} rows" if rows >= 1 else None

        check_memory(held + floor, limit, f"streaming {shape.rows:,} rows", where, parts)
        return int(min(MAX_RUN_ROWS, (limit - held) // shape.run_bytes_per_row()))


@dataclass(frozen=True)
class Shape:
    """What the memory of a streamed audit depends on: rows, the widest row's text slots, and the
    texts and their bytes in all."""

    rows: int
    width: int
    texts: int
    text_bytes: int
    spaces: int = 0  # vector matrices per text (``vector_spaces``)

    def fixed_bytes(self) -> int:
        """What embedding evidence holds whatever the input: the model and its runtime's working memory."""
        return MODEL_BYTES if self.spaces else 0

    def global_bytes(self) -> int:
        per_slot = GLOBAL_BYTES_PER_SLOT + (EMBEDDING_BYTES_PER_SLOT if self.spaces else 0)
        return self.rows * (GLOBAL_BYTES_PER_ROW + per_slot * self.width)

    def run_bytes_per_row(self) -> int:
        from contrast_audit.resources import BYTES_PER_TEXT, BYTES_PER_TEXT_BYTE, BYTES_PER_VECTOR_FLOAT

        per_text = BYTES_PER_TEXT + self.spaces * VECTOR_DIM * BYTES_PER_VECTOR_FLOAT
        per_row = (per_text * self.texts + BYTES_PER_TEXT_BYTE * self.text_bytes) / max(self.rows, 1)
        return max(1, int(per_row))


SPILL_PREFIX = "contrast-audit-spill-"


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


def remove_stale_spills(root: Path) -> list[Path]:
    """Remove this host's spill directories in ``root`` whose process no longer runs (one killed with
    SIGKILL, which no cleanup survives). The host and process id are in the name: a concurrent run's is
    left alone, and so is another host's (a container sharing the directory, with its own process ids).
    A process id no process can have (0, negative, past the largest: ``io.atomic.stale_owner``) is stale;
    a name whose id is not an ASCII integer (``²``) is not a spill of ours and is left."""
    from contrast_audit.io.atomic import stale_owner

    removed: list[Path] = []
    mine = re.compile(rf"{re.escape(SPILL_PREFIX + _host())}-(-?[^-]*)-.*", re.DOTALL)
    for path in root.glob(f"{SPILL_PREFIX}{_host()}-*-*"):
        match = mine.fullmatch(path.name)
        if match and path.is_dir() and stale_owner(match.group(1)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


_IN_MEMORY = "audit in memory (--engine memory, with a larger --max-memory or off if that is refused)"


def spill_root(parent: str | None = None) -> tuple[Path, str]:
    """The directory the spill goes in, and what named it: ``parent``, else ``$TMPDIR`` (or ``$TEMP``,
    ``$TMP``) as set, else the system's temporary directory. A directory the user named is used or
    refused, never swapped for another (``tempfile`` falls back to /tmp or the working directory)."""
    if parent:
        return Path(os.path.abspath(parent)), "the spill directory"
    for name in ("TMPDIR", "TEMP", "TMP"):
        value = os.environ.get(name)
        if value:
            return Path(os.path.abspath(value)), f"${name}"
    try:
        return Path(tempfile.gettempdir()), "the temporary directory"
    except OSError as exc:  # no candidate is a directory this process can write
        raise ConfigError(
            f"the streaming engine found no usable temporary directory for its spill ({exc})",
            fix=f"set TMPDIR to a directory you can write to, with room for the input's texts, or {_IN_MEMORY}",
        ) from exc


def _errno(exc: OSError) -> int | None:
    """The error number of ``exc``, also from polars' messages (``... (os error 28)``), which carry none."""
    if exc.errno is not None:
        return exc.errno
    found = re.search(r"\(os error (\d+)\)", str(exc))
    return int(found.group(1)) if found else None


def spill_error(root: Path, named: str, exc: OSError, creating: bool = False) -> ConfigError:
    """The exit-2 error for a spill in ``root`` (as ``named``: ``$TMPDIR``…) that cannot be made or written."""
    code = _errno(exc)
    cause = exc.strerror or str(exc)
    where = f"{root} ({named})"
    full = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded"}.get(code or -1)
    if full is None and "requested and" in str(exc):  # numpy's short write ("12000 requested and 8176 written")
        full = f"a short write: {exc}"
    if full is not None:
        return ConfigError(
            f"the streaming engine's spill in {where} ran out of space ({full})",
            fix=f"free some space there, set TMPDIR to a directory with room for the input's texts, or {_IN_MEMORY}",
        )
    if creating:
        return ConfigError(
            f"the streaming engine cannot create its spill in {where}: {cause}",
            fix=f"set TMPDIR to an existing directory you can write to, with room for the input's texts, "
            f"or {_IN_MEMORY}",
        )
    return ConfigError(
        f"writing the streaming engine's spill in {where} failed: {cause}",
        fix=f"set TMPDIR to a directory you can write to, with room for the input's texts, or {_IN_MEMORY}",
    )


class Spill:
    """The input's texts on disk: one Arrow IPC file per chunk of rows, read back by row. A spill that
    cannot be made or written (a missing or read-only ``$TMPDIR``, a full disk) is a ``ConfigError``."""

    def __init__(self, parent: str | None = None) -> None:
        self.root, self._named = spill_root(parent)
        try:
            remove_stale_spills(self.root)
            # Removed with this object (or at exit): a report written after the audit still reads texts.
            self._dir = tempfile.TemporaryDirectory(prefix=f"{SPILL_PREFIX}{_host()}-{os.getpid()}-", dir=self.root)
        except OSError as exc:
            raise spill_error(self.root, self._named, exc, creating=True) from exc
        self.directory = Path(self._dir.name)
        self.starts: list[int] = [0]

    def close(self) -> None:
        self._dir.cleanup()

    def failed(self, exc: OSError) -> ConfigError:
        """The error for a write into this spill that failed with ``exc``."""
        return spill_error(self.root, self._named, exc)

    def write(self, rows: pl.DataFrame) -> None:
        try:
            rows.select(*TEXT_COLUMNS, "group").write_ipc(
                self._path(len(self.starts) - 1), compression="uncompressed", compat_level=pl.CompatLevel.oldest()
            )
        except OSError as exc:
            raise self.failed(exc) from exc
        self.starts.append(self.starts[-1] + rows.height)

    def _path(self, i: int) -> Path:
        return self.directory / f"rows-{i:06d}.arrow"

    def read(self, rows: np.ndarray) -> pl.DataFrame:
        """The spilled columns of ``rows`` (sorted, distinct), in that order."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        starts = np.asarray(self.starts)
        cut = np.searchsorted(rows, starts)
        parts: list[pl.DataFrame] = []
        for i in range(len(starts) - 1):
            lo, hi = cut[i], cut[i + 1]
            if lo == hi:
                continue
            # Memory-mapped and closed again: only the rows taken stay in memory.
            with pa.memory_map(str(self._path(i))) as source:
                table = ipc.open_file(source).read_all().take(pa.array(rows[lo:hi] - starts[i]))
                parts.append(pl.from_arrow(table))  # type: ignore[arg-type]
        return pl.concat(parts) if parts else pl.DataFrame()


class StreamCorpus(Corpus):
    """The global corpus of a streamed audit: every row's text ids, with the texts left in the spill."""

    def __init__(
        self,
        meta: pl.DataFrame,
        tids: np.ndarray,
        n_texts: int,
        raw: np.ndarray,
        spill: Spill,
        cfg,
        first_row: np.ndarray,
    ) -> None:
        super().__init__(
            rows=meta,
            texts=pl.DataFrame(schema={"tid": pl.UInt32, "text": pl.String, "norm": pl.String}),
            anchor=tids[:, 0],
            positive=tids[:, 1],
            negatives=tids[:, 2:],
            group=group_codes(meta.get_column("group")),
            raw=raw,
            raw_texts=pl.Series("raw", [], dtype=pl.String),
        )
        self._n_texts = n_texts
        self._spill = spill
        self._normalise = cfg
        self._first_row = first_row

    @property
    def n_texts(self) -> int:
        return self._n_texts

    def spelling(self, rows: np.ndarray, roles: np.ndarray) -> pl.Series:
        rows = np.asarray(rows, dtype=np.int64)
        roles = np.asarray(roles, dtype=np.int64)
        if rows.shape[0] == 0:
            return pl.Series("raw", [], dtype=pl.String)
        distinct, at = np.unique(rows, return_inverse=True)
        texts = self._spill.read(distinct)
        anchor = texts.get_column("anchor").gather(at)
        positive = texts.get_column("positive").gather(at)
        negative = (
            texts.get_column("negatives").gather(at).list.get(pl.Series(np.maximum(roles - 1, 0)), null_on_oob=True)
        )
        return (
            pl.DataFrame({"r": roles, "a": anchor, "p": positive, "n": negative})
            .select(
                pl.when(pl.col("r") == ANCHOR_ROLE)
                .then(pl.col("a"))
                .when(pl.col("r") == POSITIVE_ROLE)
                .then(pl.col("p"))
                .otherwise(pl.col("n"))
                .alias("raw")
            )
            .to_series()
        )

    def texts_of(self, tids: np.ndarray) -> pl.Series:
        """The text (the spelling of its first occurrence, as the in-memory corpus keeps it) of each text id."""
        wanted = np.asarray(tids, dtype=np.int64)
        if wanted.shape[0] == 0:
            return pl.Series("raw", [], dtype=pl.String)
        distinct = np.unique(wanted)
        row = self._first_row[distinct]
        held = np.concatenate([self.anchor[row, None], self.positive[row, None], self.negatives[row]], axis=1)
        slot = np.argmax(held == distinct[:, None], axis=1)  # where in its first row the text is
        return self.spelling(row, slot - 1).gather(np.searchsorted(distinct, wanted))

    def norms(self, tids: pl.Series) -> pl.Series:
        """The normalised text of each text id, read from a row that holds it."""
        wanted = tids.to_numpy().astype(np.int64)
        if wanted.shape[0] == 0:
            return pl.Series("norm", [], dtype=pl.String)
        distinct = np.unique(wanted)
        norm = normalise_series(self.texts_of(distinct), self._normalise).to_numpy()
        return pl.Series("norm", norm[np.searchsorted(distinct, wanted)], dtype=pl.String)


class _Global:
    """A detector prepared on the global corpus, consulted with a run's pairs (run rows and text ids
    translated to global ones)."""

    def __init__(self, inner: Detector, rows: np.ndarray, tids: np.ndarray) -> None:
        self.inner, self.rows, self.tids = inner, rows, tids
        self.name = inner.name
        self.description = inner.description

    def prepare(self, corpus: Corpus) -> None:  # prepared globally
        pass

    def detect(self, pairs: Pairs) -> Hits:
        return self.inner.detect(
            Pairs(
                pairs.direction,
                self.rows[pairs.anchor_row],
                self.rows[pairs.cand_row],
                pairs.cand_role,
                self.tids[pairs.cand_tid],
            )
        )

    def info(self) -> dict[str, Any]:
        return self.inner.info()


class _GlobalLinked(_Global):
    """The ``linked`` chains found on the global corpus, their texts checked with the run's own vectors."""

    def __init__(self, inner: Any, rows: np.ndarray, tids: np.ndarray, store: Any, corpus: Corpus) -> None:
        super().__init__(inner, rows, tids)
        self.store, self.corpus = store, corpus

    def detect(self, pairs: Pairs) -> Hits:
        hits = super().detect(pairs)
        self.inner.check_near(self.store, self.corpus, pairs, hits)
        return hits


GLOBAL_DETECTORS = ("linked",)


@dataclass
class _Read:
    meta: pl.DataFrame
    keys: Keys
    loaded: LoadResult
    texts: Any = None  # where a distributed engine keeps the rows' texts (Ray object references)


class Keys:
    """The per-row keys of every chunk (``row_keys``), on disk until the texts are numbered, so that
    reading holds one chunk's keys at a time; the rows' content hashes stay in memory."""

    def __init__(self, spill: Spill) -> None:
        self.spill = spill
        self.directory = spill.directory
        self.parts: list[tuple[int, int, int]] = []  # first row, rows, slots
        self._row_hashes: list[tuple[int, np.ndarray]] = []
        self.raw = False
        self.texts = 0  # text slots filled, over every row
        self.text_bytes = 0

    def add(
        self, first: int, hashes: np.ndarray, raw: np.ndarray | None, row_hash: np.ndarray, text_bytes: int = 0
    ) -> None:
        self.texts += int((hashes != 0).any(axis=2).sum())
        self.text_bytes += text_bytes
        try:
            np.save(self._path("keys", first), hashes)
            if raw is not None:
                np.save(self._path("raw", first), raw)
        except OSError as exc:  # a full disk: "12000 requested and 8176 written"
            raise self.spill.failed(exc) from exc
        self.raw = self.raw or raw is not None
        self.parts.append((first, hashes.shape[0], hashes.shape[1]))
        self._row_hashes.append((first, row_hash))

    def _path(self, kind: str, first: int) -> Path:
        return self.directory / f"{kind}-{first:012d}.npy"

    def load(self, kind: str, first: int) -> np.ndarray:
        return np.load(self._path(kind, first), mmap_mode="r")

    def finish(self) -> None:
        """Parts in row order (a distributed read delivers them in any order)."""
        self.parts.sort()
        self._row_hashes.sort(key=lambda p: p[0])

    @property
    def n_rows(self) -> int:
        return sum(p[1] for p in self.parts)

    @property
    def width(self) -> int:
        return max((p[2] for p in self.parts), default=2)

    def shape(self) -> Shape:
        return Shape(self.n_rows, self.width, self.texts, self.text_bytes)

    def row_hashes(self) -> np.ndarray:
        return np.concatenate([h for _, h in self._row_hashes]) if self._row_hashes else np.zeros(0, np.uint64)

    def text_ids(self) -> tuple[np.ndarray, int]:
        """rows × slots text ids (``text_ids``), read part by part."""
        n, width = self.n_rows, self.width
        segments = [(slot, part) for slot in (0, 1) for part in self.parts] + [(2, part) for part in self.parts]
        pieces: list[np.ndarray] = []
        for slot, (first, _, w) in segments:
            h = self.load("keys", first)
            if slot < 2:
                pieces.append(np.asarray(h[:, slot, :]))
            elif w > 2:
                neg = np.asarray(h[:, 2:, :]).reshape(-1, 2)
                pieces.append(neg[(neg != 0).any(axis=1)])
        occ = np.concatenate(pieces) if pieces else np.zeros((0, 2), np.uint64)
        del pieces
        h1, h2 = np.ascontiguousarray(occ[:, 0]), np.ascontiguousarray(occ[:, 1])
        del occ
        tid, n_texts = number_texts(h1, h2)
        del h1, h2
        out = np.full((n, width), -1, dtype=np.int64)
        at = 0
        for slot, (first, rows, w) in segments:
            if slot < 2:
                out[first : first + rows, slot] = tid[at : at + rows]
                at += rows
            elif w > 2:
                has = (np.asarray(self.load("keys", first)[:, 2:, :]) != 0).any(axis=2)
                block = np.full(has.shape, -1, dtype=np.int64)
                block[has] = tid[at : at + int(has.sum())]
                at += int(has.sum())
                out[first : first + rows, 2:w] = block
        return out, n_texts

    def raw_ids(self) -> np.ndarray:
        """rows × slots ids of the exact strings (``raw_ids``)."""
        width = self.width
        raw = np.concatenate(
            [np.pad(np.asarray(self.load("raw", f)), ((0, 0), (0, width - w))) for f, _, w in self.parts]
        )
        return raw_ids(raw)


def _text_hashes(texts: pl.Series) -> np.ndarray:
    return np.stack([texts.hash(seed).to_numpy() for seed in _SEEDS], axis=1)


def row_keys(rows: pl.DataFrame, normalise, want_raw: bool) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """What the global state keeps of canonical rows: rows × slots × 2 hashes of each normalised text
    (0 where a row has no text in the slot), rows × slots hashes of the exact strings (``want_raw``),
    and each row's content hash."""
    local = build_corpus(rows, normalise)
    tids = np.concatenate([local.anchor[:, None], local.positive[:, None], local.negatives], axis=1)
    norms = local.texts.get_column("norm")
    text = _text_hashes(norms)
    hashes = np.where((tids >= 0)[:, :, None], text[np.maximum(tids, 0)], np.uint64(0))
    raw = None
    if want_raw:
        raw_text = local.raw_texts.hash(_SEEDS[0]).to_numpy()
        raw = np.where(local.raw >= 0, raw_text[np.maximum(local.raw, 0)], np.uint64(0))
    return hashes, raw, row_hash_values(norms, tids, rows.get_column("group"))


def wants_raw(cfg: AuditConfig) -> bool:
    """Whether the plan needs ids of the exact strings (``no-duplicates``)."""
    return cfg.plan.sampler != "random" and not cfg.plan.plan_file


def read_input(
    paths: Sequence[str], cfg: AuditConfig, spill: Spill, chunk_rows: int, tick: Callable[[int], None] | None
) -> _Read:
    """Pass over the input once, spilling texts and keeping the per-row keys."""
    chunks = iter_row_chunks(list(paths), cfg.mapping, cfg.on_bad_row, cfg.normalise, cfg.delimiter, chunk_rows)
    metas: list[pl.DataFrame] = []
    keys = Keys(spill)
    first = 0
    for chunk in chunks:
        rows = chunk.rows
        if rows.height == 0:
            continue
        keys.add(first, *row_keys(rows, cfg.normalise, wants_raw(cfg)), text_bytes=text_bytes(rows))
        spill.write(rows)
        metas.append(compact(rows.drop(*TEXT_COLUMNS)))
        first += rows.height
        if tick:
            tick(rows.height)
    return finished_read(metas, keys, chunks, str(paths[0]))


def text_bytes(rows: pl.DataFrame) -> int:
    """UTF-8 bytes of canonical rows' texts."""
    total = rows.select(
        pl.col("anchor").str.len_bytes().sum()
        + pl.col("positive").str.len_bytes().sum()
        + pl.col("negatives").list.eval(pl.element().str.len_bytes()).list.sum().sum()
    ).item()
    return int(total or 0)


def compact(meta: pl.DataFrame) -> pl.DataFrame:
    """A chunk's rows without texts, their repeated values (file, source, cohort, group) as categoricals."""
    return meta.with_columns(pl.col("file", "source", "cohort", "group").cast(pl.Categorical))


def finished_read(metas: list[pl.DataFrame], keys: Keys, chunks: Any, where: str) -> _Read:
    """The read's result once every chunk is in (``chunks``: the finished ``iter_row_chunks``)."""
    if not metas:
        raise InputError(where, "no valid rows left after skipping bad rows", fix="fix the input")
    keys.finish()
    meta = pl.concat(metas, rechunk=False)
    loaded = LoadResult(meta, chunks.mappings, chunks.skipped, chunks.files, chunks.warnings)
    return _Read(meta, keys, loaded)


def text_ids(hashes: np.ndarray, has: np.ndarray) -> tuple[np.ndarray, int]:
    """rows × slots text ids from the texts' hashes (rows × slots × 2), numbered as ``build_corpus``
    numbers them: in order of first appearance among every row's anchor, then every positive, then
    the hard negatives row by row. -1 where a row has no text in the slot (``has`` false)."""
    n, width = has.shape
    neg = has[:, 2:]
    occ = np.concatenate([hashes[:, 0], hashes[:, 1], hashes[:, 2:][neg]])
    tid, n_texts = number_texts(np.ascontiguousarray(occ[:, 0]), np.ascontiguousarray(occ[:, 1]))
    out = np.full((n, width), -1, dtype=np.int64)
    out[:, 0], out[:, 1] = tid[:n], tid[n : 2 * n]
    block = out[:, 2:]
    block[neg] = tid[2 * n :]
    out[:, 2:] = block
    return out, n_texts


def number_texts(h1: np.ndarray, h2: np.ndarray) -> tuple[np.ndarray, int]:
    """Text ids of occurrences listed in order (``h1``, ``h2``: the two hashes of each): each distinct
    text numbered by its first occurrence. A stable sort on the first hash groups a text's
    occurrences, first one first; the second hash is checked, and two texts that share the first
    are told apart by a sort on both."""
    count = h1.shape[0]
    if count == 0:
        return np.zeros(0, np.int64), 0
    order = np.argsort(h1, kind="stable")
    new = np.empty(count, dtype=bool)
    new[0] = True
    s = h1[order]
    np.not_equal(s[1:], s[:-1], out=new[1:])
    s = h2[order]
    shared = bool(np.any(~new[1:] & (s[1:] != s[:-1])))
    del s
    if shared:  # two texts with one first hash (about 1 in 10^19 per pair)
        order = np.lexsort((np.arange(count), h2, h1))
        s1, s2 = h1[order], h2[order]
        new[1:] = (s1[1:] != s1[:-1]) | (s2[1:] != s2[:-1])
        del s1, s2
    first = order[new]  # each text's first occurrence
    rank = np.empty(first.shape[0], dtype=np.int64)
    rank[np.argsort(first)] = np.arange(first.shape[0])
    group = np.cumsum(new) - 1
    out = np.empty(count, dtype=np.int64)
    out[order] = rank[group]
    return out, int(first.shape[0])


def first_rows(tids: np.ndarray, n_texts: int) -> np.ndarray:
    """The row of each text id's first occurrence, in the order ``build_corpus`` reads texts (every
    anchor, then every positive, then the hard negatives row by row): the row whose spelling is the
    text's ``text`` in the in-memory corpus."""
    out = np.full(n_texts, -1, dtype=np.int64)
    width = tids.shape[1]
    for block in ([0], [1], list(range(2, width))):
        if not block:
            continue
        ids = tids[:, block].ravel()  # row-major: row by row, slot by slot
        seen, at = np.unique(ids, return_index=True)
        keep = (seen >= 0) & (out[np.maximum(seen, 0)] < 0)
        out[seen[keep]] = at[keep] // len(block)
    return out


def raw_ids(raw_hashes: np.ndarray) -> np.ndarray:
    """Ids of the exact strings (any numbering: the sampler compares them for equality), -1 padded."""
    out = np.full(raw_hashes.shape, -1, dtype=np.int64)
    has = raw_hashes != 0
    _, inverse = np.unique(raw_hashes[has], return_inverse=True)
    out[has] = inverse
    return out


@dataclass(frozen=True)
class Run:
    """Global batches ``start..stop-1``, and the rows whose own hard negatives are judged with them
    (sorted): those the run is the first to hold, or rows in no batch (a run without batches)."""

    start: int
    stop: int
    mislabelled: np.ndarray


@dataclass
class Work:
    """What every run is judged against: the global text ids, the batches, the runs and the evidence
    prepared on the whole corpus. Picklable: a distributed engine ships it to its workers once."""

    cfg: AuditConfig
    tids: np.ndarray  # rows × (anchor, positive, negatives…)
    first_row: np.ndarray  # per text id, the row of its first occurrence (``first_rows``)
    batches: GlobalBatches
    runs: list[Run]
    global_detectors: dict[str, Detector]
    embedding: Any = None  # what embedding evidence decided over every text (``embed.Shared``), if on
    chunks: np.ndarray | None = None  # first batches of the judge's chunks of the whole data (None: the run's own)

    def rows(self, i: int) -> np.ndarray:
        """The rows run ``i`` reads (sorted, distinct): those of its batches and hard negatives, and the
        row where each of their texts first occurs, so that a text's spelling in the run's corpus (its
        first one, which the entity guard reads) is the whole input's."""
        run = self.runs[i]
        b = self.batches
        rows = np.unique(np.r_[b.rows[b.offsets[run.start] : b.offsets[run.stop]], run.mislabelled])
        tids = self.tids[rows]
        return np.unique(np.r_[rows, self.first_row[tids[tids >= 0]]])

    def run_chunks(self, i: int) -> list[tuple[int, int]] | None:
        """The judge's chunks of run ``i``, in its own batches."""
        if self.chunks is None:
            return None
        run = self.runs[i]
        starts = self.chunks[(self.chunks >= run.start) & (self.chunks < run.stop)] - run.start
        bounds = np.unique(np.r_[0, starts, run.stop - run.start])
        return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def local(self, i: int, texts: pl.DataFrame) -> Local:
        """Run ``i`` as a corpus of its own (``texts``: the spilled columns of ``rows(i)``, in that order),
        its batches in its rows, and its text ids in the global ones."""
        run, b, cfg = self.runs[i], self.batches, self.cfg
        rows = self.rows(i)
        local = build_corpus(texts, cfg.normalise)
        # Run text ids → global ones, through the rows that hold them.
        l2g = np.full(local.n_texts, -1, dtype=np.int64)
        width = 2 + local.negatives.shape[1]  # a run's rows may hold fewer negatives than the widest row
        local_tids = np.concatenate([local.anchor[:, None], local.positive[:, None], local.negatives], axis=1)
        has = local_tids >= 0
        l2g[local_tids[has]] = self.tids[rows, :width][has]
        occurrences = b.rows[b.offsets[run.start] : b.offsets[run.stop]]
        batches = GlobalBatches(
            np.searchsorted(rows, occurrences),
            b.offsets[run.start : run.stop + 1] - b.offsets[run.start],
            b.epoch[run.start : run.stop],
        )
        return Local(rows, local, l2g, batches)

    def judge(self, i: int, texts: pl.DataFrame) -> tuple[list[pl.DataFrame], pl.DataFrame]:
        """Findings and mislabelled negatives of run ``i``, in global rows and text ids; ``texts`` are the
        spilled columns (``TEXT_COLUMNS`` and ``group``) of ``rows(i)``, in that order."""
        run, cfg = self.runs[i], self.cfg
        part = self.local(i, texts)
        rows, local, l2g = part.rows, part.corpus, part.l2g
        detectors: list[Detector] = []
        active = default_detectors(cfg, shared=self.embedding, global_ids=l2g)
        for d in active:
            if d.name in self.global_detectors:
                inner = self.global_detectors[d.name]
                store = getattr(d, "store", None)
                detectors.append(
                    _Global(inner, rows, l2g) if store is None else _GlobalLinked(inner, rows, l2g, store, local)
                )
            else:
                d.prepare(local)
                detectors.append(d)
        as_rows, as_tids = pl.Series("row", rows), pl.Series("tid", l2g)
        frames = [
            f.with_columns(
                pl.col("batch") + run.start,
                as_rows.gather(f.get_column("anchor_row")).alias("anchor_row"),
                as_rows.gather(f.get_column("cand_row")).alias("cand_row"),
                as_tids.gather(f.get_column("cand_tid")).alias("cand_tid"),
            )
            for f in compare_batches(
                local, part.batches, detectors, cfg.loss.directions, chunks=self.run_chunks(i)
            ).frames
        ]
        mis = mislabelled_negatives(local, detectors, np.searchsorted(rows, run.mislabelled))
        mis = mis.with_columns(
            as_rows.gather(mis.get_column("anchor_row")).alias("anchor_row"),
            as_tids.gather(mis.get_column("cand_tid")).alias("cand_tid"),
        )
        for d in detectors:  # detectors that buffer work (the token cache) complete it here
            getattr(d, "finish", lambda: None)()
        if self.embedding is not None:
            stores = {id(s): s for d in detectors if (s := getattr(d, "store", None)) is not None}
            tokens = {
                id(t): t for d in detectors for g in getattr(d, "guards", ()) if (t := getattr(g, "tokens", None))
            }
            self.embedding.add_run(stores.values(), tokens.values())
        return frames, mis


@dataclass
class Local:
    """A run of a streamed audit as its own corpus: its rows (global, sorted), the corpus of their texts,
    its text ids in the global ones, and its batches in its own rows."""

    rows: np.ndarray
    corpus: Corpus
    l2g: np.ndarray
    batches: GlobalBatches


def plan_runs(batches: GlobalBatches, n_rows: int, run_rows: int, chunks: np.ndarray | None = None) -> list[Run]:
    """Runs of consecutive global batches holding about ``run_rows`` row occurrences each, cut only where
    a chunk the judge compares at once begins (``chunks``: their first batches; any batch by default);
    each row's own hard negatives go with the first run that holds it, and rows in no batch make runs of
    their own."""
    n = len(batches)
    bounds: list[tuple[int, int]] = []
    if n:
        ends = np.flatnonzero(np.diff(batches.offsets[1:] // max(run_rows, 1)) > 0) + 1
        if chunks is not None:  # the next chunk's start: a run's similarity matrices are the whole data's
            starts = np.r_[chunks, n]
            ends = starts[np.searchsorted(starts, ends)]
        cuts = np.unique(np.r_[0, ends, n])
        bounds = [(int(a), int(c)) for a, c in zip(cuts[:-1], cuts[1:], strict=True)]
    first = np.full(n_rows, len(bounds), dtype=np.int64)
    for i in range(len(bounds) - 1, -1, -1):  # backwards: earlier runs overwrite
        start, stop = bounds[i]
        first[batches.rows[batches.offsets[start] : batches.offsets[stop]]] = i
    order = np.argsort(first, kind="stable")  # rows by first run, in row order within one
    at = np.searchsorted(first[order], np.arange(len(bounds) + 1))
    out = [Run(a, c, order[at[i] : at[i + 1]]) for i, (a, c) in enumerate(bounds)]
    rest = order[at[len(bounds)] :]
    out += [Run(0, 0, rest[lo : lo + run_rows]) for lo in range(0, rest.shape[0], max(run_rows, 1))]
    return out


@dataclass
class Streamed:
    """What a streamed audit gives ``api.audit`` to build its result from."""

    loaded: LoadResult
    corpus: StreamCorpus
    plan: Plan
    batches: GlobalBatches
    judgement: Judgement
    detectors: list[Detector]
    row_hashes: pl.Series


def index(
    paths: Sequence[str],
    cfg: AuditConfig,
    sizes: Sizes,
    spill: Spill,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
    read: Callable[..., _Read] | None = None,
) -> tuple[_Read, StreamCorpus, Plan, Work]:
    """The global stages: read (spilling texts), number the texts, plan the batches, prepare the
    corpus-wide evidence and cut the batches into runs. ``read`` replaces ``read_input``."""
    why = unsupported(cfg)
    if why is not None:
        raise ConfigError(f"the {cfg.engine} engine cannot run this audit: {why}", fix="pass --engine memory")
    tick = progress("Reading and normalising rows", 0) if progress else None
    got = (read or read_input)(paths, cfg, spill, sizes.reading(), tick)
    tids, n_texts = got.keys.text_ids()
    raw = got.keys.raw_ids() if got.keys.raw else np.zeros((tids.shape[0], 0), np.int64)
    first = first_rows(tids, n_texts)
    corpus = StreamCorpus(got.meta, tids, n_texts, raw, spill, cfg.normalise, first)
    if cfg.plan.plan_file:
        plan = read_plan_file(cfg.plan.plan_file, got.meta.get_column("id"))
    else:
        plan = make_plan(cfg.plan, corpus.n_rows, corpus.raw)
    batches = plan.global_batches(cfg.plan.world_size)
    global_detectors: dict[str, Detector] = {}
    for d in default_detectors(cfg):
        if d.name in GLOBAL_DETECTORS:
            if isinstance(d, LinkedDetector):  # the chains only: each run checks their texts with its vectors
                d = LinkedDetector(d.max_hops)
            d.prepare(corpus)
            global_detectors[d.name] = d
    shape = replace(got.keys.shape(), spaces=vector_spaces(cfg))
    run_rows = sizes.judging(shape, got.loaded.files[0])
    # The judge's chunks of the whole data (``judge.chunk_bounds``): a run judges its part of them as they are,
    # so that every similarity matrix, and every embedding score read from one, is the in-memory engine's.
    chunks = np.array([a for a, _ in chunk_bounds(batches, tids.shape[1] - 1)], dtype=np.int64)
    runs = plan_runs(batches, corpus.n_rows, run_rows, chunks)
    work = Work(cfg, tids, first, batches, runs, global_detectors, chunks=chunks)
    if cfg.embedding.enabled:
        from contrast_audit.engine import vectors

        work.embedding = vectors.prepare(cfg, corpus, work, spill.read, progress)
        linked = global_detectors.get("linked")
        if isinstance(linked, LinkedDetector):
            linked.near_bar, linked.checks_near = work.embedding.link_bar, True
    return got, corpus, plan, work


def vector_spaces(cfg: AuditConfig) -> int:
    """Vector matrices a run holds per text: none without embeddings; else, as the in-memory estimate counts
    them, two (the query and document spaces, or the first stage's static vectors and their map)."""
    return 2 if cfg.embedding.enabled else 0


def assemble(
    got: _Read,
    corpus: StreamCorpus,
    plan: Plan,
    work: Work,
    findings: list[pl.DataFrame],
    mislabelled: list[pl.DataFrame],
) -> Streamed:
    """The result of every run, in report order, with the counts the plan alone gives."""
    cfg = work.cfg
    by_direction, per_row = candidate_counts(
        corpus, work.batches, cfg.loss.directions, np.ones(corpus.n_rows, dtype=bool)
    )
    # Unprepared detectors describe themselves, with what embedding evidence counted over every run.
    detectors = [work.global_detectors.get(d.name, d) for d in default_detectors(cfg, shared=work.embedding)]
    judgement = Judgement(
        findings=finish_findings(findings, cfg.loss.directions),
        vetoed=finish_vetoed(findings, cfg.loss.directions),
        mislabelled=finish_mislabelled(mislabelled),
        candidates=sum(by_direction.values()),
        candidates_by_direction=by_direction,
        candidates_per_row=per_row,
        # Unprepared detectors describe themselves: minhash's corpus-wide counts stay None.
        detector_info={d.name: d.info() for d in detectors},
    )
    return Streamed(got.loaded, corpus, plan, work.batches, judgement, detectors, hex_hashes(got.keys.row_hashes()))


def run(
    paths: Sequence[str],
    cfg: AuditConfig,
    sizes: Sizes,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
    spill_parent: str | None = None,
) -> Streamed:
    """The streamed audit; the texts wait in a spill directory under ``spill_parent`` (the system's
    temporary directory by default) until the result is dropped."""
    spill = Spill(spill_parent)
    try:
        got, corpus, plan, work = index(paths, cfg, sizes, spill, progress)
        findings: list[pl.DataFrame] = []
        mislabelled: list[pl.DataFrame] = []
        tick = progress("Comparing batches", len(work.batches)) if progress else None
        for i, r in enumerate(work.runs):
            frames, mis = work.judge(i, spill.read(work.rows(i)))
            findings += frames
            mislabelled.append(mis)
            if tick:
                tick(r.stop - r.start)
        return assemble(got, corpus, plan, work, findings, mislabelled)
    except BaseException:
        spill.close()  # now, not when the exception's frames are let go
        raise
