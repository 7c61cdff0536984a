"""The cost of a manifest beside the scan of the same file.

    .venv/bin/python bench/manifest_scale.py --rows 100000 1000000 --extra=--no-embeddings --repeat 3

Writes the synthetic pair files of ``bench/scan_scale.py`` (2% of rows share an anchor, 1% repeat a
positive, one hard negative each) and times, on each, ``scan --format json --output`` and
``manifest --strategy S --out`` for every strategy, each a separate process (wall time, CPU time and that
process's peak RSS). With ``--repeat N`` the commands run in rounds (scan, mask, group, multi-positive,
then again), so drifting load affects all alike, and the table gives medians. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scan_scale import timed, write_pairs  # noqa: E402

STRATEGIES = ("mask", "group", "multi-positive")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--extra", default="--no-embeddings", help="flags for both commands")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of all four commands; medians are printed")
    args = parser.parse_args()
    exe = str(Path(sys.executable).with_name("contrast-audit"))
    extra = shlex.split(args.extra)
    print(f"flags: --batch-size {args.batch_size} {args.extra}; medians of {args.repeat} interleaved rounds")
    print("| rows | command | wall time (s) | CPU time (s) | peak RSS (MiB) | masked pairs | conflicts left |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            data = Path(tmp) / f"pairs_{n}.jsonl"
            write_pairs(data, n)
            common = [str(data), "--batch-size", str(args.batch_size), "-q", *extra]
            commands = {"scan": [exe, "scan", *common, "--format", "json", "--output", str(Path(tmp) / "r.json")]}
            for strategy in STRATEGIES:
                out = str(Path(tmp) / f"{strategy}.jsonl")
                commands[f"manifest --strategy {strategy}"] = [
                    exe,
                    "manifest",
                    *common,
                    "--strategy",
                    strategy,
                    "--out",
                    out,
                ]
            runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name in commands}
            for _ in range(args.repeat):
                for name, cmd in commands.items():
                    runs[name].append(timed(cmd))
            for name, timings in runs.items():
                wall, cpu, rss = (statistics.median(t[i] for t in timings) for i in range(3))
                masked = conflicts = ""
                if name != "scan":
                    with (Path(tmp) / f"{name.rsplit(' ', 1)[1]}.jsonl").open(encoding="utf-8") as handle:
                        counts = json.loads(handle.readline())["counts"]
                    masked, conflicts = f"{counts['masked_pairs']:,}", f"{counts['conflicts_left']:,}"
                print(f"| {n:,} | {name} | {wall:.1f} | {cpu:.1f} | {rss:.0f} | {masked} | {conflicts} |", flush=True)


if __name__ == "__main__":
    main()
