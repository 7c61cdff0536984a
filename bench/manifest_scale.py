"""The cost of a manifest beside the scan of the same file.

    .venv/bin/python bench/manifest_scale.py --rows 100000 1000000 --extra=--no-embeddings

Writes the synthetic pair files of ``bench/scan_scale.py`` (2% of rows share an anchor, 1% repeat a
positive, one hard negative each) and times, on each, ``scan --format json --output`` and
``manifest --strategy S --out`` for every strategy, each a separate process (wall time, CPU time and that process's
peak RSS). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scan_scale import timed, write_pairs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--extra", default="--no-embeddings", help="flags for both commands")
    args = parser.parse_args()
    exe = str(Path(sys.executable).with_name("contrast-audit"))
    extra = shlex.split(args.extra)
    print(f"flags: --batch-size {args.batch_size} {args.extra}")
    print("| rows | command | wall time (s) | CPU time (s) | peak RSS (MiB) | masked pairs | conflicts left |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            data = Path(tmp) / f"pairs_{n}.jsonl"
            write_pairs(data, n)
            common = [str(data), "--batch-size", str(args.batch_size), "-q", *extra]
            wall, cpu, rss = timed([exe, "scan", *common, "--format", "json", "--output", str(Path(tmp) / "r.json")])
            print(f"| {n:,} | scan | {wall:.1f} | {cpu:.1f} | {rss:.0f} | | |", flush=True)
            for strategy in ("mask", "group", "multi-positive"):
                out = Path(tmp) / f"{strategy}.jsonl"
                wall, cpu, rss = timed([exe, "manifest", *common, "--strategy", strategy, "--out", str(out)])
                with out.open(encoding="utf-8") as handle:
                    counts = json.loads(handle.readline())["counts"]
                print(
                    f"| {n:,} | manifest --strategy {strategy} | {wall:.1f} | {cpu:.1f} | {rss:.0f} | {counts['masked_pairs']:,} "
                    f"| {counts['conflicts_left']:,} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
