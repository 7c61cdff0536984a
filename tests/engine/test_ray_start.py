"""The Ray engine starts its own local instance, and refuses a cluster address nothing answers at, or one
that is not an address, before Ray starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_cases import case_rows, scan_report
from support import write_jsonl
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.engine import on_ray
from contrast_audit.errors import ConfigError

try:
    import ray
except ImportError:  # the address checks below need no Ray
    ray = None
needs_ray = pytest.mark.skipif(ray is None, reason="the Ray engine's tests need the ray extra (pip install '.[ray]')")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "pairs.jsonl", case_rows(120, seed=3))


@needs_ray
def test_a_local_instance_is_started_and_stopped(data: Path, tmp_path: Path) -> None:
    assert not ray.is_initialized()
    got = scan_report(data, tmp_path / "ray.json", "--engine", "ray")
    assert got["findings"]
    assert not ray.is_initialized()


@needs_ray
def test_an_address_nothing_answers_at_is_a_clear_error(data: Path) -> None:
    result = CliRunner().invoke(
        app, ["scan", str(data), "--no-embeddings", "--engine", "ray", "--ray-address", "127.0.0.1:1"]
    )
    assert result.exit_code == 2
    assert "cannot join Ray at 127.0.0.1:1: nothing answers there" in result.output
    assert "--ray-address" in result.output
    assert not ray.is_initialized()


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("127.0.0.1:²", "the port '²' is not a number (ports are 1 to 65535)"),  # isdigit(), then int(): exit 3
        ("127.0.0.1:99999", "the port 99999 is out of range (ports are 1 to 65535)"),  # was "Connection refused"
        ("127.0.0.1:" + "1" + "0" * 30, "is out of range (ports are 1 to 65535)"),  # OverflowError: exit 3
        ("127.0.0.1:0", "the port 0 is out of range"),
        ("127.0.0.1:-5", "the port '-5' is not a number"),  # Ray retried it for minutes
        ("127.0.0.1: 80", "the port ' 80' is not a number"),  # likewise
        ("127.0.0.1:", "the port is empty"),
        ("localhost", "is not host:port (it has no port)"),
        (":6379", "names no host"),
        ("ray://head:70000", "the port 70000 is out of range"),
    ],
)
def test_an_address_that_is_not_one_is_refused_before_ray_starts(data: Path, address: str, said: str) -> None:
    result = CliRunner().invoke(
        app, ["scan", str(data), "--no-embeddings", "--engine", "ray", "--ray-address", address, "-q"]
    )
    assert result.exit_code == 2, result.output
    assert f"--ray-address '{address[:39]}" in result.output and said in result.output
    assert "host:port of the cluster's head" in result.output
    assert ray is None or not ray.is_initialized()


def test_addresses_that_are_addresses_pass_the_check() -> None:
    assert on_ray.check_address(None) is None
    assert on_ray.check_address("auto") is None and on_ray.check_address("local") is None
    assert on_ray.check_address("10.0.0.5:6379") == ("10.0.0.5", 6379)
    assert on_ray.check_address("[::1]:6379") == ("::1", 6379)
    assert on_ray.check_address("head:65535") == ("head", 65535)
    assert on_ray.check_address("ray://head") is None and on_ray.check_address("ray://head:10001") is None
    with pytest.raises(ConfigError, match="out of range"):
        on_ray.check_address("head:65536")
