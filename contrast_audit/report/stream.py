"""JSON documents written in pieces: large lists are spliced in slice by slice, so memory holds one
slice of Python objects at a time, and the text is byte for byte
``json.dumps(document, indent=2, ensure_ascii=False) + "\\n"`` of the whole document (tested)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

Slices = Callable[[], Iterable[list[Any]]]  # the items of one list, a slice at a time


def placeholders(names: Iterable[str]) -> dict[str, str]:
    """A unique string per list, to stand in the document where the list goes."""
    tag = uuid.uuid4().hex
    return {name: f"\x00{tag}:{name}\x00" for name in names}


def spliced(document: Any, marks: dict[str, str], lists: dict[str, Slices]) -> Iterator[str]:
    """The text of ``document`` (indent 2) in pieces, each ``marks[name]`` placeholder replaced by the
    list ``lists[name]`` yields, at the placeholder's depth."""
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    quoted = {name: json.dumps(mark) for name, mark in marks.items()}
    for name in sorted(marks, key=lambda n: text.index(quoted[n])):
        before, text = text.split(quoted[name], 1)
        yield before
        line = before[before.rfind("\n") + 1 :]
        indent = " " * (len(line) - len(line.lstrip(" ")))
        yield from _items(lists[name](), indent)
    yield text


def _items(slices: Iterable[list[Any]], indent: str) -> Iterator[str]:
    """A list whose opening bracket sits on a line indented by ``indent``, as ``json.dumps(...,
    indent=2)`` nests it."""
    pad = indent + "  "
    first = True
    for items in slices:
        if not items:
            continue
        text = ",\n".join(
            pad + json.dumps(item, indent=2, ensure_ascii=False).replace("\n", "\n" + pad) for item in items
        )
        yield ("[\n" if first else ",\n") + text
        first = False
    yield "[]" if first else "\n" + indent + "]"
