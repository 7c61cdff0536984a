"""Batch manifests: the contract between the auditor and a trainer (docs/manifest.md).

JSON Lines. The first line is a header (schema version, data fingerprint, column mapping, plan, loss and
detector settings, strategy, counts); then one line per global batch, in training order:
``{"batch": g, "epoch": e, "rows": [id, ...], "ranks": [n_0, ...], "weights": [w, ...], "mask": {direction:
[entry, ...]}, "positives": {direction: [entry, ...]}}``. An entry is ``[a, c]`` or ``[a, c, role]``: positions
in the global batch of the anchor row and of the candidate row, and the candidate's role when it is not the
direction's default (``positive`` for ``*_to_doc``; ``anchor`` for ``*_to_query``). ``weights`` (only in a
manifest built with a weight, whose header records ``weight``): each row's weight in the loss, aligned with
``rows``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from contrast_audit.config import DIRECTIONS, STRATEGIES, WEIGHTS
from contrast_audit.errors import InputError

KIND = "contrast-audit-manifest"
SCHEMA_VERSION = "1"

Entry = tuple[int, int, str]

_INT64 = 2**63 - 1
# The largest row weight a manifest may hold. ``--weight anchor`` writes weights whose mean over the rows
# is 1; a weight of 1e6 already makes one row's loss term count as a million average rows. Far larger ones
# (1e300) are finite as JSON but not as the float32 the trainer multiplies the loss by, and the run would
# fail a step later with an infinite loss instead of at the line that holds them.
MAX_WEIGHT = 1e6
# ``negative_k``: the k-th hard negative of the candidate's row, k from 1 (ASCII digits, at most int64).
_NEGATIVE_ROLE = re.compile(r"negative_([0-9]{1,19})")
_NAME = {"type": ["string", "null"]}
_FILE_MAPPING = {
    "type": "object",
    "properties": {
        **dict.fromkeys(("file", "layout", "anchor", "positive", "id", "source", "cohort", "group"), _NAME),
        "negatives": {"type": "array", "items": {"type": "string"}},
    },
}
# The header line, as JSON Schema (draft 2020-12): what a reader relies on is required and typed, with
# the ranges the settings allow. A manifest is input: a tampered one is refused with the key and line.
HEADER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "contrast-audit manifest header, schema version 1",
    "type": "object",
    "required": ["kind", "schema_version", "strategy", "fingerprint", "plan", "loss"],
    "properties": {
        "kind": {"const": KIND},
        "schema_version": {"const": SCHEMA_VERSION},
        "strategy": {"enum": list(STRATEGIES)},
        "mask_severity": {"enum": ["certain", "likely", "suspect", None]},
        "fingerprint": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
        "rows": {"type": ["integer", "null"], "minimum": 0, "maximum": _INT64},
        "files": {"type": "array", "items": {"type": "string"}},
        "mapping": {
            "anyOf": [
                {"type": "array", "items": _FILE_MAPPING},
                {
                    "type": "object",
                    "properties": {"files": {"type": "array", "items": _FILE_MAPPING}},
                },
            ]
        },
        "plan": {
            "type": "object",
            "required": ["epochs", "world_size"],
            "properties": {
                # Informational (the trainer replays the batches): typed when present, null allowed.
                "source": {"type": ["string", "null"]},
                "sampler": {"type": ["string", "null"]},
                "batch_size": {"type": ["integer", "null"], "minimum": 1, "maximum": 2**31 - 1},
                "seed": {"type": ["integer", "null"], "minimum": 0, "maximum": _INT64},
                "drop_last": {"type": ["boolean", "null"]},
                # What readers act on: required and bounded.
                "epochs": {"type": "integer", "minimum": 1, "maximum": 100_000},
                "world_size": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
            },
        },
        "loss": {
            "type": "object",
            "required": ["directions"],
            "properties": {
                "directions": {
                    "type": "array",
                    "minItems": 1,
                    "uniqueItems": True,
                    "items": {"enum": list(DIRECTIONS)},
                    "contains": {"const": "query_to_doc"},
                }
            },
        },
        "weight": {
            "type": "object",
            "required": ["by"],
            "properties": {
                "by": {"enum": list(WEIGHTS)},
                "units": {"type": "integer", "minimum": 1, "maximum": _INT64},
                "rule": {"type": "string"},
            },
        },
        "config": {"type": "object"},
        "counts": {"type": "object"},
        "detectors": {"type": "object"},
        "tool": {"type": "object"},
    },
}


def default_role(direction: str) -> str:
    """The candidate role an entry of ``direction`` means when it names none."""
    return "anchor" if direction.endswith("_to_query") else "positive"


def data_fingerprint(rows: pl.DataFrame) -> str:
    """``sha256:<hex>`` over the mapped columns in row order: id, anchor, positive, hard negatives and
    group. Each column is hashed as its values' UTF-8 lengths then bytes, so no separator can collide with
    the text; list and null structure is hashed too. Stable across polars versions (no polars hashing)."""
    digest = hashlib.sha256()
    digest.update(f"{KIND}/{SCHEMA_VERSION} rows={rows.height}\n".encode())

    def column(name: str, values: pl.Series) -> None:
        nulls = values.is_null()
        text = values.fill_null("")
        digest.update(f"{name}\n".encode())
        digest.update(nulls.to_numpy().astype(np.uint8).tobytes())
        digest.update(text.str.len_bytes().cast(pl.UInt64).to_numpy().astype("<u8").tobytes())
        digest.update("".join(text.to_list()).encode("utf-8", "surrogatepass"))

    for name in ("id", "anchor", "positive"):
        column(name, rows.get_column(name).cast(pl.String))
    negatives = rows.get_column("negatives")
    digest.update(negatives.list.len().fill_null(0).cast(pl.UInt64).to_numpy().astype("<u8").tobytes())
    column("negatives", negatives.explode().cast(pl.String).drop_nulls())
    column("group", rows.get_column("group").cast(pl.String))
    return f"sha256:{digest.hexdigest()}"


@dataclass(frozen=True)
class ManifestBatch:
    """One global batch: row ids in gather order, each rank's share, and the relations to act on.

    ``weights``: each row's weight in the loss, aligned with ``rows`` (None: every row weighs 1).
    ``line``: the line of the manifest file it was read from (None for a batch built in memory), for
    messages about it.
    """

    batch: int
    epoch: int
    rows: tuple[str, ...]
    ranks: tuple[int, ...]
    mask: dict[str, list[Entry]] = field(default_factory=dict)
    positives: dict[str, list[Entry]] = field(default_factory=dict)
    weights: tuple[float, ...] | None = None
    line: int | None = field(default=None, compare=False)

    def to_json(self) -> str:
        record: dict[str, Any] = {"batch": self.batch, "epoch": self.epoch, "rows": list(self.rows)}
        record["ranks"] = list(self.ranks)
        if self.weights is not None:
            record["weights"] = list(self.weights)
        for key, value in (("mask", self.mask), ("positives", self.positives)):
            if value:
                record[key] = {d: [_entry_json(e, d) for e in entries] for d, entries in value.items() if entries}
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _entry_json(entry: Entry, direction: str) -> list[Any]:
    a, c, role = entry
    return [a, c] if role == default_role(direction) else [a, c, role]


@dataclass(frozen=True)
class Manifest:
    header: dict[str, Any]
    batches: list[ManifestBatch]
    path: str = "<manifest>"

    @property
    def strategy(self) -> str:
        return str(self.header["strategy"])

    @property
    def world_size(self) -> int:
        return int(self.header["plan"]["world_size"])

    @property
    def epochs(self) -> int:
        return int(self.header["plan"]["epochs"])

    @property
    def directions(self) -> tuple[str, ...]:
        return tuple(self.header["loss"]["directions"])

    @property
    def fingerprint(self) -> str:
        return str(self.header["fingerprint"])

    def render(self) -> str:
        lines = [json.dumps(self.header, ensure_ascii=False, separators=(",", ":"), sort_keys=False)]
        lines.extend(b.to_json() for b in self.batches)
        return "\n".join(lines) + "\n"


def is_manifest_header(record: Any) -> bool:
    return isinstance(record, dict) and record.get("kind") == KIND


def read_manifest(path: str | Path) -> Manifest:
    """Read and check a manifest; every problem is an ``InputError`` with its line."""
    from contrast_audit.plan.planfile import json_records

    name = str(path)
    header: dict[str, Any] | None = None
    batches: list[ManifestBatch] = []
    records = json_records(name, what="manifest", fix="pass a manifest written by contrast-audit manifest")
    for number, record in records:
        if header is None:
            if not is_manifest_header(record):
                raise InputError(
                    name,
                    f'the first line is not a manifest header (no "kind": "{KIND}")',
                    line=number,
                    fix="pass a manifest written by contrast-audit manifest (a plain plan goes to scan --plan)",
                )
            _check_header(name, number, record)
            header = record
            continue
        batches.append(_parse_batch(name, number, record, header))
    if header is None:
        raise InputError(name, "is empty", fix="regenerate the manifest")
    if not batches:
        raise InputError(name, "holds no batches", fix="regenerate the manifest")
    return Manifest(header, batches, name)


def _check_header(path: str, line: int, header: dict[str, Any]) -> None:
    """Refuse a header that does not follow ``HEADER_SCHEMA``, naming the key and what it should be."""
    import jsonschema

    version = header.get("schema_version")
    if version != SCHEMA_VERSION:
        raise InputError(
            path,
            f"manifest schema version {_shown(version)} is not supported (this contrast-audit reads "
            f"{_shown(SCHEMA_VERSION)})",
            line=line,
            fix="regenerate the manifest with this version of contrast-audit",
        )
    validator = jsonschema.Draft202012Validator(HEADER_SCHEMA)
    error = jsonschema.exceptions.best_match(validator.iter_errors(header))
    if error is None:
        return
    key = ".".join(str(part) for part in error.absolute_path) or "(the header)"
    if error.validator == "required":
        missing = next((k for k in error.validator_value if k not in error.instance), "?")
        key = f"{key}.{missing}" if error.absolute_path else missing
        problem = "is missing"
    elif error.validator == "type":
        problem = f"is {_json_kind(error.instance)}, not {_kinds(error.validator_value)}"
    elif error.validator in ("minimum", "maximum"):
        problem = f"is {_shown(error.instance)}, outside [{_range(error.schema)}]"
    elif error.validator in ("enum", "const"):
        allowed = error.validator_value if error.validator == "enum" else [error.validator_value]
        problem = f"is {_shown(error.instance)}, not one of {', '.join(_bare(a) for a in allowed)}"
    elif error.validator == "pattern":
        problem = f"is {_shown(error.instance)}, not of the form {_bare(error.validator_value)}"
    elif error.validator == "minItems":
        problem = "is an empty array"
    elif error.validator == "uniqueItems":
        problem = f"is {_shown(error.instance)}, which names an item twice"
    elif error.validator == "anyOf":
        problem = f"is {_json_kind(error.instance)}, not an array of file mappings"
    elif error.validator == "contains":
        problem = "lacks query_to_doc (MultipleNegativesRankingLoss always scores it)"
    else:
        problem = f"is invalid ({_clip(error.message)})"
    raise InputError(path, f"manifest header key '{key}' {problem}", line=line, fix="regenerate the manifest")


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), "null"
    )


def _bare(value: Any) -> str:
    """A string as it is, anything else as JSON (``null``)."""
    return value if isinstance(value, str) else _shown(value)


def _kinds(kind: str | list[str]) -> str:
    names = {
        "object": "an object",
        "array": "an array",
        "string": "a string",
        "integer": "an integer",
        "number": "a number",
        "boolean": "a boolean",
    }
    return " or ".join(names.get(k, k) for k in ([kind] if isinstance(kind, str) else kind))


def _range(schema: dict[str, Any]) -> str:
    return f"{schema.get('minimum', '')}, {schema.get('maximum', '')}"


def _shown(value: Any) -> str:
    """``value`` as JSON writes it (``null``, ``true``, ``"text"``, ``[1, 2]``; ``NaN`` and ``Infinity`` as
    the reader takes them), clipped; a huge integer by its number of digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"an integer of {len(str(abs(value)))} digits"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return _clip(text)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _parse_batch(path: str, line: int, record: Any, header: dict[str, Any]) -> ManifestBatch:
    def bad(message: str) -> InputError:
        return InputError(path, message, line=line, fix="regenerate the manifest")

    if not isinstance(record, dict) or not isinstance(record.get("rows"), list) or not record["rows"]:
        raise bad("a batch line needs a non-empty 'rows' array")
    rows = tuple(r if isinstance(r, str) else str(r) for r in record["rows"])
    if len(set(rows)) != len(rows):
        raise bad("a row id appears twice in one batch")
    ranks = record.get("ranks", [len(rows)])
    if not isinstance(ranks, list) or not all(_is_int(r, len(rows)) for r in ranks) or sum(ranks) != len(rows):
        raise bad("'ranks' must be non-negative sizes that add up to the batch's rows")
    epoch = record.get("epoch", 0)
    batch = record.get("batch", 0)
    if not _is_int(epoch, int(header["plan"]["epochs"]) - 1) or not _is_int(batch, _INT64):
        raise bad("'batch' and 'epoch' must be non-negative integers, 'epoch' below the header's plan.epochs")
    relations: dict[str, dict[str, list[Entry]]] = {}
    for key in ("mask", "positives"):
        value = record.get(key, {})
        if not isinstance(value, dict):
            raise bad(f"'{key}' must be an object keyed by direction")
        parsed: dict[str, list[Entry]] = {}
        for direction, entries in value.items():
            if direction not in DIRECTIONS:
                raise bad(f"unknown direction {_shown(direction)} in '{key}' (one of {', '.join(DIRECTIONS)})")
            if not isinstance(entries, list):
                raise bad(f"'{key}.{direction}' must be an array of [anchor, candidate(, role)] entries")
            out: list[Entry] = []
            for entry in entries:
                if (
                    not isinstance(entry, list)
                    or len(entry) not in (2, 3)
                    or not all(_is_int(x, len(rows) - 1) for x in entry[:2])
                    or (len(entry) == 3 and not _valid_role(entry[2], direction))
                ):
                    raise bad(
                        f"bad entry {_shown(entry)} in '{key}.{direction}': [anchor, candidate(, role)] "
                        f"with positions in [0, {len(rows) - 1}]{_role_problem(entry, direction)}"
                    )
                out.append((entry[0], entry[1], entry[2] if len(entry) == 3 else default_role(direction)))
            parsed[direction] = out
        relations[key] = parsed
    weights = _parse_weights(record.get("weights"), len(rows), "weight" in header, bad)
    return ManifestBatch(
        batch, epoch, rows, tuple(ranks), relations["mask"], relations["positives"], weights, line=line
    )


