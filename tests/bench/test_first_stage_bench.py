"""bench/first_stage.py: the captions file it builds, the export it makes once, and one scan of it read
back in each mode."""

from __future__ import annotations

import json
from pathlib import Path

from bench import first_stage as bench


def write_captions(root: Path) -> None:
    folder = root / "flickr8k_captions"
    folder.mkdir(parents=True)
    scenes = {
        "1.jpg": [
            "A dog runs on the beach",
            "A brown dog running by the sea",
            "Dog on sand",
            "A dog plays",
            "Beach dog",
        ],
        "2.jpg": ["Two kids ride bikes", "Children cycling down a road", "Kids on bicycles", "Boys biking", "Bikes"],
        "3.jpg": ["A man climbs a rock wall", "Climber on a cliff"],
    }
    lines = [f"{image}#{k}\t{caption}" for image, caps in scenes.items() for k, caption in enumerate(caps)]
    (folder / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_captions_rows_pair_two_captions_of_one_image(tmp_path: Path):
    write_captions(tmp_path / "data")
    rows = [
        json.loads(line) for line in bench.captions_8k(tmp_path / "data", tmp_path / "work").read_text().splitlines()
    ]
    assert [r["id"] for r in rows] == ["1.jpg-0", "1.jpg-2", "2.jpg-0", "2.jpg-2", "3.jpg-0"]
    assert rows[1] == {"id": "1.jpg-2", "anchor": "Dog on sand", "positive": "A dog plays"}


def test_a_scan_reads_back_what_each_mode_embedded(tmp_path: Path, monkeypatch):
    write_captions(tmp_path / "data")
    monkeypatch.setenv("CONTRAST_AUDIT_CACHE_DIR", str(tmp_path / "ignored"))  # scan sets its own
    pairs = bench.captions_8k(tmp_path / "data", tmp_path / "work")
    export, _ = bench.export_once(tmp_path / "work")
    assert export.name == bench.EXPORT and any(export.rglob("model.onnx"))
    for label, mode in bench.MODES.items():
        cache = bench.fresh_cache(tmp_path / label, mode, export)
        run = bench.scan(pairs, mode, cache, tmp_path / f"{label}.json")
        assert run["backend"] == mode[1]
        assert run["rows"] == 5 and run["texts"] == 10
        assert run["embedded"] == 10 and run["cached"] == 0  # a fresh cache, and too few texts for a first stage
        assert run["stage"]["used"] is False
        assert isinstance(run["gated"], set) and run["wall"] > 0
