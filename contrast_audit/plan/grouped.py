"""Re-planned batches for manifests: related rows apart (``group``) or together (``multi-positive``).

Relations come in two forms. *Keys*: rows holding the same key (a text id, a declared group) are all
related to each other; a key is stored once per row, never as the clique of its pairs. *Edges*: row pairs
found related by a detector. Both plans are seeded per epoch (``seed + epoch``, numpy's PCG64) and
deterministic; every row appears exactly once per epoch (``drop_last`` drops the remainder, as samplers do).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

from contrast_audit.errors import ConfigError

MAX_TRIES = 256  # batches tried for a constrained row before it takes the least-conflicted one


@dataclass(frozen=True)
class Relations:
    """``key_rows``/``key_ids``: (row, key) memberships; ``edge_a``/``edge_b``: related row pairs."""

    n_rows: int
    key_rows: np.ndarray
    key_ids: np.ndarray
    edge_a: np.ndarray
    edge_b: np.ndarray

    def shared_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """Memberships of keys held by at least two distinct rows (the others constrain nothing)."""
        if self.key_ids.shape[0] == 0:
            return self.key_rows, self.key_ids
        pairs = np.unique(np.stack([self.key_ids, self.key_rows], axis=1), axis=0)
        keys, counts = np.unique(pairs[:, 0], return_counts=True)
        shared = np.isin(pairs[:, 0], keys[counts > 1])
        return pairs[shared, 1], pairs[shared, 0]

    def components(self) -> np.ndarray:
        """Connected components of rows through shared keys and edges (a label per row)."""
        rows, keys = self.shared_keys()
        _, key_index = np.unique(keys, return_inverse=True)
        n = self.n_rows
        n_keys = int(key_index.max()) + 1 if key_index.shape[0] else 0
        a = np.r_[rows, self.edge_a]
        b = np.r_[key_index + n, self.edge_b]
        graph = sp.coo_matrix((np.ones(a.shape[0], dtype=np.int8), (a, b)), shape=(n + n_keys, n + n_keys))
        _, labels = connected_components(graph, directed=False)
        return labels[:n]


def batch_capacities(n_rows: int, batch_size: int, world_size: int, drop_last: bool) -> np.ndarray:
    """Rows per global batch (``batch_size × world_size``; a smaller last one unless ``drop_last``)."""
    cap = batch_size * world_size
    full, rest = divmod(n_rows, cap)
    sizes = [cap] * full
    if rest and not drop_last:
        if rest < world_size:
            raise ConfigError(
                f"{n_rows} rows leave {rest} for the last global batch, fewer than the world size {world_size}: "
                "a rank would get an empty batch",
                fix="pass --drop-last, or a batch size that leaves at least one row per rank",
            )
        sizes.append(rest)
    return np.asarray(sizes, dtype=np.int64)


def rank_sizes(size: int, world_size: int) -> list[int]:
    """How a global batch of ``size`` rows is split over ranks (as even as possible, larger first)."""
    base, extra = divmod(size, world_size)
    return [base + (1 if r < extra else 0) for r in range(world_size)]


def separate(relations: Relations, capacities: np.ndarray, rng: np.random.Generator) -> tuple[list[np.ndarray], int]:
    """Assign rows to global batches so that related rows share none where possible.

    Constrained rows (those with a shared key or an edge) go first, most constrained first, each to the
    next batch (round robin from a random start) with room and no related row; after ``MAX_TRIES`` it takes
    the batch with the fewest related rows. Unconstrained rows fill the remaining room in random order.
    Returns the batches and how many rows could not be separated.
    """
    n = relations.n_rows
    total = int(capacities.sum())
    n_batches = capacities.shape[0]
    key_rows, key_ids = relations.shared_keys()
    order = np.lexsort((key_ids, key_rows))
    key_rows, key_ids = key_rows[order], key_ids[order]
    key_start = np.searchsorted(key_rows, np.arange(n + 1))
    ea = np.r_[relations.edge_a, relations.edge_b]
    eb = np.r_[relations.edge_b, relations.edge_a]
    keep = ea != eb
    ea, eb = ea[keep], eb[keep]
    order = np.argsort(ea, kind="stable")
    ea, eb = ea[order], eb[order]
    edge_start = np.searchsorted(ea, np.arange(n + 1))

    degree = np.diff(key_start) + np.diff(edge_start)
    shuffled = rng.permutation(n)
    constrained = shuffled[degree[shuffled] > 0]
    constrained = constrained[np.argsort(-degree[constrained], kind="stable")]
    free = shuffled[degree[shuffled] == 0]

    assigned = np.full(n, -1, dtype=np.int64)
    room = capacities.copy()
    batch_keys: list[set[int]] = [set() for _ in range(n_batches)]
    left_together = 0
    pointer = int(rng.integers(n_batches)) if n_batches else 0
    placed = 0
    for row in constrained.tolist():
        if placed >= total:
            break
        keys = key_ids[key_start[row] : key_start[row + 1]].tolist()
        neighbour_batches = assigned[eb[edge_start[row] : edge_start[row + 1]]]
        best, best_conflicts = -1, None
        for step in range(min(n_batches, MAX_TRIES)):
            b = (pointer + step) % n_batches
            if room[b] == 0:
                continue
            conflicts = sum(1 for k in keys if k in batch_keys[b]) + int(np.count_nonzero(neighbour_batches == b))
            if conflicts == 0:
                best, best_conflicts = b, 0
                break
            if best_conflicts is None or conflicts < best_conflicts:
                best, best_conflicts = b, conflicts
        if best == -1:  # every tried batch is full: take the first with room
            best = int(np.flatnonzero(room > 0)[0])
            best_conflicts = 1
        if best_conflicts:
            left_together += 1
        assigned[row] = best
        room[best] -= 1
        batch_keys[best].update(keys)
        pointer = (best + 1) % n_batches
        placed += 1
    slots = np.repeat(np.arange(n_batches), room)
    fill = free[: slots.shape[0]]
    assigned[fill] = slots[: fill.shape[0]]
    return _collect(assigned, n_batches, rng), left_together


def together(relations: Relations, capacities: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Assign rows to global batches so that related rows share one (components larger than a batch are
    cut into batch-sized pieces). Pieces are packed largest first into the batch with the most room."""
    n = relations.n_rows
    labels = relations.components()
    shuffled = rng.permutation(n)
    # Rows grouped by component in random component order, random order inside.
    component_rank = rng.permutation(int(labels.max()) + 1 if n else 0)
    order = shuffled[np.argsort(component_rank[labels[shuffled]], kind="stable")]
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.r_[True, sorted_labels[1:] != sorted_labels[:-1]]) if n else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], n]
    cap = int(capacities.max()) if capacities.shape[0] else 0
    # Pieces: each component cut every ``cap`` rows, as [lo, hi) ranges of ``order``, largest first
    # (a stable sort: equal sizes keep the random order).
    counts = -(-(ends - starts) // cap) if cap else np.zeros_like(starts)
    within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    lo = np.repeat(starts, counts) + within * cap
    hi = np.minimum(lo + cap, np.repeat(ends, counts))
    by_size = np.argsort(lo - hi, kind="stable")
    lo, hi = lo[by_size], hi[by_size]
    several = int(np.count_nonzero(hi - lo > 1))  # pieces of two rows or more; single rows follow
    assigned = np.full(n, -1, dtype=np.int64)
    # Batches with room, as a heap of (-room, batch): its top is the batch with the most room, the
    # first such batch on ties (what argmax over the rooms gives), found in O(log batches).
    heap = [(-room, b) for b, room in enumerate(capacities.tolist()) if room > 0]
    heapq.heapify(heap)

    def take(b: int, left: int) -> None:
        if left:
            heapq.heapreplace(heap, (-left, b))
        else:
            heapq.heappop(heap)

    for start, stop in zip(lo[:several].tolist(), hi[:several].tolist(), strict=True):
        if not heap:
            break
        piece = order[start:stop]
        room, b = -heap[0][0], heap[0][1]
        if room >= piece.shape[0]:
            assigned[piece] = b
            take(b, room - piece.shape[0])
            continue
        for row in piece.tolist():  # no batch has room for the whole piece: spill it
            if not heap:
                break
            room, b = -heap[0][0], heap[0][1]
            assigned[row] = b
            take(b, room - 1)
    if heap and several < lo.shape[0]:
        # Single rows, each into the batch with the most room (the first on ties), all at once: that
        # order visits, for each level of room from the highest down, every batch with at least that
        # much room, in batch order.
        rooms = np.array([-r for r, _ in heap], dtype=np.int64)
        batch = np.array([b for _, b in heap], dtype=np.int64)
        slot_batch = np.repeat(batch, rooms)
        slot_level = np.arange(int(rooms.sum())) - np.repeat(np.cumsum(rooms) - rooms, rooms) + 1
        picks = slot_batch[np.lexsort((slot_batch, -slot_level))]
        rows = order[lo[several:]]
        assigned[rows[: picks.shape[0]]] = picks[: rows.shape[0]]
    return _collect(assigned, capacities.shape[0], rng)


def _collect(assigned: np.ndarray, n_batches: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Batches from an assignment (-1: dropped), each in a random order; full batches in random order and a
    smaller last batch kept last."""
    rows = np.flatnonzero(assigned >= 0)
    tiebreak = rng.permutation(rows.shape[0])
    order = np.lexsort((tiebreak, assigned[rows]))
    rows = rows[order]
    bounds = np.searchsorted(assigned[rows], np.arange(n_batches + 1))
    batches = [rows[bounds[b] : bounds[b + 1]] for b in range(n_batches)]
    sizes = np.asarray([len(b) for b in batches])
    if n_batches > 1 and sizes[-1] < sizes.max():
        head = rng.permutation(n_batches - 1)
        return [batches[i] for i in head] + [batches[-1]]
    return [batches[i] for i in rng.permutation(n_batches)]


__all__ = ["Relations", "batch_capacities", "rank_sizes", "separate", "together"]
