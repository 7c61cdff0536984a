"""Hand-written manifests in the manifest format, for the trainer's tests."""

from __future__ import annotations

import json
from pathlib import Path

from contrast_audit.config import ColumnMapping
from contrast_audit.io.load import load_rows
from contrast_audit.manifest.format import data_fingerprint


def write_manifest(
    path: Path,
    data: Path,
    batches: list[dict],
    *,
    strategy: str = "mask",
    epochs: int = 1,
    world_size: int = 1,
    directions: tuple[str, ...] = ("query_to_doc",),
    fingerprint: str | None = None,
) -> Path:
    fp = fingerprint or data_fingerprint(load_rows([str(data)], ColumnMapping()).rows)
    header = {
        "kind": "contrast-audit-manifest",
        "schema_version": "1",
        "strategy": strategy,
        "fingerprint": fp,
        "rows": None,
        "mapping": {},
        "plan": {
            "sampler": "random",
            "batch_size": 4,
            "seed": 0,
            "epochs": epochs,
            "drop_last": False,
            "world_size": world_size,
            "source": None,
        },
        "loss": {"directions": list(directions)},
        "mask_severity": "likely",
        "detectors": {},
        "model": None,
        "counts": {},
        "tool": {},
    }
    lines = [header]
    for g, b in enumerate(batches):
        lines.append({"batch": g, "epoch": b.get("epoch", 0), "ranks": b.get("ranks", [len(b["rows"])]), **b})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path
