"""Labelled cases for the detection-quality harness, built from public data sets.

Each builder reads one data set under the data directory (never modified, never copied into the
repository) and writes into an output directory:

- ``pairs.jsonl``: ``id``, ``anchor``, ``positive``, ``source`` per row (the scan's input);
- ``plan.jsonl``: ``{"rows": [id, ...]}`` per batch (the scan's ``--plan``);
- ``truth.jsonl``: ``anchor_id``, ``candidate_id``, ``label`` (1 or 0), ``kind`` (``paraphrase``,
  ``distractor`` or ``random``) and ``batch`` for every ordered in-batch pair (anchor row r, other
  row s): the comparisons a ``query_to_doc`` loss makes between r's anchor and s's positive;
- ``case.json``: what was built (counts, parameters, candidates dropped and why).

A case is a list of *labelled pairs*: two rows the plan puts in one batch, whose label holds in
both directions. Paraphrase pairs (label 1) are in-batch false negatives; distractor pairs (label 0)
are same-topic rows that are not; every other in-batch pair is ``random`` (label 0). No two rows
share a text (compared by :func:`text_key`, coarser than the scan's normalisation), so only
near-duplicate or semantic evidence can link them.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
import os
import random
import re
import sys
import tempfile
import tokenize
import unicodedata
import zipfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

PARAPHRASE = "paraphrase"
DISTRACTOR = "distractor"
RANDOM = "random"
# An in-batch pair the data set does not judge and cannot be assumed unrelated (two questions of a forum
# asked under different originals may be the same question): in the truth, never scored.
UNJUDGED = "unjudged"
KINDS = (PARAPHRASE, DISTRACTOR, RANDOM)

DEFAULT_MAX_PAIRS = 600
DEFAULT_BATCH_SIZE = 32
DEFAULT_SEED = 0

# STS Benchmark score bands (0-5 scale): 4 = "mostly equivalent, unimportant details differ",
# 2 = "not equivalent but share some details", 3 = "roughly equivalent, important information differs".
STS_PARAPHRASE_MIN = 4.0
STS_DISTRACTOR_RANGE = (2.0, 3.0)

MRPC_HEADER = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]

T = TypeVar("T")

# Held-out protocol: every source pair (MRPC / STS-B pair, SciFact claim) falls in one of two fixed
# halves by a hash of its id, so settings chosen on the ``tune`` half are reported on ``test``.
PARTS = ("all", "tune", "test")


def in_part(key: str, part: str) -> bool:
    """Whether the source item ``key`` belongs to ``part`` (``all`` holds everything)."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    if part == "all":
        return True
    half = "tune" if hashlib.sha256(key.encode("utf-8")).digest()[0] % 2 == 0 else "test"
    return half == part


# --------------------------------------------------------------------------- rows and pairs


@dataclass(frozen=True)
class Row:
    """One training row of a case (the scan's input columns)."""

    id: str
    anchor: str
    positive: str
    source: str


@dataclass(frozen=True)
class LabelledPair:
    """Two rows planned into one batch; ``label`` holds both ways (first's anchor vs second's positive and back)."""

    first: Row
    second: Row
    label: int
    kind: str


@dataclass
class Case:
    """What a builder wrote."""

    name: str
    directory: str
    rows: int
    batches: int
    batch_size: int
    pairs: dict[str, int]
    truth: dict[str, int]
    positives: int
    dropped: dict[str, int] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    notes: str = ""

    @property
    def path(self) -> Path:
        return Path(self.directory)


def text_key(text: str) -> str:
    """Identity key used to keep rows apart: NFKC, casefolded, word characters only, single spaces.

    Coarser than the scan's normalisation (which folds punctuation only at the ends), so two texts
    the scan would call ``exact`` always get the same key here.
    """
    return " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", text).casefold()))


def _collapse(text: str) -> str:
    return " ".join(text.split())


class TextRegistry:
    """Admits groups of rows only when no text of one row matches a text of another (by :func:`text_key`)."""

    def __init__(self) -> None:
        self._owner: dict[str, str] = {}

    def try_add(self, rows: Sequence[Row]) -> bool:
        claimed: dict[str, str] = {}
        for row in rows:
            for key in {text_key(row.anchor), text_key(row.positive)}:
                if not key or key in self._owner or claimed.get(key, row.id) != row.id:
                    return False
                claimed[key] = row.id
        self._owner.update(claimed)
        return True


def check_disjoint(rows: Iterable[Row]) -> None:
    """Raise ``ValueError`` when two rows share a text (or a row id repeats)."""
    owner: dict[str, str] = {}
    ids: set[str] = set()
    for row in rows:
        if row.id in ids:
            raise ValueError(f"row id {row.id!r} repeats")
        ids.add(row.id)
        for key in {text_key(row.anchor), text_key(row.positive)}:
            if not key:
                raise ValueError(f"row {row.id!r} has a text without word characters")
            if key in owner and owner[key] != row.id:
                raise ValueError(f"rows {owner[key]!r} and {row.id!r} share a text ({key[:60]!r})")
            owner[key] = row.id


