"""MaskedMultipleNegativesRankingLoss against hand-computed values on tiny batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

import contrast_audit.train.loss as loss_module
from contrast_audit.manifest.format import Manifest, ManifestBatch
from contrast_audit.train.loss import MaskedMultipleNegativesRankingLoss
from contrast_audit.train.relations import build_relations, role_code

IDS = ["r0", "r1", "r2", "r3"]


def unit(angles_deg) -> torch.Tensor:
    a = torch.tensor(angles_deg, dtype=torch.float64) * math.pi / 180
    return torch.stack([torch.cos(a), torch.sin(a)], dim=1)


# Queries, positives and hard negatives of three rows as 2-D unit vectors: cosines are cos(angle differences).
Q, P, N = [0.0, 50.0, 100.0], [10.0, 55.0, 120.0], [30.0, 70.0, 90.0]


def embeddings() -> list[torch.Tensor]:
    return [unit(Q).requires_grad_(), unit(P).requires_grad_(), unit(N).requires_grad_()]


def manifest(mask=None, positives=None, rows=("r0", "r1", "r2"), ranks=None) -> Manifest:
    batch = ManifestBatch(0, 0, tuple(rows), tuple(ranks or (len(rows),)), mask or {}, positives or {})
    return Manifest(header={"kind": "contrast-audit-manifest", "plan": {"epochs": 1}}, batches=[batch])


def hand_loss(scale: float, excluded: dict[int, set[int]], extra: dict[int, set[int]] | None = None, mode="sum"):
    """Mean over anchors of -log p(positive set); candidate column j: positives 0..2, negatives 3..5."""
    cands = P + N
    extra = extra or {}
    total = 0.0
    for a in range(3):
        logits = {
            j: scale * math.cos(math.radians(Q[a] - cands[j])) for j in range(6) if j not in excluded.get(a, set())
        }
        z = sum(math.exp(v) for v in logits.values())
        pos = {a} | extra.get(a, set())
        if mode == "sum":
            total += -math.log(sum(math.exp(logits[j]) for j in pos) / z)
        else:
            total += -sum(math.log(math.exp(logits[j]) / z) for j in pos) / len(pos)
    return total / 3


def run_loss(m: Manifest, **kwargs) -> tuple[MaskedMultipleNegativesRankingLoss, torch.Tensor, list[torch.Tensor]]:
    loss = MaskedMultipleNegativesRankingLoss(None, m, IDS, n_negatives=1, **kwargs)
    emb = embeddings()
    return loss, loss.compute_loss_from_embeddings(emb, torch.tensor([0, 1, 2])), emb


def test_no_mask_equals_sentence_transformers_mnrl():
    _, value, _ = run_loss(manifest())
    reference = MultipleNegativesRankingLoss(None, scale=20.0).compute_loss_from_embeddings(embeddings(), None)
    assert value.item() == pytest.approx(reference.item(), rel=1e-9)
    assert value.item() == pytest.approx(hand_loss(20.0, {}), rel=1e-9)


def test_masked_in_batch_and_hard_negative_match_hand_value():
    # anchor 0: row 1's positive and row 2's hard negative masked; anchor 1: its own hard negative masked.
    m = manifest({"query_to_doc": [(0, 1, "positive"), (0, 2, "negative_1"), (1, 1, "negative_1")]})
    loss, value, _ = run_loss(m)
    assert value.item() == pytest.approx(hand_loss(20.0, {0: {1, 5}, 1: {4}}), rel=1e-9)
    assert loss.last_batch == {"masked_pairs": 3, "extra_positives": 0, "padded_negatives": 0}


def test_anchor_with_every_negative_masked_has_zero_finite_loss_and_finite_gradients():
    everything = [(0, c, "positive") for c in (1, 2)] + [(0, c, "negative_1") for c in (0, 1, 2)]
    m = manifest({"query_to_doc": everything})
    # at scale 1000, exp() of a logit overflows: only log-space masking stays finite
    _, value, emb = run_loss(m, scale=1000.0)
    assert torch.isfinite(value)
    value.backward()
    assert all(torch.isfinite(e.grad).all() for e in emb)
    # anchor 0 adds exactly 0 (its positive is the only candidate left); the others are unchanged
    _, value20, _ = run_loss(m)
    assert value20.item() == pytest.approx(hand_loss(20.0, {0: {1, 2, 3, 4, 5}}), rel=1e-9)


def test_padded_hard_negatives_leave_every_anchors_softmax():
    # row 2 has no hard negative (its cell is padding): column 5 is no candidate for any anchor
    padded = np.array([[False], [False], [True], [False]])
    loss = MaskedMultipleNegativesRankingLoss(None, manifest(), IDS, n_negatives=1, padded=padded)
    emb = embeddings()
    value = loss.compute_loss_from_embeddings(emb, torch.tensor([0, 1, 2]))
    assert value.item() == pytest.approx(hand_loss(20.0, {0: {5}, 1: {5}, 2: {5}}), rel=1e-9)
    assert loss.last_batch["padded_negatives"] == 1
    # the same rows in another order: the padding follows the row, not the position
    value = loss.compute_loss_from_embeddings([e[[2, 0, 1]] for e in embeddings()], torch.tensor([2, 0, 1]))
    assert value.item() == pytest.approx(hand_loss(20.0, {0: {5}, 1: {5}, 2: {5}}), rel=1e-9)
    # with a manifest mask on top, both apply
    m = manifest({"query_to_doc": [(0, 1, "positive")]})
    loss = MaskedMultipleNegativesRankingLoss(None, m, IDS, n_negatives=1, padded=padded)
    value = loss.compute_loss_from_embeddings(embeddings(), torch.tensor([0, 1, 2]))
    assert value.item() == pytest.approx(hand_loss(20.0, {0: {1, 5}, 1: {5}, 2: {5}}), rel=1e-9)


def test_the_loss_takes_training_data_with_its_padding(tmp_path):
    from contrast_audit.train.data import TrainingData

    padded = np.array([[False], [False], [True], [False]])
    data = TrainingData(dataset=[None] * 4, row_ids=IDS, n_negatives=1, rows=None, padded=padded)
    loss = MaskedMultipleNegativesRankingLoss(None, manifest(), data)
    value = loss.compute_loss_from_embeddings(embeddings(), torch.tensor([0, 1, 2]))
    assert value.item() == pytest.approx(hand_loss(20.0, {0: {5}, 1: {5}, 2: {5}}), rel=1e-9)
    assert loss.relations.n_roles == 2


def test_the_labelled_positive_is_never_masked():
    m = manifest({"query_to_doc": [(0, 0, "positive")]})
    loss, value, _ = run_loss(m)
    assert value.item() == pytest.approx(hand_loss(20.0, {}), rel=1e-9)
    assert loss.last_batch["masked_pairs"] == 0


def test_masks_follow_row_ids_not_positions():
    # The same relation found from row ids when the batch arrives in another order (a user's sampler).
    m = manifest({"query_to_doc": [(0, 1, "positive")]})
    loss = MaskedMultipleNegativesRankingLoss(None, m, IDS, n_negatives=1)
    emb = embeddings()
    order = [2, 0, 1]  # rows r2, r0, r1
    shuffled = [e[order] for e in emb]
    value = loss.compute_loss_from_embeddings(shuffled, torch.tensor(order))
    assert value.item() == pytest.approx(hand_loss(20.0, {0: {1}}), rel=1e-9)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_multi_positive_normalisation(mode):
    m = manifest(positives={"query_to_doc": [(0, 1, "positive"), (0, 1, "negative_1")]})
    loss, value, _ = run_loss(m, multi_positive=mode)
    assert value.item() == pytest.approx(hand_loss(20.0, {}, {0: {1, 4}}, mode=mode), rel=1e-9)
    assert loss.last_batch == {"masked_pairs": 0, "extra_positives": 2, "padded_negatives": 0}


def test_multi_positive_sum_and_mean_differ_and_off_masks_instead():
    m = manifest(positives={"query_to_doc": [(0, 1, "positive")]})
    values = {mode: run_loss(m, multi_positive=mode)[1].item() for mode in ("sum", "mean", "off")}
    assert values["sum"] < values["mean"]
    assert values["off"] == pytest.approx(hand_loss(20.0, {0: {1}}), rel=1e-9)


def test_joint_directions_and_per_direction_equal_mnrl_without_masks():
    for directions, mode in (
        (("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc"), "joint"),
        (("query_to_doc", "doc_to_query"), "per_direction"),
    ):
        ours = MaskedMultipleNegativesRankingLoss(None, manifest(), IDS, directions=directions, partition_mode=mode)
        ref = MultipleNegativesRankingLoss(None, directions=directions, partition_mode=mode)
        a = ours.compute_loss_from_embeddings(embeddings(), torch.tensor([0, 1, 2]))
        b = ref.compute_loss_from_embeddings(embeddings(), None)
        assert a.item() == pytest.approx(b.item(), rel=1e-9)


def test_query_to_query_mask_removes_that_anchor():
    directions = ("query_to_doc", "query_to_query")
    m = manifest({"query_to_query": [(0, 1, "anchor")]})
    loss = MaskedMultipleNegativesRankingLoss(None, m, IDS, directions=directions)
    value = loss.compute_loss_from_embeddings(embeddings(), torch.tensor([0, 1, 2]))
    # by hand: anchor 0's denominator loses q1; q_i -> q_i is never a candidate
    total = 0.0
    for a in range(3):
        cands = [20 * math.cos(math.radians(Q[a] - x)) for x in P + N]
        cands += [20 * math.cos(math.radians(Q[a] - Q[b])) for b in range(3) if b != a and not (a == 0 and b == 1)]
        total += -(20 * math.cos(math.radians(Q[a] - P[a])) - math.log(sum(math.exp(v) for v in cands)))
    assert value.item() == pytest.approx(total / 3, rel=1e-9)


def test_world_size_two_mask_positions_follow_the_gather_order(monkeypatch):
    """Rank 1 holds global positions 2-3; a mask [2, 0] (its first anchor vs rank 0's first positive) applies."""
    ids = ["a", "b", "c", "d"]
    m = manifest({"query_to_doc": [(2, 0, "positive"), (3, 1, "negative_1")]}, rows=ids, ranks=(2, 2))
    q, p, n = unit([0, 40, 80, 120]), unit([10, 50, 85, 130]), unit([20, 60, 100, 140])
    world = {"q": q, "p": p, "n": n}
    labels_world = torch.tensor([0, 1, 2, 3])
    gathered = iter([world["q"], world["p"], world["n"]])
    monkeypatch.setattr(loss_module, "all_gather_with_grad", lambda t: next(gathered))
    monkeypatch.setattr(loss_module, "all_gather", lambda t: labels_world)
    monkeypatch.setattr(loss_module, "get_rank", lambda: 1)
    loss = MaskedMultipleNegativesRankingLoss(None, m, ids, n_negatives=1, gather_across_devices=True)
    value = loss.compute_loss_from_embeddings([q[2:], p[2:], n[2:]], labels_world[2:])
    angles_p, angles_n, angles_q = [10, 50, 85, 130], [20, 60, 100, 140], [0, 40, 80, 120]
    excluded = {2: {0}, 3: {4 + 1}}  # column 0: positive of position 0; column 4+1: negative_1 of position 1
    total = 0.0
    for a in (2, 3):
        cols = angles_p + angles_n
        logits = [20 * math.cos(math.radians(angles_q[a] - x)) for j, x in enumerate(cols) if j not in excluded[a]]
        total += -(20 * math.cos(math.radians(angles_q[a] - angles_p[a])) - math.log(sum(math.exp(v) for v in logits)))
    assert value.item() == pytest.approx(total / 2, rel=1e-9)
    assert loss.last_batch["masked_pairs"] == 2


def test_labels_are_required():
    loss = MaskedMultipleNegativesRankingLoss(None, manifest(), IDS, n_negatives=1)
    with pytest.raises(ValueError, match="row index"):
        loss.compute_loss_from_embeddings(embeddings(), None)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scale": 0.0}, "scale"),
        ({"directions": ("doc_to_query",)}, "query_to_doc"),
        ({"directions": ("query_to_doc", "doc_to_doc"), "partition_mode": "per_direction"}, "per_direction"),
        ({"multi_positive": "max"}, "multi_positive"),
    ],
)
def test_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MaskedMultipleNegativesRankingLoss(None, manifest(), IDS, **kwargs)


