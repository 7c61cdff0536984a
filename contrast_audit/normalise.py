"""Text normalisation, text ids and content hashes, all as polars expressions.

The default normal form: Unicode NFKC, full case folding (``str.casefold`` semantics), invisible
format characters (zero-width spaces and joiners, soft hyphens, byte-order marks: Unicode category
Cf) removed and runs of whitespace collapsed to one space, and sentence punctuation, quotes and
brackets folded from both ends. Each step is configurable (``NormaliseConfig``). A text whose normal
form is empty is not text: loading treats it as an empty value.
"""

from __future__ import annotations

import hashlib
import re
import sys
from functools import lru_cache

import polars as pl

from contrast_audit.config import NormaliseConfig


@lru_cache(maxsize=1)
def _casefold_extras() -> tuple[list[str], list[str]]:
    """Characters whose full case folding differs from their lowercase form (``ß`` → ``ss``).

    polars lowercases with Unicode's simple mapping; replacing these afterwards yields exactly
    Python's ``str.casefold`` for every code point.
    """
    sources: list[str] = []
    targets: list[str] = []
    for cp in range(sys.maxunicode + 1):
        ch = chr(cp)
        lowered = ch.lower()
        if len(lowered) == 1 and lowered.casefold() != lowered and lowered not in sources:
            sources.append(lowered)
            targets.append(lowered.casefold())
    return sources, targets


def normalise_expr(expr: pl.Expr, cfg: NormaliseConfig) -> pl.Expr:
    """The normal form of a string expression under ``cfg``."""
    if cfg.unicode_form:
        expr = expr.str.normalize(cfg.unicode_form)
    if cfg.casefold:
        sources, targets = _casefold_extras()
        expr = expr.str.to_lowercase().str.replace_many(sources, targets)
    if cfg.collapse_whitespace:
        expr = expr.str.replace_all(r"\p{Cf}+", "").str.replace_all(r"\s+", " ").str.strip_chars()
    if cfg.strip_chars:
        chars = re.escape(cfg.strip_chars)
        expr = expr.str.replace_all(rf"^[\s{chars}]+|[\s{chars}]+$", "")
    return expr


def _ascii_expr(expr: pl.Expr, cfg: NormaliseConfig) -> pl.Expr:
    """:func:`normalise_expr` for texts of ASCII characters only, without the steps that cannot change
    them: every Unicode normal form leaves ASCII as it is, no ASCII letter folds to anything but its
    lowercase, and no ASCII character is an invisible format character (category Cf)."""
    if cfg.casefold:
        expr = expr.str.to_lowercase()
    if cfg.collapse_whitespace:
        expr = expr.str.replace_all(r"\s+", " ").str.strip_chars()
    if cfg.strip_chars:
        chars = re.escape(cfg.strip_chars)
        expr = expr.str.replace_all(rf"^[\s{chars}]+|[\s{chars}]+$", "")
    return expr


def normalise_series(texts: pl.Series, cfg: NormaliseConfig) -> pl.Series:
    """The normal form of every text of ``texts`` (nulls stay null), as :func:`normalise_expr` gives
    it; the texts that are pure ASCII, most of them in most data, take the shorter way."""
    texts = texts.cast(pl.String)
    out = pl.select(_ascii_expr(pl.lit(texts), cfg)).to_series().alias(texts.name)
    wide = pl.select(pl.lit(texts).str.contains(r"[^\x00-\x7F]").fill_null(False)).to_series().arg_true()
    if wide.len():
        full = pl.select(normalise_expr(pl.lit(texts.gather(wide)), cfg)).to_series()
        out = out.scatter(wide, full)
    return out


def nothing_left(texts: pl.Series, cfg: NormaliseConfig) -> pl.Series:
    """True where a text's normal form is empty or blank; null where the text is null. Texts with
    an ASCII letter or digit keep it through every step (unless the strip characters include one), so
    only the others are normalised."""
    texts = texts.cast(pl.String)
    if any(ch.isascii() and ch.isalnum() for ch in cfg.strip_chars):
        return pl.select(normalise_expr(pl.lit(texts), cfg).str.strip_chars() == "").to_series()
    out = pl.select(pl.when(pl.lit(texts).is_null()).then(None).otherwise(pl.lit(False))).to_series()
    maybe = pl.select(pl.lit(texts).str.contains("[A-Za-z0-9]").not_().fill_null(False)).to_series().arg_true()
    if maybe.len():
        empty = normalise_series(texts.gather(maybe), cfg).str.strip_chars() == ""
        out = out.scatter(maybe, empty)
    return out


def normalise(texts: list[str] | pl.Series, cfg: NormaliseConfig | None = None) -> list[str]:
    """Normalise a list of strings (convenience wrapper over :func:`normalise_expr`)."""
    series = pl.Series("t", texts, dtype=pl.String)
    out = pl.select(normalise_expr(pl.lit(series), cfg or NormaliseConfig())).to_series()
    return out.to_list()


def content_hash(frame: pl.DataFrame, columns: list[str]) -> str:
    """A SHA-256 over the given columns, row by row, independent of polars' hashing seeds."""
    digest = hashlib.sha256()
    for name in columns:
        col = frame.get_column(name)
        if col.dtype == pl.List:
            col = col.list.join("\x1f")
        encoded = col.fill_null("\x00").cast(pl.String)
        digest.update(name.encode())
        digest.update("\x1e".join(encoded.to_list()).encode("utf-8"))
    return digest.hexdigest()
