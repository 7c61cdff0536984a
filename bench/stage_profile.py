"""Stage-by-stage profile of a scan: seconds and peak RSS of each stage, medians of several runs.

    .venv/bin/python bench/stage_profile.py pairs.jsonl --no-embeddings --repeat 3
    .venv/bin/python bench/stage_profile.py pairs.jsonl --repeat 3 --batch-size 64 --compare /tmp/previous-checkout

Each run is a fresh process (``python bench/stage_profile.py --child``) that imports the package, then
runs the stages of ``contrast_audit.audit`` one after the other with the default settings (or the
flags given): load (read and map the rows), normalise (the corpus of distinct texts), minhash,
embed (sentence vectors, token store), other evidence (exact, same-anchor, linked, declared), plan,
judge, report (the JSON report written atomically). Peak RSS is the process's high-water mark
during the stage alone (reset between stages through ``/proc/self/clear_refs`` on Linux; without it
the column shows the high-water mark so far). With ``--compare DIR`` the same runs are made with the
package found in DIR (e.g. an export of an earlier commit) and the medians are printed side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGES = ("import", "load", "normalise", "minhash", "embed", "other evidence", "plan", "judge", "report")


def _peak_mib() -> float:
    """The process's resident high-water mark (VmHWM) in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


class Clock:
    def __init__(self) -> None:
        self.rows: dict[str, dict[str, float]] = {}
        self.resets = True

    def stage(self, name: str, start: float) -> None:
        row = self.rows.setdefault(name, {"seconds": 0.0, "peak_mib": 0.0})
        row["seconds"] += time.perf_counter() - start
        row["peak_mib"] = max(row["peak_mib"], _peak_mib())
        self.resets = _reset_peak() and self.resets


def child(args: argparse.Namespace) -> None:
    """One profiled scan; prints its stage table as JSON on stdout."""
    clock = Clock()
    start = time.perf_counter()
    from dataclasses import replace

    from contrast_audit.api import AuditResult, plan_warnings
    from contrast_audit.config import AuditConfig
    from contrast_audit.corpus import build_corpus
    from contrast_audit.evidence import default_detectors
    from contrast_audit.io import load_rows
    from contrast_audit.io.atomic import write_atomic
    from contrast_audit.judge import judge
    from contrast_audit.plan import make_plan
    from contrast_audit.report import FORMATTERS

    cfg = AuditConfig()
    cfg = replace(cfg, plan=replace(cfg.plan, batch_size=args.batch_size))
    if args.no_embeddings:
        cfg = replace(cfg, embedding=replace(cfg.embedding, enabled=False))
    if args.no_cache:
        cfg = replace(cfg, embedding=replace(cfg.embedding, use_cache=False))
    clock.stage("import", start)

    start = time.perf_counter()
    loaded = load_rows([str(p) for p in args.data], cfg.mapping, cfg.on_bad_row, cfg.normalise)
    clock.stage("load", start)
    start = time.perf_counter()
    corpus = build_corpus(loaded.rows, cfg.normalise)
    clock.stage("normalise", start)
    detectors = default_detectors(cfg)
    for detector in detectors:
        inner = getattr(detector, "inner", detector)
        name = {"minhash": "minhash", "embedding": "embed", "anchor-embedding": "embed", "margin": "embed"}
        start = time.perf_counter()
        detector.prepare(corpus)
        clock.stage(name.get(getattr(inner, "name", ""), "other evidence"), start)
    start = time.perf_counter()
    plan = make_plan(cfg.plan, corpus.n_rows, corpus.raw)
    batches = plan.global_batches(cfg.plan.world_size)
    clock.stage("plan", start)
    start = time.perf_counter()
    judgement = judge(corpus, batches, detectors, cfg.loss.directions)
    clock.stage("judge", start)
    start = time.perf_counter()
    result = AuditResult(cfg, loaded, corpus, plan, len(batches), judgement, None, detectors)
    result.warnings = [*loaded.warnings, *plan_warnings(cfg, corpus.n_rows, plan, len(batches), judgement.candidates)]
    write_atomic(args.output, FORMATTERS["json"](result))
    clock.stage("report", start)
    counts = result.counts()
    print(
        json.dumps(
            {
                "stages": clock.rows,
                "resets": clock.resets,
                "rows": counts["rows"],
                "texts": counts["texts"],
                "candidates": counts["candidates"],
                "findings": counts["findings"],
                "peak_mib": max(row["peak_mib"] for row in clock.rows.values()),
            }
        )
    )


def run(args: argparse.Namespace, root: Path, output: Path) -> dict:
    flags = ["--batch-size", str(args.batch_size), "--output", str(output)]
    flags += ["--no-embeddings"] if args.no_embeddings else []
    flags += ["--no-cache"] if args.no_cache else []
    env = {**os.environ, "PYTHONPATH": str(root)}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *map(str, args.data), *flags],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"profile run failed ({root}):\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall"] = wall
    return out


def medians(runs: list[dict]) -> dict:
    table = {}
    for stage in STAGES:
        present = [r["stages"][stage] for r in runs if stage in r["stages"]]
        if present:
            table[stage] = (
                statistics.median(p["seconds"] for p in present),
                statistics.median(p["peak_mib"] for p in present),
            )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, nargs="+")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--no-embeddings", action="store_true")
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compare", type=Path, help="a directory holding an earlier contrast_audit package")
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    roots = [("this checkout", ROOT)] + ([("compared", args.compare.resolve())] if args.compare else [])
    results: dict[str, list[dict]] = {name: [] for name, _ in roots}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for name, root in roots:  # interleaved, so both see the same machine load
                load = os.getloadavg()[0]
                run_ = run(args, root, Path(tmp) / "report.json")
                run_["load"] = load
                results[name].append(run_)
                print(
                    f"run {i + 1} {name}: {run_['wall']:.1f} s, peak {run_['peak_mib']:.0f} MiB, load {load:.1f}",
                    file=sys.stderr,
                )
    first = results[roots[0][0]][0]
    print(
        f"{', '.join(map(str, args.data))}: {first['rows']:,} rows, {first['texts']:,} distinct texts, "
        f"{first['candidates']:,} candidates, {first['findings']:,} findings; batch size {args.batch_size}"
        f"{', --no-embeddings' if args.no_embeddings else ''}{', --no-cache' if args.no_cache else ''}; "
        f"medians of {args.repeat} runs; 1-minute load average at the runs' starts: "
        + ", ".join(f"{r['load']:.1f}" for name in results for r in results[name])
    )
    if not all(r["resets"] for name in results for r in results[name]):
        print("(peak RSS could not be reset between stages: each figure is the high-water mark so far)")
    print()
    tables = {name: medians(runs) for name, runs in results.items()}
    names = list(tables)
    header = "| stage | " + " | ".join(f"{n}: s | {n}: peak MiB" for n in names) + " |"
    print(header)
    print("|---|" + "---:|---:|" * len(names))
    for stage in STAGES:
        cells = []
        for n in names:
            sec, mib = tables[n].get(stage, (None, None))
            cells += ["–", "–"] if sec is None else [f"{sec:.2f}", f"{mib:.0f}"]
        print(f"| {stage} | " + " | ".join(cells) + " |")
    totals = []
    for n in names:
        totals += [
            f"{statistics.median(r['wall'] for r in results[n]):.2f}",
            f"{statistics.median(r['peak_mib'] for r in results[n]):.0f}",
        ]
    print("| **whole process** | " + " | ".join(totals) + " |")


if __name__ == "__main__":
    main()
