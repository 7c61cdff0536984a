"""The detection-quality harness (bench/quality): case builders on tiny data written here, the scoring
math, and the peer rules. No model: embeddings are injected."""

from __future__ import annotations

import csv
import io
import json
import sys
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench.quality import cases, peers, run
from bench.quality.cases import build_mrpc, build_qa_split, build_stsb, text_key
from bench.quality.score import (
    Score,
    finding_masks,
    findings_from_report,
    margin_line,
    pooled,
    report_kinds,
    score,
    truth_from_records,
)

# --------------------------------------------------------------------------- tiny data sets

MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"


def _mrpc_line(q: int, i: int, s1: str, s2: str) -> str:
    return f"{q}\t{i}\t{i + 1}\t{s1}\t{s2}\r\n"


def write_mrpc(root: Path) -> None:
    d = root / "mrpc"
    d.mkdir(parents=True)
    train = [
        _mrpc_line(1, 10, "The cat sat on the mat today.", "Today the cat was sitting on the mat."),
        _mrpc_line(1, 20, 'He said "no" to the offer.', 'The offer got a "no" from him.'),
        _mrpc_line(0, 30, "Shares rose 2 percent in Tokyo.", "Shares fell 3 percent in London."),
        _mrpc_line(0, 40, "The senate passed the bill on Monday.", "The house rejected a similar bill on Friday."),
        # shares a sentence with the first pair (case and punctuation differ): must be dropped
        _mrpc_line(1, 50, "the cat sat on the mat today", "A cat rested on a mat."),
    ]
    test = [
        _mrpc_line(1, 60, "Rain is expected across the north.", "Forecasters expect rain in the north."),
        _mrpc_line(0, 70, "The company hired 200 workers.", "The company laid off 150 workers."),
        _mrpc_line(1, 80, "The match was postponed by a week.", "Officials delayed the match for one week."),
        _mrpc_line(0, 90, "Oil prices climbed to $40 a barrel.", "Gold prices slipped to $400 an ounce."),
    ]
    (d / "msr_paraphrase_train.txt").write_bytes((MRPC_HEADER + "".join(train)).encode("utf-8"))
    (d / "msr_paraphrase_test.txt").write_bytes((MRPC_HEADER + "".join(test)).encode("utf-8"))


def write_sts(root: Path) -> None:
    d = root / "stsbenchmark"
    d.mkdir(parents=True)
    rows = {
        "train": [
            ("4.800", "A man is playing a guitar.", "A man plays the guitar.", ""),
            ("2.500", "A woman is slicing onions.", "A woman is cutting a tomato.", ""),
            ("0.200", "A dog runs in the park.", "The stock market closed higher.", ""),  # neither band
            ("4.000", 'A "quoted" word opens here.', "Here a word is quoted.", "\textra\tcolumns"),
        ],
        "dev": [
            ("3.000", "Two kids play soccer outside.", "Two children play football indoors.", ""),
            ("3.400", "A bird sits on a wire.", "A bird perches on a cable.", ""),  # between the bands
        ],
        "test": [
            ("5.000", "The train left the station.", "The train departed from the station.", ""),
            ("2.000", "A chef is cooking pasta.", "A chef is serving soup.", "\tsrc1\tsrc2"),
        ],
    }
    for split, items in rows.items():
        lines = [
            f"main-captions\tMSRvid\t2012test\t{i:04d}\t{score}\t{s1}\t{s2}{extra}\n"
            for i, (score, s1, s2, extra) in enumerate(items)
        ]
        (d / f"sts-{split}.csv").write_text("".join(lines), encoding="utf-8")


