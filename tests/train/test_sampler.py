"""ManifestBatchSampler replays the manifest exactly; manifest_dataset refuses stale manifests."""

from __future__ import annotations

import pytest
from support_manifest import write_manifest

from contrast_audit.errors import InputError
from contrast_audit.manifest.format import read_manifest
from contrast_audit.train import ManifestBatchSampler, manifest_dataset
from contrast_audit.train.data import PAD_TEXT


def rows(n: int, negatives: int = 1) -> list[dict]:
    out = []
    for i in range(n):
        row = {"id": f"r{i}", "anchor": f"question {i}", "positive": f"answer {i}"}
        if negatives == 1:
            row["negative"] = f"other {i}"
        out.append(row)
    return out


@pytest.fixture
def data(pairs_file):
    return pairs_file(rows(6))


def test_replays_every_epoch_exactly_with_exact_length(tmp_path, data):
    batches = [
        {"rows": ["r3", "r0", "r5"], "epoch": 0},
        {"rows": ["r1", "r4", "r2"], "epoch": 0},
        {"rows": ["r2", "r1"], "epoch": 1},
        {"rows": ["r0", "r5", "r4", "r3"], "epoch": 1},
    ]
    manifest = read_manifest(write_manifest(tmp_path / "m.jsonl", data, batches, epochs=2))
    training = manifest_dataset(str(data), manifest)
    sampler = ManifestBatchSampler.factory(manifest, training.row_ids)(
        training.dataset, batch_size=8, drop_last=False, valid_label_columns=["label"], generator=None, seed=0
    )
    assert len(sampler) == 2 and list(sampler) == [[3, 0, 5], [1, 4, 2]]
    sampler.set_epoch(1)
    assert len(sampler) == 2 and list(sampler) == [[2, 1], [0, 5, 4, 3]]
    sampler.set_epoch(2)
    with pytest.raises(InputError, match="epochs 0..1"):
        list(sampler)


def test_world_size_two_yields_rank_slices_in_gather_order(tmp_path, data):
    batches = [{"rows": ["r0", "r1", "r2", "r3"], "ranks": [2, 2]}, {"rows": ["r4", "r5"], "ranks": [1, 1]}]
    manifest = read_manifest(write_manifest(tmp_path / "m.jsonl", data, batches, world_size=2))
    training = manifest_dataset(str(data), manifest)
    sampler = ManifestBatchSampler(training.dataset, manifest=manifest, row_ids=training.row_ids)
    # accelerate deals batch b to rank b % 2: rank 0 gets [0, 1] and [4], rank 1 gets [2, 3] and [5]
    assert list(sampler) == [[0, 1], [2, 3], [4], [5]]
    assert len(sampler) == 4


def test_rank_sizes_must_add_up(tmp_path, data):
    with pytest.raises(InputError, match="add up"):
        read_manifest(write_manifest(tmp_path / "m.jsonl", data, [{"rows": ["r0", "r1"], "ranks": [1, 2]}]))


def test_unknown_row_id_is_an_input_error(tmp_path, data):
    manifest = read_manifest(write_manifest(tmp_path / "m.jsonl", data, [{"rows": ["r0", "zz"]}]))
    training = manifest_dataset(str(data), manifest)
    with pytest.raises(InputError, match="'zz'"):
        ManifestBatchSampler(training.dataset, manifest=manifest, row_ids=training.row_ids)


def test_dataset_columns_and_row_index_labels(tmp_path, data):
    manifest = read_manifest(write_manifest(tmp_path / "m.jsonl", data, [{"rows": ["r0"]}]))
    training = manifest_dataset(str(data), manifest)
    assert training.dataset.column_names == ["anchor", "positive", "negative_1", "label"]
    assert training.dataset["label"] == list(range(6))
    assert training.row_ids == [f"r{i}" for i in range(6)]
    assert training.n_negatives == 1


def test_fingerprint_mismatch_names_both(tmp_path, pairs_file):
    data = pairs_file(rows(6))
    manifest = read_manifest(write_manifest(tmp_path / "m.jsonl", data, [{"rows": ["r0"]}]))
    changed = rows(6)
    changed[2]["positive"] = "a different answer"
    data2 = pairs_file(changed, name="changed.jsonl")
    with pytest.raises(InputError) as info:
        manifest_dataset(str(data2), manifest)
    assert manifest.fingerprint in info.value.message
    actual = [w.strip(",.") for w in info.value.message.split() if w.startswith("sha256:")]
    assert len(set(actual)) == 2


def test_uneven_negative_counts_are_padded_and_recorded(tmp_path, pairs_file, caplog):
    r = [
        {"id": "a", "anchor": "x", "positive": "y", "negatives": ["n1", "n2"]},
        {"id": "b", "anchor": "z", "positive": "w", "negatives": ["n3"]},
        {"id": "c", "anchor": "v", "positive": "u"},
    ]
    data = pairs_file(r)
    manifest = read_manifest(write_manifest(tmp_path / "m.jsonl", data, [{"rows": ["a", "b", "c"]}]))
    with caplog.at_level("INFO", logger="contrast_audit.train"):
        training = manifest_dataset(str(data), manifest)
    assert training.n_negatives == 2 and training.dataset.num_rows == 3
    assert training.dataset["negative_1"] == ["n1", "n3", PAD_TEXT]
    assert training.dataset["negative_2"] == ["n2", PAD_TEXT, PAD_TEXT]
    assert training.padded.tolist() == [[False, False], [False, True], [True, True]]
    assert (training.padded_rows, training.padded_negatives) == (2, 3)
    assert "3 missing cells padded" in caplog.text


def test_not_a_manifest(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"kind": "something else"}\n')
    with pytest.raises(InputError, match="manifest header"):
        read_manifest(path)