def test_config_and_citation():
    loss = MaskedMultipleNegativesRankingLoss(None, manifest({"query_to_doc": [(0, 1, "positive")]}), IDS)
    config = loss.get_config_dict()
    assert config["scale"] == 20.0 and config["multi_positive"] == "sum"
    assert config["manifest_relations"] == {"masked": 1, "positives": 0}
    assert loss.temperature == pytest.approx(0.05)
    assert "1807.03748" in loss.citation


def test_relations_roles_and_lookup():
    assert role_code("query_to_doc", "positive") == 0
    assert role_code("doc_to_doc", "negative_3") == 3
    assert role_code("doc_to_query", "anchor") == 0
    with pytest.raises(ValueError):
        role_code("query_to_query", "negative_1")
    rel = build_relations(manifest({"query_to_doc": [(0, 2, "negative_1")]}), IDS, 1)
    keys = rel.key(np.array([0, 0, 2]), np.array([2, 2, 0]), np.array([1, 0, 1]))
    assert rel.lookup("masked", "query_to_doc", keys).tolist() == [True, False, False]


def test_relations_refuse_negatives_out_of_range_naming_the_line():
    from contrast_audit.errors import InputError

    with pytest.raises(ValueError):  # beyond int64: never an integer numpy cannot hold
        role_code("query_to_doc", "negative_" + "9" * 100)
    with pytest.raises(ValueError):
        role_code("query_to_doc", "negative_\u00b2")  # a digit to str.isdigit, not to int
    header = {"kind": "contrast-audit-manifest", "plan": {"epochs": 1}}
    batch = ManifestBatch(0, 0, ("r0", "r1"), (2,), {"query_to_doc": [(0, 1, "negative_2")]}, line=7)
    with pytest.raises(InputError) as info:
        build_relations(Manifest(header, [batch], "m.jsonl"), IDS, 1)
    message = str(info.value)
    assert message.startswith("m.jsonl:7: batch 0 'mask.query_to_doc' addresses negative_2") and "at most 1" in message
    unknown = ManifestBatch(0, 0, ("r0", "r9"), (2,), line=3)
    with pytest.raises(InputError, match=r'^m\.jsonl:3: batch 0 names row id "r9"'):
        build_relations(Manifest(header, [unknown], "m.jsonl"), IDS, 1)


