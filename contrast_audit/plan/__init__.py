"""Batch plans: which rows share a batch, epoch by epoch, and the global batches that a loss
gathering across devices compares."""

from contrast_audit.plan.batches import GlobalBatches, Plan
from contrast_audit.plan.planfile import read_plan_file
from contrast_audit.plan.samplers import make_plan, no_duplicates_batches, random_batches

__all__ = [
    "GlobalBatches",
    "Plan",
    "make_plan",
    "no_duplicates_batches",
    "random_batches",
    "read_plan_file",
]
