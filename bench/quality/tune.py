"""How the scan's semantic defaults were chosen: a grid over the thresholds on the labelled cases.

    .venv/bin/python -m bench.quality.run --data /work/shared/data --work /tmp/ca-quality   # builds the cases
    .venv/bin/python -m bench.quality.tune --work /tmp/ca-quality

For every labelled in-batch pair of each case it computes, with the scan's own code (default model,
MinHash detector), the features the policy reads: cosine(positive, candidate), cosine(anchor, other
anchor), cosine(anchor, candidate), cosine(anchor, positive) and the verified MinHash Jaccard. It then
scores the policy

    likely  if ( cos(p, c) >= T  or  cos(a, a') >= T  or  jaccard >= J
                 or (cos(p, c) >= S  and  cos(a, c) > cos(a, p) * (1 - m)) )
            and not (p and c are both short and disagree on numbers)   # the number guard

for each (T, S, m, J) on the grid. Selection rule: among the settings whose F1 beats the best peer
rule of every case by at least --lead (0.10; peers' F1 given with --peer-f1), the one with the highest
worst-case precision, then the largest smallest lead. Prints the ranking with per-case
precision / recall / F1.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import polars as pl

from contrast_audit.config import ColumnMapping, EmbeddingConfig, NormaliseConfig
from contrast_audit.corpus import POSITIVE_ROLE, build_corpus
from contrast_audit.embed import EmbeddingStore
from contrast_audit.evidence import Pairs
from contrast_audit.evidence.embedding import pair_scores
from contrast_audit.evidence.minhash import MinHashDetector
from contrast_audit.evidence.numbers import NumberGuard
from contrast_audit.io import load_rows

GRID = {
    "T": [0.85, 0.875, 0.9, 0.925, 0.95],
    "S": [0.5, 0.55, 0.6, 0.65, 0.7],
    "m": [0.05, 0.1, 0.15, 0.2],
    "J": [0.5, 0.6, 0.7, 0.8],
}


def features(case: Path, minhash_threshold: float, guard_words: int) -> pl.DataFrame:
    loaded = load_rows([str(case / "pairs.jsonl")], ColumnMapping())
    corpus = build_corpus(loaded.rows, NormaliseConfig())
    store = EmbeddingStore(EmbeddingConfig())
    store.prepare(corpus)
    minhash = MinHashDetector(threshold=minhash_threshold)
    minhash.prepare(corpus)
    truth = pl.read_ndjson(case / "truth.jsonl")
    index = pl.DataFrame({"id": corpus.rows.get_column("id"), "row": np.arange(corpus.n_rows)})
    rows = truth.join(index.rename({"id": "anchor_id", "row": "a"}), on="anchor_id").join(
        index.rename({"id": "candidate_id", "row": "b"}), on="candidate_id"
    )
    a, b = rows.get_column("a").to_numpy(), rows.get_column("b").to_numpy()
    pairs = Pairs("query_to_doc", a, b, np.full(a.shape[0], POSITIVE_ROLE), corpus.positive[b])
    s_ac, s_ap = pair_scores(store, corpus, pairs)
    hits = minhash.detect(pairs)
    guard = NumberGuard(guard_words)
    guard.prepare(corpus)
    return rows.select("label", "kind").with_columns(
        pl.Series("s_pc", store.cosine(store.doc, store.doc, corpus.positive[a], corpus.positive[b])),
        pl.Series("s_aa", store.cosine(store.query, store.query, corpus.anchor[a], corpus.anchor[b])),
        pl.Series("s_ac", s_ac),
        pl.Series("s_ap", s_ap),
        pl.Series("jaccard", np.where(hits.mask, hits.score, 0.0)),
        pl.Series("guard", guard.disagree(corpus.positive[a], corpus.positive[b])),
    )


def prf(label: np.ndarray, flag: np.ndarray) -> tuple[float, float, float]:
    tp = int((flag & label).sum())
    fp = int((flag & ~label).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / int(label.sum())
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/ca-quality"))
    parser.add_argument("--cases", nargs="+", default=["mrpc", "stsb", "qa-split"])
    parser.add_argument("--peer-f1", nargs="+", type=float, help="best peer F1 per case, in --cases order")
    parser.add_argument("--lead", type=float, default=0.10)
    parser.add_argument("--number-guard", type=int, default=50, help="the scan's --number-guard (0: off)")
    parser.add_argument("--show", type=int, default=10)
    args = parser.parse_args()
    frames = {name: features(args.work / name, min(GRID["J"]), args.number_guard) for name in args.cases}
    peers = dict(zip(args.cases, args.peer_f1 or [0.0] * len(args.cases), strict=True))
    ranked = []
    for t, s, m, j in itertools.product(GRID["T"], GRID["S"], GRID["m"], GRID["J"]):
        scores = {}
        for name, f in frames.items():
            col = {c: f.get_column(c).to_numpy() for c in ("s_pc", "s_aa", "s_ac", "s_ap", "jaccard", "guard")}
            flag = (
                (col["s_pc"] >= t)
                | (col["s_aa"] >= t)
                | (col["jaccard"] >= j)
                | ((col["s_pc"] >= s) & (col["s_ac"] > col["s_ap"] * (1 - m)))
            ) & ~col["guard"]
            scores[name] = prf(f.get_column("label").to_numpy() == 1, flag)
        lead = min(scores[n][2] - peers[n] for n in scores)
        worst_precision = min(v[0] for v in scores.values())
        ranked.append((lead, worst_precision, (t, s, m, j), scores))
    ranked.sort(key=lambda r: (r[0] >= args.lead, r[1], r[0]), reverse=True)
    print("| T | S | m | J | smallest F1 lead | " + " | ".join(f"{n} P / R / F1" for n in args.cases) + " |")
    print("|---:|---:|---:|---:|---:|" + "---|" * len(args.cases))
    for lead, _, (t, s, m, j), scores in ranked[: args.show]:
        cells = " | ".join("{:.3f} / {:.3f} / {:.3f}".format(*scores[n]) for n in args.cases)
        print(f"| {t} | {s} | {m} | {j} | {lead:+.3f} | {cells} |")


if __name__ == "__main__":
    main()
