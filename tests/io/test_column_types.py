"""Columns of the wrong type end in exit 2 with the row and column, never in a cast error (exit 3);
ids are kept as the text written, whatever their size; dictionary-encoded text is text."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from support import LEXICAL, RUNNER, in_tmp

from contrast_audit.cli import app
from contrast_audit.config import ColumnMapping
from contrast_audit.io import load_rows

pytestmark = pytest.mark.usefixtures(in_tmp.__name__)


def scan(*args: str):
    return RUNNER.invoke(app, ["scan", *args, "--quiet", "--format", "json", *LEXICAL])


def _jsonl(path: Path, values: list[str], column: str) -> None:
    """Rows whose ``column`` holds each raw JSON value in ``values``."""
    path.write_text(
        "".join(f'{{"anchor": "q {i}", "positive": "d {i}", "{column}": {v}}}\n' for i, v in enumerate(values))
    )


class TestWrongTypeInKeyColumns:
    @pytest.mark.parametrize("column", ["id", "source", "cohort", "group"])
    @pytest.mark.parametrize(("value", "kind"), [("[1]", "array"), ('{"a": 1}', "object")])
    def test_jsonl_is_located(self, tmp_path: Path, column: str, value: str, kind: str) -> None:
        _jsonl(tmp_path / "p.jsonl", ['"x"', value, '"z"'], column)
        result = scan("p.jsonl")
        assert result.exit_code == 2, result.output
        assert "p.jsonl:2:" in result.stderr and f"'{column}' is a JSON {kind}" in result.stderr

    @pytest.mark.parametrize("column", ["id", "source", "cohort"])
    def test_jsonl_bad_row_is_skipped(self, tmp_path: Path, column: str) -> None:
        _jsonl(tmp_path / "p.jsonl", ['"x"', "[1, 2]", '"z"'], column)
        result = scan("p.jsonl", "--on-bad-row", "skip")
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["counts"]["rows"] == 2
        assert [s["location"] for s in report["input"]["skipped"]] == ["p.jsonl:2"]

    @pytest.mark.parametrize(
        ("column", "values"),
        [
            ("id", [[1], [2]]),
            ("source", [{"x": 1}, {"x": 2}]),
            ("cohort", [[1.5], [2.5]]),
        ],
    )
    def test_parquet_is_refused(self, tmp_path: Path, column: str, values: list) -> None:
        pl.DataFrame({"anchor": ["a", "b"], "positive": ["c", "d"], column: values}).write_parquet("p.parquet")
        result = scan("p.parquet")
        assert result.exit_code == 2, result.output
        assert "p.parquet: row 1:" in result.stderr and f"'{column}'" in result.stderr
        assert "not a string or number" in result.stderr

    def test_parquet_binary_ids_not_utf8(self, tmp_path: Path) -> None:
        frame = pl.DataFrame({"anchor": ["a", "b", "c"], "positive": ["d", "e", "f"], "id": [b"ok", b"\xff\xfe", b"x"]})
        frame.write_parquet("p.parquet")
        result = scan("p.parquet")
        assert result.exit_code == 2, result.output
        assert "p.parquet: row 2:" in result.stderr and "not UTF-8" in result.stderr

    def test_parquet_binary_ids_in_utf8_are_text(self, tmp_path: Path) -> None:
        frame = pl.DataFrame({"anchor": ["a", "b"], "positive": ["d", "e"], "id": [b"r1", b"r2"]})
        frame.write_parquet("p.parquet")
        rows = load_rows(["p.parquet"], ColumnMapping()).rows
        assert rows.get_column("id").to_list() == ["r1", "r2"]


class TestIdsAsWritten:
    @pytest.mark.parametrize(
        ("raw", "expected"),
        [
            (["18446744073709551617", "18446744073709551618"], ["18446744073709551617", "18446744073709551618"]),
            (["1" * 5000, "2" * 5000], ["1" * 5000, "2" * 5000]),
            (["9007199254740993", "9007199254740992"], ["9007199254740993", "9007199254740992"]),
            (["1.50", "-0", "true"], ["1.50", "-0", "true"]),
            (["7", '"7x"'], ["7", "7x"]),
        ],
    )
    def test_ids_are_the_digits_written(self, tmp_path: Path, raw: list[str], expected: list[str]) -> None:
        _jsonl(tmp_path / "p.jsonl", raw, "id")
        rows = load_rows(["p.jsonl"], ColumnMapping()).rows
        assert rows.get_column("id").to_list() == expected

    def test_huge_ids_scan_without_a_repeated_id(self, tmp_path: Path) -> None:
        _jsonl(tmp_path / "p.jsonl", ["1" * 5000 + "1", "1" * 5000 + "2"], "id")
        result = scan("p.jsonl")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["counts"]["rows"] == 2

    def test_a_number_in_a_text_column_is_still_refused(self, tmp_path: Path) -> None:
        (tmp_path / "p.jsonl").write_text(
            '{"anchor": "q", "positive": "d"}\n{"anchor": 12345678901234567890123, "positive": "d"}\n'
        )
        result = scan("p.jsonl")
        assert result.exit_code == 2, result.output
        assert "p.jsonl:2:" in result.stderr and "'anchor' is a JSON number" in result.stderr


class TestDictionaryEncodedText:
    @pytest.mark.parametrize("dtype", [pl.Categorical, pl.Enum(["a", "b", "c", "d", "x", "y"])])
    def test_categorical_text_columns_are_text(self, tmp_path: Path, dtype: pl.DataType) -> None:
        frame = pl.DataFrame({"anchor": ["a", "b"], "positive": ["c", "d"], "negative": ["x", "y"]})
        frame.with_columns(pl.all().cast(dtype)).write_parquet("p.parquet")
        result = scan("p.parquet")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["counts"]["rows"] == 2

    def test_list_of_categorical_negatives(self, tmp_path: Path) -> None:
        frame = pl.DataFrame({"query": ["a", "b"], "pos": [["c"], ["d"]], "neg": [["x"], ["y"]]})
        frame.with_columns(pl.col("neg").cast(pl.List(pl.Categorical))).write_parquet("p.parquet")
        rows = load_rows(["p.parquet"], ColumnMapping()).rows
        assert rows.get_column("negatives").to_list() == [["x"], ["y"]]
