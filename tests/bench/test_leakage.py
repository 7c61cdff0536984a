"""The leakage case builder and its scoring, on small made-up data in the source formats."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import leakage
from bench.quality.cases import text_key
from contrast_audit.config import NormaliseConfig
from contrast_audit.normalise import normalise


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.setattr(leakage, "SIZES", {k: 4 for k in leakage.SIZES})
    monkeypatch.setattr(leakage, "EVAL_FILLER", 3)
    monkeypatch.setattr(leakage, "EXISTING_FILLER", 3)
    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    header = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\r\n"
    lines = [
        f"{i % 2}\t{i}\t{i + 1000}\tSentence one number w{i} here.\tOther phrasing w{i} there.\r\n" for i in range(80)
    ]
    (mrpc / "msr_paraphrase_train.txt").write_text(header + "".join(lines), encoding="utf-8")
    (mrpc / "msr_paraphrase_test.txt").write_text(header, encoding="utf-8")
    sts = tmp_path / "stsbenchmark"
    sts.mkdir()
    for split in ("train", "dev", "test"):
        (sts / f"sts-{split}.csv").write_text(
            "".join(f"g\tf\t2012\t{i}\t4.5\tA caption s{split}{i}.\tThe caption s{split}{i}.\n" for i in range(5)),
            encoding="utf-8",
        )
    scifact = tmp_path / "scifact_beir"
    scifact.mkdir()
    (scifact / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": str(i), "title": f"Title number t{i}", "text": "x"}) + "\n" for i in range(200)),
        encoding="utf-8",
    )
    return tmp_path


def test_build_writes_the_planned_rows(data, tmp_path):
    work = tmp_path / "work"
    case = leakage.build(data, work, seed=0)
    kinds = case["truth"].values()
    assert sorted(set(kinds)) == sorted(leakage.SIZES) and len(case["new"]) == 4 * len(leakage.SIZES)
    eval_norm = set(normalise(case["eval"], NormaliseConfig()))
    new_rows = [json.loads(line) for line in (work / "new.jsonl").read_text().splitlines()]
    existing = [json.loads(line) for line in (work / "existing.jsonl").read_text().splitlines()]
    existing_norm = set(normalise([r["anchor"] for r in existing], NormaliseConfig()))
    for row in new_rows:
        texts = normalise([row["anchor"], row["positive"]], NormaliseConfig())
        kind = case["truth"][row["id"]]
        assert any(t in eval_norm for t in texts) == (kind == "leak-copy")  # copies normalise equal
        assert any(t in existing_norm for t in texts) == (kind == "repeat-copy")
    assert set(case["partners"]) == {i for i, k in case["truth"].items() if "paraphrase" in k or "hard" in k}
    queries = (work / "eval" / "queries.jsonl").read_text().splitlines()
    assert len(queries) == len(case["eval"]) == 4 * 3 + 3
    # Only copies repeat a sentence: every other text is used once.
    keys = [text_key(t) for t in case["eval"]]
    assert len(keys) == len(set(keys))


def test_scores_and_the_exact_hash_rule():
    assert leakage.deepchecks_key("  Hello,  World! ") == leakage.deepchecks_key("hello world")
    flagged = np.array([True, True, False, False])
    truth = np.array([True, False, True, False])
    assert leakage.prf(flagged, truth) == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "tp": 1, "fp": 1, "fn": 1}
