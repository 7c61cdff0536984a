"""A batch sampler that replays a manifest's batches exactly.

Device batches come out in the manifest's order: global batch g's rank slices r = 0..W-1 one after
another. That is the order accelerate's batch-sampler sharding deals batches out to ranks (rank r takes
every W-th batch starting at r), so with W processes rank r trains on the r-th slice of every global batch.
With one process and a manifest planned for W ranks, the slices run as W consecutive steps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from sentence_transformers.base.sampler import DefaultBatchSampler

from contrast_audit.errors import InputError
from contrast_audit.manifest.format import Manifest


def device_batches(manifest: Manifest, row_ids: Sequence[str]) -> dict[int, list[list[int]]]:
    """Dataset indices of every device batch, per epoch, in training order."""
    index = {rid: i for i, rid in enumerate(row_ids)}
    out: dict[int, list[list[int]]] = {}
    for batch in manifest.batches:
        if sum(batch.ranks) != len(batch.rows):
            raise InputError(
                "manifest", f"batch {batch.batch}: rank sizes {list(batch.ranks)} do not add up to {len(batch.rows)}"
            )
        try:
            rows = [index[r] for r in batch.rows]
        except KeyError as exc:
            raise InputError(
                "manifest", f"batch {batch.batch} names row id {exc.args[0]!r}, which the data does not have"
            ) from exc
        bounds = np.cumsum((0, *batch.ranks))
        out.setdefault(batch.epoch, []).extend(rows[bounds[r] : bounds[r + 1]] for r in range(len(batch.ranks)))
    return out


class ManifestBatchSampler(DefaultBatchSampler):
    """Yields the manifest's device batches (dataset indices) for the epoch set by ``set_epoch``.

    Pass ``ManifestBatchSampler.factory(manifest, row_ids)`` as
    ``SentenceTransformerTrainingArguments(batch_sampler=...)``; the trainer then calls it with
    ``(dataset, batch_size, drop_last, valid_label_columns, generator, seed)``. The manifest decides the
    batches: ``batch_size``, ``drop_last``, ``generator`` and ``seed`` are accepted and ignored.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        drop_last: bool = False,
        valid_label_columns: list[str] | None = None,
        generator: Any = None,
        seed: int = 0,
        *,
        manifest: Manifest,
        row_ids: Sequence[str],
    ) -> None:
        super().__init__(
            dataset,
            batch_size=batch_size,
            drop_last=drop_last,
            valid_label_columns=valid_label_columns,
            generator=generator,
            seed=seed,
        )
        if len(dataset) != len(row_ids):
            raise ValueError(f"the dataset has {len(dataset)} rows but row_ids names {len(row_ids)}")
        self.manifest = manifest
        self.epochs = device_batches(manifest, row_ids)
        if not self.epochs:
            raise InputError(
                "manifest", "the manifest has no batches", fix="write it again with `contrast-audit manifest`"
            )

    @classmethod
    def factory(cls, manifest: Manifest, row_ids: Sequence[str]) -> Callable[..., ManifestBatchSampler]:
        """A callable with the trainer's batch-sampler signature."""
        return functools.partial(cls, manifest=manifest, row_ids=list(row_ids))

    @property
    def n_epochs(self) -> int:
        return len(self.epochs)

    def _current(self) -> list[list[int]]:
        if self.epoch not in self.epochs:
            raise InputError(
                "manifest",
                f"training reached epoch {self.epoch} but the manifest plans epochs 0..{max(self.epochs)}",
                fix="lower --epochs/--max-steps or write the manifest with more --epochs",
            )
        return self.epochs[self.epoch]

    def __iter__(self) -> Iterator[list[int]]:
        yield from (list(b) for b in self._current())

    def __len__(self) -> int:
        return len(self.epochs.get(self.epoch, self.epochs[min(self.epochs)]))
