"""Text normalisation: NFKC, full case folding, whitespace, edge punctuation."""

from __future__ import annotations

import sys
import unicodedata

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contrast_audit.config import NormaliseConfig
from contrast_audit.normalise import content_hash, normalise


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ﬁnd the ﬁle", "find the file"),  # NFKC ligature
        ("Ｆｕｌｌｗｉｄｔｈ", "fullwidth"),
        ("x²", "x2"),
        ("Straße", "strasse"),
        ("ΟΔΟΣ", "οδοσ"),  # final sigma folds to σ, as str.casefold does
        ("ὀδός", "ὀδόσ"),
        ("İstanbul", "i̇stanbul"),
        ("  many \t\n spaces\u00a0here  ", "many spaces here"),
        ('"Hello, world!"', "hello, world"),
        ("«Bonjour»", "bonjour"),
        ("¿Qué?", "qué"),
        ("(an aside)…", "an aside"),
        ("— dash —", "dash"),
        ("C++", "c++"),
        ("C#", "c#"),
        ("(C++)", "c++"),
        ("$5", "$5"),
        ("what is 2+2?", "what is 2+2"),
        ("'quoted' inside", "quoted' inside"),
    ],
)
def test_default_normal_form(text: str, expected: str) -> None:
    assert normalise([text]) == [expected]


def test_each_step_can_be_turned_off() -> None:
    text = ' "Ｆine  Straße" '
    assert normalise([text], NormaliseConfig(unicode_form=None)) == ["ｆine strasse"]
    assert normalise([text], NormaliseConfig(casefold=False)) == ["Fine Straße"]
    assert normalise([text], NormaliseConfig(collapse_whitespace=False)) == ["fine  strasse"]
    assert normalise([text], NormaliseConfig(strip_chars="")) == ['"fine strasse"']
    off = NormaliseConfig(unicode_form=None, casefold=False, collapse_whitespace=False, strip_chars="")
    assert normalise([text], off) == [text]


def test_nulls_and_series_input() -> None:
    assert normalise(pl.Series(["A", None, "B."])) == ["a", None, "b"]


def test_casefold_matches_python_for_every_assigned_code_point() -> None:
    chars = [chr(cp) for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) not in ("Cn", "Cs")]
    cfg = NormaliseConfig(unicode_form=None, strip_chars="", collapse_whitespace=False)
    got = normalise(chars, cfg)
    expected = [ch.casefold() for ch in chars]
    wrong = [(f"U+{ord(c):04X}", g, e) for c, g, e in zip(chars, got, expected, strict=True) if g != e]
    assert not wrong, wrong[:20]


def test_casefold_in_context_matches_python() -> None:
    words = ["ΣΊΣΥΦΟΣ", "Maße", "ǅemal", "ﬀ", "ΐ", "ẞ"]
    cfg = NormaliseConfig(unicode_form=None, strip_chars="", collapse_whitespace=False)
    assert normalise(words, cfg) == [w.casefold() for w in words]


def test_content_hash_is_stable_and_sensitive() -> None:
    frame = pl.DataFrame({"a": ["x", None], "n": [["p", "q"], []]})
    h = content_hash(frame, ["a", "n"])
    assert h == content_hash(frame.clone(), ["a", "n"])
    assert h != content_hash(frame.with_columns(pl.Series("a", ["x", "y"])), ["a", "n"])
    assert h != content_hash(frame, ["n", "a"])
    assert len(h) == 64


def test_a_leading_minus_is_kept():
    assert normalise(["-1 is the answer", "1 is the answer"]) == ["-1 is the answer", "1 is the answer"]


TRICKY = [
    "Plain ASCII text.",
    "  leading and trailing  ",
    "...!?",
    "\x1c\x1d separators \x1f",
    "tab\tand\nnewline",
    "Straße",
    "ﬁle",
    "zero\u200bwidth",
    "\u200b\u00ad",
    "Ｆｕｌｌ",
    "non\u00a0breaking",
    "",
    None,
]
CONFIGS = [
    NormaliseConfig(),
    NormaliseConfig(unicode_form=None, casefold=False),
    NormaliseConfig(unicode_form="NFC", collapse_whitespace=False, strip_chars=""),
    NormaliseConfig(strip_chars="ax."),  # an ASCII letter among the strip characters
]


@pytest.mark.parametrize("cfg", CONFIGS)
@given(st.lists(st.one_of(st.sampled_from(TRICKY), st.text(max_size=12)), max_size=40))
@settings(max_examples=60, deadline=None)
def test_the_ascii_shortcut_gives_the_full_normal_form(cfg, texts):
    from contrast_audit.normalise import normalise_expr, normalise_series, nothing_left

    series = pl.Series("t", texts, dtype=pl.String)
    full = pl.select(normalise_expr(pl.lit(series), cfg)).to_series()
    assert normalise_series(series, cfg).to_list() == full.to_list()
    assert nothing_left(series, cfg).to_list() == (full.str.strip_chars() == "").to_list()
