"""The train and eval commands: refusals exit 2 before any model work; one affordable end-to-end run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app

RUNNER = CliRunner()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def topic_rows() -> list[dict]:
    """Eight rows; rows of one topic share their anchor, so their positives are each other's false negatives."""
    topics = ["bird migration routes", "library catalog indexing", "protein folding energy", "tax law reform"]
    rows = []
    for i in range(8):
        t = topics[i % 4]
        rows.append(
            {
                "id": f"r{i}",
                "anchor": f"what is known about {t}",
                "positive": f"study {i} of {t} in detail",
                "negative": f"unrelated note {i} on cooking",
            }
        )
    return rows


def beir(tmp_path: Path) -> tuple[str, str, str]:
    corpus = [{"_id": f"d{i}", "title": "", "text": r["positive"]} for i, r in enumerate(topic_rows())]
    queries = [{"_id": "q0", "text": "bird migration"}, {"_id": "q1", "text": "tax law"}]
    write_rows(tmp_path / "corpus.jsonl", corpus)
    write_rows(tmp_path / "queries.jsonl", queries)
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\nq0\td4\t1\nq1\td3\t1\nq1\td7\t1\n")
    return "queries.jsonl", "corpus.jsonl", "qrels.tsv"


def lexical_manifest(strategy: str = "mask") -> list[str]:
    return [
        "manifest",
        "pairs.jsonl",
        "--out",
        f"{strategy}.jsonl",
        "--strategy",
        strategy,
        "--batch-size",
        "4",
        "--no-embeddings",
        "--no-minhash",
        "--quiet",
    ]


def test_train_refuses_a_manifest_for_other_data(tmp_path):
    write_rows(tmp_path / "pairs.jsonl", topic_rows())
    result = RUNNER.invoke(app, lexical_manifest())
    assert result.exit_code == 0, result.output
    changed = topic_rows()
    changed[3]["positive"] = "an edited document"
    write_rows(tmp_path / "pairs.jsonl", changed)
    result = RUNNER.invoke(app, ["train", "pairs.jsonl", "--manifest", "mask.jsonl", "--out", "model", "-q"])
    assert result.exit_code == 2
    assert result.output.count("sha256:") == 2
    assert not (tmp_path / "model").exists()


def test_train_refuses_bad_settings_and_a_non_manifest(tmp_path):
    write_rows(tmp_path / "pairs.jsonl", topic_rows())
    assert RUNNER.invoke(app, lexical_manifest()).exit_code == 0
    for extra in (["--scale", "0"], ["--max-steps", "0"], ["--epochs", "3"]):
        result = RUNNER.invoke(app, ["train", "pairs.jsonl", "--manifest", "mask.jsonl", "--out", "m", "-q", *extra])
        assert result.exit_code == 2, (extra, result.output)
    result = RUNNER.invoke(app, ["train", "pairs.jsonl", "--manifest", "pairs.jsonl", "--out", "m", "-q"])
    assert result.exit_code == 2 and "manifest header" in result.output


def test_train_checks_out_before_any_model_work(tmp_path):
    write_rows(tmp_path / "pairs.jsonl", topic_rows())
    assert RUNNER.invoke(app, lexical_manifest()).exit_code == 0
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "weights.bin").write_text("keep me")
    (tmp_path / "readonly").mkdir(mode=0o500)
    for out, message in (
        ("taken", "not empty"),
        ("pairs.jsonl", "not empty"),
        ("", "--out is empty"),
        ("readonly/model", "cannot write"),
    ):
        result = RUNNER.invoke(app, ["train", "pairs.jsonl", "--manifest", "mask.jsonl", "--out", out, "-q"])
        if out == "readonly/model" and os.geteuid() == 0:
            continue  # root writes into read-only directories
        assert result.exit_code == 2 and message in result.output, (out, result.output)
    assert (tmp_path / "taken" / "weights.bin").read_text() == "keep me"
    assert json.loads((tmp_path / "pairs.jsonl").read_text().splitlines()[0])["id"] == "r0"


