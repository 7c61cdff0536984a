"""Samplers that reproduce sentence-transformers' batch plans for a seed and epoch.

- ``random``: ``DefaultBatchSampler(RandomSampler(generator))`` as the SentenceTransformerTrainer
  builds it: epoch ``e`` is ``torch.randperm(n)`` from a generator seeded with ``seed + e`` (what
  accelerate's seedable sampler, on by default in the trainer, does), cut into batches.
- ``no-duplicates``: ``NoDuplicatesBatchSampler``'s greedy pass over a ``seed + epoch`` permutation,
  deferring a row whose text (any column, exact string) is already in the open batch, with the same
  resampling passes when one pass falls short of ``len(sampler)`` batches.

The permutations are torch's CPU ``randperm`` reproduced in numpy (:func:`randperm`), so a scan does
not import torch to plan its batches; tests compare them with torch for many seeds and sizes.
"""

from __future__ import annotations

import numpy as np

from contrast_audit.config import PlanConfig
from contrast_audit.plan.batches import Plan

_MAX_RESAMPLE_PASSES = 2  # as in sentence_transformers.base.sampler
# torch draws 32-bit numbers for permutations of fewer rows than this (64-bit ones beyond).
RANDPERM_32BIT_LIMIT = 0xFFFFFFFF // 20


class TorchCPUGenerator:
    """The random stream of ``torch.Generator().manual_seed(seed)`` on the CPU: MT19937 seeded
    with the seed's low 32 bits (numpy's legacy seeding is the same initialisation), one 32-bit
    draw per ``random()``."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.bits = np.random.MT19937(0)
        self.bits._legacy_seeding(seed & 0xFFFFFFFF)
        self.torch = None  # the real generator, for permutations beyond RANDPERM_32BIT_LIMIT

    def randperm(self, n: int) -> np.ndarray:
        """``torch.randperm(n, generator=...)``: the same permutation and the same draws consumed."""
        if n >= RANDPERM_32BIT_LIMIT:  # pragma: no cover - billions of rows
            import torch

            if self.torch is None:
                self.torch = torch.Generator()
                self.torch.manual_seed(self.seed)
            return torch.randperm(n, generator=self.torch).numpy().astype(np.int64)
        return randperm(n, self.bits.random_raw(max(n - 1, 0)))


def randperm(n: int, draws: np.ndarray) -> np.ndarray:
    """torch's CPU ``randperm``: for i in 0..n-2, swap positions i and i + draws[i] % (n - i)
    (Fisher-Yates), computed without a per-row loop.

    Position i ends up holding the value at position z_i = i + draws[i] % (n - i) just before step
    i. That value is z_i itself unless an earlier step k targeted z_i too (z_k = z_i), in which case
    it is what step k moved there: the value position k held just before step k. That, in turn,
    follows the same rule along the chain of steps that targeted position k, which pointer jumping
    resolves in O(n log depth).
    """
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    steps = np.arange(n, dtype=np.int64)
    z = np.empty(n, dtype=np.int64)
    z[:-1] = (draws.astype(np.uint64) % np.arange(n, 1, -1, dtype=np.uint64)).astype(np.int64) + steps[:-1]
    z[-1] = n - 1  # the last position keeps what it holds
    order = np.lexsort((steps, z))  # steps grouped by the position they target, in step order
    targets = z[order]
    same = np.r_[False, targets[1:] == targets[:-1]]
    prev = np.full(n, -1, dtype=np.int64)  # the previous step that targeted the same position
    prev[order[same]] = order[np.flatnonzero(same) - 1]
    # parent(i): the last step before i that targeted position i (steps only target i from below).
    last = np.flatnonzero(np.r_[targets[1:] != targets[:-1], True])
    last_step, position = order[last], targets[last]
    parent = np.full(n, -1, dtype=np.int64)
    parent[position] = np.where(last_step == position, prev[last_step], last_step)
    # held(i), the value at position i just before step i, is i at the root of its parent chain.
    held = np.where(parent < 0, steps, parent)
    while True:
        jumped = held[held]
        if np.array_equal(jumped, held):
            break
        held = jumped
    return np.where(prev >= 0, held[np.maximum(prev, 0)], z)


def random_batches(n_rows: int, batch_size: int, drop_last: bool, seed: int, epoch: int) -> list[np.ndarray]:
    """One epoch of the default batch sampler."""
    perm = TorchCPUGenerator(seed + epoch).randperm(n_rows)
    n_full = n_rows // batch_size
    batches = [perm[i * batch_size : (i + 1) * batch_size] for i in range(n_full)]
    if not drop_last and n_rows % batch_size:
        batches.append(perm[n_full * batch_size :])
    return batches


def no_duplicates_batches(
    values: np.ndarray, batch_size: int, drop_last: bool, seed: int, epoch: int
) -> list[np.ndarray]:
    """One epoch of ``NoDuplicatesBatchSampler`` over rows whose values are ``values``
    (rows × columns of exact-string ids, -1 padded)."""
    n_rows = values.shape[0]
    if n_rows == 0:
        return []
    generator = TorchCPUGenerator(seed + epoch)
    expected = n_rows // batch_size if drop_last else (n_rows + batch_size - 1) // batch_size
    row_values = [set(v[v >= 0].tolist()) for v in values]
    out: list[np.ndarray] = []

    def one_pass() -> list[np.ndarray]:
        return _greedy_pass(generator.randperm(n_rows), row_values, batch_size, drop_last)

    out.extend(one_pass())
    if len(out) >= expected or not out:
        return out
    for _ in range(_MAX_RESAMPLE_PASSES):
        for batch in one_pass():
            out.append(batch)
            if len(out) >= expected:
                return out
    return out


def _greedy_pass(order: np.ndarray, row_values: list[set[int]], batch_size: int, drop_last: bool) -> list[np.ndarray]:
    # Inherently sequential (each decision depends on the open batch); the reference algorithm
    # walks a linked list over the shuffled positions, and so do we.
    n = order.shape[0]
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    order_list = order.tolist()
    head = 0
    batches: list[np.ndarray] = []
    while head != -1:
        seen: set[int] = set()
        batch: list[int] = []
        cur, prev, full = head, -1, False
        while cur != -1:
            following = nxt[cur]
            index = order_list[cur]
            vals = row_values[index]
            if not vals.isdisjoint(seen):
                prev, cur = cur, following
                continue
            batch.append(index)
            if prev == -1:
                head = following
            else:
                nxt[prev] = following
            if len(batch) == batch_size:
                full = True
                batches.append(np.asarray(batch, dtype=np.int64))
                break
            seen.update(vals)
            cur = following
        if not full and not drop_last:
            # Rows deferred in this sweep start the next batch, as in the reference sampler.
            batches.append(np.asarray(batch, dtype=np.int64))
    return batches


def make_plan(cfg: PlanConfig, n_rows: int, raw_values: np.ndarray) -> Plan:
    """Batches for every epoch with the configured sampler."""
    batches: list[np.ndarray] = []
    epochs: list[int] = []
    for epoch in range(cfg.epochs):
        if cfg.sampler == "random":
            got = random_batches(n_rows, cfg.batch_size, cfg.drop_last, cfg.seed, epoch)
        else:
            got = no_duplicates_batches(raw_values, cfg.batch_size, cfg.drop_last, cfg.seed, epoch)
        batches.extend(got)
        epochs.extend([epoch] * len(got))
    return Plan.from_batches(batches, epochs, cfg.sampler)
