"""Leakage case: new training rows that copy or paraphrase eval rows or existing rows, and clean ones.

    .venv/bin/python -m bench.leakage --data /work/shared/data --work /tmp/ca-leakage

Built from human-labelled sentence pairs (MRPC; STS Benchmark, see bench/quality/cases.py for the
labels: MRPC quality 1 and STS score >= 4.0 are paraphrases, MRPC quality 0 and STS 2.0-3.0 are
same-topic non-paraphrases) and SciFact titles (positives that carry no leak). No two pairs share a
sentence (``text_key``). For each pair (s1, s2) s1 goes into the reference data and s2 into a new row:

- ``leak-copy``: a new row carries an eval text, verbatim or re-cased/re-spaced/re-punctuated;
- ``leak-paraphrase``: a new row carries s2 of a paraphrase pair whose s1 is an eval text;
- ``repeat-copy``: a new row repeats an existing row;
- ``repeat-paraphrase``: s2 of a paraphrase pair whose s1 is an existing row's anchor;
- ``hard-eval`` / ``hard-existing``: s2 of a non-paraphrase pair whose s1 is in eval / existing (clean);
- ``clean``: a sentence with no partner anywhere.

A third of the copied and paraphrased texts sit in the positive role (the anchor is then a fresh
title). The eval set is a BEIR ``queries.jsonl``; the existing data a pair file.

The scan runs as ``contrast-audit scan new.jsonl --against existing.jsonl --eval eval/ --format json``
and a new row counts as flagged for ``leaks`` (``overlaps``) when it has an eval (existing) overlap.
Against it, on the same rows:

- the plain-cosine rule: the largest cosine between a text of the row and any reference text is at
  least T (the scan's 0.825, and the best T for F1 on this case, an optimistic upper bound);
- the exact-hash rule, deepchecks' train-test samples mix: texts equal after lowercasing, removing
  ASCII punctuation and NFKC (deepchecks also drops NLTK's English stop words, left out here: the
  list needs a download).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import string
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np

from bench.quality.cases import read_mrpc, read_sts, text_key, write_atomic

SIZES = {
    "leak-copy": 150,
    "leak-paraphrase": 300,
    "repeat-copy": 100,
    "repeat-paraphrase": 150,
    "hard-eval": 250,
    "hard-existing": 150,
    "clean": 150,
}
EVAL_FILLER = 300
EXISTING_FILLER = 600
LEAK = ("leak-copy", "leak-paraphrase")
REPEAT = ("repeat-copy", "repeat-paraphrase")


def deepchecks_key(text: str) -> str:
    """deepchecks' ``normalize_text`` defaults without stop-word removal."""
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return " ".join(unicodedata.normalize("NFKC", text).split())


def _variant(text: str, k: int) -> str:
    """A copy as people make them: verbatim, lower-cased, re-spaced, or with the end punctuation changed."""
    return [text, text.lower(), "  " + text.replace(" ", "  ") + " ", text.rstrip(".!?") + "?"][k % 4]