def test_eval_refuses_qrels_without_matches(tmp_path):
    q, c, _ = beir(tmp_path)
    (tmp_path / "bad.tsv").write_text("q9\td9\t1\n")
    result = RUNNER.invoke(app, ["eval", "default", "--queries", q, "--corpus", c, "--qrels", "bad.tsv"])
    assert result.exit_code == 2 and "bad.tsv" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["mask", "multi-positive"])
def test_manifest_train_eval_end_to_end(tmp_path, strategy):
    write_rows(tmp_path / "pairs.jsonl", topic_rows())
    result = RUNNER.invoke(app, lexical_manifest(strategy))
    assert result.exit_code == 0, result.output
    result = RUNNER.invoke(
        app, ["train", "pairs.jsonl", "--manifest", f"{strategy}.jsonl", "--out", "model", "--max-steps", "2", "-q"]
    )
    assert result.exit_code == 0, result.output
    log = [json.loads(line) for line in (tmp_path / "model" / "training-log.jsonl").read_text().splitlines()]
    assert "not comparable" in log[0]["note"] and log[0]["temperature"] == pytest.approx(0.05)
    assert [r["step"] for r in log[1:]] == [1, 2]
    assert all(r["scale"] == 20.0 and r["directions"] == ["query_to_doc"] for r in log[1:])
    # the mask manifest of same-anchor rows masks pairs in the first batch; multi-positive marks positives
    key = "masked_pairs" if strategy == "mask" else "extra_positives"
    assert sum(r[key] for r in log[1:]) > 0
    q, c, r = beir(tmp_path)
    result = RUNNER.invoke(app, ["eval", "model", "--queries", q, "--corpus", c, "--qrels", r, "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["queries"] == 2 and report["corpus"] == 8
    assert set(report["metrics"]) == {"recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"}
    assert report["metrics"]["recall@10"] == pytest.approx(1.0)  # 8 documents: everything is in the top 10
    # the model directory loads with sentence-transformers
    from sentence_transformers import SentenceTransformer

    assert SentenceTransformer(str(tmp_path / "model")).encode(["x"]).shape == (1, 384)


@pytest.mark.slow
def test_a_non_finite_loss_stops_training_with_exit_2_naming_the_step(tmp_path, monkeypatch):
    from contrast_audit.train.loss import MaskedMultipleNegativesRankingLoss

    write_rows(tmp_path / "pairs.jsonl", topic_rows())
    assert RUNNER.invoke(app, lexical_manifest()).exit_code == 0
    original = MaskedMultipleNegativesRankingLoss.compute_loss_from_embeddings
    calls = {"n": 0}

    def second_step_nan(self, embeddings, labels):
        calls["n"] += 1
        value = original(self, embeddings, labels)
        return value * float("nan") if calls["n"] == 2 else value

    monkeypatch.setattr(MaskedMultipleNegativesRankingLoss, "compute_loss_from_embeddings", second_step_nan)
    result = RUNNER.invoke(app, ["train", "pairs.jsonl", "--manifest", "mask.jsonl", "--out", "model", "-q"])
    assert result.exit_code == 2, result.output
    assert "step 2" in result.output and "nan" in result.output
    assert not (tmp_path / "model").exists()


@pytest.mark.slow
def test_the_trainer_sees_the_manifest_batches_of_every_epoch(tmp_path, monkeypatch):
    from contrast_audit.manifest.format import read_manifest
    from contrast_audit.train.loss import MaskedMultipleNegativesRankingLoss
    from contrast_audit.train.trainer import train

    write_rows(tmp_path / "pairs.jsonl", topic_rows())
    args = [*lexical_manifest(), "--batch-size", "3", "--epochs", "2"]
    assert RUNNER.invoke(app, args).exit_code == 0
    seen: list[list[int]] = []
    original = MaskedMultipleNegativesRankingLoss.compute_loss_from_embeddings

    def record(self, embeddings, labels):
        seen.append(labels.tolist())
        return original(self, embeddings, labels)

    monkeypatch.setattr(MaskedMultipleNegativesRankingLoss, "compute_loss_from_embeddings", record)
    result = train("pairs.jsonl", "mask.jsonl", "model", progress=False)
    manifest = read_manifest("mask.jsonl")
    expected = [[int(r[1:]) for r in b.rows] for b in manifest.batches]  # ids r0..r7 are rows 0..7
    assert seen == expected and result.steps == len(expected) == 6


class TestTrainRefusesTamperedManifests:
    @pytest.mark.parametrize(
        ("change", "needle"),
        [
            (lambda h: h["plan"].update(world_size="2"), "'plan.world_size' is a string"),
            (lambda h: h["plan"].update(epochs=10**30), "'plan.epochs'"),
            (lambda h: h.update(plan=[1]), "'plan' is an array"),
            (lambda h: h["mapping"][0].update(negatives=5), "'mapping.0.negatives'"),
            (lambda h: h["loss"].pop("directions"), "'loss.directions' is missing"),
        ],
    )
    def test_header(self, tmp_path, change, needle):
        write_rows(tmp_path / "pairs.jsonl", topic_rows())
        assert RUNNER.invoke(app, lexical_manifest()).exit_code == 0
        lines = (tmp_path / "mask.jsonl").read_text().splitlines()
        header = json.loads(lines[0])
        change(header)
        (tmp_path / "mask.jsonl").write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
        result = RUNNER.invoke(app, ["train", "pairs.jsonl", "--manifest", "mask.jsonl", "--out", "model", "-q"])
        assert result.exit_code == 2, result.output
        assert "mask.jsonl:1:" in result.stderr and needle in result.stderr
        assert not (tmp_path / "model").exists()

    @pytest.mark.parametrize(
        ("role", "needle"),
        [
            ("negative_" + "9" * 100, "its k of 100 digits is out of range"),  # used to be exit 3 (OverflowError)
            ("negative_0", "k = 0 is out of range"),
        ],
    )
    def test_a_negative_index_out_of_range(self, tmp_path, role, needle):
        write_rows(tmp_path / "pairs.jsonl", topic_rows())
        assert RUNNER.invoke(app, lexical_manifest()).exit_code == 0
        lines = (tmp_path / "mask.jsonl").read_text().splitlines()
        batch = json.loads(lines[1])
        batch["mask"] = {"query_to_doc": [[0, 1, role]]}
        (tmp_path / "mask.jsonl").write_text("\n".join([lines[0], json.dumps(batch), *lines[2:]]) + "\n")
        result = RUNNER.invoke(app, ["train", "pairs.jsonl", "--manifest", "mask.jsonl", "--out", "model", "-q"])
        assert result.exit_code == 2, result.output
        assert "mask.jsonl:2: bad entry" in result.stderr and needle in result.stderr, result.stderr
        assert not (tmp_path / "model").exists()

    def test_a_manifest_of_other_columns_is_a_fingerprint_mismatch(self, tmp_path):
        write_rows(tmp_path / "pairs.jsonl", topic_rows())
        assert RUNNER.invoke(app, lexical_manifest()).exit_code == 0
        write_rows(tmp_path / "other.jsonl", [{"q": "a", "d": "b"}, {"q": "c", "d": "e"}])
        result = RUNNER.invoke(app, ["train", "other.jsonl", "--manifest", "mask.jsonl", "--out", "model", "-q"])
        assert result.exit_code == 2, result.output
        assert "planned for other data" in result.stderr and "sha256:" in result.stderr


class TestEvalInputs:
    """Bad eval files are exit 2 with the file and line, before the model is loaded."""

    @pytest.mark.parametrize(
        ("role", "content", "where", "needle"),
        [
            ("queries", b'{"_id": "q0", "text": "caf\xe9"}\n', "queries.jsonl:1:", "not valid UTF-8"),
            ("qrels", b"query-id\tcorpus-id\tscore\nq0\td\xe90\t1\n", "qrels.tsv:2:", "not valid UTF-8"),
            (
                "corpus",
                b'{"_id": "d0", "title": "t", "text": "x"}\n{"_id": "d1", "title": 5, "text": "y"}\n',
                "corpus.jsonl:2:",
                "'title' is a number",
            ),
            ("corpus", b'{"_id": "d0", "text": ["x"]}\n', "corpus.jsonl:1:", "'text' is an array"),
            (
                "queries",
                b'{"_id": "q0", "text": ' + b"[" * 10_000 + b"]" * 10_000 + b"}\n",
                "queries.jsonl:1:",
                "too deeply",
            ),
            ("queries", b'{"_id": 1' + b"0" * 5000 + b', "text": "x"}\n', "queries.jsonl:1:", "4300 digits"),
            ("qrels", b"h\th\th\nq0\td0\t" + b"9" * 200_000 + b"x\n", "qrels.tsv:2:", "is not a number"),
        ],
    )
    def test_located(self, tmp_path, role, content, where, needle):
        files = dict(zip(("queries", "corpus", "qrels"), beir(tmp_path), strict=True))
        (tmp_path / files[role]).write_bytes(content)
        args = [
            "eval",
            "default",
            "--queries",
            files["queries"],
            "--corpus",
            files["corpus"],
            "--qrels",
            files["qrels"],
        ]
        result = RUNNER.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert where in result.stderr and needle in result.stderr, result.stderr

    def test_qrels_are_tsv_without_quoting(self, tmp_path):
        from contrast_audit.train.evaluate import read_qrels

        (tmp_path / "qrels.tsv").write_text(
            'query-id\tcorpus-id\tscore\n"q0\td0\t1\nq1\td1\t1\nq2\t' + "d" * 200_000 + "\t1\n"
        )
        relevant = read_qrels(str(tmp_path / "qrels.tsv"))
        assert relevant == {'"q0': {"d0"}, "q1": {"d1"}, "q2": {"d" * 200_000}}


@pytest.mark.slow
def test_train_pads_a_ragged_mined_set_and_says_how_many(tmp_path):
    # a mined set: the third row's query had two negatives mined, some rows one, some none
    rows = topic_rows()
    for i, row in enumerate(rows):
        del row["negative"]
        row["negatives"] = [f"mined note {i}.{k} on cooking" for k in range(i % 3)]
    write_rows(tmp_path / "pairs.jsonl", rows)
    assert RUNNER.invoke(app, lexical_manifest()).exit_code == 0
    result = RUNNER.invoke(
        app, ["train", "pairs.jsonl", "--manifest", "mask.jsonl", "--out", "model", "--max-steps", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "9 missing hard negatives of 6 rows padded and masked" in result.output
    log = [json.loads(line) for line in (tmp_path / "model" / "training-log.jsonl").read_text().splitlines()]
    assert (log[0]["hard_negatives_per_row"], log[0]["padded_rows"], log[0]["padded_negatives"]) == (2, 6, 9)
    # the first batch's padded cells are counted as excluded; every row of it trained
    assert all(r["padded_negatives"] > 0 for r in log[1:]) and len(log) == 3


@pytest.mark.slow
def test_train_applies_a_weighted_manifests_weights_and_says_so(tmp_path, monkeypatch):
    from contrast_audit.manifest.format import read_manifest
    from contrast_audit.train.loss import MaskedMultipleNegativesRankingLoss

    rows = topic_rows()  # four queries of two rows each, and two more rows of the first: 4 + 2 + 2 + 2
    rows += [{**rows[0], "id": f"r{8 + k}", "positive": f"study {8 + k} of bird migration routes"} for k in range(2)]
    write_rows(tmp_path / "pairs.jsonl", rows)
    assert RUNNER.invoke(app, [*lexical_manifest(), "--weight", "anchor"]).exit_code == 0
    applied: list[list[float]] = []
    original = MaskedMultipleNegativesRankingLoss.compute_loss_from_embeddings

    def record(self, embeddings, labels):
        applied.append(self.relations.weights[labels.numpy()].tolist() if self.relations.weighted else [])
        return original(self, embeddings, labels)

    monkeypatch.setattr(MaskedMultipleNegativesRankingLoss, "compute_loss_from_embeddings", record)
    result = RUNNER.invoke(
        app, ["train", "pairs.jsonl", "--manifest", "mask.jsonl", "--out", "model", "--max-steps", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "the manifest's anchor weights applied" in result.output
    manifest = read_manifest("mask.jsonl")
    assert applied == [list(b.weights) for b in manifest.batches[:2]]
    assert {w for b in manifest.batches for w in b.weights} == {10 / (4 * 4), 10 / (4 * 2)}
    log = [json.loads(line) for line in (tmp_path / "model" / "training-log.jsonl").read_text().splitlines()]
    assert log[0]["weight"] == manifest.header["weight"] and len(log) == 3
