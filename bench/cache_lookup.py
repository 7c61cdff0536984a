"""What an embedding-cache lookup costs when the cache also holds vectors of other data.

    .venv/bin/python bench/cache_lookup.py --wanted 15000 --other 300000

Writes ``--other`` unrelated vectors and then ``--wanted`` vectors (384 dimensions, float16, in
shards of 4,096 texts, as a scan writes them) into a fresh cache directory, then looks the wanted
keys up in a fresh process per mode, ``--repeat`` times, and prints the median wall and CPU seconds
and the peak RSS of each:

- ``keys-first`` (``EmbeddingCache.lookup``): every shard's keys are read, vectors only from the
  shards that hold a wanted key;
- ``read-all``: every shard's keys and vectors are read and concatenated, then searched (how the
  lookup worked before).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from contrast_audit.embed import FLUSH_TEXTS, EmbeddingCache, find_keys, text_keys

DIM = 384


def _keys(n: int, tag: str) -> np.ndarray:
    return text_keys([f"{tag} text number {i}" for i in range(n)], "")


def _fill(cache: EmbeddingCache, n: int, tag: str) -> None:
    keys = _keys(n, tag)
    rng = np.random.default_rng(len(tag))
    for lo in range(0, n, FLUSH_TEXTS):
        part = keys[lo : lo + FLUSH_TEXTS]
        cache.store(part, rng.normal(size=(part.shape[0], DIM)).astype(np.float32))


def _child(directory: str, wanted: int, mode: str) -> None:
    cache = EmbeddingCache(Path(directory), "f" * 64, "")
    keys = _keys(wanted, "wanted")
    wall, cpu = time.perf_counter(), time.process_time()
    if mode == "keys-first":
        found, vectors = cache.lookup(keys)
    else:
        stored = cache.read(("keys", "vectors"))
        found, index = find_keys(stored["keys"], keys)
        vectors = stored["vectors"][index]
    out = {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "found": int(found.sum()),
        "rows": int(vectors.shape[0]),
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--wanted", type=int, default=15000)
    p.add_argument("--other", type=int, default=300000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--child", nargs=2, metavar=("DIR", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args.child[0], args.wanted, args.child[1])
        return
    with tempfile.TemporaryDirectory() as tmp:
        cache = EmbeddingCache(Path(tmp), "f" * 64, "")
        _fill(cache, args.other, "other")
        _fill(cache, args.wanted, "wanted")
        shards = len(cache.paths())
        rows = []
        for mode in ("keys-first", "read-all"):
            runs = []
            for _ in range(args.repeat):
                cmd = [sys.executable, __file__, "--wanted", str(args.wanted), "--child", tmp, mode]
                runs.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
            assert all(r["found"] == args.wanted for r in runs)
            med = {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu", "peak_mib")}
            rows.append((mode, med))
    print(f"cache: {args.other:,} other + {args.wanted:,} wanted vectors ({DIM} dims, float16) in {shards} shards")
    print(f"medians of {args.repeat}, one process per lookup\n")
    print("| lookup | wall s | CPU s | peak RSS (MiB) |")
    print("|---|---:|---:|---:|")
    for mode, med in rows:
        print(f"| {mode} | {med['wall']:.2f} | {med['cpu']:.2f} | {med['peak_mib']:.0f} |")


if __name__ == "__main__":
    main()
