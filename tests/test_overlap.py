"""scan --against / --eval: overlaps of new rows with existing and eval data, the reference index,
--with-existing and --baseline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support import write_jsonl
from typer.testing import CliRunner

from contrast_audit.api import OVERLAP_SCHEMA, audit
from contrast_audit.cli import app
from contrast_audit.config import build_config
from contrast_audit.overlap import neighbours

# Thirty words: replacing one word keeps the word-3-gram Jaccard near 0.8, above the 0.7 threshold.
LONG = (
    "the quarterly report shows that revenue from the northern region grew steadily while costs in the "
    "southern offices stayed flat because the new logistics contract reduced shipping delays for most customers"
)
LONG_EDIT = LONG.replace("steadily", "slowly")

NEW = [
    {"id": "n0", "anchor": "How do I reset my password?", "positive": "Open settings and choose reset."},
    {"id": "n1", "anchor": "what colour is the sky", "positive": LONG_EDIT},
    {"id": "n2", "anchor": "a question nobody asked before", "positive": "An answer nobody gave before."},
    {"id": "n3", "anchor": "Who wrote War and Peace?", "positive": "Leo Tolstoy wrote it."},
]
EXISTING = [
    {"id": "e0", "anchor": "unrelated row about cars", "positive": "Cars have wheels."},
    {"id": "e1", "anchor": "how do i reset my password", "positive": "Go to the account page."},
    {"id": "e2", "anchor": "why is the sky blue", "positive": LONG},
]


def lexical(**settings) -> dict:
    return {"embeddings": False, "batch_size": 2, **settings}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "new": write_jsonl(tmp_path / "new.jsonl", NEW),
        "existing": write_jsonl(tmp_path / "existing.jsonl", EXISTING),
        "index": tmp_path / "index",
    }


def by_role(result) -> dict[tuple[str, str], dict]:
    return {(r["row_id"], r["role"]): r for r in result.overlaps_table().to_dicts()}


def test_exact_and_near_duplicates_on_both_roles_name_both_sides(files):
    cfg = build_config(lexical(against=[str(files["existing"])], index=str(files["index"])))
    result = audit([str(files["new"])], cfg)
    assert dict(result.overlaps.schema) == OVERLAP_SCHEMA
    found = by_role(result)
    assert set(found) == {("n0", "anchor"), ("n1", "positive")}
    exact = found["n0", "anchor"]
    assert (exact["file"], exact["line"]) == (str(files["new"]), 1)
    assert (exact["target"], exact["target_id"], exact["target_file"], exact["target_line"], exact["target_role"]) == (
        "existing",
        "e1",
        str(files["existing"]),
        2,
        "anchor",
    )
    assert exact["severity"] == "certain" and [e["kind"] for e in exact["evidence"]] == ["exact"]
    near = found["n1", "positive"]
    assert (near["line"], near["target_id"], near["target_line"], near["target_role"]) == (2, "e2", 3, "positive")
    assert near["severity"] == "likely"
    (evidence,) = near["evidence"]
    assert evidence["kind"] == "minhash" and evidence["score"] >= evidence["threshold"] == 0.7
    assert near["text"] == LONG_EDIT and near["target_text"] == LONG
    c = result.counts()
    assert (c["overlaps"], c["leaks"]) == (2, 0)
    assert result.metrics()["overlaps"] == 2


def test_a_file_scanned_and_given_as_reference_does_not_match_itself(tmp_path, files):
    merged = write_jsonl(tmp_path / "all.jsonl", [*EXISTING, *NEW])
    link = tmp_path / "link.jsonl"
    link.symlink_to(merged)
    cfg = build_config(lexical(against=[str(link)], index=str(files["index"])))
    result = audit([str(merged)], cfg)
    found = by_role(result)
    # only the genuine repeats between different rows remain, both ways round
    assert set(found) == {("n0", "anchor"), ("n1", "positive"), ("e1", "anchor"), ("e2", "positive")}
    assert all(r["target_line"] != r["line"] for r in found.values())


def test_number_guard_vetoes_near_duplicates_with_other_numbers(tmp_path):
    old = write_jsonl(tmp_path / "old.jsonl", [{"anchor": "q", "positive": LONG + " in 2019"}])
    new = write_jsonl(tmp_path / "new.jsonl", [{"anchor": "r", "positive": LONG_EDIT + " in 2021"}])
    cfg = build_config(lexical(against=[str(old)], index=str(tmp_path / "i")))
    assert audit([str(new)], cfg).overlaps.height == 0
    cfg = build_config(lexical(against=[str(old)], index=str(tmp_path / "i"), number_guard=0))
    assert audit([str(new)], cfg).overlaps.height == 1


def test_eval_single_text_column_and_beir_layouts(tmp_path, files):
    questions = tmp_path / "questions.csv"
    questions.write_text("qid,question\n1,something else\n2,who wrote war and peace\n", encoding="utf-8")
    cfg = build_config(lexical(eval=[str(questions)], eval_text="question", index=str(files["index"])))
    result = audit([str(files["new"])], cfg)
    (leak,) = result.overlaps.to_dicts()
    assert (leak["row_id"], leak["role"], leak["target"]) == ("n3", "anchor", "eval")
    assert (leak["target_file"], leak["target_line"], leak["target_role"]) == (str(questions), 3, "question")
    assert result.metrics()["leaks"] == 1 and result.metrics()["overlaps"] == 0

    beir = tmp_path / "beir"
    beir.mkdir()
    write_jsonl(beir / "queries.jsonl", [{"_id": "q7", "text": "Who wrote War and Peace", "metadata": {}}])
    write_jsonl(
        beir / "corpus.jsonl",
        [
            {"_id": "d1", "title": "Passwords", "text": "Open settings and choose reset."},
            {"_id": "d2", "title": "", "text": "Unrelated document."},
        ],
    )
    for given in ([str(beir)], [str(beir / "queries.jsonl"), str(beir / "corpus.jsonl")]):
        result = audit([str(files["new"])], build_config(lexical(eval=given, index=str(files["index"]))))
        found = by_role(result)
        assert set(found) == {("n3", "anchor"), ("n0", "positive")}
        assert (found["n3", "anchor"]["target_id"], found["n3", "anchor"]["target_role"]) == ("q7", "query")
        assert found["n0", "positive"]["target_file"] == str(beir / "corpus.jsonl")
        assert (found["n0", "positive"]["target_id"], found["n0", "positive"]["target_role"]) == ("d1", "text")
    # The command line takes the directory too, with a report file (its inputs are checked first).
    out = tmp_path / "report.json"
    args = ["scan", str(files["new"]), "--no-embeddings", "--eval", str(beir), "--index", str(files["index"])]
    run = CliRunner().invoke(app, [*args, "--format", "json", "--output", str(out), "-q"])
    assert run.exit_code in (0, 1), run.output
    assert {(r["row_id"], r["target"]) for r in json.loads(out.read_text())["overlaps"]} == {
        ("n3", "eval"),
        ("n0", "eval"),
    }


def test_eval_pair_data_with_its_own_columns_from_the_settings_file(tmp_path, files, monkeypatch):
    evalset = write_jsonl(tmp_path / "eval.jsonl", [{"q": "who wrote war and peace?", "a": "Tolstoy."}])
    (tmp_path / "contrast-audit.toml").write_text(
        f'embeddings = false\n[eval]\npaths = ["{evalset}"]\nanchor = "q"\npositive = "a"\n', encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["scan", str(files["new"]), "--format", "json", "-q", "--index", str(files["index"])])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert [(o["row_id"], o["target_role"]) for o in report["overlaps"]] == [("n3", "anchor")]
    assert report["counts"]["leaks"] == 1


def test_with_existing_reports_only_pairs_with_a_new_row(tmp_path):
    new = write_jsonl(tmp_path / "new.jsonl", [{"anchor": "new question", "positive": "shared answer"}])
    old = write_jsonl(
        tmp_path / "old.jsonl",
        [
            {"anchor": "old question one", "positive": "shared answer"},
            {"anchor": "old question two", "positive": "old duplicate"},
            {"anchor": "old question three", "positive": "old duplicate"},
        ],
    )
    settings = lexical(minhash=False, batch_size=8, against=[str(old)], index=str(tmp_path / "i"))
    alone = audit([str(new)], build_config(settings))
    assert alone.findings.height == 0  # one new row has nothing in its batch
    result = audit([str(new)], build_config({**settings, "with_existing": True}))
    ids = result.corpus.rows.get_column("id").to_list()
    assert ids == ["0", "1", "2", "3"]  # existing rows numbered after the new ones
    assert result.corpus.rows.get_column("is_new").to_list() == [True, False, False, False]
    pairs = {(ids[a], ids[c]) for a, c in result.findings.select("anchor_row", "cand_row").iter_rows()}
    assert pairs == {("0", "1"), ("1", "0")}  # the old duplicate pair (2, 3) is not reported
    # batch of 4, query_to_doc, no hard negatives: the new row meets 3 candidates and is one of each old row's 3
    assert result.counts()["candidates"] == 3 + 3


def test_with_existing_needs_existing_data():
    from contrast_audit.errors import ConfigError

    with pytest.raises(ConfigError, match="--against"):
        build_config({"with_existing": True})


def test_index_is_reused_on_a_second_run(files, monkeypatch):
    from contrast_audit.evidence import minhash

    cfg = build_config(lexical(against=[str(files["existing"])], index=str(files["index"])))
    first = audit([str(files["new"])], cfg).overlap_info
    assert first["minhash_computed"] == 6 and first["minhash_indexed"] == 0
    second = audit([str(files["new"])], cfg)
    assert second.overlap_info["minhash_computed"] == 0 and second.overlap_info["minhash_indexed"] == 6
    assert second.overlaps.height == 2
    # A new reference text is the only one computed.
    write_jsonl(files["existing"], [*EXISTING, {"id": "e3", "anchor": "brand new", "positive": "Cars have wheels."}])
    third = audit([str(files["new"])], cfg).overlap_info
    assert (third["minhash_computed"], third["minhash_indexed"]) == (1, 6)
    # Signatures made with another shingle hash (another polars version) are never read back.
    monkeypatch.setattr(minhash, "SHINGLE_HASH", minhash.SHINGLE_HASH + " (another)")
    fourth = audit([str(files["new"])], cfg).overlap_info
    assert (fourth["minhash_computed"], fourth["minhash_indexed"]) == (7, 0)
    # Without the index nothing is read or written.
    off = audit([str(files["new"])], build_config(lexical(against=[str(files["existing"])], use_index=False)))
    assert off.overlap_info["minhash_computed"] == 7 and off.overlap_info["index"] is None


def test_neighbours_match_a_brute_force_search(monkeypatch):
    import contrast_audit.overlap as overlap

    monkeypatch.setattr(overlap, "SIM_BLOCK", 7)  # several blocks
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 8)).astype(np.float32)
    b = np.concatenate([a[:2] + 0.01, rng.normal(size=(30, 8))]).astype(np.float32)
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    found = neighbours(a, b, 0.5)
    sim = a @ b.T
    expect = {(int(i), int(j)) for i, j in zip(*np.nonzero(sim >= 0.5), strict=True)}
    assert set(found.select("new", "target").iter_rows()) == expect
    assert {(0, 0), (1, 1)} <= expect


def test_neighbours_score_stored_vectors_in_float32_block_by_block(monkeypatch):
    import contrast_audit.overlap as overlap
    from contrast_audit.embed import dequantise, quantise

    monkeypatch.setattr(overlap, "SIM_BLOCK", 5)
    rng = np.random.default_rng(1)
    a = rng.normal(size=(4, 16)).astype(np.float32)
    b = np.concatenate([a + 0.05, rng.normal(size=(12, 16))]).astype(np.float32)
    a, b = (
        quantise(a / np.linalg.norm(a, axis=1, keepdims=True)),
        quantise(b / np.linalg.norm(b, axis=1, keepdims=True)),
    )
    assert a.dtype == np.float16
    stored = neighbours(a, b, 0.3)
    scored = neighbours(dequantise(a), dequantise(b), 0.3)  # what a cold run computes from the same vectors
    assert stored.height >= 4 and stored.equals(scored)


def scan(*args: str):
    return CliRunner().invoke(app, ["scan", *args, "--no-embeddings", "-q"])


def test_baseline_marks_what_it_holds_and_the_gate_counts_only_new(tmp_path, files):
    common = [str(files["new"]), "--against", str(files["existing"]), "--index", str(files["index"])]
    gate = ["--fail-on", "overlaps>0"]
    assert scan(*common, *gate).exit_code == 1
    baseline = tmp_path / "baseline.json"
    assert scan(*common, "--format", "json", "--output", str(baseline)).exit_code == 0

    out = scan(*common, *gate, "--baseline", str(baseline), "--format", "json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert all(o["baseline"] for o in report["overlaps"]) and len(report["overlaps"]) == 2
    assert report["baseline"]["file"] == str(baseline)
    assert report["baseline"]["matched"]["overlaps"] == 2 and report["baseline"]["new"]["overlaps"] == 0

    # A new repeat is counted; the old ones stay in the baseline.
    write_jsonl(files["new"], [*NEW, {"id": "n4", "anchor": "Unrelated row about cars!", "positive": "x y z"}])
    out = scan(*common, *gate, "--baseline", str(baseline), "--format", "json")
    assert out.exit_code == 1
    counts = json.loads(out.stdout)["counts"]
    assert (counts["new"]["overlaps"], counts["in_baseline"]["overlaps"]) == (1, 2)
    markdown = scan(*common, "--baseline", str(baseline), "--format", "markdown").stdout
    assert "overlaps with existing data: 1 new, 2 in baseline" in markdown


def test_baseline_marks_findings_by_ids_and_texts_not_batches(tmp_path):
    rows = [
        {"id": "a", "anchor": "reset password", "positive": "Settings → Reset"},
        {"id": "b", "anchor": "change password", "positive": "settings → reset"},
    ]
    data = write_jsonl(tmp_path / "pairs.jsonl", rows)
    baseline = tmp_path / "b.json"
    assert scan(str(data), "--format", "json", "--output", str(baseline)).exit_code == 0
    assert len(json.loads(baseline.read_text())["findings"]) == 2
    # Another seed and more rows: other batches, the same pair.
    write_jsonl(data, [*rows, {"id": "c", "anchor": "unrelated", "positive": "Something else"}])
    out = scan(str(data), "--seed", "7", "--fail-on", "findings>0", "--baseline", str(baseline), "--format", "json")
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert [f["baseline"] for f in report["findings"]] == [True, True]
    assert report["counts"]["new"]["findings"] == 0 and report["counts"]["in_baseline"]["findings"] == 2
    # The same ids with another text are new.
    write_jsonl(data, [rows[0], {**rows[1], "positive": "SETTINGS → RESET!", "anchor": "alter password"}])
    out = scan(str(data), "--fail-on", "findings>0", "--baseline", str(baseline), "--format", "json")
    assert out.exit_code == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a readable JSON report"),
        ('{"schema_version": "0", "findings": []}', "schema version '0'"),
        ("[1, 2]", "no schema_version"),
        ('{"schema_version": "1", "findings": []}', "schema version '1'; this version reads '2'"),
        ('{"schema_version": "2", "findings": []}', "'input.row_hashes' is missing"),
        ('{"schema_version": "2", "input": {"row_hashes": [1]}}', "not a list of strings"),
        ('{"schema_version": "2", "input": {"row_hashes": ["abc"]}}', "not 16 hex digits"),
        ('{"schema_version": "2", "input": {"row_hashes": ["zzzzzzzzzzzzzzzz"]}}', "not 16 hex digits"),
        ('{"schema_version": "2", "input": {"row_hashes": []}, "overlaps": [{"role": "anchor"}]}', "lacks"),
    ],
)
def test_a_bad_baseline_exits_2(tmp_path, files, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    out = scan(str(files["new"]), "--baseline", str(bad))
    assert out.exit_code == 2
    assert message in out.stderr and str(bad) in out.stderr


def test_missing_eval_directory_layout_exits_2(tmp_path, files):
    out = scan(str(files["new"]), "--eval", str(tmp_path))
    assert out.exit_code == 2 and "queries.jsonl" in out.stderr


@pytest.mark.slow
def test_embedding_overlaps_are_found_guarded_and_indexed(tmp_path):
    old = write_jsonl(
        tmp_path / "old.jsonl",
        [
            {"anchor": "How can I change the password of my account?", "positive": "Use the settings page."},
            {"anchor": "USB-C cable, 2 m", "positive": "A cable."},
        ],
    )
    new = write_jsonl(
        tmp_path / "new.jsonl",
        [
            {"anchor": "How do I change my account password?", "positive": "Ask support."},
            {"anchor": "USB-C cable, 1 m", "positive": "Another cable."},
        ],
    )
    cfg = build_config({"minhash": False, "against": [str(old)], "index": str(tmp_path / "i")})
    result = audit([str(new)], cfg)
    found = by_role(result)
    assert ("0", "anchor") in found and ("1", "anchor") not in found  # the number guard holds
    (evidence,) = found["0", "anchor"]["evidence"]
    assert evidence["kind"] == "embedding" and evidence["score"] >= 0.825
    assert result.overlap_info["embeddings_computed"] == 4
    again = audit([str(new)], cfg).overlap_info
    assert again["embeddings_computed"] == 0 and again["embeddings_indexed"] == 4
    rerun = by_role(audit([str(new)], cfg))  # warm: vectors read from the index score as they did cold
    assert rerun["0", "anchor"]["evidence"] == found["0", "anchor"]["evidence"]


@pytest.mark.slow
def test_eval_matches_skip_the_alignment_guard_unless_asked(tmp_path):
    """A sentence plus a clause (cosine 0.88, alignment under 0.8) leaks the eval text it extends; the
    same text in existing data is no overlap (the scan's alignment bar), nor a leak at --eval-alignment 0.8."""
    sosa = "Cubs outfielder Sammy Sosa was suspended for using a corked bat"
    guitar = "On the street a man plays his guitar"
    old = write_jsonl(
        tmp_path / "old.jsonl", [{"anchor": sosa, "positive": "Sure."}, {"anchor": guitar, "positive": "Sound."}]
    )
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": sosa}, {"_id": "q2", "text": guitar}])
    new = write_jsonl(
        tmp_path / "new.jsonl",
        [
            {
                "anchor": "Sammy Sosa was suspended for using a corked bat, and he immediately appealed",
                "positive": "Yes.",
            },
            {"anchor": "A man is playing a guitar on the street", "positive": "Music."},
        ],
    )
    settings = {"minhash": False, "against": [str(old)], "eval": [str(queries)], "use_index": False}
    found = {(r["row_id"], r["target"]) for r in audit([str(new)], build_config(settings)).overlaps_table().to_dicts()}
    assert found == {("0", "eval"), ("1", "eval"), ("1", "existing")}
    strict = audit([str(new)], build_config({**settings, "eval_alignment": 0.8}))
    assert {(r["row_id"], r["target"]) for r in strict.overlaps_table().to_dicts()} == {
        ("1", "eval"),
        ("1", "existing"),
    }
    assert strict.report()["config"]["reference"]["eval_alignment"] == 0.8


def test_reference_tables_in_the_settings_file(tmp_path):
    from contrast_audit.config import ColumnMapping, load_config_file
    from contrast_audit.errors import ConfigError

    path = tmp_path / "contrast-audit.toml"
    path.write_text(
        '[against]\npaths = "old/*.jsonl"\nanchor = "q"\npositive = "a"\nnegative = "n"\n'
        '[eval]\npaths = ["eval/"]\ntext = "question"\n',
        encoding="utf-8",
    )
    settings, _ = load_config_file(path)
    ref = build_config(settings).reference
    assert ref.against == ("old/*.jsonl",) and ref.eval == ("eval/",) and ref.eval_text == "question"
    assert ref.against_columns == ColumnMapping(anchor="q", positive="a", negatives=("n",))
    assert ref.eval_columns is None
    path.write_text('[against]\ntext = "question"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown setting 'against.text'"):
        load_config_file(path)
