"""New rows against reference data: repeats of existing training rows and leaks of eval rows.

Every text of every new row (anchor, positive, hard negatives) is compared with every distinct
text of the reference data (each role of the existing rows; eval queries, documents and titles):

- ``exact``: the same normal form (``certain``);
- ``minhash``: LSH candidates (shared band keys) verified at the scan's MinHash threshold;
- ``embedding``: cosine at or above the scan's ``positive_threshold``, from an exact matrix product
  of unit vectors in blocks (numpy BLAS).

MinHash and embedding matches are ``likely`` and pass the scan's guards first: short texts with
different numbers (number guard) or whose tokens do not align (alignment guard) are not
near-duplicates. Each overlap names the first reference row holding the matched text.

Signatures and embeddings of reference texts persist in a content-addressed index (``TargetIndex``):
shards keyed by a hash of each text, so a rerun computes only texts it has not seen.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.baseline import overlap_rows
from contrast_audit.config import AuditConfig, ColumnMapping
from contrast_audit.corpus import Corpus, role_codes, role_name
from contrast_audit.embed import (
    VECTOR_DTYPE,
    EmbeddingCache,
    EmbeddingStore,
    ShardCache,
    default_cache_dir,
    dequantise,
    encode_batches,
    find_keys,
    quantise,
    text_keys,
)
from contrast_audit.errors import InputError
from contrast_audit.evidence import minhash
from contrast_audit.evidence.base import CERTAIN, LIKELY, SEVERITY_NAMES
from contrast_audit.evidence.minhash import band_keys, lsh_params, signatures
from contrast_audit.io.load import LoadResult, expand_paths, load_rows
from contrast_audit.io.readers import KEY, TEXT, read_raw
from contrast_audit.normalise import normalise_expr

TARGETS = ("existing", "eval")
MAX_MATCHES = 10  # matched reference texts kept per (new row, role, target), best first
SIM_BLOCK = 16_384  # reference vectors per matrix product block
INDEX_FORMAT = "1"
BEIR_FILES = ("queries.jsonl", "corpus.jsonl")

_EVIDENCE = pl.List(pl.Struct({"kind": pl.String, "score": pl.Float64, "threshold": pl.Float64}))
_OCCURRENCE = {"id": pl.String, "file": pl.String, "line": pl.Int64, "role": pl.String, "text": pl.String}


def text_hashes(norms: pl.Series) -> pl.Series:
    """16 hex digits of the SHA-256 of each normalised text: how reports and baselines name texts."""
    return pl.Series(
        "hash", [hashlib.sha256(t.encode("utf-8")).hexdigest()[:16] for t in norms.to_list()], dtype=pl.String
    )


# --- loading reference data -------------------------------------------------------------------


def row_occurrences(rows: pl.DataFrame) -> pl.DataFrame:
    """Every text of canonical rows: ``id, file, line, role, text``, row by row, each row's roles in order."""
    rows = rows.with_row_index("_n")
    base = ["_n", "id", "file", "line"]
    negatives = (
        rows.select(*base, pl.col("negatives").alias("text"))
        .with_columns(pl.int_ranges(1, pl.col("text").list.len() + 1).alias("k"))
        .explode("text", "k")
        .drop_nulls("text")
        .select(*base, pl.format("negative_{}", pl.col("k")).alias("role"), "text", pl.col("k").cast(pl.Int64))
    )
    parts = [
        rows.select(
            *base, pl.lit("anchor").alias("role"), pl.col("anchor").alias("text"), pl.lit(-1, pl.Int64).alias("k")
        ),
        rows.select(
            *base, pl.lit("positive").alias("role"), pl.col("positive").alias("text"), pl.lit(0, pl.Int64).alias("k")
        ),
        negatives,
    ]
    return (
        pl.concat(parts)
        .sort("_n", "k")  # row by row, each row's roles in order
        .select(list(_OCCURRENCE))
        .cast(_OCCURRENCE)
    )


def load_existing(paths: Sequence[str], mapping: ColumnMapping, on_bad_row: str):
    """Existing training rows (``LoadResult``) and their texts."""
    loaded = load_rows(list(paths), mapping, on_bad_row)
    return loaded, row_occurrences(loaded.rows)


