"""Embedding neighbours of new texts among many reference texts: the exact matrix product that
``scan --against/--eval`` uses against an HNSW graph index (usearch), at the size of a large
existing data set.

    .venv/bin/pip install -c constraints.txt usearch
    .venv/bin/python bench/neighbour_search.py --targets 2000000 --queries 2000

Reference vectors are the cache's stored form (float16 unit vectors, 384 dimensions) drawn around
``--topics`` random topic directions (cosine about 0.5 between texts of one topic, as texts of one
subject have), so the graph has the crowded neighbourhoods real data gives it. A tenth of the queries
are planted near-duplicates of a reference vector (cosine 0.86-0.99, above the 0.825 threshold); the
others are new texts of the same topics. Both searches report every (query, reference) pair whose
cosine reaches ``--threshold``:

- exact: ``contrast_audit.overlap.neighbours``, float32 BLAS over blocks of reference vectors;
- usearch: build (``Index.add`` on every core, float16 storage, inner product), save, open the saved
  file as a memory map (``Index.restore(view=True)``, what a warm CI run does), then ``search`` the
  ``--k`` nearest of every query and keep those at or above the threshold.

Recall is the share of the exact pairs that the index finds. Prints a markdown table; one process,
so the peak RSS column is the process's high-water mark after each step.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from contrast_audit.overlap import neighbours
from contrast_audit.resources import usable_cpus


def _unit(m: np.ndarray) -> np.ndarray:
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def make_vectors(n: int, queries: int, topics: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(reference float16, queries float32): texts around topic directions, a tenth of the queries
    planted near reference vectors."""
    rng = np.random.default_rng(seed)
    centres = _unit(rng.standard_normal((topics, dim)).astype(np.float32))
    ref = np.empty((n, dim), dtype=np.float16)
    for lo in range(0, n, 100_000):
        hi = min(n, lo + 100_000)
        topic = rng.integers(0, topics, hi - lo)
        noise = _unit(rng.standard_normal((hi - lo, dim)).astype(np.float32))
        ref[lo:hi] = _unit(centres[topic] + noise).astype(np.float16)
    topic = rng.integers(0, topics, queries)
    q = _unit(centres[topic] + _unit(rng.standard_normal((queries, dim)).astype(np.float32)))
    planted = np.arange(0, queries, 10)
    source = rng.integers(0, n, planted.shape[0])
    closeness = rng.uniform(0.86, 0.99, planted.shape[0]).astype(np.float32)[:, None]
    base = ref[source].astype(np.float32)
    base = _unit(base)
    side = _unit(rng.standard_normal((planted.shape[0], dim)).astype(np.float32))
    side = _unit(side - (side * base).sum(axis=1, keepdims=True) * base)  # orthogonal to base
    q[planted] = closeness * base + np.sqrt(1 - closeness**2) * side
    return ref, q.astype(np.float32)


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, default=2_000_000)
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("--topics", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--threshold", type=float, default=0.825)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--connectivity", type=int, default=16)
    parser.add_argument("--expansion-add", type=int, default=128)
    parser.add_argument("--expansion-search", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from usearch.index import Index

    rows: list[tuple[str, float, float, str]] = []

    def step(name: str, start: float, cpu: float, note: str = "") -> None:
        rows.append((name, time.perf_counter() - start, time.process_time() - cpu, note))
        print(
            f"{name}: {rows[-1][1]:.2f} s wall, {rows[-1][2]:.2f} s CPU, peak {_peak_gib():.2f} GiB {note}", flush=True
        )

    start, cpu = time.perf_counter(), time.process_time()
    ref, q = make_vectors(args.targets, args.queries, args.topics, args.dim, args.seed)
    print(f"vectors made in {time.perf_counter() - start:.1f} s", flush=True)

    start, cpu = time.perf_counter(), time.process_time()
    exact = neighbours(q, ref, args.threshold)
    step("exact matrix product", start, cpu, f"{exact.height:,} pairs")
    truth = set(zip(exact.get_column("new").to_list(), exact.get_column("target").to_list(), strict=True))

    with tempfile.TemporaryDirectory(prefix="ann-") as tmp:
        path = Path(tmp) / "reference.usearch"
        start, cpu = time.perf_counter(), time.process_time()
        index = Index(
            ndim=args.dim,
            metric="ip",
            dtype="f16",
            connectivity=args.connectivity,
            expansion_add=args.expansion_add,
            expansion_search=args.expansion_search,
        )
        index.add(np.arange(args.targets, dtype=np.uint64), ref, threads=usable_cpus())
        step("usearch build", start, cpu, f"{usable_cpus()} threads")
        start, cpu = time.perf_counter(), time.process_time()
        index.save(str(path))
        size = path.stat().st_size
        step("usearch save", start, cpu, f"{size / 1024**3:.2f} GiB file")
        del index
        start, cpu = time.perf_counter(), time.process_time()
        view = Index.restore(str(path), view=True)
        step("usearch open (memory map)", start, cpu)
        start, cpu = time.perf_counter(), time.process_time()
        found = view.search(q, args.k, threads=usable_cpus())
        sims = 1.0 - found.distances  # inner-product distance is 1 - dot
        i, j = np.nonzero(sims >= args.threshold)
        got = set(zip(i.tolist(), found.keys[i, j].astype(np.int64).tolist(), strict=True))
        full = int((sims[:, -1] >= args.threshold).sum())
        hit = len(got & truth)
        recall = hit / len(truth) if truth else 1.0
        step(
            "usearch search",
            start,
            cpu,
            f"{len(got):,} pairs, recall {recall:.4f} ({hit:,} of {len(truth):,}); {full} queries filled all k",
        )

    print()
    print(
        f"{args.targets:,} reference vectors ({args.dim} dims, float16, {args.topics:,} topics), "
        f"{args.queries:,} queries, threshold {args.threshold}; usearch connectivity {args.connectivity}, "
        f"expansion add/search {args.expansion_add}/{args.expansion_search}, k {args.k}"
    )
    print()
    print("| step | wall s | CPU s | note |")
    print("|---|---:|---:|---|")
    for name, wall, cpu_s, note in rows:
        print(f"| {name} | {wall:.2f} | {cpu_s:.2f} | {note} |")


if __name__ == "__main__":
    main()