def build(data: Path, work: Path, seed: int) -> dict:
    """Write ``new.jsonl``, ``existing.jsonl``, ``eval/queries.jsonl`` and ``truth.json`` into ``work``."""
    rng = random.Random(seed)
    pairs = [
        *read_mrpc(data / "mrpc" / "msr_paraphrase_train.txt", "train"),
        *read_mrpc(data / "mrpc" / "msr_paraphrase_test.txt", "test"),
        *read_sts(data / "stsbenchmark" / "sts-train.csv", "train"),
        *read_sts(data / "stsbenchmark" / "sts-dev.csv", "dev"),
        *read_sts(data / "stsbenchmark" / "sts-test.csv", "test"),
    ]
    rng.shuffle(pairs)
    titles = [json.loads(line)["title"] for line in (data / "scifact_beir" / "corpus.jsonl").open(encoding="utf-8")]
    rng.shuffle(titles)
    used: set[str] = set()

    def fresh(texts: list[str]) -> bool:
        keys = [text_key(t) for t in texts]
        if any(not k or k in used for k in keys) or len(set(keys)) < len(keys):
            return False
        used.update(keys)
        return True

    title_iter = iter(t for t in titles if t.strip())

    def title() -> str:
        while not fresh([t := next(title_iter)]):
            pass
        return t

    para = [p for p in pairs if p.label == 1]
    hard = [p for p in pairs if p.label == 0]
    para_iter, hard_iter = iter(para), iter(hard)

    def take(source, n: int) -> list[tuple[str, str]]:
        out = []
        for p in source:
            if len(out) == n:
                break
            if fresh([p.text1, p.text2]):
                out.append((p.text1, p.text2))
        if len(out) < n:
            raise SystemExit(f"not enough sentence pairs for {n} rows")
        return out

    eval_texts: list[str] = []
    existing: list[dict] = []
    new: list[dict] = []

    def new_row(kind: str, text: str, k: int, partner: tuple[str, str] | None = None) -> None:
        if k % 3 == 2:  # a third in the positive role
            new.append({"anchor": title(), "positive": text, "kind": kind, "partner": partner})
        else:
            new.append({"anchor": text, "positive": title(), "kind": kind, "partner": partner})

    for k, (s1, _) in enumerate(take(para_iter, SIZES["leak-copy"])):
        eval_texts.append(s1)
        new_row("leak-copy", _variant(s1, k), k)
    for k, (s1, s2) in enumerate(take(para_iter, SIZES["leak-paraphrase"])):
        eval_texts.append(s1)
        new_row("leak-paraphrase", s2, k, (s1, s2))
    for k, (s1, s2) in enumerate(take(hard_iter, SIZES["hard-eval"])):
        eval_texts.append(s1)
        new_row("hard-eval", s2, k, (s1, s2))
    for s1, _ in take(iter(pairs), EVAL_FILLER):
        eval_texts.append(s1)
    for k, (s1, _) in enumerate(take(para_iter, SIZES["repeat-copy"])):
        row = {"anchor": s1, "positive": title()}
        existing.append(row)
        new.append({"anchor": _variant(row["anchor"], k), "positive": row["positive"], "kind": "repeat-copy"})
    for s1, s2 in take(para_iter, SIZES["repeat-paraphrase"]):
        existing.append({"anchor": s1, "positive": title()})
        new.append({"anchor": s2, "positive": title(), "kind": "repeat-paraphrase", "partner": (s1, s2)})
    for s1, s2 in take(hard_iter, SIZES["hard-existing"]):
        existing.append({"anchor": s1, "positive": title()})
        new.append({"anchor": s2, "positive": title(), "kind": "hard-existing", "partner": (s1, s2)})
    for s1, s2 in take(iter(pairs), EXISTING_FILLER):
        existing.append({"anchor": s1, "positive": s2})
    for s1, _ in take(iter(pairs), SIZES["clean"]):
        new.append({"anchor": s1, "positive": title(), "kind": "clean"})

    rng.shuffle(new)
    rng.shuffle(existing)
    rng.shuffle(eval_texts)
    truth = {f"n{i}": row.pop("kind") for i, row in enumerate(new)}
    # (reference sentence, new sentence) of each row built from a labelled pair
    partners = {f"n{i}": p for i, r in enumerate(new) if (p := r.pop("partner", None))}
    write_atomic(work / "new.jsonl", "".join(json.dumps({"id": f"n{i}", **r}) + "\n" for i, r in enumerate(new)))
    write_atomic(
        work / "existing.jsonl", "".join(json.dumps({"id": f"e{i}", **r}) + "\n" for i, r in enumerate(existing))
    )
    write_atomic(
        work / "eval" / "queries.jsonl",
        "".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(eval_texts)),
    )
    write_atomic(work / "truth.json", json.dumps(truth, indent=0, sort_keys=True))
    return {"new": new, "existing": existing, "eval": eval_texts, "truth": truth, "partners": partners}


def prf(flagged: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    tp = int((flagged & truth).sum())
    fp = int((flagged & ~truth).sum())
    fn = int((~flagged & truth).sum())
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "tp": tp, "fp": fp, "fn": fn}


def _max_cosine(encoder, rows: list[dict], reference: list[str], cache_new, cache_ref) -> np.ndarray:
    """Largest cosine between either text of each row and any reference text."""
    from contrast_audit.overlap import neighbours

    texts = [r["anchor"] for r in rows] + [r["positive"] for r in rows]
    nv, _ = encoder.vectors(texts, cache_new)
    rv, _ = encoder.vectors(reference, cache_ref)
    pairs = neighbours(nv, rv, -1.0)  # all pairs (small case)
    best = np.full(len(texts), -1.0)
    np.maximum.at(best, pairs.get_column("new").to_numpy(), pairs.get_column("s_embedding").to_numpy())
    n = len(rows)
    return np.maximum(best[:n], best[n:])