SCIFACT_DOCS = {
    "10": (
        "Alpha protein regulates bone growth",
        [
            "Alpha protein is abundant in bone.",
            "We studied 40 mice.",
            "Bone length doubled with alpha.",
            "Alpha knockouts had short bones.",
        ],
    ),
    "20": (
        "Beta cells secrete insulin",
        [
            "Beta cells sit in the pancreas.",
            "Insulin secretion rose tenfold.",
            "Glucose uptake followed insulin.",
            "It's a classic pathway.",
        ],
    ),
    "30": (
        "Gamma rays damage kidney tissue",
        ["Kidneys were irradiated.", "Gamma exposure caused tubular necrosis.", "Controls were unaffected."],
    ),
    "31": (
        "Gamma rays damage liver tissue",
        ["Livers were irradiated.", "Hepatocytes died after exposure.", "Repair took weeks."],
    ),
    "32": ("Kidney function in athletes", ["Athletes were sampled.", "Creatinine was normal."]),
    "40": (
        "Delta virus spreads fast",
        ["The delta virus was sequenced.", "Transmission doubled in a month.", "Masks slowed it."],
    ),
    "41": ("Delta virus spreads slowly", ["A slow delta lineage was found.", "It spread over years."]),
    "42": ("Delta virus mutation rates", ["Mutation rates were measured.", "They were high in delta strains."]),
    "50": ("Epsilon hormone and sleep", ["Sleep was tracked.", "Epsilon levels peaked at night."]),
}

SCIFACT_CLAIMS = {
    "1": ("Alpha protein drives bone elongation.", {"10": [[2], [3]]}),
    "2": ("Beta cells increase insulin secretion.", {"20": [[1], [2]]}),
    "3": ("Gamma irradiation injures the kidney.", {"30": [[1]]}),
    "4": ("The delta virus transmits quickly.", {"40": [[1]]}),
    "5": ("Epsilon hormone regulates sleep.", {}),  # cited, no rationale: never used
    "6": ("Alpha knockout mice have short bones.", {"10": [[3], [0]]}),  # competes for document 10
}
SCIFACT_QRELS = {
    "train": [("1", "10"), ("3", "30"), ("5", "50"), ("6", "10")],
    "test": [("2", "20"), ("4", "40"), ("4", "41")],
}


def numpy_repr(sentences: list[str]) -> str:
    return "[" + "\n ".join(repr(s) for s in sentences) + "]"


def write_scifact(root: Path) -> None:
    d = root / "scifact_beir"
    (d / "qrels").mkdir(parents=True)
    (d / "original_scifact_hf_csv").mkdir()
    (d / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": doc, "title": title, "text": " ".join(sents)}) + "\n"
            for doc, (title, sents) in SCIFACT_DOCS.items()
        ),
        encoding="utf-8",
    )
    (d / "queries.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "_id": cid,
                    "text": text,
                    "metadata": {
                        doc: [{"sentences": s, "label": "SUPPORT"} for s in sets] for doc, sets in meta.items()
                    },
                }
            )
            + "\n"
            for cid, (text, meta) in SCIFACT_CLAIMS.items()
        ),
        encoding="utf-8",
    )
    for split, rows in SCIFACT_QRELS.items():
        body = "".join(f"{q}\t{doc}\t1\n" for q, doc in rows)
        (d / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + body, encoding="utf-8")
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["doc_id", "title", "abstract", "structured"])
    for doc, (title, sents) in SCIFACT_DOCS.items():
        writer.writerow([doc, title, numpy_repr(sents), "False"])
    with zipfile.ZipFile(d / "original_scifact_hf_csv" / "scifact.zip", "w") as zf:
        zf.writestr("corpus_train.csv", buf.getvalue())


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    write_mrpc(root)
    write_sts(root)
    write_scifact(root)
    return root


# --------------------------------------------------------------------------- invariants of every case


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def check_case_files(out: Path) -> tuple[list[dict], list[list[str]], list[dict]]:
    rows = read_jsonl(out / "pairs.jsonl")
    plan = [b["rows"] for b in read_jsonl(out / "plan.jsonl")]
    truth = read_jsonl(out / "truth.jsonl")
    # every row in exactly one batch
    planned = [r for batch in plan for r in batch]
    assert sorted(planned) == sorted(r["id"] for r in rows)
    assert len(set(planned)) == len(planned)
    # no two rows share a text
    owner: dict[str, str] = {}
    for r in rows:
        assert set(r) == {"id", "anchor", "positive", "source"}
        for key in {text_key(r["anchor"]), text_key(r["positive"])}:
            assert owner.setdefault(key, r["id"]) == r["id"], f"{r['id']} shares a text with {owner[key]}"
    # the truth lists every ordered in-batch pair exactly once
    expected = Counter((a, c) for batch in plan for a in batch for c in batch if a != c)
    got = Counter((t["anchor_id"], t["candidate_id"]) for t in truth)
    assert got == expected and max(got.values()) == 1
    assert all(t["label"] in (0, 1) and t["kind"] in cases.KINDS for t in truth)
    assert all((t["label"] == 1) == (t["kind"] == "paraphrase") for t in truth)
    # labelled relations are symmetric and each labelled row has exactly one partner, in its batch
    labelled = {(t["anchor_id"], t["candidate_id"]): t["kind"] for t in truth if t["kind"] != "random"}
    assert all(labelled.get((c, a)) == k for (a, c), k in labelled.items())
    partners = Counter(a for a, _ in labelled)
    assert set(partners.values()) == {1} and set(partners) == set(planned)
    return rows, plan, truth