def with_existing_rows(new: LoadResult, existing: LoadResult) -> LoadResult:
    """New and existing rows in one frame (new first) with an ``is_new`` flag, for an in-batch
    audit planned over both. Existing rows numbered by position continue after the new rows; an
    existing id that repeats a new row's id is prefixed with ``existing:``."""
    old = existing.rows
    if all(m.id is None for m in existing.mappings):  # ids are row numbers: continue the count
        offset = new.rows.height + len(new.skipped)
        number = pl.col("id").cast(pl.Int64, strict=False)
        old = old.with_columns(
            pl.when(number.is_not_null()).then((number + offset).cast(pl.String)).otherwise(pl.col("id")).alias("id")
        )
    taken = new.rows.get_column("id").implode()
    old = old.with_columns(
        pl.when(pl.col("id").is_in(taken)).then("existing:" + pl.col("id")).otherwise(pl.col("id")).alias("id")
    )
    rows = pl.concat(
        [new.rows.with_columns(pl.lit(True).alias("is_new")), old.with_columns(pl.lit(False).alias("is_new"))],
        how="vertical_relaxed",
    )
    return LoadResult(
        rows=rows,
        mappings=new.mappings + existing.mappings,
        skipped=new.skipped + existing.skipped,
        files=new.files + existing.files,
    )


def eval_files(patterns: Sequence[str]) -> list[Path]:
    """Eval inputs: files, globs, or BEIR directories (their queries.jsonl and corpus.jsonl)."""
    out: list[Path] = []
    rest: list[str] = []
    for pattern in patterns:
        path = Path(pattern)
        if path.is_dir():
            found = [path / name for name in BEIR_FILES if (path / name).is_file()]
            if not found:
                raise InputError(
                    pattern,
                    "is a directory without queries.jsonl or corpus.jsonl",
                    fix="pass eval files, a glob, or a BEIR dataset directory",
                )
            out.extend(found)
        elif any(ch in pattern for ch in "*?[") and not path.is_file():
            rest.extend(sorted(glob.glob(pattern, recursive=True)) or [pattern])
        else:
            rest.append(pattern)
    return out + (expand_paths(rest) if rest else [])


def load_eval(
    paths: Sequence[str], mapping: ColumnMapping, text_column: str | None, on_bad_row: str
) -> tuple[list[str], pl.DataFrame]:
    """Eval texts from pair files, a single-text column (``text_column``) or BEIR records
    (``_id``, ``text`` and an optional ``title``); returns the files read and their texts."""
    files = eval_files(paths)
    frames: list[pl.DataFrame] = []
    for path in files:
        single = _single_text_columns(path, text_column)
        if single is None:
            frames.append(row_occurrences(load_rows([str(path)], mapping, on_bad_row).rows))
            continue
        raw = read_raw(
            path,
            on_bad_row,
            lambda cols, _s=single: {
                **dict.fromkeys((c for c in ("_id", "id") if c in cols), KEY),
                **dict.fromkeys((c for c in _s if c in cols), TEXT),
            },
        )
        frame = raw.frame
        missing = [c for c in single[:1] if c not in frame.columns]
        if missing:
            raise InputError(
                str(path),
                f"column '{missing[0]}' not found (columns: {', '.join(frame.columns)})",
                fix="name the eval text column with --eval-text",
            )
        n = frame.height
        where = raw.lines if raw.lines is not None else (raw.index if raw.index is not None else np.arange(n)) + 1
        index = raw.index if raw.index is not None else np.arange(n)
        ident = next((c for c in ("_id", "id") if c in frame.columns), None)
        ids = frame.get_column(ident).cast(pl.String) if ident else pl.Series(index).cast(pl.String)
        base = pl.DataFrame({"id": ids, "file": [str(path)] * n, "line": pl.Series(where, dtype=pl.Int64)})
        role = "text" if text_column is None else text_column
        if path.name == "queries.jsonl" and text_column is None:
            role = "query"
        for column, name in zip(single, (role, "title"), strict=False):
            if column not in frame.columns:
                continue
            texts = frame.get_column(column)
            if texts.dtype != pl.String:
                raise InputError(str(path), f"column '{column}' is {texts.dtype}, not text", fix="name a text column")
            part = base.with_columns(pl.lit(name).alias("role"), texts.alias("text")).filter(
                pl.col("text").is_not_null() & (pl.col("text").str.strip_chars() != "")
            )
            frames.append(part.select(list(_OCCURRENCE)))
    out = pl.concat(frames).cast(_OCCURRENCE) if frames else pl.DataFrame(schema=_OCCURRENCE)
    return [str(f) for f in files], out


def _single_text_columns(path: Path, text_column: str | None) -> tuple[str, ...] | None:
    """The text columns of a single-text eval file, or None for pair data."""
    if text_column is not None:
        return (text_column,)
    columns = _columns(path)
    if "_id" in columns and "text" in columns:
        return ("text", "title")  # BEIR queries or corpus
    return None


def _columns(path: Path) -> list[str]:
    """Column names of one file (the first JSON record's keys, or the header)."""
    if path.suffix.lower() in (".parquet", ".pq"):
        return list(pl.read_parquet_schema(path))
    try:
        with path.open(encoding="utf-8-sig", errors="replace") as handle:
            first = handle.readline()
    except OSError:
        return []  # read_raw reports it with the reason
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        import json

        try:
            record = json.loads(first)
        except ValueError:
            return []
        return list(record) if isinstance(record, dict) else []
    sep = "\t" if path.suffix.lower() in (".tsv", ".tab") else ","
    return [c.strip() for c in first.rstrip("\r\n").split(sep)]


