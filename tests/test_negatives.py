"""`contrast-audit negatives` and embedding evidence through the CLI (the real default model)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from contrast_audit.cli import app

ROWS = [
    {
        "id": "pw",
        "anchor": "How do I reset a forgotten password?",
        "positive": "Use the Forgot password link on the sign-in page to get a reset email.",
        "source": "docs",
        "cohort": "a",
    },
    {
        "id": "pw2",
        "anchor": "I forgot my password, how can I reset it?",
        "positive": "Click Forgot password on the login page and we email you a reset link.",
        "source": "forum",
        "cohort": "b",
    },
    {
        "id": "inv",
        "anchor": "Where do I download invoices?",
        "positive": "Invoices are listed under Billing, History, each with a PDF link.",
        "source": "docs",
        "cohort": "a",
    },
    {
        "id": "dark",
        "anchor": "Enable dark mode",
        "positive": "Switch the theme to Dark under Settings, Appearance.",
        "source": "forum",
        "cohort": "b",
    },
]


def run(*args: str):
    return CliRunner().invoke(app, [*args])


def test_scan_reports_paraphrased_answers_with_embedding_evidence(pairs_file):
    # Reworded answers to reworded questions: their tokens align too little for a near-duplicate
    # claim between short texts. The two anchors paraphrase each other (anchor-embedding: suspect, the
    # candidate itself is not compared); the margin rule reports the pair only with --margin (suspect)
    # or, corroborated by --margin-support, as likely. Without the alignment and word-order guards the
    # embedding detector does too (the answers' shared words come in another order: "link" and
    # "email" swap places).
    path = pairs_file(ROWS)
    result = run("scan", str(path), "--batch-size", "8", "--format", "json", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    pairs = {(f["anchor_id"], f["candidate_id"]): f for f in report["findings"]}
    finding = pairs[("pw", "pw2")]
    assert finding["severity"] == "suspect" and finding["severity_rule"] == "anchor-embedding"
    supported = json.loads(
        run(
            "scan",
            str(path),
            "--batch-size",
            "8",
            "--format",
            "json",
            "-q",
            "--margin-support",
            "0.65",
            "--margin-doc-ratio",
            "0",
        ).stdout
    )
    finding = {(f["anchor_id"], f["candidate_id"]): f for f in supported["findings"]}[("pw", "pw2")]
    assert finding["severity"] == "likely" and finding["severity_rule"].startswith("margin: within the margin and")
    unaligned = json.loads(
        run(
            "scan", str(path), "--batch-size", "8", "--format", "json", "-q", "--alignment", "0", "--word-order", "0"
        ).stdout
    )
    bare = {(f["anchor_id"], f["candidate_id"]): f for f in unaligned["findings"]}[("pw", "pw2")]
    assert {e["kind"] for e in bare["evidence"]} >= {"embedding", "anchor-embedding"}
    emb = report["detectors"]["embedding"]
    assert emb["token_texts_encoded"] + emb["token_texts_cached"] > 0  # the alignment guard was consulted
    assert emb["model"] == "sentence-transformers/all-MiniLM-L6-v2" and emb["similarity"] == "cosine"
    assert emb["embedded"] + emb["cached"] == report["counts"]["texts"]
    assert ("inv", "dark") not in pairs and ("dark", "inv") not in pairs
    # A rerun embeds nothing: every text comes from the cache.
    again = json.loads(run("scan", str(path), "--batch-size", "8", "--format", "json", "-q").stdout)
    assert again["detectors"]["embedding"]["embedded"] == 0
    assert again["detectors"]["embedding"]["token_texts_encoded"] == 0
    assert again["findings"] == report["findings"]


def test_no_embeddings_runs_lexical_only(pairs_file):
    report = json.loads(run("scan", str(pairs_file(ROWS)), "--no-embeddings", "--format", "json", "-q").stdout)
    assert "embedding" not in report["detectors"] and "minhash" in report["detectors"]


def test_negatives_lists_scores_margins_and_flags(pairs_file):
    path = pairs_file(ROWS)
    result = run("negatives", str(path), "--batch-size", "8", "--format", "json", "-q", "--top", "3")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    rows = payload["negatives"]
    assert len(rows) == 3 and payload["mode"] == "global"
    scores = [r["candidate_score"] for r in rows]
    assert scores == sorted(scores, reverse=True)
    top = rows[0]
    assert {top["anchor_id"], top["candidate_id"]} == {"pw", "pw2"}
    assert top["flagged"] is True and top["severity"] == "suspect" and top["severity_rule"] == "anchor-embedding"
    assert abs(top["margin"] - (top["candidate_score"] - top["positive_score"])) < 1e-5
    assert all(set(r) >= {"anchor_text", "positive_text", "candidate_text", "evidence"} for r in rows)


def test_negatives_per_anchor_and_filters(pairs_file):
    path = pairs_file(ROWS)
    payload = json.loads(
        run(
            "negatives", str(path), "--batch-size", "8", "--format", "json", "-q", "--per-anchor", "2", "--top", "2"
        ).stdout
    )
    anchors = [r["anchor_id"] for r in payload["negatives"]]
    assert len(set(anchors)) == 2 and all(anchors.count(a) == 2 for a in set(anchors))
    forum = json.loads(
        run(
            "negatives",
            str(path),
            "--batch-size",
            "8",
            "--format",
            "json",
            "-q",
            "--only-source",
            "forum",
            "--top",
            "50",
        ).stdout
    )
    assert forum["negatives"] and {r["anchor_id"] for r in forum["negatives"]} <= {"pw2", "dark"}
    text = run("negatives", str(path), "--batch-size", "8", "--top", "2")
    assert text.exit_code == 0 and "alleged negative" in text.stdout


def test_text_report_names_the_model_and_the_cache(pairs_file):
    path = pairs_file(ROWS)
    run("scan", str(path), "--batch-size", "8", "-q")
    text = run("scan", str(path), "--batch-size", "8", "-q")
    assert "sentence-transformers/all-MiniLM-L6-v2" in text.stdout
    assert "0 texts embedded" in text.stdout and f"{len(ROWS) * 2} from the cache" in text.stdout


def test_alignment_match_reaches_both_commands_and_the_settings_file(pairs_file, tmp_path, monkeypatch):
    path = str(pairs_file(ROWS))
    guarded = ("minhash", "embedding", "anchor-embedding")
    soft = json.loads(run("scan", path, "--batch-size", "8", "--format", "json", "-q", "--alignment-match", "0").stdout)
    assert [soft["detectors"][d]["alignment_match"] for d in guarded] == [0.0, 0.0, 0.0]
    assert "alignment_match" not in soft["detectors"]["margin"]  # the margin rule is not aligned
    listed = json.loads(
        run("negatives", path, "--batch-size", "8", "--format", "json", "--alignment-match", "0.6").stdout
    )
    assert listed["detectors"]["embedding"]["alignment_match"] == 0.6
    for bad in ("1", "1.5", "-0.1"):
        for command in ("scan", "negatives"):
            result = run(command, path, "--batch-size", "8", "--alignment-match", bad)
            assert result.exit_code == 2 and "alignment-match must be a number in [0, 1)" in result.stderr
    (tmp_path / "contrast-audit.toml").write_text("alignment-match = 0.65\n")
    monkeypatch.chdir(tmp_path)
    from_file = json.loads(run("scan", path, "--batch-size", "8", "--format", "json", "-q").stdout)
    assert from_file["detectors"]["embedding"]["alignment_match"] == 0.65
    assert from_file["config"]["policy"]["alignment_match"] == 0.65
