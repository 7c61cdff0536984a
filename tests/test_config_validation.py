"""Settings of the wrong type or out of range exit 2 naming the file, the key, the type and range;
the same ranges hold for flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.config import _FILE_KEYS, SETTING_RULES, build_config, check_setting, load_config_file
from contrast_audit.errors import ConfigError

RUNNER = CliRunner()
LEXICAL = ("--no-embeddings", "--no-minhash")


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text(
        "".join(json.dumps({"anchor": f"q{i}", "positive": f"d{i}"}) + "\n" for i in range(4))
    )


def test_every_setting_has_a_rule() -> None:
    assert set(_FILE_KEYS) <= set(SETTING_RULES)


@pytest.mark.parametrize(
    "line, key, expected",
    [
        ('batch-size = "abc"', "batch-size", "an integer in [1, 2^31 - 1]"),
        ("batch-size = 8.5", "batch-size", "an integer"),
        ("batch-size = true", "batch-size", "an integer"),
        ("batch-size = 0", "batch-size", "an integer in [1,"),
        ("strip_chars = 5", "strip_chars", "a string"),
        ("seed = 18446744073709551615", "seed", "[0, 2^63 - 1]"),
        ("seed = -1", "seed", "[0, 2^63 - 1]"),
        ('casefold = "yes"', "casefold", "true or false"),
        ("positive-threshold = 1.5", "positive-threshold", "a number in [-1, 1]"),
        ("positive-threshold = nan", "positive-threshold", "a number"),
        ("alignment-match = 1", "alignment-match", "[0, 1)"),
        ("directions = [1, 2]", "directions", "a string or a list of strings"),
        ("fail-on = 3", "fail-on", "a string or a list of strings"),
        ("epochs = 1e3", "epochs", "an integer"),
    ],
)
def test_bad_file_setting_exits_2_with_file_key_and_range(tmp_path: Path, line: str, key: str, expected: str) -> None:
    (tmp_path / "contrast-audit.toml").write_text(line + "\n")
    result = RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", *LEXICAL])
    assert result.exit_code == 2, result.output
    assert "internal error" not in result.output
    assert f"contrast-audit.toml: setting '{key}' must be" in result.stderr
    assert expected in result.stderr


def test_settings_in_pyproject_are_checked(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.contrast-audit]\nbatch-size = "abc"\n')
    with pytest.raises(ConfigError, match=r"pyproject.toml: setting 'batch-size' must be an integer"):
        load_config_file(None, tmp_path)


@pytest.mark.parametrize(
    "flags, needle",
    [
        (["--seed", str(2**64)], "--seed must be an integer in [0, 2^63 - 1]"),
        (["--seed", "-5"], "--seed must be"),
        (["--batch-size", str(2**40)], "--batch-size must be"),
        (["--epochs", "0"], "--epochs must be"),
        (["--max-hops", "-1"], "--max-hops must be"),
        (["--world-size", "0"], "--world-size must be"),
        (["--ngram", "0"], "--ngram must be"),
        (["--num-perm", "0"], "--num-perm must be"),
        (["--minhash-threshold", "nan"], "--minhash-threshold must be"),
        (["--positive-threshold", "inf"], "--positive-threshold must be"),
        (["--embed-batch-size", "0"], "--embed-batch-size must be"),
    ],
)
def test_flags_have_the_same_ranges(flags: list[str], needle: str) -> None:
    result = RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", *LEXICAL, *flags])
    assert result.exit_code == 2, result.output
    assert needle in result.stderr, result.stderr


def test_the_largest_seed_works() -> None:
    result = RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", *LEXICAL, "--seed", str(2**63 - 1)])
    assert result.exit_code == 0, result.output


def test_check_setting_accepts_good_values() -> None:
    assert check_setting("alignment", 1, "x") == 1.0
    assert check_setting("negatives", ["a", "b"], "x") == ["a", "b"]
    assert check_setting("unknown-to-the-table", object, "x") is object
    cfg = build_config({"batch_size": 8, "seed": 0, "positive_threshold": 1})
    assert cfg.plan.batch_size == 8 and cfg.embedding.positive_threshold == 1.0
