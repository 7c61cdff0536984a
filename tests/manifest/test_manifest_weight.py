"""Per-row loss weights in a manifest: the batch lines' ``weights`` and the header's ``weight``, and how a
reader checks both."""

from __future__ import annotations

import json

import pytest

from contrast_audit.errors import InputError
from contrast_audit.manifest.format import Manifest, ManifestBatch, read_manifest

HEADER = {
    "kind": "contrast-audit-manifest",
    "schema_version": "1",
    "strategy": "mask",
    "fingerprint": "sha256:" + "0" * 64,
    "plan": {"epochs": 1, "world_size": 1},
    "loss": {"directions": ["query_to_doc"]},
}
WEIGHTED = {**HEADER, "weight": {"by": "anchor", "units": 2, "rule": "n_rows / (units * rows of the unit)"}}


def test_weights_round_trip(tmp_path):
    batches = [
        ManifestBatch(0, 0, ("a", "b"), (2,), {"query_to_doc": [(0, 1, "positive")]}, {}, (0.75, 1.5)),
        ManifestBatch(1, 0, ("c",), (1,), {}, {}, (0.75,)),
    ]
    path = tmp_path / "m.jsonl"
    path.write_text(Manifest(WEIGHTED, batches).render())
    assert json.loads(path.read_text().splitlines()[1])["weights"] == [0.75, 1.5]
    back = read_manifest(path)
    assert back.batches == batches and back.header["weight"] == WEIGHTED["weight"]
    path.write_text(Manifest(HEADER, [ManifestBatch(0, 0, ("a",), (1,))]).render())
    assert "weights" not in path.read_text() and read_manifest(path).batches[0].weights is None


def test_integer_weights_are_read_as_numbers(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(WEIGHTED) + '\n{"rows": ["a", "b"], "weights": [1, 2.5]}\n')
    assert read_manifest(path).batches[0].weights == (1.0, 2.5)


@pytest.mark.parametrize(
    ("header", "batch_line", "needle"),
    [
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0]}', "'weights' holds 1 numbers for 2 rows"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": "1.0"}', "'weights' is a string, not an array"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": {"a": 1}}', "'weights' is an object, not an array"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, 0]}', "'weights.1' is 0, not a finite number > 0"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, -0.5]}', "'weights.1' is -0.5"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [true, 1.0]}', "'weights.0' is True"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": ["1", 1.0]}', "'weights.0' is '1'"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [null, 1.0]}', "'weights.0' is None"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [NaN, 1.0]}', "'weights.0' is nan"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, Infinity]}', "'weights.1' is inf"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1.0, 1e999]}', "'weights.1' is inf"),
        (WEIGHTED, '{"rows": ["a", "b"], "weights": [1' + "0" * 400 + ", 1]}", "'weights.0' is an integer of 401"),
        (WEIGHTED, '{"rows": ["a", "b"]}', "'weights' is missing"),
        (HEADER, '{"rows": ["a", "b"], "weights": [1.0, 1.0]}', "the header records no 'weight'"),
    ],
)
def test_batch_weights_are_validated(tmp_path, header, batch_line, needle):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(header) + "\n" + batch_line + "\n")
    with pytest.raises(InputError) as info:
        read_manifest(path)
    assert f"{path}:2:" in str(info.value) and needle in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("weight", "needle"),
    [
        ({"by": "query"}, "'weight.by' is 'query', not one of anchor"),
        ({"units": 2}, "'weight.by' is missing"),
        ({"by": "anchor", "units": "2"}, "'weight.units' is a string, not an integer"),
        ({"by": "anchor", "units": 0}, "'weight.units' is 0, outside [1,"),
        ({"by": "anchor", "rule": 5}, "'weight.rule' is an integer, not a string"),
        ([1], "'weight' is an array, not an object"),
    ],
)
def test_the_header_weight_is_validated(tmp_path, weight, needle):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({**HEADER, "weight": weight}) + '\n{"rows": ["a"], "weights": [1.0]}\n')
    with pytest.raises(InputError) as info:
        read_manifest(path)
    assert f"{path}:1:" in str(info.value) and needle in str(info.value), str(info.value)
