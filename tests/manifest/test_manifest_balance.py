"""``manifest --balance`` and ``--strategy cluster``: quotas per batch, every row planned, the header says how."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app

LEXICAL = ("--no-embeddings", "--no-minhash")


def skewed_rows() -> list[dict]:
    """One anchor with 24 rows (a large query), three with 4, and 28 distinct single rows: 64 rows."""
    rows = [
        {"id": f"big-{k}", "anchor": "the large query", "positive": f"judged passage {k} alpha{k}"} for k in range(24)
    ]
    for c in range(3):
        rows += [
            {"id": f"m{c}-{k}", "anchor": f"medium query {c} beta{c}", "positive": f"passage {c}.{k} gamma{c}{k}"}
            for k in range(4)
        ]
    rows += [
        {"id": f"s{s}", "anchor": f"lone query {s} zeta{s}", "positive": f"lone passage {s} omega{s}"}
        for s in range(28)
    ]
    return rows


def run(*args: str):
    return CliRunner().invoke(app, ["manifest", *args, "-q"])


def lines(path: Path) -> tuple[dict, list[dict]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return records[0], records[1:]


def per_batch_max(batches: list[dict]) -> int:
    def anchor(rid: str) -> str:
        return rid.rsplit("-", 1)[0] if "-" in rid else rid

    return max(max(Counter(anchor(r) for r in b["rows"]).values()) for b in batches)


def test_balance_bounds_an_anchor_per_batch_and_records_it(pairs_file, tmp_path):
    data = pairs_file(skewed_rows())
    plain, balanced = tmp_path / "plain.jsonl", tmp_path / "balanced.jsonl"
    assert run(str(data), "--out", str(plain), "--batch-size", "8", *LEXICAL).exit_code == 0
    result = run(str(data), "--out", str(balanced), "--batch-size", "8", "--balance", "1", "--epochs", "2", *LEXICAL)
    assert result.exit_code == 0, result.output
    _, plain_batches = lines(plain)
    header, batches = lines(balanced)
    assert per_batch_max(plain_batches) > 3  # the seeded random batches let the large query crowd a batch
    assert per_batch_max(batches) == 3  # 24 rows over 8 batches: at most ceil(24 / 8) = 3
    assert header["balance"]["max_per_batch"] == 1 and header["balance"]["rows_over_quota"] == 0
    assert header["balance"]["largest_quota"] == 3 and header["plan"]["source"] == "random+balance"
    assert header["balance"]["largest_anchor_share_of_epoch"] == pytest.approx(24 / 64, abs=1e-6)
    per_epoch = Counter((b["epoch"], r) for b in batches for r in b["rows"])
    assert set(per_epoch.values()) == {1} and len(per_epoch) == 2 * 64  # every row once per epoch
    assert [len(b["rows"]) for b in batches if b["epoch"] == 0] == [len(b["rows"]) for b in plain_batches]
    again = tmp_path / "again.jsonl"
    said = CliRunner().invoke(
        app,
        ["manifest", str(data), "--out", str(again), "--batch-size", "8", "--balance", "1", "--epochs", "2", *LEXICAL],
    )
    assert "balance 1: at most 3 rows of one anchor in a batch, 0 over quota" in said.output
    assert again.read_bytes() == balanced.read_bytes()


def test_balance_masks_what_still_shares_a_batch(pairs_file, tmp_path):
    data = pairs_file(skewed_rows())
    out = tmp_path / "m.jsonl"
    assert run(str(data), "--out", str(out), "--batch-size", "8", "--balance", "1", *LEXICAL).exit_code == 0
    result = CliRunner().invoke(
        app, ["scan", str(data), "--plan", str(out), "--format", "json", "-q", *LEXICAL, "--fail-on", "certain>0"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["masked"]["findings"] > 0 and report["counts"]["findings"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--balance", "0"), "balance"),
        (("--strategy", "multi-positive", "--balance", "1"), "multi-positive"),
        (("--clusters", "3"), "--clusters only goes with --strategy cluster"),
        (("--strategy", "cluster"), "embeddings are off"),
    ],
)
def test_balance_and_cluster_refusals_exit_2(pairs_file, tmp_path, args, message):
    data = pairs_file(skewed_rows())
    result = run(str(data), "--out", str(tmp_path / "x.jsonl"), *LEXICAL, *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "x.jsonl").exists()


def topic_rows() -> list[dict]:
    """Two topics of 12 queries each; each query has two rows (two judged passages)."""
    topics = {
        "cooking": ["bake bread at home", "roast a chicken", "make fresh pasta", "cook rice well"],
        "astronomy": ["orbit of mars", "how stars form", "black hole mass", "moons of jupiter"],
    }
    rows = []
    for topic, queries in topics.items():
        for i in range(12):
            q = f"{queries[i % 4]} question {i}"
            for k in range(2):
                rows.append({"id": f"{topic}{i}-{k}", "anchor": q, "positive": f"{topic} passage {i}.{k} about {q}"})
    return rows


@pytest.mark.slow
def test_cluster_builds_topic_batches_masks_their_false_negatives_and_records_the_clustering(pairs_file, tmp_path):
    data = pairs_file(topic_rows())
    out = tmp_path / "c.jsonl"
    result = run(
        str(data),
        "--out",
        str(out),
        "--strategy",
        "cluster",
        "--batch-size",
        "8",
        "--clusters",
        "2",
        "--balance",
        "1",
        "--no-minhash",
    )
    assert result.exit_code == 0, result.output
    header, batches = lines(out)
    info = header["clustering"]
    assert (info["k"], info["seed"]) == (2, header["plan"]["seed"])
    assert info["model"] == "sentence-transformers/all-MiniLM-L6-v2" and len(info["model_fingerprint"]) == 64
    assert header["strategy"] == "cluster" and header["balance"]["rows_over_quota"] == 0
    assert sorted(r for b in batches for r in b["rows"]) == sorted(r["id"] for r in topic_rows())
    topics = [{r.rstrip("-0123456789") for r in b["rows"]} for b in batches]
    assert sum(len(t) == 1 for t in topics) >= 4  # of 6 batches, most hold one topic only
    assert per_batch_max(batches) == 1  # a query's two rows never share a batch
    again = tmp_path / "again.jsonl"
    run(
        str(data),
        "--out",
        str(again),
        "--strategy",
        "cluster",
        "--batch-size",
        "8",
        "--clusters",
        "2",
        "--balance",
        "1",
        "--no-minhash",
    )
    # the same batches, masks and clustering (the header's embedding stats say cached instead of embedded)
    assert lines(again)[1] == batches and lines(again)[0]["clustering"] == info
    scan = CliRunner().invoke(
        app,
        [
            "scan",
            str(data),
            "--plan",
            str(out),
            "--format",
            "json",
            "-q",
            "--no-minhash",
            "--fail-on",
            "likely>0",
            "--fail-on",
            "certain>0",
        ],
    )
    assert scan.exit_code == 0, scan.output  # every finding at likely and above is masked
