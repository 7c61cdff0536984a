"""The Ray engine: the streaming engine's stages with the per-row and per-run work on Ray Data; with
embedding evidence, the in-memory engine with its vectors computed by a pool of Ray actors.

- **read**: the driver reads the input in row chunks (``io.chunks``, so errors keep their
  ``file:line`` and ``--on-bad-row`` its meaning), spills the texts a report shows, and puts each
  chunk's texts in Ray's object store;
- **normalise**: ``map_batches`` normalises and hashes every chunk on the cluster (``row_keys``); the
  driver numbers the texts, plans the batches and prepares the corpus-wide evidence (``stream.index``);
- **judge**: every row is sent to the runs of global batches that hold it (``map_batches``), the rows
  are grouped by run (``groupby("run").map_groups``), and each group is judged as the streaming engine
  judges a run (``Work.judge``: MinHash signing and the guards happen there);
- **report**: the found pairs are written as Parquet shards, read back by the driver, and reported
  as usual.

With embedding evidence the driver first decides what is decided over every text, as the streaming engine
does (``engine.vectors``: the first stage's rows, the idf counts, the link bar, the backend), and ships it
with the runs; each run's task embeds its own texts (from the cache where it holds them) on one CPU and
sends back what it counted. The findings are the in-memory engine's. On a cluster with GPUs, and for the
evidence whose bars need every row's vectors (``--pair``, ``--above-positive``, ``--verifier``), the audit
runs in memory on the driver instead and only the vectors the cache lacks are computed on Ray
(``embedder``): one actor per GPU, or CPU actors, each encoding as a local run does.

``ray`` is an optional extra (``pip install 'contrast-audit[ray]'``). Without ``--ray-address`` the
engine starts a local Ray instance on this machine's usable CPUs and stops it at the end; with one it
joins that cluster, whose nodes need contrast-audit installed (docs/scale.md).
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.config import AuditConfig
from contrast_audit.engine import stream
from contrast_audit.errors import ConfigError
from contrast_audit.io.chunks import iter_row_chunks
from contrast_audit.judge import empty_findings

# Columns of a judged run's output: found pairs (``part`` "finding") and judged hard negatives
# ("mislabelled") in one table, so that one Parquet dataset holds both.
_OUT = {
    "part": pl.String,
    **{c: t for c, t in empty_findings().schema.items() if c not in ("severity", "masked", "baseline")},
    "account": pl.String,  # part "account": what a run's embedding stores counted (``embed.Shared.account``), JSON
}
RUNS_PER_WORKER = 2  # runs per worker CPU at least, so every worker has work


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise ConfigError(
            "--engine ray needs Ray Data, which is not installed",
            fix="pip install 'contrast-audit[ray]' (or pass --engine stream)",
        ) from exc
    return ray


@contextmanager
def connected(address: str | None) -> Iterator[Any]:
    """Ray, joined to the cluster at ``address`` or to a local instance started (and stopped) here."""
    head = check_address(address)
    ray = _import_ray()
    if ray.is_initialized():
        yield ray
        return
    from contrast_audit.resources import usable_cpus

    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    fix = (
        "check --ray-address (host:port of a running cluster's head, or auto), or leave it out to start a "
        "local instance"
    )
    if address and head:
        _reachable(address, *head, fix)
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(num_cpus=usable_cpus(), **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"cannot start or join Ray{f' at {address}' if address else ''}: {exc}", fix=fix) from exc
    # The scan reports its own progress: Ray Data's bars and per-dataset log lines would only be noise.
    logging.getLogger("ray.data").setLevel(logging.ERROR)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    try:
        yield ray
    finally:
        ray.shutdown()


@contextmanager
def worker_errors(ray: Any) -> Iterator[None]:
    """An audit's own error raised in a Ray task (a node without the model, another polars) reaches the
    user as that error, exit 2 with its fix, not as Ray's task error around a traceback."""
    from contrast_audit.errors import AuditError

    ctx = ray.data.DataContext.get_current()
    before = ctx.raise_original_map_exception
    ctx.raise_original_map_exception = True  # else Ray Data keeps only the cause's text
    try:
        yield
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, AuditError):
            cause.args = (cause.render(),)  # without the retry advice Ray Data appends to the text
            raise cause from None
        raise
    finally:
        ctx.raise_original_map_exception = before


