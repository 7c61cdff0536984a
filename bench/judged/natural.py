"""Natural training files built from the public data sets, as a user would train on them.

Each builder reads one data set under the data directory (never modified, never copied into the
repository) and writes ``WORK/NAME/pairs.jsonl`` (``id``, ``anchor``, ``positive``): the positive
pairs of that data set, in their file order, with no plan, no planted pairs and no distractors. The
scan then plans natural random batches over it (``--batch-size 64 --seed 0``), which is what a user
meets.

| name | genre | rows |
|---|---|---|
| ``stsb`` | news, captions and forum sentences, symmetric | STS-B train pairs scored >= 4.0 |
| ``mrpc`` | news paraphrases, symmetric | MRPC train paraphrases (quality 1) |
| ``paws`` | Wikipedia paraphrases, symmetric | PAWS-Wiki dev paraphrases (label 1) |
| ``captions`` | image captions, symmetric | Flickr8k train images: two captions of one image |
| ``cqa`` | forum questions, title -> body | SemEval-2016 Qatar Living questions (subject, body) |
| ``scifact`` | scientific claims -> abstracts | SciFact train and test qrels (claim, title + abstract) |
| ``cisi`` | library-science queries -> documents, many positives | CISI judgments (query, title + abstract) |
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.quality.cases import (
    _collapse,
    _lines,
    _read_jsonl,
    read_mrpc,
    read_paws,
    read_relevant,
    read_sts,
    write_atomic,
)

CAPTION_IMAGES = 2000


def _rows(pairs: list[tuple[str, str]], prefix: str) -> list[dict[str, Any]]:
    """Rows with ids; pairs with a text that has no word in it (a forum question that is only "?") are left out."""
    return [
        {"id": f"{prefix}-{i}", "anchor": a, "positive": p}
        for i, (a, p) in enumerate(pairs)
        if re.search(r"\w", a) and re.search(r"\w", p)
    ]


def stsb(data: Path) -> list[dict[str, Any]]:
    pairs = read_sts(data / "stsbenchmark" / "sts-train.csv", "train")
    return _rows([(p.text1, p.text2) for p in pairs if p.label == 1], "stsb")


def mrpc(data: Path) -> list[dict[str, Any]]:
    pairs = read_mrpc(data / "mrpc" / "msr_paraphrase_train.txt", "train")
    return _rows([(p.text1, p.text2) for p in pairs if p.label == 1], "mrpc")


def paws(data: Path) -> list[dict[str, Any]]:
    pairs = read_paws(data / "paws_wiki" / "dev.tsv", "dev")
    return _rows([(p.text1, p.text2) for p in pairs if p.label == 1 and p.text1 != p.text2], "paws")


def captions(data: Path) -> list[dict[str, Any]]:
    root = data / "flickr8k_captions"
    train = [line.strip() for _, line in _lines(root / "Flickr_8k.trainImages.txt")][:CAPTION_IMAGES]
    wanted = set(train)
    texts: dict[str, dict[int, str]] = {}
    for _, line in _lines(root / "Flickr8k.token.txt"):
        key, _, text = line.partition("\t")
        image, _, idx = key.rpartition("#")
        if image in wanted:
            texts.setdefault(image, {})[int(idx)] = _collapse(text)
    pairs = [(texts[i][0], texts[i][1]) for i in train if 0 in texts.get(i, {}) and 1 in texts[i]]
    return _rows(pairs, "captions")


def cqa(data: Path) -> list[dict[str, Any]]:
    seen: set[str] = set()
    pairs: list[tuple[str, str]] = []
    for r in _read_jsonl(data / "semeval2016_task3_cqa" / "subtaskB_pairs.jsonl"):
        for qid, subject, body in (
            (r["orgq_id"], r["orgq_subject"], r["orgq_body"]),
            (r["relq_id"], r["relq_subject"], r["relq_body"]),
        ):
            if qid not in seen:
                seen.add(qid)
                pairs.append((_collapse(subject), _collapse(body)))
    return _rows(pairs, "cqa")


def _doc(title: str, text: str) -> str:
    title, text = _collapse(title), _collapse(text)
    return f"{title}. {text}" if title else text


def scifact(data: Path) -> list[dict[str, Any]]:
    root = data / "scifact_beir"
    corpus = {str(d["_id"]): _doc(d.get("title", ""), d["text"]) for d in _read_jsonl(root / "corpus.jsonl")}
    claims = {str(q["_id"]): _collapse(q["text"]) for q in _read_jsonl(root / "queries.jsonl")}
    relevant = read_relevant(root)
    pairs = [(claims[c], corpus[d]) for c in sorted(relevant, key=int) for d in sorted(relevant[c]) if d in corpus]
    return _rows(pairs, "scifact")


def _cisi_blocks(path: Path) -> dict[str, dict[str, str]]:
    """CISI's ``.I n`` records with their ``.T``/``.W`` fields (other fields dropped)."""
    out: dict[str, dict[str, str]] = {}
    current: dict[str, list[str]] | None = None
    field = ""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        m = re.match(r"^\.([A-Z])\s*(\S*)", line)
        if m:
            if m.group(1) == "I":
                current = {}
                out[m.group(2)] = current  # type: ignore[assignment]
            field = m.group(1)
            continue
        if current is not None and field in ("T", "W"):
            current.setdefault(field, []).append(line.strip())
    return {k: {f: _collapse(" ".join(v)) for f, v in rec.items()} for k, rec in out.items()}  # type: ignore[union-attr]


def cisi(data: Path) -> list[dict[str, Any]]:
    root = data / "cisi"
    docs = _cisi_blocks(root / "CISI.ALL")
    queries = _cisi_blocks(root / "CISI.QRY")
    pairs: list[tuple[str, str]] = []
    for _, line in _lines(root / "CISI.REL"):
        fields = line.split()
        q, d = fields[0], fields[1]
        if q in queries and d in docs:
            doc = docs[d]
            pairs.append((queries[q].get("W", ""), _doc(doc.get("T", ""), doc.get("W", ""))))
    return _rows(pairs, "cisi")


BUILDERS: dict[str, Callable[[Path], list[dict[str, Any]]]] = {
    "stsb": stsb,
    "mrpc": mrpc,
    "paws": paws,
    "captions": captions,
    "cqa": cqa,
    "scifact": scifact,
    "cisi": cisi,
}


def build(name: str, data: Path, work: Path) -> Path:
    """Write ``WORK/NAME/pairs.jsonl`` and return its path."""
    rows = BUILDERS[name](Path(data))
    out = Path(work) / name / "pairs.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return out
