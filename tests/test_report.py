"""The JSON, markdown and text reports, configuration files, and the Python API."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.config import AuditConfig, PlanConfig, build_config, load_config_file

# These tests are about loading, plans and reports: lexical evidence only, no model.
LEXICAL = ("--no-embeddings", "--no-minhash")

ROWS = [
    {"id": "a", "anchor": "reset password", "positive": "How to reset your password", "source": "docs", "cohort": "c1"},
    {"id": "b", "anchor": "forgot pw", "positive": "how to reset your password!", "source": "forum", "cohort": "c1"},
    {"id": "c", "anchor": "dark mode", "positive": "Enable dark mode in Settings", "source": "docs", "cohort": "c2"},
    {
        "id": "d",
        "anchor": "export invoices",
        "positive": "Billing → Export",
        "negative": "billing → export",
        "source": "docs",
        "cohort": "c2",
    },
]


def scan(*args: str):
    return CliRunner().invoke(app, ["scan", *args, *LEXICAL])


def test_json_report_contract(pairs_file):
    path = pairs_file(ROWS)
    result = scan(str(path), "--batch-size", "8", "--format", "json", "-q")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["schema_version"] == "2"
    hashes = report["input"]["row_hashes"]
    assert len(hashes) == 4 and all(re.fullmatch("[0-9a-f]{16}", h) for h in hashes) and len(set(hashes)) == 4
    assert report["config"]["plan"]["batch_size"] == 8
    assert report["mapping"][0]["layout"] == "anchor/positive/negative"
    assert report["mapping"][0]["negatives"] == ["negative"]
    c = report["counts"]
    assert (c["rows"], c["findings"], c["mislabelled_negatives"]) == (4, 2, 1)
    assert c["fn_rate"] == c["findings"] / c["candidates"]
    assert {f["anchor_id"] for f in report["findings"]} == {"a", "b"}
    finding = report["findings"][0]
    assert set(finding) == {
        "batch",
        "epoch",
        "direction",
        "anchor_id",
        "candidate_id",
        "candidate_role",
        "severity",
        "severity_rule",
        "evidence",
        "why_not",
        "masked",
        "baseline",
        "anchor_text_hash",
        "candidate_text_hash",
    }
    assert finding["severity_rule"] == "exact"
    assert finding["why_not"] == []  # explained only short of likely
    assert report["vetoed"] == []
    assert finding["masked"] is False and finding["baseline"] is False
    assert finding["evidence"] == [{"kind": "exact", "score": 1.0, "threshold": 1.0}]
    (mislabelled,) = report["mislabelled_negatives"]
    hashes = {k: mislabelled.pop(k) for k in ("anchor_text_hash", "negative_text_hash")}
    assert mislabelled == {
        "row_id": "d",
        "negative": "negative_1",
        "severity": "certain",
        "severity_rule": "exact",
        "evidence": [{"kind": "exact", "score": 1.0, "threshold": 1.0}],
        "masked": False,
        "baseline": False,
    }
    assert all(len(h) == 16 for h in hashes.values())
    assert report["overlaps"] == [] and report["baseline"] is None
    by_source = {r["source"]: r for r in report["by_source"]}
    assert by_source["forum"]["findings"] == 1 and by_source["docs"]["findings"] == 1


def test_text_and_markdown_reports_show_texts_side_by_side(pairs_file):
    path = pairs_file(ROWS)
    text = scan(str(path), "--batch-size", "8")
    assert text.exit_code == 0
    assert "How to reset your password" in text.stdout and "how to reset your password!" in text.stdout
    assert "contrast-audit: 4 rows" in text.stderr
    md = scan(str(path), "--batch-size", "8", "--format", "markdown", "-q")
    assert md.exit_code == 0
    assert "| false negatives | 2 |" in md.stdout
    assert md.stderr == ""
    # Rows are named by file:line, with the id beside it only where it is not the row's number.
    assert f"(`{path}:1` id `a`)" in md.stdout or f"(`{path}:2` id `b`)" in md.stdout
    unnamed = pairs_file([{k: v for k, v in r.items() if k != "id"} for r in ROWS])
    md = scan(str(unnamed), "--batch-size", "8", "--format", "markdown", "-q")
    assert f"(`{unnamed}:1`)" in md.stdout or f"(`{unnamed}:2`)" in md.stdout
    assert "` id `" not in md.stdout


def test_gate_reads_the_same_numbers(pairs_file):
    path = pairs_file(ROWS)
    assert scan(str(path), "--batch-size", "8", "-q", "--fail-on", "certain>1").exit_code == 1
    assert scan(str(path), "--batch-size", "8", "-q", "--fail-on", "certain>2").exit_code == 0
    assert scan(str(path), "--batch-size", "8", "-q", "--fail-on", "mislabelled>=1,exact>5").exit_code == 1


def test_config_file_and_flag_precedence(tmp_path, pairs_file, monkeypatch):
    path = pairs_file(ROWS)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.contrast-audit]\nbatch-size = 2\nseed = 7\nfail-on = ["findings>100"]\n'
    )
    monkeypatch.chdir(tmp_path)
    settings, origin = load_config_file()
    assert origin.endswith("pyproject.toml") and settings["batch_size"] == 2
    result = scan(str(path), "--format", "json", "-q", "--seed", "9")
    report = json.loads(result.stdout)
    assert report["config"]["plan"]["batch_size"] == 2
    assert report["config"]["plan"]["seed"] == 9
    assert report["config_file"].endswith("pyproject.toml")
    (tmp_path / "contrast-audit.toml").write_text("batch_sise = 3\n")
    bad = scan(str(path), "-q")
    assert bad.exit_code == 2 and "unknown setting 'batch_sise'" in bad.stderr


def test_build_config_validates_values():
    cfg = build_config({"batch_size": 16, "directions": "query_to_doc,doc_to_query".split(",")})
    assert cfg.plan.batch_size == 16 and cfg.loss.directions == ("query_to_doc", "doc_to_query")
    assert AuditConfig(plan=PlanConfig(seed=1)).to_dict()["plan"]["seed"] == 1
    for bad in (
        {"batch_size": 0},
        {"directions": ["sideways"]},
        {"directions": ["doc_to_query"]},
        {"sampler": "shuffle"},
    ):
        try:
            build_config(bad)
        except Exception as exc:  # noqa: BLE001
            assert type(exc).__name__ == "ConfigError"
        else:
            raise AssertionError(f"{bad} accepted")


def test_bad_flag_values_exit_2(pairs_file):
    path = pairs_file(ROWS)
    assert scan(str(path), "--directions", "sideways").exit_code == 2
    assert scan(str(path), "--batch-size", "0").exit_code == 2
    assert scan(str(path), "--world-size", "0").exit_code == 2


def test_internal_errors_exit_3(pairs_file, monkeypatch):
    import contrast_audit.api as api

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(api, "judge", broken)
    result = scan(str(pairs_file(ROWS)), "-q")
    assert result.exit_code == 3
    assert "internal error" in result.stderr and "bug in contrast-audit" in result.stderr
    assert "CONTRAST_AUDIT_DEBUG=1" in result.stderr and "http" not in result.stderr  # no invented address
    from contrast_audit import __version__

    assert __version__ in result.stderr


def test_sampler_and_epochs_and_plan_file(pairs_file, tmp_path):
    path = pairs_file(ROWS)
    plan = tmp_path / "plan.jsonl"
    plan.write_text('{"header": true}\n{"rows": ["a", "c"]}\n{"rows": ["b", "d"]}\n{"rows": ["a", "b"], "epoch": 1}\n')
    report = json.loads(scan(str(path), "--plan", str(plan), "--format", "json", "-q").stdout)
    assert report["plan"]["source"].startswith("file:")
    assert [(f["batch"], f["epoch"], f["anchor_id"]) for f in report["findings"]] == [(2, 1, "a"), (2, 1, "b")]
    two = json.loads(
        scan(
            str(path), "--epochs", "2", "--batch-size", "2", "--sampler", "no-duplicates", "--format", "json", "-q"
        ).stdout
    )
    assert two["counts"]["device_batches"] == 4


def test_help_shows_defaults_and_the_settings_table():
    result = CliRunner().invoke(app, ["scan", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "[default: 32]" in result.stdout and "[tool.contrast-audit]" in result.stdout


MARKUP_ROWS = [
    {"id": "[/]", "anchor": "what does [/] mean", "positive": "a [/] b [red]", "source": "[bold]"},
    {"id": "b", "anchor": "what does [/] mean", "positive": "c [/x] d"},
]


def test_markup_characters_in_data_paths_and_errors_are_shown_literally(tmp_path):
    path = tmp_path / "run[bold].jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MARKUP_ROWS), encoding="utf-8")
    text = scan(str(path), "--batch-size", "8")
    assert text.exit_code == 0, text.output
    assert "a [/] b [red]" in text.stdout and "c [/x] d" in text.stdout and "run[bold].jsonl" in text.stdout
    plan = tmp_path / "plan.jsonl"
    plan.write_text('{"rows": ["[/]", "nope[/]"]}\n')
    bad = scan(str(path), "--plan", str(plan))
    assert bad.exit_code == 2 and "nope[/]" in bad.stderr


def test_gate_metrics_exist_when_their_detector_is_off(pairs_file):
    path = pairs_file(ROWS)
    for flags in (("--max-hops", "0"), ()):
        result = scan(
            str(path), "-q", "--fail-on", "embedding>0", "--fail-on", "linked>0", "--fail-on", "minhash>0", *flags
        )
        assert result.exit_code == 0, result.output


def test_unknown_gate_metric_fails_before_the_scan(pairs_file, monkeypatch):
    import contrast_audit.api as api

    monkeypatch.setattr(api, "load_rows", lambda *a, **k: (_ for _ in ()).throw(AssertionError("scan ran")))
    result = scan(str(pairs_file(ROWS)), "-q", "--fail-on", "findngs>0")
    assert result.exit_code == 2 and "unknown metric 'findngs'" in result.stderr


def test_html_report_is_one_escaped_self_contained_page(pairs_file, tmp_path):
    from html.parser import HTMLParser

    class Page(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: list[str] = []
            self.attrs: list[tuple[str, str | None]] = []
            self.data: list[str] = []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            self.attrs += attrs

        def handle_data(self, data):
            self.data.append(data)

    hostile = "<script>alert('x')</script> & reset\u0007 your password"
    long_text = "How to reset your password " + "with more detail " * 30
    rows = [
        *ROWS,
        {"id": "e<1>", "anchor": hostile, "positive": long_text, "source": "a&b", "cohort": "c1"},
        {"id": "f", "anchor": "pw reset", "positive": long_text, "source": "a&b", "cohort": "c1"},
    ]
    out = tmp_path / "report.html"
    result = scan(str(pairs_file(rows)), "--batch-size", "8", "--format", "html", "--output", str(out), "-q")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    text = out.read_text(encoding="utf-8")
    page = Page()
    page.feed(text)
    # Nothing executable or fetched: no scripts, no external resources, no inline handlers; images
    # (the plots) only as inline data URIs.
    assert "script" not in page.tags and "link" not in page.tags and "img" in page.tags
    assert not any(name.startswith("on") or name == "href" for name, _ in page.attrs)
    sources = [value for name, value in page.attrs if name == "src"]
    assert sources and all(value.startswith("data:image/svg+xml;base64,") for value in sources)
    data = "".join(page.data)
    # Shown as text, after escaping; a control character (invalid in HTML) as U+FFFD.
    assert hostile.replace("\u0007", "\ufffd") in data and "e<1>" in data and "a&b" in data
    assert "\u0007" not in text
    assert "&lt;script&gt;" in text
    assert "details" in page.tags  # the long positive folds
    report = json.loads(scan(str(pairs_file(rows)), "--batch-size", "8", "--format", "json", "-q").stdout)
    c = report["counts"]
    assert f"{c['findings']} false negatives" in data
    assert f"Top {c['findings']} of {c['findings']} findings" in data
    assert f"Mislabelled hard negatives ({c['mislabelled_negatives']} of {c['mislabelled_negatives']})" in data
    for kind, n in c["by_kind"].items():
        assert f"{kind}{n}" in "".join(d.strip() for d in page.data)  # the evidence table's rows
    # Deterministic: the same inputs give the same bytes.
    again = scan(str(pairs_file(rows)), "--batch-size", "8", "--format", "html", "-q")
    assert again.stdout == text


def test_every_scan_option_can_come_from_the_settings_file():
    import inspect

    from contrast_audit import cli
    from contrast_audit.config import _FILE_KEYS

    renamed = {"negative": "negatives", "id_column": "id", "output_format": "format", "eval_data": "eval"}
    # inputs and presentation (CI annotations included), not settings
    not_settings = {"data", "top", "quiet", "config", "output", "report", "annotations", "max_annotations"}
    options = [renamed.get(n, n) for n in inspect.signature(cli.scan).parameters if n not in not_settings]
    assert options and not [name for name in options if name not in _FILE_KEYS]


def test_json_report_streams_its_rows_byte_for_byte(pairs_file, tmp_path, monkeypatch):
    from contrast_audit.api import audit
    from contrast_audit.report import json_format

    rows = ROWS + [
        {"id": f"x{i}", "anchor": f"café № {i % 3}", "positive": "How to reset your password"} for i in range(9)
    ]
    path = pairs_file(rows)
    existing = pairs_file(ROWS[:2], name="existing.jsonl")
    cfg = build_config({"embeddings": False, "batch_size": 4, "against": [str(existing)], "index": str(tmp_path / "i")})
    result = audit([str(path)], cfg)
    assert result.findings.height > 3 and result.mislabelled.height and result.overlaps.height
    expected = json.dumps(result.report(), indent=2, ensure_ascii=False) + "\n"
    assert json_format.render(result) == expected
    monkeypatch.setattr(json_format, "ROWS_PER_SLICE", 2)  # rows written two at a time
    assert json_format.render(result) == expected
    lexical = audit([str(pairs_file(ROWS[2:3], name="one.jsonl"))], build_config({"embeddings": False}))
    assert lexical.findings.height == 0  # empty lists are written as []
    assert json_format.render(lexical) == json.dumps(lexical.report(), indent=2, ensure_ascii=False) + "\n"
