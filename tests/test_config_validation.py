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


def _scan_with(tmp_path: Path, name: str, content: str | bytes):
    data = content.encode("utf-8") if isinstance(content, str) else content
    (tmp_path / name).write_bytes(data)
    return RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", "--format", "json", *LEXICAL])


class TestSettingsOfTheWrongShape:
    @pytest.mark.parametrize(
        ("name", "content", "needle"),
        [
            ("pyproject.toml", 'tool = "x"\n', "'tool' must be a table"),
            ("pyproject.toml", "[tool]\ncontrast-audit = 5\n", "'tool.contrast-audit' must be a table"),
            ("pyproject.toml", '[tool]\ncontrast-audit = ["a"]\n', "'tool.contrast-audit' must be a table"),
            ("contrast-audit.toml", 'tool = "contrast-audit"\n', "'tool' must be a table"),
            ("contrast-audit.toml", "[tool]\ncontrast-audit = 5\n", "'tool.contrast-audit' must be a table"),
            ("contrast-audit.toml", "against = 5\n", "setting 'against' must be a string or a list"),
            ("contrast-audit.toml", "[against]\nanchor = 5\n", "setting 'against.anchor' must be a string"),
            ("contrast-audit.toml", '[eval]\npaths = {a = "b"}\n', "setting 'eval.paths' must be"),
            ("contrast-audit.toml", "[[against]]\npaths = 'x'\n", "setting 'against' must be"),
        ],
    )
    def test_exit_2_naming_the_key(self, tmp_path: Path, name: str, content: str, needle: str) -> None:
        result = _scan_with(tmp_path, name, content)
        assert result.exit_code == 2, result.output
        assert f"{name}:" in result.stderr and needle in result.stderr, result.stderr

    @pytest.mark.parametrize("name", ["contrast-audit.toml", "pyproject.toml"])
    def test_a_byte_order_mark_is_not_toml(self, tmp_path: Path, name: str) -> None:
        body = "batch-size = 2\n" if name == "contrast-audit.toml" else "[tool.contrast-audit]\nbatch-size = 2\n"
        result = _scan_with(tmp_path, name, b"\xef\xbb\xbf" + body.encode())
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["config"]["plan"]["batch_size"] == 2


class TestSettingsKeysAreFlagNames:
    NOT_SETTINGS = {"top", "quiet", "config", "output", "report", "annotations", "max_annotations", "out"}
    NOT_SETTINGS |= {"per_anchor", "only_source", "only_cohort", "help"}

    @pytest.mark.parametrize("command", ["scan", "negatives", "manifest"])
    def test_every_flag_is_a_key(self, command: str) -> None:
        import typer.main

        click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
        flags = [
            next(o for o in p.opts if o.startswith("--"))[2:].replace("-", "_")
            for p in click_command.params
            if p.param_type_name == "option"
        ]
        keys = [f for f in flags if f not in self.NOT_SETTINGS]
        assert "pair" in keys and not [f for f in keys if f not in _FILE_KEYS]

    def test_pair_is_the_key_of_pair(self, tmp_path: Path) -> None:
        (tmp_path / "contrast-audit.toml").write_text("pair = true\n")
        settings, _ = load_config_file()
        assert build_config(settings).embedding.pair_evidence is True

    @pytest.mark.parametrize(
        ("key", "suggestion"),
        [("batchsize", "'batch-size'"), ("fail_on_", "'fail-on'"), ("pairs", "'pair'"), ("ancor", "'anchor'")],
    )
    def test_unknown_key_gets_a_did_you_mean(self, tmp_path: Path, key: str, suggestion: str) -> None:
        result = _scan_with(tmp_path, "contrast-audit.toml", f"{key} = 1\n")
        assert result.exit_code == 2, result.output
        assert f"unknown setting '{key}'" in result.stderr and f"did you mean {suggestion}" in result.stderr
        assert "max-memory" not in result.stderr  # no list of every key

    def test_unknown_key_without_a_near_miss(self, tmp_path: Path) -> None:
        result = _scan_with(tmp_path, "contrast-audit.toml", "zzzzzz = 1\n")
        assert result.exit_code == 2 and "did you mean" not in result.stderr and "init" in result.stderr


