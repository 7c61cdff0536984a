"""Balanced batches and k-means clusters for manifests: quotas hold, every row is planned, seeds decide."""

from __future__ import annotations

import numpy as np
import pytest

from contrast_audit.plan.balance import balance_batches, quotas, units_of
from contrast_audit.plan.cluster import cluster_sequence, kmeans


def test_units_join_rows_through_shared_anchor_or_group():
    anchor = np.array([0, 0, 1, 2, 3, 4])
    group = np.array([-1, -1, 7, 7, -1, -1])
    units = units_of([anchor, group])
    assert units[0] == units[1] and units[2] == units[3]
    assert len({units[0], units[2], units[4], units[5]}) == 4


def test_quota_is_the_cap_or_the_fewest_the_epoch_allows():
    units = np.array([0] * 10 + [1] * 2)
    assert quotas(units, np.arange(12), 4, 1).tolist() == [3, 1]  # 10 rows over 4 batches: 3 per batch
    assert quotas(units, np.arange(12), 4, 2).tolist() == [3, 2]


def test_balance_caps_a_large_anchor_and_plans_every_row_once():
    # one anchor holds half the rows and comes first: plain cutting would fill batch 0 with it
    units = np.array([0] * 16 + list(range(1, 17)))
    sequence = np.arange(32)
    batches, over = balance_batches(sequence, units, np.array([8, 8, 8, 8]), cap=1)
    assert over == 0
    assert sorted(np.concatenate(batches).tolist()) == list(range(32))
    assert [len(b) for b in batches] == [8, 8, 8, 8]
    assert all(int(np.sum(units[b] == 0)) == 4 for b in batches)  # 16 rows / 4 batches, the fewest possible


def test_balance_keeps_the_order_where_no_quota_binds():
    units = np.arange(12)
    sequence = np.random.default_rng(0).permutation(12)
    batches, over = balance_batches(sequence, units, np.array([4, 4, 4]), cap=1)
    assert over == 0 and np.concatenate(batches).tolist() == sequence.tolist()


def test_balance_with_a_cap_above_one_allows_that_many():
    units = np.array([0] * 6 + list(range(1, 7)))
    batches, over = balance_batches(np.arange(12), units, np.array([4, 4, 4]), cap=2)
    assert over == 0 and [int(np.sum(units[b] == 0)) for b in batches] == [2, 2, 2]


def test_balance_counts_rows_it_must_place_over_quota():
    # every row is one anchor and the batches must be filled: the quota (ceil(6/2) = 3) holds exactly
    units = np.zeros(6, dtype=np.int64)
    batches, over = balance_batches(np.arange(6), units, np.array([3, 3]), cap=1)
    assert over == 0 and [len(b) for b in batches] == [3, 3]
    # two anchors of 3 in batches of 4 and 2: quota 2 each, so the first batch takes 2 + 2 and the rest fits
    units = np.array([0, 0, 0, 1, 1, 1])
    batches, over = balance_batches(np.arange(6), units, np.array([4, 2]), cap=1)
    assert over == 0 and sorted(np.concatenate(batches).tolist()) == list(range(6))
    # one anchor of 4 rows in batches of 3 and 1: quota 2, but the first batch has nothing else to take
    batches, over = balance_batches(np.arange(4), np.zeros(4, dtype=np.int64), np.array([3, 1]), cap=1)
    assert over == 1 and [len(b) for b in batches] == [3, 1]


def test_balance_drops_rows_beyond_the_capacities():
    batches, _ = balance_batches(np.arange(10), np.arange(10), np.array([4, 4]), cap=1)
    assert np.concatenate(batches).tolist() == list(range(8))


def test_balance_refuses_a_cap_below_one():
    with pytest.raises(ValueError, match=">= 1"):
        balance_batches(np.arange(4), np.arange(4), np.array([4]), cap=0)


def two_topics(n: int = 20, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = np.array([1.0, 0.0, 0.0]) + 0.05 * rng.standard_normal((n, 3))
    b = np.array([0.0, 1.0, 0.0]) + 0.05 * rng.standard_normal((n, 3))
    return np.vstack([a, b]), np.array([0] * n + [1] * n)


def test_kmeans_finds_two_clear_topics_and_is_seeded():
    x, truth = two_topics()
    c = kmeans(x, 2, seed=3)
    assert c.k == 2 and len(set(c.labels[truth == 0])) == 1 and len(set(c.labels[truth == 1])) == 1
    assert c.labels[0] != c.labels[-1]
    assert np.array_equal(kmeans(x, 2, seed=3).labels, c.labels)
    info = c.info()
    assert info["k"] == 2 and info["seed"] == 3 and info["cluster_sizes"] == {"min": 20, "median": 20.0, "max": 20}


def test_kmeans_caps_k_at_the_number_of_vectors_and_checks_k():
    assert kmeans(np.eye(3), 10, seed=0).k == 3
    with pytest.raises(ValueError, match="k must be"):
        kmeans(np.eye(3), 0, seed=0)


def test_cluster_sequence_keeps_each_cluster_contiguous():
    row_cluster = np.array([0, 1, 2] * 5)
    seq = cluster_sequence(row_cluster, np.random.default_rng(1))
    labels = row_cluster[seq]
    assert sorted(seq.tolist()) == list(range(15))
    assert int(np.count_nonzero(labels[1:] != labels[:-1])) == 2  # three runs
