"""Batch manifests from an audit: ``mask`` (the user's plan, findings masked), ``group`` (related rows
re-planned into different batches, what remains masked), ``multi-positive`` (related rows planned
together, each anchor's related candidates marked as its positives) and ``cluster`` (topic-hard batches:
anchors clustered by embedding, a batch filled from one cluster, its false negatives masked). ``balance``
bounds how many rows of one anchor a batch may hold (``contrast_audit.plan.balance``); ``weight="anchor"``
gives every row a weight in the loss so that every anchor carries the same share of it.

The same stages as ``audit``: load → normalise → evidence → plan → judge, then the judged findings at or
above ``mask_severity`` become the manifest's entries.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from contrast_audit import __version__
from contrast_audit.api import Prepared, Progress, judge_plan, prepare
from contrast_audit.config import AuditConfig
from contrast_audit.corpus import POSITIVE_ROLE, role_name
from contrast_audit.errors import ConfigError
from contrast_audit.evidence import SEVERITIES, SEVERITY_NAMES, Detector
from contrast_audit.judge import Judgement
from contrast_audit.manifest.format import (
    KIND,
    MAX_WEIGHT,
    SCHEMA_VERSION,
    STRATEGIES,
    WEIGHTS,
    Manifest,
    ManifestBatch,
    data_fingerprint,
)
from contrast_audit.manifest.replay import with_positions
from contrast_audit.plan import Plan, make_plan, read_plan_file
from contrast_audit.plan.balance import balance_batches, quotas, units_of
from contrast_audit.plan.cluster import Clustering, cluster_sequence, kmeans
from contrast_audit.plan.grouped import Relations, batch_capacities, rank_sizes, separate, together

SEVERITY_RANK = {name: rank for rank, name in SEVERITY_NAMES.items()}


@dataclass
class ManifestResult:
    manifest: Manifest
    prepared: Prepared
    plan: Plan
    judgement: Judgement
    separated_left: int | None = None
    clustering: Clustering | None = None

    def render(self) -> str:
        return self.manifest.render()

    @property
    def counts(self) -> dict[str, Any]:
        return dict(self.manifest.header["counts"])


def build_manifest(
    paths: Sequence[str],
    config: AuditConfig | None = None,
    *,
    strategy: str = "mask",
    mask_severity: str = "likely",
    detectors: Sequence[Detector] | None = None,
    progress: Progress | None = None,
    config_file: str | None = None,
    balance: int | None = None,
    clusters: int | None = None,
    weight: str | None = None,
) -> ManifestResult:
    """Plan batches with ``strategy`` and write down which in-batch pairs to mask or treat as positives.

    ``balance``: at most this many rows of one anchor (rows sharing an anchor text or a declared group) per
    global batch, or the fewest the epoch allows (see ``contrast_audit.plan.balance``); every row is still
    planned once per epoch. ``clusters``: k of the ``cluster`` strategy's k-means (default: the distinct
    anchors divided by the global batch size). ``weight="anchor"``: every row gets a weight in the loss,
    ``n_rows / (units * rows of its unit)`` over the data's rows, the units being ``balance``'s anchors: the
    weights' mean over the rows is 1 and every anchor carries the same total weight per epoch.
    """
    if strategy not in STRATEGIES:
        raise ConfigError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if mask_severity not in SEVERITIES:
        raise ConfigError(f"mask-severity must be one of {', '.join(SEVERITIES)}, got {mask_severity!r}")
    cfg = config or AuditConfig()
    if cfg.engine == "stream" or (cfg.engine == "ray" and not cfg.embedding.enabled):
        raise ConfigError(
            f"manifest runs on the in-memory engine, not --engine {cfg.engine}: its group and balance "
            "relations span every row's texts (--engine ray computes only its vectors on Ray)",
            fix="leave --engine out (or pass --engine memory); scan streams inputs larger than memory",
        )
    _check_balance(strategy, balance, clusters, cfg)
    if weight is not None and weight not in WEIGHTS:
        raise ConfigError(
            f"weight must be one of {', '.join(WEIGHTS)}, got {weight!r}",
            fix="pass --weight anchor (every anchor the same share of the loss), or leave it out",
        )
    if strategy != "mask" and cfg.plan.plan_file:
        raise ConfigError(
            f"--strategy {strategy} plans its own batches; --plan only goes with --strategy mask",
            fix="drop --plan, or use --strategy mask to mask the findings of your plan",
        )
    user_plan: Plan | None = None

    def read_plan(loaded) -> None:
        nonlocal user_plan
        if cfg.plan.plan_file:
            user_plan = read_plan_file(cfg.plan.plan_file, loaded.rows.get_column("id"))

    with contextlib.ExitStack() as stack:
        encoder = None
        if cfg.engine == "ray":  # the vectors on Ray's actors, everything else here
            from contrast_audit.engine import on_ray

            encoder = on_ray.embedder(stack.enter_context(on_ray.connected(cfg.ray_address)), progress)
        prepared = prepare(
            paths,
            cfg,
            detectors=detectors,
            progress=progress,
            before_evidence=read_plan,
            encoder=encoder,
            can_stream=False,  # a manifest's relations span every row
        )
    corpus = prepared.corpus
    threshold = SEVERITY_RANK[mask_severity]
    world = cfg.plan.world_size
    separated_left = None
    clustering = None
    units = balance_units(corpus) if balance is not None or weight is not None else None
    row_weight = anchor_weights(units) if units is not None and weight is not None else None
    if row_weight is not None and row_weight.size and row_weight.max() > MAX_WEIGHT:
        sizes = np.bincount(units)
        raise ConfigError(
            f"--weight anchor would weigh the rows of an anchor with {int(sizes.min())} of {units.shape[0]:,} rows "
            f"{row_weight.max():,.0f} each, above the {MAX_WEIGHT:,.0f} a manifest may hold",
            fix="leave --weight out (--balance N spreads each anchor's rows over the batches instead)",
        )
    if strategy == "mask":
        plan = user_plan or make_plan(cfg.plan, corpus.n_rows, corpus.raw)
        source = plan.source
    elif strategy == "cluster":
        clustering, row_cluster = cluster_anchors(prepared, cfg, clusters)
        plan = _cluster_plan(row_cluster, units, cfg, balance)
        source = strategy
    else:
        relations = row_relations(prepared, threshold, progress)
        plan, separated_left = _replan(relations, cfg, strategy)
        source = strategy
    balance_info = None
    if units is not None and balance is not None:
        if strategy != "cluster":
            plan = _rebalance(plan, units, cfg, balance)
            source = f"{source}+balance"
        balance_info = _balance_info(plan, units, cfg, balance)
    judgement = judge_plan(prepared, plan, world, progress)
    gb = plan.global_batches(world)
    acted = judgement.findings.filter(pl.col("severity_rank") >= threshold)
    own = judgement.mislabelled.filter(pl.col("severity_rank") >= threshold)
    batches, masked, positive = _batches(prepared, plan, gb, acted, own, strategy, row_weight)
    conflicts_left = (
        acted.height if strategy != "multi-positive" else int(acted.filter(pl.col("cand_role") > POSITIVE_ROLE).height)
    )
    header = {
        "kind": KIND,
        "schema_version": SCHEMA_VERSION,
        "strategy": strategy,
        "mask_severity": mask_severity,
        "fingerprint": data_fingerprint(prepared.loaded.rows),
        "rows": corpus.n_rows,
        "files": prepared.loaded.files,
        "mapping": [m.to_dict() for m in prepared.loaded.mappings],
        "plan": {
            "source": source,
            "sampler": cfg.plan.sampler,
            "batch_size": cfg.plan.batch_size,
            "seed": cfg.plan.seed,
            "epochs": cfg.plan.epochs,
            "drop_last": cfg.plan.drop_last,
            "world_size": world,
        },
        "loss": {"directions": list(cfg.loss.directions)},
        "config": cfg.to_dict(),
        "config_file": config_file,
        "detectors": judgement.detector_info,
        "counts": {
            "batches": len(gb),
            "device_batches": plan.n_batches,
            "rows_planned": int(gb.rows.shape[0]),
            "masked_pairs": masked,
            "positive_pairs": positive,
            "findings_acted_on": acted.height,
            "mislabelled_negatives_masked": own.height,
            "conflicts_left": conflicts_left,
            **({"rows_not_separated": separated_left} if separated_left is not None else {}),
        },
        "tool": {"name": "contrast-audit", "version": __version__},
    }
    if balance_info is not None:
        header["balance"] = balance_info
    if units is not None and row_weight is not None:
        header["weight"] = {"by": weight, "units": int(units.max()) + 1, "rule": WEIGHT_RULE}
    if clustering is not None:
        store = _embedding_store(prepared.detectors)
        info = store.info() if store is not None else {}
        header["clustering"] = {
            **clustering.info(),
            "clustered": "distinct anchor texts, by their query embeddings",
            "model": info.get("model"),
            "model_fingerprint": info.get("fingerprint"),
            "query_prompt": info.get("query_prompt"),
        }
    manifest = Manifest(header, batches)
    return ManifestResult(manifest, prepared, plan, judgement, separated_left, clustering)


def _check_balance(strategy: str, balance: int | None, clusters: int | None, cfg: AuditConfig) -> None:
    if balance is not None:
        if isinstance(balance, bool) or not isinstance(balance, int) or balance < 1:
            raise ConfigError(
                f"--balance must be a whole number >= 1 (rows of one anchor per batch), got {balance!r}",
                fix="pass e.g. --balance 1 (spread each anchor's rows as evenly as the epoch allows)",
            )
        if strategy == "multi-positive":
            raise ConfigError(
                "--balance spreads an anchor's rows over batches; multi-positive keeps related rows together",
                fix="drop --balance, or use --strategy mask, group or cluster",
            )
        if cfg.plan.plan_file:
            raise ConfigError(
                "--balance re-plans the batches; --plan asks for yours as they are",
                fix="drop --balance, or drop --plan and let --sampler and --seed make the plan",
            )
    if strategy == "cluster" and not cfg.embedding.enabled:
        raise ConfigError(
            "--strategy cluster clusters anchors by their embeddings, and embeddings are off",
            fix="drop --no-embeddings (or set embeddings = true), or use --strategy mask or group",
        )
    if clusters is not None:
        if strategy != "cluster":
            raise ConfigError("--clusters only goes with --strategy cluster", fix="drop --clusters")
        if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 1:
            raise ConfigError(f"--clusters must be a whole number >= 1, got {clusters!r}")


def balance_units(corpus) -> np.ndarray:
    """The unit that ``balance`` bounds, per row: rows sharing an anchor text, or a declared group (and
    whatever those connect), are one anchor."""
    return units_of([corpus.anchor.astype(np.int64), corpus.group.astype(np.int64)])


WEIGHT_RULE = "n_rows / (units * rows of the unit)"


def anchor_weights(units: np.ndarray) -> np.ndarray:
    """Per row: ``n_rows / (units * rows of its unit)`` (``units`` dense labels 0..U-1, one per row), so the
    mean over the rows is 1 and every unit's rows add up to the same total."""
    sizes = np.bincount(units)
    return units.shape[0] / (sizes.shape[0] * sizes[units].astype(np.float64))