class TestSettingsWithFixedValues:
    """engine, weight, strategy, mask-severity, sampler, on-bad-row and precision take one of a few values: a
    bad one in a settings file names the file and key, for every command (the file is read before any work)."""

    @pytest.mark.parametrize(
        ("line", "key", "expected"),
        [
            ('engine = "fast"', "engine", "one of auto, memory, stream, ray, got 'fast'"),
            ('weight = "row"', "weight", "one of anchor, got 'row'"),
            ('strategy = "shuffle"', "strategy", "one of mask, group, multi-positive, cluster, got 'shuffle'"),
            ('mask-severity = "high"', "mask-severity", "one of certain, likely, suspect, got 'high'"),
            ('sampler = "sequential"', "sampler", "one of random, no-duplicates, got 'sequential'"),
            ('on-bad-row = "ignore"', "on-bad-row", "one of skip-empty, error, skip, got 'ignore'"),
            ('precision = "fp8"', "precision", "one of fp32, bf16, got 'fp8'"),
        ],
    )
    @pytest.mark.parametrize("command", ["scan", "manifest"])
    def test_bad_value_names_file_and_key(self, tmp_path: Path, command: str, line: str, key: str, expected: str):
        (tmp_path / "contrast-audit.toml").write_text(line + "\n")
        args = ["--out", "m.jsonl"] if command == "manifest" else []
        result = RUNNER.invoke(app, [command, "p.jsonl", "--quiet", *LEXICAL, *args])
        assert result.exit_code == 2, result.output
        assert f"contrast-audit.toml: setting '{key}' must be {expected}" in result.stderr, result.stderr
        assert f"set {key} to one of them" in result.stderr and not (tmp_path / "m.jsonl").exists()

    def test_the_same_values_hold_for_build_config(self) -> None:
        with pytest.raises(ConfigError, match=r"--engine must be one of auto, memory, stream, ray, got 'fast'"):
            build_config({"engine": "fast"})
        with pytest.raises(ConfigError, match=r"--weight must be one of anchor, got 'row'"):
            build_config({"weight": "row"})
        assert build_config({"engine": "stream", "strategy": "group", "weight": "anchor"}).engine == "stream"

    def test_the_choices_are_the_ones_their_owners_take(self) -> None:
        from contrast_audit.config import SETTING_CHOICES
        from contrast_audit.evidence import SEVERITIES
        from contrast_audit.manifest.format import HEADER_SCHEMA

        assert SETTING_CHOICES["mask_severity"] == SEVERITIES
        assert list(SETTING_CHOICES["strategy"]) == HEADER_SCHEMA["properties"]["strategy"]["enum"]
        assert set(SETTING_CHOICES) <= set(SETTING_RULES)


class TestSettingsThatWereSilentlyIgnored:
    """An empty name and a --ray-address without --engine ray used to be ignored without a word."""

    def test_an_empty_verifier_flag(self) -> None:
        result = RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", *LEXICAL, "--verifier", ""])
        assert result.exit_code == 2, result.output
        assert "--verifier is '', an empty name" in result.stderr
        assert "name a CrossEncoder directory or leave --verifier out" in result.stderr

    @pytest.mark.parametrize("value", ['""', '"  "'])
    def test_an_empty_verifier_key(self, tmp_path: Path, value: str) -> None:
        (tmp_path / "contrast-audit.toml").write_text(f"verifier = {value}\n")
        result = RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", *LEXICAL])
        assert result.exit_code == 2, result.output
        assert "contrast-audit.toml: setting 'verifier' is" in result.stderr
        assert "name a CrossEncoder directory or remove the verifier key" in result.stderr

    @pytest.mark.parametrize("flag", ["--model", "--device", "--since", "--eval-text", "--ray-address"])
    def test_other_empty_names(self, flag: str) -> None:
        result = RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", *LEXICAL, flag, ""])
        assert result.exit_code == 2, result.output
        assert f"{flag} is '', an empty name" in result.stderr and f"leave {flag} out" in result.stderr

    @pytest.mark.parametrize("engine", [[], ["--engine", "memory"], ["--engine", "stream"]])
    def test_ray_address_without_engine_ray(self, engine: list[str]) -> None:
        result = RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", *LEXICAL, *engine, "--ray-address", "head:6379"])
        assert result.exit_code == 2, result.output
        assert "--ray-address (the ray-address setting) is used by --engine ray only" in result.stderr
        assert "add --engine ray or drop it" in result.stderr

    def test_ray_address_key_without_engine_ray(self, tmp_path: Path) -> None:
        (tmp_path / "contrast-audit.toml").write_text('ray-address = "head:6379"\n')
        result = RUNNER.invoke(app, ["scan", "p.jsonl", "--quiet", *LEXICAL])
        assert result.exit_code == 2, result.output
        assert "is used by --engine ray only, and the engine is auto" in result.stderr
        assert "no ray-address key" in result.stderr

    def test_the_api_checks_them_too(self) -> None:
        from contrast_audit.config import AuditConfig, EmbeddingConfig

        with pytest.raises(ConfigError, match="verifier is ''"):
            EmbeddingConfig(verifier="")
        with pytest.raises(ConfigError, match="used by --engine ray only"):
            AuditConfig(ray_address="auto")
        assert AuditConfig(engine="ray", ray_address="auto").ray_address == "auto"
        assert build_config({"engine": "ray", "ray_address": "head:6379"}).ray_address == "head:6379"


@pytest.mark.parametrize("flag", ["--plan", "--baseline", "--cache-dir", "--index"])
def test_an_empty_path_flag_is_refused_by_name(flag, tmp_path):
    from typer.testing import CliRunner

    from contrast_audit.cli import app

    data = tmp_path / "d.jsonl"
    data.write_text('{"anchor": "a", "positive": "b"}\n', encoding="utf-8")
    done = CliRunner().invoke(app, ["scan", str(data), "--no-embeddings", flag, "", "-q"])
    assert done.exit_code == 2 and f"{flag} is '', an empty name" in done.output
