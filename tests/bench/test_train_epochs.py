"""The full-epoch training benchmark's bookkeeping (bench/train/epochs.py): false negatives from judgments,
what a manifest's masks leave, and what GISTEmbedLoss's guide leaves."""

from __future__ import annotations

import argparse
import json
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


def test_query_weights_give_every_query_the_same_share():
    w = epochs.query_weights(META, ["q1-da", "q1-db", "q2-dc"])
    assert w.mean() == pytest.approx(1.0)
    assert w[0] == w[1] and w[0] + w[1] == pytest.approx(w[2])


def test_anchor_weighted_loss_weights_each_anchors_term():
    import torch

    from contrast_audit.train import MaskedMultipleNegativesRankingLoss
    from contrast_audit.train.relations import Relations

    relations = Relations(n_rows=3, n_roles=2, masked={}, positives={})
    torch.manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    d = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    labels = torch.tensor([0, 1, 2])
    plain = MaskedMultipleNegativesRankingLoss(torch.nn.Identity(), relations, scale=20.0)
    weights = np.array([0.5, 0.5, 2.0])
    weighted = epochs.AnchorWeightedLoss(torch.nn.Identity(), relations, scale=20.0, weights=weights)
    per_anchor = -torch.log_softmax(20.0 * q @ d.T, dim=1).diagonal()
    assert plain.compute_loss_from_embeddings([q, d], labels).item() == pytest.approx(
        per_anchor.mean().item(), rel=1e-5
    )
    got = weighted.compute_loss_from_embeddings([q, d], labels).item()
    assert got == pytest.approx((per_anchor * torch.tensor([0.5, 0.5, 2.0])).mean().item(), rel=1e-5)