def take(
    candidates: Iterable[T], limit: int, accept: Callable[[T], LabelledPair | None]
) -> tuple[list[LabelledPair], int]:
    """Accept candidates in order until ``limit`` pairs; returns the pairs and how many were rejected."""
    chosen: list[LabelledPair] = []
    rejected = 0
    for candidate in candidates:
        if len(chosen) >= limit:
            break
        pair = accept(candidate)
        if pair is None:
            rejected += 1
        else:
            chosen.append(pair)
    return chosen, rejected


# --------------------------------------------------------------------------- plan and truth


def plan_batches(pairs: Sequence[LabelledPair], batch_size: int, seed: int) -> list[list[str]]:
    """Batches of ``batch_size`` rows; both rows of a pair in one batch; paraphrase and distractor
    pairs spread evenly over the batches (each list keeps its order); rows shuffled within a batch."""
    if batch_size < 4 or batch_size % 2:
        raise ValueError(f"batch size must be an even number >= 4 (two rows per labelled pair), got {batch_size}")
    by_label: dict[int, list[LabelledPair]] = defaultdict(list)
    for pair in pairs:
        by_label[pair.label].append(pair)
    # Interleave by fractional position so every batch holds both kinds in the overall proportion.
    keyed = [
        ((i + 0.5) / len(group), -label, i, pair) for label, group in by_label.items() for i, pair in enumerate(group)
    ]
    ordered = [item[-1] for item in sorted(keyed, key=lambda item: item[:3])]
    rng = random.Random(f"plan-{seed}")
    per_batch = batch_size // 2
    batches = []
    for start in range(0, len(ordered), per_batch):
        ids = [row.id for pair in ordered[start : start + per_batch] for row in (pair.first, pair.second)]
        rng.shuffle(ids)
        batches.append(ids)
    return batches


