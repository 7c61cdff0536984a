"""The plan data structure: per-device batches of row indices, flattened into numpy arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Plan:
    """Per-device batches in training order. ``rows`` concatenates every batch's row indices;
    batch ``i`` is ``rows[offsets[i]:offsets[i + 1]]`` and belongs to epoch ``epoch[i]``."""

    rows: np.ndarray
    offsets: np.ndarray
    epoch: np.ndarray
    source: str

    @classmethod
    def from_batches(cls, batches: list[np.ndarray], epochs: list[int], source: str) -> Plan:
        sizes = np.fromiter((len(b) for b in batches), dtype=np.int64, count=len(batches))
        offsets = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        rows = np.concatenate(batches).astype(np.int64) if batches else np.zeros(0, dtype=np.int64)
        return cls(rows, offsets, np.asarray(epochs, dtype=np.int64), source)

    @property
    def n_batches(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def batch(self, i: int) -> np.ndarray:
        return self.rows[self.offsets[i] : self.offsets[i + 1]]

    def global_batches(self, world_size: int) -> GlobalBatches:
        """Group ``world_size`` consecutive device batches of one epoch into one global batch.

        This is how a distributed sentence-transformers run shards its batch sampler (process
        ``k`` takes batches ``k, k + W, k + 2W, ...``), so with ``gather_across_devices`` step
        ``s`` compares the rows of batches ``sW .. sW + W - 1``.
        """
        n = self.n_batches
        if n == 0:
            return GlobalBatches(self.rows, np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))
        # Position of each device batch within its epoch, then its global step within the epoch.
        starts = np.flatnonzero(np.r_[True, self.epoch[1:] != self.epoch[:-1]])
        epoch_start = np.repeat(starts, np.diff(np.r_[starts, n]))
        step_in_epoch = (np.arange(n) - epoch_start) // world_size
        key = np.r_[True, (step_in_epoch[1:] != step_in_epoch[:-1]) | (self.epoch[1:] != self.epoch[:-1])]
        first = np.flatnonzero(key)
        offsets = np.r_[self.offsets[first], self.offsets[-1]]
        return GlobalBatches(self.rows, offsets, self.epoch[first])


@dataclass(frozen=True)
class GlobalBatches:
    """The comparison sets: global batch ``g`` is ``rows[offsets[g]:offsets[g + 1]]``."""

    rows: np.ndarray
    offsets: np.ndarray
    epoch: np.ndarray

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)
