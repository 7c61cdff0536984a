"""What the first stage saves, and what it changes: cold scans with ``--first-stage static`` (the default)
and ``none`` (the full model everywhere) on real data, one fresh cache each, and a warm rescan after a
1% append.

    .venv/bin/python bench/first_stage.py --data /work/shared/data --work /tmp/first-stage

Data sets, built from the public sets under ``--data`` (never copied into the repository):

- the seven natural sets of ``bench/judged`` (``natural.py``), as the judged scans read them;
- ``captions-8k``: every Flickr8k image, two rows of two of its captions (16,184 rows);
- ``sentences``: every pair of STS-B, MRPC and PAWS-Wiki (dev and test) as a row (30,000 rows or so).

Each scan is ``contrast-audit scan FILE --batch-size 64 --seed 0`` (JSON, offline) in its own process
with an empty ``CONTRAST_AUDIT_CACHE_DIR``; printed per set and mode: wall seconds, the texts the full model
embedded, and the certain + likely findings, with how many of the full model's the first stage keeps.
``--rescan`` adds, for ``sentences``, the 1% append: the first 99% of its rows scanned cold, then all of
them with that cache (both modes).
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


def scan(pairs: Path, mode: str, cache: Path, out: Path) -> dict:
    """One scan in its own process with its own cache (``bench.judged.common.run``), timed."""
    command = ["env", f"CONTRAST_AUDIT_CACHE_DIR={cache}", *scan_command()]
    start = time.perf_counter()
    report = run([*command, "scan", str(pairs), *plan_args(0), "--first-stage", mode], out)
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
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--sets", nargs="+", default=[*NATURAL, "captions-8k", "sentences"])
    parser.add_argument("--rescan", action="store_true", help="also the 1%% append to sentences")
    args = parser.parse_args(argv)
    work = args.work
    print(
        "| data | rows | texts | mode | wall s | texts embedded | certain + likely | of the full model's, kept | bar |"
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
        for mode in ("none", "static"):
            cache = work / name / f"cache-{mode}"
            shutil.rmtree(cache, ignore_errors=True)
            runs[mode] = scan(pairs, mode, cache, work / name / f"report-{mode}.json")
        full = runs["none"]["gated"]
        for mode in ("none", "static"):
            r = runs[mode]
            kept = f"{len(r['gated'] & full)}/{len(full)}"
            bar = r["stage"].get("bar", "–")
            print(
                f"| {name} | {r['rows']:,} | {r['texts']:,} | {mode} | {r['wall']:.1f} | {r['embedded']:,} | "
                f"{len(r['gated'])} | {kept} | {bar} |",
                flush=True,
            )
    if args.rescan:
        rescan(args.data, work)
    return 0


def rescan(data: Path, work: Path) -> None:
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
    for mode in ("none", "static"):
        cache = work / "rescan" / f"cache-{mode}"
        shutil.rmtree(cache, ignore_errors=True)
        cold = scan(base, mode, cache, work / "rescan" / f"cold-{mode}.json")
        warm = scan(grown, mode, cache, work / "rescan" / f"warm-{mode}.json")
        print(
            f"| {mode} | {cold['rows']:,} | {cold['wall']:.1f} | {warm['wall']:.1f} | {warm['embedded']:,} | "
            f"{warm['wall'] / cold['wall']:.1%} |",
            flush=True,
        )


if __name__ == "__main__":
    raise SystemExit(main())
