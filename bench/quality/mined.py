"""Mislabelled hard negatives on mined negatives: how often is a row's own mined negative a judged
answer, and which of those does the scan report?

    .venv/bin/python -m bench.quality.mined --data /work/shared/data --work /tmp/ca-mined

For every query of a collection with relevance judgments (CISI: many relevant documents per query;
SciFact: about one per claim) it writes one row: the query, one judged-relevant document (the
positive, drawn with ``--seed``) and the ``--k`` highest-ranked documents of a TF-IDF retriever other
than the positive (the mined hard negatives; a lexical miner, so the auditor's model plays no part in the mining). A
mined negative is labelled 1 when the collection judges it relevant to the query: a false negative
the training row asserts. It then runs ``contrast-audit scan`` and scores the report's
``mislabelled_negatives`` against the labels, beside the rules sentence-transformers users apply to
mined negatives (exact identity; GISTEmbedLoss's guide; mine_hard_negatives' relative_margin 0.05).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.quality import peers as peer_rules
from bench.quality.cases import _read_jsonl, read_relevant, write_atomic
from bench.quality.score import Score, markdown_table, score, truth_from_records

DEFAULT_K = 20
DEFAULT_SEED = 0
DEFAULT_OUT = Path(__file__).with_name("mined-results.md")


@dataclass(frozen=True)
class Collection:
    name: str
    queries: dict[str, str]
    documents: dict[str, str]
    relevant: dict[str, set[str]]
    files: list[str]


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _smart_blocks(path: Path) -> dict[str, dict[str, str]]:
    """SMART-format records (``.I id`` then ``.T``/``.A``/``.W``/``.X`` fields) by id."""
    text = path.read_text(encoding="latin-1").replace("\r", "")
    out: dict[str, dict[str, str]] = {}
    for block in re.split(r"^\.I ", text, flags=re.M)[1:]:
        ident, _, rest = block.partition("\n")
        # A field marker may carry trailing blanks (CISI.ALL has ".T " and ".A " lines).
        fields = re.findall(r"^\.([A-Z])[ \t]*\n(.*?)(?=^\.[A-Z][ \t]*\n|\Z)", rest, flags=re.M | re.S)
        out[ident.strip()] = dict(fields)
    if not out:
        raise ValueError(f"{path}: no '.I' records; expected the SMART layout of the CISI release")
    return out


def read_cisi(data_dir: Path) -> Collection:
    root = Path(data_dir) / "cisi"
    docs = _smart_blocks(root / "CISI.ALL")
    queries = _smart_blocks(root / "CISI.QRY")
    relevant: dict[str, set[str]] = defaultdict(set)
    for number, line in enumerate((root / "CISI.REL").read_text(encoding="latin-1").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) < 2:
            raise ValueError(f"{root / 'CISI.REL'}:{number}: expected 'query document ...', got {line!r}")
        relevant[fields[0]].add(fields[1])
    return Collection(
        name="cisi",
        queries={q: _collapse(f.get("W", "")) for q, f in queries.items()},
        documents={d: _collapse(f"{f.get('T', '').strip()}. {f.get('W', '')}") for d, f in docs.items()},
        relevant=dict(relevant),
        files=["cisi/CISI.ALL", "cisi/CISI.QRY", "cisi/CISI.REL"],
    )


def read_scifact(data_dir: Path) -> Collection:
    root = Path(data_dir) / "scifact_beir"
    relevant = read_relevant(root)
    return Collection(
        name="scifact",
        queries={str(q["_id"]): _collapse(q["text"]) for q in _read_jsonl(root / "queries.jsonl")},
        documents={
            str(d["_id"]): _collapse(f"{d.get('title') or ''}. {d.get('text') or ''}")
            for d in _read_jsonl(root / "corpus.jsonl")
        },
        relevant=dict(relevant),
        files=["scifact_beir/corpus.jsonl", "scifact_beir/queries.jsonl", "scifact_beir/qrels/{train,test}.tsv"],
    )


COLLECTIONS: dict[str, Callable[[Path], Collection]] = {"cisi": read_cisi, "scifact": read_scifact}


def mine(collection: Collection, k: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Rows (id, query, pos, neg_1..neg_k) and one truth record per mined negative."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    doc_ids = sorted(collection.documents)
    vectorizer = TfidfVectorizer(sublinear_tf=True, stop_words="english")
    matrix = vectorizer.fit_transform([collection.documents[d] for d in doc_ids])
    rng = random.Random(f"mined-{collection.name}-{seed}")
    rows, truth = [], []
    for query in sorted(collection.relevant):
        judged = sorted(d for d in collection.relevant[query] if d in collection.documents)
        if query not in collection.queries or not judged:
            continue
        positive = rng.choice(judged)
        scores = (matrix @ vectorizer.transform([collection.queries[query]]).T).toarray().ravel()
        ranked = np.argsort(-scores, kind="stable")
        negatives = [doc_ids[i] for i in ranked if doc_ids[i] != positive][:k]
        row_id = f"{collection.name}-{query}"
        rows.append(
            {
                "id": row_id,
                "query": collection.queries[query],
                "pos": collection.documents[positive],
                **{f"neg_{j}": collection.documents[d] for j, d in enumerate(negatives, 1)},
            }
        )
        truth += [
            {
                "anchor_id": row_id,
                "candidate_id": f"negative_{j}",
                "label": int(d in collection.relevant[query]),
                "kind": "distractor",
            }
            for j, d in enumerate(negatives, 1)
        ]
    if not rows:
        raise ValueError(f"{collection.name}: no query has a judged document")
    return rows, truth


def scan_masks(truth_records: list[dict], report: dict) -> dict[str, np.ndarray]:
    """Masks over the truth: the scan's reported mislabelled negatives, overall and per evidence kind."""
    index = {(r["anchor_id"], r["candidate_id"]): i for i, r in enumerate(truth_records)}
    masks: dict[str, np.ndarray] = {"all": np.zeros(len(truth_records), dtype=bool)}
    for finding in report.get("mislabelled_negatives", ()):
        i = index.get((str(finding["row_id"]), finding["negative"]))
        if i is None:
            raise ValueError(f"the report names {finding['row_id']}/{finding['negative']}, which is not mined")
        masks["all"][i] = True
        for evidence in finding["evidence"]:
            masks.setdefault(evidence["kind"], np.zeros(len(truth_records), dtype=bool))[i] = True
    return masks