# ---- row weights (manifest --weight anchor) ----------------------------------------------------------


def weighted_manifest(weights, rows=("r0", "r1", "r2"), mask=None, ranks=None) -> Manifest:
    batch = ManifestBatch(0, 0, tuple(rows), tuple(ranks or (len(rows),)), mask or {}, {}, tuple(weights))
    header = {"kind": "contrast-audit-manifest", "plan": {"epochs": 1}, "weight": {"by": "anchor"}}
    return Manifest(header=header, batches=[batch])


def hand_terms(scale: float, excluded: dict[int, set[int]]) -> list[float]:
    """Each anchor's -log softmax of its positive; candidate column j: positives 0..2, negatives 3..5."""
    cands = P + N
    out = []
    for a in range(3):
        logits = {
            j: scale * math.cos(math.radians(Q[a] - cands[j])) for j in range(6) if j not in excluded.get(a, set())
        }
        out.append(-(logits[a] - math.log(sum(math.exp(v) for v in logits.values()))))
    return out


def test_anchor_weighted_loss_weights_each_anchors_term():
    from contrast_audit.train.relations import Relations

    torch.manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    d = torch.nn.functional.normalize(torch.randn(3, 4), dim=1)
    labels = torch.tensor([0, 1, 2])
    plain = MaskedMultipleNegativesRankingLoss(torch.nn.Identity(), Relations(3, 2, {}, {}), scale=20.0)
    weights = np.array([0.5, 0.5, 2.0])
    weighted = MaskedMultipleNegativesRankingLoss(torch.nn.Identity(), Relations(3, 2, {}, {}, weights), scale=20.0)
    per_anchor = -torch.log_softmax(20.0 * q @ d.T, dim=1).diagonal()
    assert plain.compute_loss_from_embeddings([q, d], labels).item() == pytest.approx(
        per_anchor.mean().item(), rel=1e-5
    )
    got = weighted.compute_loss_from_embeddings([q, d], labels).item()
    assert got == pytest.approx((per_anchor * torch.tensor([0.5, 0.5, 2.0])).mean().item(), rel=1e-5)


