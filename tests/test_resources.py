"""--max-memory: sizes, the machine's available memory, and the refusal before the costly stages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support import LEXICAL, RUNNER, in_tmp, row_json

from contrast_audit import resources
from contrast_audit.api import audit
from contrast_audit.cli import app
from contrast_audit.config import AuditConfig, build_config
from contrast_audit.errors import ConfigError, InputError


@pytest.mark.parametrize(
    ("text", "expected"),
    [("16G", 16 << 30), ("500M", 500 << 20), ("500MiB", 500 << 20), ("2.5g", int(2.5 * (1 << 30))), ("1024", 1024)],
)
def test_sizes_are_parsed_in_powers_of_1024(text: str, expected: int) -> None:
    assert resources.parse_size(text) == expected


def test_off_is_no_limit_and_auto_is_what_the_machine_has() -> None:
    assert resources.parse_size("off") is None
    available = resources.available_memory()
    assert available is not None and available > 0  # Linux: /proc/meminfo, lowered by a cgroup limit
    assert resources.parse_size("auto") == pytest.approx(available, rel=0.5)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_cgroup_limit_lowers_what_is_available_and_its_page_cache_does_not_count(tmp_path: Path) -> None:
    gib = 1 << 30
    meminfo = {"proc/meminfo": "MemTotal: 33554432 kB\nMemAvailable: 20971520 kB\n"}  # 20 GiB
    assert resources.available_memory(_tree(tmp_path / "plain", meminfo)) == 20 * gib
    v2 = {
        **meminfo,
        "sys/fs/cgroup/memory.max": f"{8 * gib}\n",
        "sys/fs/cgroup/memory.current": f"{7 * gib}\n",
        "sys/fs/cgroup/memory.stat": f"anon {gib}\ninactive_file {5 * gib}\nactive_file {gib}\n",
    }
    assert resources.available_memory(_tree(tmp_path / "v2", v2)) == 6 * gib  # 8 - (7 - 5)
    v1 = {
        **meminfo,
        "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",  # v1's "no limit"
        "sys/fs/cgroup/memory/memory.usage_in_bytes": f"{3 * gib}\n",
    }
    assert resources.available_memory(_tree(tmp_path / "v1", v1)) == 20 * gib
    assert resources.available_memory(tmp_path / "nothing") is None


@pytest.mark.parametrize("text", ["lots", "-1G", "0", "16X", ""])
def test_a_bad_size_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="--max-memory must be auto, off or a size"):
        resources.parse_size(text)
    with pytest.raises(ConfigError):
        AuditConfig(max_memory=text)


def test_estimates_grow_with_texts_and_vectors() -> None:
    lexical = resources.audit_estimate(1_000_000, 50_000_000, 0)
    assert resources.audit_estimate(2_000_000, 50_000_000, 0) > lexical
    assert resources.audit_estimate(1_000_000, 50_000_000, 2) > resources.audit_estimate(1_000_000, 50_000_000, 1)
    # The measured 1M-row lexical scan (2.97M texts, 2.7 GB peak) is within the estimate, not far under it.
    assert 2.7e9 <= resources.audit_estimate(2_970_528, 120_000_000, 0) <= 2 * 2.7e9


def _data(tmp_path: Path, n: int = 40) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(row_json(i) + "\n" for i in range(n)))
    return path


def test_the_audit_refuses_before_reading_when_the_input_cannot_fit(tmp_path: Path) -> None:
    data = _data(tmp_path)
    cfg = build_config({"embeddings": False, "max_memory": "1M", "engine": "memory"})
    with pytest.raises(InputError, match=r"pairs.jsonl: reading .* of input needs about .* --max-memory") as err:
        audit([str(data)], cfg)
    assert "--max-memory off" in err.value.fix and "below what a scan needs to start" in err.value.fix
    # Just above what a scan needs to start: the refusal says how the data would fit.
    near = {"max_memory": "256.01M", "engine": "memory"}
    with pytest.raises(InputError) as err:
        audit([str(data)], build_config({**near, "embeddings": False}))
    assert "parts of at most" in err.value.fix and "or stream it (--engine stream)" in err.value.fix
    with pytest.raises(InputError) as err:
        audit([str(data)], build_config(near))
    assert "or stream it (--engine stream)" in err.value.fix  # embedding evidence streams too
    with pytest.raises(InputError) as err:  # pair evidence does not
        audit([str(data)], build_config({**near, "pair_evidence": True}))
    assert "or stream it without embedding evidence (--no-embeddings)" in err.value.fix


def test_auto_streams_what_does_not_fit_and_refuses_below_the_streaming_floor(tmp_path: Path) -> None:
    data = _data(tmp_path)
    with pytest.raises(InputError, match=r"pairs.jsonl: streaming 40 rows needs about .* --max-memory"):
        audit([str(data)], build_config({"embeddings": False, "max_memory": "1M"}))


def test_the_audit_refuses_after_normalising_when_the_texts_cannot_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _data(tmp_path)
    monkeypatch.setattr(resources, "BYTES_PER_TEXT", 1 << 30)  # as if each text needed a GiB
    stages: list[str] = []
    monkeypatch.setattr("contrast_audit.api.default_detectors", lambda *a: stages.append("evidence") or [])
    with pytest.raises(InputError, match=r"auditing 40 rows \(80 distinct texts\) needs about") as err:
        audit([str(data)], build_config({"embeddings": False, "max_memory": "64G", "engine": "memory"}))
    assert stages == []  # refused before any evidence was prepared
    assert "parts of at most 31 rows (split -l ROWS FILE part-)" in err.value.fix  # 64 of 80 GiB: 31 of 40
    assert "or stream it (--engine stream)" in err.value.fix


def test_auto_streams_what_does_not_fit_once_normalised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contrast_audit.engine.stream import StreamCorpus

    data = _data(tmp_path)
    monkeypatch.setattr(resources, "audit_estimate", lambda *a, **k: 1 << 50)  # the in-memory engine's need
    streamed = audit([str(data)], build_config({"embeddings": False, "max_memory": "64G"}))
    assert isinstance(streamed.corpus, StreamCorpus) and streamed.corpus.n_rows == 40


@pytest.mark.usefixtures(in_tmp.__name__)
def test_cli_exit_2_names_the_flag_and_off_runs_anyway(tmp_path: Path) -> None:
    _data(tmp_path)
    refused = RUNNER.invoke(app, ["scan", "pairs.jsonl", *LEXICAL, "--max-memory", "1M", "-q"])
    assert refused.exit_code == 2
    assert "pairs.jsonl: streaming 40 rows" in refused.output and "--max-memory off" in refused.output
    assert RUNNER.invoke(app, ["scan", "pairs.jsonl", *LEXICAL, "--max-memory", "off", "-q"]).exit_code == 0
    bad = RUNNER.invoke(app, ["manifest", "pairs.jsonl", *LEXICAL, "--max-memory", "lots", "--out", "m.jsonl"])
    assert bad.exit_code == 2 and "--max-memory must be" in bad.output


@pytest.mark.usefixtures(in_tmp.__name__)
def test_the_settings_file_key(tmp_path: Path) -> None:
    _data(tmp_path)
    (tmp_path / "contrast-audit.toml").write_text('max-memory = "1M"\n')
    assert RUNNER.invoke(app, ["scan", "pairs.jsonl", *LEXICAL, "-q"]).exit_code == 2
    (tmp_path / "contrast-audit.toml").write_text("max-memory = 5\n")
    wrong_type = RUNNER.invoke(app, ["scan", "pairs.jsonl", *LEXICAL, "-q"])
    assert wrong_type.exit_code == 2 and "max-memory" in wrong_type.output


def test_usable_cpus_is_at_least_one() -> None:
    assert resources.usable_cpus() >= 1


def test_standard_input_that_does_not_fit_is_refused_not_read_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Auto streams a file that turns out too large after normalising by reading it again; standard input
    cannot be read again, so it keeps the in-memory engine's refusal."""
    data = _data(tmp_path)
    monkeypatch.setattr(resources, "BYTES_PER_TEXT", 1 << 30)
    result = RUNNER.invoke(app, ["scan", "-", *LEXICAL, "--max-memory", "64G", "-q"], input=data.read_text())
    assert result.exit_code == 2
    assert "auditing 40 rows (80 distinct texts) needs about" in result.output
    assert "or stream it (--engine stream)" in result.output