MAX_PORT = 65535
_ADDRESS_FIX = "pass host:port of the cluster's head (e.g. 10.0.0.5:6379), or auto"


def check_address(address: str | None) -> tuple[str, int] | None:
    """``--ray-address``, checked before Ray is imported or anything read: ``auto``, ``local``,
    ``ray://HOST[:PORT]`` (Ray Client) or ``HOST:PORT`` (``[::1]:6379`` for IPv6), with a port from 1 to
    65535. Returns the host and port to probe for ``HOST:PORT``, None for the others; a ``ConfigError``
    (exit 2) saying what is wrong otherwise, where Ray would retry an address it cannot use for minutes
    or fail with its own error."""
    if address is None or address in ("auto", "local"):
        return None
    client = address.startswith("ray://")
    if "://" in address and not client:
        return None  # another scheme: left to Ray
    shown = f"'{_clip(address)}'"
    host, port = _host_port(address.removeprefix("ray://"))
    if port is None:
        if client:
            return None  # ray://HOST: Ray Client's default port
        raise ConfigError(f"--ray-address {shown} is not host:port (it has no port)", fix=_ADDRESS_FIX)
    if not host:
        raise ConfigError(f"--ray-address {shown} names no host", fix=_ADDRESS_FIX)
    if not (port.isascii() and port.isdecimal()):  # not isdigit(): "²" passes it and int() refuses it
        what = "is empty" if not port else f"'{_clip(port)}' is not a number"
        raise ConfigError(f"--ray-address {shown}: the port {what} (ports are 1 to {MAX_PORT})", fix=_ADDRESS_FIX)
    digits = port.lstrip("0") or "0"
    if len(digits) > len(str(MAX_PORT)) or not 1 <= int(digits) <= MAX_PORT:
        raise ConfigError(
            f"--ray-address {shown}: the port {_clip(port)} is out of range (ports are 1 to {MAX_PORT})",
            fix=_ADDRESS_FIX,
        )
    return None if client else (host, int(digits))


def _host_port(text: str) -> tuple[str, str | None]:
    """``HOST:PORT`` → (host, port), the port None when there is none; ``[IPv6]:PORT`` without brackets."""
    if text.startswith("[") and "]" in text:
        host, _, after = text[1:].partition("]")
        return (host, after[1:]) if after.startswith(":") else (host if not after else text, None)
    host, sep, port = text.rpartition(":")
    return (host, port) if sep else (text, None)


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reachable(address: str, host: str, port: int, fix: str) -> None:
    """Refuse a ``host:port`` nothing listens on at once: Ray itself retries such an address for minutes."""
    import socket

    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as exc:
        raise ConfigError(
            f"cannot join Ray at {address}: nothing answers there ({exc.strerror or exc})", fix=fix
        ) from exc


def _keys(batch: Any, normalise: Any, want_raw: bool, width: int, polars_version: str) -> Any:
    """``map_batches``: a block of spilled rows → their row numbers and keys (``stream.row_keys``)."""
    import pyarrow as pa

    if pl.__version__ != polars_version:  # its text hashes would not be the driver's
        raise ConfigError(
            f"a Ray worker has polars {pl.__version__} and the driver {polars_version}",
            fix="install the same contrast-audit environment on every node",
        )

    rows = pl.from_arrow(batch)
    assert isinstance(rows, pl.DataFrame)
    hashes, raw, row_hash = stream.row_keys(rows.drop("row"), normalise, want_raw)
    hashes = np.pad(hashes, ((0, 0), (0, width - hashes.shape[1]), (0, 0)))
    out = {"row": rows.get_column("row").to_numpy(), "row_hash": row_hash}
    for s in range(width):
        out[f"h{s}a"], out[f"h{s}b"] = hashes[:, s, 0], hashes[:, s, 1]
        if raw is not None:
            out[f"r{s}"] = np.pad(raw, ((0, 0), (0, width - raw.shape[1])))[:, s]
    return pa.table(out)