def kinds_per_batch(plan: list[list[str]], truth: list[dict]) -> list[set[str]]:
    kind_of = {t["anchor_id"]: t["kind"] for t in truth if t["kind"] != "random"}
    return [{kind_of[r] for r in batch} for batch in plan]


# --------------------------------------------------------------------------- case builders


def test_mrpc_case_rows_plan_and_truth(data_dir: Path, tmp_path: Path) -> None:
    case = build_mrpc(data_dir, tmp_path / "mrpc", max_pairs=10, batch_size=4, seed=3)
    rows, plan, truth = check_case_files(tmp_path / "mrpc")
    # 5 paraphrase pairs offered, one shares "the cat sat on the mat today" with another: 4 kept
    assert case.pairs == {"paraphrase": 4, "distractor": 4}
    assert case.dropped["paraphrase_shares_text"] == 1
    assert all(r["anchor"] == r["positive"] for r in rows)  # SimCSE-style rows
    assert any(r["anchor"] == 'He said "no" to the offer.' for r in rows)
    # both kinds in every full batch (two labelled pairs per batch of 4)
    assert all(kinds == {"paraphrase", "distractor"} for kinds in kinds_per_batch(plan, truth))
    assert case.positives == 8 and case.batches == 4 and sum(case.truth.values()) == len(truth)
    assert json.loads((tmp_path / "mrpc" / "case.json").read_text())["pairs"] == case.pairs