def _parse_weights(
    value: Any, n_rows: int, declared: bool, bad: Callable[[str], InputError]
) -> tuple[float, ...] | None:
    """A batch line's ``weights``: present exactly when the header records a ``weight``; one finite number
    > 0 per row."""
    if value is None:
        if declared:
            raise bad("'weights' is missing: the header records a 'weight', so every batch line carries one per row")
        return None
    if not declared:
        raise bad("'weights' is given, but the header records no 'weight' (how the weights were made)")
    if not isinstance(value, list):
        raise bad(f"'weights' is {_json_kind(value)}, not an array of numbers (one per row)")
    if len(value) != n_rows:
        raise bad(f"'weights' holds {len(value)} numbers for {n_rows} rows (one per row, in the order of 'rows')")
    out = []
    for k, w in enumerate(value):
        number = _positive_finite(w)
        if number is None:
            raise bad(f"'weights.{k}' is {_shown(w)}, not a finite number > 0")
        if number > MAX_WEIGHT:
            raise bad(
                f"'weights.{k}' is {_shown(w)}, above {MAX_WEIGHT:,.0f}, the largest row weight a manifest may "
                "hold (weights average 1 over the rows; far larger ones overflow the float32 loss)"
            )
        out.append(number)
    return tuple(out)


def _positive_finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer beyond float's range
        return None
    return number if math.isfinite(number) and number > 0 else None