def _read_on_ray(ray: Any) -> Callable[..., stream._Read]:
    def read(
        paths: Sequence[str], cfg: AuditConfig, spill: stream.Spill, chunk_rows: int, tick: Callable | None
    ) -> stream._Read:
        chunks = iter_row_chunks(list(paths), cfg.mapping, cfg.on_bad_row, cfg.normalise, cfg.delimiter, chunk_rows)
        metas: list[pl.DataFrame] = []
        block_bytes: dict[int, int] = {}  # text bytes of each chunk, by its first row
        refs = []
        width = 2
        offset = 0
        for chunk in chunks:
            rows = chunk.rows
            if rows.height == 0:
                continue
            spill.write(rows)
            block_bytes[offset] = stream.text_bytes(rows)
            texts = rows.select(*stream.TEXT_COLUMNS, "group").with_row_index("row", offset=offset)
            refs.append(ray.put(texts.with_columns(pl.col("row").cast(pl.Int64)).to_arrow()))
            width = max(width, 2 + int(rows.get_column("negatives").list.len().max() or 0))
            metas.append(stream.compact(rows.drop(*stream.TEXT_COLUMNS)))
            offset += rows.height
            if tick:
                tick(rows.height)
        keys = stream.Keys(spill)
        if refs:
            want_raw = stream.wants_raw(cfg)
            ds = ray.data.from_arrow_refs(refs).map_batches(
                _keys,
                fn_kwargs={
                    "normalise": cfg.normalise,
                    "want_raw": want_raw,
                    "width": width,
                    "polars_version": pl.__version__,
                },
                batch_format="pyarrow",
                batch_size=None,
            )
            for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                row, hashes, raw, row_hash = _unpack(batch, width, want_raw)
                if row.shape[0]:  # a block is a run of consecutive rows
                    keys.add(int(row[0]), hashes, raw, row_hash)
        keys.text_bytes = sum(block_bytes.values())
        read = stream.finished_read(metas, keys, chunks, str(paths[0]))
        read.texts = refs
        return read

    return read


def _unpack(batch: Any, width: int, want_raw: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """A block of ``_keys`` output → rows, hashes, exact-string hashes and content hashes."""
    frame = pl.from_arrow(batch)
    assert isinstance(frame, pl.DataFrame)
    row = frame.get_column("row").to_numpy()
    if row.shape[0] and not np.array_equal(row, row[0] + np.arange(row.shape[0])):
        raise RuntimeError("a block of rows came back out of order")
    col = frame.get_column
    hashes = np.stack([np.stack([col(f"h{s}a").to_numpy(), col(f"h{s}b").to_numpy()], axis=1) for s in range(width)], 1)
    raw = np.stack([col(f"r{s}").to_numpy() for s in range(width)], axis=1) if want_raw else None
    return row, hashes, raw, col("row_hash").to_numpy()


_FETCHED: dict[str, Any] = {}


def _fetched(ref: Any) -> Any:
    """An object the driver put in the store, fetched once per worker process (the few of one audit)."""
    import ray

    key = ref.hex()
    if key not in _FETCHED:
        if len(_FETCHED) >= 4:
            _FETCHED.pop(next(iter(_FETCHED)))
        _FETCHED[key] = ray.get(ref)
    return _FETCHED[key]


def _assign(batch: Any, owners: Any) -> Any:
    """``map_batches``: each row once per run that reads it, with that run's number."""
    import pyarrow as pa

    offsets, runs = _fetched(owners)
    row = batch.column("row").to_numpy()
    count = offsets[row + 1] - offsets[row]
    take = np.repeat(np.arange(row.shape[0]), count)
    starts = np.repeat(offsets[row], count)
    within = np.arange(take.shape[0]) - np.repeat(np.cumsum(count) - count, count)
    out = batch.take(pa.array(take))
    return out.append_column("run", pa.array(runs[starts + within]))


def _judge(group: Any, work_ref: Any) -> Any:
    """``map_groups``: the rows of one run → its found pairs and judged hard negatives, and with embedding
    evidence what its stores counted."""
    work: stream.Work = _fetched(work_ref)
    if work.embedding is not None:
        _one_thread(work)
        work = replace(work, embedding=work.embedding.fresh())  # this run's counts, sent back to the driver
    frame = pl.from_arrow(group)
    assert isinstance(frame, pl.DataFrame)
    frame = frame.sort("row")
    i = int(frame.get_column("run")[0])
    findings, mislabelled = work.judge(i, frame.select(*stream.TEXT_COLUMNS, "group"))
    parts = [f.with_columns(pl.lit("finding").alias("part")) for f in findings]
    if mislabelled.height:
        parts.append(mislabelled.with_columns(pl.lit("mislabelled").alias("part")))
    if work.embedding is not None:
        parts.append(pl.DataFrame({"part": ["account"], "account": [json.dumps(work.embedding.account())]}))
    out = pl.concat(
        [pl.DataFrame(schema=_OUT), *(p.select(c for c in _OUT if c in p.columns) for p in parts)], how="diagonal"
    )
    return out.select(pl.col(c).cast(t) for c, t in _OUT.items()).to_arrow()


_ONE_THREAD: set[tuple[str, str]] = set()  # (model path, backend) set to one thread in this worker process


def _one_thread(work: stream.Work) -> None:
    """The model of a judging task computes on one thread: a task holds one of the cluster's CPUs, and
    the cluster's tasks run side by side (set once per worker process and model, before it first runs)."""
    from contrast_audit.embed import EmbeddingStore

    shared = work.embedding
    store = EmbeddingStore(work.cfg.embedding)
    store.backends = dict(shared.backends)
    backend = store.backend(shared.source)
    if (shared.source.path, backend) in _ONE_THREAD:
        return
    if backend == "onnx":
        store.model(shared.source).set_threads(1)  # the session opens on first use, with one thread
    else:
        import torch

        torch.set_num_threads(1)
    _ONE_THREAD.add((shared.source.path, backend))


def _owners(work: stream.Work, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """For each row, the runs that read it: CSR offsets (rows + 1) and run numbers."""
    rows = [work.rows(i) for i in range(len(work.runs))]
    row = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    run = np.concatenate([np.full(r.shape[0], i, dtype=np.int64) for i, r in enumerate(rows)]) if rows else row
    order = np.argsort(row, kind="stable")
    offsets = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=n_rows), out=offsets[1:])
    return offsets, run[order]


