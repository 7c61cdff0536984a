"""--baseline on data that grows: rows are told old from new by content, so only what new rows bring
counts, whatever batches the new row count re-plans."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from support import write_jsonl
from typer.testing import CliRunner

from contrast_audit.baseline import Baseline, from_hex, row_hashes
from contrast_audit.cli import app

ENV = {"GITHUB_ACTIONS": "", "GITHUB_STEP_SUMMARY": ""}
# 15 pairs of rows sharing a positive: wherever random batches put two of a pair together, a finding.
OLD = [
    row
    for i in range(15)
    for row in (
        {"anchor": f"first question number {i}", "positive": f"the shared answer number {i}"},
        {"anchor": f"second query variant {i}", "positive": f"The shared answer number {i}."},
    )
]
CLEAN = [{"anchor": f"a brand new question {i}", "positive": f"a brand new reply {i}"} for i in range(4)]


def scan(*args: str):
    return CliRunner().invoke(app, ["scan", *args, "--no-embeddings", "--no-minhash", "-q"], env=ENV)


def report_of(*args: str) -> tuple[int, dict]:
    out = scan(*args, "--format", "json")
    assert out.exit_code in (0, 1), out.output
    return out.exit_code, json.loads(out.stdout)


def pairs(report: dict) -> set[tuple[str, str]]:
    return {(f["anchor_text_hash"], f["candidate_text_hash"]) for f in report["findings"]}


def take_baseline(data: Path, out: Path, *extra: str) -> Path:
    done = scan(str(data), "--batch-size", "6", "--seed", "3", *extra, "--output", str(out))
    assert done.exit_code == 0, done.output
    return out


def test_an_append_of_clean_rows_passes_though_the_batches_moved(tmp_path: Path):
    data = write_jsonl(tmp_path / "train.jsonl", OLD)
    baseline = take_baseline(data, tmp_path / "baseline.json")
    before = json.loads(baseline.read_text(encoding="utf-8"))
    assert before["counts"]["findings"] > 0 and len(before["input"]["row_hashes"]) == len(OLD)

    write_jsonl(data, [*OLD, *CLEAN])
    gate = ["--batch-size", "6", "--seed", "3", "--fail-on", "findings>0,certain>0,fn-rate>0"]
    code, after = report_of(str(data), *gate, "--baseline", str(baseline))
    # The appended rows re-planned the batches: old rows meet in pairs the baseline never saw ...
    assert pairs(after) - pairs(before), "the case must move batches, or it tests nothing"
    # ... and none of that counts: every finding is between two old rows.
    assert code == 0
    assert all(f["baseline"] for f in after["findings"])
    c = after["counts"]
    assert (c["findings"], c["rows_affected"], c["fn_rate"]) == (0, 0, 0.0)
    assert c["in_baseline"]["findings"] == len(after["findings"])
    # The candidates are the pairs with a new row (4 new rows, each compared in its batch).
    assert 0 < c["candidates"] < before["counts"]["candidates"] + len(CLEAN) * 6


def test_rows_inserted_above_keep_old_rows_old(tmp_path: Path):
    """Ids default to row numbers and lines shift; a row is still known by its content."""
    data = write_jsonl(tmp_path / "train.jsonl", OLD)
    baseline = take_baseline(data, tmp_path / "baseline.json")
    write_jsonl(data, [*CLEAN, *OLD])
    code, after = report_of(
        str(data), "--batch-size", "6", "--seed", "3", "--fail-on", "findings>0", "--baseline", str(baseline)
    )
    assert code == 0, after["counts"]
    assert after["findings"] and all(f["baseline"] for f in after["findings"])


def test_an_appended_duplicate_is_new_and_fails_the_gate(tmp_path: Path):
    data = write_jsonl(tmp_path / "train.jsonl", OLD)
    baseline = take_baseline(data, tmp_path / "baseline.json")
    copy = dict(OLD[4])  # the same content again: the second copy is the new row
    write_jsonl(data, [*OLD, copy])
    gate = ["--batch-size", "6", "--seed", "3", "--fail-on", "findings>0", "--baseline", str(baseline)]
    # Against the file itself, so the copy's overlap with its original is found wherever the batches put it.
    code, after = report_of(str(data), *gate, "--against", str(data), "--fail-on", "overlaps>0", "--no-index")
    assert code == 1
    new_row = str(len(OLD))  # ids are row numbers: the appended copy
    counted = [o for o in after["overlaps"] if not o["baseline"]]
    assert counted and {o["row_id"] for o in counted} == {new_row}
    # The original's overlap with the copy is the same pair seen from the old row: not counted.
    mirrored = [o for o in after["overlaps"] if o["row_id"] == "4"]
    assert mirrored and all(o["baseline"] for o in mirrored)
    for f in after["findings"]:
        assert f["baseline"] == (new_row not in (f["anchor_id"], f["candidate_id"]))
    assert after["counts"]["overlaps"] == len(counted)


def test_an_old_row_leaking_a_new_eval_row_counts(tmp_path: Path):
    data = write_jsonl(tmp_path / "train.jsonl", OLD)
    queries = tmp_path / "queries.jsonl"
    write_jsonl(queries, [{"_id": "q1", "text": "nothing like the training data"}])
    common = ["--batch-size", "6", "--seed", "3", "--eval", str(queries), "--no-index"]
    baseline = take_baseline(data, tmp_path / "baseline.json", *common)
    write_jsonl(
        queries, [{"_id": "q1", "text": "nothing like the training data"}, {"_id": "q2", "text": OLD[0]["anchor"]}]
    )
    code, after = report_of(str(data), *common, "--fail-on", "leaks>0", "--baseline", str(baseline))
    assert code == 1 and after["counts"]["leaks"] == 1
    # The same eval set again: the leak is now in a baseline.
    again = take_baseline(data, tmp_path / "again.json", *common)
    code, _ = report_of(str(data), *common, "--fail-on", "leaks>0", "--baseline", str(again))
    assert code == 0


def test_row_hash_names_content_not_position():
    norms = pl.Series(["a b", "c d", "e f"])
    tids = np.array([[0, 1, -1], [0, 1, 2], [1, 0, -1], [0, 1, -1]])
    groups = pl.Series([None, None, None, "g"], dtype=pl.String)
    hashes = row_hashes(norms, tids, groups).to_list()
    assert len(set(hashes)) == 4  # a negative, the roles swapped and a group each make another row
    assert row_hashes(norms, tids[[3, 0]], groups.gather([3, 0])).to_list() == [hashes[3], hashes[0]]
    assert all(len(h) == 16 and int(h, 16) >= 0 for h in hashes)
    assert row_hashes(pl.Series(["x", "a b", "c d"]), np.array([[1, 2, -1]]), pl.Series([None])).to_list() == [
        hashes[0]
    ]  # text ids differ between runs; the texts decide
    # Another file with more negative columns pads this row wider: the same row, the same hash.
    wider = np.array([[0, 1, -1, -1, -1]])
    assert row_hashes(norms, wider, pl.Series([None], dtype=pl.String)).to_list() == [hashes[0]]


def test_copies_count_as_a_multiset():
    h1, h2, h3 = "00000000000000a1", "ffffffffffffffa2", "00000000000000a3"
    old = Baseline("b.json", from_hex([h1, h2, h2]), pl.DataFrame())
    assert old.new_rows(pl.Series([h2, h1, h2, h2, h3, h1])).tolist() == [
        False,
        False,
        False,
        True,
        True,
        True,
    ]


@pytest.mark.parametrize("fmt", ["json"])
def test_the_report_lists_every_rows_hash_in_slices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str):
    from contrast_audit.report import json_format

    data = write_jsonl(tmp_path / "train.jsonl", OLD)
    whole = json.loads(scan(str(data), "--format", fmt).stdout)
    monkeypatch.setattr(json_format, "ROWS_PER_SLICE", 7)
    sliced = json.loads(scan(str(data), "--format", fmt).stdout)
    assert sliced["input"]["row_hashes"] == whole["input"]["row_hashes"] and len(whole["input"]["row_hashes"]) == 30


def test_findings_of_an_old_anchor_and_a_new_row_are_located_at_the_new_row(tmp_path: Path):
    from contrast_audit.api import audit
    from contrast_audit.config import build_config
    from contrast_audit.report import json_format
    from contrast_audit.report.github import annotations
    from contrast_audit.report.located import located

    settings = {"embeddings": False, "minhash": False, "batch_size": 64}
    data = write_jsonl(tmp_path / "train.jsonl", OLD)
    (tmp_path / "b.json").write_text(json_format.render(audit([str(data)], build_config(settings))))
    write_jsonl(data, [*OLD, dict(OLD[4])])  # one batch: the copy meets its original both ways
    result = audit([str(data)], build_config({**settings, "baseline": str(tmp_path / "b.json")}))
    counted = result.active_findings
    assert {("4", "30"), ("30", "4")} <= {
        (str(a), str(c))
        for a, c in zip(
            result.corpus.rows.get_column("id").gather(counted.get_column("anchor_row")).to_list(),
            result.corpus.rows.get_column("id").gather(counted.get_column("cand_row")).to_list(),
            strict=True,
        )
    }
    table = located(result).filter(~pl.col("baseline") & pl.col("rule").str.starts_with("false-negative"))
    assert set(table.get_column("line").to_list()) == {31}  # never the old row's line 5
    flipped = table.filter(pl.col("at_candidate")).row(0, named=True)
    assert (flipped["row_id"], flipped["other_id"], flipped["other_role"]) == ("30", "4", "anchor")
    lines = annotations(result, root=tmp_path)
    # The copy is annotated once, as the repeat of line 5 it is; its in-batch findings are counted with it.
    assert len(lines) == 1 and ",line=31," in lines[0] and "This row repeats line 5" in lines[0]
    assert "This row has 5 more results" in lines[0] and "4 × in-batch false negative (certain)" in lines[0]


def test_with_existing_rows_the_reference_rows_are_never_new(tmp_path: Path):
    new = write_jsonl(tmp_path / "new.jsonl", OLD[:10])
    existing = write_jsonl(tmp_path / "existing.jsonl", OLD[10:])
    common = ["--batch-size", "6", "--seed", "3", "--against", str(existing), "--with-existing", "--no-index"]
    baseline = take_baseline(new, tmp_path / "baseline.json", *common)
    write_jsonl(new, [*OLD[:10], *CLEAN, dict(OLD[12])])  # a clean append and a copy of an existing row
    code, after = report_of(str(new), *common, "--baseline", str(baseline), "--fail-on", "findings>0")
    copy = str(10 + len(CLEAN))  # its id: its row number in new.jsonl
    assert after["findings"], "the case needs findings between the old and the existing rows"
    for f in after["findings"]:  # only the copy is new: the existing rows are not, whatever the baseline
        assert f["baseline"] == (copy not in (f["anchor_id"], f["candidate_id"]))
    assert after["counts"]["findings"] == sum(not f["baseline"] for f in after["findings"])
    assert code == (1 if after["counts"]["findings"] else 0)


class TestBaselinesThatAreNotReports:
    """A --baseline that is not a report is exit 2 naming the file and what it is, never a hang or exit 3."""

    @staticmethod
    def refused(tmp_path: Path, baseline: str) -> str:
        data = write_jsonl(tmp_path / "train.jsonl", OLD[:4])
        out = scan(str(data), "--baseline", baseline)
        assert out.exit_code == 2, out.output
        assert f"{baseline}: " in out.stderr and "internal error" not in out.stderr
        return out.stderr

    def test_deep_nesting_is_too_deep_not_a_crash(self, tmp_path: Path):
        deep = tmp_path / "deep.json"
        deep.write_text('{"schema_version": "2", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
        assert "nested too deeply" in self.refused(tmp_path, str(deep))

    @pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
    def test_a_device_is_refused_at_once(self, tmp_path: Path, device: str):
        if not Path(device).exists():
            pytest.skip(f"{device} is missing")
        message = self.refused(tmp_path, device)
        assert "is a character device" in message and "--baseline REPORT.json" in message

    def test_a_fifo_nobody_writes_to_is_refused(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        import os

        from contrast_audit.io import readers

        fifo = tmp_path / "baseline.json"
        os.mkfifo(fifo)
        monkeypatch.setattr(readers, "FIFO_WAIT_S", 0.2)
        assert "is a FIFO that no process wrote to" in self.refused(tmp_path, str(fifo))

    def test_a_fifo_with_a_writer_is_read(self, tmp_path: Path):
        import os
        import threading

        data = write_jsonl(tmp_path / "train.jsonl", OLD)
        report = take_baseline(data, tmp_path / "baseline.json").read_text(encoding="utf-8")
        fifo = tmp_path / "pipe.json"
        os.mkfifo(fifo)
        writer = threading.Thread(target=lambda: fifo.write_text(report, encoding="utf-8"))
        writer.start()
        code, after = report_of(str(data), "--batch-size", "6", "--seed", "3", "--baseline", str(fifo))
        writer.join(5)
        assert code == 0 and after["counts"]["in_baseline"]["findings"] == len(after["findings"]) > 0

    def test_a_directory_and_standard_input_are_refused(self, tmp_path: Path):
        assert "is a directory" in self.refused(tmp_path, str(tmp_path))
        assert "not standard input" in self.refused(tmp_path, "-")

    @pytest.mark.parametrize(
        "bad",
        [
            "0123 4567 89ab cd",  # 16 characters that bytes.fromhex reads as 7 bytes
            "0123456789abcde ",
            " 0123456789abcde",
            "0123456789abcdef\n",
            "0123456789abcdeg",
            "０１２３４５６７８９ａｂｃｄｅｆ",  # full-width digits
            "0x0123456789abcd",
        ],
    )
    def test_row_hashes_are_exactly_16_hex_digits(self, tmp_path: Path, bad: str):
        report = tmp_path / "bad.json"
        hashes = ["0123456789ABCDEF", bad]
        report.write_text(json.dumps({"schema_version": "2", "input": {"row_hashes": hashes}}), encoding="utf-8")
        message = self.refused(tmp_path, str(report))
        assert f"'input.row_hashes' item 1 is {json.dumps(bad, ensure_ascii=False)}, not 16 hex digits" in message
        with pytest.raises(ValueError):
            from_hex(hashes)

    def test_spaced_hashes_are_not_read_as_fewer_rows(self, tmp_path: Path):
        """Eight hashes of 14 digits and 2 spaces: bytes.fromhex alone read them as seven rows."""
        hashes = ["0123 4567 89abcd"] * 8
        with pytest.raises(ValueError):
            from_hex(hashes)
        report = tmp_path / "spaced.json"
        report.write_text(json.dumps({"schema_version": "2", "input": {"row_hashes": hashes}}), encoding="utf-8")
        assert 'item 0 is "0123 4567 89abcd", not 16 hex digits' in self.refused(tmp_path, str(report))

    def test_upper_and_lower_case_digits_are_the_same_hash(self):
        assert from_hex(["0123456789ABCDEF"]).tolist() == from_hex(["0123456789abcdef"]).tolist()
