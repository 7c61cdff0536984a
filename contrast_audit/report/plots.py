"""Plots for the HTML report, drawn with matplotlib as SVG and embedded as data URIs, so the page
stays one self-contained file that works offline and fetches nothing.

- anchor–positive score against the highest in-batch negative score of each anchor, flagged
  anchors marked (needs embedding scores: read from the detectors' ``EmbeddingStore``, never
  re-embedded);
- the distribution of margins (highest negative score minus the positive's score);
- duplicate-cluster sizes: rows joined by findings, as connected components;
- the false-negative rate by source and by cohort;
- with ``--against/--eval``, overlaps and leaks per target file.

Rendering is deterministic: a fixed SVG hash salt, no date in the metadata, text drawn as paths.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.api import AuditResult

MAX_POINTS = 3000  # points drawn in the scatter plot; the rest are summarised in its caption
FLAGGED = "#d32f2f"
OTHER = "#607d8b"
RC = {
    "svg.hashsalt": "contrast-audit",
    "svg.fonttype": "path",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.facecolor": "white",
}


@dataclass(frozen=True)
class Plot:
    """One plot: an SVG document, or a note saying why there is none."""

    key: str
    title: str
    svg: str | None
    caption: str

    def data_uri(self) -> str:
        assert self.svg is not None
        return "data:image/svg+xml;base64," + base64.b64encode(self.svg.encode("utf-8")).decode("ascii")


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    return buf.getvalue()


def _figure(width: float = 6.4, height: float = 4.0) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _store(result: AuditResult):
    for detector in result.detectors:
        store = getattr(detector, "store", None)
        if store is not None and getattr(store, "query", None) is not None:
            return store
    return None


SCORE_BLOCK = 4_000_000  # anchor × candidate scores computed at a time


def anchor_scores(result: AuditResult) -> pl.DataFrame | None:
    """Per anchor row: ``positive_score`` (cosine anchor–positive), ``negative_score`` (the highest
    cosine of an in-batch ``query_to_doc`` candidate: another row's positive or hard negative),
    ``flagged`` (the anchor of a finding that counts). ``None`` without embeddings. With the first
    stage, the rows and candidates the full model embedded.

    Batches of one size are scored together as one batched matrix product of the store's unit
    vectors (anchors × candidates), in blocks of about ``SCORE_BLOCK`` scores."""
    from contrast_audit.evidence.embedding import row_positive_scores

    store = _store(result)
    if store is None:
        return None
    corpus = result.corpus
    gb = result.plan.global_batches(result.config.plan.world_size)
    best = np.full(corpus.n_rows, -np.inf, dtype=np.float32)
    sizes = gb.sizes
    width = 1 + corpus.negatives.shape[1]
    for size in np.unique(sizes[sizes > 1]).tolist():
        starts = gb.offsets[:-1][sizes == size]
        step = max(1, SCORE_BLOCK // (size * size * width))
        for lo in range(0, starts.shape[0], step):
            rows = gb.rows[starts[lo : lo + step, None] + np.arange(size)]  # (batches, size)
            q = store.query[corpus.anchor[rows]]
            cand_tid = np.concatenate(
                [corpus.positive[rows], *(corpus.negatives[rows, k] for k in range(width - 1))], 1
            )
            cand_row = np.tile(rows, (1, width))
            scores = np.matmul(q, store.doc[np.maximum(cand_tid, 0)].transpose(0, 2, 1))  # (batches, size, cands)
            invalid = (cand_row[:, None, :] == rows[:, :, None]) | (cand_tid[:, None, :] < 0)
            if store.known is not None:  # texts the first stage left to their static vectors are not scored
                invalid |= ~store.known[np.maximum(cand_tid, 0)][:, None, :]
            scores[invalid] = -np.inf
            np.maximum.at(best, rows.ravel(), scores.max(axis=2).ravel())
    positive = row_positive_scores(store, corpus, False)
    flagged = np.zeros(corpus.n_rows, dtype=bool)
    flagged[result.active_findings.get_column("anchor_row").to_numpy()] = True
    seen = np.isfinite(best) & store.known_rows(corpus)
    return pl.DataFrame(
        {
            "row": np.flatnonzero(seen),
            "positive_score": positive[seen].astype(np.float64),
            "negative_score": best[seen].astype(np.float64),
            "flagged": flagged[seen],
        }
    )


def _sample(scores: pl.DataFrame, limit: int) -> pl.DataFrame:
    """Every flagged anchor (up to ``limit``) and evenly spaced others, in row order: deterministic."""
    flagged = scores.filter(pl.col("flagged")).head(limit)
    others = scores.filter(~pl.col("flagged"))
    room = max(limit - flagged.height, 0)
    if others.height > room:
        idx = np.linspace(0, others.height - 1, room).round().astype(np.int64) if room else np.array([], np.int64)
        others = others[np.unique(idx)]
    return pl.concat([others, flagged])


def scatter_figure(scores: pl.DataFrame) -> Any:
    """The scatter plot's figure; its legend sits outside the axes, so it covers no point."""
    shown = _sample(scores, MAX_POINTS)
    fig = _figure()
    ax = fig.subplots()
    for flag, color, marker, label in ((False, OTHER, ".", "not flagged"), (True, FLAGGED, "x", "flagged")):
        part = shown.filter(pl.col("flagged") == flag)
        if part.height:
            ax.scatter(
                part.get_column("positive_score").to_numpy(),
                part.get_column("negative_score").to_numpy(),
                s=12 if flag else 6,
                c=color,
                marker=marker,
                linewidths=0.8,
                alpha=0.9 if flag else 0.5,
                label=f"{label} ({int((scores.get_column('flagged') == flag).sum())})",
                rasterized=False,
            )
    lo = float(min(scores.get_column("positive_score").min(), scores.get_column("negative_score").min()))
    ax.plot([lo, 1.0], [lo, 1.0], color="#9e9e9e", linewidth=0.8, linestyle="--", label="negative = positive")
    ax.set_xlabel("cosine(anchor, its positive)")
    ax.set_ylabel("highest cosine(anchor, in-batch negative)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    return fig


NO_SCORES = "Embedding evidence is off (--no-embeddings): there are no {} to plot."
STREAMED = (
    "The streaming engine holds no vectors of the whole data, so there are no {} to plot: a scan on the "
    "in-memory engine (--engine memory) draws them."
)


def scatter_plot(scores: pl.DataFrame | None, why: str = NO_SCORES) -> Plot:
    title = "Anchor–positive score vs the highest in-batch negative"
    if scores is None:
        return Plot("scatter", title, None, why.format("scores"))
    flagged = int(scores.get_column("flagged").sum())
    caption = (
        f"{scores.height} anchors, {flagged} flagged (the anchors of the findings that count, as in rows affected); "
        "above the dashed line an in-batch negative outscores the anchor's own positive."
    )
    shown = _sample(scores, MAX_POINTS)
    if shown.height < scores.height:
        caption += f" {shown.height} drawn: every flagged anchor and evenly spaced others."
    return Plot("scatter", title, _svg(scatter_figure(scores)), caption)


def margin_plot(scores: pl.DataFrame | None, why: str = NO_SCORES) -> Plot:
    title = "Margins: highest in-batch negative minus the positive"
    if scores is None:
        return Plot("margins", title, None, why.format("margins"))
    margin = (scores.get_column("negative_score") - scores.get_column("positive_score")).to_numpy()
    flagged = scores.get_column("flagged").to_numpy()
    fig = _figure()
    ax = fig.subplots()
    bins = np.linspace(float(margin.min()), float(margin.max()) + 1e-9, 41)
    ax.hist(
        [margin[~flagged], margin[flagged]],
        bins=bins,
        stacked=True,
        color=[OTHER, FLAGGED],
        label=[f"not flagged ({int((~flagged).sum())})", f"flagged ({int(flagged.sum())})"],
    )
    ax.axvline(0.0, color="#9e9e9e", linewidth=0.8, linestyle="--")
    ax.set_xlabel("max cosine(anchor, negative) − cosine(anchor, positive)")
    ax.set_ylabel("anchors")
    ax.legend(frameon=False)
    above = int((margin > 0).sum())
    return Plot(
        "margins", title, _svg(fig), f"{above} of {margin.shape[0]} anchors have a negative above their positive."
    )


def cluster_sizes(result: AuditResult) -> np.ndarray:
    """Sizes of the groups of rows joined by findings that count (connected components, 2+ rows)."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    f = result.active_findings
    n = result.corpus.n_rows
    if f.height == 0:
        return np.array([], dtype=np.int64)
    a = f.get_column("anchor_row").to_numpy()
    b = f.get_column("cand_row").to_numpy()
    keep = a != b
    graph = coo_matrix((np.ones(int(keep.sum()), dtype=np.int8), (a[keep], b[keep])), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    sizes = np.bincount(labels)
    return sizes[sizes >= 2]


def cluster_plot(result: AuditResult) -> Plot:
    from matplotlib.ticker import MaxNLocator

    title = "Duplicate clusters: rows joined by findings"
    sizes = cluster_sizes(result)
    if sizes.shape[0] == 0:
        return Plot("clusters", title, None, "No findings: no rows are joined.")
    values, counts = np.unique(sizes, return_counts=True)
    fig = _figure(6.4, 3.2)
    ax = fig.subplots()
    ax.bar([str(v) for v in values.tolist()], counts, color=FLAGGED, width=0.6)
    ax.set_xlim(-0.75, len(values) - 0.25)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("rows in the cluster")
    ax.set_ylabel("clusters")
    return Plot(
        "clusters",
        title,
        _svg(fig),
        f"{sizes.shape[0]} cluster{'s' if sizes.shape[0] != 1 else ''} of rows hold {int(sizes.sum())} rows; "
        f"the largest has {int(sizes.max())}.",
    )


def rate_plot(result: AuditResult) -> Plot:
    title = "False-negative rate by source and cohort"
    panels = []
    for column in ("source", "cohort"):
        rows = result.breakdown(column)
        if not (len(rows) == 1 and rows[0][column] == "(none)"):
            panels.append((column, rows[:20]))
    if not panels:
        return Plot("rates", title, None, "The data has no source or cohort column (--source, --cohort).")
    height = max(2.0, 0.28 * max(len(rows) for _, rows in panels) + 1.2)
    fig = _figure(6.4 if len(panels) == 1 else 9.0, height)
    axes = np.atleast_1d(fig.subplots(1, len(panels)))
    for ax, (column, rows) in zip(axes, panels, strict=True):
        labels = [str(r[column]) for r in rows][::-1]
        rates = [r["fn_rate"] * 100 for r in rows][::-1]
        ax.barh(labels, rates, color=FLAGGED)
        ax.set_xlabel("false negatives per 100 candidates")
        ax.set_title(f"by {column}", fontsize=9)
    return Plot("rates", title, _svg(fig), "The 20 values with the most findings per column.")


def overlap_plot(result: AuditResult) -> Plot:
    from matplotlib.ticker import MaxNLocator

    title = "Overlaps and leaks by target file"
    o = result.overlaps
    if o.height == 0:
        return Plot("overlaps", title, None, "No overlaps: run with --against and --eval to check new rows.")
    counted = (
        o.filter(~pl.col("baseline"))
        .group_by("target_file", "target")
        .agg(pl.len().alias("n"))
        .pivot(on="target", index="target_file", values="n")
        .fill_null(0)
    )
    for kind in ("eval", "existing"):
        if kind not in counted.columns:
            counted = counted.with_columns(pl.lit(0, pl.UInt32).alias(kind))
    if counted.height == 0:
        return Plot("overlaps", title, None, f"All {o.height} overlaps are in the baseline.")
    counted = counted.sort(["eval", "existing", "target_file"], descending=[True, True, False]).head(20)
    labels = counted.get_column("target_file").to_list()[::-1]
    leaks = counted.get_column("eval").to_numpy()[::-1]
    repeats = counted.get_column("existing").to_numpy()[::-1]
    fig = _figure(6.4, max(2.0, 0.3 * len(labels) + 1.2))
    ax = fig.subplots()
    ax.barh(labels, leaks, color=FLAGGED, label="eval leaks")
    ax.barh(labels, repeats, left=leaks, color=OTHER, label="repeats of existing rows")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("new overlaps (baseline excluded)")
    ax.legend(frameon=False)
    return Plot("overlaps", title, _svg(fig), "New rows matching each target file, by kind.")


def plots(result: AuditResult) -> list[Plot]:
    """Every plot of the HTML report, in page order."""
    import matplotlib

    with matplotlib.rc_context(RC):
        scores = anchor_scores(result)
        why = STREAMED if result.config.embedding.enabled else NO_SCORES
        return [
            scatter_plot(scores, why),
            margin_plot(scores, why),
            cluster_plot(result),
            rate_plot(result),
            overlap_plot(result),
        ]


__all__ = ["MAX_POINTS", "Plot", "anchor_scores", "cluster_sizes", "plots", "scatter_figure"]
