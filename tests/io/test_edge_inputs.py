"""Adversarial inputs end in a result or in exit 2 with a location, never in exit 3 or a hang."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from support import LEXICAL, RUNNER, in_tmp, row_json

from contrast_audit.cli import app
from contrast_audit.config import ColumnMapping, NormaliseConfig
from contrast_audit.errors import InputError
from contrast_audit.io import load_rows, readers

pytestmark = pytest.mark.usefixtures(in_tmp.__name__)


def scan(*args: str, stdin: bytes | None = None):
    return RUNNER.invoke(app, ["scan", *args, "--quiet", "--format", "json", *LEXICAL], input=stdin)


def _usage(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output and "Traceback" not in result.output
    for needle in needles:
        assert needle in result.stderr, result.stderr
    return result.stderr


# --- lone surrogates ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "escape, column",
    [(r"\ud800", 15), (r"\udfff", 15), (r"\ud83d\ud83d", 15), (r"\ude00\ud83d", 15), (r"\ud83d\ude00\ud800", 27)],
)
def test_lone_surrogate_is_located(tmp_path: Path, escape: str, column: int) -> None:
    (tmp_path / "p.jsonl").write_text(row_json(0) + "\n" + '{"anchor": "ab' + escape + '", "positive": "x"}\n')
    _usage(scan("p.jsonl"), "p.jsonl:2:", "surrogate", f"at character {column}")


def test_valid_surrogate_pair_is_text(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text(row_json(0) + "\n" + '{"anchor": "smile \\ud83d\\ude00", "positive": "x"}\n')
    result = scan("p.jsonl")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["rows"] == 2


def test_lone_surrogate_row_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text(
        row_json(0) + "\n" + '{"anchor": "\\ud800", "positive": "x"}\n' + row_json(2) + "\n"
    )
    result = scan("p.jsonl", "--on-bad-row", "skip")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["rows"] == 2
    assert report["input"]["skipped"][0]["location"] == "p.jsonl:2"


def test_lone_surrogate_in_a_json_array(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(
        '[\n{"anchor": "a", "positive": "b"},\n{"anchor": "\\ud800", "positive": "b"}\n]\n'
    )
    _usage(scan("p.json"), "p.json:3:", "surrogate")


# --- deep nesting -----------------------------------------------------------------------------


@pytest.mark.parametrize("column", ["positive", "extra"])
def test_deeply_nested_json_is_an_input_error(tmp_path: Path, column: str) -> None:
    deep = "[" * 50_000 + "]" * 50_000
    (tmp_path / "p.jsonl").write_text(row_json(0) + "\n" + f'{{"anchor": "a", "positive": "b", "{column}": {deep}}}\n')
    _usage(scan("p.jsonl"), "p.jsonl:2:", "too deeply")


def test_deeply_nested_json_array_file(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text("[" * 50_000 + "]" * 50_000)
    _usage(scan("p.json"), "p.json:1:", "too deeply")


def test_moderately_nested_extra_column_is_kept(tmp_path: Path) -> None:
    nested = "[" * 300 + "1" + "]" * 300
    (tmp_path / "p.jsonl").write_text(
        row_json(
            0,
        )
        + "\n"
        + f'{{"anchor": "a", "positive": "b", "meta": {nested}}}\n'
    )
    assert scan("p.jsonl").exit_code == 0


# --- line endings -----------------------------------------------------------------------------


def test_cr_only_jsonl(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_bytes((row_json(0) + "\r" + row_json(1) + "\r\r" + row_json(2) + "\r").encode())
    loaded = load_rows(["p.jsonl"], ColumnMapping())
    assert loaded.rows.get_column("line").to_list() == [1, 2, 4]


def test_cr_only_csv(tmp_path: Path) -> None:
    (tmp_path / "p.csv").write_bytes(b"anchor,positive\ra,b\r\rc,d\r")
    loaded = load_rows(["p.csv"], ColumnMapping())
    assert loaded.rows.get_column("positive").to_list() == ["b", "d"]


def test_bare_cr_inside_a_jsonl_line_is_located(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_bytes((row_json(0) + "\r" + row_json(1) + "\n" + row_json(2) + "\n").encode())
    _usage(scan("p.jsonl"), "p.jsonl:1:", "carriage return")


# --- texts that normalise to nothing ----------------------------------------------------------


@pytest.mark.parametrize("text", ["...", "!!!", "\u200b", "\u200b\u200d\ufeff", " \u00ad ", "“”"])
def test_text_that_normalises_to_nothing_is_empty(tmp_path: Path, text: str) -> None:
    rows = [{"anchor": "q1", "positive": text}, {"anchor": "q2", "positive": text}]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _usage(scan("p.jsonl", "--on-bad-row", "error"), "p.jsonl:1:", "column 'positive'", "empty")
    for mode in ("skip", "skip-empty"):
        result = scan("p.jsonl", "--on-bad-row", mode)
        assert result.exit_code == 2  # every row skipped
        assert "no valid rows" in result.stderr and "first: p.jsonl:1" in result.stderr


def test_punctuation_only_is_skipped_and_never_a_duplicate(tmp_path: Path) -> None:
    rows = [
        {"anchor": "q1", "positive": "..."},
        {"anchor": "q2", "positive": "!!!"},
        {"anchor": "q3", "positive": "a real answer"},
    ]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = scan("p.jsonl", "--on-bad-row", "skip")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["rows"] == 1 and report["counts"]["findings"] == 0


def test_punctuation_is_text_when_normalisation_keeps_it(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text('{"anchor": "q", "positive": "..."}\n')
    loaded = load_rows(["p.jsonl"], ColumnMapping(), normalise=NormaliseConfig(strip_chars=""))
    assert loaded.rows.height == 1


def test_empty_list_item_after_normalisation(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text('{"query": "q", "pos": ["fine", "..."]}\n')
    _usage(scan("p.jsonl", "--on-bad-row", "error"), "p.jsonl:1:", "column 'pos'", "empty after normalisation")


# --- stdin and FIFOs --------------------------------------------------------------------------


def test_stdin_jsonl() -> None:
    result = scan("-", stdin=(row_json(0) + "\n" + row_json(1) + "\n").encode())
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["rows"] == 2 and report["input"]["files"] == ["<stdin>"]


@pytest.mark.parametrize(
    "data, layout",
    [
        (b"anchor,positive\na,b\n", "csv"),
        (b"anchor\tpositive\na,1\tb\n", "tsv"),
        (b'[{"anchor": "a", "positive": "b"}]', "jsonl"),
    ],
)
def test_stdin_format_is_sniffed(data: bytes, layout: str) -> None:
    assert readers.sniff_kind(data) == layout
    result = scan("-", stdin=data)
    assert result.exit_code == 0, result.output


def test_stdin_errors_are_located() -> None:
    _usage(scan("-", stdin=(row_json(0) + "\nnot json\n").encode()), "<stdin>:2:")


def test_stdin_empty_and_twice() -> None:
    _usage(scan("-", stdin=b""), "<stdin>", "empty")
    _usage(scan("-", "-", stdin=b"x"), "given twice")


def test_fifo_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text(row_json(0) + "\n" + row_json(1) + "\n"))
    writer.start()
    result = scan(str(fifo))
    writer.join(5)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["rows"] == 2


def test_fifo_without_writer_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    monkeypatch.setattr(readers, "FIFO_WAIT_S", 0.2)
    with pytest.raises(InputError, match="no process wrote"):
        load_rows([str(fifo)], ColumnMapping())


# --- the same file twice ----------------------------------------------------------------------


def test_same_file_twice_is_a_warning(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text(row_json(0) + "\n" + row_json(1) + "\n")
    os.link(tmp_path / "p.jsonl", tmp_path / "hard.jsonl")
    loaded = load_rows(["p.jsonl", "p.jsonl", "hard.jsonl"], ColumnMapping())
    assert len(loaded.warnings) == 2 and loaded.rows.height == 2  # read once
    assert "p.jsonl is given twice: it is read once" in loaded.warnings[0]
    assert "hard.jsonl is given twice (as p.jsonl)" in loaded.warnings[1]


def test_same_file_twice_with_ids_is_a_warning_not_repeated_ids(tmp_path: Path) -> None:
    (tmp_path / "p.jsonl").write_text(row_json(0, id="a") + "\n" + row_json(1, id="b") + "\n")
    result = scan("p.jsonl", "p.jsonl")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["counts"]["rows"] == 2 and any("given twice" in w for w in report["warnings"])


@pytest.mark.parametrize("content", ['"anchor,positive\n', 'anchor,"posi\ntive', '"\n'])
def test_broken_quoting_in_the_header_is_located(tmp_path: Path, content: str) -> None:
    (tmp_path / "p.csv").write_text(content)
    _usage(scan("p.csv"), "p.csv:", "not valid CSV")


class TestInputsThatCouldHang:
    @pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
    def test_a_device_is_refused(self, device: str) -> None:
        if not Path(device).exists():
            pytest.skip(f"{device} is missing")
        _usage(scan(device), device, "is a character device")

    def test_a_device_on_standard_input_is_refused(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import sys

        with open("/dev/zero", "rb") as zero:
            monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"isatty": lambda s: False, "fileno": zero.fileno})())
            with pytest.raises(InputError, match="<stdin>: is a character device"):
                load_rows(["-"], ColumnMapping())