def peer_masks(rows: list[dict], truth_records: list[dict], embed: peer_rules.Embedder) -> dict[str, np.ndarray]:
    by_id = {r["id"]: r for r in rows}
    texts = peer_rules.PairTexts(
        anchor=[by_id[t["anchor_id"]]["query"] for t in truth_records],
        positive=[by_id[t["anchor_id"]]["pos"] for t in truth_records],
        candidate=[by_id[t["anchor_id"]][t["candidate_id"].replace("negative_", "neg_")] for t in truth_records],
    )
    masks, _ = peer_rules.run_peers(texts, embed)
    return masks


def evaluate(
    name: str, data: Path, work: Path, k: int, seed: int, scan_command: list[str], embed: peer_rules.Embedder | None
) -> tuple[str, list[tuple[str, Score]]]:
    collection = COLLECTIONS[name](data)
    rows, truth_records = mine(collection, k, seed)
    out = work / name
    write_atomic(out / "pairs.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    write_atomic(out / "truth.jsonl", "".join(json.dumps(t) + "\n" for t in truth_records))
    report_path = out / "report.json"
    report_path.unlink(missing_ok=True)
    command = [*scan_command, "scan", str(out / "pairs.jsonl"), "--format", "json", "--output", str(report_path), "-q"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1) or not report_path.is_file():
        raise RuntimeError(f"{name}: scan exited {proc.returncode} ({shlex.join(command)}):\n{proc.stderr[-2000:]}")
    truth = truth_from_records(truth_records)
    masks = scan_masks(truth_records, json.loads(report_path.read_text(encoding="utf-8")))
    table = [("contrast-audit scan (mislabelled negatives)", score(truth, masks.pop("all")))]
    table += [(f"scan, evidence `{kind}`", score(truth, mask)) for kind, mask in sorted(masks.items())]
    if embed is not None:
        table += [(f"peer: {p}", score(truth, m)) for p, m in peer_masks(rows, truth_records, embed).items()]
    labelled = sum(t["label"] for t in truth_records)
    heading = (
        f"## {name}\n\n{len(rows)} rows (queries with a judged document), {len(truth_records):,} mined negatives, "
        f"{labelled} of them judged relevant ({labelled / len(truth_records):.1%}). Files: {', '.join(collection.files)}.\n"
        f"`{shlex.join(command)}`\n"
    )
    return heading, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.mined", description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="directory holding cisi/ and scifact_beir/")
    parser.add_argument("--work", default="/tmp/ca-mined")
    parser.add_argument("--collections", nargs="+", choices=list(COLLECTIONS), default=list(COLLECTIONS))
    parser.add_argument("--k", type=int, default=DEFAULT_K, help="mined negatives per row")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="which judged document is the positive")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args(argv)
    scan_command = [str(Path(sys.executable).with_name("contrast-audit"))]
    parts = [
        "# Mislabelled hard negatives on mined negatives\n",
        f"Generated by `python -m bench.quality.mined {shlex.join(argv if argv is not None else sys.argv[1:])}` "
        f"(k = {args.k}, seed {args.seed}). A flagged record is a row's own mined negative that the method "
        "calls a false negative; label 1 = the collection judges it relevant to the row's query.\n",
    ]
    embed = None
    for name in args.collections:
        try:
            if embed is None and not args.no_peers:
                embed = peer_rules.default_embedder()
            heading, table = evaluate(name, Path(args.data), Path(args.work), args.k, args.seed, scan_command, embed)
        except (OSError, KeyError, ValueError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        parts += [heading, markdown_table(table)]
    text = "\n".join(parts)
    write_atomic(Path(args.out), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
