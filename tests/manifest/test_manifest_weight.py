"""``manifest --weight anchor``: a weight per row in the batch lines (mean 1, every anchor the same total),
the header's ``weight``, and how a reader checks both."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.errors import InputError
from contrast_audit.manifest.format import HEADER_SCHEMA, Manifest, ManifestBatch, read_manifest

LEXICAL = ("--no-embeddings", "--no-minhash")


def skewed_rows() -> list[dict]:
    """One query of 12 rows, two of 3 declared one group, three of 2, and 14 single rows: 38 rows in 19 units."""
    rows = [
        {"id": f"big-{k}", "anchor": "the large query", "positive": f"judged passage {k} alpha{k}"} for k in range(12)
    ]
    for c in range(2):
        rows += [
            {"id": f"g{c}-{k}", "anchor": f"grouped query {c} beta{c}", "positive": f"passage {c}.{k} gamma{c}{k}"}
            for k in range(3)
        ]
    for c in range(3):
        rows += [
            {"id": f"m{c}-{k}", "anchor": f"medium query {c} delta{c}", "positive": f"passage m{c}.{k} eta{c}{k}"}
            for k in range(2)
        ]
    rows += [
        {"id": f"s{s}", "anchor": f"lone query {s} zeta{s}", "positive": f"lone passage {s} omega{s}"}
        for s in range(14)
    ]
    for row in rows:
        row["grp"] = "g" if row["id"].startswith("g") else None
    return rows


def unit_of(row_id: str) -> str:
    """The anchor a row belongs to: its query, and the two grouped queries are one."""
    if row_id.startswith("g"):
        return "g"
    return row_id.rsplit("-", 1)[0] if "-" in row_id else row_id


def run(*args: str):
    return CliRunner().invoke(app, ["manifest", *args, "-q"])


def lines(path: Path) -> tuple[dict, list[dict]]:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return records[0], records[1:]


@pytest.mark.parametrize(
    ("strategy", "extra"),
    [
        ("mask", ()),
        ("mask", ("--balance", "1")),
        ("group", ()),
        ("group", ("--balance", "2")),
        ("multi-positive", ()),
    ],
)
def test_weights_have_mean_1_and_every_anchor_the_same_total(pairs_file, tmp_path, strategy, extra):
    data = pairs_file(skewed_rows())
    out = tmp_path / "m.jsonl"
    args = (str(data), "--out", str(out), "--strategy", strategy, "--group", "grp", "--batch-size", "8")
    result = run(*args, "--epochs", "2", "--weight", "anchor", *extra, *LEXICAL)
    assert result.exit_code == 0, result.output
    header, batches = lines(out)
    assert header["weight"] == {"by": "anchor", "units": 19, "rule": "n_rows / (units * rows of the unit)"}
    weight_of: dict[str, float] = {}
    for epoch in (0, 1):
        planned = [(r, w) for b in batches if b["epoch"] == epoch for r, w in zip(b["rows"], b["weights"], strict=True)]
        assert len(planned) == 38  # every row once per epoch
        assert math.fsum(w for _, w in planned) / len(planned) == pytest.approx(1.0, rel=1e-12)
        totals: dict[str, float] = defaultdict(float)
        for row, w in planned:
            totals[unit_of(row)] += w
            assert weight_of.setdefault(row, w) == w  # one weight per row, in every batch and epoch
        assert len(totals) == 19
        assert max(totals.values()) == pytest.approx(min(totals.values()), rel=1e-12) == pytest.approx(38 / 19)
    assert weight_of["big-0"] == 38 / (19 * 12) and weight_of["g0-0"] == 38 / (19 * 6) and weight_of["s0"] == 2.0


def test_weight_keeps_the_batches_and_masks(pairs_file, tmp_path):
    data = pairs_file(skewed_rows())
    plain, weighted = tmp_path / "plain.jsonl", tmp_path / "weighted.jsonl"
    assert run(str(data), "--out", str(plain), "--batch-size", "8", *LEXICAL).exit_code == 0
    assert run(str(data), "--out", str(weighted), "--batch-size", "8", "--weight", "anchor", *LEXICAL).exit_code == 0
    plain_header, plain_batches = lines(plain)
    header, batches = lines(weighted)
    assert "weight" not in plain_header and all("weights" not in b for b in plain_batches)
    assert [{k: v for k, v in b.items() if k != "weights"} for b in batches] == plain_batches
    assert header["counts"] == plain_header["counts"] and header["plan"] == plain_header["plan"]
    again = tmp_path / "again.jsonl"
    said = CliRunner().invoke(
        app, ["manifest", str(data), "--out", str(again), "--batch-size", "8", "--weight", "anchor", *LEXICAL]
    )
    assert "weight anchor: each of 20 anchors carries the same share of the loss" in said.output
    assert again.read_bytes() == weighted.read_bytes()
    import jsonschema

    jsonschema.Draft202012Validator(HEADER_SCHEMA).validate(header)
    # a weighted manifest is a plan like any other
    result = CliRunner().invoke(app, ["scan", str(data), "--plan", str(weighted), "--format", "json", "-q", *LEXICAL])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["masked"]["findings"] > 0


def test_the_python_api_takes_weight(pairs_file):
    from contrast_audit.config import build_config
    from contrast_audit.manifest import build_manifest

    data = pairs_file(skewed_rows())
    config = build_config({"batch_size": 8, "embeddings": False, "minhash": False})
    result = build_manifest([str(data)], config, weight="anchor")
    weights = Counter(w for b in result.manifest.batches for w in b.weights)
    # 38 rows, 20 units (no group mapped): 12 rows of 38/(20*12), 6 of 38/(20*3), 6 of 38/(20*2), 14 of 38/20
    assert weights == {38 / (20 * 12): 12, 38 / (20 * 3): 6, 38 / (20 * 2): 6, 38 / 20: 14}
    assert result.manifest.header["weight"]["units"] == 20


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--weight", "bogus"), "anchor"),
        (("--weight", ""), "anchor"),
    ],
)
def test_a_bad_weight_flag_exits_2_naming_the_options(pairs_file, tmp_path, args, message):
    data = pairs_file(skewed_rows())
    result = run(str(data), "--out", str(tmp_path / "x.jsonl"), *LEXICAL, *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "x.jsonl").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('weight = "bogus"', "setting 'weight' must be one of anchor, got 'bogus'"),
        ("weight = 3", "setting 'weight' must be a string"),
    ],
)
def test_a_bad_weight_setting_exits_2(pairs_file, tmp_path, line, message):
    data = pairs_file(skewed_rows())
    (tmp_path / "settings.toml").write_text(line + "\n")
    args = ("--config", str(tmp_path / "settings.toml"))
    result = run(str(data), "--out", str(tmp_path / "x.jsonl"), *LEXICAL, *args)
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_the_weight_setting_from_the_settings_file(pairs_file, tmp_path):
    data = pairs_file(skewed_rows())
    (tmp_path / "settings.toml").write_text('weight = "anchor"\n')
    out = tmp_path / "m.jsonl"
    result = run(str(data), "--out", str(out), "--config", str(tmp_path / "settings.toml"), *LEXICAL)
    assert result.exit_code == 0, result.output
    header, batches = lines(out)
    assert header["weight"]["by"] == "anchor" and all(len(b["weights"]) == len(b["rows"]) for b in batches)


# ---- the format -------------------------------------------------------------------------------------

HEADER = {
    "kind": "contrast-audit-manifest",
    "schema_version": "1",
    "strategy": "mask",
    "fingerprint": "sha256:" + "0" * 64,
    "plan": {"epochs": 1, "world_size": 1},
    "loss": {"directions": ["query_to_doc"]},
}
WEIGHTED = {**HEADER, "weight": {"by": "anchor", "units": 2, "rule": "n_rows / (units * rows of the unit)"}}


def test_weights_round_trip(tmp_path):
    batches = [
        ManifestBatch(0, 0, ("a", "b"), (2,), {"query_to_doc": [(0, 1, "positive")]}, {}, (0.75, 1.5)),
        ManifestBatch(1, 0, ("c",), (1,), {}, {}, (0.75,)),
    ]
    path = tmp_path / "m.jsonl"
    path.write_text(Manifest(WEIGHTED, batches).render())
    assert json.loads(path.read_text().splitlines()[1])["weights"] == [0.75, 1.5]
    back = read_manifest(path)
    assert back.batches == batches and back.header["weight"] == WEIGHTED["weight"]
    path.write_text(Manifest(HEADER, [ManifestBatch(0, 0, ("a",), (1,))]).render())
    assert "weights" not in path.read_text() and read_manifest(path).batches[0].weights is None


def test_integer_weights_are_read_as_numbers(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(WEIGHTED) + '\n{"rows": ["a", "b"], "weights": [1, 2.5]}\n')
    assert read_manifest(path).batches[0].weights == (1.0, 2.5)


def test_the_largest_weight_is_read(tmp_path):
    from contrast_audit.manifest.format import MAX_WEIGHT

    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(WEIGHTED) + '\n{"rows": ["a", "b"], "weights": [1e6, 1e-300]}\n')
    assert MAX_WEIGHT == 1e6 and read_manifest(path).batches[0].weights == (1e6, 1e-300)


def tampered_refusals(pairs_file, tmp_path, batch: int, slot: int, weight: float) -> tuple[Path, list[str]]:
    """A weighted manifest whose batch ``batch`` has ``weight`` at ``slot``; the manifest and the stderr of
    scan and train reading it, each of which must exit 2 without writing a model."""
    data = pairs_file(skewed_rows())
    out = tmp_path / "m.jsonl"
    assert run(str(data), "--out", str(out), "--batch-size", "8", "--weight", "anchor", *LEXICAL).exit_code == 0
    header, *batches = out.read_text().splitlines()
    changed = json.loads(batches[batch])
    changed["weights"][slot] = weight
    batches[batch] = json.dumps(changed)
    out.write_text("\n".join([header, *batches]) + "\n")
    model = tmp_path / "model"
    errors = []
    for command in (
        ["scan", str(data), "--plan", str(out), "-q", *LEXICAL],
        ["train", str(data), "--manifest", str(out), "--out", str(model), "-q"],
    ):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        errors.append(result.stderr)
    assert not model.exists()
    return out, errors


def test_a_weight_of_1e300_stops_scan_and_train_at_its_line(pairs_file, tmp_path):
    """It used to pass the reader, and train failed a step later: "the loss is inf"."""
    out, errors = tampered_refusals(pairs_file, tmp_path, 1, 0, 1e300)
    for stderr in errors:
        assert f"{out}:3: 'weights.0' is 1e+300, above 1,000,000" in stderr, stderr


def test_manifest_refuses_to_write_a_weight_above_the_bound(pairs_file, tmp_path, monkeypatch):
    """Only data of millions of rows under few anchors reach 1e6; the bound is lowered to reach it here."""
    import contrast_audit.manifest.build as build

    monkeypatch.setattr(build, "MAX_WEIGHT", 1.5)  # skewed_rows: 14 single rows weigh 38/20 = 1.9
    data = pairs_file(skewed_rows())
    out = tmp_path / "m.jsonl"
    result = run(str(data), "--out", str(out), "--batch-size", "8", "--weight", "anchor", *LEXICAL)
    assert result.exit_code == 2, result.output
    assert "--weight anchor would weigh the rows of an anchor with 1 of 38 rows" in result.stderr
    assert "a manifest may hold" in result.stderr
    assert "leave --weight out" in result.stderr and not out.exists()


@pytest.mark.parametrize(
    ("header", "batch_line", "needle"),
    [
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0]}', "'weights' holds 1 numbers for 2 rows"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": "1.0"}', "'weights' is a string, not an array"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": {"a": 1}}', "'weights' is an object, not an array"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, 0]}', "'weights.1' is 0, not a finite number > 0"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, -0.5]}', "'weights.1' is -0.5"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [true, 1.0]}', "'weights.0' is true"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": ["1", 1.0]}', "'weights.0' is \"1\""),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [null, 1.0]}', "'weights.0' is null"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [NaN, 1.0]}', "'weights.0' is NaN"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, Infinity]}', "'weights.1' is Infinity"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, 1e999]}', "'weights.1' is Infinity"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1' + "0" * 400 + ", 1]}", "'weights.0' is an integer of 401"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1e300, 1.0]}', "'weights.0' is 1e+300, above 1,000,000"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, 1000000.5]}', "the largest row weight a manifest may hold"),
        (WEIGHTED, '{"rows": ["a", "b"]}', "'weights' is missing"),
        (HEADER, '{"rows": ["a", "b"], "weights": [1.0, 1.0]}', "the header records no 'weight'"),
    ],
)
def test_batch_weights_are_validated(tmp_path, header, batch_line, needle):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(header) + "\n" + batch_line + "\n")
    with pytest.raises(InputError) as info:
        read_manifest(path)
    assert f"{path}:2:" in str(info.value) and needle in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("weight", "needle"),
    [
        ({"by": "query"}, "'weight.by' is \"query\", not one of anchor"),
        ({"units": 2}, "'weight.by' is missing"),
        ({"by": "anchor", "units": "2"}, "'weight.units' is a string, not an integer"),
        ({"by": "anchor", "units": 0}, "'weight.units' is 0, outside [1,"),
        ({"by": "anchor", "rule": 5}, "'weight.rule' is an integer, not a string"),
        ([1], "'weight' is an array, not an object"),
    ],
)
def test_the_header_weight_is_validated(tmp_path, weight, needle):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({**HEADER, "weight": weight}) + '\n{"rows": ["a"], "weights": [1.0]}\n')
    with pytest.raises(InputError) as info:
        read_manifest(path)
    assert f"{path}:1:" in str(info.value) and needle in str(info.value), str(info.value)


def test_a_tampered_weight_is_exit_2_for_scan_and_train(pairs_file, tmp_path):
    out, errors = tampered_refusals(pairs_file, tmp_path, 0, 1, -1)
    for stderr in errors:
        assert f"{out}:2:" in stderr and "'weights.1' is -1" in stderr, stderr


@pytest.mark.slow
def test_cluster_with_balance_takes_weight_too(pairs_file, tmp_path):
    rows = []
    for topic in ("cooking", "astronomy"):
        for i in range(6):
            q = f"{topic} question {i}"
            rows += [
                {"id": f"{topic}{i}-{k}", "anchor": q, "positive": f"{topic} passage {i}.{k}"} for k in range(1 + i % 3)
            ]
    data = pairs_file(rows)
    out = tmp_path / "m.jsonl"
    args = ("--strategy", "cluster", "--balance", "1", "--weight", "anchor", "--batch-size", "4", "--no-minhash")
    result = run(str(data), "--out", str(out), *args)
    assert result.exit_code == 0, result.output
    header, batches = lines(out)
    assert "clustering" in header and "balance" in header and header["weight"]["units"] == 12
    planned = [(r, w) for b in batches for r, w in zip(b["rows"], b["weights"], strict=True)]
    assert len(planned) == len(rows) and math.fsum(w for _, w in planned) == pytest.approx(len(rows))
    totals: dict[str, float] = defaultdict(float)
    for row, w in planned:
        totals[row.rsplit("-", 1)[0]] += w
    assert max(totals.values()) == pytest.approx(min(totals.values()), rel=1e-12)
