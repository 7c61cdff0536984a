"""Property-based tests (hypothesis): arbitrary bytes and values given to the loaders, normalisation,
plan files, settings files and ``--fail-on`` give a result or a user error (exit 2) with a location,
never another exception (exit 3).

The default run is short (``max_examples`` 40 per property). The documented fuzzing run
(docs/reliability.md) uses the ``fuzz`` profile::

    HYPOTHESIS_PROFILE=fuzz pytest tests/test_fuzz.py
"""

from __future__ import annotations

import json
import os
import string
import tempfile
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from contrast_audit.cli import app
from contrast_audit.config import ColumnMapping, NormaliseConfig, build_config, load_config_file
from contrast_audit.corpus import build_corpus
from contrast_audit.errors import AuditError, ConfigError, InputError
from contrast_audit.gate import parse
from contrast_audit.io import load_rows
from contrast_audit.normalise import normalise
from contrast_audit.plan import read_plan_file

settings.register_profile(
    "default", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile("fuzz", max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

RUNNER = CliRunner()
METRICS = ["certain", "findings", "fn-rate", "likely", "mislabelled", "rows-affected", "suspect", "exact"]

# JSON values, texts included, with the awkward parts of Unicode: lone surrogates, zero-width and
# control characters, line and paragraph separators.
awkward = st.sampled_from(["\ud800", "\udfff", "\u200b", "\u2028", "\x00", "\r", "\n", "\ufeff", "…", "!!!", " "])
texts = st.lists(st.one_of(st.text(max_size=8), awkward), max_size=4).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
records = st.dictionaries(
    st.sampled_from(["anchor", "positive", "negative", "query", "pos", "neg", "id", "source", "group", "x"]),
    json_values,
    max_size=6,
)


def _toml(value: object) -> str:
    """A TOML literal (floats as TOML spells inf and nan)."""
    if isinstance(value, float):
        return {"inf": "inf", "-inf": "-inf", "nan": "nan"}.get(repr(value), repr(value))
    return json.dumps(value).lower() if isinstance(value, bool) else json.dumps(value)


def _tmp() -> Path:
    return Path(tempfile.mkdtemp(prefix="fuzz-"))


def _load(path: Path, on_bad_row: str) -> None:
    try:
        loaded = load_rows([str(path)], ColumnMapping(), on_bad_row)
    except InputError as exc:
        assert str(exc) and exc.path, exc
        return
    rows = loaded.rows
    assert rows.height > 0
    for column in ("anchor", "positive"):
        values = rows.get_column(column)
        assert values.null_count() == 0
        # Every text survives UTF-8 encoding (no lone surrogates reach the reports).
        for value in values.to_list():
            (value if isinstance(value, str) else "\x1f".join(value)).encode("utf-8")
    build_corpus(rows, NormaliseConfig())  # the next stage accepts what loading returns


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".tsv", ".parquet"])
@given(data=st.binary(max_size=300), skip=st.booleans())
def test_arbitrary_bytes_load_or_fail_with_a_location(suffix: str, data: bytes, skip: bool) -> None:
    path = _tmp() / f"pairs{suffix}"
    path.write_bytes(data)
    _load(path, "skip" if skip else "error")


@given(rows=st.lists(records, min_size=1, max_size=6), skip=st.booleans(), ending=st.sampled_from(["\n", "\r\n", "\r"]))
def test_arbitrary_json_records(rows: list[dict], skip: bool, ending: str) -> None:
    path = _tmp() / "pairs.jsonl"
    path.write_text(ending.join(json.dumps(r) for r in rows) + ending, encoding="utf-8")
    _load(path, "skip" if skip else "error")


@given(
    cells=st.lists(
        st.lists(st.one_of(texts, st.text(string.printable, max_size=6)), min_size=2, max_size=3),
        min_size=1,
        max_size=5,
    ),
    sep=st.sampled_from([",", "\t"]),
)
def test_arbitrary_delimited_cells(cells: list[list[str]], sep: str) -> None:
    clean = [[c.replace("\ud800", "").replace("\udfff", "") for c in row] for row in cells]
    path = _tmp() / ("pairs.csv" if sep == "," else "pairs.tsv")
    lines = [sep.join(["anchor", "positive", "negative"][: len(clean[0])])] + [sep.join(r) for r in clean]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _load(path, "error")


