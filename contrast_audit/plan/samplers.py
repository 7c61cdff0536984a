"""Samplers that reproduce sentence-transformers' batch plans for a seed and epoch.

- ``random``: ``DefaultBatchSampler(RandomSampler(generator))`` as the SentenceTransformerTrainer
  builds it: epoch ``e`` is ``torch.randperm(n)`` from a generator seeded with ``seed + e`` (what
  accelerate's seedable sampler, on by default in the trainer, does), cut into batches.
- ``no-duplicates``: ``NoDuplicatesBatchSampler``'s greedy pass over a ``seed + epoch`` permutation,
  deferring a row whose text (any column, exact string) is already in the open batch, with the same
  resampling passes when one pass falls short of ``len(sampler)`` batches.
"""

from __future__ import annotations

import numpy as np

from contrast_audit.config import PlanConfig
from contrast_audit.plan.batches import Plan

_MAX_RESAMPLE_PASSES = 2  # as in sentence_transformers.base.sampler


def _generator(seed: int):
    import torch

    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def random_batches(n_rows: int, batch_size: int, drop_last: bool, seed: int, epoch: int) -> list[np.ndarray]:
    """One epoch of the default batch sampler."""
    import torch

    perm = torch.randperm(n_rows, generator=_generator(seed + epoch)).numpy().astype(np.int64)
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
    import torch

    n_rows = values.shape[0]
    if n_rows == 0:
        return []
    generator = _generator(seed + epoch)
    expected = n_rows // batch_size if drop_last else (n_rows + batch_size - 1) // batch_size
    row_values = [set(v[v >= 0].tolist()) for v in values]
    out: list[np.ndarray] = []

    def one_pass() -> list[np.ndarray]:
        dtype = torch.int32 if n_rows <= np.iinfo(np.int32).max else torch.int64
        remaining = torch.randperm(n_rows, generator=generator, dtype=dtype).numpy()
        return _greedy_pass(remaining, row_values, batch_size, drop_last)

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
