"""Retrieval evaluation on a BEIR-layout split: Recall@1/5/10, MRR@10, nDCG@10.

Metrics come from sentence-transformers' ``InformationRetrievalEvaluator`` (binary relevance: a qrels
score > 0 is relevant), with the model's own similarity function and the scoring contract's prompts.
"""

from __future__ import annotations

import csv
import json
from typing import Any

from contrast_audit.errors import InputError

METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10")


def _read_jsonl(path: str, role: str) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        handle = open(path, encoding="utf-8")
    except OSError as exc:
        raise InputError(path, f"cannot read the {role} file ({exc.strerror})", fix="check the path") from exc
    with handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                ident = str(obj["_id"])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise InputError(
                    path,
                    f"expected a JSON object with '_id' and 'text' ({exc})",
                    line=number,
                    fix="use the BEIR layout",
                ) from exc
            title = (obj.get("title") or "").strip()
            text = str(obj.get("text") or "")
            out[ident] = f"{title} {text}".strip() if title else text
    if not out:
        raise InputError(path, f"no {role} found", fix="use the BEIR layout: one JSON object per line")
    return out


def read_qrels(path: str) -> dict[str, set[str]]:
    """BEIR qrels TSV (``query-id``, ``corpus-id``, ``score``; a header line is skipped)."""
    relevant: dict[str, set[str]] = {}
    try:
        handle = open(path, encoding="utf-8", newline="")
    except OSError as exc:
        raise InputError(path, f"cannot read the qrels file ({exc.strerror})", fix="check the path") from exc
    with handle:
        for number, fields in enumerate(csv.reader(handle, delimiter="\t"), 1):
            if not fields or (number == 1 and not fields[-1].strip().lstrip("-").isdigit()):
                continue
            if len(fields) < 3:
                raise InputError(path, "expected 'query-id<TAB>corpus-id<TAB>score'", line=number)
            try:
                score = float(fields[2])
            except ValueError as exc:
                raise InputError(path, f"score {fields[2]!r} is not a number", line=number) from exc
            if score > 0:
                relevant.setdefault(fields[0], set()).add(fields[1])
    return relevant


def evaluate_model(
    model: Any,
    queries: dict[str, str],
    corpus: dict[str, str],
    relevant: dict[str, set[str]],
    *,
    query_prompt: str | None = None,
    doc_prompt: str | None = None,
    batch_size: int = 32,
) -> dict[str, float]:
    """The metrics of an already-loaded SentenceTransformer on one split."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator
    from sentence_transformers.util import cos_sim

    evaluator = InformationRetrievalEvaluator(
        queries=queries,
        corpus=corpus,
        relevant_docs=relevant,
        mrr_at_k=[10],
        ndcg_at_k=[10],
        accuracy_at_k=[1],
        precision_recall_at_k=[1, 5, 10],
        map_at_k=[10],
        batch_size=batch_size,
        write_csv=False,
        query_prompt=query_prompt or None,
        corpus_prompt=doc_prompt or None,
        score_functions={"cosine": cos_sim},
    )
    scores = evaluator.compute_all_metrics(model)
    values = scores["cosine"]
    out = {
        "recall@1": values["recall@k"][1],
        "recall@5": values["recall@k"][5],
        "recall@10": values["recall@k"][10],
        "mrr@10": values["mrr@k"][10],
        "ndcg@10": values["ndcg@k"][10],
    }
    return {k: float(v) for k, v in out.items()}


def evaluate(
    model: str | None,
    queries: str,
    corpus: str,
    qrels: str,
    *,
    query_prompt: str | None = None,
    doc_prompt: str | None = None,
) -> dict[str, Any]:
    """Load the model (default: the packaged one) and the BEIR files; return metrics and counts."""
    from contrast_audit import model as model_io

    q = _read_jsonl(queries, "queries")
    c = _read_jsonl(corpus, "corpus")
    relevant = read_qrels(qrels)
    judged = {qid: docs & c.keys() for qid, docs in relevant.items() if qid in q}
    judged = {qid: docs for qid, docs in judged.items() if docs}
    if not judged:
        raise InputError(qrels, "no query in the qrels has a relevant document in the corpus", fix="check the ids")
    source = model_io.resolve(model)
    st_model = model_io.load(source)
    metrics = evaluate_model(
        st_model, {k: q[k] for k in judged}, c, judged, query_prompt=query_prompt, doc_prompt=doc_prompt
    )
    return {
        "model": {"id": source.model_id, "path": source.path},
        "queries": len(judged),
        "corpus": len(c),
        "query_prompt": query_prompt or "",
        "doc_prompt": doc_prompt or "",
        "metrics": metrics,
    }


def render_json(result: dict[str, Any]) -> str:
    return json.dumps(result, indent=2, sort_keys=True) + "\n"


def render_text(result: dict[str, Any]) -> str:
    m = result["metrics"]
    head = f"{result['model']['id']} on {result['queries']} queries against {result['corpus']} documents\n"
    rows = "".join(f"  {name:<10} {m[name]:.4f}\n" for name in METRICS)
    return head + rows
