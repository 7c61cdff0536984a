"""Proof benchmark: does training from a manifest beat the batching users have today?

    PYTHONPATH=. .venv/bin/python -m bench.train.cisi --data /work/shared/data --work /tmp/ca-train-bench

CISI (1,460 abstracts, 76 queries with judgments, about 41 relevant documents per query). Queries, not
pairs, are held out: a third of the judged queries (fixed split) are evaluated against the whole corpus.
Training rows are (query, one relevant document, one hard negative) for every judged pair of the
training queries; the hard negative of a query's j-th row is the j-th highest-ranked non-relevant
document by the start model (all-MiniLM-L6-v2 as packaged), so each row has the negative a user would
mine. With many relevant documents per query, a batch holds several rows of the same query: each of
their documents is a false negative for the others' anchors, and another query's hard negative can be
judged relevant to an anchor.

Settings, all from the same start model, rows, steps, batch size, learning rate, scale 20 and seeds:

- ``naive``: sentence-transformers' default random batches + ``MultipleNegativesRankingLoss``;
- ``no-duplicates``: ``NoDuplicatesBatchSampler`` + MNRL (exact-string duplicates never share a batch,
  which on this data also keeps a query's rows apart, since their anchor text is identical);
- ``gist``: random batches + ``GISTEmbedLoss`` with the start model as guide (temperature 0.05);
- ``mask``: the random batches of ``naive`` (same seed, same batches) + a ``mask`` manifest +
  ``MaskedMultipleNegativesRankingLoss``;
- ``group``: a ``group`` manifest (a query's rows dealt into different batches; what remains masked);
- ``multi-positive``: a ``multi-positive`` manifest (runs of up to 4 rows of one query kept together;
  every candidate that is a judged document of the anchor's query counts as a positive; ``sum``
  normalisation);
- ``tool-mask`` / ``tool-group``: manifests written by ``contrast-audit manifest`` itself with its default
  detectors (exact, same-anchor, linked, declared, MinHash, embeddings with the bundled model) on the
  training file: what a user gets without knowing the judgments.

The oracle manifests (``mask``, ``group``, ``multi-positive``) are written by this script in the manifest format from the known-positive relation the
training data itself declares (rows that share an anchor text: every positive of a query's rows is a
positive of that query, and so is an identical text in any column), i.e. what ``contrast-audit manifest``
acts on with its same-anchor and exact-text evidence. Detection quality is measured elsewhere
(``bench/quality``); this benchmark measures what the trainer does with the detections. The false-negative
figures are computed from CISI's judgments for the batches each setting trains on (GISTEmbedLoss: what its
guide leaves unmasked, computed with the same start-model embeddings).
Results for each run are kept in ``--work`` so an interrupted benchmark resumes.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.quality.mined import read_cisi

SETTINGS = ("naive", "no-duplicates", "gist", "mask", "group", "multi-positive", "tool-mask", "tool-group")
MANIFEST_SETTINGS = ("mask", "group", "multi-positive", "tool-mask", "tool-group")
HARD_POOL = 30
RUN_LEN = 4
HOLDOUT_SEED = 13


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def split_queries(relevant: dict[str, set[str]], queries: dict[str, str]) -> tuple[list[str], list[str]]:
    judged = sorted((q for q in relevant if q in queries and relevant[q]), key=int)
    rng = random.Random(HOLDOUT_SEED)
    held = sorted(rng.sample(judged, len(judged) // 3), key=int)
    return [q for q in judged if q not in set(held)], held


def load_start_model(max_seq_length: int):
    from contrast_audit import model as model_io

    m = model_io.load(model_io.resolve(None))
    m.max_seq_length = max_seq_length
    return m


def build(args, work: Path) -> dict:
    """Rows, doc ids per row, held-out split and the start model's embeddings (cached in ``work``)."""
    meta_path = work / "rows.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    col = read_cisi(Path(args.data))
    train_q, held_q = split_queries(col.relevant, col.queries)
    doc_ids = sorted(col.documents, key=int)
    model = load_start_model(args.max_seq_length)
    _log(f"embedding {len(doc_ids)} documents and {len(train_q)} training queries with the start model")
    d_emb = model.encode([col.documents[d] for d in doc_ids], batch_size=64, normalize_embeddings=True)
    q_emb = model.encode([col.queries[q] for q in train_q], batch_size=64, normalize_embeddings=True)
    np.save(work / "doc_emb.npy", d_emb)
    rows = []
    for qi, q in enumerate(train_q):
        judged = sorted(col.relevant[q] & set(doc_ids), key=int)
        ranked = [doc_ids[i] for i in np.argsort(-(d_emb @ q_emb[qi]), kind="stable")]
        hard = [d for d in ranked if d not in col.relevant[q]][:HARD_POOL]
        for j, d in enumerate(judged):
            rows.append({"id": f"q{q}-d{d}", "query": q, "pos": d, "neg": hard[j % len(hard)]})
    meta = {
        "train_queries": train_q,
        "held_queries": held_q,
        "doc_ids": doc_ids,
        "rows": rows,
        "relevant": {q: sorted(col.relevant[q], key=int) for q in train_q + held_q},
    }
    lines = [
        {
            "id": r["id"],
            "anchor": col.queries[r["query"]],
            "positive": col.documents[r["pos"]],
            "negative": col.documents[r["neg"]],
        }
        for r in rows
    ]
    (work / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    meta_path.write_text(json.dumps(meta))
    return meta


# ---- plans ------------------------------------------------------------------------------------


def random_plan(n: int, batch_size: int, seed: int) -> list[np.ndarray]:
    from contrast_audit.plan.samplers import random_batches

    return random_batches(n, batch_size, False, seed, 0)


def nodup_plan(meta: dict, batch_size: int, seed: int) -> list[np.ndarray]:
    from contrast_audit.plan.samplers import no_duplicates_batches

    # texts: query ids and doc ids stand for exact strings (CISI has no two identical texts across roles)
    keys: dict[str, int] = {}
    values = np.asarray(
        [
            [
                keys.setdefault(f"q{r['query']}", len(keys)),
                keys.setdefault(f"d{r['pos']}", len(keys)),
                keys.setdefault(f"d{r['neg']}", len(keys)),
            ]
            for r in meta["rows"]
        ],
        dtype=np.int64,
    )
    return no_duplicates_batches(values, batch_size, False, seed, 0)


def group_plan(meta: dict, batch_size: int, seed: int) -> list[np.ndarray]:
    """Deal each query's rows into consecutive batches (stride), so a query's rows share no batch."""
    rng = np.random.default_rng(seed)
    n = len(meta["rows"])
    n_batches = -(-n // batch_size)
    by_query: dict[str, list[int]] = {}
    for i, r in enumerate(meta["rows"]):
        by_query.setdefault(r["query"], []).append(i)
    clusters = list(by_query.values())
    order = rng.permutation(len(clusters))
    seq = np.concatenate([rng.permutation(clusters[k]) for k in order])
    batches = [seq[b::n_batches] for b in range(n_batches)]
    return [batches[b] for b in rng.permutation(n_batches)]


def multipositive_plan(meta: dict, batch_size: int, seed: int) -> list[np.ndarray]:
    """Runs of up to RUN_LEN rows of one query kept together, runs shuffled, cut into batches."""
    rng = np.random.default_rng(seed)
    by_query: dict[str, list[int]] = {}
    for i, r in enumerate(meta["rows"]):
        by_query.setdefault(r["query"], []).append(i)
    runs = []
    for q in sorted(by_query, key=int):
        rows = rng.permutation(by_query[q])
        runs += [rows[i : i + RUN_LEN] for i in range(0, len(rows), RUN_LEN)]
    seq = np.concatenate([runs[k] for k in rng.permutation(len(runs))])
    return [seq[i : i + batch_size] for i in range(0, len(seq), batch_size)]


def false_negatives(meta: dict, batch: np.ndarray) -> np.ndarray:
    """(anchor position, candidate position, role) of every judged-relevant candidate in one batch."""
    rel = {q: set(v) for q, v in meta["relevant"].items()}
    rows = [meta["rows"][i] for i in batch]
    out = []
    for a, ra in enumerate(rows):
        judged = rel[ra["query"]]
        for c, rc in enumerate(rows):
            if c != a and rc["pos"] in judged:
                out.append((a, c, 0))
            if rc["neg"] in judged:
                out.append((a, c, 1))
    return np.asarray(out, dtype=np.int64).reshape(-1, 3)


def write_manifest(path: Path, meta: dict, batches: list[np.ndarray], strategy: str, fingerprint: str, args) -> dict:
    ids = [r["id"] for r in meta["rows"]]
    lines, masked, positives = [], 0, 0
    for g, batch in enumerate(batches):
        fn = false_negatives(meta, batch)
        entries = [[int(a), int(c)] if role == 0 else [int(a), int(c), f"negative_{role}"] for a, c, role in fn]
        obj = {"batch": g, "epoch": 0, "rows": [ids[i] for i in batch], "ranks": [len(batch)]}
        if strategy == "multi-positive":
            obj["positives"] = {"query_to_doc": entries} if entries else {}
            positives += len(entries)
        else:
            obj["mask"] = {"query_to_doc": entries} if entries else {}
            masked += len(entries)
        lines.append(obj)
    header = {
        "kind": "contrast-audit-manifest",
        "schema_version": "1",
        "strategy": strategy,
        "fingerprint": fingerprint,
        "rows": len(ids),
        "mapping": {"anchor": "anchor", "positive": "positive", "negatives": ["negative"], "id": "id"},
        "plan": {
            "sampler": strategy,
            "batch_size": args.batch_size,
            "seed": args.seed_of_manifest,
            "epochs": 1,
            "drop_last": False,
            "world_size": 1,
            "source": "bench/train/cisi.py",
        },
        "loss": {"directions": ["query_to_doc"]},
        "mask_severity": "likely",
        "detectors": {"relation": "same anchor text / identical text (declared by the data)"},
        "model": None,
        "counts": {
            "batches": len(batches),
            "device_batches": len(batches),
            "masked_pairs": masked,
            "positive_pairs": positives,
            "conflicts_left": 0,
        },
        "tool": {"name": "bench/train/cisi.py"},
    }
    path.write_text("".join(json.dumps(x) + "\n" for x in [header, *lines]))
    return header["counts"]


def tool_manifest(path: Path, strategy: str, seed: int, work: Path, args) -> None:
    """``contrast-audit manifest`` on the training file, default detectors, the benchmark's batch size and seed."""
    if path.exists():
        return
    command = [
        str(Path(sys.executable).with_name("contrast-audit")),
        "manifest",
        str(work / "data.jsonl"),
        "--strategy",
        strategy,
        "--batch-size",
        str(args.batch_size),
        "--seed",
        str(seed),
        "--out",
        str(path),
        "--quiet",
    ]
    _log("  " + shlex.join(["contrast-audit", *command[1:]]))
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def manifest_plan(path: Path, meta: dict) -> tuple[list[np.ndarray], list[set[tuple[int, int, int]]]]:
    """The batches of a manifest as row indices, and per batch its masked (anchor, candidate, role) triples."""
    index = {r["id"]: i for i, r in enumerate(meta["rows"])}
    batches, masks = [], []
    with path.open() as handle:
        next(handle)
        for line in handle:
            obj = json.loads(line)
            batches.append(np.asarray([index[i] for i in obj["rows"]], dtype=np.int64))
            entries = [e for v in obj.get("mask", {}).values() for e in v]
            masks.append({(e[0], e[1], int(e[2].rsplit("_", 1)[1]) if len(e) > 2 else 0) for e in entries})
    return batches, masks


def fn_stats(
    meta: dict,
    batches: list[np.ndarray],
    steps: int,
    resolved: bool,
    gist: bool,
    masks: list[set[tuple[int, int, int]]] | None = None,
) -> dict:
    """Judged-relevant in-batch candidates per anchor over the trained batches, and how many stay negatives.

    ``masks`` (a manifest's masked triples per batch): a false negative stays a negative unless masked.
    """
    anchors = total = left = cands = masked = big = 0
    per_query = collections.Counter(r["query"] for r in meta["rows"])
    largest = {q for q, _ in per_query.most_common(10)}
    d_emb = np.load(meta["_work"] + "/doc_emb.npy") if gist else None
    q_emb = np.load(meta["_work"] + "/query_emb.npy") if gist else None
    doc_pos = {d: i for i, d in enumerate(meta["doc_ids"])}
    q_pos = {q: i for i, q in enumerate(meta["train_queries"])}
    for b, batch in enumerate(batches[:steps]):
        rows = [meta["rows"][i] for i in batch]
        fn = false_negatives(meta, batch)
        anchors += len(batch)
        big += sum(r["query"] in largest for r in rows)
        cands += len(batch) * (2 * len(batch) - 1)
        total += len(fn)
        if masks is not None:
            batch_masks = masks[b]
            masked += len(batch_masks)
            left += sum((int(a), int(c), int(role)) not in batch_masks for a, c, role in fn)
        elif gist and len(fn):
            # GISTEmbedLoss masks a candidate whose guide similarity exceeds the anchor's positive's.
            keep = 0
            for a, c, role in fn:
                q = q_emb[q_pos[rows[a]["query"]]]
                pos = q @ d_emb[doc_pos[rows[a]["pos"]]]
                cand = q @ d_emb[doc_pos[rows[c]["pos" if role == 0 else "neg"]]]
                keep += int(cand <= pos)
            left += keep
        elif resolved:
            masked += len(fn)
        else:
            left += len(fn)
    return {
        "masked_per_anchor": masked / anchors,
        "fn_per_anchor": total / anchors,
        "fn_rate": total / cands,
        "left_per_anchor": left / anchors,
        "mean_batch": anchors / max(1, len(batches[:steps])),
        "rows_trained": anchors,
        "largest_share": big / max(1, anchors),
    }


# ---- runs -------------------------------------------------------------------------------------


def run_one(setting: str, seed: int, meta: dict, work: Path, args) -> dict:
    import torch
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.losses import GISTEmbedLoss, MultipleNegativesRankingLoss

    from contrast_audit.manifest.format import read_manifest
    from contrast_audit.train import ManifestBatchSampler, MaskedMultipleNegativesRankingLoss, manifest_dataset
    from contrast_audit.train.evaluate import evaluate_model
    from contrast_audit.train.trainer import fit

    torch.manual_seed(seed)
    model = load_start_model(args.max_seq_length)
    manifest_path = work / "manifests" / f"{setting}-{seed}.jsonl"
    if setting in MANIFEST_SETTINGS:
        plan = read_manifest(manifest_path)
        data = manifest_dataset(str(work / "data.jsonl"), plan)
        loss = MaskedMultipleNegativesRankingLoss(model, plan, data.row_ids, scale=args.scale, n_negatives=1)
        sampler = ManifestBatchSampler.factory(plan, data.row_ids)
    else:
        from contrast_audit.config import ColumnMapping
        from contrast_audit.io.load import load_rows
        from contrast_audit.train.data import rows_dataset

        data = rows_dataset(load_rows([str(work / "data.jsonl")], ColumnMapping()).rows)
        dataset = data.dataset.remove_columns("label")
        data = data.__class__(dataset, data.row_ids, data.n_negatives, data.rows)
        sampler = BatchSamplers.NO_DUPLICATES if setting == "no-duplicates" else BatchSamplers.BATCH_SAMPLER
        if setting == "gist":
            guide = load_start_model(args.max_seq_length)
            loss = GISTEmbedLoss(model, guide, temperature=1.0 / args.scale)
        else:
            loss = MultipleNegativesRankingLoss(model, scale=args.scale)
    started = time.perf_counter()
    records = fit(
        model,
        data.dataset,
        loss,
        batch_sampler=sampler,
        batch_size=args.batch_size,
        work_dir=str(work / "tmp"),
        epochs=1,
        max_steps=args.steps,
        lr=args.lr,
        seed=seed,
        progress=False,
    )
    train_s = time.perf_counter() - started
    col = read_cisi(Path(args.data))
    held = {q: col.queries[q] for q in meta["held_queries"]}
    corpus = {d: col.documents[d] for d in meta["doc_ids"]}
    relevant = {q: set(meta["relevant"][q]) for q in meta["held_queries"]}
    metrics = evaluate_model(model, held, corpus, relevant, batch_size=64)
    return {
        "setting": setting,
        "seed": seed,
        "steps": len(records),
        "train_seconds": round(train_s, 1),
        "final_loss": records[-1]["loss"] if records else None,
        "metrics": metrics,
    }


def table(results: list[dict], stats: dict, baseline: dict | None) -> str:
    head = (
        "| setting | mean batch | rows trained | rows of the 10 largest queries | FN per anchor in batch | "
        "FN share of candidates | FN left as negatives | masked or marked per anchor | "
        "nDCG@10 | MRR@10 | Recall@10 | Recall@1 | train s/run |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    out = []
    if baseline:
        m = baseline["metrics"]
        out.append(
            f"| start model (no training) | – | – | – | – | – | – | – | {m['ndcg@10']:.4f} | {m['mrr@10']:.4f} | "
            f"{m['recall@10']:.4f} | {m['recall@1']:.4f} | – |"
        )
    for setting in SETTINGS:
        runs = [r for r in results if r["setting"] == setting]
        keys = [k for k in stats if k.rsplit("-", 1)[0] == setting]
        if not keys:
            continue
        fn = statistics.mean(stats[k]["fn_per_anchor"] for k in keys)
        left = statistics.mean(stats[k]["left_per_anchor"] for k in keys)
        rate = statistics.mean(stats[k]["fn_rate"] for k in keys)
        size = statistics.mean(stats[k]["mean_batch"] for k in keys)
        masked = statistics.mean(stats[k]["masked_per_anchor"] for k in keys)
        seen = statistics.mean(stats[k]["rows_trained"] for k in keys)
        share = statistics.mean(stats[k]["largest_share"] for k in keys)
        plan = f"{size:.1f} | {seen:,.0f} | {share:.1%} | {fn:.2f} | {rate:.1%} | {left:.2f} | {masked:.2f}"
        if not runs:
            out.append(f"| {setting} (not run) | {plan} | – | – | – | – | – |")
            continue

        def ms(key: str, runs=runs) -> str:
            vals = [r["metrics"][key] for r in runs]
            sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
            return f"{statistics.mean(vals):.4f} ± {sd:.4f}"

        secs = statistics.mean(r["train_seconds"] for r in runs)
        out.append(
            f"| {setting} (n={len(runs)}) | {plan} | {ms('ndcg@10')} | {ms('mrr@10')} | "
            f"{ms('recall@10')} | {ms('recall@1')} | {secs:.0f} |"
        )
    return head + "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="folder holding cisi/CISI.ALL, CISI.QRY, CISI.REL")
    p.add_argument("--work", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--scale", type=float, default=20.0)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    p.add_argument("--out", default=None, help="write the markdown table here")
    p.add_argument("--report-only", action="store_true", help="tabulate the finished runs in --work; train nothing")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    work = Path(args.work)
    (work / "manifests").mkdir(parents=True, exist_ok=True)
    (work / "results").mkdir(exist_ok=True)
    meta = build(args, work)
    meta["_work"] = str(work)
    if not (work / "query_emb.npy").exists():
        col = read_cisi(Path(args.data))
        m = load_start_model(args.max_seq_length)
        np.save(
            work / "query_emb.npy", m.encode([col.queries[q] for q in meta["train_queries"]], normalize_embeddings=True)
        )
    _log(
        f"{len(meta['rows'])} training rows from {len(meta['train_queries'])} queries; "
        f"{len(meta['held_queries'])} held-out queries"
    )

    from contrast_audit.config import ColumnMapping
    from contrast_audit.io.load import load_rows
    from contrast_audit.manifest.format import data_fingerprint

    fingerprint = data_fingerprint(load_rows([str(work / "data.jsonl")], ColumnMapping()).rows)
    n = len(meta["rows"])
    stats: dict[str, dict] = {}
    for seed in args.seeds:
        plans = {
            "naive": random_plan(n, args.batch_size, seed),
            "gist": random_plan(n, args.batch_size, seed),
            "mask": random_plan(n, args.batch_size, seed),
            "no-duplicates": nodup_plan(meta, args.batch_size, seed),
            "group": group_plan(meta, args.batch_size, seed),
            "multi-positive": multipositive_plan(meta, args.batch_size, seed),
        }
        args.seed_of_manifest = seed
        for strategy in ("mask", "group", "multi-positive"):
            path = work / "manifests" / f"{strategy}-{seed}.jsonl"
            if not path.exists():
                write_manifest(path, meta, plans[strategy], strategy, fingerprint, args)
        for setting, batches in plans.items():
            stats[f"{setting}-{seed}"] = fn_stats(
                meta,
                batches,
                args.steps,
                resolved=setting in MANIFEST_SETTINGS,
                gist=setting == "gist",
            )
        for setting in ("tool-mask", "tool-group"):
            if setting not in args.settings:
                continue
            path = work / "manifests" / f"{setting}-{seed}.jsonl"
            if not args.report_only:
                tool_manifest(path, setting.removeprefix("tool-"), seed, work, args)
            if path.exists():
                batches, masks = manifest_plan(path, meta)
                stats[f"{setting}-{seed}"] = fn_stats(meta, batches, args.steps, True, False, masks)

    base_path = work / "results" / "start-model.json"
    if not base_path.exists():
        from contrast_audit.train.evaluate import evaluate_model

        col = read_cisi(Path(args.data))
        started = time.perf_counter()
        metrics = evaluate_model(
            load_start_model(args.max_seq_length),
            {q: col.queries[q] for q in meta["held_queries"]},
            {d: col.documents[d] for d in meta["doc_ids"]},
            {q: set(meta["relevant"][q]) for q in meta["held_queries"]},
            batch_size=64,
        )
        _log(f"start model evaluated in {time.perf_counter() - started:.0f}s: {metrics}")
        base_path.write_text(json.dumps({"metrics": metrics}))
    baseline = json.loads(base_path.read_text())

    results = []
    for seed in args.seeds:
        for setting in args.settings:
            path = work / "results" / f"{setting}-{seed}.json"
            if not path.exists() and args.report_only:
                continue
            if not path.exists():
                _log(f"training {setting} seed {seed}")
                result = run_one(setting, seed, meta, work, args)
                path.write_text(json.dumps(result))
                _log(f"  {result['train_seconds']}s, nDCG@10 {result['metrics']['ndcg@10']:.4f}")
            results.append(json.loads(path.read_text()))
    command = "PYTHONPATH=. .venv/bin/python -m bench.train.cisi " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    text = (
        f"Command: `{command}`  \n"
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, no GPU; rows {n}, batch {args.batch_size}, "
        f"steps {args.steps}, lr {args.lr}, scale {args.scale} (temperature {1 / args.scale:g}), "
        f"max_seq_length {args.max_seq_length}, seeds {args.seeds}; held-out queries {len(meta['held_queries'])} "
        f"against {len(meta['doc_ids'])} documents.\n\n" + table(results, stats, baseline)
    )
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
