"""Loading pair files: accepted quirks, ``--on-bad-row skip``, layout detection and row ids."""

from __future__ import annotations

import io
import json
from pathlib import Path

import polars as pl
import pytest
from support import LEXICAL, RUNNER, in_tmp, row_json

from contrast_audit.cli import app
from contrast_audit.config import ColumnMapping
from contrast_audit.errors import InputError
from contrast_audit.io import load_rows

pytestmark = pytest.mark.usefixtures(in_tmp.__name__)


def scan_json(*args: str, code: int = 0) -> dict:
    from contrast_audit.cli import app

    result = RUNNER.invoke(app, ["scan", *args, "--format", "json", "--quiet", *LEXICAL])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return json.loads(result.stdout)


# --- accepted quirks ----------------------------------------------------------------------


def test_jsonl_with_bom_crlf_and_blank_lines(tmp_path: Path) -> None:
    text = "\ufeff" + row_json(0) + "\r\n\r\n" + row_json(1) + "\r\n   \r\n" + row_json(2) + "\r\n\r\n"
    (tmp_path / "pairs.jsonl").write_bytes(text.encode("utf-8"))
    report = scan_json("pairs.jsonl")
    assert report["counts"]["rows"] == 3
    assert report["mapping"][0]["anchor"] == "anchor"  # the BOM is not part of the first key


def test_csv_with_bom_crlf_and_blank_lines(tmp_path: Path) -> None:
    text = "\ufeffanchor,positive\r\n\r\na,b\r\n\r\nc,d\r\ne,f\r\n\r\n"
    (tmp_path / "pairs.csv").write_bytes(text.encode("utf-8"))
    report = scan_json("pairs.csv")
    assert report["counts"]["rows"] == 3
    assert report["mapping"][0]["anchor"] == "anchor"


def test_tsv_and_ndjson_extensions(tmp_path: Path) -> None:
    (tmp_path / "pairs.tsv").write_text("anchor\tpositive\na, with comma\tb\nc\td\n", encoding="utf-8")
    (tmp_path / "more.ndjson").write_text(row_json(5) + "\n", encoding="utf-8")
    report = scan_json("pairs.tsv", "more.ndjson")
    assert report["counts"]["rows"] == 3
    assert report["input"]["files"] == ["pairs.tsv", "more.ndjson"]


def test_crlf_text_keeps_no_carriage_return(tmp_path: Path) -> None:
    (tmp_path / "pairs.csv").write_bytes(b"anchor,positive\r\na,b\r\n")
    (tmp_path / "pairs.jsonl").write_bytes((row_json(0) + "\r\n").encode())
    loaded = load_rows(["pairs.csv", "pairs.jsonl"], ColumnMapping())
    assert loaded.rows.get_column("positive").to_list() == ["b", "document 0"]


def test_physical_lines_recorded(tmp_path: Path) -> None:
    (tmp_path / "pairs.jsonl").write_text("\n" + row_json(0) + "\n\n" + row_json(1) + "\n", encoding="utf-8")
    (tmp_path / "pairs.csv").write_text("\nanchor,positive\n\na,b\n", encoding="utf-8")
    loaded = load_rows(["pairs.jsonl", "pairs.csv"], ColumnMapping())
    assert loaded.rows.get_column("line").to_list() == [2, 4, 4]
    assert loaded.rows.get_column("id").to_list() == ["0", "1", "2"]


def test_glob_in_sorted_order(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "b.jsonl").write_text(row_json(1) + "\n", encoding="utf-8")
    (tmp_path / "data" / "a.jsonl").write_text(row_json(0) + "\n", encoding="utf-8")
    report = scan_json("data/*.jsonl")
    assert report["input"]["files"] == ["data/a.jsonl", "data/b.jsonl"]
    assert report["counts"]["rows"] == 2


# --- --on-bad-row skip --------------------------------------------------------------------


def test_skip_lists_every_bad_jsonl_row(tmp_path: Path) -> None:
    lines = [
        row_json(0),
        "not json",
        row_json(2),
        '{"anchor": "x", "positive": null}',
        "",
        row_json(4),
        '{"anchor": 3, "positive": "y"}',
        "[1, 2]",
        '{"anchor": "   ", "positive": "y"}',
        row_json(6),
    ]
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = scan_json("pairs.jsonl", "--on-bad-row", "skip")
    skipped = {s["location"]: s["reason"] for s in report["input"]["skipped"]}
    assert set(skipped) == {f"pairs.jsonl:{n}" for n in (2, 4, 7, 8, 9)}
    assert "JSON" in skipped["pairs.jsonl:2"]
    assert "null" in skipped["pairs.jsonl:4"]
    assert "number" in skipped["pairs.jsonl:7"]
    assert "object" in skipped["pairs.jsonl:8"]
    assert "empty" in skipped["pairs.jsonl:9"]
    assert report["counts"]["rows"] == 4
    assert report["counts"]["skipped_rows"] == 5
    assert report["input"]["rows"] == 4