def test_manifest_weights_multiply_each_anchors_term_with_masks_and_hard_negatives():
    weights = (0.5, 2.0, 0.25)
    m = weighted_manifest(weights, mask={"query_to_doc": [(0, 1, "positive"), (1, 1, "negative_1")]})
    loss, value, emb = run_loss(m)
    terms = hand_terms(20.0, {0: {1}, 1: {4}})
    assert value.item() == pytest.approx(sum(w * t for w, t in zip(weights, terms, strict=True)) / 3, rel=1e-9)
    # the weights follow the rows, not the positions
    order = [2, 0, 1]
    shuffled = loss.compute_loss_from_embeddings([e[order] for e in embeddings()], torch.tensor(order))
    assert shuffled.item() == pytest.approx(value.item(), rel=1e-12)
    value.backward()
    assert all(torch.isfinite(e.grad).all() for e in emb)
    assert loss.get_config_dict()["anchor_weights"] is True


def test_per_direction_weights_each_anchors_mean_over_directions():
    weights = (3.0, 1.0, 0.5)
    directions = ("query_to_doc", "doc_to_query")
    loss = MaskedMultipleNegativesRankingLoss(
        None, weighted_manifest(weights), IDS, n_negatives=1, directions=directions, partition_mode="per_direction"
    )
    value = loss.compute_loss_from_embeddings(embeddings(), torch.tensor([0, 1, 2]))
    q, p = unit(Q), unit(P)
    q2d = hand_terms(20.0, {})
    d2q = (-torch.log_softmax(20.0 * p @ q.T, dim=1).diagonal()).tolist()  # document i against every query
    expected = sum(w * (a + b) / 2 for w, a, b in zip(weights, q2d, d2q, strict=True)) / 3
    assert value.item() == pytest.approx(expected, rel=1e-9)


