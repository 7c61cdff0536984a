"""What the embedding stage costs, and what its faster forms change: cold scans of real data, each in a
fresh cache, in three modes, and a warm rescan after a 1% append.

    .venv/bin/python bench/first_stage.py --data /work/shared/data --work /tmp/first-stage --rescan

Modes (``MODES``): the full model on torch for every text (``--first-stage none --backend torch``, the
embedding stage before the first stage and ONNX Runtime), the first stage with torch
(``--first-stage static --backend torch``), and the default (the first stage, ONNX Runtime). ONNX
Runtime runs the model exported once per model and cache: its cold scans start from a cache holding
only that export (made and timed once at the start, as a user's first scan makes it).

Data sets, built from the public sets under ``--data`` (never copied into the repository):

- the seven natural sets of ``bench/judged`` (``natural.py``), as the judged scans read them;
- ``captions-8k``: every Flickr8k image, two rows of two of its captions (16,184 rows);
- ``sentences``: every pair of STS-B, MRPC and PAWS-Wiki (dev and test) as a row (30,000 rows or so).

Each scan is ``contrast-audit scan FILE --batch-size 64 --seed 0`` (JSON, offline) in its own process;
printed per set and mode: wall seconds, the texts the full model embedded, and the certain + likely
findings, with how many of the first mode's each mode keeps. ``--rescan`` adds, for ``sentences``, the
1% append: the first 99% of its rows scanned cold, then all of them with that cache, per mode.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.judged import natural  # noqa: E402
from bench.judged.common import plan_args, run, scan_command  # noqa: E402
from bench.quality.cases import _lines, read_mrpc, read_paws, read_sts, write_atomic  # noqa: E402

NATURAL = ("stsb", "mrpc", "paws", "captions", "cqa", "scifact", "cisi")
MODES = {  # name: (--first-stage, --backend)
    "full model, torch": ("none", "torch"),
    "first stage, torch": ("static", "torch"),
    "first stage, onnx": ("static", "onnx"),
}
EXPORT = "onnx-v1"  # the cache's folder of exported models (contrast_audit.encoders.ONNX_LAYOUT)
GATED = ("certain", "likely")


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def captions_8k(data: Path, work: Path) -> Path:
    by_image: dict[str, list[str]] = {}
    for _, line in _lines(data / "flickr8k_captions" / "Flickr8k.token.txt"):
        name, _, caption = line.partition("\t")
        by_image.setdefault(name.rsplit("#", 1)[0], []).append(caption.strip())
    rows = []
    for image, caps in by_image.items():
        for k in (0, 2):
            if len(caps) > k + 1:
                rows.append({"id": f"{image}-{k}", "anchor": caps[k], "positive": caps[k + 1]})
    return _write(work / "captions-8k" / "pairs.jsonl", rows)


def sentences(data: Path, work: Path) -> Path:
    pairs = [
        *read_sts(data / "stsbenchmark" / "sts-train.csv", "train"),
        *read_sts(data / "stsbenchmark" / "sts-dev.csv", "dev"),
        *read_sts(data / "stsbenchmark" / "sts-test.csv", "test"),
        *read_mrpc(data / "mrpc" / "msr_paraphrase_train.txt", "train"),
        *read_mrpc(data / "mrpc" / "msr_paraphrase_test.txt", "test"),
        *read_paws(data / "paws_wiki" / "dev.tsv", "dev"),
        *read_paws(data / "paws_wiki" / "test.tsv", "test"),
    ]
    rows = [{"id": f"{p.source}-{i}", "anchor": p.text1, "positive": p.text2} for i, p in enumerate(pairs)]
    return _write(work / "sentences" / "pairs.jsonl", rows)


def scan(pairs: Path, mode: tuple[str, str], cache: Path, out: Path) -> dict:
    """One scan in its own process with its own cache (``bench.judged.common.run``), timed."""
    stage, backend = mode
    command = ["env", f"CONTRAST_AUDIT_CACHE_DIR={cache}", *scan_command()]
    start = time.perf_counter()
    report = run([*command, "scan", str(pairs), *plan_args(0), "--first-stage", stage, "--backend", backend], out)
    wall = time.perf_counter() - start
    emb = report["detectors"]["embedding"]
    gated = {(f["anchor_id"], f["candidate_id"], f["direction"]) for f in report["findings"] if f["severity"] in GATED}
    return {
        "wall": wall,
        "embedded": emb["embedded"],
        "cached": emb["cached"],
        "texts": report["counts"]["texts"],
        "rows": report["counts"]["rows"],
        "gated": gated,
        "stage": emb.get("first_stage", {}),
        "backend": emb.get("backend"),
    }


def export_once(work: Path) -> tuple[Path, float]:
    """The model's ONNX export, made by a scan of two rows in a fresh cache: (its folder, the scan's seconds)."""
    cache = work / "export" / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    pairs = _write(work / "export" / "pairs.jsonl", [{"anchor": "a first text", "positive": "its positive"}])
    took = scan(pairs, MODES["first stage, onnx"], cache, work / "export" / "report.json")
    if took["backend"] != "onnx":
        raise SystemExit("the model did not export to ONNX; see the report's detectors.embedding.backend_reason")
    return cache / EXPORT, took["wall"]


def fresh_cache(path: Path, mode: tuple[str, str], export: Path) -> Path:
    """An empty cache, holding the model's export for ONNX Runtime."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    if mode[1] == "onnx":
        shutil.copytree(export, path / EXPORT)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--sets", nargs="+", default=[*NATURAL, "captions-8k", "sentences"])
    parser.add_argument("--rescan", action="store_true", help="also the 1%% append to sentences")
    args = parser.parse_args(argv)
    work = args.work
    export, took = export_once(work)
    print(f"ONNX export (once per model and cache): a scan of one row in a fresh cache took {took:.1f} s")
    print()
    print(
        "| data | rows | texts | mode | wall s | texts embedded | certain + likely | of the first mode's, kept | bar |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for name in args.sets:
        if name == "captions-8k":
            pairs = captions_8k(args.data, work)
        elif name == "sentences":
            pairs = sentences(args.data, work)
        else:
            pairs = natural.build(name, args.data, work)
        runs = {}
        for label, mode in MODES.items():
            cache = fresh_cache(work / name / f"cache-{mode[0]}-{mode[1]}", mode, export)
            runs[label] = scan(pairs, mode, cache, work / name / f"report-{mode[0]}-{mode[1]}.json")
        first = next(iter(runs.values()))["gated"]
        for label, r in runs.items():
            kept = f"{len(r['gated'] & first)}/{len(first)}"
            bar = r["stage"].get("bar", "–")
            print(
                f"| {name} | {r['rows']:,} | {r['texts']:,} | {label} | {r['wall']:.1f} | {r['embedded']:,} | "
                f"{len(r['gated'])} | {kept} | {bar} |",
                flush=True,
            )
    if args.rescan:
        rescan(args.data, work, export)
    return 0


def rescan(data: Path, work: Path, export: Path) -> None:
    """The first 99% of ``sentences`` cold, then all of it warm, per mode."""
    rows = (work / "sentences" / "pairs.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    keep = len(rows) - len(rows) // 100
    base = work / "rescan" / "base.jsonl"
    base.parent.mkdir(parents=True, exist_ok=True)
    base.write_text("".join(rows[:keep]), encoding="utf-8")
    grown = work / "rescan" / "grown.jsonl"
    grown.write_text("".join(rows), encoding="utf-8")
    print()
    print("| mode | cold: rows | wall s | +1% rows, warm: wall s | texts embedded | share of the cold scan |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, mode in MODES.items():
        cache = fresh_cache(work / "rescan" / f"cache-{mode[0]}-{mode[1]}", mode, export)
        cold = scan(base, mode, cache, work / "rescan" / f"cold-{mode[0]}-{mode[1]}.json")
        warm = scan(grown, mode, cache, work / "rescan" / f"warm-{mode[0]}-{mode[1]}.json")
        print(
            f"| {label} | {cold['rows']:,} | {cold['wall']:.1f} | {warm['wall']:.1f} | {warm['embedded']:,} | "
            f"{warm['wall'] / cold['wall']:.1%} |",
            flush=True,
        )


if __name__ == "__main__":
    raise SystemExit(main())
