"""Under --baseline every format counts the same findings: the summary, the by-source table, the
per-source rates, the plots and the gate (one set: ``AuditResult.active_findings``)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from ci_support import write_rows

from contrast_audit.api import audit
from contrast_audit.config import EmbeddingConfig, build_config
from contrast_audit.embed import EmbeddingStore
from contrast_audit.report import json_format, markdown, summary_line, text
from contrast_audit.report.html import render as html
from contrast_audit.report.plots import anchor_scores, scatter_figure, scatter_plot

OLD = [
    {"anchor": f"question {i} from {src}", "positive": f"shared answer {i % 6}", "source": src}
    for i, src in enumerate(["forum", "docs", "chat"] * 8)
]
NEW = [{"anchor": f"new question {i}", "positive": f"shared answer {i}", "source": "new"} for i in range(3)]


@dataclasses.dataclass
class Holder:
    store: EmbeddingStore
    name: str = "embedding"


@pytest.fixture
def result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    settings = {"embeddings": False, "minhash": False, "batch_size": 8, "seed": 5}
    data = write_rows(tmp_path / "train.jsonl", OLD)
    (tmp_path / "baseline.json").write_text(json_format.render(audit([str(data)], build_config(settings))))
    write_rows(data, [*OLD, *NEW])
    out = audit([str(data)], build_config({**settings, "baseline": str(tmp_path / "baseline.json")}))
    f = out.findings
    assert f.get_column("baseline").any() and not f.get_column("baseline").all(), "needs both kinds"
    return out


def test_every_format_counts_the_same_set(result):
    report = json.loads(json_format.render(result))
    c = report["counts"]
    counted = [f for f in report["findings"] if not f["baseline"] and not f["masked"]]
    anchors = {f["anchor_id"] for f in counted}
    assert c["findings"] == len(counted) == c["new"]["findings"] > 0
    assert c["rows_affected"] == len(anchors)
    assert c["in_baseline"]["findings"] == len(report["findings"]) - len(counted)
    by_source = report["by_source"]
    assert sum(r["findings"] for r in by_source) == c["findings"]
    assert sum(r["rows_affected"] for r in by_source) == c["rows_affected"]  # each row has one source
    assert sum(r["candidates"] for r in by_source) == c["candidates"]
    assert c["fn_rate"] == pytest.approx(c["findings"] / c["candidates"])
    for r in by_source:
        assert r["fn_rate"] == (r["findings"] / r["candidates"] if r["candidates"] else 0.0)
    assert result.metrics()["findings"] == c["findings"] and result.metrics()["fn-rate"] == c["fn_rate"]

    md = markdown.render(result)
    assert f"| false negatives | {c['findings']} |" in md and f"| rows affected | {c['rows_affected']} |" in md
    md_sources = re.findall(r"^\| (forum|docs|chat|new) \| \d+ \| (\d+) \| (\d+) \|", md, re.M)
    assert sum(int(n) for _, _, n in md_sources) == c["findings"]
    assert f"Top {min(20, c['findings'])} of {c['findings']} findings" in md
    assert "new since the baseline" in md

    page = html(result)
    assert f'<td>false negatives</td><td class="n">{c["findings"]}</td>' in page
    assert f'<td>rows affected</td><td class="n">{c["rows_affected"]}</td>' in page

    plain = text.render(result, width=200)
    assert re.search(rf"false negatives\s+│\s+{c['findings']}\s", plain)
    assert re.search(rf"rows affected\s+│\s+{c['rows_affected']}\s", plain)
    line = summary_line(result)
    assert f"{c['findings']} false negatives new since the baseline" in line
    assert f"{c['candidates']:,} candidates with a new row compared" in line


def test_the_scatter_flags_the_rows_affected_and_its_legend_covers_no_point(result):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(result.corpus.n_texts, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    store = EmbeddingStore(EmbeddingConfig(), query=vectors, doc=vectors)
    scored = dataclasses.replace(result, detectors=[Holder(store)])
    scores = anchor_scores(scored)
    affected = result.counts()["rows_affected"]
    assert int(scores.get_column("flagged").sum()) == affected
    assert f"{scores.height} anchors, {affected} flagged" in scatter_plot(scores).caption

    fig = scatter_figure(scores)
    fig.canvas.draw()  # lay the figure out
    (ax,) = fig.axes
    legend, plot_area = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= plot_area.x1  # beside the axes, not over them