ENCODE_ROWS = 4096  # texts per Ray Data batch an embedding actor encodes
CPU_THREADS_PER_ACTOR = 4  # torch threads of a CPU embedding actor (one actor per GPU where there are GPUs)


class _Encoder:
    """``map_batches`` actor: the store's model, loaded once, encoding batches of texts as the store
    does in this process (``EmbeddingStore.encode_stored``), so the vectors are those a local run computes."""

    def __init__(self, store: Any, source: Any, prompt: str, threads: int | None) -> None:
        from contrast_audit.errors import AuditError

        self.store, self.prompt, self.failed = store, prompt, None
        try:
            self.st = store.model(source)
        except AuditError as exc:  # raised on the first batch: Ray keeps only the text of an actor's own
            self.failed = exc
            return
        if threads:
            self.st.set_threads(threads)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.failed is not None:
            raise self.failed
        texts = [str(t) for t in batch["text"]]
        out: np.ndarray | None = None
        for part, vecs in self.store.encode_stored(self.st, texts, self.prompt):
            if out is None:
                out = np.zeros((len(texts), vecs.shape[1]), dtype=vecs.dtype)
            out[part] = vecs
        return {"position": batch["position"], "vector": out if out is not None else np.zeros((0, 0), np.float16)}


def gpus(ray: Any) -> int:
    """The GPUs of the connected cluster."""
    return int(ray.cluster_resources().get("GPU", 0))


