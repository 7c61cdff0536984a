"""Loading in chunks: the rows, errors, skipped rows, mappings and warnings of ``load_rows``, whatever the
chunk and block sizes; JSON Lines read in blocks and Parquet in batches where they can be."""

from __future__ import annotations

import json
import random
from pathlib import Path

import polars as pl
import pytest
from support import in_tmp

from contrast_audit.config import ColumnMapping
from contrast_audit.errors import InputError
from contrast_audit.io import chunks, load_rows
from contrast_audit.io.chunks import iter_row_chunks

pytestmark = pytest.mark.usefixtures(in_tmp.__name__)

SIZES = [(2, 64), (3, 97), (7, 200), (500, 1 << 20)]  # (rows_per_chunk, block_bytes)
BLOCKS = SIZES[:-1]  # block sizes smaller than the test files


@pytest.fixture
def whole_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files read whole rather than in blocks or batches."""
    read: list[str] = []
    original = chunks._FileReader._whole

    def spy(self: chunks._FileReader) -> chunks._Piece:
        read.append(str(self.path))
        return original(self)

    monkeypatch.setattr(chunks._FileReader, "_whole", spy)
    return read


def same_as_load_rows(
    patterns: list[str],
    user: ColumnMapping | None = None,
    sizes: list[tuple[int, int]] = SIZES,
    **options: str,
) -> None:
    """Every chunk and block size gives load_rows' rows, skipped rows, mappings, files and warnings, or its
    error (message and location)."""
    user = user or ColumnMapping()
    expected: InputError | None = None
    try:
        loaded = load_rows(patterns, user, **options)
    except InputError as exc:
        expected = exc
    for rows_per_chunk, block_bytes in sizes:
        chunked = iter_row_chunks(patterns, user, rows_per_chunk=rows_per_chunk, block_bytes=block_bytes, **options)
        if expected is not None:
            yielded: list[pl.DataFrame] = []
            with pytest.raises(InputError) as raised:
                yielded.extend(c.rows for c in chunked)
            assert (str(raised.value), raised.value.line, raised.value.row) == (
                str(expected),
                expected.line,
                expected.row,
            )
            at = expected.line if expected.line is not None else expected.row
            if yielded and at is not None:  # no row at or past the error was yielded
                rows = pl.concat(yielded).filter(pl.col("file") == expected.path)
                assert rows.filter(pl.col("line") >= at).height == 0
            continue
        got = list(chunked)
        assert chunked.complete
        assert pl.concat([c.rows for c in got]).equals(loaded.rows), (rows_per_chunk, block_bytes)
        heights = [c.rows.height for c in got]
        assert all(h == rows_per_chunk for h in heights[:-1]) and 0 <= heights[-1] <= rows_per_chunk
        assert chunked.skipped == loaded.skipped
        assert sorted(map(repr, (b for c in got for b in c.skipped))) == sorted(map(repr, loaded.skipped))
        assert (chunked.files, chunked.mappings, chunked.warnings) == (loaded.files, loaded.mappings, loaded.warnings)


def write_lines(path: str, records: list[object], newline: str = "\n", end: bool = True) -> str:
    text = newline.join(r if isinstance(r, str) else json.dumps(r) for r in records)
    Path(path).write_bytes((text + (newline if end else "")).encode("utf-8"))
    return path


def pairs(n: int, start: int = 0, **extra: object) -> list[dict]:
    return [{"anchor": f"query {i}", "positive": f"document {i}", **extra} for i in range(start, start + n)]


# --- rows as load_rows gives them ---------------------------------------------------------------------


def test_jsonl_is_read_in_blocks(whole_reads: list[str]) -> None:
    write_lines("a.jsonl", pairs(40))
    same_as_load_rows(["a.jsonl"], sizes=[(3, 64)])
    assert whole_reads == []


def test_several_files_globs_and_a_file_given_twice() -> None:
    write_lines("a.jsonl", pairs(9))
    write_lines("b.ndjson", pairs(5, 100, source="web"))
    Path("c.csv").write_text("anchor,positive\n" + "".join(f"q{i},d{i}\n" for i in range(8)))
    pl.DataFrame({"anchor": [f"pq{i}" for i in range(11)], "positive": [f"pd{i}" for i in range(11)]}).write_parquet(
        "d.parquet", row_group_size=4
    )
    same_as_load_rows(["a.jsonl", "*.ndjson", "c.csv", "d.parquet", "a.jsonl", "./b.ndjson"])


def test_default_ids_count_skipped_rows_across_files_and_chunks() -> None:
    records = pairs(12)
    records[2]["anchor"] = "  "
    records[7]["positive"] = "?!"
    records[11]["anchor"] = ""
    write_lines("a.jsonl", records)
    write_lines("b.jsonl", [*pairs(3, 50), {"anchor": "x", "positive": ""}, *pairs(4, 60)])
    same_as_load_rows(["a.jsonl", "b.jsonl"])
    same_as_load_rows(["a.jsonl", "b.jsonl"], on_bad_row="skip")


def test_flagembedding_pos_lists_explode_with_numbered_ids() -> None:
    records = [{"query": f"q{i}", "pos": [f"p{i}.{k}" for k in range(i % 3 + 1)], "neg": [f"n{i}"]} for i in range(15)]
    records[4]["pos"] = []
    write_lines("fe.jsonl", records)
    same_as_load_rows(["fe.jsonl"])
    with_ids = [{**r, "id": f"r{i}"} for i, r in enumerate(records)]
    write_lines("ids.jsonl", with_ids)
    same_as_load_rows(["ids.jsonl"])


def test_bom_crlf_blank_lines_and_no_last_newline(whole_reads: list[str]) -> None:
    text = "\r\n".join(json.dumps(r) for r in pairs(20)).replace("}\r\n{", "}\r\n  \r\n\r\n{", 5)
    Path("a.jsonl").write_bytes(("\ufeff" + text).encode("utf-8"))
    same_as_load_rows(["a.jsonl"], sizes=BLOCKS)
    assert whole_reads == []


def test_cr_only_line_ends_are_read_whole(whole_reads: list[str]) -> None:
    write_lines("a.jsonl", pairs(20), newline="\r")
    same_as_load_rows(["a.jsonl"], sizes=[(3, 64)])
    assert whole_reads == ["a.jsonl"]


def test_a_key_missing_from_a_whole_block_and_a_column_null_in_a_block(whole_reads: list[str]) -> None:
    records = [
        *pairs(6),
        *({**r, "id": f"x{i}", "negative": None} for i, r in enumerate(pairs(6, 10))),
        *({**r, "id": f"y{i}", "negative": f"neg {i}", "group": "g"} for i, r in enumerate(pairs(6, 20))),
    ]
    write_lines("a.jsonl", records)
    same_as_load_rows(["a.jsonl"], sizes=[(4, 64)], on_bad_row="skip")  # rows without an id are bad
    same_as_load_rows(["a.jsonl"], sizes=[(4, 64)])
    assert whole_reads == []


def test_a_negative_column_first_seen_late_joins_the_mapping() -> None:
    records = [*pairs(8), *({**r, "negative_2": "n2", "negative_1": "n1"} for r in pairs(4, 30))]
    write_lines("a.jsonl", records)
    same_as_load_rows(["a.jsonl"], sizes=[(3, 64)])


def test_empty_lists_in_one_block_and_texts_in_another(whole_reads: list[str]) -> None:
    records = [{"query": f"q{i}", "pos": [f"p{i}"], "neg": []} for i in range(8)]
    records += [{"query": f"q{i}", "pos": [f"p{i}"], "neg": [f"n{i}", None]} for i in range(8, 12)]
    write_lines("a.jsonl", records)
    same_as_load_rows(["a.jsonl"], sizes=[(3, 64)], on_bad_row="skip")
    assert whole_reads == []


def test_an_id_that_is_a_number_in_one_block_and_text_in_another() -> None:
    records = [{**r, "id": i} for i, r in enumerate(pairs(6))] + [{**r, "id": f"s{i}"} for i, r in enumerate(pairs(6))]
    write_lines("a.jsonl", records)
    same_as_load_rows(["a.jsonl"], sizes=[(3, 64)])


def test_parquet_is_read_in_batches(whole_reads: list[str]) -> None:
    frame = pl.DataFrame(
        {
            "anchor": [f"a{i}" if i != 9 else " " for i in range(23)],
            "positive": [f"p{i}" for i in range(23)],
            "cohort": pl.Series([f"c{i % 2}" for i in range(23)], dtype=pl.Categorical),
        }
    )
    frame.write_parquet("p.parquet", row_group_size=5)
    same_as_load_rows(["p.parquet"], sizes=BLOCKS)
    same_as_load_rows(["p.parquet"], sizes=BLOCKS, on_bad_row="skip")
    assert whole_reads == []


def test_json_array_csv_and_stdin_like_files_are_read_whole(whole_reads: list[str]) -> None:
    Path("a.json").write_text(json.dumps(pairs(9)))
    Path("b.tsv").write_text("anchor\tpositive\n" + "".join(f"q{i}\td{i}\n" for i in range(9)))
    same_as_load_rows(["a.json", "b.tsv"])
    assert whole_reads == ["a.json", "b.tsv"] * len(SIZES)


# --- bad rows -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("on_bad_row", ["skip", "skip-empty", "error"])
@pytest.mark.parametrize("at", [0, 5, 17, 29])
def test_bad_rows_anywhere(on_bad_row: str, at: int) -> None:
    records: list[object] = pairs(30)
    records[at] = {"anchor": "", "positive": "d"}
    records[(at + 11) % 30] = {"anchor": "a", "positive": None}
    write_lines("a.jsonl", records, end=at != 29)
    same_as_load_rows(["a.jsonl"], on_bad_row=on_bad_row)


@pytest.mark.parametrize("on_bad_row", ["skip", "error"])
def test_invalid_json_in_a_later_block(on_bad_row: str, whole_reads: list[str]) -> None:
    records: list[object] = pairs(20)
    records[14] = '{"anchor": "broken'
    records[3] = {"anchor": "", "positive": "d"}  # a bad row before it: load_rows reports the JSON first
    write_lines("a.jsonl", records)
    same_as_load_rows(["a.jsonl"], sizes=[(3, 64)], on_bad_row=on_bad_row)
    assert whole_reads == ["a.jsonl"]


def test_bytes_that_are_not_utf8_in_a_later_block() -> None:
    data = "".join(json.dumps(r) + "\n" for r in pairs(20)).encode()
    at = data.index(b"query 15")
    Path("a.jsonl").write_bytes(data[:at] + b"\xff" + data[at + 1 :])
    same_as_load_rows(["a.jsonl"])


def test_an_object_spread_over_lines_and_a_csv_named_jsonl() -> None:
    Path("a.jsonl").write_text(json.dumps(pairs(6), indent=2)[1:-1])
    same_as_load_rows(["a.jsonl"], sizes=[(3, 64)])
    Path("b.jsonl").write_text("anchor,positive\n" + "a,b\n" * 40)
    same_as_load_rows(["b.jsonl"], sizes=[(3, 64)])


def test_parquet_bad_row_in_a_later_batch_is_located_by_row() -> None:
    pl.DataFrame({"anchor": [f"a{i}" for i in range(12)], "positive": [*"pqrstuvwxy", None, "z"]}).write_parquet(
        "p.parquet", row_group_size=3
    )
    same_as_load_rows(["p.parquet"])


def test_no_valid_rows_left() -> None:
    write_lines("a.jsonl", [{"anchor": " ", "positive": "d"}] * 9)
    write_lines("b.jsonl", [{"anchor": "", "positive": "d"}] * 9)
    same_as_load_rows(["a.jsonl", "b.jsonl"])
    same_as_load_rows(["a.jsonl", "b.jsonl"], on_bad_row="skip")


# --- repeated ids -------------------------------------------------------------------------------------


@pytest.mark.parametrize("on_bad_row", ["skip", "skip-empty", "error"])
def test_repeated_ids_across_chunks_and_files(on_bad_row: str) -> None:
    ids = ["A", "B", "C", "B", "D", "A", "E", "C", "F", "G"]
    write_lines("a.jsonl", [{**r, "id": i} for r, i in zip(pairs(10), ids, strict=True)])
    write_lines("b.jsonl", [{**r, "id": i} for r, i in zip(pairs(4, 50), ["H", "G", "A", "I"], strict=True)])
    same_as_load_rows(["a.jsonl", "b.jsonl"], ColumnMapping(id="id"), on_bad_row=on_bad_row)


def test_the_reported_repeat_is_of_the_id_whose_first_row_comes_first() -> None:
    ids = ["x", "A", "B", "B", "y", "z", "A"]  # B repeats first, A's first row comes first
    write_lines("a.jsonl", [{**r, "id": i} for r, i in zip(pairs(7), ids, strict=True)])
    same_as_load_rows(["a.jsonl"], on_bad_row="error")


def test_a_bad_row_in_a_later_file_is_reported_before_a_repeated_id() -> None:
    write_lines("a.jsonl", [{**r, "id": "same"} for r in pairs(6)])
    write_lines("b.jsonl", [*pairs(5, 10), {"anchor": 3, "positive": "d"}])
    same_as_load_rows(["a.jsonl", "b.jsonl"], on_bad_row="error")


def test_repeated_ids_of_exploded_rows_and_parquet_rows() -> None:
    # Line 1 gives r#0, r#1, r#2; r#1 repeats first, but r#0's first row comes first.
    repeats = [{"id": i, "query": "q", "pos": "p"} for i in ("r#1", "r#0", "r#2")]
    write_lines("fe.jsonl", [{"id": "r", "query": "q", "pos": ["p1", "p2", "p3"]}, *repeats])
    same_as_load_rows(["fe.jsonl"], on_bad_row="error")
    same_as_load_rows(["fe.jsonl"], on_bad_row="skip")
    pl.DataFrame({"id": [1, 2, 3, 2, 5, 1], "anchor": list("abcdef"), "positive": list("ghijkl")}).write_parquet(
        "p.parquet", row_group_size=2
    )
    same_as_load_rows(["p.parquet"], on_bad_row="error")
    same_as_load_rows(["p.parquet"], on_bad_row="skip")


def test_ids_that_share_a_hash_are_told_apart() -> None:
    seen = chunks._SeenIds(["f.jsonl"], "skip")
    frame = pl.DataFrame({"id": ["a", "b"], "line": [1, 2]})
    seen.check(frame, 0)
    keys, checks, where = seen.runs[0]
    seen.runs[0] = (keys, checks[::-1].copy(), where)  # the check hashes no longer match: no repeat
    kept, dropped = seen.check(pl.DataFrame({"id": ["a"], "line": [3]}), 0)
    assert (kept.height, dropped) == (1, [])


def test_arguments_are_checked_and_a_load_is_iterated_once() -> None:
    write_lines("a.jsonl", pairs(3))
    with pytest.raises(ValueError, match="rows_per_chunk must be at least 1"):
        iter_row_chunks(["a.jsonl"], ColumnMapping(), rows_per_chunk=0)
    chunked = iter_row_chunks(["a.jsonl"], ColumnMapping())
    assert not chunked.complete
    list(chunked)
    with pytest.raises(RuntimeError, match="iterated once"):
        iter(chunked)


# --- mixed inputs, at random --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_random_inputs(seed: int) -> None:
    rng = random.Random(seed)
    names = []
    for f in range(3):
        records: list[object] = []
        for i in range(rng.randint(3, 25)):
            r: dict[str, object] = {"anchor": f"q{f}.{i}", "positive": f"d{f}.{i}"}
            roll = rng.random()
            if roll < 0.1:
                r["anchor"] = rng.choice(["", " ", "!!", None])
            elif roll < 0.15:
                r["positive"] = 7
            if rng.random() < 0.3:
                r["negative"] = rng.choice([f"n{i}", None, ""])
            if rng.random() < 0.5:
                r["id"] = f"id{rng.randint(0, 40)}"
            records.append(r)
            if rng.random() < 0.1:
                records.append("")
        names.append(write_lines(f"f{f}.jsonl", records, end=rng.random() < 0.5))
    for on_bad_row in ("skip", "skip-empty", "error"):
        same_as_load_rows(names, sizes=[(rng.randint(1, 9), rng.randint(30, 300))], on_bad_row=on_bad_row)
