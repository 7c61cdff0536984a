"""``train(...)``: fine-tune a SentenceTransformer from data and its manifest.

The manifest's batches are replayed by :class:`ManifestBatchSampler`, its masks, positives and row weights
applied by :class:`MaskedMultipleNegativesRankingLoss`, inside sentence-transformers' own trainer. Every loss
and gradient is checked finite; the model directory is written atomically with a JSON Lines training
log beside the weights.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from contrast_audit.errors import AuditError, ConfigError
from contrast_audit.io.atomic import write_atomic
from contrast_audit.manifest.format import Manifest, read_manifest

LOG = logging.getLogger("contrast_audit.train")
LOG_NAME = "training-log.jsonl"
LOG_KIND = "contrast-audit-training-log"
NOT_COMPARABLE = (
    "Loss values of different strategies or manifests are not comparable: masking and extra positives change "
    "each anchor's softmax denominator. Compare models by evaluation (contrast-audit eval), not by loss."
)


class TrainingError(AuditError):
    """Training stopped: a non-finite loss or gradient."""


@dataclass
class TrainResult:
    out: str
    steps: int
    log: str
    records: list[dict[str, Any]] = field(default_factory=list)
    padded_negatives: int = 0
    padded_rows: int = 0
    weight: dict[str, Any] | None = None  # the manifest's row weights, as its header records them, when applied


def make_trainer_class():
    """A SentenceTransformerTrainer that checks every loss and gradient and records each step."""
    from sentence_transformers import SentenceTransformerTrainer

    class CheckedTrainer(SentenceTransformerTrainer):
        step_records: list[dict[str, Any]]

        def training_step(self, model, inputs, num_items_in_batch=None):
            loss = super().training_step(model, inputs, num_items_in_batch)
            step = self.state.global_step + 1
            value = float(loss)
            if not math.isfinite(value):
                raise TrainingError(f"step {step}: the loss is {value}", fix="lower --lr or --scale, or check the data")
            grads = [p.grad for p in model.parameters() if p.grad is not None]
            if grads and not bool(torch.isfinite(torch.stack([g.detach().float().norm() for g in grads])).all()):
                raise TrainingError(f"step {step}: a gradient is not finite", fix="lower --lr or --scale")
            record: dict[str, Any] = {"step": step, "loss": round(value, 6)}
            record.update(getattr(self.loss, "last_batch", {}))
            self.step_records.append(record)
            return loss

    return CheckedTrainer


def fit(
    model: Any,
    dataset: Any,
    loss: torch.nn.Module,
    *,
    batch_sampler: Any,
    batch_size: int,
    work_dir: str,
    epochs: int = 1,
    max_steps: int = -1,
    lr: float = 2e-5,
    seed: int = 0,
    progress: bool = True,
    warmup_ratio: float = 0.1,
) -> list[dict[str, Any]]:
    """Run sentence-transformers' trainer with the checks; returns one record per step."""
    from sentence_transformers import SentenceTransformerTrainingArguments

    args = SentenceTransformerTrainingArguments(
        output_dir=work_dir,
        num_train_epochs=epochs,
        max_steps=max_steps,
        per_device_train_batch_size=batch_size,
        learning_rate=lr,
        warmup_steps=warmup_ratio,
        seed=seed,
        data_seed=seed,
        batch_sampler=batch_sampler,
        save_strategy="no",
        report_to="none",
        logging_strategy="no",
        disable_tqdm=not progress,
        use_cpu=not torch.cuda.is_available(),
        dataloader_drop_last=False,
    )
    trainer_cls = make_trainer_class()
    trainer = trainer_cls(model=model, args=args, train_dataset=dataset, loss=loss)
    trainer.step_records = []
    trainer.train()
    return trainer.step_records


def check_model_dir(out: str, inputs: Sequence[str]) -> None:
    """Before any training: ``out`` must be new (or an empty directory), not an input, and its parent writable."""
    from contrast_audit.io.atomic import check_output_dir

    target = Path(out)
    if not str(out).strip():
        raise ConfigError("--out is empty", fix="name a new directory for the model, e.g. --out model/")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"--out {out}: already exists and is not empty", fix="pass a new --out directory")
    real = Path(os.path.realpath(out))
    for item in inputs:
        if Path(os.path.realpath(item)) == real:
            raise ConfigError(f"--out {out} is the input {item}", fix="name another directory")
    check_output_dir(real.parent, option="--out")


