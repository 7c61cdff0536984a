"""report.stream: a document with lists spliced in slice by slice is the whole document's JSON."""

from __future__ import annotations

import json

import pytest

from contrast_audit.report.stream import placeholders, spliced


@pytest.mark.parametrize("slices", [[], [[]], [[1, {"a": [1, 2]}], [], ["é", None]], [[{"deep": {"x": 1}}]]])
def test_spliced_text_is_the_whole_documents(slices):
    items = [item for part in slices for item in part]
    marks = placeholders(["top", "nested"])
    document = {"head": 1, "top": marks["top"], "runs": [{"nested": marks["nested"], "tail": "t"}]}
    whole = {"head": 1, "top": items, "runs": [{"nested": items[::-1], "tail": "t"}]}
    lists = {"top": lambda: iter(slices), "nested": lambda: ([x] for x in items[::-1])}
    assert "".join(spliced(document, marks, lists)) == json.dumps(whole, indent=2, ensure_ascii=False) + "\n"
