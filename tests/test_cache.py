"""The embedding cache survives interruption, concurrency and damage, never unpickles, and scores do
not depend on how it was filled."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import corpus_of
from typer.testing import CliRunner

import contrast_audit.embed as embed
from contrast_audit.cli import app
from contrast_audit.config import EmbeddingConfig
from contrast_audit.embed import EmbeddingCache, EmbeddingStore, ShardCache, check_device, text_keys
from contrast_audit.errors import ConfigError

RUNNER = CliRunner()


def _keys(n: int, start: int = 0) -> np.ndarray:
    return text_keys([f"text {i}" for i in range(start, start + n)], "")


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def cache(tmp_path: Path) -> EmbeddingCache:
    return EmbeddingCache(tmp_path, "f" * 64, "")


def _only_shard(cache: EmbeddingCache) -> Path:
    (path,) = cache.paths()
    return path


def test_roundtrip_with_checksums(cache: EmbeddingCache) -> None:
    cache.store(_keys(5), _vectors(5))
    found, vectors = cache.lookup(_keys(6))
    assert found.tolist() == [True] * 5 + [False]
    assert vectors is not None and vectors.dtype == np.float16
    with np.load(_only_shard(cache), allow_pickle=False) as data:
        assert {"sum_keys", "sum_vectors"} <= set(data.files)
    assert cache.problems == []


@pytest.mark.parametrize("damage", ["truncate", "flip a bit", "garbage", "empty"])
def test_damaged_shard_is_reported_once_removed_and_rebuilt(cache: EmbeddingCache, damage: str) -> None:
    cache.store(_keys(50), _vectors(50))
    path = _only_shard(cache)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip a bit":
        data[len(data) // 2] ^= 0x10  # inside the vectors
    elif damage == "garbage":
        data = bytearray(b"not a zip file at all")
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    found, vectors = cache.lookup(_keys(50))
    assert not found.any() and vectors is None
    assert len(cache.problems) == 1 and "damaged" in cache.problems[0]
    assert not path.exists()  # reported once: the next lookup does not see it again
    cache.lookup(_keys(50))
    assert len(cache.problems) == 1
    cache.store(_keys(50), _vectors(50))
    assert cache.lookup(_keys(50))[0].all()


def test_checksum_catches_a_valid_zip_with_changed_values(cache: EmbeddingCache) -> None:
    keys, vectors = _keys(4), _vectors(4)
    cache.store(keys, vectors)
    path = _only_shard(cache)
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["vectors"] = arrays["vectors"][::-1].copy()  # same dtype and shape, other values
    with path.open("wb") as handle:
        np.savez(handle, **arrays)
    assert not cache.lookup(keys)[0].any()
    assert "checksum" in cache.problems[0]


def test_wrong_dtype_or_shape_is_refused(cache: EmbeddingCache) -> None:
    keys = _keys(4)
    cache.write(keys, vectors=_vectors(4))  # float32 with valid checksums: not what this cache stores
    assert not cache.lookup(keys)[0].any()
    assert "wrong dtype or shape" in cache.problems[0]
    cache.write(keys, vectors=_vectors(3).astype(np.float16))
    assert not cache.lookup(keys)[0].any()


def test_pickled_arrays_are_never_loaded(cache: EmbeddingCache, tmp_path: Path) -> None:
    cache.dir.mkdir(parents=True)
    marker = tmp_path / "executed"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    objects = np.array([Payload()], dtype=object)
    with (cache.dir / "shard-evil.npz").open("wb") as handle:
        np.savez(
            handle, keys=objects, vectors=objects, sum_keys=np.zeros(32, np.uint8), sum_vectors=np.zeros(32, np.uint8)
        )
    found, _ = cache.lookup(_keys(1))
    assert not found.any() and not marker.exists()
    assert cache.problems and "damaged" in cache.problems[0]


def test_legacy_shards_without_checksums_are_ignored_silently(cache: EmbeddingCache) -> None:
    cache.dir.mkdir(parents=True)
    with (cache.dir / "shard-old.npz").open("wb") as handle:
        np.savez(handle, keys=_keys(2), vectors=_vectors(2))
    assert not cache.lookup(_keys(2))[0].any()
    assert cache.problems == [] and (cache.dir / "shard-old.npz").exists()


def test_partial_shard_from_a_killed_writer_is_ignored_and_cleaned(cache: EmbeddingCache) -> None:
    cache.dir.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    partial = cache.dir / f".shard.{dead.stdout.strip()}.abc.tmp"
    partial.write_bytes(b"PK\x03\x04 half a shard")
    assert not cache.lookup(_keys(1))[0].any() and cache.problems == []
    cache.store(_keys(1), _vectors(1))
    assert not partial.exists()


def _writer(directory: str, start: int) -> None:
    shard = EmbeddingCache(Path(directory), "f" * 64, "")
    for i in range(20):
        shard.store(_keys(30, start + i * 10), _vectors(30, seed=i))  # overlapping key ranges
        found, _ = shard.lookup(_keys(30, start + i * 10))
        assert found.all()
        assert shard.problems == []


def test_concurrent_writers_and_readers(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), start)) for start in (0, 5, 0)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    cache = EmbeddingCache(tmp_path, "f" * 64, "")
    assert cache.lookup(_keys(200))[0].all() and cache.problems == []
    assert not list(cache.dir.glob(".*"))


def test_shard_cache_validation_is_optional(tmp_path: Path) -> None:
    shards = ShardCache(tmp_path / "t")
    shards.write(_keys(2), lengths=np.array([1, 2]), vectors=np.zeros((3, 4), np.float16))
    (path,) = shards.paths()
    assert shards.load(path, ("keys", "lengths"))["lengths"].tolist() == [1, 2]


# --- devices and the cache directory -----------------------------------------------------------


@pytest.mark.parametrize(
    "device", ["tpu", "gpu", "cuda:x", "cpu:1", "", "cuda:-1", "cuda:²", "cuda:٣", "cuda:" + "1" * 5000]
)
def test_unknown_device(device: str) -> None:
    with pytest.raises(ConfigError, match="is not a device"):
        check_device(device)


def test_known_devices() -> None:
    import torch

    check_device(None)
    check_device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            check_device("cuda")
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            check_device("cuda:0")
    else:
        with pytest.raises(ConfigError, match="this machine has"):
            check_device(f"cuda:{torch.cuda.device_count()}")


def test_cache_dir_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    store = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path / "file"), device="cpu"))
    with pytest.raises(ConfigError, match="is a file"):
        store.prepare(corpus_of([("a", "b")]))


def test_bad_device_and_cache_dir_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text(json.dumps({"anchor": "a", "positive": "b"}) + "\n")
    (tmp_path / "file").write_text("x")
    result = RUNNER.invoke(app, ["scan", "p.jsonl", "-q", "--device", "tpu"])
    assert result.exit_code == 2 and "is not a device" in result.stderr
    result = RUNNER.invoke(app, ["scan", "p.jsonl", "-q", "--cache-dir", "file"])
    assert result.exit_code == 2 and "is a file" in result.stderr


# --- with the model -------------------------------------------------------------------------------

ROWS = [
    ("reset a forgotten password", "Use the Forgot password link on the sign-in page."),
    ("export invoices", "Billing → History has a PDF link for each invoice."),
    ("cancel my subscription", "Open Plans and choose Cancel at the bottom."),
    ("change the billing address", "Settings → Billing lets you edit the address on invoices."),
]
MORE = [("delete my account", "Account → Privacy → Delete removes everything."), ("contact support", "Use the chat.")]


def test_cold_and_warm_runs_score_alike(tmp_path: Path) -> None:
    c = corpus_of(ROWS + MORE)
    cold = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path / "one"), device="cpu"))
    cold.prepare(c)
    warm = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path / "one"), device="cpu"))
    warm.prepare(c)
    assert warm.stats["embedded"] == 0
    assert np.array_equal(cold.doc, warm.doc)
    # Filled piecemeal (first the rows, then the rest): the same vectors as filled at once.
    part = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path / "two"), device="cpu"))
    part.prepare(corpus_of(ROWS))
    rest = EmbeddingStore(EmbeddingConfig(cache_dir=str(tmp_path / "two"), device="cpu"))
    rest.prepare(c)
    assert 0 < rest.stats["embedded"] < c.n_texts
    u, v = np.triu_indices(c.n_texts, 1)
    np.testing.assert_array_equal(cold.cosine(cold.doc, cold.doc, u, v), rest.cosine(rest.doc, rest.doc, u, v))


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = corpus_of(ROWS + MORE)
    monkeypatch.setattr(embed, "FLUSH_TEXTS", 2)
    cfg = EmbeddingConfig(cache_dir=str(tmp_path), device="cpu", batch_size=2)
    store = EmbeddingStore(cfg)
    encoder = type(store.model(embed.model_io.resolve(None)))
    real_encode = encoder.sentences
    calls = {"n": 0}

    def dying_encode(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt  # the user pressed ^C after three blocks
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(encoder, "sentences", dying_encode)
    with pytest.raises(KeyboardInterrupt):
        store.prepare(c)
    monkeypatch.undo()
    again = EmbeddingStore(cfg)
    again.prepare(c)
    assert 3 <= again.stats["cached"] < c.n_texts  # what three encode calls computed was kept
    assert again.stats["cached"] + again.stats["embedded"] == c.n_texts


def test_a_shard_of_another_width_is_refused(cache: EmbeddingCache) -> None:
    cache.store(_keys(3), _vectors(3))
    cache.write(_keys(2, 10), vectors=np.zeros((2, 5), np.float16))
    found, vectors = cache.lookup(np.concatenate([_keys(3), _keys(2, 10)]))
    assert found.tolist() == [True, True, True, False, False]
    assert vectors is not None and vectors.shape == (3, 8)
    assert len(cache.problems) == 1 and "unlike the other shards" in cache.problems[0]


def test_lookup_reads_vectors_only_from_shards_holding_a_wanted_key(
    cache: EmbeddingCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.store(_keys(3), _vectors(3))
    cache.store(_keys(4, 100), _vectors(4, 100))  # vectors of some other data set
    read: list[tuple[str, ...]] = []
    real_load = cache.load
    monkeypatch.setattr(cache, "load", lambda path, fields: read.append(fields) or real_load(path, fields))
    found, vectors = cache.lookup(_keys(2, 1))
    assert found.all() and vectors is not None
    np.testing.assert_array_equal(vectors, embed.quantise(_vectors(3))[1:3])
    assert sorted(read) == [("keys",), ("keys",), ("keys", "vectors")]


def test_key_search_is_exact_when_keys_share_their_first_eight_bytes() -> None:
    rng = np.random.default_rng(0)
    stored = np.array([rng.bytes(16) for _ in range(2000)], dtype="S16")
    # Keys that agree with stored keys on their first 8 bytes but not the rest, and stored keys
    # that agree with each other on their first 8 bytes.
    twins = np.array([bytes(stored[i])[:8] + rng.bytes(8) for i in range(0, 2000, 7)], dtype="S16")
    stored = np.concatenate([stored, twins[:100]])
    keys = np.concatenate([stored[rng.permutation(stored.shape[0])[:900]], twins[100:], twins[:100]])
    found, at = embed.find_keys(stored, keys)
    want = {bytes(k): i for i, k in enumerate(stored)}
    assert found.tolist() == [bytes(k) in want for k in keys]
    assert at.tolist() == [want[bytes(k)] for k in keys if bytes(k) in want]
    assert found[-100:].all() and not found[900:-100].any()


def test_array_checksums_are_sha256_of_dtype_shape_and_bytes() -> None:
    import hashlib

    for array in (np.arange(12, dtype=np.float16).reshape(3, 4), np.zeros((0, 4), np.float16), _keys(3)):
        head = f"{array.dtype.str}{array.shape}".encode()
        assert embed._digest(array) == hashlib.sha256(head + array.tobytes()).digest()
    view = np.arange(24, dtype=np.uint32).reshape(4, 6)[:, ::2]  # not contiguous
    assert embed._digest(view) == embed._digest(np.ascontiguousarray(view))


@pytest.mark.slow
def test_a_full_cache_disk_warns_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    c = corpus_of(ROWS + MORE)
    monkeypatch.setattr(embed, "FLUSH_TEXTS", 2)
    writes = {"n": 0}

    def full(self, *args, **kwargs):
        writes["n"] += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(embed.EmbeddingCache, "write", full)
    cfg = EmbeddingConfig(cache_dir=str(tmp_path), device="cpu", batch_size=2, query_prompt="q: ", doc_prompt="d: ")
    store = EmbeddingStore(cfg)
    store.prepare(c)
    assert writes["n"] == 1  # not tried again after the disk was full
    assert len(store.warnings) == 1 and "No space left on device" in store.warnings[0]
    assert store.query is not None and store.doc is not None  # the run went on