def truth_records(
    batches: Sequence[Sequence[str]], pairs: Sequence[LabelledPair], other: str = RANDOM
) -> list[dict[str, Any]]:
    """One record per ordered in-batch pair (anchor row, other row), in plan order; pairs of rows of
    different labelled pairs get kind ``other`` (label 0)."""
    pair_of = {row.id: pair for pair in pairs for row in (pair.first, pair.second)}
    records = []
    for b, ids in enumerate(batches):
        for anchor_id in ids:
            own = pair_of[anchor_id]
            for candidate_id in ids:
                if candidate_id == anchor_id:
                    continue
                if pair_of[candidate_id] is own:
                    label, kind = own.label, own.kind
                else:
                    label, kind = 0, other
                records.append(
                    {"anchor_id": anchor_id, "candidate_id": candidate_id, "label": label, "kind": kind, "batch": b}
                )
    return records


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _jsonl(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def write_case(
    name: str,
    out_dir: Path,
    pairs: Sequence[LabelledPair],
    *,
    batch_size: int,
    seed: int,
    dropped: dict[str, int],
    params: dict[str, Any],
    notes: str = "",
    other: str = RANDOM,
) -> Case:
    """Check the rows, plan them, derive the truth and write the four files."""
    if not pairs:
        raise ValueError(f"{name}: no labelled pairs were built")
    rows = [row for pair in pairs for row in (pair.first, pair.second)]
    check_disjoint(rows)
    batches = plan_batches(pairs, batch_size, seed)
    truth = truth_records(batches, pairs, other)
    out_dir = Path(out_dir)
    write_atomic(out_dir / "pairs.jsonl", _jsonl(asdict(row) for row in rows))
    write_atomic(out_dir / "plan.jsonl", _jsonl({"rows": ids} for ids in batches))
    write_atomic(out_dir / "truth.jsonl", _jsonl(truth))
    case = Case(
        name=name,
        directory=str(out_dir),
        rows=len(rows),
        batches=len(batches),
        batch_size=batch_size,
        pairs=dict(Counter(pair.kind for pair in pairs)),
        truth={kind: n for kind in (*KINDS, UNJUDGED) if (n := sum(1 for r in truth if r["kind"] == kind))},
        positives=sum(r["label"] for r in truth),
        dropped=dict(dropped),
        params=dict(params),
        notes=notes,
    )
    write_atomic(out_dir / "case.json", json.dumps(asdict(case), indent=2, sort_keys=True) + "\n")
    return case


# --------------------------------------------------------------------------- SimCSE-style cases


@dataclass(frozen=True)
class SentencePair:
    """A labelled sentence pair from a paraphrase / similarity corpus."""

    uid: str
    text1: str
    text2: str
    label: int
    source: str


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    """Physical lines (1-based), BOM and CR removed, blank lines skipped. Splits on LF only: the
    sentences may hold other Unicode line separators."""
    text = path.read_text(encoding="utf-8-sig")
    for number, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if line.strip():
            yield number, line


def read_mrpc(path: Path, split: str) -> list[SentencePair]:
    """MRPC: UTF-8 BOM, CRLF, tab-separated, header ``Quality  #1 ID  #2 ID  #1 String  #2 String``."""
    lines = iter(_lines(path))
    first = next(lines, None)
    if first is None or first[1].split("\t") != MRPC_HEADER:
        raise ValueError(f"{path}:1: expected the MRPC header {' / '.join(MRPC_HEADER)}")
    out = []
    for number, line in lines:
        fields = line.split("\t")
        if len(fields) != 5 or fields[0] not in ("0", "1"):
            raise ValueError(f"{path}:{number}: expected 5 tab-separated fields starting with quality 0 or 1")
        quality, _, _, s1, s2 = fields
        out.append(SentencePair(f"mrpc-{split}-{number}", s1.strip(), s2.strip(), int(quality), f"mrpc-{split}"))
    return out


def read_sts(path: Path, split: str) -> list[SentencePair]:
    """STS Benchmark: tab-separated, no header, no quoting: genre, file, year, id, score, s1, s2 (+ extra
    columns). Score >= 4.0 gives label 1, 2.0 <= score <= 3.0 label 0; other rows are left out."""
    out = []
    for number, line in _lines(path):
        fields = line.split("\t")
        if len(fields) < 7:
            raise ValueError(f"{path}:{number}: expected at least 7 tab-separated fields, got {len(fields)}")
        try:
            score = float(fields[4])
        except ValueError:
            raise ValueError(f"{path}:{number}: score {fields[4]!r} is not a number") from None
        if score >= STS_PARAPHRASE_MIN:
            label = 1
        elif STS_DISTRACTOR_RANGE[0] <= score <= STS_DISTRACTOR_RANGE[1]:
            label = 0
        else:
            continue
        out.append(SentencePair(f"sts-{split}-{number}", fields[5].strip(), fields[6].strip(), label, f"sts-{split}"))
    return out


def simcse_case(
    name: str,
    sentence_pairs: Sequence[SentencePair],
    out_dir: Path,
    *,
    max_pairs: int,
    batch_size: int,
    seed: int,
    params: dict[str, Any],
    notes: str,
    part: str = "all",
) -> Case:
    """Rows (s, s) per sentence; label-1 pairs are mutual false negatives, label-0 pairs distractors."""
    if max_pairs < 1:
        raise ValueError(f"max_pairs must be >= 1, got {max_pairs}")
    rng = random.Random(seed)
    sentence_pairs = [p for p in sentence_pairs if in_part(p.uid, part)]
    positives = [p for p in sentence_pairs if p.label == 1]
    negatives = [p for p in sentence_pairs if p.label == 0]
    rng.shuffle(positives)
    rng.shuffle(negatives)
    registry = TextRegistry()

    def accept(kind: str) -> Callable[[SentencePair], LabelledPair | None]:
        def inner(sp: SentencePair) -> LabelledPair | None:
            a = Row(f"{sp.uid}-1", sp.text1, sp.text1, sp.source)
            b = Row(f"{sp.uid}-2", sp.text2, sp.text2, sp.source)
            return LabelledPair(a, b, sp.label, kind) if registry.try_add([a, b]) else None

        return inner

    para, para_dropped = take(positives, max_pairs, accept(PARAPHRASE))
    # Distractors never outnumber paraphrases, so the base rate stays comparable across cases.
    dist, dist_dropped = take(negatives, min(max_pairs, len(para)), accept(DISTRACTOR))
    dropped = {"paraphrase_shares_text": para_dropped, "distractor_shares_text": dist_dropped}
    params = {**params, "max_pairs": max_pairs, "batch_size": batch_size, "seed": seed, "part": part}
    return write_case(
        name, out_dir, para + dist, batch_size=batch_size, seed=seed, dropped=dropped, params=params, notes=notes
    )


def build_mrpc(
    data_dir: Path,
    out_dir: Path,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = DEFAULT_SEED,
    part: str = "all",
) -> Case:
    """Microsoft Research Paraphrase Corpus, SimCSE-style rows."""
    root = Path(data_dir) / "mrpc"
    pairs = read_mrpc(root / "msr_paraphrase_train.txt", "train") + read_mrpc(root / "msr_paraphrase_test.txt", "test")
    return simcse_case(
        "mrpc",
        pairs,
        Path(out_dir),
        max_pairs=max_pairs,
        batch_size=batch_size,
        seed=seed,
        part=part,
        params={"files": ["mrpc/msr_paraphrase_train.txt", "mrpc/msr_paraphrase_test.txt"]},
        notes="MRPC quality 1 = paraphrase (label 1 both ways); quality 0 = distractor (label 0).",
    )


def build_stsb(
    data_dir: Path,
    out_dir: Path,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = DEFAULT_SEED,
    part: str = "all",
) -> Case:
    """STS Benchmark, SimCSE-style rows."""
    root = Path(data_dir) / "stsbenchmark"
    pairs = [p for split in ("train", "dev", "test") for p in read_sts(root / f"sts-{split}.csv", split)]
    return simcse_case(
        "stsb",
        pairs,
        Path(out_dir),
        max_pairs=max_pairs,
        batch_size=batch_size,
        seed=seed,
        part=part,
        params={
            "files": [f"stsbenchmark/sts-{s}.csv" for s in ("train", "dev", "test")],
            "paraphrase_min_score": STS_PARAPHRASE_MIN,
            "distractor_scores": list(STS_DISTRACTOR_RANGE),
        },
        notes="STS score >= 4.0 = paraphrase (label 1 both ways); 2.0 <= score <= 3.0 = distractor (label 0).",
    )


# --------------------------------------------------------------------------- SciFact query->doc case

_STOPWORDS = frozenset(
    "a an and are as at be by for from has have in into is it its of on or than that the their this to via was "
    "were with without within after during between among not no does do can may versus vs".split()
)


@dataclass
class SciFact:
    """What the qa-split case needs from SciFact (BEIR layout plus the original sentence lists)."""

    titles: dict[str, str]
    sentences: dict[str, list[str]]  # only documents whose sentences re-join to the BEIR text
    claims: dict[str, str]
    judged: dict[str, set[str]]  # claim -> documents in the qrels or with rationales
    rationales: dict[tuple[str, str], list[tuple[int, ...]]]  # (claim, qrels document) -> rationale sets
    unmatched_documents: int


def _numpy_string_list(text: str) -> list[str]:
    """The string literals of a printed numpy string array (``['s1' 's2'\\n 's3']``), without running code."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return [ast.literal_eval(tok.string) for tok in tokens if tok.type == tokenize.STRING]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for number, line in _lines(path):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
    return out


def _read_qrels(path: Path) -> list[tuple[str, str, int]]:
    lines = iter(_lines(path))
    header = next(lines, (1, ""))[1].split("\t")
    if header[:2] != ["query-id", "corpus-id"]:
        raise ValueError(f"{path}:1: expected the BEIR qrels header query-id, corpus-id, score")
    out = []
    for number, line in lines:
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError(f"{path}:{number}: expected 3 tab-separated fields")
        out.append((fields[0].strip(), fields[1].strip(), int(fields[2])))
    return out


def read_relevant(root: Path) -> dict[str, set[str]]:
    """The documents judged relevant (score > 0) to each claim, over the train and test qrels of a
    BEIR directory."""
    qrels: dict[str, set[str]] = defaultdict(set)
    for split in ("train", "test"):
        for claim, doc, score in _read_qrels(root / "qrels" / f"{split}.tsv"):
            if score > 0:
                qrels[claim].add(doc)
    return qrels


def read_scifact(data_dir: Path) -> SciFact:
    root = Path(data_dir) / "scifact_beir"
    corpus = {str(d["_id"]): d for d in _read_jsonl(root / "corpus.jsonl")}
    queries = {str(q["_id"]): q for q in _read_jsonl(root / "queries.jsonl")}
    qrels = read_relevant(root)
    # BEIR keeps each abstract as one string; the rationale indices refer to the original sentence
    # list, which only the original release keeps (a printed numpy array per document).
    archive = root / "original_scifact_hf_csv" / "scifact.zip"
    if not archive.is_file():
        raise ValueError(f"{archive}: missing; the qa-split case needs the original sentence lists it holds")
    sentences: dict[str, list[str]] = {}
    unmatched = 0
    csv.field_size_limit(sys.maxsize)
    with zipfile.ZipFile(archive) as zf, zf.open("corpus_train.csv") as raw:
        for record in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline="")):
            doc = str(record["doc_id"])
            if doc not in corpus:
                continue
            try:
                parts = [_collapse(s) for s in _numpy_string_list(record["abstract"])]
            except (SyntaxError, ValueError, tokenize.TokenError):
                unmatched += 1
                continue
            if parts and all(parts) and _collapse(" ".join(parts)) == _collapse(corpus[doc]["text"]):
                sentences[doc] = parts
            else:
                unmatched += 1
    judged: dict[str, set[str]] = {c: set(docs) for c, docs in qrels.items()}
    rationales: dict[tuple[str, str], list[tuple[int, ...]]] = {}
    for claim, query in queries.items():
        for doc, evidence in (query.get("metadata") or {}).items():
            doc = str(doc)
            judged.setdefault(claim, set()).add(doc)
            if doc not in qrels.get(claim, ()) or doc not in sentences:
                continue
            n = len(sentences[doc])
            sets = [tuple(sorted(set(e["sentences"]))) for e in evidence if e.get("sentences")]
            sets = [s for s in sets if s[-1] < n]
            if sets:
                rationales[(claim, doc)] = sets
    return SciFact(
        titles={d: _collapse(c["title"]) for d, c in corpus.items()},
        sentences=sentences,
        claims={c: _collapse(q["text"]) for c, q in queries.items()},
        judged=judged,
        rationales=rationales,
        unmatched_documents=unmatched,
    )


def balanced_cut(lengths: Sequence[int], valid: Callable[[int], bool]) -> int | None:
    """The valid cut k (sentences[:k] | sentences[k:], 1 <= k < n) that splits the characters most evenly."""
    total = sum(lengths)
    best: tuple[int, int] | None = None
    prefix = 0
    for k in range(1, len(lengths)):
        prefix += lengths[k - 1]
        if valid(k):
            cost = abs(2 * prefix - total)
            if best is None or cost < best[0]:
                best = (cost, k)
    return None if best is None else best[1]


def _title_tokens(title: str) -> frozenset[str]:
    return frozenset(t for t in re.findall(r"[a-z0-9]+", title.casefold()) if len(t) >= 3 and t not in _STOPWORDS)


def build_qa_split(
    data_dir: Path,
    out_dir: Path,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = DEFAULT_SEED,
    part: str = "all",
) -> Case:
    """SciFact query->document case: two rows cut from one abstract, each half holding a complete rationale.

    Same-document pair (label 1 both ways), for a claim q whose relevant abstract D has two rationale
    sets that a cut separates: row A = (q, the half of D holding one rationale set), row B = (D's title,
    the other half, holding another). B's positive justifies q on its own (SciFact rationales are each
    sufficient), and A's positive is part of the abstract B's title names.
    Distractor pair (label 0 both ways): row A' = (q', the half of its relevant abstract D' holding a
    rationale), row C = (title of D'', a half of D''), D'' the unused abstract whose title shares the
    most content words with D''s title, judged for none of the case's claims.
    Every abstract and claim is used once, and no abstract is judged (qrels or rationale) for another
    claim of the case, so random in-batch pairs are unjudged pairs (label 0).
    """
    if max_pairs < 1:
        raise ValueError(f"max_pairs must be >= 1, got {max_pairs}")
    sf = read_scifact(data_dir)
    rng = random.Random(seed)
    registry = TextRegistry()
    used_docs: set[str] = set()
    accepted: set[str] = set()
    judged_by_accepted: set[str] = set()
    dropped: Counter[str] = Counter()

    def free(claim: str, docs: Iterable[str]) -> bool:
        docs = set(docs)
        return (
            claim not in accepted
            and not docs & used_docs
            and not docs & judged_by_accepted
            and not sf.judged.get(claim, set()) & used_docs
        )

    def commit(claim: str, docs: Iterable[str]) -> None:
        accepted.add(claim)
        used_docs.update(docs)
        judged_by_accepted.update(sf.judged.get(claim, set()))

    def halves(doc: str, k: int) -> tuple[str, str]:
        parts = sf.sentences[doc]
        return " ".join(parts[:k]), " ".join(parts[k:])

    def lengths(doc: str) -> list[int]:
        return [len(s) for s in sf.sentences[doc]]

    def same_document(candidate: tuple[str, str]) -> LabelledPair | None:
        claim, doc = candidate
        sets = sf.rationales[(claim, doc)]
        if not free(claim, [doc]):
            dropped["same_document_judged_or_used"] += 1
            return None
        k = balanced_cut(lengths(doc), lambda k: any(s[-1] < k for s in sets) and any(s[0] >= k for s in sets))
        if k is None:
            return None
        left, right = halves(doc, k)
        claim_half, title_half = (left, right) if rng.random() < 0.5 else (right, left)
        a = Row(f"scifact-q{claim}-claim", sf.claims[claim], claim_half, "scifact-claim")
        b = Row(f"scifact-d{doc}-title", sf.titles[doc], title_half, "scifact-title")
        if not registry.try_add([a, b]):
            dropped["same_document_shares_text"] += 1
            return None
        commit(claim, [doc])
        return LabelledPair(a, b, 1, PARAPHRASE)

    by_token: dict[str, list[str]] = defaultdict(list)
    tokens = {doc: _title_tokens(sf.titles[doc]) for doc in sorted(sf.sentences) if len(sf.sentences[doc]) >= 2}
    for doc, toks in tokens.items():
        for tok in toks:
            by_token[tok].append(doc)

    def nearest_title(doc: str, claim: str) -> str | None:
        mine = tokens.get(doc, _title_tokens(sf.titles[doc]))
        overlap: Counter[str] = Counter(other for tok in mine for other in by_token.get(tok, ()))
        excluded = used_docs | judged_by_accepted | sf.judged.get(claim, set()) | {doc}
        best: tuple[float, str] | None = None
        for other, shared in overlap.items():
            if other in excluded:
                continue
            score = shared / (len(mine) + len(tokens[other]) - shared)
            if best is None or (-score, other) < (-best[0], best[1]):
                best = (score, other)
        return None if best is None else best[1]

    def distractor(candidate: tuple[str, str]) -> LabelledPair | None:
        claim, doc = candidate
        sets = sf.rationales[(claim, doc)]
        if not free(claim, [doc]):
            dropped["distractor_judged_or_used"] += 1
            return None
        k = balanced_cut(lengths(doc), lambda k: any(s[-1] < k for s in sets) or any(s[0] >= k for s in sets))
        other = nearest_title(doc, claim)
        if k is None or other is None:
            dropped["distractor_no_cut_or_title_match"] += 1
            return None
        left, right = halves(doc, k)
        on_left, on_right = any(s[-1] < k for s in sets), any(s[0] >= k for s in sets)
        claim_half = left if on_left and (not on_right or rng.random() < 0.5) else right
        k2 = balanced_cut(lengths(other), lambda k: True)
        assert k2 is not None  # documents in the title index have >= 2 sentences
        other_left, other_right = halves(other, k2)
        a = Row(f"scifact-q{claim}-claim", sf.claims[claim], claim_half, "scifact-claim")
        c = Row(
            f"scifact-d{other}-title",
            sf.titles[other],
            other_left if rng.random() < 0.5 else other_right,
            "scifact-title",
        )
        if not registry.try_add([a, c]):
            dropped["distractor_shares_text"] += 1
            return None
        commit(claim, [doc, other])
        return LabelledPair(a, c, 0, DISTRACTOR)

    def order(items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        items = sorted(items, key=lambda cd: (len(cd[0]), cd[0], len(cd[1]), cd[1]))
        rng.shuffle(items)
        return items

    two_sided = order(
        (c, d)
        for (c, d), sets in sf.rationales.items()
        if in_part(c, part)
        and balanced_cut(lengths(d), lambda k, s=sets: any(x[-1] < k for x in s) and any(x[0] >= k for x in s))
        is not None
    )
    para, _ = take(two_sided, max_pairs, same_document)
    one_sided = order(key for key in sf.rationales if in_part(key[0], part) and len(sf.sentences[key[1]]) >= 2)
    dist, _ = take(one_sided, min(max_pairs, len(para)), distractor)
    dropped["documents_without_matching_sentences"] = sf.unmatched_documents
    return write_case(
        "qa-split",
        Path(out_dir),
        para + dist,
        batch_size=batch_size,
        seed=seed,
        dropped=dict(sorted(dropped.items())),
        params={
            "files": [
                "scifact_beir/corpus.jsonl",
                "scifact_beir/queries.jsonl",
                "scifact_beir/qrels/train.tsv",
                "scifact_beir/qrels/test.tsv",
                "scifact_beir/original_scifact_hf_csv/scifact.zip:corpus_train.csv",
            ],
            "max_pairs": max_pairs,
            "batch_size": batch_size,
            "seed": seed,
            "part": part,
            "two_sided_candidates": len(two_sided),
            "one_sided_candidates": len(one_sided),
        },
        notes="paraphrase = same-document: the other half of the same abstract, holding a complete rationale "
        "for the claim (claim -> half) or part of the titled abstract (title -> half).",
    )


# --------------------------------------------------------------------------- more genres: PAWS, captions, cQA


def read_paws(path: Path, split: str) -> list[SentencePair]:
    """PAWS-Wiki final: tab-separated, CRLF, no header: id, sentence1, sentence2, label (1 = paraphrase)."""
    out = []
    for number, line in _lines(path):
        fields = line.split("\t")
        if len(fields) != 4 or fields[3] not in ("0", "1"):
            raise ValueError(f"{path}:{number}: expected id, sentence1, sentence2, label 0/1")
        out.append(
            SentencePair(
                f"paws-{split}-{fields[0]}", fields[1].strip(), fields[2].strip(), int(fields[3]), f"paws-{split}"
            )
        )
    return out


def build_paws(
    data_dir: Path,
    out_dir: Path,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = DEFAULT_SEED,
    part: str = "all",
) -> Case:
    """PAWS-Wiki (dev + test), SimCSE-style rows: adversarial non-paraphrases as distractors."""
    root = Path(data_dir) / "paws_wiki"
    pairs = read_paws(root / "dev.tsv", "dev") + read_paws(root / "test.tsv", "test")
    return simcse_case(
        "paws",
        [p for p in pairs if p.text1 != p.text2],
        Path(out_dir),
        max_pairs=max_pairs,
        batch_size=batch_size,
        seed=seed,
        part=part,
        params={"files": ["paws_wiki/dev.tsv", "paws_wiki/test.tsv"]},
        notes="PAWS label 1 = paraphrase (label 1 both ways); label 0 = word-swapped non-paraphrase (distractor).",
    )


CAPTION_BATCH_SIZE = 64
EXPERT_FIT = 4  # all three experts: "the caption describes the image"
CROWD_FIT = 0.66  # share of yes votes


@dataclass
class Captions:
    """Flickr8k: five captions per image, and the cross-image captions people judged to fit."""

    captions: dict[str, list[str]]
    fits: set[tuple[str, str]]  # (image, image whose caption fits it), both orders

    def fit(self, x: str, y: str) -> bool:
        return (x, y) in self.fits


def read_flickr8k(data_dir: Path) -> Captions:
    root = Path(data_dir) / "flickr8k_captions"
    captions: dict[str, dict[int, str]] = defaultdict(dict)
    for number, line in _lines(root / "Flickr8k.token.txt"):
        key, _, text = line.partition("\t")
        image, _, idx = key.rpartition("#")
        if not image or not idx.isdigit() or not text.strip():
            raise ValueError(f"{root / 'Flickr8k.token.txt'}:{number}: expected '<image>#<n>\\t<caption>'")
        captions[image][int(idx)] = _collapse(text)
    fits: set[tuple[str, str]] = set()
    for number, line in _lines(root / "ExpertAnnotations.txt"):
        fields = line.split("\t")
        if len(fields) != 5:
            raise ValueError(f"{root / 'ExpertAnnotations.txt'}:{number}: expected 5 tab-separated fields")
        other = fields[1].rpartition("#")[0]
        if other != fields[0] and all(int(v) >= EXPERT_FIT for v in fields[2:]):
            fits.update({(fields[0], other), (other, fields[0])})
    for number, line in _lines(root / "CrowdFlowerAnnotations.txt"):
        fields = line.split("\t")
        if len(fields) != 5:
            raise ValueError(f"{root / 'CrowdFlowerAnnotations.txt'}:{number}: expected 5 tab-separated fields")
        other = fields[1].rpartition("#")[0]
        if other != fields[0] and float(fields[2]) >= CROWD_FIT:
            fits.update({(fields[0], other), (other, fields[0])})
    ordered = {image: [texts[k] for k in sorted(texts)] for image, texts in sorted(captions.items())}
    return Captions({k: v for k, v in ordered.items() if len(v) >= 4}, fits)


def _caption_rows(image: str, texts: list[str], rng: random.Random) -> tuple[Row, Row]:
    """Two rows of one image's captions that share no caption: (c1, c2) and (c3, c4) of a seeded order."""
    order = list(texts)
    rng.shuffle(order)
    return (Row(f"{image}-a", order[0], order[1], "flickr8k"), Row(f"{image}-b", order[2], order[3], "flickr8k"))


