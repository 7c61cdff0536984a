"""``together``'s packing against the plain rule it implements: pieces largest first, each into the
batch with the most room (the first on ties), a piece that fits nowhere spilled row by row."""

from __future__ import annotations

import numpy as np
import pytest

from contrast_audit.errors import ConfigError
from contrast_audit.plan.grouped import Relations, _collect, batch_capacities, together


def _reference(relations: Relations, capacities: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    n = relations.n_rows
    labels = relations.components()
    shuffled = rng.permutation(n)
    component_rank = rng.permutation(int(labels.max()) + 1)
    order = shuffled[np.argsort(component_rank[labels[shuffled]], kind="stable")]
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]])
    ends = np.r_[starts[1:], n]
    cap = int(capacities.max())
    pieces = [order[lo : min(e, lo + cap)] for s, e in zip(starts, ends, strict=True) for lo in range(s, e, cap)]
    pieces.sort(key=len, reverse=True)
    assigned = np.full(n, -1, dtype=np.int64)
    room = capacities.copy()
    for piece in pieces:
        if room.sum() == 0:
            break
        b = int(np.argmax(room))
        if room[b] >= piece.shape[0]:
            assigned[piece] = b
            room[b] -= piece.shape[0]
            continue
        for row in piece.tolist():
            b = int(np.argmax(room))
            if room[b] == 0:
                break
            assigned[row] = b
            room[b] -= 1
    return _collect(assigned, capacities.shape[0], rng)


@pytest.mark.parametrize("trial", range(120))
def test_together_packs_as_the_plain_rule_does(trial: int) -> None:
    g = np.random.default_rng(trial)
    n = int(g.integers(1, 300))
    edges = int(g.integers(0, 2 * n))
    keys = int(g.integers(0, n))
    relations = Relations(
        n,
        g.integers(0, n, keys),
        g.integers(0, max(1, n // 5), keys),
        g.integers(0, n, edges),
        g.integers(0, n, edges),
    )
    batch_size = int(g.integers(1, 40))
    try:
        capacities = batch_capacities(n, batch_size, int(g.integers(1, 4)), bool(g.integers(0, 2)))
    except ConfigError:  # the draw leaves a rank an empty batch: one rank, every row kept
        capacities = batch_capacities(n, batch_size, 1, False)
    if capacities.shape[0] == 0:  # fewer rows than a batch, dropped
        assert together(relations, capacities, np.random.default_rng(trial)) == []
        return
    if trial % 3 == 0:  # uneven room: pieces spill and rows are left out
        capacities = np.maximum(capacities - g.integers(0, 3, capacities.shape[0]), 0)
    got = together(relations, capacities, np.random.default_rng(trial))
    want = _reference(relations, capacities, np.random.default_rng(trial))
    assert len(got) == len(want)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
