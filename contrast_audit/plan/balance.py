"""Balanced batches: no anchor (rows sharing an anchor text or a declared group) takes more than its share
of a batch, and every row is still trained on once per epoch.

A unit (an anchor) of ``s`` rows in an epoch of ``B`` batches gets a quota of ``max(cap, ceil(s / B))`` rows
per batch: ``cap`` where the epoch has batches enough to hold the unit at that rate, and otherwise the
fewest the epoch allows (the unit spread evenly over every batch). So a unit can hold at most
``quota / batch_size`` of any batch, and ``cap = 1`` spreads every anchor's rows as evenly as the epoch
allows. Rows keep the order they are given in (the sampler's, or the clusters') except that a row whose
unit has reached its quota in the batch being filled waits for the next batch, ahead of later rows.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque

import numpy as np


def units_of(keys: list[np.ndarray]) -> np.ndarray:
    """One unit label per row: rows sharing a value in any of ``keys`` (arrays of int, -1 = none) are one
    unit (connected through shared values)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n = keys[0].shape[0]
    rows, cols = [], []
    offset = n
    for key in keys:
        has = key >= 0
        if not has.any():
            continue
        _, index = np.unique(key[has], return_inverse=True)
        rows.append(np.flatnonzero(has))
        cols.append(index + offset)
        offset += int(index.max()) + 1
    if not rows:
        return np.arange(n, dtype=np.int64)
    a, b = np.concatenate(rows), np.concatenate(cols)
    graph = sp.coo_matrix((np.ones(a.shape[0], dtype=np.int8), (a, b)), shape=(offset, offset))
    _, labels = connected_components(graph, directed=False)
    _, units = np.unique(labels[:n], return_inverse=True)
    return units.astype(np.int64)


def quotas(units: np.ndarray, sequence: np.ndarray, n_batches: int, cap: int) -> np.ndarray:
    """Each unit's rows-per-batch quota for an epoch of ``n_batches`` holding ``sequence``."""
    sizes = np.bincount(units[sequence], minlength=int(units.max()) + 1 if units.size else 0)
    return np.maximum(cap, -(-sizes // max(1, n_batches)))


def balance_batches(
    sequence: np.ndarray, units: np.ndarray, capacities: np.ndarray, cap: int
) -> tuple[list[np.ndarray], int]:
    """Cut ``sequence`` (an epoch's rows in preferred order) into batches of ``capacities`` rows, at most a
    unit's quota per batch (see the module docstring). Returns the batches and how many rows had to be
    placed over their unit's quota (only where nothing else was left to fill a batch). Rows beyond the
    capacities' total are dropped (``drop_last``).

    Batches are filled in order. A unit whose unplaced rows would no longer fit in the batches after this
    one at its quota places the excess here first (its earliest rows; a deadline heap finds those units),
    so a large anchor cannot pile up at the end of the epoch. Then rows are taken in sequence order, a row
    whose unit is at quota waiting for the next batch, ahead of later rows.
    """
    if cap < 1:
        raise ValueError(f"balance cap must be >= 1, got {cap}")
    n_batches = capacities.shape[0]
    quota = quotas(units, sequence, n_batches, cap)
    rows = sequence.tolist()
    unit_of = units.tolist()
    quota_of = quota.tolist()
    placed = np.zeros(units.shape[0], dtype=bool)
    by_unit: dict[int, list[int]] = {}
    for row in rows:
        by_unit.setdefault(unit_of[row], []).append(row)
    head = dict.fromkeys(by_unit, 0)  # index of each unit's earliest row that may be unplaced
    remaining = {u: len(r) for u, r in by_unit.items()}

    def deadline(u: int) -> int:  # the first batch that must take some of u's rows
        return n_batches - -(-remaining[u] // quota_of[u])

    heap = [(deadline(u), u) for u in by_unit if remaining[u] > quota_of[u]]  # others fit any one batch
    heapq.heapify(heap)
    waiting: OrderedDict[int, deque[int]] = OrderedDict()  # unit -> rows waiting, units by first wait
    pointer = 0
    over = 0
    batches: list[np.ndarray] = []

    def take(row: int, batch: list[int], count: dict[int, int]) -> None:
        unit = unit_of[row]
        placed[row] = True
        batch.append(row)
        count[unit] = count.get(unit, 0) + 1
        remaining[unit] -= 1

    for b, capacity in enumerate(capacities.tolist()):
        batch: list[int] = []
        count: dict[int, int] = {}
        while heap and heap[0][0] <= b and len(batch) < capacity:
            _, unit = heapq.heappop(heap)
            if remaining[unit] == 0:
                continue
            if deadline(unit) > b:  # stale: rows were placed since
                heapq.heappush(heap, (deadline(unit), unit))
                continue
            need = remaining[unit] - quota_of[unit] * (n_batches - b - 1)
            queue = by_unit[unit]
            while need > 0 and count.get(unit, 0) < quota_of[unit] and len(batch) < capacity:
                while placed[queue[head[unit]]]:
                    head[unit] += 1
                take(queue[head[unit]], batch, count)
                need -= 1
            if remaining[unit]:
                heapq.heappush(heap, (max(b + 1, deadline(unit)), unit))
        for unit in list(waiting):
            queue_w = waiting[unit]
            while queue_w and len(batch) < capacity and count.get(unit, 0) < quota_of[unit]:
                row = queue_w.popleft()
                if not placed[row]:
                    take(row, batch, count)
            if not queue_w:
                del waiting[unit]
            if len(batch) >= capacity:
                break
        while len(batch) < capacity and pointer < len(rows):
            row = rows[pointer]
            pointer += 1
            if placed[row]:
                continue
            unit = unit_of[row]
            if count.get(unit, 0) < quota_of[unit]:
                take(row, batch, count)
            else:
                waiting.setdefault(unit, deque()).append(row)
        while len(batch) < capacity and waiting:  # nothing else left: over quota
            unit = next(iter(waiting))
            row = waiting[unit].popleft()
            if not waiting[unit]:
                del waiting[unit]
            if placed[row]:
                continue
            over += count.get(unit, 0) >= quota_of[unit]
            take(row, batch, count)
        batches.append(np.asarray(batch, dtype=np.int64))
    return batches, over


__all__ = ["balance_batches", "quotas", "units_of"]