def score(case: dict, report: dict, work: Path) -> list[dict]:
    from contrast_audit.config import EmbeddingConfig
    from contrast_audit.embed import EmbeddingCache, EmbeddingStore
    from contrast_audit.overlap import Encoder

    ids = [f"n{i}" for i in range(len(case["new"]))]
    kinds = np.array([case["truth"][i] for i in ids])
    flagged = {
        target: np.isin(ids, [o["row_id"] for o in report["overlaps"] if o["target"] == target])
        for target in ("eval", "existing")
    }
    store = EmbeddingStore(EmbeddingConfig(cache_dir=str(work / "cache")))
    encoder = Encoder.of(store)
    main = EmbeddingCache(work / "cache", encoder.fingerprint, encoder.prompt)
    index = EmbeddingCache(work / "index", encoder.fingerprint, encoder.prompt)
    existing_texts = [r["anchor"] for r in case["existing"]] + [r["positive"] for r in case["existing"]]
    cos = {
        "eval": _max_cosine(encoder, case["new"], case["eval"], main, index),
        "existing": _max_cosine(encoder, case["new"], existing_texts, main, index),
    }
    hashed = {
        "eval": {deepchecks_key(t) for t in case["eval"]},
        "existing": {deepchecks_key(t) for t in existing_texts},
    }
    out = []
    for metric, target, positive in (("leaks", "eval", LEAK), ("overlaps", "existing", REPEAT)):
        truth = np.isin(kinds, positive)
        exact = np.array(
            [
                deepchecks_key(r["anchor"]) in hashed[target] or deepchecks_key(r["positive"]) in hashed[target]
                for r in case["new"]
            ]
        )
        grid = np.round(np.arange(0.5, 1.0001, 0.005), 3)
        best_t = max(grid, key=lambda t: (prf(cos[target] >= t, truth)["f1"], -t))
        rules = {
            "contrast-audit scan": flagged[target],
            "plain cosine ≥ 0.825": cos[target] >= 0.825,
            f"plain cosine ≥ {best_t:g} (best F1 here)": cos[target] >= best_t,
            "exact hash (deepchecks)": exact,
        }
        for rule, mask in rules.items():
            row = {"metric": metric, "rule": rule, **prf(mask, truth)}
            row["recall_by_kind"] = {k: float(mask[kinds == k].mean()) for k in positive}
            row["flagged_by_kind"] = {
                k: float(mask[kinds == k].mean()) for k in SIZES if k not in positive and (kinds == k).any()
            }
            out.append(row)
    return out


def separability(case: dict, work: Path) -> list[str]:
    """How well cosine and token alignment separate the planned paraphrase pairs from the hard
    non-paraphrase pairs: for each paraphrase recall level, the smallest share of hard pairs flagged
    by any rule ``cosine >= t and alignment >= a`` on a grid."""
    import polars as pl

    from contrast_audit.config import EmbeddingConfig
    from contrast_audit.embed import EmbeddingCache, EmbeddingStore
    from contrast_audit.normalise import normalise
    from contrast_audit.overlap import Encoder, _mini_corpus
    from contrast_audit.tokens import TokenStore

    ids = sorted(case["partners"])
    is_para = np.array(["paraphrase" in case["truth"][i] for i in ids])
    left = [case["partners"][i][0] for i in ids]
    right = [case["partners"][i][1] for i in ids]
    store = EmbeddingStore(EmbeddingConfig(cache_dir=str(work / "cache")))
    encoder = Encoder.of(store)
    cache = EmbeddingCache(work / "cache", encoder.fingerprint, encoder.prompt)
    a, _ = encoder.vectors(left, cache)
    b, _ = encoder.vectors(right, cache)
    cos = (a * b).sum(axis=1)
    texts = left + right
    frame = pl.DataFrame({"text": texts, "norm": normalise(texts)})
    mini = _mini_corpus(frame, frame.head(0), pl.Series([], dtype=pl.UInt32))
    store.prepare(mini)
    tokens = TokenStore(store)
    tokens.prepare(mini)
    n = len(ids)
    align = tokens.alignment(np.arange(n), np.arange(n, 2 * n))
    tokens.finish()
    grid = [(t, al) for t in np.arange(0.5, 0.96, 0.01) for al in np.arange(0.0, 1.0, 0.05)]
    rates = [((cos >= t) & (align >= al)) for t, al in grid]
    lines = [
        "## How separable are the planned pairs?",
        "",
        f"{int(is_para.sum())} paraphrase pairs, {int((~is_para).sum())} hard non-paraphrase pairs; median cosine "
        f"{np.median(cos[is_para]):.3f} vs {np.median(cos[~is_para]):.3f}, median alignment "
        f"{np.median(align[is_para]):.3f} vs {np.median(align[~is_para]):.3f}. Smallest share of hard pairs "
        "flagged by a rule `cosine >= t and alignment >= a` (t in steps of 0.01, a of 0.05) that keeps a "
        "given share of the paraphrases:",
        "",
        "| paraphrase recall at least | hard pairs flagged | t | a |",
        "|---:|---:|---:|---:|",
    ]
    for level in (0.5, 0.7, 0.8, 0.9, 0.95):
        best = min(
            ((m[~is_para].mean(), t, al) for m, (t, al) in zip(rates, grid, strict=True) if m[is_para].mean() >= level),
            default=None,
        )
        if best is not None:
            lines.append(f"| {level:.2f} | {best[0]:.3f} | {best[1]:.2f} | {best[2]:.2f} |")
    return [*lines, ""]


