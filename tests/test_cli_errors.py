"""Bad input through the CLI: every class exits 2 with one line that says where (``file:LINE:``
or ``file: row N:``), never a traceback. Also the output contract: byte-identical reruns and
atomic ``--output``."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from support import LEXICAL, RUNNER, in_tmp, row_json

from contrast_audit.cli import app

pytestmark = pytest.mark.usefixtures(in_tmp.__name__)


def _rows(n: int) -> str:
    return "".join(row_json(i) + "\n" for i in range(n))


def _parquet(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_parquet(buf)
    return buf.getvalue()


def _write(path: Path, content: str | bytes) -> None:
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)


def scan(*args: str):
    return RUNNER.invoke(app, ["scan", *args, "--quiet", *LEXICAL])


def _assert_usage_error(result, location: str, *needles: str) -> str:
    message = result.stderr
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "internal error" not in result.output
    assert location in message, message
    for needle in needles:
        assert needle in message, message
    return message


# (file name, content, extra flags, expected location, other substrings)
Case = tuple[str, Callable[[], str | bytes], list[str], str, list[str]]

CASES: dict[str, Case] = {
    "truncated JSON line": (
        "pairs.jsonl",
        lambda: _rows(2) + '{"anchor": "x", "posi',
        [],
        "pairs.jsonl:3:",
        ["not valid JSON"],
    ),
    "non-JSON line": (
        "pairs.jsonl",
        lambda: _rows(1) + "hello world\n" + _rows(1),
        [],
        "pairs.jsonl:2:",
        ["not valid JSON"],
    ),
    "array line": ("pairs.jsonl", lambda: _rows(3) + "[1, 2]\n", [], "pairs.jsonl:4:", ["not an object"]),
    "null positive": (
        "pairs.jsonl",
        lambda: _rows(2) + '{"anchor": "x", "positive": null}\n',
        [],
        "pairs.jsonl:3:",
        ["'positive'", "null"],
    ),
    "null anchor in CSV (empty field)": (
        "pairs.csv",
        lambda: "anchor,positive\na,b\n,d\n",
        [],
        "pairs.csv:3:",
        ["'anchor'"],
    ),
    "empty anchor": (
        "pairs.jsonl",
        lambda: _rows(1) + '{"anchor": "", "positive": "y"}\n',
        ["--on-bad-row", "error"],
        "pairs.jsonl:2:",
        ["'anchor'", "empty"],
    ),
    "whitespace positive": (
        "pairs.jsonl",
        lambda: _rows(4) + '{"anchor": "x", "positive": " \\t "}\n',
        ["--on-bad-row", "error"],
        "pairs.jsonl:5:",
        ["'positive'", "empty"],
    ),
    "whitespace positive in CSV": (
        "pairs.csv",
        lambda: "anchor,positive\na,b\nc,   \n",
        ["--on-bad-row", "error"],
        "pairs.csv:3:",
        ["'positive'", "empty"],
    ),
    "number anchor": (
        "pairs.jsonl",
        lambda: _rows(1) + '{"anchor": 5, "positive": "y"}\n',
        [],
        "pairs.jsonl:2:",
        ["'anchor'", "number"],
    ),
    "object positive": (
        "pairs.jsonl",
        lambda: _rows(2) + '{"anchor": "x", "positive": {"t": "y"}}\n',
        [],
        "pairs.jsonl:3:",
        ["'positive'", "object"],
    ),
    "number positive on line 500": (
        "pairs.jsonl",
        lambda: _rows(499) + '{"anchor": "x", "positive": 12}\n',
        [],
        "pairs.jsonl:500:",
        ["'positive'", "number"],
    ),
    "number anchor on line 500": (
        "pairs.jsonl",
        lambda: _rows(499) + '{"anchor": 12.5, "positive": "y"}\n',
        [],
        "pairs.jsonl:500:",
        ["'anchor'", "number"],
    ),
    "object anchor on line 500": (
        "pairs.jsonl",
        lambda: _rows(499) + '{"anchor": {"t": "x"}, "positive": "y"}\n',
        [],
        "pairs.jsonl:500:",
        ["'anchor'", "object"],
    ),
    "object positive on line 500": (
        "pairs.jsonl",
        lambda: _rows(499) + '{"anchor": "x", "positive": {"t": "y"}}\n',
        [],
        "pairs.jsonl:500:",
        ["'positive'", "object"],
    ),
    "list anchor on line 500": (
        "pairs.jsonl",
        lambda: _rows(499) + '{"anchor": ["x"], "positive": "y"}\n',
        [],
        "pairs.jsonl:500:",
        ["'anchor'"],
    ),
    "null positive on line 500": (
        "pairs.jsonl",
        lambda: _rows(499) + '{"anchor": "x", "positive": null}\n',
        [],
        "pairs.jsonl:500:",
        ["'positive'", "null"],
    ),
    "latin-1 byte": (
        "pairs.jsonl",
        lambda: _rows(2).encode() + '{"anchor": "café", "positive": "y"}\n'.encode("latin-1"),
        [],
        "pairs.jsonl:3:",
        ["UTF-8", "0xe9"],
    ),
    "latin-1 byte in CSV": (
        "pairs.csv",
        lambda: b"anchor,positive\na,b\nc,d\n" + "caf\u00e9,x\n".encode("latin-1"),
        [],
        "pairs.csv:4:",
        ["UTF-8"],
    ),
    "CSV row with too many fields": (
        "pairs.csv",
        lambda: "anchor,positive\na,b\nc,d,e\nf,g\n",
        [],
        "pairs.csv:3:",
        ["3 fields"],
    ),
    "TSV row with too few fields": (
        "pairs.tsv",
        lambda: "anchor\tpositive\na\tb\nc\n",
        [],
        "pairs.tsv:3:",
        ["1 fields"],
    ),
    "CSV bad quoting": (
        "pairs.csv",
        lambda: 'anchor,positive\na,b\nc,"d"x\ne,f\n',
        [],
        "pairs.csv:3:",
        ["CSV"],
    ),
    "CSV quote left open to the end": (
        "pairs.csv",
        lambda: 'anchor,positive\na,b\n\n"c,d\ne,f\n',
        [],
        "pairs.csv:4:",  # where the unterminated record starts
        ["CSV"],
    ),
    "JSON lines in a .csv": ("pairs.csv", lambda: _rows(3), [], "pairs.csv:1:", ["JSON"]),
    "Parquet null positive": (
        "pairs.parquet",
        lambda: _parquet(pl.DataFrame({"anchor": ["a", "b", "c"], "positive": ["x", None, "z"]})),
        [],
        "pairs.parquet: row 2:",
        ["'positive'"],
    ),
    "Parquet number anchor": (
        "pairs.parquet",
        lambda: _parquet(pl.DataFrame({"anchor": [1, 2], "positive": ["x", "y"]})),
        [],
        "pairs.parquet: row 1:",
        ["'anchor'", "not text"],
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bad_row_is_located(tmp_path: Path, case: str) -> None:
    name, content, flags, location, needles = CASES[case]
    _write(tmp_path / name, content())
    _assert_usage_error(scan(name, *flags), location, *needles)


FILE_CASES: dict[str, Case] = {
    "empty file": ("pairs.jsonl", lambda: "", [], "pairs.jsonl:", ["empty"]),
    "blank lines only": ("pairs.jsonl", lambda: "\n  \n\n", [], "pairs.jsonl:", ["empty"]),
    "empty CSV": ("pairs.csv", lambda: "", [], "pairs.csv:", ["empty"]),
    "CSV header only": ("pairs.csv", lambda: "anchor,positive\n", [], "pairs.csv:1:", ["no rows"]),
    "Parquet bytes in a .jsonl": (
        "pairs.jsonl",
        lambda: _parquet(pl.DataFrame({"anchor": ["a"], "positive": ["b"]})),
        [],
        "pairs.jsonl:",
        ["Parquet"],
    ),
    "Parquet bytes in a .csv": (
        "pairs.csv",
        lambda: _parquet(pl.DataFrame({"anchor": ["a"], "positive": ["b"]})),
        [],
        "pairs.csv:",
        ["Parquet"],
    ),
    "text in a .parquet": ("pairs.parquet", lambda: "anchor,positive\na,b\n", [], "pairs.parquet:", ["Parquet"]),
    "unsupported extension": ("pairs.txt", lambda: _rows(2), [], "pairs.txt:", [".txt", ".jsonl"]),
    "missing --anchor column": (
        "pairs.jsonl",
        lambda: _rows(2),
        ["--anchor", "query", "--positive", "positive"],
        "pairs.jsonl:",
        ["'query'", "anchor, positive"],
    ),
    "missing --positive column": (
        "pairs.jsonl",
        lambda: _rows(2),
        ["--positive", "doc"],
        "pairs.jsonl:",
        ["'doc'", "anchor, positive"],
    ),
    "no recognisable columns": (
        "pairs.jsonl",
        lambda: '{"left": "a", "right": "b"}\n',
        [],
        "pairs.jsonl:",
        ["left, right", "--anchor"],
    ),
}


@pytest.mark.parametrize("case", list(FILE_CASES), ids=list(FILE_CASES))
def test_bad_file_is_named(tmp_path: Path, case: str) -> None:
    name, content, flags, location, needles = FILE_CASES[case]
    _write(tmp_path / name, content())
    message = _assert_usage_error(scan(name, *flags), location, *needles)
    assert f"error: {name}" in message


def test_duplicate_ids_name_both_locations(tmp_path: Path) -> None:
    (tmp_path / "pairs.jsonl").write_text(
        row_json(0, id="a") + "\n" + row_json(1, id="b") + "\n" + row_json(2, id="a") + "\n", encoding="utf-8"
    )
    _assert_usage_error(scan("pairs.jsonl", "--id", "id"), "pairs.jsonl:3:", "'a'", "pairs.jsonl:1")


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(row_json(0, id="x") + "\n" + row_json(1, id="y") + "\n", encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(row_json(2, id="z") + "\n" + row_json(3, id="y") + "\n", encoding="utf-8")
    _assert_usage_error(scan("a.jsonl", "b.jsonl", "--id", "id"), "b.jsonl:2:", "'y'", "a.jsonl:2")


def test_missing_file() -> None:
    _assert_usage_error(scan("nowhere.jsonl"), "nowhere.jsonl:", "not found")


def test_glob_matching_nothing(tmp_path: Path) -> None:
    (tmp_path / "other.csv").write_text("anchor,positive\na,b\n", encoding="utf-8")
    _assert_usage_error(scan("data/*.jsonl"), "data/*.jsonl:", "no files match")


def test_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    _assert_usage_error(scan("data"), "data:", "directory")


def test_bad_row_after_blank_lines_keeps_physical_line(tmp_path: Path) -> None:
    (tmp_path / "pairs.jsonl").write_text("\n\n" + row_json(0) + "\n\n\n" + "nope\n", encoding="utf-8")
    _assert_usage_error(scan("pairs.jsonl"), "pairs.jsonl:6:")


def test_null_after_blank_lines_and_crlf_keeps_physical_line(tmp_path: Path) -> None:
    text = "\r\n" + row_json(0) + "\r\n\r\n" + row_json(1) + "\r\n" + '{"anchor": "x", "positive": null}\r\n'
    (tmp_path / "pairs.jsonl").write_bytes(text.encode())
    _assert_usage_error(scan("pairs.jsonl"), "pairs.jsonl:5:", "null")


def test_csv_error_after_blank_lines_keeps_physical_line(tmp_path: Path) -> None:
    (tmp_path / "pairs.csv").write_text("\nanchor,positive\n\na,b\n\nc,d,e\n", encoding="utf-8")
    _assert_usage_error(scan("pairs.csv"), "pairs.csv:6:")


def test_second_file_error_names_second_file(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(_rows(3), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(_rows(1) + "{oops\n", encoding="utf-8")
    _assert_usage_error(scan("a.jsonl", "b.jsonl"), "b.jsonl:2:")


# --- the output contract ------------------------------------------------------------------


def _dupes(tmp_path: Path) -> None:
    rows = [row_json(i % 7, source=f"s{i % 3}") for i in range(40)]
    (tmp_path / "pairs.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")


def test_same_seed_gives_byte_identical_json(tmp_path: Path) -> None:
    _dupes(tmp_path)
    flags = ["--format", "json", "--seed", "7", "--batch-size", "8", "--epochs", "2"]
    first = scan("pairs.jsonl", *flags, "--output", "one.json")
    second = scan("pairs.jsonl", *flags, "--output", "two.json")
    assert first.exit_code == 0, first.output
    assert second.exit_code == 0, second.output
    one, two = (tmp_path / "one.json").read_bytes(), (tmp_path / "two.json").read_bytes()
    assert one == two
    report = json.loads(one)
    assert report["counts"]["rows"] == 40
    assert report["counts"]["findings"] > 0  # the comparison covers real content


def test_different_seed_changes_the_plan(tmp_path: Path) -> None:
    _dupes(tmp_path)
    flags = ["--format", "json", "--batch-size", "8"]
    a = json.loads(scan("pairs.jsonl", *flags, "--seed", "1").stdout)
    b = json.loads(scan("pairs.jsonl", *flags, "--seed", "2").stdout)
    assert a["findings"] != b["findings"]


def test_output_leaves_no_temporary_files(tmp_path: Path) -> None:
    _dupes(tmp_path)
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    result = scan("pairs.jsonl", "--format", "json", "--output", "reports/out.json")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert sorted(p.name for p in out_dir.iterdir()) == ["out.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.jsonl", "reports"]
    json.loads((out_dir / "out.json").read_text(encoding="utf-8"))


def test_failed_run_writes_no_output(tmp_path: Path) -> None:
    (tmp_path / "pairs.jsonl").write_text(_rows(2) + "{bad\n", encoding="utf-8")
    result = scan("pairs.jsonl", "--format", "json", "--output", "out.json")
    assert result.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pairs.jsonl"]


def test_inputs_are_not_modified(tmp_path: Path) -> None:
    _dupes(tmp_path)
    before = (tmp_path / "pairs.jsonl").read_bytes()
    assert scan("pairs.jsonl", "--format", "json").exit_code == 0
    assert (tmp_path / "pairs.jsonl").read_bytes() == before


def test_utf16_file_is_named_as_such() -> None:
    _write(Path("pairs.jsonl"), _rows(3).encode("utf-16"))
    _assert_usage_error(scan("pairs.jsonl"), "pairs.jsonl:1:", "UTF-16", "iconv")


def test_duplicate_ids_in_parquet_are_located_by_row() -> None:
    frame = pl.DataFrame({"id": ["a", "b", "a"], "anchor": ["x", "y", "z"], "positive": ["p", "q", "r"]})
    _write(Path("pairs.parquet"), _parquet(frame))
    _assert_usage_error(scan("pairs.parquet"), "pairs.parquet: row 3:", "pairs.parquet: row 1")


class TestEmptyTextsByDefault:
    """A row whose text is empty after normalisation (a question that is only "?") is skipped and reported
    by default, with its line, and the audit goes on; --on-bad-row error stops at it; other bad rows still
    stop the default run."""

    @pytest.mark.parametrize(
        ("name", "content", "where"),
        [
            ("pairs.jsonl", _rows(3) + '{"anchor": "?", "positive": "y"}\n' + _rows(2), "pairs.jsonl:4"),
            ("pairs.jsonl", _rows(2) + '{"anchor": "x", "positive": " "}\n', "pairs.jsonl:3"),
            (
                "pairs.jsonl",
                '{"query": "q", "pos": ["fine", "..."]}\n' + '{"query": "r", "pos": ["ok"]}\n',
                "pairs.jsonl:1",
            ),
            ("pairs.csv", "anchor,positive\na,b\n!!!,d\ne,f\n", "pairs.csv:3"),
        ],
    )
    def test_skipped_and_reported(self, tmp_path: Path, name: str, content: str, where: str) -> None:
        _write(tmp_path / name, content)
        result = RUNNER.invoke(app, ["scan", name, "--format", "json", *LEXICAL])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["counts"]["skipped_rows"] == 1
        assert [s["location"] for s in report["input"]["skipped"]] == [where]
        assert any("1 row skipped" in w and where in w for w in report["warnings"])
        assert "1 row skipped" in result.stderr
        strict = scan(name, "--on-bad-row", "error")
        assert strict.exit_code == 2 and f"{where}:" in strict.stderr

    def test_other_bad_rows_still_stop_the_default(self, tmp_path: Path) -> None:
        _write(tmp_path / "p.jsonl", _rows(1) + '{"anchor": "?", "positive": "y"}\n{"anchor": null, "positive": "z"}\n')
        result = scan("p.jsonl")
        assert result.exit_code == 2 and "p.jsonl:3:" in result.stderr and "null" in result.stderr

    def test_a_manifest_of_data_with_empty_rows_trains_on_the_same_rows(self, tmp_path: Path) -> None:
        from contrast_audit.manifest.format import read_manifest
        from contrast_audit.train.data import manifest_dataset

        _write(tmp_path / "p.jsonl", _rows(6) + '{"anchor": "?", "positive": "y"}\n')
        made = RUNNER.invoke(app, ["manifest", "p.jsonl", "--out", "m.jsonl", "-q", *LEXICAL, "--batch-size", "2"])
        assert made.exit_code == 0, made.output
        assert manifest_dataset("p.jsonl", read_manifest("m.jsonl")).rows.height == 6


class TestMessagesPointTheRightWay:
    """Each of these used to blame the wrong thing ("is a directory", "file not found", Parquet, "not valid
    JSON"); now the message names what is wrong."""

    def test_empty_file_name(self, tmp_path: Path) -> None:
        result = scan("")
        assert result.exit_code == 2 and "empty file name" in result.stderr and "directory" not in result.stderr

    def test_symlink_loop(self, tmp_path: Path) -> None:
        (tmp_path / "loop.jsonl").symlink_to(tmp_path / "loop.jsonl")
        result = scan("loop.jsonl")
        assert result.exit_code == 2 and "symbolic link that loops" in result.stderr

    def test_dangling_symlink(self, tmp_path: Path) -> None:
        (tmp_path / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
        result = scan("gone.jsonl")
        assert result.exit_code == 2 and "nowhere.jsonl, which does not exist" in result.stderr

    @pytest.mark.parametrize(
        ("magic", "kind"), [(b"\x1f\x8b\x08\x00", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"PK\x03\x04", "zip")]
    )
    @pytest.mark.parametrize("name", ["pairs.jsonl", "pairs.csv"])
    def test_compressed_content(self, tmp_path: Path, magic: bytes, kind: str, name: str) -> None:
        _write(tmp_path / name, magic + b"\x00\x01binary")
        result = scan(name)
        assert result.exit_code == 2, result.output
        assert f"is {kind}-compressed" in result.stderr and "Parquet" not in result.stderr

    def test_gzip_of_real_data(self, tmp_path: Path) -> None:
        import gzip

        _write(tmp_path / "pairs.jsonl", gzip.compress(_rows(3).encode()))
        result = scan("pairs.jsonl")
        assert result.exit_code == 2 and "gzip -dc pairs.jsonl | contrast-audit scan -" in result.stderr

    @pytest.mark.parametrize("name", ["pairs.json", "pairs.jsonl"])
    def test_pretty_printed_object(self, tmp_path: Path, name: str) -> None:
        _write(tmp_path / name, json.dumps({"anchor": "a", "positive": "b"}, indent=2) + "\n")
        result = scan(name)
        assert result.exit_code == 2, result.output
        assert f"{name}:1:" in result.stderr and "spread over several lines" in result.stderr

    def test_pretty_printed_array_is_read(self, tmp_path: Path) -> None:
        rows = [{"anchor": "a", "positive": "b"}, {"anchor": "c", "positive": "d"}]
        _write(tmp_path / "pairs.json", json.dumps(rows, indent=2))
        result = RUNNER.invoke(app, ["scan", "pairs.json", "--format", "json", "-q", *LEXICAL])
        assert result.exit_code == 0 and json.loads(result.stdout)["counts"]["rows"] == 2