def embedder(
    ray: Any, progress: Callable[[str, int], Callable[[int], None]] | None = None
) -> Callable[..., np.ndarray]:
    """An ``EmbeddingStore.encoder`` that computes vectors on a pool of Ray actors: one per GPU, with
    ``num_gpus=1``, where the cluster has GPUs, else CPU actors of ``CPU_THREADS_PER_ACTOR`` threads.
    New vectors are written to the cache by this process as they arrive, as a local run writes them."""

    def encode(store: Any, texts: list[str], keys: np.ndarray, prompt: str, source: Any, cache: Any) -> np.ndarray:
        import pyarrow as pa

        from contrast_audit.embed import FLUSH_TEXTS, EmbeddingStore

        n_gpus, cpus = gpus(ray), max(1, int(ray.cluster_resources().get("CPU", 1)))
        if n_gpus:
            actors, per_actor, threads = n_gpus, {"num_gpus": 1}, None
        else:  # one CPU left to the tasks that feed the actors, or they wait on each other
            threads = min(CPU_THREADS_PER_ACTOR, max(1, cpus - 1))
            actors, per_actor = max(1, (cpus - 1) // threads), {"num_cpus": threads}
        # A copy without the encoder: the actors encode in their own process.
        shipped = EmbeddingStore(store.cfg)
        table = pa.table({"position": np.arange(len(texts)), "text": texts})
        blocks = [table.slice(lo, ENCODE_ROWS) for lo in range(0, len(texts), ENCODE_ROWS)]
        vectors = ray.data.from_arrow(blocks).map_batches(  # one block per actor batch: the pool shares them out
            _Encoder,
            fn_constructor_kwargs={"store": shipped, "source": source, "prompt": prompt, "threads": threads},
            batch_format="numpy",
            batch_size=ENCODE_ROWS,
            concurrency=actors,
            **per_actor,
        )
        tick = progress("Embedding texts on Ray", len(texts)) if progress else None
        out: np.ndarray | None = None
        pending: list[np.ndarray] = []
        with worker_errors(ray):  # the vectors written to the cache as they arrive
            for batch in vectors.iter_batches(batch_format="numpy", batch_size=None):
                rows, got = batch["position"], batch["vector"]
                if not rows.shape[0]:
                    continue
                if out is None:
                    out = np.zeros((len(texts), got.shape[1]), dtype=got.dtype)
                out[rows] = got
                pending.append(rows)
                if tick:
                    tick(rows.shape[0])
                if sum(p.shape[0] for p in pending) >= FLUSH_TEXTS:
                    done = np.sort(np.concatenate(pending))
                    store.flush(cache, keys[done], out[done])
                    pending = []
        if pending and out is not None:
            done = np.sort(np.concatenate(pending))
            store.flush(cache, keys[done], out[done])
        return out if out is not None else np.zeros((0, 0), dtype=np.float16)

    return encode


def run(
    paths: Sequence[str],
    cfg: AuditConfig,
    sizes: stream.Sizes,
    progress: Callable[[str, int], Callable[[int], None]] | None = None,
    spill_parent: str | None = None,
    address: str | None = None,
) -> stream.Streamed:
    """The audit on Ray: the streaming engine's result, computed on the cluster."""
    check_address(address)
    spill = stream.Spill(spill_parent)  # a bad $TMPDIR fails before Ray starts
    try:
        with connected(address) as ray, worker_errors(ray):
            return _run(ray, paths, cfg, sizes, spill, progress)
    except BaseException:
        spill.close()
        raise


def _run(
    ray: Any,
    paths: Sequence[str],
    cfg: AuditConfig,
    sizes: stream.Sizes,
    spill: stream.Spill,
    progress: Callable[[str, int], Callable[[int], None]] | None,
) -> stream.Streamed:
    """``run``'s stages on a connected Ray, in ``spill``."""
    workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    got, corpus, plan, work = stream.index(paths, cfg, sizes, spill, progress, read=_read_on_ray(ray))
    # Enough runs to keep every worker busy.
    per_run = -(-int(work.batches.offsets[-1]) // (RUNS_PER_WORKER * workers)) if len(work.batches) else 1
    if sizes.run_rows is None and per_run < sizes.judging(got.keys.shape(), got.loaded.files[0]):
        work.runs = stream.plan_runs(work.batches, corpus.n_rows, max(per_run, 1), work.chunks)
    tick = progress("Comparing batches", len(work.runs)) if progress else None
    texts = ray.data.from_arrow_refs(got.texts)
    judged = (
        texts.map_batches(_assign, fn_args=(ray.put(_owners(work, corpus.n_rows)),), batch_format="pyarrow")
        .groupby("run")
        .map_groups(_judge, fn_args=(ray.put(work),), batch_format="pyarrow")
    )
    try:  # inside the spill: where a directory could be made, and removed with it
        with tempfile.TemporaryDirectory(prefix="contrast-audit-ray-", dir=spill.directory) as out:
            judged.write_parquet(out)
            shards = sorted(Path(out).glob("*.parquet"))
            found = pl.concat([pl.read_parquet(p) for p in shards]) if shards else pl.DataFrame(schema=_OUT)
    except OSError as exc:
        raise spill.failed(exc) from exc
    if tick:
        tick(len(work.runs))
    for account in found.filter(pl.col("part") == "account").get_column("account").to_list():
        work.embedding.add_account(json.loads(account))
    findings = found.filter(pl.col("part") == "finding").drop("part", "account")
    mislabelled = found.filter(pl.col("part") == "mislabelled").select(
        "anchor_row", "cand_role", "cand_tid", "severity_rank", "severity_rule", "evidence"
    )
    return stream.assemble(got, corpus, plan, work, [findings] if findings.height else [], [mislabelled])
