"""How the scan's semantic defaults were chosen: a grid over the thresholds on held-out labelled cases.

    .venv/bin/python -m bench.quality.run --data /work/shared/data --work /tmp/ca-quality-tune --part tune
    .venv/bin/python -m bench.quality.tune --work /tmp/ca-quality-tune --peer-f1 F1_MRPC F1_STSB F1_QA

For every labelled in-batch pair of each case it computes, with the scan's own code (default model,
MinHash detector, guards), the features the policy reads: cosine(positive, candidate), cosine(anchor,
other anchor), cosine(anchor, candidate), cosine(anchor, positive), the verified MinHash Jaccard, the
token alignment of the candidate with the anchor row's texts (for each token match threshold M on the
grid; M = 0 is BERTScore's soft matching) and the number guard's verdict. It then scores the policy

    likely  if ( cos(p, c) >= T  and  align(p, c) >= B
                 or  cos(a, a') >= T  and  align(a, a') >= B
                 or  jaccard >= J  and  max(align(a, c), align(p, c)) >= B
                 or  cos(p, c) >= S  and  cos(a, c) > cos(a, p) * (1 - m)  and  a != p )
            and not (the candidate disagrees on numbers with both short row texts)   # number guard

(align: the token alignment of two short texts at match threshold M; 1 when either is long) for each
(M, T, S, m, J, B) on the grid. Selection rule: among the settings that meet both targets on every
case — F1 beating the case's best peer rule by at least --lead (0.10; peers' F1 given with --peer-f1)
and precision at least --precision (0.90), where a case's precision counts as its Wilson lower bound
one standard error below the estimate (--confidence-z 1: the one-standard-error rule, so that the
choice does not sit on the edge of the target it has to meet on unseen pairs) — the one with the
largest smallest F1 lead, where leads within --tie (0.005, about one labelled pair of a case) of the
best count as tied and the tie goes to the highest worst-case precision bound; when none meets both,
the lead-meeting setting with the highest worst-case precision bound. Run it on the ``tune`` half
(``run --part tune``) and report on the ``test`` half, which the choice never saw.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import polars as pl

from contrast_audit.config import ColumnMapping, EmbeddingConfig, NormaliseConfig
from contrast_audit.corpus import POSITIVE_ROLE, build_corpus
from contrast_audit.embed import EmbeddingStore
from contrast_audit.evidence import Pairs
from contrast_audit.evidence.embedding import pair_scores
from contrast_audit.evidence.guards import AlignmentGuard
from contrast_audit.evidence.minhash import MinHashDetector
from contrast_audit.evidence.numbers import NumberGuard
from contrast_audit.io import load_rows
from contrast_audit.tokens import TokenStore

GRID = {
    "M": [0.0, 0.6, 0.65, 0.7, 0.75, 0.8],
    "T": [0.8, 0.825, 0.85, 0.875, 0.9, 0.925, 0.95],
    "S": [0.5, 0.55, 0.6, 0.65, 0.7, 0.75],
    "m": [0.05, 0.1, 0.15, 0.2, 0.25, 0.3],
    # MinHash flags under 1% of the labelled pairs of these cases; across 0.5-0.8 it moved the
    # best settings' F1 by at most 0.002, so its threshold is held at its default, not chosen here.
    "J": [0.7],
    "B": [0.0, 0.6, 0.65, 0.7, 0.75, 0.78, 0.8, 0.82, 0.84, 0.86, 0.88, 0.9],
}


def features(
    case: Path, minhash_threshold: float, guard_words: int, matches: Sequence[float], align_words: int = 50
) -> dict[float, pl.DataFrame]:
    """The policy's features of every labelled pair of ``case``, one frame per token match threshold
    (only the alignment columns differ; everything else is computed once)."""
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
    anchor, positive, cand = corpus.anchor[a], corpus.positive[a], corpus.positive[b]
    pairs = Pairs("query_to_doc", a, b, np.full(a.shape[0], POSITIVE_ROLE), cand)
    s_ac, s_ap = pair_scores(store, corpus, pairs)
    s_pc = store.cosine(store.doc, store.doc, positive, cand)
    s_aa = store.cosine(store.query, store.query, anchor, corpus.anchor[b])
    hits = minhash.detect(pairs)
    jaccard = np.where(hits.mask, hits.score, 0.0)
    guard = NumberGuard(guard_words)
    guard.prepare(corpus)
    # The alignments the guard reads where a near-duplicate rule can fire on the grid: of the positive
    # and the candidate (`embedding`), of the two anchors (`anchor-embedding`), of the candidate with
    # the better-aligned row text (`minhash`); 1 where a text is long (never vetoed) or no rule fires.
    other_anchor = corpus.anchor[b]
    fires_t, fires_a, fires_j = s_pc >= min(GRID["T"]), s_aa >= min(GRID["T"]), jaccard >= min(GRID["J"])
    base = rows.select("label", "kind").with_columns(
        pl.Series("s_pc", s_pc),
        pl.Series("s_aa", s_aa),
        pl.Series("s_ac", s_ac),
        pl.Series("s_ap", s_ap),
        pl.Series("jaccard", jaccard),
        pl.Series("guard", guard.veto(None, pairs, np.ones(a.shape[0], dtype=bool))),
        pl.Series("same_ap", anchor == positive),
    )
    frames = {}
    for match in matches:
        aligner = AlignmentGuard(TokenStore(store, match), 1.0, align_words)  # token vectors: from the cache
        aligner.prepare(corpus)

        def alignment(u: np.ndarray, v: np.ndarray, fires: np.ndarray, aligner=aligner) -> np.ndarray:
            out = np.ones(u.shape[0])
            idx = np.flatnonzero(fires & aligner.short[u] & aligner.short[v])
            out[idx] = aligner.tokens.alignment(u[idx], v[idx])
            return out

        frames[match] = base.with_columns(
            pl.Series("align_pc", alignment(positive, cand, fires_t)),
            pl.Series("align_aa", alignment(anchor, other_anchor, fires_a)),
            pl.Series("align_row", np.maximum(alignment(anchor, cand, fires_j), alignment(positive, cand, fires_j))),
        )
        aligner.finish()
    return frames


def prf(label: np.ndarray, flag: np.ndarray) -> tuple[float, float, float, int]:
    """Precision, recall, F1 and the number of flagged records."""
    tp = int((flag & label).sum())
    fp = int((flag & ~label).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / int(label.sum())
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1, tp + fp


def precision_bound(precision: float, flagged: int, z: float) -> float:
    """The lower end of the Wilson score interval of a precision, with ``z`` standard deviations.

    Every labelled pair is scored in both orders (anchor and candidate swapped), so the two records
    of a pair are not independent: the interval counts ``flagged / 2`` observations."""
    n = flagged / 2
    if n <= 0:
        return 0.0
    centre = precision + z * z / (2 * n)
    spread = z * np.sqrt(precision * (1 - precision) / n + z * z / (4 * n * n))
    return float((centre - spread) / (1 + z * z / n))


def flags(col: dict[str, np.ndarray], t: float, s: float, m: float, j: float, b: float) -> np.ndarray:
    """The scan's policy on precomputed features (evidence/__init__.py)."""
    near = (
        ((col["s_pc"] >= t) & (col["align_pc"] >= b))
        | ((col["s_aa"] >= t) & (col["align_aa"] >= b))
        | ((col["jaccard"] >= j) & (col["align_row"] >= b))
    )
    # The same expression as MarginDetector: the float32 ratio, compared in float64.
    ratio = np.divide(col["s_ac"], col["s_ap"], out=np.zeros_like(col["s_ac"]), where=col["s_ap"] > 0)
    margin = (col["s_pc"] >= s) & (col["s_ap"] > 0) & (ratio.astype(np.float64) > 1.0 - m) & ~col["same_ap"]
    return (near | margin) & ~col["guard"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/ca-quality"))
    parser.add_argument("--cases", nargs="+", default=["mrpc", "stsb", "qa-split"])
    parser.add_argument("--peer-f1", nargs="+", type=float, help="best peer F1 per case, in --cases order")
    parser.add_argument("--lead", type=float, default=0.10)
    parser.add_argument("--precision", type=float, default=0.90)
    parser.add_argument(
        "--confidence-z",
        type=float,
        default=1.0,
        help="a case meets --precision when its precision's Wilson lower bound at this z does (0: the point estimate)",
    )
    parser.add_argument("--tie", type=float, default=0.005, help="smallest leads this close to the best count as tied")
    parser.add_argument("--number-guard", type=int, default=50, help="the scan's --number-guard (0: off)")
    parser.add_argument("--show", type=int, default=10)
    args = parser.parse_args()
    if args.confidence_z < 0:
        parser.error("--confidence-z must be >= 0 (a lower bound)")
    columns = ("s_pc", "s_aa", "s_ac", "s_ap", "jaccard", "guard", "align_pc", "align_aa", "align_row", "same_ap")
    cols, labels = {}, {}
    for name in args.cases:
        for match, frame in features(args.work / name, min(GRID["J"]), args.number_guard, GRID["M"]).items():
            cols[match, name] = {c: frame.get_column(c).to_numpy() for c in columns}
            labels[name] = frame.get_column("label").to_numpy() == 1
    peers = dict(zip(args.cases, args.peer_f1 or [0.0] * len(args.cases), strict=True))
    ranked = []
    for setting in itertools.product(GRID["M"], GRID["T"], GRID["S"], GRID["m"], GRID["J"], GRID["B"]):
        match, rule = setting[0], setting[1:]
        scores = {name: prf(labels[name], flags(cols[match, name], *rule)) for name in args.cases}
        lead = min(scores[n][2] - peers[n] for n in scores)
        worst_precision = min(precision_bound(v[0], v[3], args.confidence_z) for v in scores.values())
        meets = lead >= args.lead and worst_precision >= args.precision
        ranked.append((meets, lead >= args.lead, lead, worst_precision, setting, scores))
    # Settings meeting both targets on every case first, by smallest F1 lead (then worst-case
    # precision bound); then those meeting the lead alone, by worst-case precision bound.
    best = max((r[2] for r in ranked if r[0]), default=None)

    def tied(r) -> bool:  # within --tie of the best smallest lead: decided by worst-case precision bound
        return r[0] and best is not None and r[2] >= best - args.tie

    ranked.sort(key=lambda r: (r[0], tied(r), r[1], r[3] if tied(r) else r[2] if r[0] else r[3], r[2]), reverse=True)
    # (a stable sort: among equal settings the grid order decides, the smaller values first)
    print(f"{sum(r[0] for r in ranked)} of {len(ranked)} settings meet both targets on every case")
    head = " | ".join(f"{n} P / R / F1" for n in args.cases)
    print(f"| M | T | S | m | J | B | smallest F1 lead | worst precision bound (z={args.confidence_z}) | {head} |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|" + "---|" * len(args.cases))
    for _, _, lead, bound, (match, t, s, m, j, b), scores in ranked[: args.show]:
        cells = " | ".join("{:.3f} / {:.3f} / {:.3f}".format(*scores[n][:3]) for n in args.cases)
        print(f"| {match} | {t} | {s} | {m} | {j} | {b} | {lead:+.3f} | {bound:.3f} | {cells} |")


if __name__ == "__main__":
    main()