@pytest.mark.parametrize("command", ["negatives", "manifest"])
def test_commands_that_need_every_row_do_not_offer_to_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """``negatives`` and ``manifest`` refuse ``--engine stream``: their refusal of an input too large for
    memory offers parts, not streaming."""
    data = _data(tmp_path)
    monkeypatch.setattr(resources, "BYTES_PER_TEXT", 1 << 30)
    out = ["--out", str(tmp_path / "m.jsonl")] if command == "manifest" else []
    result = RUNNER.invoke(app, [command, str(data), "--batch-size", "8", "--max-memory", "64G", *out])
    assert result.exit_code == 2, result.output
    assert "needs about" in result.output and "parts of at most" in result.output
    assert "--engine stream" not in result.output and "stream it" not in result.output
    assert not (tmp_path / "m.jsonl").exists()


def test_detectors_of_the_caller_s_own_run_in_memory(tmp_path: Path) -> None:
    from contrast_audit.evidence import ExactDetector

    data = _data(tmp_path)
    with pytest.raises(ConfigError, match="runs on the in-memory engine, not --engine stream"):
        audit([str(data)], build_config({"embeddings": False, "engine": "stream"}), detectors=[ExactDetector()])
    small = build_config({"embeddings": False, "max_memory": "1M"})  # auto would stream this
    with pytest.raises(InputError, match="reading .* of input needs about"):
        audit([str(data)], small, detectors=[ExactDetector()])