def save_model_atomic(model: Any, out: str, extra: Callable[[Path], None] | None = None) -> None:
    """Save to a temporary sibling directory, then rename it to ``out``."""
    target = Path(out)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ConfigError(f"{out}: already exists and is not empty", fix="pass a new --out directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save(str(tmp))
        if extra is not None:
            extra(tmp)
        if target.exists():
            target.rmdir()
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def train(
    data: str | Sequence[str],
    manifest: str | Manifest,
    out: str,
    *,
    model: str | None = None,
    epochs: int | None = None,
    max_steps: int | None = None,
    lr: float = 2e-5,
    seed: int = 0,
    scale: float = 20.0,
    multi_positive: str = "sum",
    progress: bool = True,
) -> TrainResult:
    """Train ``model`` (default: the packaged model) on ``data`` as ``manifest`` plans it; write ``out``."""
    from contrast_audit import model as model_io
    from contrast_audit.train.data import manifest_dataset
    from contrast_audit.train.loss import MaskedMultipleNegativesRankingLoss
    from contrast_audit.train.sampler import ManifestBatchSampler

    check_model_dir(
        out, [*([data] if isinstance(data, str) else data), *([manifest] if isinstance(manifest, str) else [])]
    )
    if not scale > 0:
        raise ConfigError(f"--scale must be > 0 (scale = 1/temperature), got {scale}")
    if not lr > 0:
        raise ConfigError(f"--lr must be > 0, got {lr}")
    if max_steps is not None and max_steps < 1:
        raise ConfigError(f"--max-steps must be >= 1, got {max_steps}")
    plan = read_manifest(manifest) if isinstance(manifest, str | os.PathLike) else manifest
    manifest_label = str(manifest) if isinstance(manifest, str | os.PathLike) else "manifest"
    n_epochs = plan.epochs if epochs is None else epochs
    if not 1 <= n_epochs <= plan.epochs:
        raise ConfigError(
            f"--epochs {n_epochs}: the manifest plans {plan.epochs} epoch(s)",
            fix="pass --epochs between 1 and the manifest's epochs, or write the manifest with more --epochs",
        )
    training = manifest_dataset(data, plan)
    source = model_io.resolve(model)
    st_model = model_io.load(source)
    torch.manual_seed(seed)
    loss = MaskedMultipleNegativesRankingLoss(
        st_model,
        plan,
        training,
        scale=scale,
        directions=plan.directions,
        multi_positive=multi_positive,  # type: ignore[arg-type]
    )
    weight = _applied_weight(plan, loss)
    sampler = ManifestBatchSampler.factory(plan, training.row_ids)
    batch_size = max(max(b.ranks) for b in plan.batches)
    work = tempfile.mkdtemp(prefix="contrast-audit-train-")
    try:
        records = fit(
            st_model,
            training.dataset,
            loss,
            batch_sampler=sampler,
            batch_size=batch_size,
            work_dir=work,
            epochs=n_epochs,
            max_steps=-1 if max_steps is None else max_steps,
            lr=lr,
            seed=seed,
            progress=progress,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = {
        "kind": LOG_KIND,
        "note": NOT_COMPARABLE,
        "manifest": manifest_label,
        "manifest_fingerprint": plan.fingerprint,
        "strategy": plan.strategy,
        "model": {"id": source.model_id, "path": source.path},
        "scale": scale,
        "temperature": 1.0 / scale,
        "normalisation": multi_positive,
        "directions": list(plan.directions),
        "lr": lr,
        "seed": seed,
        "epochs": n_epochs,
        "max_steps": max_steps,
        "rows": training.rows.height,
        "hard_negatives_per_row": training.n_negatives,
        "padded_rows": training.padded_rows,
        "padded_negatives": training.padded_negatives,
        "weight": weight,
    }
    common = {"scale": scale, "temperature": 1.0 / scale, "normalisation": multi_positive}
    lines = [header] + [{**r, **common, "directions": list(plan.directions)} for r in records]
    text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)

    def write_log(directory: Path) -> None:
        write_atomic(directory / LOG_NAME, text)

    save_model_atomic(st_model, out, write_log)
    return TrainResult(
        out=out,
        steps=len(records),
        log=str(Path(out) / LOG_NAME),
        records=records,
        padded_negatives=training.padded_negatives,
        padded_rows=training.padded_rows,
        weight=weight,
    )


def _applied_weight(plan: Manifest, loss: Any) -> dict[str, Any] | None:
    """The manifest's weight (its header's ``weight``) when the loss applies row weights; logged."""
    if not loss.relations.weighted:
        return None
    weight = dict(plan.header.get("weight") or {"by": "row"})
    LOG.info(
        "%s: the manifest's %s weights are applied in the loss (%s)",
        plan.path,
        weight.get("by"),
        weight.get("rule", "each anchor's term times its row's weight"),
    )
    return weight
