"""`contrast-audit init`: the starter settings file documents every key with a valid default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from contrast_audit.config import _FILE_KEYS, AuditConfig, build_config, load_config_file
from contrast_audit.errors import ConfigError
from contrast_audit.starter import SECTIONS, render, write

SETTING = re.compile(r"^# ([a-z][a-z0-9-]*) = (.+)$")


def settings_lines(text: str) -> dict[str, tuple[str, bool]]:
    """key → (value line, is an example rather than the default)."""
    lines = text.splitlines()
    out = {}
    for i, line in enumerate(lines):
        if match := SETTING.match(line):
            out[match.group(1)] = (line[2:], lines[i - 1].endswith("for example:"))
    return out


def test_every_settings_key_is_documented():
    documented = {key.replace("-", "_") for key in settings_lines(render())}
    assert documented == set(_FILE_KEYS)
    described = {key for _, keys in SECTIONS for key in keys}
    assert set(_FILE_KEYS) - described == set(), "describe each new settings key in contrast_audit/starter.py"


def test_starter_loads_as_is(tmp_path: Path):
    path = tmp_path / "contrast-audit.toml"
    path.write_text(render(), encoding="utf-8")
    assert load_config_file(path) == ({}, str(path))


def test_uncommented_defaults_are_the_defaults(tmp_path: Path):
    defaults = [line for line, example in settings_lines(render()).values() if not example]
    path = tmp_path / "contrast-audit.toml"
    path.write_text("\n".join(defaults) + "\n", encoding="utf-8")
    settings, _ = load_config_file(path)
    assert len(settings) == len(defaults)
    assert build_config(settings) == AuditConfig()


def test_each_example_is_a_valid_setting(tmp_path: Path):
    examples = [line for line, example in settings_lines(render()).values() if example]
    assert len(examples) >= 10
    path = tmp_path / "contrast-audit.toml"
    for line in examples:
        engine = 'engine = "ray"\n' if line.startswith("ray-address") else ""  # only with that engine
        path.write_text(engine + line + "\n", encoding="utf-8")
        settings, _ = load_config_file(path)
        assert len(settings) == 1 + bool(engine)
        build_config(settings)


def test_unknown_key_names_it_and_the_nearest_valid_ones(tmp_path: Path):
    path = tmp_path / "contrast-audit.toml"
    path.write_text("batch-size = 8\nbatchsize = 8\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config_file(path)
    message = info.value.render()
    assert "unknown setting 'batchsize'" in message and str(path) in message
    assert "did you mean 'batch-size'" in message and "fail-on" not in message


def test_write_refuses_to_overwrite(tmp_path: Path):
    target = write(tmp_path)
    assert target == tmp_path / "contrast-audit.toml"
    target.write_text("# mine\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="--force"):
        write(target)
    assert target.read_text(encoding="utf-8") == "# mine\n"
    write(target, force=True)
    assert target.read_text(encoding="utf-8") == render()


def test_init_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from contrast_audit.cli import app

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    first = runner.invoke(app, ["init"])
    assert first.exit_code == 0, first.output
    assert (tmp_path / "contrast-audit.toml").read_text(encoding="utf-8") == render()
    again = runner.invoke(app, ["init"])
    assert again.exit_code == 2
    other = runner.invoke(app, ["init", "--output", str(tmp_path / "ci" / "settings.toml")])
    assert other.exit_code == 0, other.output
    assert (tmp_path / "ci" / "settings.toml").is_file()
    forced = runner.invoke(app, ["init", "--force"])
    assert forced.exit_code == 0, forced.output
