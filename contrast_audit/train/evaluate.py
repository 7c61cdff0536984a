"""Retrieval evaluation on a BEIR-layout split: Recall@1/5/10, MRR@10, nDCG@10.

Metrics come from sentence-transformers' ``InformationRetrievalEvaluator`` (binary relevance: a qrels
score > 0 is relevant), with the model's own similarity function and the scoring contract's prompts.
"""

from __future__ import annotations

import json
from typing import Any

from contrast_audit.errors import InputError

METRICS = ("recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10")


def _read_text(path: str, role: str) -> str:
    """The file's text: UTF-8 (a byte-order mark allowed), CRLF or LF; bad bytes are located."""
    from pathlib import Path

    from contrast_audit.io.readers import decode_text

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(path, f"cannot read the {role} file ({exc.strerror})", fix="check the path") from exc
    return decode_text(Path(path), data)


def _read_jsonl(path: str, role: str) -> dict[str, str]:
    out: dict[str, str] = {}
    fix = 'use the BEIR layout: one {"_id": ..., "title": ..., "text": ...} object per line'
    for number, line in enumerate(_read_text(path, role).split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except RecursionError:
            raise InputError(path, "nests arrays or objects too deeply to read", line=number, fix=fix) from None
        except ValueError as exc:  # bad JSON, or an integer of more than 4,300 digits
            reason = f"is not valid JSON ({exc.msg})" if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise InputError(path, reason, line=number, fix=fix) from None
        if not isinstance(obj, dict) or "_id" not in obj:
            raise InputError(path, "expected a JSON object with '_id' and 'text'", line=number, fix=fix)
        ident, title, text = obj["_id"], obj.get("title"), obj.get("text")
        for key, value, kinds in (("_id", ident, (str, int)), ("title", title, (str,)), ("text", text, (str,))):
            if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
                what = "a string or an integer" if key == "_id" else "a string"
                raise InputError(path, f"'{key}' is {_json_kind(value)}, not {what}", line=number, fix=fix)
        title = (title or "").strip()
        text = text or ""
        out[str(ident)] = f"{title} {text}".strip() if title else text
    if not out:
        raise InputError(path, f"no {role} found", fix="use the BEIR layout: one JSON object per line")
    return out


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", int: "a number", float: "a number"}.get(type(value), "text")


def read_qrels(path: str) -> dict[str, set[str]]:
    """BEIR qrels TSV (``query-id``, ``corpus-id``, ``score``; a header line is skipped). Fields are split
    at tabs only: a qrels file has no quoting, so a ``"`` is part of an id, never the start of a quoted
    field that runs over the next lines."""
    relevant: dict[str, set[str]] = {}
    fix = "write query-id<TAB>corpus-id<TAB>score on each line"
    for number, line in enumerate(_read_text(path, "qrels").split("\n"), 1):
        fields = line.removesuffix("\r").split("\t")
        if not line.strip() or (number == 1 and not fields[-1].strip().lstrip("-").isdigit()):
            continue
        if len(fields) < 3:
            raise InputError(path, "expected 'query-id<TAB>corpus-id<TAB>score'", line=number, fix=fix)
        try:
            score = float(fields[2])
        except ValueError:
            shown = fields[2] if len(fields[2]) <= 40 else fields[2][:39] + "…"
            raise InputError(path, f"score {shown!r} is not a number", line=number, fix=fix) from None
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