def test_mrpc_case_is_deterministic_and_capped(data_dir: Path, tmp_path: Path) -> None:
    build_mrpc(data_dir, tmp_path / "a", max_pairs=2, batch_size=4, seed=7)
    build_mrpc(data_dir, tmp_path / "b", max_pairs=2, batch_size=4, seed=7)
    for name in ("pairs.jsonl", "plan.jsonl", "truth.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert json.loads((tmp_path / "a" / "case.json").read_text())["pairs"] == {"paraphrase": 2, "distractor": 2}


def test_tune_and_test_parts_split_the_source_pairs(data_dir: Path, tmp_path: Path) -> None:
    keys = [f"mrpc-train-{i}" for i in range(200)]
    tune = {k for k in keys if cases.in_part(k, "tune")}
    test = {k for k in keys if cases.in_part(k, "test")}
    assert tune and test and not tune & test and tune | test == set(keys)
    assert all(cases.in_part(k, "all") for k in keys)
    with pytest.raises(ValueError, match="part must be one of"):
        cases.in_part("x", "dev")
    halves = {}
    for part in ("tune", "test"):
        build_mrpc(data_dir, tmp_path / part, max_pairs=10, batch_size=4, seed=3, part=part)
        rows = [json.loads(line) for line in (tmp_path / part / "pairs.jsonl").read_text().splitlines()]
        halves[part] = {r["id"].rsplit("-", 1)[0] for r in rows}  # the source pair of each row
        assert halves[part] and all(cases.in_part(uid, part) for uid in halves[part])
        assert json.loads((tmp_path / part / "case.json").read_text())["params"]["part"] == part
    assert not halves["tune"] & halves["test"]


def test_mrpc_rejects_a_malformed_file(data_dir: Path, tmp_path: Path) -> None:
    path = data_dir / "mrpc" / "msr_paraphrase_test.txt"
    path.write_bytes(path.read_bytes() + b"1\t1\t2\tonly four fields\r\n")
    with pytest.raises(ValueError, match=r"msr_paraphrase_test.txt:6: expected 5 tab-separated fields"):
        build_mrpc(data_dir, tmp_path / "out")


def test_sts_bands_no_csv_quoting_and_extra_columns(data_dir: Path, tmp_path: Path) -> None:
    pairs = cases.read_sts(data_dir / "stsbenchmark" / "sts-train.csv", "train")
    assert [(p.label, p.text1) for p in pairs] == [
        (1, "A man is playing a guitar."),
        (0, "A woman is slicing onions."),
        (1, 'A "quoted" word opens here.'),
    ]
    case = build_stsb(data_dir, tmp_path / "stsb", max_pairs=10, batch_size=4, seed=0)
    rows, plan, truth = check_case_files(tmp_path / "stsb")
    assert case.pairs == {"paraphrase": 3, "distractor": 3}  # 3.4 and 0.2 left out; 2.0 and 3.0 kept
    texts = {r["anchor"] for r in rows}
    assert "A bird sits on a wire." not in texts and "Two kids play soccer outside." in texts
    assert "A chef is serving soup." in texts  # the row with two extra columns


def test_balanced_cut() -> None:
    assert cases.balanced_cut([10, 10, 10, 10], lambda k: True) == 2
    assert cases.balanced_cut([10, 10, 10, 10], lambda k: k == 3) == 3
    assert cases.balanced_cut([10], lambda k: True) is None
    assert cases.balanced_cut([10, 10, 10], lambda k: False) is None


def test_numpy_string_list_keeps_sentences_apart() -> None:
    assert cases._numpy_string_list(numpy_repr(["a b.", "It's c.", 'say "d".'])) == ["a b.", "It's c.", 'say "d".']


def test_qa_split_case(data_dir: Path, tmp_path: Path) -> None:
    case = build_qa_split(data_dir, tmp_path / "qa", max_pairs=10, batch_size=4, seed=1)
    rows, plan, truth = check_case_files(tmp_path / "qa")
    assert case.pairs == {"paraphrase": 2, "distractor": 2}
    by_id = {r["id"]: r for r in rows}
    labelled = {(t["anchor_id"], t["candidate_id"]): t["kind"] for t in truth if t["kind"] != "random"}
    pair_of = dict(labelled)
    docs = SCIFACT_DOCS
    # same-document pairs: each half holds a complete rationale of the claim
    claim_rows = [r for r in rows if r["id"].endswith("-claim")]
    claims_used = {r["id"].split("-")[1][1:] for r in claim_rows}
    assert "5" not in claims_used  # no rationale
    assert len(claims_used & {"1", "6"}) == 1  # both claim document 10; it is used once
    for (a, c), kind in pair_of.items():
        if not a.endswith("-claim"):
            continue
        claim = a.split("-")[1][1:]
        doc = c.split("-")[1][1:]
        sets = SCIFACT_CLAIMS[claim][1]
        if kind == "paraphrase":
            assert list(sets) == [doc]
            rationale = [docs[doc][1][s[0]] for s in sets[doc]]
            assert any(s in by_id[a]["positive"] for s in rationale)
            assert any(s in by_id[c]["positive"] for s in rationale)
            assert by_id[c]["anchor"] == docs[doc][0]
        else:
            own = next(iter(sets))
            assert docs[own][1][sets[own][0][0]] in by_id[a]["positive"]
            # most similar title not judged for the claim: 31 for 30; 42 for 40 (41 is in claim 4's qrels)
            assert doc == {"30": "31", "40": "42"}[own]
    assert all(kinds == {"paraphrase", "distractor"} for kinds in kinds_per_batch(plan, truth))


def test_plan_rejects_odd_batch_size() -> None:
    with pytest.raises(ValueError, match="even number"):
        cases.plan_batches([], 5, 0)


def test_check_disjoint_names_both_rows() -> None:
    rows = [cases.Row("a", "Hello, world!", "x y", "s"), cases.Row("b", "hello world", "z", "s")]
    with pytest.raises(ValueError, match="'a' and 'b' share a text"):
        cases.check_disjoint(rows)


# --------------------------------------------------------------------------- scoring


def small_truth():
    records = [
        {"anchor_id": "a", "candidate_id": "b", "label": 1, "kind": "paraphrase"},
        {"anchor_id": "b", "candidate_id": "a", "label": 1, "kind": "paraphrase"},
        {"anchor_id": "a", "candidate_id": "c", "label": 0, "kind": "distractor"},
        {"anchor_id": "c", "candidate_id": "a", "label": 0, "kind": "distractor"},
        {"anchor_id": "b", "candidate_id": "c", "label": 0, "kind": "random"},
        {"anchor_id": "c", "candidate_id": "b", "label": 0, "kind": "random"},
    ]
    return truth_from_records(records)


def finding(a: str, c: str, *kinds: str, direction: str = "query_to_doc", role: str = "positive") -> dict:
    return {
        "anchor_id": a,
        "candidate_id": c,
        "direction": direction,
        "candidate_role": role,
        "severity": "likely",
        "evidence": [{"kind": k, "score": 0.9, "threshold": 0.8} for k in kinds],
    }


def test_scoring_overall_and_per_kind() -> None:
    truth = small_truth()
    report = {
        "counts": {"by_kind": {"exact": 0, "minhash": 1, "embedding": 3}},
        "findings": [
            finding("a", "b", "embedding", "minhash"),
            finding("a", "c", "embedding"),
            finding("b", "c", "embedding", "margin"),
            finding("b", "a", "exact", direction="doc_to_doc"),  # other direction: ignored
            finding("c", "b", "exact", role="negative_1"),  # hard negative: ignored
            finding("z", "a", "embedding"),  # not in the truth
        ],
    }
    kinds = report_kinds(report)
    assert kinds == ["embedding", "exact", "margin", "minhash"]
    masks, outside = finding_masks(truth, findings_from_report(report), kinds)
    assert outside == 1
    overall = score(truth, masks["all"], outside)
    assert (overall.flagged, overall.true_positives, overall.fp_distractor, overall.fp_random) == (4, 1, 1, 1)
    assert overall.precision == pytest.approx(1 / 4)
    assert overall.recall == pytest.approx(1 / 2)
    assert overall.f1 == pytest.approx(2 * 0.25 * 0.5 / 0.75)
    minhash = score(truth, masks["minhash"])
    assert (minhash.precision, minhash.recall, minhash.f1) == (1.0, 0.5, pytest.approx(2 / 3))
    exact = score(truth, masks["exact"])
    assert exact.flagged == 0 and exact.precision is None and exact.recall == 0.0 and exact.f1 == 0.0


def test_pooled_scores_and_margin_line() -> None:
    a = Score(pairs=10, positives=2, flagged=2, true_positives=1, fp_distractor=1, fp_random=0)
    b = Score(pairs=20, positives=2, flagged=0, true_positives=0, fp_distractor=0, fp_random=0)
    total = pooled([a, b])
    assert (total.pairs, total.positives, total.flagged, total.true_positives) == (30, 4, 2, 1)
    assert total.recall == 0.25
    line = margin_line(b, {"p1": a, "p2": b})
    assert "Best peer F1: 0.500 (p1)" in line and "margin over best peer -0.500" in line


def test_duplicate_truth_pair_is_an_error() -> None:
    rec = {"anchor_id": "a", "candidate_id": "b", "label": 1, "kind": "paraphrase"}
    with pytest.raises(ValueError, match="appears twice"):
        truth_from_records([rec, rec])


# --------------------------------------------------------------------------- peer rules


def test_gist_rule_is_strict_and_uses_the_margin() -> None:
    sim_ap = np.array([0.8, 0.8, 0.8, 1.0, 1.0, -0.5], dtype=np.float32)
    sim_ac = np.array([0.81, 0.8, 0.79, 0.99, 1.0, -0.4], dtype=np.float32)
    assert peers.gist_mask(sim_ac, sim_ap).tolist() == [True, False, False, False, False, True]
    # SimCSE rows: sim(a, p) = 1, so only a candidate scoring above 1 is masked
    assert not peers.gist_mask(np.array([0.999], np.float32), np.array([1.0], np.float32)).any()
    assert peers.gist_mask(sim_ac, sim_ap, margin=0.05).tolist() == [True, True, True, True, True, True]
    rel = peers.gist_mask(sim_ac, sim_ap, margin=0.1, margin_strategy="relative")
    assert rel.tolist() == [True, True, True, True, True, True]  # -0.4 > -0.5 - 0.05
    with pytest.raises(ValueError):
        peers.gist_mask(sim_ac, sim_ap, margin_strategy="percentage")


def test_relative_margin_rule_matches_mine_hard_negatives() -> None:
    sim_ap = np.array([1.0, 1.0, 0.8, 0.8, -0.2, -0.2], dtype=np.float32)
    sim_ac = np.array([0.96, 0.94, 0.77, 0.75, -0.205, -0.215], dtype=np.float32)
    # threshold = p - |p| * 0.05: 0.95, 0.76, -0.21 (not -0.19: the magnitude, not p * 0.95)
    assert peers.relative_margin_mask(sim_ac, sim_ap).tolist() == [True, False, True, False, True, False]


def test_exact_identity_rule() -> None:
    mask = peers.exact_identity_mask(["q", "q", "q"], ["p", "p", "p"], ["q", "p", "P"])
    assert mask.tolist() == [True, True, False]


def test_similarities_embed_each_text_once() -> None:
    calls: list[list[str]] = []
    vectors = {"a": [1.0, 0.0], "b": [0.0, 2.0], "c": [3.0, 3.0]}

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.array([vectors[t] for t in texts], dtype=np.float32)

    rows = {"r1": ("a", "a"), "r2": ("b", "b"), "r3": ("c", "a")}
    texts = peers.pair_texts(rows, ["r1", "r1", "r3"], ["r2", "r3", "r1"])
    sim_ac, sim_ap = peers.similarities(texts, embed)
    assert len(calls) == 1 and sorted(calls[0]) == ["a", "b", "c"]
    assert sim_ac == pytest.approx([0.0, 1.0, np.sqrt(0.5)])
    assert sim_ap == pytest.approx([1.0, 1.0, np.sqrt(0.5)])
    masks, _ = peers.run_peers(texts, embed)
    assert masks["exact-identity"].tolist() == [False, True, True]
    # an exact duplicate of the positive scores the same as the positive: GIST (strict >) keeps it
    assert masks["gist-guide"].tolist() == [False, False, False]


# --------------------------------------------------------------------------- the harness end to end

FAKE_SCAN = r"""
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
pairs = Path(args[args.index("scan") + 1])
out = Path(args[args.index("--output") + 1])
truth = [json.loads(l) for l in (pairs.parent / "truth.jsonl").read_text().splitlines()]
plan = (pairs.parent / "plan.jsonl").read_text().splitlines()
findings = [
    {"anchor_id": t["anchor_id"], "candidate_id": t["candidate_id"], "direction": "query_to_doc",
     "candidate_role": "positive", "severity": "likely",
     "evidence": [{"kind": "embedding", "score": 0.9, "threshold": 0.85}]}
    for t in truth if t["kind"] in ("paraphrase", "distractor")
]
report = {"counts": {"batches": len(plan), "candidates_by_direction": {"query_to_doc": len(truth)},
          "by_kind": {"exact": 0, "embedding": len(findings)}}, "findings": findings}
out.write_text(json.dumps(report))
Path(os.environ["FAKE_SCAN_ARGS"]).write_text(json.dumps(args))
sys.exit(int(os.environ.get("FAKE_SCAN_EXIT", "0")))
"""


def bag_of_words(texts: list[str]) -> np.ndarray:
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for i, t in enumerate(texts):
        for w in text_key(t).split():
            out[i, sum(map(ord, w)) % 64] += 1.0
    return out


def test_run_end_to_end_with_a_fake_scan(data_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    script = tmp_path / "fake_scan.py"
    script.write_text(FAKE_SCAN)
    monkeypatch.setenv("FAKE_SCAN_ARGS", str(tmp_path / "scan_args.json"))
    monkeypatch.setenv("FAKE_SCAN_EXIT", "1")  # a failed gate is still a report
    monkeypatch.setattr(peers, "default_embedder", lambda **kw: bag_of_words)
    out = tmp_path / "results.md"
    argv = [
        "--data", str(data_dir), "--work", str(tmp_path / "work"), "--cases", "mrpc", "qa-split",
        "--max-pairs", "3", "--batch-size", "4", "--out", str(out),
        "--scan-cmd", f"{sys.executable} {script}", "--scan-args", "--max-hops 0",
    ]  # fmt: skip
    assert run.main(argv) == 0
    scan_args = json.loads((tmp_path / "scan_args.json").read_text())
    assert scan_args[-2:] == ["--max-hops", "0"] and "--plan" in scan_args and "--quiet" in scan_args
    text = out.read_text()
    assert capsys.readouterr().out == text + "\n"
    assert "## mrpc" in text and "## qa-split" in text and "## Overall" in text
    # the fake flags every labelled pair: recall 1, precision 1/2 (as many distractor records as paraphrase)
    lines = [r for r in text.splitlines() if r.startswith("| contrast-audit scan")]
    assert len(lines) == 3 and all("| 0.500 | 1.000 | 0.667 |" in r for r in lines)
    assert "scan, evidence `embedding`" in text and "peer: topk-percpos-95" in text
    assert "--max-hops 0" in text and "Wall time: build" in text


def test_run_reports_a_failing_scan(data_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    script = tmp_path / "fake_scan.py"
    script.write_text(FAKE_SCAN)
    monkeypatch.setenv("FAKE_SCAN_ARGS", str(tmp_path / "scan_args.json"))
    monkeypatch.setenv("FAKE_SCAN_EXIT", "2")
    argv = ["--data", str(data_dir), "--work", str(tmp_path / "w"), "--cases", "stsb", "--batch-size", "4",
            "--no-peers", "--out", str(tmp_path / "r.md"), "--scan-cmd", f"{sys.executable} {script}"]  # fmt: skip
    assert run.main(argv) == 2
    assert "stsb: scan exited 2" in capsys.readouterr().err
    assert not (tmp_path / "r.md").exists()


# --------------------------------------------------------------------------- the tuner's selection arithmetic


def test_precision_bound_is_the_wilson_lower_end_over_distinct_pairs() -> None:
    from bench.quality.tune import precision_bound

    # 90 of 100 distinct pairs (200 ordered records): the textbook 95% Wilson interval starts at 0.8256.
    assert precision_bound(0.9, 200, 1.96) == pytest.approx(0.8256, abs=1e-4)
    assert precision_bound(0.9, 200, 0.0) == pytest.approx(0.9)  # z = 0: the point estimate
    assert precision_bound(0.9, 0, 1.0) == 0.0  # nothing flagged proves nothing
    # More evidence, a tighter bound; always below the estimate.
    bounds = [precision_bound(0.95, n, 1.0) for n in (20, 200, 2000)]
    assert bounds == sorted(bounds) and bounds[-1] < 0.95


def test_tuner_flags_mirror_the_policy() -> None:
    from bench.quality.tune import flags, prf

    col = {
        "s_pc": np.array([0.9, 0.9, 0.7, 0.7, 0.95]),
        "s_aa": np.zeros(5),
        "s_ac": np.array([0.1, 0.1, 0.8, 0.8, 0.1]),
        "s_ap": np.array([1.0, 1.0, 0.9, 0.9, 1.0]),
        "jaccard": np.zeros(5),
        "guard": np.array([False, False, False, False, True]),
        "align_pc": np.array([0.9, 0.5, 1.0, 1.0, 1.0]),
        "align_aa": np.ones(5),
        "align_row": np.ones(5),
        "same_ap": np.array([False, False, False, True, False]),
    }
    # near-duplicate with alignment; vetoed by alignment; margin rule; margin skipped when a == p; number guard
    assert flags(col, 0.875, 0.65, 0.25, 0.7, 0.84).tolist() == [True, False, True, False, False]
    label = np.array([True, True, False, False, True])
    p, r, f1, flagged = prf(label, flags(col, 0.875, 0.65, 0.25, 0.7, 0.84))
    assert (p, r, flagged) == (0.5, 1 / 3, 2) and f1 == pytest.approx(0.4)
