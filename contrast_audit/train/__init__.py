"""The reference trainer: a batch sampler that replays a manifest and a loss that applies its masks."""

from __future__ import annotations

from contrast_audit.model import default_model_path
from contrast_audit.train.data import TrainingData, manifest_dataset, rows_dataset
from contrast_audit.train.loss import MaskedMultipleNegativesRankingLoss
from contrast_audit.train.relations import Relations, build_relations
from contrast_audit.train.sampler import ManifestBatchSampler

__all__ = [
    "ManifestBatchSampler",
    "MaskedMultipleNegativesRankingLoss",
    "Relations",
    "TrainingData",
    "build_relations",
    "default_model_path",
    "manifest_dataset",
    "rows_dataset",
]