def _epochs(plan: Plan, world: int):
    """Per epoch: the rows of its global batches in plan order and the global batch sizes."""
    gb = plan.global_batches(world)
    for epoch in np.unique(gb.epoch).tolist():
        index = np.flatnonzero(gb.epoch == epoch)
        rows = gb.rows[gb.offsets[index[0]] : gb.offsets[index[-1] + 1]]
        yield epoch, rows, gb.sizes[index]


def _from_global(batches_by_epoch: list[tuple[int, list[np.ndarray]]], world: int, source: str) -> Plan:
    device: list[np.ndarray] = []
    epochs: list[int] = []
    for epoch, batches in batches_by_epoch:
        for batch in batches:
            start = 0
            for size in rank_sizes(batch.shape[0], world):
                device.append(batch[start : start + size])
                epochs.append(epoch)
                start += size
    return Plan.from_batches(device, epochs, source)


def _rebalance(plan: Plan, units: np.ndarray, cfg: AuditConfig, cap: int) -> Plan:
    """The plan's global batches, each epoch re-cut so no anchor exceeds its quota; sizes and order kept
    where the quota allows."""
    world = cfg.plan.world_size
    out = []
    for epoch, rows, sizes in _epochs(plan, world):
        batches, _ = balance_batches(rows, units, sizes, cap)
        out.append((epoch, batches))
    return _from_global(out, world, plan.source)


