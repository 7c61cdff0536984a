"""Full-epoch training benchmark: do the tool's manifests train better models than the batching users have?

    PYTHONPATH=. .venv/bin/python -m bench.train.epochs --data /work/shared/data --work /tmp/ca-epochs \\
        --datasets cisi scifact --seeds 0 1 2 --out table.md                      # CPU-sized defaults
    ... --device cuda --train-rows 0 --corpus-docs 0 --batch-size 64 --epochs 3   # the full size, on a GPU

Per dataset: training queries and held-out queries (CISI: a fixed third of the judged queries held out;
SciFact: its train and test qrels). Training rows are (query, one judged document, one mined hard negative):
the j-th row of a query gets the j-th highest-ranked document by the start model (the bundled
all-MiniLM-L6-v2) that is not judged relevant to that query, as a user mining negatives would. Documents are
read at ``--max-seq-length`` tokens (default 128). ``--train-rows N`` keeps a fixed random sample of N rows
(0: all), ``--corpus-docs N`` a fixed corpus of N documents (every document judged for a kept query, then
random others; 0: all), so a CPU run finishes; every setting then trains whole epochs of those rows.

Settings, all from the same start model, rows, epochs, batch size, learning rate, scale 20 and seed:

- ``naive``: sentence-transformers' default random batches + ``MultipleNegativesRankingLoss``;
- ``no-duplicates``: ``NoDuplicatesBatchSampler`` + MNRL;
- ``gist``: random batches + ``GISTEmbedLoss`` with the start model as guide;
- ``tool-mask``: ``contrast-audit manifest --strategy mask`` with default detectors (the same random batches
  as naive, false negatives masked) + ``MaskedMultipleNegativesRankingLoss``;
- ``tool-balance``: the same with ``--balance 1`` (rows of one anchor spread over the epoch's batches);
- ``tool-cluster``: ``--strategy cluster --balance 1`` (topic-hard batches from k-means on the anchors'
  embeddings, false negatives masked);
- ``tool-weight``: ``--strategy mask --weight anchor``: the ``tool-mask`` batches and masks with a per-anchor
  weight in the loss instead of a batch bound: the manifest gives each row ``n_rows / (anchors * rows of its
  anchor)`` (here ``1 / (rows of its query)`` scaled to a mean of 1 over the rows, a query's rows sharing its
  text), so every training query carries the same share of an epoch's loss; the masked loss applies it;
- ``tool-margin``: ``--strategy mask --margin --absolute-margin 0 --mask-severity suspect``: the manifest also
  masks every candidate the start model scores above the anchor's own positive (the margin rule at margin 0,
  GISTEmbedLoss's exclusion with the start model as guide), written down once instead of computed per batch;
- ``tool-margin-weight``: the same with ``--weight anchor``.

False negatives are counted from the judgments: per anchor, the in-batch candidates (other rows'
positives, every row's hard negative) judged relevant to the anchor's query; "left" are those not masked
(GISTEmbedLoss: those its guide does not exclude, from the start model's embeddings). Every run's result
is kept in ``--work``, so a rerun resumes; ``--report-only`` tabulates what is there.
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
import sys
import time
from pathlib import Path

import numpy as np

from bench.train.cisi import manifest_plan  # the batches and masked triples of a manifest file

SETTINGS = (
    "naive",
    "no-duplicates",
    "gist",
    "tool-mask",
    "tool-balance",
    "tool-cluster",
    "tool-weight",
    "tool-margin",
    "tool-margin-weight",
)
TOOL = {
    "tool-mask": {"strategy": "mask"},
    "tool-balance": {"strategy": "mask", "balance": 1},
    "tool-cluster": {"strategy": "cluster", "balance": 1},
    "tool-weight": {"strategy": "mask", "weight": "anchor"},
    "tool-margin": {"strategy": "mask", "mask_severity": "suspect"},
    "tool-margin-weight": {"strategy": "mask", "mask_severity": "suspect", "weight": "anchor"},
}
# Settings (build_config keys) a tool setting adds to the defaults.
_MARGIN = {"margin": True, "absolute_margin": 0.0, "relative_margin": None}
TOOL_SETTINGS = {"tool-margin": _MARGIN, "tool-margin-weight": _MARGIN}
HOLDOUT_SEED = 13
SAMPLE_SEED = 7


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def read_collection(name: str, data: Path) -> tuple[dict, dict, dict, list[str], list[str]]:
    """queries, documents, relevant (all judgments), training query ids, held-out query ids."""
    from bench.quality.mined import read_cisi, read_scifact
    from contrast_audit.train.evaluate import read_qrels

    if name == "cisi":
        col = read_cisi(data)
        judged = sorted((q for q in col.relevant if q in col.queries and col.relevant[q]), key=int)
        held = set(random.Random(HOLDOUT_SEED).sample(judged, len(judged) // 3))
        return col.queries, col.documents, col.relevant, [q for q in judged if q not in held], sorted(held, key=int)
    col = read_scifact(data)
    train = read_qrels(str(data / "scifact_beir" / "qrels" / "train.tsv"))
    test = read_qrels(str(data / "scifact_beir" / "qrels" / "test.tsv"))
    return col.queries, col.documents, col.relevant, sorted(train, key=int), sorted(test, key=int)


def load_start_model(args):
    from contrast_audit import model as model_io

    m = model_io.load(model_io.resolve(None), device=args.device)
    m.max_seq_length = args.max_seq_length
    return m


def build(name: str, args, work: Path) -> dict:
    """Rows, the corpus kept, the split and the start model's embeddings (cached in ``work``)."""
    meta_path = work / "meta.json"
    if meta_path.exists():
        return json.loads(meta_path.read_text())
    queries, documents, relevant, train_q, held_q = read_collection(name, Path(args.data))
    rng = random.Random(SAMPLE_SEED)
    pairs = [(q, d) for q in train_q for d in sorted(relevant[q], key=str) if d in documents]
    if args.train_rows and len(pairs) > args.train_rows:
        pairs = sorted(rng.sample(pairs, args.train_rows), key=lambda p: (train_q.index(p[0]), p[1]))
    kept_q = sorted({q for q, _ in pairs}, key=train_q.index)
    held_q = [q for q in held_q if any(d in documents for d in relevant[q])]
    docs = sorted(documents)
    if args.corpus_docs and len(docs) > args.corpus_docs:
        # the training rows' documents, then held-out queries (in a fixed random order) while their judged
        # documents fit in 80% of the budget, then random others
        needed = {d for _, d in pairs}
        kept_held = []
        for q in rng.sample(held_q, len(held_q)):
            more = {d for d in relevant[q] if d in documents} - needed
            if len(needed) + len(more) <= 0.8 * args.corpus_docs:
                needed |= more
                kept_held.append(q)
        held_q = sorted(kept_held, key=held_q.index)
        others = [d for d in docs if d not in needed]
        docs = sorted(needed | set(rng.sample(others, max(0, args.corpus_docs - len(needed)))))
    if not held_q:
        raise SystemExit(f"{name}: no held-out query fits in --corpus-docs {args.corpus_docs}; raise it")
    model = load_start_model(args)
    _log(
        f"{name}: {len(held_q)} held-out queries; embedding {len(docs)} documents and {len(kept_q)} training queries with the start model"
    )
    d_emb = model.encode([documents[d] for d in docs], batch_size=64, normalize_embeddings=True)
    q_emb = model.encode([queries[q] for q in kept_q], batch_size=64, normalize_embeddings=True)
    np.save(work / "doc_emb.npy", d_emb)
    np.save(work / "query_emb.npy", q_emb)
    rows, seen = [], collections.Counter()
    for q, d in pairs:
        qi = kept_q.index(q)
        ranked = np.argsort(-(d_emb @ q_emb[qi]), kind="stable")
        hard = [docs[i] for i in ranked[:200] if docs[i] not in relevant[q]]
        rows.append({"id": f"q{q}-d{d}", "query": q, "pos": d, "neg": hard[seen[q] % len(hard)]})
        seen[q] += 1
    meta = {
        "dataset": name,
        "train_queries": kept_q,
        "held_queries": held_q,
        "doc_ids": docs,
        "rows": rows,
        "relevant": {q: sorted(relevant[q]) for q in kept_q + held_q},
    }
    lines = [
        {"id": r["id"], "anchor": queries[r["query"]], "positive": documents[r["pos"]], "negative": documents[r["neg"]]}
        for r in rows
    ]
    (work / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    meta_path.write_text(json.dumps(meta))
    return meta


# ---- plans and false negatives ----------------------------------------------------------------


def random_plan(n: int, batch_size: int, seed: int, epochs: int) -> list[np.ndarray]:
    from contrast_audit.plan.samplers import random_batches

    return [b for e in range(epochs) for b in random_batches(n, batch_size, False, seed, e)]


def nodup_plan(meta: dict, batch_size: int, seed: int, epochs: int) -> list[np.ndarray]:
    from contrast_audit.plan.samplers import no_duplicates_batches

    keys: dict[str, int] = {}
    values = np.asarray(
        [
            [keys.setdefault(f"{p}{r[k]}", len(keys)) for p, k in (("q", "query"), ("d", "pos"), ("d", "neg"))]
            for r in meta["rows"]
        ],
        dtype=np.int64,
    )
    return [b for e in range(epochs) for b in no_duplicates_batches(values, batch_size, False, seed, e)]


def false_negatives(meta: dict, batch: np.ndarray) -> list[tuple[int, int, int]]:
    rows = [meta["rows"][i] for i in batch]
    out = []
    for a, ra in enumerate(rows):
        judged = set(meta["relevant"][ra["query"]])
        for c, rc in enumerate(rows):
            if c != a and rc["pos"] in judged:
                out.append((a, c, 0))
            if rc["neg"] in judged:
                out.append((a, c, 1))
    return out


def fn_stats(meta: dict, work: Path, batches: list[np.ndarray], masks=None, gist: bool = False) -> dict:
    anchors = total = left = masked = big = 0
    per_query = collections.Counter(r["query"] for r in meta["rows"])
    largest = {q for q, _ in per_query.most_common(max(1, len(per_query) // 10))}
    if gist:
        d_emb, q_emb = np.load(work / "doc_emb.npy"), np.load(work / "query_emb.npy")
        doc_pos = {d: i for i, d in enumerate(meta["doc_ids"])}
        q_pos = {q: i for i, q in enumerate(meta["train_queries"])}
    for b, batch in enumerate(batches):
        rows = [meta["rows"][i] for i in batch]
        fn = false_negatives(meta, batch)
        anchors += len(batch)
        big += sum(r["query"] in largest for r in rows)
        total += len(fn)
        if masks is not None:
            masked += len(masks[b])
            left += sum(f not in masks[b] for f in fn)
        elif gist:
            for a, c, role in fn:
                q = q_emb[q_pos[rows[a]["query"]]]
                pos = q @ d_emb[doc_pos[rows[a]["pos"]]]
                cand = q @ d_emb[doc_pos[rows[c]["pos" if role == 0 else "neg"]]]
                left += int(cand <= pos)
        else:
            left += len(fn)
    return {
        "fn_per_anchor": total / anchors,
        "left_per_anchor": left / anchors,
        "masked_per_anchor": masked / anchors,
        "largest_share": big / anchors,
        "batches": len(batches),
        "mean_batch": anchors / max(1, len(batches)),
    }


def tool_manifest(path: Path, setting: str, seed: int, work: Path, args) -> None:
    """What ``contrast-audit manifest`` writes with default detectors (the Python API behind the command).

    A manifest kept from an earlier run is reused unless it lacks the weight the setting asks for (a
    ``tool-weight`` manifest written before the manifest carried weights)."""
    if path.exists() and _has_weight(path) == ("weight" in TOOL[setting]):
        return
    from contrast_audit.config import build_config
    from contrast_audit.io.atomic import write_atomic
    from contrast_audit.manifest import build_manifest

    options = dict(TOOL[setting])
    cfg = build_config(
        {"batch_size": args.batch_size, "seed": seed, "epochs": args.epochs, **TOOL_SETTINGS.get(setting, {})}
    )
    started = time.perf_counter()
    result = build_manifest([str(work / "data.jsonl")], cfg, **options)
    write_atomic(path, result.render())
    _log(f"  {setting} manifest in {time.perf_counter() - started:.0f}s: {result.counts}")


def _has_weight(path: Path) -> bool:
    with path.open(encoding="utf-8") as handle:
        return "weight" in json.loads(handle.readline())


# ---- runs -------------------------------------------------------------------------------------


def run_one(setting: str, seed: int, meta: dict, work: Path, args) -> dict:
    import torch
    from sentence_transformers.base.sampler import BatchSamplers
    from sentence_transformers.sentence_transformer.losses import GISTEmbedLoss, MultipleNegativesRankingLoss

    from contrast_audit.manifest.format import read_manifest
    from contrast_audit.train import ManifestBatchSampler, MaskedMultipleNegativesRankingLoss, manifest_dataset
    from contrast_audit.train.trainer import fit

    torch.manual_seed(seed)
    model = load_start_model(args)
    if setting in TOOL:
        plan = read_manifest(work / "manifests" / f"{setting}-{seed}.jsonl")
        data = manifest_dataset(str(work / "data.jsonl"), plan)
        loss = MaskedMultipleNegativesRankingLoss(model, plan, data, scale=args.scale)  # masks and row weights
        sampler = ManifestBatchSampler.factory(plan, data.row_ids)
        dataset = data.dataset
    else:
        from contrast_audit.config import ColumnMapping
        from contrast_audit.io.load import load_rows
        from contrast_audit.train.data import rows_dataset

        dataset = rows_dataset(load_rows([str(work / "data.jsonl")], ColumnMapping()).rows).dataset
        dataset = dataset.remove_columns("label")
        sampler = BatchSamplers.NO_DUPLICATES if setting == "no-duplicates" else BatchSamplers.BATCH_SAMPLER
        if setting == "gist":
            loss = GISTEmbedLoss(model, load_start_model(args), temperature=1.0 / args.scale)
        else:
            loss = MultipleNegativesRankingLoss(model, scale=args.scale)
    started = time.perf_counter()
    records = fit(
        model,
        dataset,
        loss,
        batch_sampler=sampler,
        batch_size=args.batch_size,
        work_dir=str(work / "tmp"),
        epochs=args.epochs,
        lr=args.lr,
        seed=seed,
        progress=False,
    )
    train_s = time.perf_counter() - started
    metrics = evaluate(model, meta, args)
    return {
        "setting": setting,
        "seed": seed,
        "steps": len(records),
        "train_seconds": round(train_s, 1),
        "seconds": round(time.perf_counter() - started, 1),
        "metrics": metrics,
    }


def evaluate(model, meta: dict, args) -> dict:
    from contrast_audit.train.evaluate import evaluate_model

    queries, documents, _, _, _ = read_collection(meta["dataset"], Path(args.data))
    held = {q: queries[q] for q in meta["held_queries"]}
    corpus = {d: documents[d] for d in meta["doc_ids"]}
    relevant = {q: set(meta["relevant"][q]) & set(corpus) for q in meta["held_queries"]}
    return evaluate_model(model, held, corpus, relevant, batch_size=64)


def ms(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {sd:.4f}"


def paired(runs: list[dict], naive: dict[int, float]) -> str:
    """The mean per-seed difference from naive's nDCG@10 (the same seed: for the random-batch settings the
    same batches) and on how many seeds it is above: ``+0.0289 (3/3 above)``."""
    diffs = [r["metrics"]["ndcg@10"] - naive[r["seed"]] for r in runs if r["seed"] in naive]
    if not diffs:
        return "–"
    return f"{statistics.mean(diffs):+.4f} ({sum(d > 0 for d in diffs)}/{len(diffs)} above)"


def table(name: str, meta: dict, results: list[dict], stats: dict, baseline: dict) -> str:
    n_q = len(meta["train_queries"])
    out = [
        f"**{name}**: {len(meta['rows'])} training rows from {n_q} queries; {len(meta['held_queries'])} held-out "
        f"queries against {len(meta['doc_ids'])} documents.\n",
        "| setting | n | batches/epoch | mean batch | rows of the largest tenth of queries | FN per anchor | "
        "FN left as negatives | masked per anchor | nDCG@10 | nDCG@10 − naive, same seed | MRR@10 | Recall@10 | s/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    m = baseline["metrics"]
    out.append(
        f"| start model | – | – | – | – | – | – | – | {m['ndcg@10']:.4f} | – | {m['mrr@10']:.4f} | "
        f"{m['recall@10']:.4f} | – |"
    )
    naive = {r["seed"]: r["metrics"]["ndcg@10"] for r in results if r["setting"] == "naive"}
    for setting in SETTINGS:
        runs = [r for r in results if r["setting"] == setting]
        keys = [f"{setting}-{r['seed']}" for r in runs if f"{setting}-{r['seed']}" in stats]  # the trained seeds
        if not runs or not keys:
            continue
        s = {f: statistics.mean(stats[k][f] for k in keys) for f in stats[keys[0]]}
        out.append(
            f"| {setting} | {len(runs)} | {s['batches'] / max(1, meta.get('epochs', 1)):.1f} | {s['mean_batch']:.1f} | "
            f"{s['largest_share']:.1%} | {s['fn_per_anchor']:.2f} | {s['left_per_anchor']:.2f} | "
            f"{s['masked_per_anchor']:.2f} | {ms([r['metrics']['ndcg@10'] for r in runs])} | "
            f"{paired(runs, naive) if setting != 'naive' else '–'} | {ms([r['metrics']['mrr@10'] for r in runs])} | {ms([r['metrics']['recall@10'] for r in runs])} | "
            f"{statistics.mean(r['seconds'] for r in runs):.0f} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="folder holding cisi/ and scifact_beir/")
    p.add_argument("--work", required=True)
    p.add_argument("--datasets", nargs="+", default=["cisi", "scifact"], choices=["cisi", "scifact"])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--train-rows", type=int, default=128, help="rows sampled per dataset (0: all)")
    p.add_argument("--corpus-docs", type=int, default=600, help="documents kept per dataset (0: all)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--scale", type=float, default=20.0)
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--device", default=None, help="cuda for a GPU (default: what torch finds)")
    p.add_argument("--out", default=None, help="write the markdown tables here")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    root = Path(args.work)
    metas, works = {}, {}
    for name in args.datasets:
        work = root / name
        (work / "manifests").mkdir(parents=True, exist_ok=True)
        (work / "results").mkdir(exist_ok=True)
        metas[name], works[name] = build(name, args, work), work
        base = work / "results" / "start-model.json"
        if not base.exists():
            base.write_text(json.dumps({"metrics": evaluate(load_start_model(args), metas[name], args)}))
    stats: dict[str, dict] = {name: {} for name in args.datasets}
    for seed in args.seeds:
        for name in args.datasets:
            meta, work = metas[name], works[name]
            n = len(meta["rows"])
            for setting in args.settings:
                if setting in TOOL:
                    path = work / "manifests" / f"{setting}-{seed}.jsonl"
                    if not args.report_only:
                        tool_manifest(path, setting, seed, work, args)
                    if not path.exists():
                        continue
                    batches, masks = manifest_plan(path, meta)
                    stats[name][f"{setting}-{seed}"] = fn_stats(meta, work, batches, masks)
                elif setting == "no-duplicates":
                    stats[name][f"{setting}-{seed}"] = fn_stats(
                        meta, work, nodup_plan(meta, args.batch_size, seed, args.epochs)
                    )
                else:
                    batches = random_plan(n, args.batch_size, seed, args.epochs)
                    stats[name][f"{setting}-{seed}"] = fn_stats(meta, work, batches, gist=setting == "gist")
                result_path = work / "results" / f"{setting}-{seed}.json"
                if result_path.exists() or args.report_only:
                    continue
                _log(f"training {name} {setting} seed {seed}")
                result = run_one(setting, seed, meta, work, args)
                result_path.write_text(json.dumps(result))
                _log(f"  {result['steps']} steps, {result['seconds']}s, nDCG@10 {result['metrics']['ndcg@10']:.4f}")
    command = "PYTHONPATH=. .venv/bin/python -m bench.train.epochs " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    device = args.device or "cpu"
    parts = [
        f"Command: `{command}`  \n"
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores, device {device}; batch {args.batch_size}, "
        f"{args.epochs} epoch(s), lr {args.lr}, scale {args.scale}, max_seq_length {args.max_seq_length}, "
        f"seeds {args.seeds}.\n"
    ]
    for name in args.datasets:
        results = []
        for path in sorted((works[name] / "results").glob("*-*.json")):
            record = json.loads(path.read_text())
            if record.get("setting") in args.settings and record.get("seed") in args.seeds:
                results.append(record)
        baseline = json.loads((works[name] / "results" / "start-model.json").read_text())
        meta = dict(metas[name], epochs=args.epochs)
        parts.append(table(name, meta, results, stats[name], baseline))
    text = "\n".join(parts)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
