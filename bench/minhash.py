"""MinHash: candidate recall against exact Jaccard on real text, and speed against datasketch.

    .venv/bin/python bench/minhash.py /work/shared/data recall
    .venv/bin/python bench/minhash.py /work/shared/data speed --repeat 3

Texts: every sentence, caption, question and title found in the data directory (PAWS-Wiki, MRPC,
STS-B, Flickr8k captions, the SemEval-2016 CQA question pairs, SciFact titles and queries, the
FlagEmbedding example pairs), normalised as a scan normalises them and made unique.

``recall``: every pair of texts whose exact Jaccard similarity of word 3-gram sets is at least the
threshold (all pairs, found with prefix filtering, then counted exactly), and the share of them that
are LSH candidates (share a band key) and near-duplicates (verified estimate at or above the
threshold) with the detector's bands and with datasketch's own optimiser's bands.

``speed``: ``MinHashDetector.prepare`` (shingling, signatures, banding, candidate verification)
against datasketch's own loop on the same shingle sets, permutations and threshold:
``MinHash.bulk`` (its default SHA-1 hash), ``MinHashLSH.insert`` of every text, ``query`` of every
text and ``jaccard`` of every candidate (the shingle lists are built before the clock starts).
Medians of ``--repeat`` runs; the peak RSS of the process is printed too.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import resource
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl

from contrast_audit.config import NormaliseConfig
from contrast_audit.evidence import minhash as mh
from contrast_audit.evidence.minhash import MinHashDetector, band_keys, candidate_probability, shingles, signatures
from contrast_audit.normalise import normalise_expr


def _tsv(path: Path, columns: list[int], skip_header: bool) -> list[str]:
    out: list[str] = []
    with path.open(encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        for i, row in enumerate(reader):
            if skip_header and i == 0:
                continue
            out += [row[c] for c in columns if c < len(row)]
    return out


def load_texts(data: Path) -> list[str]:
    """Raw texts of the real data sets in ``data`` (those present)."""
    texts: list[str] = []
    for name in ("dev.tsv", "test.tsv"):
        if (p := data / "paws_wiki" / name).is_file():
            texts += _tsv(p, [1, 2], skip_header=True)
    for name in ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt"):
        if (p := data / "mrpc" / name).is_file():
            texts += _tsv(p, [3, 4], skip_header=True)
    for name in ("sts-train.csv", "sts-dev.csv", "sts-test.csv"):
        if (p := data / "stsbenchmark" / name).is_file():
            texts += _tsv(p, [5, 6], skip_header=False)
    if (p := data / "flickr8k_captions" / "Flickr8k.token.txt").is_file():
        texts += _tsv(p, [1], skip_header=False)
    if (p := data / "semeval2016_task3_cqa" / "subtaskB_pairs.jsonl").is_file():
        for line in p.open(encoding="utf-8"):
            row = json.loads(line)
            texts += [row.get(k) or "" for k in ("orgq_subject", "orgq_body", "relq_subject", "relq_body")]
    if (p := data / "scifact_beir" / "corpus.jsonl").is_file():
        texts += [json.loads(line).get("title") or "" for line in p.open(encoding="utf-8")]
    if (p := data / "scifact_beir" / "queries.jsonl").is_file():
        texts += [json.loads(line).get("text") or "" for line in p.open(encoding="utf-8")]
    for p in sorted((data / "flagembedding_example_pairs").glob("*.jsonl")):
        for line in p.open(encoding="utf-8"):
            row = json.loads(line)
            texts += [row.get("query") or "", *(row.get("pos") or []), *(row.get("neg") or [])]
    return texts


def unique_normalised(texts: list[str]) -> pl.Series:
    norm = pl.select(normalise_expr(pl.lit(pl.Series(texts, dtype=pl.String)), NormaliseConfig())).to_series()
    return norm.filter(norm.str.len_chars() > 0).unique(maintain_order=True).rename("norm")


def exact_pairs(norm: pl.Series, threshold: float, shingle: str = "word", ngram: int = 3) -> pl.DataFrame:
    """Every pair (a < b) with exact Jaccard of shingle sets >= threshold, by prefix filtering: two
    sets that reach the threshold share one of the ``|x| - ceil(t |x|) + 1`` rarest shingles of each."""
    sets = (
        shingles(norm, shingle, ngram)
        .select("idx", pl.col("shingle").hash(7).alias("h"))
        .unique(["idx", "h"])
        .with_columns(pl.len().over("h").alias("df"), pl.len().over("idx").alias("size"))
    )
    prefix = (
        sets.sort("idx", "df", "h")
        .with_columns(pl.int_range(pl.len()).over("idx").alias("rank"))
        .filter(pl.col("rank") < pl.col("size") - (pl.col("size") * threshold - 1e-9).ceil() + 1)
        .select("idx", "h")
    )
    cand = (
        prefix.join(prefix, on="h", suffix="_b")
        .filter(pl.col("idx") < pl.col("idx_b"))
        .select(pl.col("idx").alias("a"), pl.col("idx_b").alias("b"))
        .unique()
    )
    size = sets.select("idx", "size").unique()
    inter = (
        cand.join(sets.select(pl.col("idx").alias("a"), "h"), on="a")
        .join(sets.select(pl.col("idx").alias("b"), "h"), on=["b", "h"], how="semi")
        .group_by("a", "b")
        .len("inter")
    )
    return (
        inter.join(size.rename({"idx": "a", "size": "size_a"}), on="a")
        .join(size.rename({"idx": "b", "size": "size_b"}), on="b")
        .with_columns((pl.col("inter") / (pl.col("size_a") + pl.col("size_b") - pl.col("inter"))).alias("jaccard"))
        .filter(pl.col("jaccard") >= threshold - 1e-12)
        .select(pl.col("a").cast(pl.Int64), pl.col("b").cast(pl.Int64), "jaccard")
        .sort("a", "b")
    )


def recall(norm: pl.Series, threshold: float, num_perm: int, seed: int) -> None:
    truth = exact_pairs(norm, threshold)
    a, b = truth.get_column("a").to_numpy(), truth.get_column("b").to_numpy()
    jac = truth.get_column("jaccard").to_numpy()
    det = MinHashDetector(threshold=threshold, num_perm=num_perm, seed=seed)
    det.prepare(SimpleNamespace(texts=pl.DataFrame({"norm": norm})))
    from datasketch.lsh import _optimal_param

    ds_b, ds_r = _optimal_param(threshold, num_perm, 0.5, 0.5)
    used = np.unique(np.r_[a, b])
    sig = signatures(norm.gather(used), num_perm=num_perm, seed=seed, shingle="word", ngram=3)
    pos = np.searchsorted(used, a), np.searchsorted(used, b)
    ds_keys = band_keys(sig, ds_b, ds_r)
    estimate = sig.jaccard(pos[0], sig, pos[1])
    rows = [
        ("this detector", det.bands, det.rows, (det.keys[a] == det.keys[b]).any(axis=1), det.similar(a, b) > 0),
        ("datasketch optimiser", ds_b, ds_r, (ds_keys[pos[0]] == ds_keys[pos[1]]).any(axis=1), None),
    ]
    rows[1] = (*rows[1][:4], rows[1][3] & (estimate >= threshold))
    print(
        f"{norm.len():,} unique normalised texts; {truth.height:,} pairs with exact word-3-gram Jaccard >= {threshold}"
    )
    bins = [(threshold, threshold + 0.05), (threshold + 0.05, threshold + 0.1), (threshold + 0.1, 1.0001)]
    counts = " / ".join(f"{int(((jac >= lo) & (jac < hi)).sum()):,}" for lo, hi in bins)
    print(f"pairs by exact Jaccard [t, t+0.05) / [t+0.05, t+0.1) / [t+0.1, 1]: {counts}")
    print()
    print(
        "| bands × rows | P(candidate) at t | candidate recall | by Jaccard bin | near-duplicate recall | candidate checks |"
    )
    print("|---|---:|---:|---|---:|---:|")
    for name, bands, r, cand, verified in rows:
        per_bin = " / ".join(f"{cand[(jac >= lo) & (jac < hi)].mean():.3f}" for lo, hi in bins)
        checks = f"{det.candidate_checks:,}" if name == "this detector" else "–"
        print(
            f"| {name}: {bands} × {r} | {float(candidate_probability(threshold, bands, r)):.3f} | {cand.mean():.3f} "
            f"| {per_bin} | {verified.mean():.3f} | {checks} |"
        )


def datasketch_loop(sets: list[list[bytes]], threshold: float, num_perm: int, seed: int) -> int:
    from datasketch import MinHash, MinHashLSH

    hashes = MinHash.bulk(sets, num_perm=num_perm, seed=seed)
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    with lsh.insertion_session() as session:
        for i, m in enumerate(hashes):
            session.insert(i, m, check_duplication=False)
    found = 0
    for i, m in enumerate(hashes):
        for j in lsh.query(m):
            if j > i and m.jaccard(hashes[j]) >= threshold:
                found += 1
    return found


def speed(norm: pl.Series, threshold: float, num_perm: int, seed: int, repeat: int, skip_datasketch: bool) -> None:
    corpus = SimpleNamespace(texts=pl.DataFrame({"norm": norm}))
    ours: list[float] = []
    ours_cpu: list[float] = []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        det = MinHashDetector(threshold=threshold, num_perm=num_perm, seed=seed)
        det.prepare(corpus)
        ours.append(time.perf_counter() - start)
        ours_cpu.append(time.process_time() - cpu)
    ours_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{norm.len():,} texts; threshold {threshold}, num_perm {num_perm}, word 3-grams")
    print(
        f"this detector ({det.bands} × {det.rows}): median {statistics.median(ours):.2f} s wall, "
        f"{statistics.median(ours_cpu):.2f} s CPU (all threads) "
        f"({det.pairs.height:,} near-duplicate pairs, {det.candidate_checks:,} candidate checks; "
        f"process peak RSS so far {ours_rss:.0f} MiB)"
    )
    if skip_datasketch:
        return
    frame = shingles(norm, "word", 3).group_by("idx", maintain_order=True).agg("shingle")
    sets = [[s.encode("utf-8") for s in group] for group in frame.get_column("shingle").to_list()]
    theirs: list[float] = []
    theirs_cpu: list[float] = []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        found = datasketch_loop(sets, threshold, num_perm, seed)
        theirs.append(time.perf_counter() - start)
        theirs_cpu.append(time.process_time() - cpu)
    print(
        f"datasketch MinHash.bulk + MinHashLSH: median {statistics.median(theirs):.2f} s wall, "
        f"{statistics.median(theirs_cpu):.2f} s CPU ({found:,} pairs)"
    )
    print(
        f"ratio: {statistics.median(theirs) / statistics.median(ours):.1f}x wall, "
        f"{statistics.median(theirs_cpu) / statistics.median(ours_cpu):.1f}x CPU"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="the shared data directory, e.g. /work/shared/data")
    parser.add_argument("what", choices=["recall", "speed"])
    parser.add_argument("--threshold", type=float, default=0.7)
    parser.add_argument("--num-perm", type=int, default=128)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="use only the first N unique texts")
    parser.add_argument("--copies", type=int, default=1, help="repeat the pool N times, each copy with a suffix")
    parser.add_argument("--texts-per-chunk", type=int, default=0, help="override the detector's chunk size")
    parser.add_argument("--no-datasketch", action="store_true")
    args = parser.parse_args()
    if args.texts_per_chunk:
        mh.TEXTS_PER_CHUNK = args.texts_per_chunk
    norm = unique_normalised(load_texts(args.data))
    if args.copies > 1:  # distinct texts, the same shingles but for the last: a larger pool of real text
        norm = pl.concat([norm] + [norm + f" v{k}" for k in range(1, args.copies)]).rename("norm")
    if args.limit:
        norm = norm.head(args.limit)
    if norm.len() == 0:
        sys.exit(f"{args.data}: no texts found")
    if math.isnan(args.threshold) or not 0 < args.threshold <= 1:
        sys.exit("--threshold must be in (0, 1]")
    if args.what == "recall":
        recall(norm, args.threshold, args.num_perm, args.seed)
    else:
        speed(norm, args.threshold, args.num_perm, args.seed, args.repeat, args.no_datasketch)


if __name__ == "__main__":
    main()
