"""``contrast-audit manifest``: the three strategies, the file format, re-audits and the fingerprint."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.errors import InputError
from contrast_audit.manifest.format import data_fingerprint, read_manifest

LEXICAL = ("--no-embeddings",)


def clustered_rows(clusters: int = 6, size: int = 4, singles: int = 40) -> list[dict]:
    """``clusters`` groups of ``size`` rows sharing one anchor text (each other's certain false negatives),
    a mislabelled hard negative, and distinct single rows."""
    rows: list[dict] = []
    for c in range(clusters):
        for k in range(size):
            rows.append(
                {
                    "id": f"c{c}-{k}",
                    "anchor": f"question number {c} about topic {c * 7}",
                    "positive": f"answer {k} to cluster {c}: a distinct passage {c}-{k}",
                }
            )
    for s in range(singles):
        rows.append({"id": f"s{s}", "anchor": f"lone query {s} zeta{s}", "positive": f"lone passage {s} omega{s}"})
    rows[-1]["negative"] = rows[-1]["positive"].upper()  # the same text: a mislabelled negative
    return rows


def manifest(path: Path, out: Path, *args: str):
    return CliRunner().invoke(app, ["manifest", str(path), "--out", str(out), "-q", *LEXICAL, *args])


def scan_json(path: Path, *args: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, ["scan", str(path), "--format", "json", "-q", *LEXICAL, *args])
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}


def batches_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


@pytest.mark.parametrize("strategy", ["mask", "group", "multi-positive"])
def test_manifests_are_deterministic_and_reaudit_clean(pairs_file, tmp_path, strategy):
    data = pairs_file(clustered_rows())
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for out in (first, second):
        result = manifest(data, out, "--strategy", strategy, "--batch-size", "16", "--epochs", "2")
        assert result.exit_code == 0, result.output
    assert first.read_bytes() == second.read_bytes()
    header = json.loads(first.read_text().splitlines()[0])
    assert header["kind"] == "contrast-audit-manifest" and header["schema_version"] == "1"
    assert header["strategy"] == strategy and header["fingerprint"].startswith("sha256:")
    assert header["counts"]["batches"] == 2 * 4  # 64 rows in batches of 16, two epochs

    # every row exactly once per epoch
    per_epoch = Counter((b["epoch"], r) for b in batches_of(first) for r in b["rows"])
    assert set(per_epoch.values()) == {1} and len(per_epoch) == 2 * 64

    code, report = scan_json(data, "--plan", str(first), "--fail-on", "certain>0", "--fail-on", "likely>0")
    assert code == 0, report
    assert report["counts"]["findings"] == 0 and report["counts"]["mislabelled_negatives"] == 0
    assert report["counts"]["masked"]["mislabelled_negatives"] == 1
    assert all(f["masked"] for f in report["findings"])


def test_mask_keeps_the_plan_and_masks_what_scan_finds(pairs_file, tmp_path):
    data = pairs_file(clustered_rows())
    out = tmp_path / "m.jsonl"
    assert manifest(data, out, "--batch-size", "16", "--seed", "3").exit_code == 0
    _, plain = scan_json(data, "--batch-size", "16", "--seed", "3")
    plan_rows = [b["rows"] for b in batches_of(out)]
    # the same batches as the sampler's plan: the scan's findings name rows that share a manifest batch
    for finding in plain["findings"]:
        batch = plan_rows[finding["batch"]]
        assert finding["anchor_id"] in batch and finding["candidate_id"] in batch
    masked = sum(len(v) for b in batches_of(out) for v in b.get("mask", {}).values())
    assert masked == plain["counts"]["findings"] + plain["counts"]["mislabelled_negatives"]
    # the mislabelled negative is masked as [a, a, "negative_1"] where its row sits
    own = [e for b in batches_of(out) for e in b.get("mask", {}).get("query_to_doc", []) if len(e) == 3]
    assert own and all(e[0] == e[1] and e[2] == "negative_1" for e in own)


def test_group_separates_planted_clusters(pairs_file, tmp_path):
    data = pairs_file(clustered_rows(clusters=6, size=4, singles=40))
    out = tmp_path / "g.jsonl"
    assert manifest(data, out, "--strategy", "group", "--batch-size", "16").exit_code == 0
    header = json.loads(out.read_text().splitlines()[0])
    assert header["counts"]["conflicts_left"] == 0 and header["counts"]["rows_not_separated"] == 0
    for batch in batches_of(out):
        clusters = [r.split("-")[0] for r in batch["rows"] if r.startswith("c")]
        assert len(clusters) == len(set(clusters)), batch["rows"]
        assert not batch.get("positives")
    _, report = scan_json(data, "--plan", str(out))
    assert [f for f in report["findings"] if not f["masked"]] == []
    assert sum(1 for f in report["findings"]) == 0  # separated, nothing left to mask


def test_group_masks_what_cannot_be_separated(pairs_file, tmp_path):
    # a cluster of 6 rows in 4 batches of 16: two batches must hold two of its rows
    data = pairs_file(clustered_rows(clusters=1, size=6, singles=58))
    out = tmp_path / "g.jsonl"
    assert manifest(data, out, "--strategy", "group", "--batch-size", "16").exit_code == 0
    counts = json.loads(out.read_text().splitlines()[0])["counts"]
    assert counts["conflicts_left"] == 4 and counts["rows_not_separated"] == 2  # 2 pairs, both directions
    code, report = scan_json(data, "--plan", str(out), "--fail-on", "findings>0")
    assert code == 0 and report["counts"]["masked"]["findings"] == 4


def test_multi_positive_keeps_clusters_together_as_positives(pairs_file, tmp_path):
    data = pairs_file(clustered_rows(clusters=3, size=4, singles=20))
    out = tmp_path / "mp.jsonl"
    assert manifest(data, out, "--strategy", "multi-positive", "--batch-size", "16").exit_code == 0
    for batch in batches_of(out):
        rows = batch["rows"]
        members = Counter(r.split("-")[0] for r in rows if r.startswith("c"))
        assert set(members.values()) <= {4}  # each cluster whole in one batch
        positives = batch.get("positives", {}).get("query_to_doc", [])
        assert len(positives) == sum(n * (n - 1) for n in members.values())
        for a, c in positives:
            assert rows[a].split("-")[0] == rows[c].split("-")[0] and a != c


def test_world_size_slices_and_positions_follow_gather_order(pairs_file, tmp_path):
    data = pairs_file(clustered_rows(clusters=6, size=4, singles=40))
    out = tmp_path / "w.jsonl"
    args = ("--batch-size", "8", "--world-size", "2", "--seed", "5")
    assert manifest(data, out, *args).exit_code == 0
    batches = batches_of(out)
    assert all(b["ranks"] == [8, 8] for b in batches) and len(batches) == 4
    _, report = scan_json(data, *args)
    expected = {
        (f["batch"], f["anchor_id"], f["candidate_id"]) for f in report["findings"] if f["candidate_role"] == "positive"
    }
    found = {
        (b["batch"], b["rows"][e[0]], b["rows"][e[1]])
        for b in batches
        for e in b.get("mask", {}).get("query_to_doc", [])
        if len(e) == 2
    }
    assert found == expected and expected
    # the same relations re-audited from the manifest (its world size is taken from the header)
    _, again = scan_json(data, "--plan", str(out))
    assert again["plan"]["world_size"] == 2 and again["counts"]["findings"] == 0
    assert again["counts"]["masked"]["findings"] == report["counts"]["findings"]


def test_group_batches_are_equal_on_every_rank(pairs_file, tmp_path):
    data = pairs_file(clustered_rows(clusters=6, size=4, singles=46))  # 70 rows
    out = tmp_path / "g.jsonl"
    assert manifest(data, out, "--strategy", "group", "--batch-size", "8", "--world-size", "2").exit_code == 0
    ranks = [b["ranks"] for b in batches_of(out)]
    assert all(len(r) == 2 for r in ranks) and ranks[-1] == [3, 3]
    assert sum(sum(r) for r in ranks) == 70


def test_a_manifest_for_other_data_is_refused(pairs_file, tmp_path):
    rows = clustered_rows()
    data = pairs_file(rows)
    out = tmp_path / "m.jsonl"
    assert manifest(data, out, "--batch-size", "16").exit_code == 0
    fingerprint = json.loads(out.read_text().splitlines()[0])["fingerprint"]
    rows[3]["positive"] = "a changed passage"
    changed = pairs_file(rows, "changed.jsonl")
    result = CliRunner().invoke(app, ["scan", str(changed), "--plan", str(out), *LEXICAL])
    assert result.exit_code == 2
    assert fingerprint in result.stderr and "was planned for other data" in result.stderr


def test_fingerprint_covers_every_mapped_column(pairs_file):
    import polars as pl

    from contrast_audit.config import ColumnMapping
    from contrast_audit.io import load_rows

    rows = load_rows([str(pairs_file(clustered_rows()))], ColumnMapping()).rows
    base = data_fingerprint(rows)
    assert base == data_fingerprint(rows.clone())
    for change in (
        pl.col("id").str.replace("s1$", "s1x"),
        pl.col("anchor").str.replace("^lone query 1 ", "lone query 1  "),
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit(["x"])).otherwise(pl.col("negatives")).alias("negatives"),
        pl.when(pl.int_range(pl.len()) == 0).then(pl.lit("g")).otherwise(pl.col("group")).alias("group"),
    ):
        assert data_fingerprint(rows.with_columns(change)) != base


VALID_HEADER = json.dumps(
    {
        "kind": "contrast-audit-manifest",
        "schema_version": "1",
        "strategy": "mask",
        "fingerprint": "sha256:" + "0" * 64,
        "plan": {"epochs": 1, "world_size": 1},
        "loss": {"directions": ["query_to_doc"]},
    }
)


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"rows": ["a"]}'], "not a manifest header"),
        (['{"kind": "contrast-audit-manifest", "schema_version": "9"}'], "schema version"),
        (
            [
                VALID_HEADER,
                '{"rows": ["a", "b"], "mask": {"query_to_doc": [[0, 5]]}}',
            ],
            "bad entry",
        ),
        (
            [
                VALID_HEADER,
                '{"rows": ["a", "b"], "ranks": [1, 2]}',
            ],
            "ranks",
        ),
    ],
)
def test_read_manifest_locates_problems(tmp_path, lines, message):
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as info:
        read_manifest(path)
    assert message in str(info.value) and f"{path}:" in str(info.value)


def test_strategy_and_severity_are_checked(pairs_file, tmp_path):
    data = pairs_file(clustered_rows())
    result = manifest(data, tmp_path / "x.jsonl", "--strategy", "random")
    assert result.exit_code == 2
    result = manifest(data, tmp_path / "x.jsonl", "--strategy", "group", "--plan", str(tmp_path / "p.jsonl"))
    assert result.exit_code == 2 and not (tmp_path / "x.jsonl").exists()


def test_the_manifest_never_overwrites_its_data(pairs_file):
    data = pairs_file(clustered_rows())
    before = data.read_bytes()
    result = manifest(data, data)
    assert result.exit_code == 2 and "--out" in result.stderr and data.read_bytes() == before


def _tamper_header(path: Path, change) -> None:
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    change(header)
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def change(header: dict) -> None:
        target = header
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


def _drop(*keys):
    def change(header: dict) -> None:
        target = header
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return change


class TestTamperedManifests:
    """A manifest is input: every tampered header or batch line is exit 2 naming the key and line."""

    HEADER_CASES = {
        "huge epochs": (_set("plan", "epochs", 10**30), "'plan.epochs'"),
        "epochs as a string": (_set("plan", "epochs", "3"), "'plan.epochs' is a string"),
        "huge world size": (_set("plan", "world_size", 2**64), "'plan.world_size'"),
        "world size as a string": (_set("plan", "world_size", "2"), "'plan.world_size' is a string"),
        "world size missing": (_drop("plan", "world_size"), "'plan.world_size' is missing"),
        "directions missing": (_drop("loss", "directions"), "'loss.directions' is missing"),
        "unknown direction": (
            _set("loss", "directions", ["query_to_doc", "sideways"]),
            "'loss.directions.1' is \"sideways\"",
        ),
        "no query_to_doc": (_set("loss", "directions", ["doc_to_query"]), "lacks query_to_doc"),
        "plan an int": (_set("plan", 5), "'plan' is an integer, not an object"),
        "plan a list": (_set("plan", [1]), "'plan' is an array, not an object"),
        "loss a string": (_set("loss", "x"), "'loss' is a string"),
        "negatives an int": (_set("mapping", 0, "negatives", 5), "'mapping.0.negatives' is an integer"),
        "mapping an int": (_set("mapping", 5), "'mapping' is an integer"),
        "fingerprint an int": (_set("fingerprint", 5), "'fingerprint'"),
        "strategy unknown": (_set("strategy", "shuffle"), "'strategy'"),
    }

    @pytest.fixture
    def made(self, pairs_file, tmp_path):
        data = pairs_file(clustered_rows())
        out = tmp_path / "m.jsonl"
        assert manifest(data, out, "--batch-size", "8").exit_code == 0
        return data, out

    @pytest.mark.parametrize("case", sorted(HEADER_CASES))
    def test_header_is_validated(self, made, case):
        data, path = made
        change, needle = self.HEADER_CASES[case]
        _tamper_header(path, change)
        result = CliRunner().invoke(app, ["scan", str(data), "--plan", str(path), "-q", *LEXICAL])
        assert result.exit_code == 2, result.output
        assert f"{path}:1:" in result.stderr and needle in result.stderr, result.stderr

    @pytest.mark.parametrize(
        ("batch_line", "needle"),
        [
            ('{"rows": ["c0-0", "c0-1"], "mask": {"query_to_doc": [[0, 1' + "0" * 5000 + "]]}}", "4,300 digits"),
            ('{"rows": ["c0-0", "c0-1"], "mask": {"query_to_doc": [[true, 1]]}}', "bad entry"),
            ('{"rows": ["c0-0", "c0-1"], "epoch": 1' + "0" * 30 + "}", "'epoch'"),
            ('{"rows": ["c0-0"], "x": ' + "[" * 10_000 + "]" * 10_000 + "}", "nested too deeply"),
            ('{"rows": ["c0-0"], "mask": 5}', "'mask' must be an object"),
        ],
    )
    def test_batch_lines_are_validated(self, made, batch_line, needle):
        data, path = made
        header = path.read_text().splitlines()[0]
        path.write_text(header + "\n" + batch_line + "\n")
        result = CliRunner().invoke(app, ["scan", str(data), "--plan", str(path), "-q", *LEXICAL])
        assert result.exit_code == 2, result.output
        assert f"{path}:2:" in result.stderr and needle in result.stderr, result.stderr

    @staticmethod
    def scan_with_batch(made, batch_line: str):
        """``scan --plan`` with the manifest's batch line replaced: the run, and the manifest's path."""
        data, path = made
        header = path.read_text().splitlines()[0]
        path.write_text(header + "\n" + batch_line + "\n")
        return CliRunner().invoke(app, ["scan", str(data), "--plan", str(path), "-q", *LEXICAL]), path

    @pytest.mark.parametrize(
        ("entry", "needle"),
        [
            # an index of 100 digits used to reach polars as an integer it cannot hold: exit 3
            ('[0, 1, "negative_' + "9" * 100 + '"]', "its k of 100 digits is out of range"),
            ('[0, 1, "negative_' + "9" * 5000 + '"]', "its k of 5000 digits is out of range"),
            ('[0, 1, "negative_9223372036854775808"]', "k = 9223372036854775808 is out of range"),
            ('[0, 1, "negative_0"]', "k = 0 is out of range: negative_k takes k in [1, 2^63 - 1]"),
            ('[0, 1, "negative_\u00b2"]', 'the role is "positive" or "negative_k"'),  # a superscript two
            ("[0, 1, null]", "bad entry [0, 1, null]"),
            ("[0, true]", "bad entry [0, true]"),
        ],
    )
    def test_entry_roles_are_in_range(self, made, entry, needle):
        result, path = self.scan_with_batch(
            made, '{"rows": ["c0-0", "c0-1"], "mask": {"query_to_doc": [' + entry + "]}}"
        )
        assert result.exit_code == 2, result.output
        assert f"{path}:2: bad entry" in result.stderr and needle in result.stderr, result.stderr

    def test_a_negative_the_row_does_not_have_is_refused(self, made):
        """Row c0-1 has no hard negatives (only the last row of the data has one)."""
        data, path = made
        header = path.read_text().splitlines()[0]
        batch = {"rows": ["s39", "c0-1"], "mask": {"query_to_doc": [[1, 0, "negative_1"]]}}
        path.write_text(f"{header}\n{json.dumps(batch)}\n")
        assert CliRunner().invoke(app, ["scan", str(data), "--plan", str(path), "-q", *LEXICAL]).exit_code == 0
        batch["mask"]["query_to_doc"] = [[0, 1, "negative_1"]]
        path.write_text(f"{header}\n{json.dumps(batch)}\n")
        result = CliRunner().invoke(app, ["scan", str(data), "--plan", str(path), "-q", *LEXICAL])
        assert result.exit_code == 2, result.output
        assert (
            f'{path}:2: entry [0, 1, "negative_1"] in \'mask.query_to_doc\' names hard negative 1 of row "c0-1", which has 0'
            in result.stderr
        )

    @pytest.mark.parametrize(
        ("batch_line", "needle"),
        [
            ('{"rows": "c0-0"}', "a non-empty 'rows' array"),
            ('{"rows": ["c0-0"], "mask": {"sideways": []}}', 'unknown direction "sideways"'),
            ('{"rows": ["c0-0"], "mask": {"query_to_doc": {"a": 1}}}', "'mask.query_to_doc' must be an array"),
            ('{"rows": ["c0-0"], "mask": {"query_to_doc": [[0, 0, true]]}}', "bad entry [0, 0, true]"),
            ('{"rows": ["c0-0"], "mask": {"query_to_doc": [{"a": null}]}}', 'bad entry {"a": null}'),
        ],
    )
    def test_messages_spell_json_as_json(self, made, batch_line, needle):
        result, path = self.scan_with_batch(made, batch_line)
        assert result.exit_code == 2, result.output
        assert f"{path}:2:" in result.stderr and needle in result.stderr, result.stderr
        for python in ("None", "True", "False", "'c0-0'", "dict", "list"):
            assert python not in result.stderr, result.stderr

    @pytest.mark.parametrize(
        ("change", "needle"),
        [
            (_set("schema_version", None), 'schema version null is not supported (this contrast-audit reads "1")'),
            (_set("mask_severity", "x"), """'mask_severity' is "x", not one of certain, likely, suspect, null"""),
            (_set("loss", "directions", ["query_to_doc"] * 2), "which names an item twice"),
            (_set("loss", "directions", []), "'loss.directions' is an empty array"),
            (_set("fingerprint", "sha1:x"), """'fingerprint' is "sha1:x", not of the form"""),
            (_set("plan", "drop_last", "no"), "'plan.drop_last' is a string, not a boolean or null"),
        ],
    )
    def test_header_messages_spell_json_as_json(self, made, change, needle):
        data, path = made
        _tamper_header(path, change)
        result = CliRunner().invoke(app, ["scan", str(data), "--plan", str(path), "-q", *LEXICAL])
        assert result.exit_code == 2, result.output
        assert f"{path}:1:" in result.stderr and needle in result.stderr, result.stderr
        for python in ("None", "True", "False", "'x'", "is invalid"):
            assert python not in result.stderr, result.stderr

    def test_deeply_nested_header(self, made):
        data, path = made
        path.write_text('{"kind": "contrast-audit-manifest", "x": ' + "[" * 10_000 + "]" * 10_000 + "}\n")
        result = CliRunner().invoke(app, ["scan", str(data), "--plan", str(path), "-q", *LEXICAL])
        assert result.exit_code == 2 and f"{path}:1:" in result.stderr, result.output

    def test_the_schema_accepts_what_manifest_writes(self, made):
        import jsonschema

        from contrast_audit.manifest.format import HEADER_SCHEMA

        _, path = made
        jsonschema.Draft202012Validator(HEADER_SCHEMA).validate(json.loads(path.read_text().splitlines()[0]))