# --- the persisted index ----------------------------------------------------------------------


class TargetIndex:
    """MinHash signatures and embeddings of reference texts, by text hash, in ``directory``.

    Signatures live in ``minhash-<settings>/shard-*.npz`` (``keys``, ``values``, ``empty``);
    embeddings in the embedding cache's own layout under the same directory. Each shard is written
    atomically; a damaged shard is ignored and its texts computed again.
    """

    def __init__(self, directory: Path, enabled: bool = True) -> None:
        self.dir = directory
        self.enabled = enabled
        self.stats: dict[str, int] = {
            "minhash_computed": 0,
            "minhash_indexed": 0,
            "embeddings_computed": 0,
            "embeddings_indexed": 0,
        }

    def minhash(self, norms: pl.Series, settings: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """(values, empty) of ``norms``' signatures, computing only texts the index lacks. The shard
        directory is named by every setting the values depend on, the shingle hash and the
        permutation scheme included, so signatures made another way are never read back."""
        made = {**settings, "hash": minhash.SHINGLE_HASH, "scheme": minhash.SCHEME}
        tag = hashlib.sha256(repr(sorted(made.items())).encode()).hexdigest()[:16]
        shards = ShardCache(self.dir / f"minhash-{INDEX_FORMAT}-{tag}")
        keys = text_keys(norms.to_list(), "minhash:")
        n = keys.shape[0]
        values = np.empty((n, settings["num_perm"]), dtype=np.uint32)
        empty = np.zeros(n, dtype=bool)
        found = np.zeros(n, dtype=bool)
        stored = shards.read(("keys", "values", "empty")) if self.enabled else None
        if stored is not None:
            found, at = find_keys(stored["keys"], keys)
            values[found] = stored["values"][at]
            empty[found] = stored["empty"][at]
        missing = np.flatnonzero(~found)
        if missing.size:
            sig = signatures(norms.gather(missing), **settings)
            values[missing] = sig.values
            empty[missing] = sig.empty
            if self.enabled:
                _unique_write(shards, keys[missing], values=sig.values, empty=sig.empty)
        self.stats["minhash_computed"] += int(missing.size)
        self.stats["minhash_indexed"] += int(n - missing.size)
        return values, empty

    def embeddings(self, encoder: Encoder, texts: list[str]) -> np.ndarray:
        cache = EmbeddingCache(self.dir, encoder.fingerprint, encoder.prompt) if self.enabled else None
        vectors, computed = encoder.vectors(texts, cache)
        self.stats["embeddings_computed"] += computed
        self.stats["embeddings_indexed"] += len(texts) - computed
        return vectors


def _unique_write(shards: ShardCache, keys: np.ndarray, **arrays: np.ndarray) -> None:
    _, first = np.unique(keys, return_index=True)
    first.sort()
    try:
        shards.write(keys[first], **{k: v[first] for k, v in arrays.items()})
    except OSError:
        pass  # a read-only index only costs a recomputation next time


@dataclass
class Encoder:
    """Unit vectors of texts with the scan's model and document prompt, cached by text hash."""

    store: EmbeddingStore
    prompt: str = ""
    fingerprint: str = ""
    memo: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, store: EmbeddingStore) -> Encoder:
        from contrast_audit import model as model_io

        source = getattr(store, "source", None) or model_io.resolve(store.cfg.model)
        store.source = source
        return cls(store, store.cfg.doc_prompt, store.vectors_id(source))

    def vectors(self, texts: list[str], cache: EmbeddingCache | None) -> tuple[np.ndarray, int]:
        """(vectors, how many were encoded) of ``texts``, in the cache's stored form (float16) whether
        encoded now or read, so a cold and a warm run score alike; ``neighbours`` scores them in float32."""
        keys = text_keys(texts, self.prompt)
        n = len(texts)
        found, cached = cache.lookup(keys) if cache is not None else (np.zeros(n, dtype=bool), None)
        missing = np.flatnonzero(~found)
        if missing.size == 0 and cached is not None:
            return cached, 0  # all indexed: no second copy of a large matrix
        dim = cached.shape[1] if cached is not None and cached.shape[0] else None
        new = None
        if missing.size:
            todo = [texts[i] for i in missing]
            for part, vecs in encode_batches(self.store.model(), todo, self.prompt, self.store.cfg.batch_size):
                if new is None:
                    new = np.zeros((len(todo), vecs.shape[1]), dtype=np.float32)
                new[part] = vecs
            dim = new.shape[1]
            if cache is not None:
                try:
                    _, first = np.unique(keys[missing], return_index=True)
                    cache.store(keys[missing][first], new[first])
                except OSError:
                    pass
        out = np.zeros((n, dim or 0), dtype=VECTOR_DTYPE)
        if cached is not None and cached.shape[0]:
            out[found] = cached
        if new is not None:
            out[missing] = quantise(new)
        return out, int(missing.size)