def test_weights_of_ones_change_nothing_bit_for_bit():
    directions = ("query_to_doc", "doc_to_query")
    for mode in ("joint", "per_direction"):
        options = {"n_negatives": 1, "directions": directions, "partition_mode": mode}
        plain = MaskedMultipleNegativesRankingLoss(None, manifest(), IDS, **options)
        ones = MaskedMultipleNegativesRankingLoss(None, weighted_manifest((1.0, 1.0, 1.0)), IDS, **options)
        assert not plain.relations.weighted and plain.get_config_dict()["anchor_weights"] is False
        assert ones.relations.weighted
        a_emb, b_emb = embeddings(), embeddings()
        a = plain.compute_loss_from_embeddings(a_emb, torch.tensor([0, 1, 2]))
        b = ones.compute_loss_from_embeddings(b_emb, torch.tensor([0, 1, 2]))
        assert torch.equal(a, b)
        a.backward()
        b.backward()
        assert all(torch.equal(x.grad, y.grad) for x, y in zip(a_emb, b_emb, strict=True))


def test_world_size_two_weights_the_local_anchors(monkeypatch):
    """Rank 1 holds global positions 2-3: its loss is the mean of its own anchors' weighted terms."""
    ids = ["a", "b", "c", "d"]
    m = weighted_manifest((1.0, 2.0, 3.0, 0.5), rows=ids, ranks=(2, 2))
    q, p, n = unit([0, 40, 80, 120]), unit([10, 50, 85, 130]), unit([20, 60, 100, 140])
    labels_world = torch.tensor([0, 1, 2, 3])
    gathered = iter([q, p, n])
    monkeypatch.setattr(loss_module, "all_gather_with_grad", lambda t: next(gathered))
    monkeypatch.setattr(loss_module, "all_gather", lambda t: labels_world)
    monkeypatch.setattr(loss_module, "get_rank", lambda: 1)
    loss = MaskedMultipleNegativesRankingLoss(None, m, ids, n_negatives=1, gather_across_devices=True)
    value = loss.compute_loss_from_embeddings([q[2:], p[2:], n[2:]], labels_world[2:])
    angles_q, cols = [0, 40, 80, 120], [10, 50, 85, 130, 20, 60, 100, 140]
    terms = {}
    for a in (2, 3):
        logits = [20 * math.cos(math.radians(angles_q[a] - x)) for x in cols]
        terms[a] = -(logits[a] - math.log(sum(math.exp(v) for v in logits)))
    assert value.item() == pytest.approx((3.0 * terms[2] + 0.5 * terms[3]) / 2, rel=1e-9)


