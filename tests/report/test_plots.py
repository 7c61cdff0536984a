"""HTML report plots: the scores come from the detectors' embedding store, clusters from the
findings; every plot is a deterministic SVG or a note saying why it is missing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from ci_support import full_result, lexical_result, write_rows

from contrast_audit.config import EmbeddingConfig
from contrast_audit.embed import EmbeddingStore
from contrast_audit.report.html import CSP, render
from contrast_audit.report.plots import anchor_scores, cluster_sizes, plots


@dataclasses.dataclass
class Holder:
    """Stands in for an embedding detector: only its store is read."""

    store: EmbeddingStore
    name: str = "embedding"


def with_vectors(result, vectors: np.ndarray):
    store = EmbeddingStore(EmbeddingConfig(), query=vectors, doc=vectors)
    return dataclasses.replace(result, detectors=[*result.detectors, Holder(store)])


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    return write_rows(tmp_path / "pairs.jsonl")


def test_anchor_scores_read_the_store(data: Path):
    result = lexical_result(data)
    n = result.corpus.n_texts
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(n, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = anchor_scores(with_vectors(result, vectors))
    c = result.corpus
    assert scores.height == c.n_rows  # one batch: every row has candidates
    for r in scores.iter_rows(named=True):
        a = vectors[c.anchor[r["row"]]]
        assert r["positive_score"] == pytest.approx(float(a @ vectors[c.positive[r["row"]]]), abs=1e-6)
        others = [i for i in range(c.n_rows) if i != r["row"]]
        cands = [c.positive[i] for i in others] + [t for i in others for t in c.negatives[i] if t >= 0]
        assert r["negative_score"] == pytest.approx(max(float(a @ vectors[t]) for t in cands), abs=1e-6)
    flagged = set(scores.filter("flagged").get_column("row").to_list())
    assert flagged == set(result.active_findings.get_column("anchor_row").to_list()) == {0, 1}
    assert anchor_scores(result) is None  # no embeddings, no scores


def test_cluster_sizes(data: Path):
    assert cluster_sizes(lexical_result(data)).tolist() == [2]


def test_plots_are_deterministic_svg_or_a_note(data: Path):
    result = full_result(data)
    n = result.corpus.n_texts
    vectors = np.eye(n, dtype=np.float32)
    first = plots(with_vectors(result, vectors))
    second = plots(with_vectors(full_result(data), vectors))
    assert [p.key for p in first] == ["scatter", "margins", "clusters", "rates", "overlaps"]
    assert [p.svg for p in first] == [p.svg for p in second]
    assert all(p.svg and "<svg" in p.svg for p in first if p.key != "rates")
    assert next(p for p in first if p.key == "rates").svg is None  # no source or cohort column
    assert all("<dc:date>" not in (p.svg or "") for p in first)
    lexical = {p.key: p for p in plots(lexical_result(data))}
    assert lexical["scatter"].svg is None and "--no-embeddings" in lexical["scatter"].caption
    assert lexical["overlaps"].svg is None and "--against" in lexical["overlaps"].caption


def test_html_embeds_plots_and_forbids_requests(data: Path):
    page = render(full_result(data))
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in page
    assert page.count('src="data:image/svg+xml;base64,') == 2
    assert "http://" not in page.replace("http://www.w3.org", "") and "https://" not in page


@pytest.mark.parametrize("batch_size", [2, 3])
def test_anchor_scores_match_the_judges_pairs(tmp_path: Path, batch_size: int):
    """Against the judge's own query→doc candidate pairs, over uneven batches and two epochs."""
    from contrast_audit.api import audit
    from contrast_audit.config import build_config
    from contrast_audit.judge import batch_pairs, chunk_bounds, direction_pairs

    rows = [
        {"anchor": f"question {i}", "positive": f"answer {i}", "negative": f"wrong {i}"}
        if i % 2
        else {"anchor": f"q{i}", "positive": f"a{i}"}
        for i in range(7)
    ]
    path = write_rows(tmp_path / "pairs.jsonl", rows)
    cfg = build_config({"embeddings": False, "minhash": False, "batch_size": batch_size, "epochs": 2})
    result = audit([str(path)], cfg)
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(result.corpus.n_texts, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    result = with_vectors(result, vectors)
    scores = anchor_scores(result)
    c, gb = result.corpus, result.plan.global_batches(1)
    expected = np.full(c.n_rows, -np.inf)
    for start, stop in chunk_bounds(gb, 2):
        pairs, _ = direction_pairs(c, "query_to_doc", *batch_pairs(gb, start, stop))
        cand = np.einsum("ij,ij->i", vectors[c.anchor[pairs.anchor_row]], vectors[pairs.cand_tid])
        np.maximum.at(expected, pairs.anchor_row, cand)
    seen = np.isfinite(expected)
    assert scores.get_column("row").to_list() == np.flatnonzero(seen).tolist()
    np.testing.assert_allclose(scores.get_column("negative_score").to_numpy(), expected[seen], atol=1e-6)


def test_html_has_overlap_tables_locations_and_marks_the_baseline(data: Path):
    from ci_support import flag

    result = flag(full_result(data), findings={"baseline": [True, False]})
    result = dataclasses.replace(result, baseline_file="baseline.json")
    page = render(result)
    # Both kinds of overlap, each row at its file:line, the one in the baseline marked.
    assert "<h2>Leaks of eval data (1 of 1: 1 new, 0 in the baseline)</h2>" in page
    assert "<h2>Repeats of existing data (1 of 1: 0 new, 1 in the baseline)</h2>" in page
    assert f"{data}:5" in page and "eval/queries.jsonl:17" in page and "train/old.jsonl:9" in page
    # The findings table locates both rows and lists the baseline finding after the one that counts, marked.
    findings = page.split("<h2>Top 2 findings: 1 new since the baseline first, then 1 in the baseline")[1].split(
        "</table>"
    )[0]
    assert f"{data}:1" in findings and f"{data}:2" in findings
    assert findings.count('class="base"') == 1
    assert findings.index('class="base"') > findings.index("</tr>")  # the counted one first
    assert '<td>leaks of eval data</td><td class="n">1</td>' in page
    mislabelled = page.split("<h2>Mislabelled hard negatives")[1].split("</table>")[0]
    assert f"{data}:4" in mislabelled
    assert "at least 0 times" not in page


def test_html_opens_with_the_verdict_and_what_counts(data: Path):
    from ci_support import flag

    from contrast_audit.gate import evaluate, parse

    result = flag(full_result(data), findings={"baseline": [True, False]})
    metrics = result.metrics()
    gate = evaluate(parse(["findings>0"], sorted(metrics)), metrics)
    page = render(result, gate=gate)
    verdict = page.index('<p class="verdict">Gate: <strong class="failed">FAILED</strong></p>')
    leaks = page.index("<h2>Leaks of eval data")
    findings = page.index("<h2>Top ")
    assert verdict < leaks < findings < page.index("<h2>Summary</h2>") < page.index("<h2>Findings by evidence</h2>")
    assert "<code>findings&gt;0</code>" in page
    assert '<p class="verdict">' not in render(result)  # no gate: no verdict