def default_index_dir(cfg: AuditConfig) -> Path:
    root = Path(cfg.embedding.cache_dir) if cfg.embedding.cache_dir else default_cache_dir()
    return root / "index"


# --- matching ---------------------------------------------------------------------------------


@dataclass
class Targets:
    """Distinct reference texts of one target kind, each with its first occurrence."""

    kind: str
    texts: pl.DataFrame  # norm, text, id, file, line, role (first occurrence), in first-seen order
    occurrences: int
    files: list[str]


def distinct_targets(kind: str, occurrences: pl.DataFrame, cfg: AuditConfig, files: list[str]) -> Targets:
    """Each distinct normalised text with its first occurrence, and its second (``alt_*``) for when the first
    is the new row itself (a file scanned and also given as reference data)."""
    normed = (
        occurrences.with_columns(normalise_expr(pl.col("text"), cfg.normalise).alias("norm"))
        .filter(pl.col("norm") != "")
        .with_columns(pl.int_range(pl.len()).over("norm").alias("_occ"))
    )
    second = normed.filter(pl.col("_occ") == 1).select(
        "norm", *(pl.col(c).alias(f"alt_{c}") for c in ("id", "file", "line", "role"))
    )
    texts = normed.filter(pl.col("_occ") == 0).drop("_occ").join(second, on="norm", how="left", maintain_order="left")
    return Targets(kind, texts, occurrences.height, files)


