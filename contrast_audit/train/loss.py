"""MultipleNegativesRankingLoss with a manifest's masks and extra positives.

Same arguments and semantics as sentence-transformers' ``MultipleNegativesRankingLoss`` (``scale`` =
1/temperature, ``directions``, ``partition_mode``, ``gather_across_devices``). For each batch it reads the
dataset row indices from the label column, looks up which (anchor row, candidate row, role) pairs the
manifest masks or marks as positives, and:

- sets a masked candidate's logit to -inf before ``logsumexp`` (log space; never exp-then-subtract), so it
  leaves the anchor's softmax denominator. The anchor's own positive is never masked, so an anchor whose
  every negative is masked has a finite loss (zero: its positive is the only candidate left);
- with extra positives (``multi-positive`` manifests), scores each anchor against its positive set P:
  ``multi_positive="sum"`` (default): ``-log(sum_{p in P} softmax_p)`` = ``-(logsumexp(s_P) - logsumexp(s))``;
  ``multi_positive="mean"``: ``-(1/|P|) sum_{p in P} log softmax_p``; ``multi_positive="off"``: the marked
  positives are masked instead (they leave the denominator, only the labelled positive is a target).
  With a single positive all three equal the standard loss;
- with row weights (a manifest built with ``--weight anchor``), multiplies each anchor's loss term by its
  row's weight before the mean over the batch's anchors. Without them nothing is multiplied.

Rows with fewer hard negatives than others are padded by ``manifest_dataset`` (``TrainingData.padded``);
their padded cells are excluded from every anchor's softmax like a structural exclusion, so a ragged
dataset trains on every row and every real negative.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from sentence_transformers.base.losses.merged_forward import embed_columns
from sentence_transformers.util import all_gather, all_gather_with_grad, cos_sim, get_rank
from torch import Tensor, nn

from contrast_audit.manifest.format import Manifest
from contrast_audit.train.relations import DIRECTIONS, Relations, build_relations

MultiPositive = Literal["sum", "mean", "off"]


class MaskedMultipleNegativesRankingLoss(nn.Module):
    """InfoNCE over in-batch (and hard) negatives with the manifest's false negatives excluded.

    Args:
        model: the SentenceTransformer being trained.
        manifest: the manifest (``read_manifest(path)``) whose masks, positives and row weights apply, or
            prebuilt :class:`Relations`.
        row_ids: the :class:`~contrast_audit.train.data.TrainingData` that ``manifest_dataset`` returns (its
            row ids, number of hard negatives and padded cells are taken from it), or just the data's row
            ids in dataset order (dataset row i has id ``row_ids[i]``); the dataset's ``label`` column holds
            row indices (see :func:`contrast_audit.train.data.manifest_dataset`).
        scale: similarities are multiplied by ``scale`` (= 1/temperature) before the softmax.
        directions, partition_mode, gather_across_devices: as in ``MultipleNegativesRankingLoss``.
        multi_positive: label normalisation for extra positives: ``"sum"``, ``"mean"`` or ``"off"``.
        n_negatives: hard-negative columns per row (taken from ``TrainingData``; else at least what the
            manifest addresses).
        padded: boolean (rows × n_negatives), True for padded hard-negative cells, which are never
            candidates (taken from ``TrainingData``).
    """

    def __init__(
        self,
        model: nn.Module,
        manifest: Manifest | Relations,
        row_ids: Sequence[str] | None = None,
        scale: float = 20.0,
        directions: tuple[str, ...] = ("query_to_doc",),
        partition_mode: Literal["joint", "per_direction"] = "joint",
        gather_across_devices: bool = False,
        multi_positive: MultiPositive = "sum",
        n_negatives: int = 8,
        padded: np.ndarray | None = None,
    ) -> None:
        super().__init__()
        if not scale > 0:
            raise ValueError(f"scale must be > 0 (scale = 1/temperature), got {scale}")
        if not directions or not set(directions) <= set(DIRECTIONS):
            raise ValueError(f"directions must be a non-empty subset of {DIRECTIONS}, got {directions}")
        if "query_to_doc" not in directions:
            raise ValueError("'query_to_doc' direction is required (contains the positive pair).")
        if partition_mode not in ("joint", "per_direction"):
            raise ValueError(f"partition_mode must be 'joint' or 'per_direction', got {partition_mode!r}")
        if partition_mode == "per_direction" and set(directions) & {"query_to_query", "doc_to_doc"}:
            raise ValueError("partition_mode='per_direction' only takes 'query_to_doc' and 'doc_to_query'")
        if multi_positive not in ("sum", "mean", "off"):
            raise ValueError(f"multi_positive must be 'sum', 'mean' or 'off', got {multi_positive!r}")
        self.model = model
        self.scale = float(scale)
        self.similarity_fct = cos_sim
        self.directions = tuple(directions)
        self.partition_mode = partition_mode
        self.gather_across_devices = gather_across_devices
        self.multi_positive = multi_positive
        data = row_ids if hasattr(row_ids, "row_ids") and hasattr(row_ids, "dataset") else None
        if data is not None:
            row_ids = data.row_ids
            n_negatives = data.n_negatives
            padded = data.padded if padded is None else padded
        self.padded = None
        if padded is not None and np.asarray(padded).any():
            self.padded = np.asarray(padded, dtype=bool)
        if isinstance(manifest, Relations):
            self.relations = manifest
        else:
            if row_ids is None:
                raise ValueError("row_ids is required with a manifest: the data's row ids in dataset order")
            self.relations = build_relations(manifest, row_ids, n_negatives)
        self.last_batch: dict[str, int] = {"masked_pairs": 0, "extra_positives": 0, "padded_negatives": 0}

    @property
    def temperature(self) -> float:
        return 1.0 / self.scale

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        embeddings = embed_columns(self.model, sentence_features)
        return self.compute_loss_from_embeddings(embeddings, labels)

    def _relation_masks(
        self, anchors: np.ndarray, candidates: np.ndarray, roles: np.ndarray, direction: str
    ) -> tuple[np.ndarray, np.ndarray]:
        keys = self.relations.key(anchors[:, None], candidates[None, :], roles[None, :])
        return self.relations.lookup("masked", direction, keys), self.relations.lookup("positives", direction, keys)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        if len(embeddings) < 2:
            raise ValueError(f"Expected at least 2 embeddings, got {len(embeddings)}")
        if labels is None or labels.dim() != 1 or labels.size(0) != embeddings[0].size(0):
            raise ValueError(
                "the masked loss needs the dataset row index of every row in the 'label' column "
                "(build the dataset with contrast_audit.train.manifest_dataset)"
            )
        queries, docs = embeddings[0], embeddings[1:]
        batch_size = queries.size(0)
        offset = 0
        rows = labels
        if self.gather_across_devices:
            queries = all_gather_with_grad(queries)
            docs = [all_gather_with_grad(doc) for doc in docs]
            rows = all_gather(labels)
            offset = get_rank() * batch_size
        device = queries.device
        world = queries.size(0)
        n_cols = len(docs)
        docs_all = torch.cat(docs, dim=0)
        local = torch.arange(offset, offset + batch_size, device=device)
        row_idx = torch.arange(batch_size, device=device)
        world_rows = rows.detach().cpu().numpy().astype(np.int64)
        anchor_rows = world_rows[offset : offset + batch_size]
        doc_rows, doc_roles = np.tile(world_rows, n_cols), np.repeat(np.arange(n_cols, dtype=np.int64), world)
        query_rows, query_roles = world_rows, np.zeros(world, dtype=np.int64)

        sims: dict[str, Tensor] = {"query_to_doc": self.similarity_fct(queries[local], docs_all)}
        structural: dict[str, Tensor] = {"query_to_doc": torch.zeros_like(sims["query_to_doc"], dtype=torch.bool)}
        own: dict[str, Tensor] = {}
        own_q2d = torch.zeros_like(structural["query_to_doc"])
        own_q2d[row_idx, local] = True
        own["query_to_doc"] = own_q2d
        padded_cols = self._padded_columns(doc_rows, doc_roles, device)
        structural["query_to_doc"] |= padded_cols
        if "query_to_query" in self.directions:
            sims["query_to_query"] = self.similarity_fct(queries[local], queries)
            block = torch.zeros_like(sims["query_to_query"], dtype=torch.bool)
            block[row_idx, local] = True
            structural["query_to_query"] = block
            own["query_to_query"] = torch.zeros_like(block)
        if "doc_to_query" in self.directions:
            sims["doc_to_query"] = self.similarity_fct(queries, docs[0][local]).T
            structural["doc_to_query"] = torch.zeros_like(sims["doc_to_query"], dtype=torch.bool)
            diag = torch.zeros_like(structural["doc_to_query"])
            diag[row_idx, local] = True
            own["doc_to_query"] = diag
        if "doc_to_doc" in self.directions:
            sims["doc_to_doc"] = self.similarity_fct(docs_all, docs[0][local]).T
            same = torch.eye(world, device=device, dtype=torch.bool)[local].repeat(1, n_cols)
            structural["doc_to_doc"] = same | padded_cols
            own["doc_to_doc"] = torch.zeros_like(same)

        masked_pairs = extra_positives = 0
        scores: dict[str, Tensor] = {}
        positives: dict[str, Tensor] = {}
        for direction in self.directions:
            if direction in ("query_to_doc", "doc_to_doc"):
                rel_mask, rel_pos = self._relation_masks(anchor_rows, doc_rows, doc_roles, direction)
            else:
                rel_mask, rel_pos = self._relation_masks(anchor_rows, query_rows, query_roles, direction)
            rel_mask = torch.from_numpy(rel_mask).to(device)
            rel_pos = torch.from_numpy(rel_pos).to(device) & ~structural[direction] & ~own[direction]
            if self.multi_positive == "off":
                rel_mask, rel_pos = rel_mask | rel_pos, torch.zeros_like(rel_pos)
            # The labelled positive and the extra positives are never masked; structural exclusions stay.
            rel_mask = rel_mask & ~own[direction] & ~rel_pos & ~structural[direction]
            masked_pairs += int(rel_mask.sum())
            extra_positives += int(rel_pos.sum())
            logits = sims[direction] * self.scale
            scores[direction] = logits.masked_fill(rel_mask | structural[direction], float("-inf"))
            # In one joint softmax the labelled pair is the target once (its query_to_doc entry); the
            # doc_to_query diagonal holds the same score and stays in the denominator, as in MNRL.
            target = own[direction] if (direction == "query_to_doc" or self.partition_mode == "per_direction") else None
            positives[direction] = rel_pos if target is None else target | rel_pos
        self.last_batch = {
            "masked_pairs": masked_pairs,
            "extra_positives": extra_positives,
            "padded_negatives": int(padded_cols[0].sum()),
        }

        if self.partition_mode == "joint":
            losses = self._anchor_losses(torch.cat(list(scores.values()), 1), torch.cat(list(positives.values()), 1))
        else:
            losses = torch.stack([self._anchor_losses(scores[d], positives[d]) for d in scores]).mean(0)
        if self.relations.weighted:
            weights = self.relations.weights[anchor_rows]  # the local anchors' rows
            losses = losses * torch.from_numpy(weights).to(device=losses.device, dtype=losses.dtype)
        return losses.mean()

    def _padded_columns(self, doc_rows: np.ndarray, doc_roles: np.ndarray, device: torch.device) -> Tensor:
        """A (1, columns) mask of the candidate columns that are padded hard-negative cells."""
        out = np.zeros(doc_rows.shape[0], dtype=bool)
        if self.padded is not None:
            neg = doc_roles > 0
            out[neg] = self.padded[doc_rows[neg], doc_roles[neg] - 1]
        return torch.from_numpy(out)[None, :].to(device)

    def _anchor_losses(self, scores: Tensor, positive: Tensor) -> Tensor:
        """Per-anchor loss of one softmax over ``scores`` with the positive set ``positive``."""
        log_z = torch.logsumexp(scores, dim=1)
        if self.multi_positive == "mean":
            log_prob = torch.where(positive, scores - log_z[:, None], torch.zeros_like(scores))
            return -log_prob.sum(1) / positive.sum(1)
        return -(torch.logsumexp(scores.masked_fill(~positive, float("-inf")), dim=1) - log_z)

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "similarity_fct": "cos_sim",
            "gather_across_devices": self.gather_across_devices,
            "directions": self.directions,
            "partition_mode": self.partition_mode,
            "multi_positive": self.multi_positive,
            "manifest_relations": self.relations.counts,
            "anchor_weights": self.relations.weighted,
        }

    @property
    def citation(self) -> str:
        return """
@misc{oord2019representationlearningcontrastivepredictive,
      title={Representation Learning with Contrastive Predictive Coding},
      author={Aaron van den Oord and Yazhe Li and Oriol Vinyals},
      year={2019},
      eprint={1807.03748},
      archivePrefix={arXiv},
      primaryClass={cs.LG},
      url={https://arxiv.org/abs/1807.03748},
}
@misc{miech2020endtoendlearningvisualrepresentations,
      title={End-to-End Learning of Visual Representations from Uncurated Instructional Videos},
      author={Antoine Miech and Jean-Baptiste Alayrac and Lucas Smaira and Ivan Laptev and Josef Sivic and Andrew Zisserman},
      year={2020},
      eprint={1912.06430},
      archivePrefix={arXiv},
      primaryClass={cs.CV},
      url={https://arxiv.org/abs/1912.06430},
}
"""