def _balance_info(plan: Plan, units: np.ndarray, cfg: AuditConfig, cap: int) -> dict[str, Any]:
    """What the header records: the cap, the unit, the largest anchor's share and quota, the rows over it."""
    over = 0
    most = 0
    largest_quota = 0
    epoch_share = 0.0
    for _, rows, sizes in _epochs(plan, cfg.plan.world_size):
        quota = quotas(units, rows, sizes.shape[0], cap)
        largest_quota = max(largest_quota, int(quota.max()) if quota.size else 0)
        batch_of = np.repeat(np.arange(sizes.shape[0]), sizes)
        pairs, counts = np.unique(np.stack([batch_of, units[rows]], axis=1), axis=0, return_counts=True)
        over += int(np.clip(counts - quota[pairs[:, 1]], 0, None).sum())
        most = max(most, int(counts.max()) if counts.size else 0)
        epoch_share = max(epoch_share, float(np.bincount(units[rows]).max() / rows.shape[0]) if rows.size else 0.0)
    return {
        "max_per_batch": cap,
        "unit": "anchor: rows sharing an anchor text or a declared group",
        "rule": "at most max(max_per_batch, ceil(anchor rows / batches in the epoch)) rows of one anchor per global batch",
        "largest_quota": largest_quota,
        "most_rows_of_one_anchor_in_a_batch": most,
        "rows_over_quota": over,
        "largest_anchor_share_of_epoch": round(epoch_share, 6),
    }