@dataclass
class Matcher:
    """Finds reference texts equivalent to new texts with the scan's evidence and guards."""

    cfg: AuditConfig
    index: TargetIndex
    store: EmbeddingStore | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def match(self, new: pl.DataFrame, targets: Targets) -> pl.DataFrame:
        """Pairs (``new``: position in ``new``, ``target``: position in ``targets.texts``) with
        ``severity_rank``, ``score`` and ``evidence``. ``new`` has ``norm`` and ``text``."""
        tnorm = targets.texts.get_column("norm")
        exact = (
            new.select(pl.col("norm"))
            .with_row_index("new")
            .join(targets.texts.select("norm").with_row_index("target"), on="norm")
            .select(pl.col("new").cast(pl.Int64), pl.col("target").cast(pl.Int64))
        )
        exact = exact.with_columns(
            pl.lit(CERTAIN, pl.Int8).alias("severity_rank"),
            pl.lit(1.0).alias("score"),
            pl.concat_list(
                pl.struct(pl.lit("exact").alias("kind"), pl.lit(1.0).alias("score"), pl.lit(1.0).alias("threshold"))
            ).alias("evidence"),
        )
        semantic: list[pl.DataFrame] = []
        if self.cfg.minhash.enabled:
            semantic.append(self._minhash(new.get_column("norm"), tnorm))
        if self.cfg.embedding.enabled:
            semantic.append(self._embedding(new.get_column("text"), targets.texts.get_column("text")))
        near = _combine(semantic).join(exact.select("new", "target"), on=["new", "target"], how="anti")
        near = self._guard(near, new, targets.texts, targets.kind)
        kinds = [k for k in ("minhash", "embedding") if f"s_{k}" in near.columns]
        near = near.select(
            "new",
            "target",
            pl.lit(LIKELY, pl.Int8).alias("severity_rank"),
            pl.max_horizontal([pl.col(f"s_{k}").fill_null(0.0) for k in kinds] or [pl.lit(0.0)])
            .cast(pl.Float64)
            .alias("score"),
            _evidence_list(kinds, self._thresholds()).alias("evidence"),
        )
        return pl.concat([exact, near.cast(exact.schema)])

    def _thresholds(self) -> dict[str, float]:
        return {"minhash": self.cfg.minhash.threshold, "embedding": self.cfg.embedding.positive_threshold}

    def _minhash(self, new: pl.Series, target: pl.Series) -> pl.DataFrame:
        m = self.cfg.minhash
        settings = {"num_perm": m.num_perm, "seed": m.seed, "shingle": m.shingle, "ngram": m.ngram}
        bands, rows = lsh_params(m.threshold, m.num_perm)
        tv, tempty = self.index.minhash(target, settings)
        nsig = signatures(new, **settings)
        from contrast_audit.evidence.minhash import Signatures

        tsig = Signatures(nsig.settings, tv, tempty)
        nkeys = band_keys(nsig, bands, rows)
        tkeys = band_keys(tsig, bands, rows)
        nok = np.flatnonzero(~nsig.empty)
        tok = np.flatnonzero(~tempty)
        found = []
        for j in range(bands):
            left = pl.DataFrame({"key": nkeys[nok, j], "new": nok.astype(np.int64)})
            right = pl.DataFrame({"key": tkeys[tok, j], "target": tok.astype(np.int64)})
            found.append(left.join(right, on="key").select("new", "target"))
        pairs = (
            pl.concat(found).unique().sort("new", "target")
            if found
            else pl.DataFrame(schema={"new": pl.Int64, "target": pl.Int64})
        )
        a = pairs.get_column("new").to_numpy()
        b = pairs.get_column("target").to_numpy()
        jac = nsig.at_least(a, tsig, b, m.threshold)
        self.info["minhash_candidate_checks"] = self.info.get("minhash_candidate_checks", 0) + pairs.height
        return pairs.with_columns(pl.Series("s_minhash", jac)).filter(pl.col("s_minhash") >= m.threshold)

    def _embedding(self, new: pl.Series, target: pl.Series) -> pl.DataFrame:
        if self.store is None:
            self.store = EmbeddingStore(self.cfg.embedding)
        encoder = Encoder.of(self.store)
        main_cache = (
            EmbeddingCache(self.store.cache_root(), encoder.fingerprint, encoder.prompt)
            if self.cfg.embedding.use_cache
            else None
        )
        nv, _ = encoder.vectors(new.to_list(), main_cache)
        tv = self.index.embeddings(encoder, target.to_list())
        return neighbours(nv, tv, self.cfg.embedding.positive_threshold)

    def _guard(self, near: pl.DataFrame, new: pl.DataFrame, targets: pl.DataFrame, kind: str) -> pl.DataFrame:
        """Drops near-duplicate pairs of short texts that a guard vetoes (numbers, word order,
        alignment: the scan's bar for existing data, ``eval_alignment`` for eval data)."""
        if near.height == 0:
            return near
        policy = self.cfg.policy
        used = near.get_column("target").unique().sort()
        mini = _mini_corpus(new, targets, used)
        u = near.get_column("new").to_numpy()
        v = new.height + np.searchsorted(used.to_numpy(), near.get_column("target").to_numpy())
        veto = np.zeros(near.height, dtype=bool)
        if policy.number_guard_words > 0:
            from contrast_audit.evidence.numbers import NumberGuard

            guard = NumberGuard(policy.number_guard_words)
            guard.prepare(mini)
            veto |= guard.disagree(u, v)
        if policy.entity_guard_words > 0:
            from contrast_audit.evidence.guards import EntityGuard

            entity = EntityGuard(policy.entity_guard_words)
            entity.prepare(mini)
            check = np.flatnonzero(~veto)
            if check.size:
                veto[check] = entity.disagree(u[check], v[check])
        if policy.negation_guard_words > 0:
            from contrast_audit.evidence.guards import NegationGuard

            negation = NegationGuard(policy.negation_guard_words)
            negation.prepare(mini)
            check = np.flatnonzero(~veto & negation.short[u] & negation.short[v])
            if check.size:
                veto[check] = negation.fails(u[check], v[check])
        if policy.word_order_threshold > 0:
            from contrast_audit.evidence.guards import OrderGuard

            order = OrderGuard(policy.word_order_threshold, policy.alignment_words)
            order.prepare(mini)
            check = np.flatnonzero(~veto & order.short[u] & order.short[v])
            if check.size:
                veto[check] = order.fails(u[check], v[check])
        bar = self.cfg.reference.eval_alignment if kind == "eval" else policy.alignment_threshold
        if self.cfg.embedding.enabled and bar > 0 and self.store is not None:
            from contrast_audit.evidence.guards import short_texts
            from contrast_audit.tokens import TokenStore

            short = short_texts(mini, policy.alignment_words)
            check = np.flatnonzero(~veto & short[u] & short[v])
            if check.size:
                tokens = TokenStore(self.store, policy.alignment_match)
                tokens.prepare(mini)
                veto[check] = tokens.alignment(u[check], v[check]) < bar
                tokens.finish()
                self.info["token_texts_encoded"] = tokens.stats["token_texts_encoded"]
        self.info["vetoed"] = self.info.get("vetoed", 0) + int(veto.sum())
        return near.filter(pl.Series(~veto))