def _is_int(value: Any, high: int) -> bool:
    """An integer (not a boolean) in [0, high]."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def _valid_role(role: Any, direction: str) -> bool:
    if not isinstance(role, str):
        return False
    if direction.endswith("_to_query"):
        return role == "anchor"
    return role == "positive" or negative_index(role) is not None


def negative_index(role: str) -> int | None:
    """k of ``negative_k`` (k in [1, 2^63 - 1], ASCII digits), else None."""
    match = _NEGATIVE_ROLE.fullmatch(role)
    if match is None:
        return None
    k = int(match.group(1))
    return k if 1 <= k <= _INT64 else None


def _role_problem(entry: Any, direction: str) -> str:
    """Why a bad entry's role is wrong, when it is the role: the roles ``direction`` takes."""
    if not isinstance(entry, list) or len(entry) != 3 or _valid_role(entry[2], direction):
        return ""
    if direction.endswith("_to_query"):
        return f'; the role of a {direction} entry is "anchor"'
    role = entry[2]
    digits = role[9:] if isinstance(role, str) and role.startswith("negative_") else ""
    if digits.isascii() and digits.isdigit():
        k = f"its k of {len(digits)} digits" if len(digits) > 19 else f"k = {digits}"
        return f"; {k} is out of range: negative_k takes k in [1, 2^63 - 1]"
    return '; the role is "positive" or "negative_k" (k from 1)'


def check_fingerprint(manifest: Manifest, rows: pl.DataFrame, data_label: str) -> None:
    """Refuse a manifest planned for other data."""
    actual = data_fingerprint(rows)
    if actual != manifest.fingerprint:
        raise InputError(
            manifest.path,
            f"was planned for other data: its fingerprint is {manifest.fingerprint}, but {data_label} "
            f"({rows.height} rows) has {actual}",
            fix="regenerate the manifest for this data (contrast-audit manifest DATA ...) or pass the data it was made for",
        )


__all__ = [
    "HEADER_SCHEMA",
    "KIND",
    "MAX_WEIGHT",
    "SCHEMA_VERSION",
    "STRATEGIES",
    "WEIGHTS",
    "Manifest",
    "ManifestBatch",
    "check_fingerprint",
    "data_fingerprint",
    "default_role",
    "is_manifest_header",
    "negative_index",
    "read_manifest",
]