def cluster_anchors(prepared: Prepared, cfg: AuditConfig, k: int | None) -> tuple[Clustering, np.ndarray]:
    """k-means over the distinct anchor texts' query embeddings; each row's cluster."""
    corpus = prepared.corpus
    store = _embedding_store(prepared.detectors)
    if store is None:
        raise ConfigError(
            "--strategy cluster clusters anchors by their embeddings, and embeddings are off",
            fix="drop --no-embeddings (or set embeddings = true), or use --strategy mask or group",
        )
    store.prepare(corpus)
    anchors, inverse = np.unique(corpus.anchor, return_inverse=True)
    global_batch = cfg.plan.batch_size * cfg.plan.world_size
    k = k if k is not None else max(1, anchors.shape[0] // global_batch)
    clustering = kmeans(store.query[anchors], k, cfg.plan.seed)
    return clustering, clustering.labels[inverse.reshape(-1)]


def _cluster_plan(row_cluster: np.ndarray, units: np.ndarray | None, cfg: AuditConfig, cap: int | None) -> Plan:
    """Each epoch: clusters in random order (seeded per epoch), a cluster's rows in random order, cut into
    global batches (under the balance quota when asked)."""
    p = cfg.plan
    capacities = batch_capacities(row_cluster.shape[0], p.batch_size, p.world_size, p.drop_last)
    if capacities.shape[0] == 0:
        raise ConfigError(
            f"{row_cluster.shape[0]} rows make no batch of {p.batch_size * p.world_size} with --drop-last",
            fix="lower --batch-size or keep the last batch (--keep-last)",
        )
    out = []
    for epoch in range(p.epochs):
        rng = np.random.default_rng([p.seed, epoch])
        sequence = cluster_sequence(row_cluster, rng)
        if units is not None and cap is not None:
            batches, _ = balance_batches(sequence, units, capacities, cap)
        else:
            bounds = np.r_[0, np.cumsum(capacities)]
            batches = [sequence[bounds[b] : bounds[b + 1]] for b in range(capacities.shape[0])]
        out.append((epoch, batches))
    return _from_global(out, p.world_size, "cluster")


def row_relations(prepared: Prepared, threshold: int, progress: Progress | None = None) -> Relations:
    """Rows related through any evidence at or above the severity, found without a batch plan.

    Keys: each row's anchor and positive text ids (shared text: exact duplicates, same anchor, one-hop
    links) and its declared group. Edges: rows whose anchor or positive texts are MinHash near-duplicates,
    and, with embeddings, each row's nearest rows by anchor and by positive (``neighbour_edges``), kept only
    where the detectors judge them related at the severity.
    """
    corpus = prepared.corpus
    n = corpus.n_rows
    rows = np.arange(n, dtype=np.int64)
    key_rows = [rows, rows]
    key_ids = [corpus.anchor, corpus.positive]
    if (corpus.group >= 0).any():
        has = corpus.group >= 0
        key_rows.append(rows[has])
        key_ids.append(corpus.group[has] + corpus.n_texts)
    candidate_a: list[np.ndarray] = []
    candidate_b: list[np.ndarray] = []
    for detector in prepared.detectors:
        inner = getattr(detector, "inner", detector)
        pairs = getattr(inner, "pairs", None)
        if isinstance(pairs, pl.DataFrame) and pairs.height and "tid_a" in pairs.columns:
            a, b = _rows_of_text_pairs(
                corpus, pairs.get_column("tid_a").to_numpy(), pairs.get_column("tid_b").to_numpy()
            )
            candidate_a.append(a)
            candidate_b.append(b)
    store = _embedding_store(prepared.detectors)
    if store is not None:
        a, b = neighbour_edges(store, corpus)
        candidate_a.append(a)
        candidate_b.append(b)
    edge_a = np.concatenate(candidate_a) if candidate_a else np.zeros(0, np.int64)
    edge_b = np.concatenate(candidate_b) if candidate_b else np.zeros(0, np.int64)
    edge_a, edge_b = _judged_edges(prepared, edge_a, edge_b, threshold)
    return Relations(n, np.concatenate(key_rows), np.concatenate(key_ids), edge_a, edge_b)


def _rows_of_text_pairs(corpus, tid_a: np.ndarray, tid_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row pairs whose anchor or positive texts are the given text pairs."""
    n = corpus.n_rows
    holders = pl.DataFrame(
        {"tid": np.r_[corpus.anchor, corpus.positive], "row": np.r_[np.arange(n), np.arange(n)]}
    ).unique()
    pairs = pl.DataFrame({"tid_a": tid_a, "tid_b": tid_b})
    joined = pairs.join(holders.rename({"tid": "tid_a", "row": "row_a"}), on="tid_a").join(
        holders.rename({"tid": "tid_b", "row": "row_b"}), on="tid_b"
    )
    return joined.get_column("row_a").to_numpy(), joined.get_column("row_b").to_numpy()


def _embedding_store(detectors: Sequence[Detector]):
    for detector in detectors:
        inner = getattr(detector, "inner", detector)
        store = getattr(inner, "store", None)
        if store is not None and getattr(inner, "name", "") == "embedding":
            return store
    return None


NEIGHBOURS = 8
_SIMILARITIES_PER_BLOCK = 32_000_000  # float32 similarities held at once (128 MB)


def neighbour_edges(store, corpus, k: int = NEIGHBOURS) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` nearest rows by anchor embedding and by positive embedding (exact, one matrix
    product per block of rows), as candidate row pairs for the detectors to judge."""
    out_a: list[np.ndarray] = []
    out_b: list[np.ndarray] = []
    n = corpus.n_rows
    k = min(k, n - 1)
    if k <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    block_rows = max(1, _SIMILARITIES_PER_BLOCK // n)
    for matrix, tids in ((store.query, corpus.anchor), (store.doc, corpus.positive)):
        vectors = np.ascontiguousarray(matrix[tids])
        for lo in range(0, n, block_rows):
            block = vectors[lo : lo + block_rows]
            sims = block @ vectors.T
            idx = np.arange(lo, min(n, lo + block_rows))
            sims[np.arange(idx.shape[0]), idx] = -np.inf
            top = np.argpartition(-sims, k, axis=1)[:, :k]
            out_a.append(np.repeat(idx, k))
            out_b.append(top.reshape(-1).astype(np.int64))
    return np.concatenate(out_a), np.concatenate(out_b)


def _judged_edges(
    prepared: Prepared, edge_a: np.ndarray, edge_b: np.ndarray, threshold: int
) -> tuple[np.ndarray, np.ndarray]:
    """Keep candidate row pairs that a detector judges related at the severity, in either direction."""
    from contrast_audit.evidence import Pairs
    from contrast_audit.judge import evaluate

    keep = edge_a != edge_b
    edge_a, edge_b = edge_a[keep], edge_b[keep]
    if edge_a.shape[0] == 0:
        return edge_a, edge_b
    lo, hi = np.minimum(edge_a, edge_b), np.maximum(edge_a, edge_b)
    unique = np.unique(np.stack([lo, hi], axis=1), axis=0)
    a = np.r_[unique[:, 0], unique[:, 1]]
    b = np.r_[unique[:, 1], unique[:, 0]]
    corpus = prepared.corpus
    pairs = Pairs("query_to_doc", a, b, np.full(a.shape[0], POSITIVE_ROLE, dtype=np.int64), corpus.positive[b])
    found, severity, _ = evaluate(prepared.detectors, pairs)
    related = found & (severity >= threshold)
    half = unique.shape[0]
    related = related[:half] | related[half:]
    return unique[related, 0], unique[related, 1]


def _replan(relations: Relations, cfg: AuditConfig, strategy: str) -> tuple[Plan, int | None]:
    p = cfg.plan
    capacities = batch_capacities(relations.n_rows, p.batch_size, p.world_size, p.drop_last)
    if capacities.shape[0] == 0:
        raise ConfigError(
            f"{relations.n_rows} rows make no batch of {p.batch_size * p.world_size} with --drop-last",
            fix="lower --batch-size or keep the last batch (--keep-last)",
        )
    device: list[np.ndarray] = []
    epochs: list[int] = []
    left_total = 0
    for epoch in range(p.epochs):
        rng = np.random.default_rng([p.seed, epoch])
        if strategy == "group":
            batches, left = separate(relations, capacities, rng)
            left_total += left
        else:
            batches = together(relations, capacities, rng)
        for batch in batches:
            start = 0
            for size in rank_sizes(batch.shape[0], p.world_size):
                device.append(batch[start : start + size])
                epochs.append(epoch)
                start += size
    return Plan.from_batches(device, epochs, strategy), (left_total if strategy == "group" else None)


def _batches(
    prepared: Prepared,
    plan: Plan,
    gb,
    acted: pl.DataFrame,
    own: pl.DataFrame,
    strategy: str,
    row_weight: np.ndarray | None = None,
) -> tuple[list[ManifestBatch], int, int]:
    """Manifest batches with their entries (and each row's weight, when given); the numbers of masked and
    positive entries."""
    ids = prepared.corpus.rows.get_column("id")
    positioned = with_positions(acted, gb).select("batch", "direction", "a_pos", "c_pos", "cand_role")
    if strategy == "multi-positive":
        positive_entries = positioned.filter(pl.col("cand_role") <= POSITIVE_ROLE)
        mask_entries = positioned.filter(pl.col("cand_role") > POSITIVE_ROLE)
    else:
        positive_entries = positioned.clear()
        mask_entries = positioned
    # A row's own mislabelled hard negative is masked in every batch holding the row (query_to_doc).
    if own.height:
        occ = pl.DataFrame(
            {
                "batch": np.repeat(np.arange(len(gb), dtype=np.int64), gb.sizes),
                "anchor_row": gb.rows.astype(np.int64),
                "a_pos": np.arange(gb.rows.shape[0], dtype=np.int64) - np.repeat(gb.offsets[:-1], gb.sizes),
            }
        )
        self_entries = (
            own.select("anchor_row", "cand_role")
            .join(occ, on="anchor_row")
            .select(
                "batch",
                pl.lit("query_to_doc").alias("direction"),
                "a_pos",
                pl.col("a_pos").alias("c_pos"),
                "cand_role",
            )
        )
        mask_entries = pl.concat([mask_entries, self_entries])
    order = ["batch", "direction", "a_pos", "c_pos", "cand_role"]
    by_batch_mask = _grouped(mask_entries.unique().sort(order))
    by_batch_pos = _grouped(positive_entries.unique().sort(order))
    batches: list[ManifestBatch] = []
    id_list = ids.to_list()
    for g in range(len(gb)):
        rows = gb.rows[gb.offsets[g] : gb.offsets[g + 1]]
        batches.append(
            ManifestBatch(
                batch=g,
                epoch=int(gb.epoch[g]),
                rows=tuple(id_list[r] for r in rows.tolist()),
                ranks=_ranks(plan, gb, g),
                mask=by_batch_mask.get(g, {}),
                positives=by_batch_pos.get(g, {}),
                weights=tuple(row_weight[rows].tolist()) if row_weight is not None else None,
            )
        )
    return batches, mask_entries.unique().height, positive_entries.unique().height


def _ranks(plan: Plan, gb, g: int) -> tuple[int, ...]:
    """Sizes of the device batches that make up global batch ``g``."""
    start, stop = int(gb.offsets[g]), int(gb.offsets[g + 1])
    first = int(np.searchsorted(plan.offsets, start, side="right") - 1)
    sizes: list[int] = []
    d = first
    covered = start
    while covered < stop and d < plan.n_batches:
        size = int(plan.offsets[d + 1] - plan.offsets[d])
        sizes.append(size)
        covered += size
        d += 1
    return tuple(sizes)


def _grouped(entries: pl.DataFrame) -> dict[int, dict[str, list[tuple[int, int, str]]]]:
    out: dict[int, dict[str, list[tuple[int, int, str]]]] = {}
    if entries.height == 0:
        return out
    roles = {code: role_name(code) for code in entries.get_column("cand_role").unique().to_list()}
    for batch, direction, a, c, role in entries.iter_rows():
        out.setdefault(batch, {}).setdefault(direction, []).append((a, c, roles[role]))
    return out


__all__ = ["ManifestResult", "anchor_weights", "build_manifest", "neighbour_edges", "row_relations"]
