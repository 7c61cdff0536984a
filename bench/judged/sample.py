"""Draw the pairs a person should judge next: what a scan flags on natural random batches, and the
highest-scoring alleged negatives it does not flag, less what is judged already.

    python -m bench.judged.sample --data /work/shared/data --work /tmp/judged [--scan-args "..."]

For each data set (``natural.BUILDERS``) it writes ``WORK/NAME/pairs.jsonl``, scans it with
``--batch-size 64 --seed S --margin`` (suspects included) and lists the top alleged negatives with
``negatives``; then it samples, per data set, a uniform random ``--per-severity`` findings of each
severity (so the judged precision of a severity estimates that of all its findings) and the
``--unflagged`` highest-scoring negatives it does not report at ``likely`` or ``certain`` (where missed false
negatives would be; each with the scan's ``why_not``), and writes them to ``WORK/to_judge.jsonl`` with an
empty ``label``; ``WORK/to_judge.blind.jsonl`` holds the same pairs with only their key, data set and three
texts, shuffled within each data set, which is what the reader reads. A person
reads each, fills ``label`` (EQUIVALENT / RELATED / UNRELATED) and ``reason``, and appends the lines
to ``bench/judged/judgments.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.judged import natural
from bench.judged.common import (
    data_arguments,
    findings_with_texts,
    pair_key,
    plan_args,
    read_judgments,
    read_rows,
    run,
    scan_command,
)


def draw(name: str, data: Path, work: Path, seed: int, args: argparse.Namespace, judged: set[str]) -> list[dict]:
    pairs = natural.build(name, data, work)
    rows = read_rows(pairs)
    extra = shlex.split(args.scan_args)
    command = scan_command(args.scan_cmd)
    report = run(
        [*command, "scan", str(pairs), *plan_args(seed), "--margin", *extra], work / name / f"scan-{seed}.json"
    )
    negs = run(
        [*command, "negatives", str(pairs), *plan_args(seed), "--top", str(args.top), *extra],
        work / name / f"negatives-{seed}.json",
    )["negatives"]
    rng = random.Random(f"{name}-{seed}")
    by: dict[str, list[dict]] = defaultdict(list)
    for f in findings_with_texts(report, rows):
        if f["key"] not in judged:
            by[f["severity"]].append(f)
    out: list[dict] = []
    seen: set[str] = set()
    for key in sorted(by):
        items = by[key]
        rng.shuffle(items)
        cap, taken = args.cap.get(key, args.per_severity), 0
        for f in items:
            if taken >= cap:
                break
            if f["key"] in seen:
                continue
            seen.add(f["key"])
            out.append(record(name, seed, f, key, "finding", args))
            taken += 1
    unflagged = [n for n in negs if n["severity"] not in ("certain", "likely")]
    for n in unflagged[: args.unflagged]:
        anchor = n["anchor_text"] if not n["direction"].startswith("doc_to") else n["positive_text"]
        n = {**n, "anchor": anchor, "positive": n["positive_text"], "candidate": n["candidate_text"]}
        n["key"] = pair_key(n["direction"], n["anchor"], n["candidate"])
        if n["key"] in judged or n["key"] in seen:
            continue
        seen.add(n["key"])
        out.append(record(name, seed, n, "unflagged", "top-negative", args))
    return out


def record(name: str, seed: int, f: dict[str, Any], key: str, source: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "key": f["key"],
        "dataset": name,
        "direction": f["direction"],
        "anchor": f["anchor"],
        "positive": f["positive"],
        "candidate": f["candidate"],
        "label": "",
        "reason": "",
        "sampled_as": {
            "source": source,
            "seed": seed,
            "stratum": key,
            "severity": f.get("severity"),
            "severity_rule": f.get("severity_rule"),
            "evidence": sorted({e["kind"] for e in f.get("evidence") or []}),
            "why_not": f.get("why_not") or [],
            "scan_args": args.scan_args,
        },
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_arguments(p)
    p.add_argument("--per-severity", type=int, default=25)
    p.add_argument(
        "--cap",
        nargs="*",
        default=[],
        metavar="SEVERITY=N",
        help="another cap for one severity, e.g. --cap suspect=10 certain=15",
    )
    p.add_argument(
        "--unflagged", type=int, default=30, help="highest-scoring negatives short of likely, per set and seed"
    )
    p.add_argument("--top", type=int, default=300, help="alleged negatives listed per data set")
    p.add_argument("--scan-args", default="", help="extra flags for scan and negatives")
    p.add_argument("--out", default="to_judge.jsonl", help="file name under --work")
    args = p.parse_args(argv)
    args.cap = {k: int(v) for k, v in (c.split("=", 1) for c in args.cap)}
    judged = set(read_judgments())
    todo: list[dict] = []
    for name in args.sets:
        for seed in args.seeds:
            got = draw(name, args.data, args.work, seed, args, judged | {t["key"] for t in todo})
            print(f"{name} seed {seed}: {len(got)} to judge")
            todo += got
    out = args.work / args.out
    out.write_text("".join(json.dumps(t, ensure_ascii=False) + "\n" for t in todo), encoding="utf-8")
    blind = [{k: t[k] for k in ("key", "dataset", "anchor", "positive", "candidate")} for t in todo]
    random.Random(0).shuffle(blind)
    blind.sort(key=lambda t: t["dataset"])  # stable: shuffled within each data set
    out.with_suffix(".blind.jsonl").write_text(
        "".join(json.dumps(t, ensure_ascii=False) + "\n" for t in blind), encoding="utf-8"
    )
    print(f"{len(todo)} pairs -> {out} (to read: {out.with_suffix('.blind.jsonl')})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