HUGE = "1" + "0" * 399  # 400 digits: float() made it inf, int() of that raised OverflowError (exit 3)


@pytest.mark.parametrize("text", [HUGE, HUGE + "T", "1025T", "99999999999999999999999G"])
def test_an_absurd_size_says_what_the_largest_accepted_is(text: str) -> None:
    with pytest.raises(ConfigError, match=r"more than the largest size accepted \(1024T, 1 PiB\)") as err:
        resources.parse_size(text)
    assert "--max-memory off for no limit" in err.value.fix
    with pytest.raises(ConfigError):
        AuditConfig(max_memory=text)
    assert resources.parse_size("1024T") == 1 << 50


@pytest.mark.usefixtures(in_tmp.__name__)
def test_an_absurd_size_is_exit_2_from_the_flag_and_the_settings_file(tmp_path: Path) -> None:
    _data(tmp_path)
    flag = RUNNER.invoke(app, ["scan", "pairs.jsonl", *LEXICAL, "--max-memory", HUGE, "-q"])
    assert flag.exit_code == 2 and "more than the largest size accepted" in flag.output
    (tmp_path / "contrast-audit.toml").write_text(f'max-memory = "{HUGE}"\n')
    setting = RUNNER.invoke(app, ["scan", "pairs.jsonl", *LEXICAL, "-q"])
    assert setting.exit_code == 2 and "more than the largest size accepted" in setting.output


def test_a_size_of_less_than_a_byte_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be auto, off or a size"):
        resources.parse_size("0.4")
    assert resources.parse_size("0.5K") == 512


def test_a_limit_too_small_for_one_row_says_how_much_to_raise_it(tmp_path: Path) -> None:
    """Just above what a scan needs to start: the part that would fit was "at most 0 rows" (streamed) or
    "0 KiB" (in memory), and needed and available both printed as 256 MiB."""
    data = _data(tmp_path)
    for engine, what in (("stream", "streaming 40 rows"), ("memory", "reading 2 KiB of input")):
        cfg = build_config({"embeddings": False, "max_memory": "256.0001M", "engine": engine})
        with pytest.raises(InputError) as err:
            audit([str(data)], cfg)
        message, fix = err.value.message, err.value.fix
        assert what in message and "at most 0" not in fix and "parts of" not in fix
        assert "the limit is too small for even one row of it: raise --max-memory by at least" in fix
        needed, available = re.search(r"needs about (.+) of memory and (.+) is available", message).groups()
        assert needed != available, message
    assert "needs about 256.02 MiB of memory and 256.00 MiB is available" in message  # not 256 and 256
    assert "raise --max-memory by at least 18 KiB (to 256.02 MiB)" in fix


def test_the_streamed_part_that_fits_is_counted_beside_a_run() -> None:
    from contrast_audit.engine.stream import MIN_RUN_ROWS, Shape, Sizes

    shape = Shape(rows=1000, width=2, texts=2000, text_bytes=100_000)
    floor = shape.run_bytes_per_row() * MIN_RUN_ROWS  # a run's need: splitting the input does not shrink it
    per_row = shape.global_bytes() // shape.rows
    with pytest.raises(InputError, match="parts of at most 100 rows"):
        Sizes(limit=resources.BASE_BYTES + floor + 100 * per_row).judging(shape, "pairs.jsonl")
    with pytest.raises(InputError, match="too small for even one row of it") as err:
        Sizes(limit=resources.BASE_BYTES + floor - 1).judging(shape, "pairs.jsonl")
    assert "parts of" not in err.value.fix


def test_sizes_print_apart() -> None:
    mib = 1 << 20
    assert resources.human(500) == "500 bytes" and resources.human(1) == "1 byte"
    assert resources.human_up(39 * mib + 5) == "40 MiB" and resources.human_up(39 * mib) == "39 MiB"
    assert resources.decimals_apart(300 * mib, 256 * mib) == 0
    assert resources.decimals_apart(int(256.6 * mib), int(256.9 * mib)) == 1
    assert resources.decimals_apart(1 << 30, (1 << 30) - 1) is None  # printed in bytes