def render(rows: list[dict], command: str, seconds: float, case: dict, seed: int, info: dict) -> str:
    lines = [
        "# Leakage case: results",
        "",
        f"Command: `{command}` (seed {seed}); the scan took {seconds:.0f} s on 2 shared CPU cores, 24 GiB, no GPU "
        f"(reference embeddings: {info.get('embeddings_computed')} computed, {info.get('embeddings_indexed')} from "
        "the index).",
        "",
        f"{len(case['new'])} new rows, {len(case['existing'])} existing rows, {len(case['eval'])} eval texts. "
        + ", ".join(f"{k}: {v}" for k, v in SIZES.items())
        + ".",
        "",
    ]
    for metric in ("leaks", "overlaps"):
        lines += [
            f"## `{metric}`",
            "",
            "| rule | precision | recall | F1 | TP | FP | FN | recall by kind | flagged clean rows by kind |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for r in rows:
            if r["metric"] != metric:
                continue
            by = ", ".join(f"{k} {v:.2f}" for k, v in r["recall_by_kind"].items())
            clean = ", ".join(f"{k} {v:.2f}" for k, v in r["flagged_by_kind"].items())
            lines.append(
                f"| {r['rule']} | {r['precision']:.3f} | {r['recall']:.3f} | {r['f1']:.3f} | {r['tp']} | {r['fp']} | "
                f"{r['fn']} | {by} | {clean} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data", type=Path, required=True, help="directory holding mrpc/, stsbenchmark/, scifact_beir/"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/ca-leakage"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scan-args", default="", help="extra scan flags")
    parser.add_argument("--separability", action="store_true", help="also measure how separable the pairs are")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "leakage-results.md")
    args = parser.parse_args(argv)
    work = args.work
    case = build(args.data, work, args.seed)
    env = {**os.environ, "CONTRAST_AUDIT_CACHE_DIR": str(work / "cache")}
    scan = [sys.executable, "-c", "from contrast_audit.cli import main; main()", "scan"]
    tail = [
        str(work / "new.jsonl"),
        "--against",
        str(work / "existing.jsonl"),
        "--eval",
        str(work / "eval"),
        "--index",
        str(work / "index"),
        "--format",
        "json",
        "--output",
        str(work / "report.json"),
        "--quiet",
        *shlex.split(args.scan_args),
    ]
    start = time.perf_counter()
    done = subprocess.run([*scan, *tail], env=env, check=False)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"scan failed with exit code {done.returncode}")
    report = json.loads((work / "report.json").read_text(encoding="utf-8"))
    rows = score(case, report, work)
    command = (
        f".venv/bin/python -m bench.leakage --data {args.data} --work {work}"
        + (f" --scan-args={shlex.quote(args.scan_args)}" if args.scan_args else "")
        + (" --separability" if args.separability else "")
    )
    text = render(rows, command, seconds, case, args.seed, report.get("reference") or {})
    if args.separability:
        text += "\n" + "\n".join(separability(case, work))
    write_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
