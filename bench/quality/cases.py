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


def truth_records(batches: Sequence[Sequence[str]], pairs: Sequence[LabelledPair]) -> list[dict[str, Any]]:
    """One record per ordered in-batch pair (anchor row, other row), in plan order."""
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
                    label, kind = 0, RANDOM
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
) -> Case:
    """Check the rows, plan them, derive the truth and write the four files."""
    if not pairs:
        raise ValueError(f"{name}: no labelled pairs were built")
    rows = [row for pair in pairs for row in (pair.first, pair.second)]
    check_disjoint(rows)
    batches = plan_batches(pairs, batch_size, seed)
    truth = truth_records(batches, pairs)
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
        truth={kind: sum(1 for r in truth if r["kind"] == kind) for kind in KINDS},
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


CASES: dict[str, Callable[..., Case]] = {"mrpc": build_mrpc, "stsb": build_stsb, "qa-split": build_qa_split}
