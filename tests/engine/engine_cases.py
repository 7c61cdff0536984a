"""Pair files and settings the engine tests share: data whose batches hold every kind of lexical evidence."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from contrast_audit import model as model_io
from contrast_audit.cli import app
from contrast_audit.config import AuditConfig, EmbeddingConfig, LossConfig, PlanConfig

WORDS = "river stone light music garden window paper silver orange cloud valley engine market winter".split()


def case_rows(n: int, seed: int = 0) -> list[dict]:
    """Rows whose batches hold every kind of lexical evidence: repeated and near-duplicate positives
    (exact, minhash), shared anchors (same-anchor), chains of positive pairs (linked), declared groups,
    hard negatives that restate the row's own positive (mislabelled), and rows with 0 to 2 negatives."""
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(9)) for _ in range(n // 4)]
    out = []
    for i in range(n):
        doc = rng.choice(docs)
        if rng.random() < 0.2:  # a near-duplicate spelling: one word changed, the case changed
            words = doc.split()
            words[rng.randrange(len(words))] = rng.choice(WORDS)
            doc = " ".join(words).upper() if rng.random() < 0.5 else " ".join(words)
        anchor = f"question {rng.randrange(n // 3)} about {rng.choice(WORDS)}"
        if rng.random() < 0.1:  # a chain: this row's anchor is another row's positive
            anchor = rng.choice(docs)
        row: dict = {"anchor": anchor, "positive": doc, "id": f"r{i}"}
        k = rng.choice([0, 1, 1, 2])
        negatives = [rng.choice(docs) for _ in range(k)]
        if negatives and rng.random() < 0.2:
            negatives[0] = doc.lower()  # mislabelled: the row's own positive
        if negatives:
            row["negatives"] = negatives
        if rng.random() < 0.15:
            row["group"] = f"g{rng.randrange(20)}"
        out.append(row)
    return out


def case_config(**plan) -> AuditConfig:
    return AuditConfig(
        embedding=replace(EmbeddingConfig(), enabled=False),
        plan=replace(PlanConfig(), **plan),
        loss=LossConfig(directions=("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")),
        mapping=replace(AuditConfig().mapping, negatives=("negatives",), group="group"),
    )


PLANS = {
    "random": {"batch_size": 8, "seed": 1},
    "no-duplicates, 2 epochs": {"batch_size": 8, "seed": 2, "epochs": 2, "sampler": "no-duplicates"},
    "2 devices, drop last": {"batch_size": 6, "seed": 3, "world_size": 2, "drop_last": True},
}


def scan_report(path: Path, out: Path, *flags: str) -> dict:
    result = CliRunner().invoke(
        app,
        ["scan", str(path), "--no-embeddings", "--batch-size", "8", "--negative", "negatives", "--group", "group"]
        + ["--format", "json", "--output", str(out), *flags],
    )
    assert result.exit_code in (0, 1), result.output
    report = json.loads(out.read_text())
    report["config"].pop("engine")
    for key in ("candidate_checks", "near_duplicate_pairs", "skipped_buckets"):
        report["detectors"]["minhash"].pop(key)
    return report


PARAPHRASES = [
    (
        "how do I reset my password",
        "Open Settings, choose Account and click Reset password to get an email link.",
        "Go to Settings > Account and press Reset password; we email you a link.",
    ),
    ("what is the capital of france", "Paris is the capital city of France.", "The capital of France is Paris."),
    (
        "how to boil an egg",
        "Put the egg in boiling water for nine minutes, then cool it in cold water.",
        "Boil the egg for about nine minutes and then cool it under cold water.",
    ),
    (
        "who wrote hamlet",
        "Hamlet was written by William Shakespeare around 1600.",
        "William Shakespeare wrote the play Hamlet in about 1600.",
    ),
    (
        "why is the sky blue",
        "Air molecules scatter blue sunlight more than red light, so the sky looks blue.",
        "The sky looks blue because the atmosphere scatters short blue wavelengths of sunlight more strongly.",
    ),
    (
        "how to cancel my subscription",
        "You can cancel your plan any time from the Billing page under Manage subscription.",
        "To cancel, open Billing and choose Manage subscription, then Cancel plan.",
    ),
]
UNRELATED = [
    "The train to Berlin leaves at noon from platform four.",
    "Photosynthesis turns light into chemical energy in plants.",
    "Our office is closed on public holidays.",
    "A balanced diet includes vegetables, grains and protein.",
    "The museum opens at nine and closes at five.",
    "Rainfall in the region peaks in November.",
    "Use a soft brush to clean suede shoes.",
    "The recipe needs two cups of flour and one egg.",
    "Jupiter is the largest planet in the solar system.",
    "The library lends e-books for three weeks.",
]


def paraphrase_rows() -> list[dict]:
    """22 rows, one batch of 22: pairs of rows whose anchors and positives are paraphrases (embedding
    evidence, not lexical), and unrelated rows."""
    rows: list[dict] = []
    for i, (anchor, first, second) in enumerate(PARAPHRASES):
        rows.append({"id": f"a{i}", "anchor": anchor, "positive": first})
        reworded = anchor.replace("how", "how can I").replace("what is", "tell me") + " please"
        rows.append({"id": f"b{i}", "anchor": reworded, "positive": second})
    for j, text in enumerate(UNRELATED):
        rows.append({"id": f"o{j}", "anchor": f"question about {text.split()[1]} number {j}", "positive": text})
    return rows


def vocabulary_words() -> list[str]:
    """Words of the bundled model's vocabulary: strings of them are texts the model reads as unrelated."""
    vocab = (Path(model_io.resolve(None).path) / "vocab.txt").read_text(encoding="utf-8").split()
    return [w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 5]


def embedding_case_rows() -> list[dict]:
    """Rows of unrelated word strings, with what each kind of embedding evidence reads: positives that
    repeat another row's but for one word (near-duplicates), rows whose anchor is another row's positive
    (chains the linked rule checks with the vectors), and hard negatives that restate their own row's
    positive (mislabelled)."""
    rng = random.Random(11)
    words = vocabulary_words()
    text = lambda n: " ".join(rng.sample(words, n))  # noqa: E731
    rows = [{"id": f"r{i}", "anchor": text(6), "positive": text(12)} for i in range(420)]
    for k in range(40):
        twin = rows[rng.randrange(420)]["positive"].split()
        twin[rng.randrange(12)] = rng.choice(words)
        rows.append({"id": f"twin{k}", "anchor": text(6), "positive": " ".join(twin)})
    for k in range(30):
        j = rng.randrange(420)
        near = rows[j]["anchor"].split()
        near[0] = rng.choice(words)  # the chain's far end is near the anchor, or not
        rows.append(
            {"id": f"chain{k}", "anchor": rows[j]["positive"], "positive": " ".join(near) if k % 2 else text(6)}
        )
    for k in range(8):
        positive = text(12)
        rows.append({"id": f"mis{k}", "anchor": text(6), "positive": positive, "negative": positive + " again"})
    rng.shuffle(rows)
    return rows


def embedding_case_config(**embedding) -> AuditConfig:
    """The settings ``embedding_case_rows`` is audited with: batches of 48 over three epochs, and its hard
    negatives mapped."""
    cfg = AuditConfig()
    return replace(
        cfg,
        plan=replace(cfg.plan, batch_size=48, seed=3, epochs=3),
        embedding=replace(cfg.embedding, **embedding),
        mapping=replace(cfg.mapping, negatives=("negative",)),
    )


def small_first_stage(monkeypatch) -> None:
    """A first stage for a few hundred rows, and chunks of a few batches (runs are cut where one begins).
    The constants are read where the audit starts: the runs a distributed engine judges elsewhere receive
    what they decided."""
    from contrast_audit import first_stage as fs
    from contrast_audit import judge

    monkeypatch.setattr(fs, "SAMPLE_ROWS", 150)
    monkeypatch.setattr(fs, "MIN_TEXTS", 600)
    monkeypatch.setattr(fs, "MIN_SAMPLE_TEXTS", 200)
    monkeypatch.setattr(judge, "PAIRS_PER_CHUNK", 8192)


def assert_judged_as_in_memory(memory, judgement, first_stage: str) -> None:
    """A streamed or distributed audit's judgement (``judgement``) is the in-memory ``memory`` result's:
    findings with their scores, mislabelled negatives, vetoed pairs, and what embedding evidence decided
    over every text (the first stage, the link bar, the idf texts, the backend)."""
    assert memory.findings.equals(judgement.findings)  # scores too: every run reads the whole data's matrices
    assert memory.mislabelled.equals(judgement.mislabelled)
    assert memory.judgement.vetoed.equals(judgement.vetoed)
    info, got = memory.judgement.detector_info, judgement.detector_info
    assert got["embedding"]["first_stage"] == info["embedding"]["first_stage"]
    assert got["embedding"]["first_stage"]["used"] is (first_stage == "static")
    assert got["linked"]["near_bar"] == info["linked"]["near_bar"]
    assert got["linked"]["certain_when"] == info["linked"]["certain_when"]
    assert got["embedding"]["idf_texts"] == info["embedding"]["idf_texts"] > 0
    assert got["embedding"]["backend"] == info["embedding"]["backend"]
