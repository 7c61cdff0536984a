"""The mined-negatives measurement (bench/quality/mined.py) on tiny collections written here."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.quality import mined

DOCS = {
    "1": ("Library catalogues", "Card catalogues and online catalogues in academic libraries."),
    "2": ("Online catalogues", "Online public access catalogues replace card catalogues in libraries."),
    "3": ("Citation analysis", "Citation counts measure the influence of scientific journals."),
    "4": ("Journal impact", "Impact factors rank scientific journals by citation counts."),
    "5": ("Indexing", "Automatic indexing assigns subject terms to documents."),
}
QUERIES = {
    "1": "How do libraries move from card catalogues to online catalogues?",
    "2": "How are journals ranked by citations?",
}
RELEVANT = [("1", "1"), ("1", "2"), ("2", "3")]


def write_cisi(root: Path) -> None:
    d = root / "cisi"
    d.mkdir(parents=True)
    (d / "CISI.ALL").write_text(
        # Document 2's markers carry trailing blanks, as some of CISI.ALL's do.
        "".join(
            f".I {i}\n.T{' ' * (i == '2')}\n{t}\n.A{' ' * (i == '2')}\nSomeone\n.W\n{w}\n.X\n{i}\t5\t{i}\n"
            for i, (t, w) in DOCS.items()
        ),
        encoding="latin-1",
    )
    (d / "CISI.QRY").write_text("".join(f".I {q}\n.W\n{w}\n" for q, w in QUERIES.items()), encoding="latin-1")
    (d / "CISI.REL").write_text("".join(f" {q}\t{doc}\t0\t0.000000\r\n" for q, doc in RELEVANT))


def write_beir(root: Path) -> None:
    d = root / "scifact_beir"
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": i, "title": t, "text": w}) + "\n" for i, (t, w) in DOCS.items())
    )
    (d / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": w}) + "\n" for q, w in QUERIES.items()))
    (d / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n1\t1\t1\n1\t2\t1\n")
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n2\t3\t1\n2\t5\t0\n")


@pytest.mark.parametrize("name", ["cisi", "scifact"])
def test_rows_carry_one_judged_positive_and_lexically_mined_negatives(tmp_path: Path, name: str) -> None:
    write_cisi(tmp_path)
    write_beir(tmp_path)
    collection = mined.COLLECTIONS[name](tmp_path)
    assert collection.documents["2"] == "Online catalogues. " + DOCS["2"][1]  # no author, title kept
    assert collection.relevant == {"1": {"1", "2"}, "2": {"3"}}  # grade 0 is not relevant
    rows, truth = mined.mine(collection, k=2, seed=0)
    assert [r["id"] for r in rows] == [f"{name}-1", f"{name}-2"]
    by_text = {f"{t}. {w}": i for i, (t, w) in DOCS.items()}
    for row in rows:
        query = row["id"].split("-")[1]
        positive = by_text[row["pos"]]
        negatives = [by_text[row["neg_1"]], by_text[row["neg_2"]]]
        assert positive in collection.relevant[query] and positive not in negatives
        labels = [t["label"] for t in truth if t["anchor_id"] == row["id"]]
        assert labels == [int(n in collection.relevant[query]) for n in negatives]
    # Query 1 has two judged documents: whichever is the positive, the other is mined first (it shares
    # the query's words) and is labelled a false negative.
    assert [t["label"] for t in truth if t["anchor_id"] == f"{name}-1"][0] == 1
    assert mined.mine(collection, k=2, seed=0) == (rows, truth)  # deterministic for a seed


def test_a_malformed_judgment_line_is_located(tmp_path: Path) -> None:
    write_cisi(tmp_path)
    (tmp_path / "cisi" / "CISI.REL").write_text("1 1 0 0.0\n7\n")
    with pytest.raises(ValueError, match=r"CISI.REL:2: expected 'query document"):
        mined.read_cisi(tmp_path)


def test_scan_and_peer_masks_line_up_with_the_truth(tmp_path: Path) -> None:
    write_cisi(tmp_path)
    rows, truth = mined.mine(mined.read_cisi(tmp_path), k=2, seed=0)
    report = {
        "mislabelled_negatives": [
            {"row_id": "cisi-1", "negative": "negative_1", "evidence": [{"kind": "embedding"}]},
            {"row_id": "cisi-2", "negative": "negative_2", "evidence": [{"kind": "exact"}, {"kind": "embedding"}]},
        ]
    }
    masks = mined.scan_masks(truth, report)
    assert masks["all"].tolist() == [True, False, False, True]
    assert masks["exact"].tolist() == [False, False, False, True]
    with pytest.raises(ValueError, match="not mined"):
        mined.scan_masks(truth, {"mislabelled_negatives": [{"row_id": "x", "negative": "negative_1", "evidence": []}]})

    def embed(texts: list[str]) -> np.ndarray:  # every text the same vector: every negative ties its positive
        return np.ones((len(texts), 3), dtype=np.float32)

    peers = mined.peer_masks(rows, truth, embed)
    assert peers["topk-percpos-95"].all() and not peers["gist-guide"].any() and not peers["exact-identity"].any()