@given(rows=st.lists(st.tuples(texts, texts), min_size=1, max_size=5))
def test_arbitrary_parquet_values(rows: list[tuple[str, str]]) -> None:
    clean = [tuple(t.replace("\ud800", "").replace("\udfff", "") for t in r) for r in rows]
    path = _tmp() / "pairs.parquet"
    pl.DataFrame({"anchor": [a for a, _ in clean], "positive": [p for _, p in clean]}).write_parquet(path)
    _load(path, "error")


@given(values=st.lists(st.text(max_size=20), max_size=10), casefold=st.booleans(), strip=st.text(max_size=5))
def test_normalisation_returns_one_string_per_text(values: list[str], casefold: bool, strip: str) -> None:
    cfg = NormaliseConfig(casefold=casefold, strip_chars=strip)
    out = normalise(values, cfg)
    assert len(out) == len(values) and all(isinstance(v, str) for v in out)
    assert all(not v.startswith(" ") and not v.endswith(" ") for v in out)


@given(
    data=st.one_of(
        st.binary(max_size=200), st.lists(json_values, max_size=4).map(lambda v: "\n".join(map(json.dumps, v)).encode())
    )
)
def test_arbitrary_plan_files(data: bytes) -> None:
    path = _tmp() / "plan.jsonl"
    path.write_bytes(data)
    try:
        plan = read_plan_file(str(path), pl.Series(["0", "1", "2"]))
    except InputError as exc:
        assert exc.path == str(path)
        return
    assert plan.rows.min(initial=0) >= 0 and plan.rows.max(initial=0) <= 2


@given(
    text=st.one_of(
        st.text(max_size=80),
        st.dictionaries(
            st.sampled_from(
                [
                    "batch-size",
                    "seed",
                    "strip_chars",
                    "positive-threshold",
                    "directions",
                    "fail-on",
                    "casefold",
                    "epochs",
                    "sampler",
                    "bogus",
                ]
            ),
            st.one_of(
                st.integers(), st.floats(), st.booleans(), st.text(max_size=5), st.lists(st.integers(), max_size=2)
            ),
            max_size=4,
        ).map(lambda d: "\n".join(f"{k} = {_toml(v)}" for k, v in d.items())),
    )
)
def test_arbitrary_settings_files(text: str) -> None:
    path = _tmp() / "contrast-audit.toml"
    path.write_bytes(text.encode("utf-8", "replace"))
    try:
        settings_, _ = load_config_file(path)
        build_config(settings_)
        parse([v] if isinstance(v := settings_.get("fail_on", []), str) else list(v), METRICS)
    except ConfigError as exc:
        assert str(exc)


@given(
    expr=st.one_of(
        st.text(max_size=30), st.from_regex(r"\A[a-z_-]{1,12}\s*(>|>=|<|<=|==|!=|=>)\s*[-+.0-9eEinfa]{0,8}\Z")
    )
)
def test_arbitrary_fail_on(expr: str) -> None:
    try:
        conditions = parse([expr], METRICS)
    except ConfigError as exc:
        assert "--fail-on" in str(exc)
        return
    assert conditions and all(c.metric in METRICS for c in conditions)


@settings(max_examples=int(os.environ.get("FUZZ_CLI_EXAMPLES", "15")))
@given(data=st.binary(max_size=200), suffix=st.sampled_from([".jsonl", ".csv", ".json"]))
def test_the_cli_exits_0_or_2(data: bytes, suffix: str) -> None:
    directory = _tmp()
    (directory / f"p{suffix}").write_bytes(data)
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        result = RUNNER.invoke(app, ["scan", f"p{suffix}", "-q", "--no-embeddings", "--format", "json"])
    finally:
        os.chdir(cwd)
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 0:
        json.loads(result.stdout)


def test_user_errors_are_audit_errors() -> None:
    assert issubclass(InputError, AuditError) and issubclass(ConfigError, AuditError)