def neighbours(new: np.ndarray, target: np.ndarray, threshold: float) -> pl.DataFrame:
    """Every (new, target) pair of unit vectors with cosine >= ``threshold``: an exact float32 matrix
    product (BLAS) over blocks of ``SIM_BLOCK`` reference vectors. Stored (float16) vectors are
    dequantised block by block, so the reference matrix is never held twice."""
    found_new, found_target, found_score = [], [], []
    if new.shape[0] and target.shape[0]:
        new = _scoring_form(new)
        for lo in range(0, target.shape[0], SIM_BLOCK):
            sim = new @ _scoring_form(target[lo : lo + SIM_BLOCK]).T
            rows = np.flatnonzero(sim.max(axis=1) >= threshold)  # few new texts have a neighbour here
            i, j = np.nonzero(sim[rows] >= threshold)
            i = rows[i]
            found_new.append(i.astype(np.int64))
            found_target.append(j.astype(np.int64) + lo)
            found_score.append(sim[i, j].astype(np.float64))
    cat = lambda parts, dt: np.concatenate(parts) if parts else np.zeros(0, dtype=dt)  # noqa: E731
    return pl.DataFrame(
        {
            "new": cat(found_new, np.int64),
            "target": cat(found_target, np.int64),
            "s_embedding": cat(found_score, np.float64),
        }
    )


def _scoring_form(vectors: np.ndarray) -> np.ndarray:
    return dequantise(vectors) if vectors.dtype == VECTOR_DTYPE else np.asarray(vectors, dtype=np.float32)


