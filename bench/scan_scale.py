"""Scan throughput on synthetic pair files of growing size.

    .venv/bin/python bench/scan_scale.py --rows 100000 1000000 --batch-size 64 --scan-args=--no-embeddings
    .venv/bin/python bench/scan_scale.py --rows 20000 --batch-size 64 --scan-args=--no-cache
    .venv/bin/python bench/scan_scale.py --rows 1000000 --write-only /tmp/pairs   # the data alone

Writes a JSONL file per size into a temporary directory (rows with 1 hard negative; 2% of rows
share an anchor with another row, 1% repeat another row's positive) and times the whole CLI scan
(`--format json --output`, so the JSON report is included), with any extra scan flags. Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_pairs(path: Path, n: int, seed: int = 0, distinct_positives: int = 0) -> None:
    """``n`` rows; with ``distinct_positives`` every positive is one of that many texts (a file whose
    batches hold many findings)."""
    rng = np.random.default_rng(seed)
    anchors = np.arange(n)
    shared = rng.random(n) < 0.02
    anchors[shared] = rng.integers(0, n, shared.sum())
    positives = np.arange(n)
    repeated = rng.random(n) < 0.01
    positives[repeated] = rng.integers(0, n, repeated.sum())
    if distinct_positives:
        positives = rng.integers(0, distinct_positives, n)
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            out.write(
                json.dumps(
                    {
                        "anchor": f"question number {anchors[i]} about topic {anchors[i] % 997}",
                        "positive": f"answer document {positives[i]} explaining topic {positives[i] % 997} in detail",
                        "negative": f"unrelated document {i} on subject {(i * 7) % 991}",
                        "source": f"s{i % 4}",
                    }
                )
                + "\n"
            )


def sentence_pairs(data: Path) -> list[tuple[str, str]]:
    """The labelled pairs of the shared data's sentence sets (STS-B, MRPC, PAWS-Wiki dev and test) and
    two pairs of captions per Flickr8k image, as (text, text)."""
    from bench.quality.cases import _lines, read_mrpc, read_paws, read_sts

    pairs = [
        *read_sts(data / "stsbenchmark" / "sts-train.csv", "train"),
        *read_sts(data / "stsbenchmark" / "sts-dev.csv", "dev"),
        *read_sts(data / "stsbenchmark" / "sts-test.csv", "test"),
        *read_mrpc(data / "mrpc" / "msr_paraphrase_train.txt", "train"),
        *read_mrpc(data / "mrpc" / "msr_paraphrase_test.txt", "test"),
        *read_paws(data / "paws_wiki" / "dev.tsv", "dev"),
        *read_paws(data / "paws_wiki" / "test.tsv", "test"),
    ]
    out = [(p.text1, p.text2) for p in pairs]
    by_image: dict[str, list[str]] = {}
    for _, line in _lines(data / "flickr8k_captions" / "Flickr8k.token.txt"):
        name, _, caption = line.partition("\t")
        by_image.setdefault(name.rsplit("#", 1)[0], []).append(caption.strip())
    for caps in by_image.values():
        out += [(caps[k], caps[k + 1]) for k in (0, 2) if len(caps) > k + 1]
    return out


def write_sentence_pairs(path: Path, n: int, data: Path, seed: int = 0) -> None:
    """``n`` rows of real sentences: each row one of the shared data's labelled pairs (``sentence_pairs``),
    both its texts followed by one more sentence drawn from all of them, so that the texts are distinct
    (about 2n of them), read like prose, and a pair recurs with another sentence about every 42,000 rows."""
    pairs = sentence_pairs(data)
    pool = sorted({t for pair in pairs for t in pair})
    rng = np.random.default_rng(seed)
    which, extra = rng.integers(0, len(pairs), n), rng.integers(0, len(pool), n)
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            first, second = pairs[which[i]]
            tail = pool[extra[i]]
            row = {"anchor": f"{first} {tail}", "positive": f"{second} {tail}", "source": f"s{i % 4}"}
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def timed(cmd: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, which other load on the machine barely changes) and
    peak RSS (MiB) of one command."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--scan-args", default="", help="extra scan flags, e.g. '--no-embeddings'")
    parser.add_argument("--distinct-positives", type=int, default=0, help="draw every positive from this many texts")
    parser.add_argument("--write-only", type=Path, help="write the pair files into this directory and stop")
    args = parser.parse_args()
    if args.write_only:
        args.write_only.mkdir(parents=True, exist_ok=True)
        for n in args.rows:
            write_pairs(args.write_only / f"pairs_{n}.jsonl", n, distinct_positives=args.distinct_positives)
        return
    exe = Path(sys.executable).with_name("contrast-audit")
    print(f"scan flags: {args.scan_args or '(defaults)'}")
    print(
        "| rows | distinct texts | batch size | candidates | findings | wall time (s) | CPU time (s) | peak RSS (MiB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            data = Path(tmp) / f"pairs_{n}.jsonl"
            write_pairs(data, n, distinct_positives=args.distinct_positives)
            out = Path(tmp) / "report.json"
            cmd = [
                str(exe),
                "scan",
                str(data),
                "--batch-size",
                str(args.batch_size),
                "--format",
                "json",
                "--output",
                str(out),
                "-q",
                *shlex.split(args.scan_args),
            ]
            wall, cpu, rss = timed(cmd)
            counts = json.loads(out.read_text())["counts"]
            print(
                f"| {n:,} | {counts['texts']:,} | {args.batch_size} | {counts['candidates']:,} | {counts['findings']:,} "
                f"| {wall:.1f} | {cpu:.1f} | {rss:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