def test_relations_carry_one_weight_per_row():
    ids = ["r0", "r1", "r2", "r3"]
    header = {"kind": "contrast-audit-manifest", "plan": {"epochs": 2}, "weight": {"by": "anchor"}}
    batches = [
        ManifestBatch(0, 0, ("r0", "r1"), (2,), weights=(0.5, 1.5)),
        ManifestBatch(1, 1, ("r1", "r2", "r0"), (3,), weights=(1.5, 2.0, 0.5)),
    ]
    rel = build_relations(Manifest(header, batches), ids, 0)
    assert rel.weighted and rel.weights.tolist() == [0.5, 1.5, 2.0, 1.0]  # r3 is in no batch
    assert not build_relations(manifest(), ids, 0).weighted
    assert build_relations(manifest(), ids, 0).weights.tolist() == [1.0] * 4


def test_a_row_with_two_weights_is_refused():
    from contrast_audit.errors import InputError

    header = {"kind": "contrast-audit-manifest", "plan": {"epochs": 2}, "weight": {"by": "anchor"}}
    batches = [
        ManifestBatch(0, 0, ("r0", "r1"), (2,), weights=(0.5, 1.5)),
        ManifestBatch(1, 1, ("r2", "r1"), (2,), weights=(1.0, 0.75)),
    ]
    with pytest.raises(InputError, match=r"row id 'r1' has weight 1\.5 in batch 0 and 0\.75 in batch 1"):
        build_relations(Manifest(header, batches, "m.jsonl"), IDS, 0)
    partly = [batches[0], ManifestBatch(1, 1, ("r2", "r3"), (2,))]
    with pytest.raises(InputError, match="1 of 2 batches give their rows weights"):
        build_relations(Manifest(header, partly, "m.jsonl"), IDS, 0)