def _content_words(texts: Iterable[str]) -> frozenset[str]:
    return frozenset(w for t in texts for w in re.findall(r"[a-z]+", t.lower()) if w not in _STOPWORDS and len(w) > 2)


def build_captions(
    data_dir: Path,
    out_dir: Path,
    *,
    max_pairs: int = 400,
    batch_size: int = CAPTION_BATCH_SIZE,
    seed: int = DEFAULT_SEED,
    part: str = "all",
) -> Case:
    """Flickr8k captions: rows (caption, caption) of one image.

    Paraphrase: the two rows of one image (four distinct captions). Distractor: a row of image X with a
    row of image Y, the unused image whose captions share the most content words with X's (Jaccard),
    never an image whose captions people judged to fit X or the other way round."""
    data = read_flickr8k(data_dir)
    rng = random.Random(seed)
    images = [i for i in data.captions if in_part(i, part)]
    rng.shuffle(images)
    registry = TextRegistry()
    used: set[str] = set()
    dropped: Counter[str] = Counter()

    def same_image(image: str) -> LabelledPair | None:
        a, b = _caption_rows(image, data.captions[image], rng)
        if not registry.try_add([a, b]):
            dropped["paraphrase_shares_text"] += 1
            return None
        used.add(image)
        return LabelledPair(a, b, 1, PARAPHRASE)

    para, _ = take(images, max_pairs, same_image)
    words = {i: _content_words(data.captions[i]) for i in images}
    postings: dict[str, list[str]] = defaultdict(list)
    for image in images:
        for w in words[image]:
            postings[w].append(image)

    def nearest(x: str) -> LabelledPair | None:
        shared: Counter[str] = Counter()
        for w in words[x]:
            if len(postings[w]) <= 400:  # words that say little (dog, man) are skipped for speed
                shared.update(postings[w])
        best = sorted(
            (
                (-n / len(words[x] | words[y]), y)
                for y, n in shared.items()
                if y != x and y not in used and not data.fit(x, y)
            ),
        )
        if not best:
            dropped["distractor_without_neighbour"] += 1
            return None
        y = best[0][1]
        a = Row(f"{x}-a", *data.captions[x][:2], "flickr8k")
        c = Row(f"{y}-a", *data.captions[y][:2], "flickr8k")
        if not registry.try_add([a, c]):
            dropped["distractor_shares_text"] += 1
            return None
        used.update({x, y})
        return LabelledPair(a, c, 0, DISTRACTOR)

    rest = [i for i in images if i not in used]
    dist, _ = take(rest, min(max_pairs, len(para)), lambda x: None if x in used else nearest(x))
    return write_case(
        "captions",
        Path(out_dir),
        para + dist,
        batch_size=batch_size,
        seed=seed,
        dropped=dict(sorted(dropped.items())),
        params={
            "files": [
                "flickr8k_captions/Flickr8k.token.txt",
                "flickr8k_captions/ExpertAnnotations.txt",
                "flickr8k_captions/CrowdFlowerAnnotations.txt",
            ],
            "max_pairs": max_pairs,
            "batch_size": batch_size,
            "seed": seed,
            "part": part,
            "judged_fits": len(data.fits) // 2,
        },
        notes="paraphrase = two rows of one image's captions (no caption shared); distractor = the image whose "
        "captions share the most content words, never one people judged to fit.",
    )