def _combine(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One row per pair found by any semantic detector, with each detector's score or null."""
    if not frames:
        return pl.DataFrame(schema={"new": pl.Int64, "target": pl.Int64})
    out = frames[0]
    for frame in frames[1:]:
        out = out.join(frame, on=["new", "target"], how="full", coalesce=True)
    return out


def _evidence_list(kinds: list[str], thresholds: dict[str, float]) -> pl.Expr:
    structs = [
        pl.when(pl.col(f"s_{k}").is_not_null()).then(
            pl.struct(
                pl.lit(k).alias("kind"),
                pl.col(f"s_{k}").cast(pl.Float64).alias("score"),
                pl.lit(thresholds[k], pl.Float64).alias("threshold"),
            )
        )
        for k in kinds
    ]
    if not structs:
        return pl.lit([], _EVIDENCE)
    return pl.concat_list(structs).list.drop_nulls()


def _mini_corpus(new: pl.DataFrame, targets: pl.DataFrame, used: pl.Series) -> Corpus:
    """A corpus of the new texts followed by the matched reference texts, for the guards."""
    texts = pl.concat([new.select("text", "norm"), targets.select("text", "norm")[used]]).with_row_index("tid")
    empty = np.zeros(0, dtype=np.int64)
    return Corpus(
        rows=pl.DataFrame(),
        texts=texts,
        anchor=empty,
        positive=empty,
        negatives=np.zeros((0, 0), dtype=np.int64),
        group=empty,
        raw=np.zeros((0, 2), dtype=np.int64),
        raw_texts=texts.get_column("text"),
    )


OVERLAP_TEXTS = ("text", "target_text", "text_hash", "target_text_hash")
OVERLAP_SCHEMA = {
    "row_id": pl.String,  # the new row
    "file": pl.String,
    "line": pl.Int64,
    "role": pl.String,  # which text of the new row: anchor, positive, negative_k
    "target": pl.String,  # "existing" or "eval"
    "target_id": pl.String,
    "target_file": pl.String,
    "target_line": pl.Int64,
    "target_role": pl.String,
    "severity": pl.Enum(["certain", "likely", "suspect"]),
    "evidence": pl.List(pl.Struct({"kind": pl.String, "score": pl.Float64, "threshold": pl.Float64})),
    "baseline": pl.Boolean,
}


def empty_overlaps() -> pl.DataFrame:
    """Overlaps of new rows with existing training rows or eval rows (``scan --against/--eval``):
    one row per (new row, role, matched target text)."""
    return pl.DataFrame(schema=OVERLAP_SCHEMA)


# --- the API ----------------------------------------------------------------------------------


@dataclass
class OverlapResult:
    """Overlaps (``OVERLAP_SCHEMA``), their texts and hashes row for row, and how they were found."""

    overlaps: pl.DataFrame
    texts: pl.DataFrame  # text, target_text, text_hash, target_text_hash
    info: dict[str, Any]


def new_texts(corpus: Corpus, is_new: np.ndarray) -> pl.DataFrame:
    """(row, role code, tid) of every text of the new rows."""
    rows = np.flatnonzero(is_new).astype(np.int64)
    cols = np.concatenate([corpus.anchor[:, None], corpus.positive[:, None], corpus.negatives], axis=1)[rows]
    roles = np.arange(-1, cols.shape[1] - 1, dtype=np.int64)
    frame = pl.DataFrame(
        {
            "row": np.repeat(rows, cols.shape[1]),
            "role": np.tile(roles, rows.shape[0]),
            "tid": cols.reshape(-1),
        }
    )
    return frame.filter(pl.col("tid") >= 0)


def find_overlaps(
    corpus: Corpus,
    is_new: np.ndarray,
    targets: Sequence[Targets],
    cfg: AuditConfig,
    *,
    store: EmbeddingStore | None = None,
    index: TargetIndex | None = None,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
) -> OverlapResult:
    """Overlaps of the new rows' texts with each target's texts."""

    if index is None:
        ref = cfg.reference
        index = TargetIndex(Path(ref.index_dir) if ref.index_dir else default_index_dir(cfg), ref.use_index)
    occ = new_texts(corpus, is_new)
    used = occ.get_column("tid").unique().sort()
    new = corpus.texts.select("text", "norm")[used]
    matcher = Matcher(cfg, index, store)
    frames: list[pl.DataFrame] = []
    per_target: dict[str, dict[str, int]] = {}
    tick = progress("Checking reference data", len(targets)) if progress else None
    for t in targets:
        pairs = matcher.match(new, t) if t.texts.height and new.height else None
        per_target[t.kind] = {
            "files": len(t.files),
            "texts": t.occurrences,
            "distinct_texts": t.texts.height,
        }
        if tick:
            tick(1)
        if pairs is None or pairs.height == 0:
            continue
        matched = t.texts.with_row_index("target").with_columns(pl.col("target").cast(pl.Int64))
        frames.append(
            pairs.with_columns(pl.Series("tid", used.to_numpy()[pairs.get_column("new").to_numpy()]))
            .join(matched, on="target")
            .rename(
                {
                    "text": "target_text",
                    "norm": "target_norm",
                    "id": "target_id",
                    "file": "target_file",
                    "line": "target_line",
                    "role": "target_role",
                }
            )
            .with_columns(pl.lit(t.kind).alias("target"))
        )
    info = {"index": str(index.dir) if index.enabled else None, "targets": per_target, **index.stats, **matcher.info}
    if not frames:
        return OverlapResult(pl.DataFrame(schema=OVERLAP_SCHEMA), _empty_texts(), info)
    kind_order = {k: i for i, k in enumerate(TARGETS)}
    rows = corpus.rows
    joined = occ.join(pl.concat(frames, how="diagonal_relaxed"), on="tid")
    # A row of a file that is scanned and also given as reference data matches itself: not an overlap.
    new_file = rows.get_column("file").gather(joined.get_column("row"))
    new_line = rows.get_column("line").gather(joined.get_column("row")).cast(pl.Int64)
    real = {
        f: os.path.realpath(f)
        for f in {*new_file.unique().to_list(), *joined.get_column("target_file").unique().to_list()}
        if f
    }
    itself = (
        new_file.replace_strict(real, default=None, return_dtype=pl.String)
        == joined.get_column("target_file").replace_strict(real, default=None, return_dtype=pl.String)
    ) & (new_line == joined.get_column("target_line").cast(pl.Int64))
    itself = itself.fill_null(False)
    alt = itself & joined.get_column("alt_line").is_not_null()
    joined = joined.with_columns(
        *(
            pl.when(pl.Series(alt)).then(pl.col(f"alt_{c}")).otherwise(pl.col(f"target_{c}")).alias(f"target_{c}")
            for c in ("id", "file", "line", "role")
        )
    ).filter(~itself | alt)
    found = (
        joined.with_columns(pl.col("target").replace_strict(kind_order, return_dtype=pl.Int64).alias("_k"))
        .sort(
            ["row", "role", "_k", "severity_rank", "score", "target"],
            descending=[False, False, False, True, True, False],
        )
        .filter(pl.int_range(pl.len()).over("row", "role", "_k") < MAX_MATCHES)
    )
    if found.height == 0:
        return OverlapResult(pl.DataFrame(schema=OVERLAP_SCHEMA), _empty_texts(), info)
    row_idx = found.get_column("row")
    roles = {int(c): role_name(int(c)) for c in found.get_column("role").unique().to_list()}
    overlaps = found.select(
        rows.get_column("id").gather(row_idx).alias("row_id"),
        rows.get_column("file").gather(row_idx).alias("file"),
        rows.get_column("line").gather(row_idx).cast(pl.Int64).alias("line"),
        pl.col("role").replace_strict(roles, return_dtype=pl.String),
        "target",
        "target_id",
        "target_file",
        "target_line",
        "target_role",
        pl.col("severity_rank").replace_strict(SEVERITY_NAMES, return_dtype=pl.String).alias("severity"),
        "evidence",
        pl.lit(False).alias("baseline"),
    ).cast(OVERLAP_SCHEMA)
    spelled = corpus.spelling(row_idx.to_numpy(), found.get_column("role").to_numpy())
    texts = pl.DataFrame(
        {
            "text": spelled,
            "target_text": found.get_column("target_text"),
            "text_hash": text_hashes(corpus.texts.get_column("norm").gather(found.get_column("tid"))),
            "target_text_hash": text_hashes(found.get_column("target_norm")),
        }
    )
    return OverlapResult(overlaps, texts, info)


def merge_overlaps(rows: pl.DataFrame, parts: Sequence[OverlapResult]) -> OverlapResult:
    """Overlaps found apart (reference data; repeats of the scanned data's own old rows) in one result, in
    report order (new row, role, target kind, severity, score), each (new text, matched row text) once;
    the first part's ``info``."""
    info = parts[0].info if parts else {}
    parts = [p for p in parts if p.overlaps.height]
    if not parts:
        return OverlapResult(pl.DataFrame(schema=OVERLAP_SCHEMA), _empty_texts(), info)
    if len(parts) == 1:
        return OverlapResult(parts[0].overlaps, parts[0].texts, info)
    both = pl.concat([pl.concat([p.overlaps, p.texts], how="horizontal") for p in parts])
    kind = {k: i for i, k in enumerate(TARGETS)}
    merged = (
        both.with_columns(
            pl.Series("_row", overlap_rows(rows, both)),
            pl.Series("_role", role_codes(both.get_column("role"))),
            pl.col("target").replace_strict(kind, return_dtype=pl.Int64).alias("_k"),
            pl.col("evidence").list.eval(pl.element().struct.field("score")).list.max().alias("_score"),
        )
        .unique(
            ["_row", "role", "target", "target_file", "target_line", "target_role"], keep="first", maintain_order=True
        )
        .sort(["_row", "_role", "_k", "severity", "_score"], descending=[False, False, False, False, True])
    )
    texts = list(_empty_texts().columns)
    return OverlapResult(merged.select(list(OVERLAP_SCHEMA)), merged.select(texts), info)


def repeat_targets(rows: pl.DataFrame, old: np.ndarray, cfg: AuditConfig, files: list[str]) -> Targets:
    """The old rows of the scanned data (``old``) as reference data: what a new row may repeat."""
    return distinct_targets("existing", row_occurrences(rows.filter(pl.Series(old))), cfg, files)


def exact_repeats(corpus: Corpus, fresh: np.ndarray, old: np.ndarray) -> OverlapResult:
    """Texts of the ``fresh`` rows that are texts of ``old`` rows, from the corpus's text ids alone (no
    text in memory: the streamed engine's repeats): each new text against the first old row holding it."""
    occ = new_texts(corpus, fresh)
    held = new_texts(corpus, old).rename({"row": "target_row", "role": "target_role_code"})
    first = held.sort("target_row", "target_role_code").unique("tid", keep="first", maintain_order=True)
    found = occ.join(first, on="tid").sort("row", "role")
    info: dict[str, Any] = {}
    if found.height == 0:
        return OverlapResult(pl.DataFrame(schema=OVERLAP_SCHEMA), _empty_texts(), info)
    rows = corpus.rows
    new_row, target_row = found.get_column("row"), found.get_column("target_row")
    roles = {
        c: role_name(c) for c in {*found.get_column("role").to_list(), *found.get_column("target_role_code").to_list()}
    }
    exact = pl.struct(pl.lit("exact").alias("kind"), pl.lit(1.0).alias("score"), pl.lit(1.0).alias("threshold"))
    overlaps = found.select(
        rows.get_column("id").gather(new_row).alias("row_id"),
        rows.get_column("file").gather(new_row).alias("file"),
        rows.get_column("line").gather(new_row).cast(pl.Int64).alias("line"),
        pl.col("role").replace_strict(roles, return_dtype=pl.String),
        pl.lit("existing").alias("target"),
        rows.get_column("id").gather(target_row).alias("target_id"),
        rows.get_column("file").gather(target_row).alias("target_file"),
        rows.get_column("line").gather(target_row).cast(pl.Int64).alias("target_line"),
        pl.col("target_role_code").replace_strict(roles, return_dtype=pl.String).alias("target_role"),
        pl.lit("certain").alias("severity"),
        pl.concat_list(exact).alias("evidence"),
        pl.lit(False).alias("baseline"),
    ).cast(OVERLAP_SCHEMA)
    hashes = text_hashes(corpus.norms(found.get_column("tid")))
    texts = pl.DataFrame(
        {
            "text": corpus.spelling(new_row.to_numpy(), found.get_column("role").to_numpy()),
            "target_text": corpus.spelling(target_row.to_numpy(), found.get_column("target_role_code").to_numpy()),
            "text_hash": hashes,
            "target_text_hash": hashes,
        }
    )
    return OverlapResult(overlaps, texts, info)


def _empty_texts() -> pl.DataFrame:
    return pl.DataFrame(schema={k: pl.String for k in ("text", "target_text", "text_hash", "target_text_hash")})


__all__ = [
    "Encoder",
    "Matcher",
    "OverlapResult",
    "TargetIndex",
    "Targets",
    "distinct_targets",
    "exact_repeats",
    "find_overlaps",
    "load_eval",
    "merge_overlaps",
    "repeat_targets",
    "load_existing",
    "neighbours",
    "row_occurrences",
    "text_hashes",
    "with_existing_rows",
]
