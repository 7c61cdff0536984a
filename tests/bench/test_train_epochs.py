"""The full-epoch training benchmark's bookkeeping (bench/train/epochs.py): false negatives from judgments,
what a manifest's masks leave, and what GISTEmbedLoss's guide leaves."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench.train import epochs

META = {
    "dataset": "toy",
    "train_queries": ["1", "2"],
    "doc_ids": ["a", "b", "c", "d"],
    "relevant": {"1": ["a", "b"], "2": ["c"]},
    "rows": [
        {"id": "q1-da", "query": "1", "pos": "a", "neg": "c"},
        {"id": "q1-db", "query": "1", "pos": "b", "neg": "d"},
        {"id": "q2-dc", "query": "2", "pos": "c", "neg": "b"},
    ],
}


def test_false_negatives_come_from_the_judgments():
    fn = epochs.false_negatives(META, np.array([0, 1, 2]))
    # anchor 0 (query 1): row 1's positive b; anchor 1: row 0's positive a and row 2's negative b;
    # anchor 2 (query 2): row 0's negative c
    assert sorted(fn) == [(0, 1, 0), (0, 2, 1), (1, 0, 0), (1, 2, 1), (2, 0, 1)]


def test_fn_stats_counts_what_masks_leave(tmp_path: Path):
    batch = [np.array([0, 1, 2])]
    plain = epochs.fn_stats(META, tmp_path, batch)
    assert plain["fn_per_anchor"] == plain["left_per_anchor"] == 5 / 3
    masks = [{(0, 1, 0), (1, 0, 0)}]
    masked = epochs.fn_stats(META, tmp_path, batch, masks=masks)
    assert masked["left_per_anchor"] == 3 / 3 and masked["masked_per_anchor"] == 2 / 3


def test_gist_leaves_candidates_its_guide_scores_no_higher_than_the_positive(tmp_path: Path):
    np.save(tmp_path / "query_emb.npy", np.array([[1.0, 0.0], [0.0, 1.0]]))
    # doc a, b close to query 1 (b closer than a), c close to query 2, d far
    np.save(tmp_path / "doc_emb.npy", np.array([[0.8, 0.6], [0.9, 0.44], [0.0, 1.0], [-1.0, 0.0]]))
    stats = epochs.fn_stats(META, tmp_path, [np.array([0, 1, 2])], gist=True)
    # anchor 0 (pos a .8): b (.9) excluded, negative b of row 2 excluded; anchor 1 (pos b .9): a (.8) left,
    # b as row 2's negative (.9, not above) left; anchor 2 (pos c 1.0): c as row 0's negative left
    assert stats["left_per_anchor"] == 3 / 3


def test_manifest_plan_reads_rows_and_masks(tmp_path: Path):
    path = tmp_path / "m.jsonl"
    lines = [
        {"kind": "contrast-audit-manifest"},
        {"batch": 0, "epoch": 0, "rows": ["q2-dc", "q1-da"], "mask": {"query_to_doc": [[1, 0, "negative_1"], [0, 1]]}},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    batches, masks = epochs.manifest_plan(path, META)
    assert batches[0].tolist() == [2, 0] and masks == [{(1, 0, 1), (0, 1, 0)}]


@pytest.mark.slow
@pytest.mark.parametrize("setting", sorted(epochs.TOOL))
def test_each_tool_setting_writes_its_manifest(tmp_path: Path, setting: str):
    rows = [
        {
            "id": f"r{i}",
            "anchor": f"query {i % 3} about topic {i % 3}",
            "positive": f"passage {i}",
            "negative": f"note {i}",
        }
        for i in range(8)
    ]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"{setting}.jsonl"
    epochs.tool_manifest(out, setting, 0, tmp_path, argparse.Namespace(batch_size=4, epochs=1))
    header = json.loads(out.read_text().splitlines()[0])
    assert header["strategy"] == epochs.TOOL[setting]["strategy"]
    assert ("balance" in header) == ("balance" in epochs.TOOL[setting])
    assert ("weight" in header) == ("weight" in epochs.TOOL[setting])


def toy_data(work: Path, meta: dict) -> None:
    """data.jsonl as ``build`` writes it: a query's rows share its text as their anchor."""
    text = {"1": "how are catalogues indexed", "2": "what do libraries lend", **{d: f"document {d}" for d in "abcd"}}
    lines = [
        {"id": r["id"], "anchor": text[r["query"]], "positive": text[r["pos"]], "negative": text[r["neg"]]}
        for r in meta["rows"]
    ]
    (work / "data.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_the_weight_settings_manifest_weighs_each_row_by_its_querys_rows(tmp_path: Path, monkeypatch):
    """tool-weight's manifest gives each row 1 / (rows of its query) scaled to a mean of 1: the weights its
    earlier in-benchmark loss used, so the earlier numbers stay comparable."""
    # the benchmark's defaults without the model: the weights do not depend on the detectors
    monkeypatch.setitem(epochs.TOOL_SETTINGS, "tool-weight", {"embeddings": False})
    meta = {**META, "rows": META["rows"] + [{"id": "q1-dd", "query": "1", "pos": "d", "neg": "c"}]}
    toy_data(tmp_path, meta)
    out = tmp_path / "tool-weight-0.jsonl"
    epochs.tool_manifest(out, "tool-weight", 0, tmp_path, argparse.Namespace(batch_size=2, epochs=2))
    records = [json.loads(line) for line in out.read_text().splitlines()]
    per_query = Counter(r["query"] for r in meta["rows"])
    inverse = {r["id"]: 1 / per_query[r["query"]] for r in meta["rows"]}
    expected = {i: w * len(inverse) / sum(inverse.values()) for i, w in inverse.items()}  # q1: 2/3, q2: 2
    got = {i: w for b in records[1:] for i, w in zip(b["rows"], b["weights"], strict=True)}
    assert got == pytest.approx(expected, rel=1e-12) and len(got) == 4
    assert records[0]["weight"]["units"] == 2 and records[0]["strategy"] == "mask"
    # a tool-weight manifest kept from before the manifest carried weights is written again
    out.write_text("\n".join([json.dumps({k: v for k, v in records[0].items() if k != "weight"}), "{}"]) + "\n")
    epochs.tool_manifest(out, "tool-weight", 0, tmp_path, argparse.Namespace(batch_size=2, epochs=2))
    assert [json.loads(line) for line in out.read_text().splitlines()] == records


def test_paired_differences_are_taken_seed_by_seed():
    runs = [{"seed": s, "metrics": {"ndcg@10": v}} for s, v in ((0, 0.5), (1, 0.4), (2, 0.45))]
    naive = {0: 0.4, 1: 0.45, 2: 0.4}
    assert epochs.paired(runs, naive) == "+0.0333 (2/3 above)"
    assert epochs.paired(runs, {}) == "–"
