"""Shared pieces of the person-judged evaluation: the judged set, keys, scans and Wilson intervals."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
JUDGMENTS = HERE / "judgments.jsonl"
LABELS = ("EQUIVALENT", "RELATED", "UNRELATED")
BATCH_SIZE = 64
SEEDS = (0, 1, 2, 3)  # the seeds of the natural batches the judged set was drawn from
SCAN_OK = (0, 1)


def data_arguments(p) -> None:
    """The options ``sample.py`` and ``score.py`` share: where the data sets are, the work folder, which
    sets and which seeds."""
    from bench.judged.natural import BUILDERS

    p.add_argument("--data", type=Path, required=True, help="the folder of the public data sets (read only)")
    p.add_argument("--work", type=Path, default=Path("/tmp/judged"), help="pair files and scan reports go here")
    p.add_argument("--sets", nargs="+", default=list(BUILDERS), choices=list(BUILDERS))
    p.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS), help="the seeds of the natural batches")
    p.add_argument(
        "--scan-cmd",
        help='another contrast-audit executable, e.g. "env PYTHONPATH=/tmp/old .venv/bin/contrast-audit" to run a '
        "snapshot",
    )


def pair_key(direction: str, anchor: str, candidate: str) -> str:
    """A judged pair's identity: the direction and the two texts compared, as written in the data."""
    raw = "\x1f".join((direction, " ".join(anchor.split()), " ".join(candidate.split())))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:16]


def read_judgments(path: Path = JUDGMENTS) -> dict[str, dict[str, Any]]:
    """The judged set, by key; a key judged twice keeps its last line."""
    out: dict[str, dict[str, Any]] = {}
    if not path.is_file():
        return out
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("label") not in LABELS:
            raise ValueError(f"{path}:{number}: label must be one of {', '.join(LABELS)}, got {record.get('label')!r}")
        out[record["key"]] = record
    return out


def read_rows(pairs: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for line in pairs.read_text(encoding="utf-8").splitlines():
        if line.strip():
            r = json.loads(line)
            rows[str(r["id"])] = r
    return rows


def role_text(row: dict[str, Any], role: str) -> str:
    if role in ("anchor", "positive"):
        return row[role]
    k = int(role.split("_")[1]) - 1
    return row["negatives"][k]


def scan_command(scan_cmd: str | None = None) -> list[str]:
    """The contrast-audit command: ``scan_cmd`` split as a shell would, or this environment's."""
    if scan_cmd:
        return shlex.split(scan_cmd)
    return [str(Path(sys.executable).with_name("contrast-audit"))]


def run(command: list[str], output: Path) -> dict[str, Any]:
    """Run a scan or ``negatives`` command writing JSON to ``output``; its parsed report."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    output.unlink(missing_ok=True)
    proc = subprocess.run(
        [*command, "--format", "json", "--output", str(output), "--quiet"], env=env, text=True, capture_output=True
    )
    if proc.returncode not in SCAN_OK or not output.is_file():
        raise SystemExit(f"{shlex.join(command)} exited {proc.returncode}:\n{proc.stderr.strip()[-2000:]}")
    return json.loads(output.read_text(encoding="utf-8"))


def plan_args(seed: int) -> list[str]:
    return ["--batch-size", str(BATCH_SIZE), "--seed", str(seed)]


def findings_with_texts(report: dict[str, Any], rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A scan report's in-batch findings with the texts they compare."""
    out = []
    for f in report["findings"]:
        a, c = rows[f["anchor_id"]], rows[f["candidate_id"]]
        from_doc = f["direction"].startswith("doc_to")
        anchor = a["positive"] if from_doc else a["anchor"]
        out.append(
            {
                **f,
                "anchor": anchor,
                "positive": a["anchor"] if from_doc else a["positive"],
                "candidate": role_text(c, f["candidate_role"]),
                "key": pair_key(f["direction"], anchor, role_text(c, f["candidate_role"])),
            }
        )
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of ``k`` successes in ``n``."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))