def test_skip_lists_bad_csv_rows(tmp_path: Path) -> None:
    (tmp_path / "pairs.csv").write_text("anchor,positive\na,b\nc,d,e\nf,\ng,h\n", encoding="utf-8")
    report = scan_json("pairs.csv", "--on-bad-row", "skip")
    skipped = {s["location"]: s["reason"] for s in report["input"]["skipped"]}
    assert set(skipped) == {"pairs.csv:3", "pairs.csv:4"}
    assert "fields" in skipped["pairs.csv:3"]
    assert report["counts"]["rows"] == 2


def test_skip_late_non_string_keeps_the_other_rows(tmp_path: Path) -> None:
    lines = [row_json(i) for i in range(499)] + ['{"anchor": ["x"], "positive": "y"}', row_json(500)]
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = scan_json("pairs.jsonl", "--on-bad-row", "skip", "--batch-size", "64")
    assert [s["location"] for s in report["input"]["skipped"]] == ["pairs.jsonl:500"]
    assert report["counts"]["rows"] == 500


def test_skip_duplicate_ids_keeps_the_first(tmp_path: Path) -> None:
    rows = [row_json(0, id="a"), row_json(1, id="b"), row_json(2, id="a"), row_json(3, id="c")]
    (tmp_path / "pairs.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    loaded = load_rows(["pairs.jsonl"], ColumnMapping(id="id"), "skip")
    assert loaded.rows.get_column("id").to_list() == ["a", "b", "c"]
    assert [(b.location(), "'a'" in b.reason) for b in loaded.skipped] == [("pairs.jsonl:3", True)]


def test_skip_parquet_rows_are_located_by_row(tmp_path: Path) -> None:
    pl.DataFrame({"anchor": ["a", None, "c"], "positive": ["x", "y", "z"]}).write_parquet(tmp_path / "p.parquet")
    report = scan_json("p.parquet", "--on-bad-row", "skip")
    assert [s["location"] for s in report["input"]["skipped"]] == ["p.parquet: row 2"]
    assert report["counts"]["rows"] == 2


def test_default_ids_do_not_depend_on_which_rows_were_skipped(tmp_path: Path) -> None:
    # Row numbers are stable: a skipped row keeps its number, whatever made it bad.
    lines = [row_json(0), "not json", row_json(2), '{"anchor": "x", "positive": null}', row_json(4)]
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    loaded = load_rows(["pairs.jsonl"], ColumnMapping(), "skip")
    assert loaded.rows.get_column("id").to_list() == ["0", "2", "4"]
    assert loaded.rows.get_column("line").to_list() == [1, 3, 5]


def test_everything_skipped_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "pairs.jsonl").write_text('{"anchor": null, "positive": "x"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="no valid rows"):
        load_rows(["pairs.jsonl"], ColumnMapping(), "skip")


# --- layout detection ---------------------------------------------------------------------


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.mark.parametrize(
    ("records", "layout", "anchor", "positive", "negatives"),
    [
        (
            [{"anchor": "a", "positive": "p", "negative_1": "n1", "negative_2": "n2"}],
            "anchor/positive/negative",
            "anchor",
            "positive",
            ["negative_1", "negative_2"],
        ),
        ([{"sentence1": "a", "sentence2": "b"}], "sentence1/sentence2", "sentence1", "sentence2", []),
        (
            [{"sentence1": "a", "sentence2": "b", "sentence3": "c"}],
            "sentence1/sentence2",
            "sentence1",
            "sentence2",
            ["sentence3"],
        ),
        ([{"question": "q", "answer": "a"}], "question/answer", "question", "answer", []),
        ([{"text1": "a", "text2": "b"}], "text1/text2", "text1", "text2", []),
        ([{"query": "q", "pos": ["p"], "neg": ["n"]}], "query/pos/neg", "query", "pos", ["neg"]),
    ],
)
def test_layouts_are_recognised(tmp_path: Path, records, layout, anchor, positive, negatives) -> None:
    records = records + [{k: (["x2"] if isinstance(v, list) else f"{v} 2") for k, v in records[0].items()}]
    _write_jsonl(tmp_path / "pairs.jsonl", records)
    mapping = scan_json("pairs.jsonl")["mapping"][0]
    assert mapping["layout"] == layout
    assert (mapping["anchor"], mapping["positive"], mapping["negatives"]) == (anchor, positive, negatives)


def test_optional_columns_are_recognised(tmp_path: Path) -> None:
    _write_jsonl(
        tmp_path / "pairs.jsonl",
        [{"_id": "r1", "anchor": "a", "positive": "p", "source": "s", "cohort": "c", "group": "g"}],
    )
    mapping = scan_json("pairs.jsonl")["mapping"][0]
    assert (mapping["id"], mapping["source"], mapping["cohort"], mapping["group"]) == (
        "_id",
        "source",
        "cohort",
        "group",
    )


def test_flag_embedding_lists_expand_one_row_per_positive(tmp_path: Path) -> None:
    _write_jsonl(
        tmp_path / "train.jsonl",
        [
            {"query": "q0", "pos": ["p0a", "p0b"], "neg": ["n0", "n1"]},
            {"query": "q1", "pos": ["p1"], "neg": []},
        ],
    )
    report = scan_json("train.jsonl")
    assert report["mapping"][0]["layout"] == "query/pos/neg"
    assert report["counts"]["rows"] == 3
    rows = load_rows(["train.jsonl"], ColumnMapping()).rows
    assert rows.get_column("id").to_list() == ["0#0", "0#1", "1"]
    assert rows.get_column("positive").to_list() == ["p0a", "p0b", "p1"]
    assert rows.get_column("anchor").to_list() == ["q0", "q0", "q1"]
    assert rows.get_column("negatives").to_list() == [["n0", "n1"], ["n0", "n1"], []]
    assert rows.get_column("line").to_list() == [1, 1, 2]


def test_flag_embedding_parquet(tmp_path: Path) -> None:
    frame = pl.DataFrame({"query": ["q0", "q1"], "pos": [["a", "b"], ["c"]], "neg": [["n"], None]})
    buf = io.BytesIO()
    frame.write_parquet(buf)
    (tmp_path / "train.parquet").write_bytes(buf.getvalue())
    rows = load_rows(["train.parquet"], ColumnMapping()).rows
    assert rows.get_column("id").to_list() == ["0#0", "0#1", "1"]
    assert rows.get_column("negatives").to_list() == [["n"], ["n"], []]


def test_flags_override_detection(tmp_path: Path) -> None:
    _write_jsonl(
        tmp_path / "pairs.jsonl",
        [
            {"anchor": "a", "positive": "p", "title": "t1", "body": "b1", "hard": "h1"},
            {"anchor": "a2", "positive": "p2", "title": "t2", "body": "b2", "hard": "h2"},
        ],
    )
    report = scan_json("pairs.jsonl", "--anchor", "title", "--positive", "body", "--negative", "hard")
    mapping = report["mapping"][0]
    assert mapping["layout"] == "flags"
    assert (mapping["anchor"], mapping["positive"], mapping["negatives"]) == ("title", "body", ["hard"])


def test_one_flag_overrides_one_role_of_a_layout(tmp_path: Path) -> None:
    _write_jsonl(
        tmp_path / "pairs.jsonl",
        [{"query": "q", "alt": "aq", "pos": "p"}, {"query": "q2", "alt": "aq2", "pos": "p2"}],
    )
    mapping = scan_json("pairs.jsonl", "--anchor", "alt")["mapping"][0]
    assert mapping["layout"] == "query/pos/neg"
    assert (mapping["anchor"], mapping["positive"]) == ("alt", "pos")


def test_each_file_gets_its_own_mapping(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "a.jsonl", [{"anchor": "a", "positive": "p"}])
    (tmp_path / "b.csv").write_text("question,answer\nq,x\n", encoding="utf-8")
    report = scan_json("a.jsonl", "b.csv")
    assert [m["layout"] for m in report["mapping"]] == ["anchor/positive/negative", "question/answer"]
    assert [m["file"] for m in report["mapping"]] == ["a.jsonl", "b.csv"]
    assert report["counts"]["rows"] == 2


def test_null_negatives_are_dropped_not_errors(tmp_path: Path) -> None:
    _write_jsonl(
        tmp_path / "pairs.jsonl",
        [
            {"anchor": "a", "positive": "p", "negative_1": "n", "negative_2": None},
            {"anchor": "b", "positive": "q", "negative_1": None, "negative_2": "m"},
        ],
    )
    rows = load_rows(["pairs.jsonl"], ColumnMapping()).rows
    assert rows.get_column("negatives").to_list() == [["n"], ["m"]]


# --- JSON array files (.json) ---------------------------------------------------------------


def test_json_array_file(tmp_path: Path) -> None:
    records = [{"query": "q0", "pos": ["a", "b"]}, {"query": "q1", "pos": ["c"]}]
    (tmp_path / "train.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    rows = load_rows(["train.json"], ColumnMapping()).rows
    # A list of positives stays a list (one row per item), not its JSON text.
    assert rows.get_column("positive").to_list() == ["a", "b", "c"]
    assert rows.get_column("id").to_list() == ["0#0", "0#1", "1"]


def test_json_array_non_text_is_located_by_row(tmp_path: Path) -> None:
    records = [{"anchor": "a", "positive": "b"}, {"anchor": "c", "positive": 5}, {"anchor": "e", "positive": "f"}]
    (tmp_path / "pairs.json").write_text(json.dumps(records), encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_rows(["pairs.json"], ColumnMapping())
    assert str(info.value).startswith("pairs.json: row 2: column 'positive'")
    loaded = load_rows(["pairs.json"], ColumnMapping(), "skip")
    assert [b.location() for b in loaded.skipped] == ["pairs.json: row 2"]
    assert loaded.rows.get_column("id").to_list() == ["0", "2"]
    records[2]["anchor"] = None
    (tmp_path / "pairs.json").write_text(json.dumps(records), encoding="utf-8")
    loaded = load_rows(["pairs.json"], ColumnMapping(), "skip")
    assert sorted(b.location() for b in loaded.skipped) == ["pairs.json: row 2", "pairs.json: row 3"]


def test_csv_ids_count_skipped_rows(tmp_path: Path) -> None:
    (tmp_path / "pairs.csv").write_text("anchor,positive\na,b\n\nc,d,e\nf,\ng,h\n", encoding="utf-8")
    loaded = load_rows(["pairs.csv"], ColumnMapping(), "skip")
    assert loaded.rows.get_column("id").to_list() == ["0", "3"]
    assert loaded.rows.get_column("line").to_list() == [2, 6]


def test_ids_continue_across_files_after_skipped_rows(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(row_json(0) + "\n{bad\n" + row_json(2) + "\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(row_json(3) + "\n", encoding="utf-8")
    loaded = load_rows(["a.jsonl", "b.jsonl"], ColumnMapping(), "skip")
    assert loaded.rows.get_column("id").to_list() == ["0", "2", "3"]


class TestSeparators:
    @pytest.mark.parametrize(
        ("name", "content"),
        [
            ("p.csv", "anchor;positive\nq1;d1, with a comma\nq2;d2\n"),
            ("p.csv", "anchor|positive\nq1|d1\nq2|d2\n"),
            ("p.csv", "anchor\tpositive\nq1\td1, with a comma\nq2\td2\n"),
            ("p.tsv", "anchor,positive\nq1,d1\nq2,d2\n"),
        ],
    )
    def test_detected_from_the_header(self, tmp_path: Path, name: str, content: str) -> None:
        (tmp_path / name).write_text(content)
        report = scan_json(name)
        assert report["counts"]["rows"] == 2

    def test_delimiter_flag_and_setting(self, tmp_path: Path) -> None:
        (tmp_path / "p.csv").write_text("anchor;positive;note, free\nq1;d1;y\nq2;d2;z\n")  # the comma would win
        assert scan_json("p.csv", "--delimiter", ";")["counts"]["rows"] == 2
        (tmp_path / "contrast-audit.toml").write_text('delimiter = ";"\n')
        assert scan_json("p.csv")["counts"]["rows"] == 2

    @pytest.mark.parametrize("value", ["tab", "\\t", "\t"])
    def test_tab_spellings(self, tmp_path: Path, value: str) -> None:
        (tmp_path / "p.csv").write_text("anchor,x\tpositive\nq1,y\td1\n")
        assert (
            scan_json("p.csv", "--delimiter", value, "--anchor", "anchor,x", "--positive", "positive")["counts"]["rows"]
            == 1
        )

    @pytest.mark.parametrize(
        ("name", "content", "needles"),
        [
            (
                "p.csv",
                "what is a, b\tanswer one\nwhat is c\tanswer two\n",
                ["p.csv:2:", "separator ','", "also holds tab", "--delimiter"],
            ),
            (
                "p.csv",
                "anchor,positive\nq1,d1,x\n",
                ["p.csv:2:", "separator ',', from the .csv extension", "--delimiter"],
            ),
            (
                "p.tsv",
                "what is a\tanswer one\nwhat is c\tanswer two\n",
                ["no anchor/positive columns", "first line of a CSV/TSV file is its header"],
            ),
        ],
    )
    def test_errors_say_which_separator_was_assumed(
        self, tmp_path: Path, name: str, content: str, needles: list[str]
    ) -> None:
        (tmp_path / name).write_text(content)
        result = RUNNER.invoke(app, ["scan", name, "-q", "--no-embeddings", "--no-minhash"])
        assert result.exit_code == 2, result.output
        assert not [n for n in needles if n not in result.stderr], result.stderr

    @pytest.mark.parametrize("value", ["ab", "", '"', "\n"])
    def test_a_bad_delimiter_is_a_usage_error(self, tmp_path: Path, value: str) -> None:
        (tmp_path / "p.csv").write_text("anchor,positive\nq,d\n")
        result = RUNNER.invoke(app, ["scan", "p.csv", "-q", "--no-embeddings", "--delimiter", value])
        assert result.exit_code == 2 and "--delimiter" in result.stderr, result.output
