"""The cases of the other genres (PAWS, Flickr8k captions, SemEval cQA, natural batches) built from
tiny data written here."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from bench.quality.cases import build_captions, build_cqa, build_natural, build_paws, text_key


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_paws(root: Path) -> None:
    d = root / "paws_wiki"
    d.mkdir(parents=True)
    rows = [
        ("1", "The river flows north to the sea .", "The river runs north into the sea .", "1"),
        ("2", "Anna met Bob in Paris in 1990 .", "Bob met Anna in Paris in 1990 .", "0"),
        ("3", "The same text twice .", "The same text twice .", "1"),  # identical: left out
        ("4", "He moved from Berlin to Rome .", "He moved from Rome to Berlin .", "0"),
        ("5", "The band released its album in May .", "In May the band released its album .", "1"),
    ]
    (d / "dev.tsv").write_text("".join("\t".join(r) + "\r\n" for r in rows[:3]))
    (d / "test.tsv").write_text("".join("\t".join(r) + "\r\n" for r in rows[3:]))


def test_paws_case_is_simcse_style_with_word_swapped_distractors(tmp_path: Path) -> None:
    write_paws(tmp_path / "data")
    case = build_paws(tmp_path / "data", tmp_path / "out", batch_size=4)
    rows = _jsonl(tmp_path / "out" / "pairs.jsonl")
    assert all(r["anchor"] == r["positive"] for r in rows)
    assert case.pairs == {"paraphrase": 2, "distractor": 2}
    assert "The same text twice ." not in {r["anchor"] for r in rows}


def write_flickr(root: Path, n: int = 12) -> None:
    d = root / "flickr8k_captions"
    d.mkdir(parents=True)
    topics = ["dog runs on grass", "child climbs stairs", "man rides bike", "woman reads book"]
    lines = []
    for i in range(n):
        for k in range(5):
            lines.append(f"img{i}.jpg#{k}\tA {topics[i % 4]} number {i} view {k} .\n")
    (d / "Flickr8k.token.txt").write_text("".join(lines))
    # img0's caption judged (by all three experts) to fit img4; the crowd says img1's fits img5
    (d / "ExpertAnnotations.txt").write_text("img0.jpg\timg4.jpg#2\t4\t4\t4\nimg2.jpg\timg6.jpg#1\t4\t3\t4\n")
    (d / "CrowdFlowerAnnotations.txt").write_text("img1.jpg\timg5.jpg#0\t0.75\t3\t1\nimg3.jpg\timg7.jpg#0\t0.5\t1\t1\n")


def test_captions_case_rows_share_no_caption_and_distractors_are_never_judged_fits(tmp_path: Path) -> None:
    write_flickr(tmp_path / "data")
    case = build_captions(tmp_path / "data", tmp_path / "out", max_pairs=3, batch_size=4)
    rows = _jsonl(tmp_path / "out" / "pairs.jsonl")
    keys = [text_key(t) for r in rows for t in (r["anchor"], r["positive"])]
    assert len(keys) == len(set(keys))
    assert case.pairs == {"paraphrase": 3, "distractor": 3}
    truth = _jsonl(tmp_path / "out" / "truth.jsonl")
    distractors = {
        (t["anchor_id"].split("-")[0], t["candidate_id"].split("-")[0]) for t in truth if t["kind"] == "distractor"
    }
    assert distractors and not distractors & {
        ("img0.jpg", "img4.jpg"),
        ("img4.jpg", "img0.jpg"),
        ("img1.jpg", "img5.jpg"),
        ("img5.jpg", "img1.jpg"),
    }
    for t in truth:
        same = t["anchor_id"].split("-")[0] == t["candidate_id"].split("-")[0]
        assert (t["kind"] == "paraphrase") == same


def test_natural_case_labels_every_in_batch_pair(tmp_path: Path) -> None:
    write_flickr(tmp_path / "data")
    case = build_natural(tmp_path / "data", tmp_path / "out", max_pairs=6, draws=2, batch_size=4)
    truth = _jsonl(tmp_path / "out" / "truth.jsonl")
    plan = _jsonl(tmp_path / "out" / "plan.jsonl")
    assert case.rows == 24 and sum(len(b["rows"]) for b in plan) == 24
    assert len(truth) == sum(len(b["rows"]) * (len(b["rows"]) - 1) for b in plan)
    for t in truth:
        a, c = t["anchor_id"].split("-")[0], t["candidate_id"].split("-")[0]
        fit = {a, c} in ({"img0.jpg", "img4.jpg"}, {"img1.jpg", "img5.jpg"})
        assert t["label"] == int(a == c or fit)
        assert t["kind"] == ("paraphrase" if a == c else "judged-fit" if fit else "random")
    assert build_natural(tmp_path / "data", tmp_path / "again", max_pairs=6, draws=2, batch_size=4).truth == case.truth


def test_cqa_case_pairs_perfect_matches_and_relevant_distractors(tmp_path: Path) -> None:
    d = tmp_path / "data" / "semeval2016_task3_cqa"
    d.mkdir(parents=True)
    records = []

    def rel(o: str, k: int, label: str, body: str = "body") -> None:
        records.append(
            {"split": "dev", "orgq_id": o, "orgq_subject": f"subject {o}", "orgq_body": f"question {o} body",
             "relq_id": f"{o}_R{k}", "relq_rank": k, "relq_subject": f"subject {o} {k}",
             "relq_body": f"{body} {o} {k}" if body else "", "label": label}
        )  # fmt: skip

    for k, label in enumerate(["PerfectMatch", "Relevant", "PerfectMatch", "PerfectMatch"], 1):
        rel("Q1", k, label)
    rel("Q2", 1, "Irrelevant")
    rel("Q2", 2, "Relevant")
    rel("Q3", 1, "PerfectMatch", body="")  # no body: not a row
    rel("Q3", 2, "Irrelevant")
    (d / "subtaskB_pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    case = build_cqa(tmp_path / "data", tmp_path / "out", batch_size=4)
    rows = {r["id"]: r for r in _jsonl(tmp_path / "out" / "pairs.jsonl")}
    truth = _jsonl(tmp_path / "out" / "truth.jsonl")
    labelled = Counter((t["anchor_id"], t["candidate_id"], t["label"]) for t in truth if t["kind"] != "random")
    assert ("Q1", "Q1_R1", 1) in labelled and ("Q1_R3", "Q1_R4", 1) in labelled
    assert ("Q2", "Q2_R2", 0) in labelled  # the Relevant one before the Irrelevant
    assert "Q3_R1" not in rows
    assert rows["Q1"]["anchor"] == "subject Q1" and rows["Q1"]["positive"] == "question Q1 body"
    assert case.pairs["paraphrase"] == 2
    # questions of different originals are unjudged, and never scored
    assert {t["kind"] for t in truth} == {"paraphrase", "distractor", "unjudged"}
    from bench.quality.score import read_truth, score

    t = read_truth(tmp_path / "out" / "truth.jsonl")
    everything = score(t, np.ones(len(t), dtype=bool))
    assert everything.pairs == everything.flagged == sum(1 for r in truth if r["kind"] != "unjudged")