def build_natural(
    data_dir: Path,
    out_dir: Path,
    *,
    max_pairs: int = 128,
    batch_size: int = CAPTION_BATCH_SIZE,
    seed: int = DEFAULT_SEED,
    part: str = "all",
    draws: int = 6,
) -> Case:
    """Natural batches: ``draws`` disjoint sets of ``max_pairs`` Flickr8k images, two rows per image
    (four distinct captions), each set shuffled with the seed into batches of ``batch_size``.

    Every in-batch pair is labelled: same image = 1 (``paraphrase``); a different image whose caption
    experts (all three: 4) or the crowd (>= 0.66 yes) judged to fit = 1 (``judged-fit``); else 0 (``random``)."""
    data = read_flickr8k(data_dir)
    rng = random.Random(f"natural-{seed}")
    images = [i for i in data.captions if in_part(i, part)]
    rng.shuffle(images)
    registry = TextRegistry()
    image_of: dict[str, str] = {}
    rows: list[Row] = []
    batches: list[list[str]] = []
    dropped: Counter[str] = Counter()
    it = iter(images)
    for _ in range(draws):
        draw: list[Row] = []
        while len(draw) < 2 * max_pairs:
            image = next(it, None)
            if image is None:
                break
            a, b = _caption_rows(image, data.captions[image], rng)
            if not registry.try_add([a, b]):
                dropped["image_shares_text"] += 1
                continue
            draw += [a, b]
            image_of[a.id] = image_of[b.id] = image
        ids = [r.id for r in draw]
        rng.shuffle(ids)
        batches += [ids[k : k + batch_size] for k in range(0, len(ids), batch_size) if len(ids[k : k + batch_size]) > 1]
        rows += draw
    check_disjoint(rows)
    truth = []
    for b, ids in enumerate(batches):
        for x in ids:
            for y in ids:
                if x == y:
                    continue
                ix, iy = image_of[x], image_of[y]
                label, kind = (1, PARAPHRASE) if ix == iy else (1, "judged-fit") if data.fit(ix, iy) else (0, RANDOM)
                truth.append({"anchor_id": x, "candidate_id": y, "label": label, "kind": kind, "batch": b})
    out_dir = Path(out_dir)
    write_atomic(out_dir / "pairs.jsonl", _jsonl(asdict(row) for row in rows))
    write_atomic(out_dir / "plan.jsonl", _jsonl({"rows": ids} for ids in batches))
    write_atomic(out_dir / "truth.jsonl", _jsonl(truth))
    case = Case(
        name="natural",
        directory=str(out_dir),
        rows=len(rows),
        batches=len(batches),
        batch_size=batch_size,
        pairs={"images": len(rows) // 2},
        truth=dict(Counter(r["kind"] for r in truth)),
        positives=sum(r["label"] for r in truth),
        dropped=dict(dropped),
        params={"max_pairs": max_pairs, "draws": draws, "batch_size": batch_size, "seed": seed, "part": part},
        notes="seeded random batches of Flickr8k caption rows; same image or judged fit = label 1.",
    )
    write_atomic(out_dir / "case.json", json.dumps(asdict(case), indent=2, sort_keys=True) + "\n")
    return case


CQA_FILE = "semeval2016_task3_cqa/subtaskB_pairs.jsonl"


def build_cqa(
    data_dir: Path,
    out_dir: Path,
    *,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    batch_size: int = DEFAULT_BATCH_SIZE,
    seed: int = DEFAULT_SEED,
    part: str = "all",
) -> Case:
    """SemEval-2016 Task 3 subtask B (Qatar Living): rows (question subject, question body).

    Paraphrase: an original question with one of its PerfectMatch related questions, and further
    PerfectMatch questions of the same original two by two. Distractor: an original with no
    PerfectMatch and its best-ranked Relevant (else Irrelevant) related question: retrieved by a search
    engine for it, judged not the same question. Each question is used once."""
    records = _read_jsonl(Path(data_dir) / CQA_FILE)
    by_orig: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_orig[r["orgq_id"]].append(r)
    rng = random.Random(seed)
    origs = sorted(o for o in by_orig if in_part(o, part))
    rng.shuffle(origs)
    registry = TextRegistry()
    dropped: Counter[str] = Counter()

    def row(qid: str, subject: str, body: str) -> Row | None:
        subject, body = _collapse(subject), _collapse(body)
        return Row(qid, subject, body, "semeval2016-qatarliving") if subject and body else None

    para: list[LabelledPair] = []
    dist: list[LabelledPair] = []
    for o in origs:
        related = sorted(by_orig[o], key=lambda r: int(r["relq_rank"]))
        first = related[0]
        orig = row(o, first["orgq_subject"], first["orgq_body"])
        perfect = [
            row(r["relq_id"], r["relq_subject"], r["relq_body"]) for r in related if r["label"] == "PerfectMatch"
        ]
        perfect = [r for r in perfect if r is not None]
        if orig is None:
            dropped["original_without_body"] += 1
            continue
        if perfect:
            group = [orig, *perfect]
            for x, y in zip(group[0::2], group[1::2], strict=False):
                if registry.try_add([x, y]):
                    para.append(LabelledPair(x, y, 1, PARAPHRASE))
                else:
                    dropped["paraphrase_shares_text"] += 1
            continue
        for label in ("Relevant", "Irrelevant"):
            others = [row(r["relq_id"], r["relq_subject"], r["relq_body"]) for r in related if r["label"] == label]
            others = [r for r in others if r is not None]
            if others and registry.try_add([orig, others[0]]):
                dist.append(LabelledPair(orig, others[0], 0, DISTRACTOR))
                break
        else:
            dropped["distractor_unavailable"] += 1
    para, dist = para[:max_pairs], dist[: min(max_pairs, len(para))]
    return write_case(
        "cqa",
        Path(out_dir),
        para + dist,
        batch_size=batch_size,
        seed=seed,
        dropped=dict(sorted(dropped.items())),
        params={"files": [CQA_FILE], "max_pairs": max_pairs, "batch_size": batch_size, "seed": seed, "part": part},
        notes="paraphrase = PerfectMatch questions (same question asked again); distractor = a Relevant or "
        "Irrelevant question the search engine returned for an original with no PerfectMatch; questions of "
        "different originals are unjudged (the forum repeats its questions) and not scored.",
        other=UNJUDGED,
    )


CASES: dict[str, Callable[..., Case]] = {
    "mrpc": build_mrpc,
    "stsb": build_stsb,
    "qa-split": build_qa_split,
    "paws": build_paws,
    "captions": build_captions,
    "cqa": build_cqa,
    "natural": build_natural,
}
# Cases whose builder chooses its own batch size unless --batch-size is given (captions: 64, as in
# caption training; the natural-batch case too).
CASE_BATCH_SIZE = {"captions": CAPTION_BATCH_SIZE, "natural": CAPTION_BATCH_SIZE}
