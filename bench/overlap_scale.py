"""Time to check new rows against a large existing data set (``scan --against``), cold and warm.

    .venv/bin/python -m bench.overlap_scale --existing 1000000 --new 1000 --scan-args=--no-embeddings
    .venv/bin/python -m bench.overlap_scale --existing 1000000 --new 1000 --seed-embeddings
    .venv/bin/python -m bench.overlap_scale --existing 20000 --new 1000

Writes synthetic pair files (texts of 8-24 words drawn from a Zipf-distributed vocabulary; of the new
rows 10% repeat an existing row and 10% repeat one with a word replaced) into a temporary directory,
then times the whole CLI scan (``--format json --output``) twice with one ``--index`` directory:
cold (an empty index) and warm (the index of the first run). Every run uses its own empty
embedding cache for the new rows' in-batch audit, which is part of the time.

``--seed-embeddings`` writes random unit vectors for every existing text into the index first, in
the index's own format, so the runs measure the warm embedding path (reading the vectors and the
exact neighbour search) at a size whose real embedding would take hours on a CPU: the first run
still computes the MinHash signatures, the second finds everything in the index. Prints a markdown table with wall time and the scan's CPU time (user + system, which other load on
the machine barely changes).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

VOCAB = 30_000


def _texts(rng: np.random.Generator, n: int) -> list[str]:
    lengths = rng.integers(8, 25, n)
    words = (rng.zipf(1.2, int(lengths.sum())) - 1) % VOCAB
    cuts = np.cumsum(lengths)[:-1]
    return [" ".join(f"w{w}" for w in part) for part in np.split(words, cuts)]


def write_case(directory: Path, existing: int, new: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    anchors, positives = _texts(rng, existing), _texts(rng, existing)
    with (directory / "existing.jsonl").open("w", encoding="utf-8") as out:
        for a, p in zip(anchors, positives, strict=True):
            out.write(json.dumps({"anchor": a, "positive": p}) + "\n")
    fresh_a, fresh_p = _texts(rng, new), _texts(rng, new)
    picks = rng.integers(0, existing, new)
    with (directory / "new.jsonl").open("w", encoding="utf-8") as out:
        for i in range(new):
            a, p = fresh_a[i], fresh_p[i]
            if i % 10 == 0:  # a repeat
                a, p = anchors[picks[i]], positives[picks[i]]
            elif i % 10 == 1:  # a near-repeat: one word replaced
                words = anchors[picks[i]].split()
                words[len(words) // 2] = "replaced"
                a = " ".join(words)
            out.write(json.dumps({"anchor": a, "positive": p}) + "\n")


def seed_embeddings(directory: Path, index: Path, dim: int = 384) -> None:
    """Random unit vectors for every existing text, stored where the index keeps embeddings."""
    from contrast_audit.config import EmbeddingConfig
    from contrast_audit.embed import EmbeddingCache, EmbeddingStore, text_keys
    from contrast_audit.overlap import Encoder

    encoder = Encoder.of(EmbeddingStore(EmbeddingConfig()))
    texts = []
    with (directory / "existing.jsonl").open(encoding="utf-8") as rows:
        for line in rows:
            row = json.loads(line)
            texts += [row["anchor"], row["positive"]]
    texts = list(dict.fromkeys(texts))
    keys = text_keys(texts, encoder.prompt)
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(len(texts), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    EmbeddingCache(index, encoder.fingerprint, encoder.prompt).store(keys, vectors)


def run_scan(directory: Path, index: Path, scan_args: list[str]) -> tuple[float, float, dict]:
    cache = tempfile.mkdtemp(prefix="cache-", dir=directory)
    cmd = [
        sys.executable,
        "-c",
        "from contrast_audit.cli import main; main()",
        "scan",
        str(directory / "new.jsonl"),
        "--against",
        str(directory / "existing.jsonl"),
        "--index",
        str(index),
        "--format",
        "json",
        "--output",
        str(directory / "report.json"),
        "--quiet",
        *scan_args,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env={**os.environ, "CONTRAST_AUDIT_CACHE_DIR": cache}, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        raise SystemExit(f"scan failed with exit code {done.returncode}")
    report = json.loads((directory / "report.json").read_text(encoding="utf-8"))
    return seconds, cpu, report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--existing", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--scan-args", default="")
    parser.add_argument("--seed-embeddings", action="store_true")
    parser.add_argument("--work", type=Path, default=None, help="keep the files here (default: a temporary directory)")
    args = parser.parse_args(argv)
    scan_args = shlex.split(args.scan_args)
    print(f"scan args: {' '.join(scan_args) or '(none)'}")
    print(
        "| existing rows | new rows | run | wall s | CPU s | reference texts computed | from the index | overlaps | peak RSS GiB |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for n in args.existing:
        with tempfile.TemporaryDirectory(prefix="ca-overlap-") as tmp:
            directory = Path(args.work or tmp)
            directory.mkdir(parents=True, exist_ok=True)
            write_case(directory, n, args.new)
            index = directory / "index"
            runs = ["cold", "warm"]
            if args.seed_embeddings:
                seed_embeddings(directory, index)
                runs = ["embeddings seeded, MinHash cold", "warm"]
            for run in runs:
                seconds, cpu, report = run_scan(directory, index, scan_args)
                info = report["reference"]
                lexical = "--no-embeddings" in scan_args
                computed = info["minhash_computed"] if lexical else info["embeddings_computed"]
                indexed = info["minhash_indexed"] if lexical else info["embeddings_indexed"]
                peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
                print(
                    f"| {n:,} | {args.new:,} | {run} | {seconds:.1f} | {cpu:.1f} | {computed:,} | {indexed:,} | "
                    f"{report['counts']['overlaps']} | {peak:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
