"""Choose the pair evidence's calibration on built cases (the tune half): a grid of scan settings,
each scored on every case, and the selection rule of ``tune.py``.

    .venv/bin/python -m bench.quality.calibrate --work /tmp/ca-quality-tune \\
        --grid "--calibration-quantile 0.1" "--calibration-quantile 0.25" "--calibration-quantile 0.5"

The cases must have been built (and scanned once, which fills the embedding cache) by
``bench.quality.run --work WORK``. For each grid entry the scan runs again on every case with those
flags; a case passes when its precision, counted as the Wilson bound one standard error below the
estimate (the one-standard-error rule), is at least 0.90 and its F1 leads the best peer rule by at
least 0.10 (the ``natural`` case: precision only, it has no built distractors to lead on). Among the
entries where every case passes, the one with the largest smallest lead wins (leads within 0.005
tie; ties go to the best worst-case precision bound).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

from bench.quality import peers as peer_rules
from bench.quality.run import default_scan_command, read_rows
from bench.quality.score import finding_masks, findings_from_report, read_truth, report_kinds, score
from bench.quality.tune import precision_bound

PRECISION = 0.90
LEAD = 0.10
TIE = 0.005
PRECISION_ONLY = ("natural",)


def scan(case_dir: Path, flags: list[str], tag: str) -> dict:
    out = case_dir / f"report-{tag}.json"
    command = [
        *default_scan_command(),
        "scan",
        str(case_dir / "pairs.jsonl"),
        "--plan",
        str(case_dir / "plan.jsonl"),
        "--format",
        "json",
        "--output",
        str(out),
        "--quiet",
        *flags,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"scan failed ({shlex.join(command)}): {proc.stderr[-2000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.calibrate", description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True, help="the --work directory of a bench.quality.run")
    parser.add_argument("--cases", nargs="+", default=None, help="default: every built case under WORK")
    parser.add_argument("--grid", nargs="+", required=True, help="scan flags per entry, one string each")
    parser.add_argument("--peer-cache", default=None)
    parser.add_argument("--z", type=float, default=1.0)
    args = parser.parse_args(argv)
    work = Path(args.work)
    cases = args.cases or sorted(p.parent.name for p in work.glob("*/truth.jsonl"))
    embed = peer_rules.default_embedder(cache=Path(args.peer_cache) if args.peer_cache else None)
    peer_f1: dict[str, float] = {}
    truths = {}
    for name in cases:
        truth = read_truth(work / name / "truth.jsonl")
        truths[name] = truth
        texts = peer_rules.pair_texts(read_rows(work / name / "pairs.jsonl"), truth.anchor_ids, truth.candidate_ids)
        masks, _ = peer_rules.run_peers(texts, embed)
        peer_f1[name] = max(score(truth, m).f1 for m in masks.values())
    rows = []
    for k, entry in enumerate(args.grid):
        flags = shlex.split(entry)
        cells = {}
        for name in cases:
            report = scan(work / name, flags, f"grid{k}")
            masks, outside = finding_masks(truths[name], findings_from_report(report), report_kinds(report))
            s = score(truths[name], masks["all"], outside)
            pair = score(truths[name], masks["pair"]) if "pair" in masks else None
            bound = precision_bound(s.precision or 0.0, s.flagged, args.z) if s.flagged else 0.0
            cells[name] = (s, bound, s.f1 - peer_f1[name], pair)
            print(
                f"[{entry}] {name}: P {s.precision or 0:.3f} (bound {bound:.3f}) R {s.recall:.3f} F1 {s.f1:.3f} "
                f"lead {s.f1 - peer_f1[name]:+.3f}"
                + (f"; pair P {pair.precision or 0:.3f} R {pair.recall:.3f} flagged {pair.flagged}" if pair else ""),
                file=sys.stderr,
            )
        ok = all(b >= PRECISION and (n in PRECISION_ONLY or lead >= LEAD) for n, (_, b, lead, _) in cells.items())
        leads = [lead for n, (_, _, lead, _) in cells.items() if n not in PRECISION_ONLY]
        rows.append((entry, ok, min(leads) if leads else 0.0, min(b for _, b, _, _ in cells.values()), cells))
    passing = [r for r in rows if r[1]]
    best_lead = max((r[2] for r in passing), default=None)
    chosen = None
    if passing:
        tied = [r for r in passing if r[2] >= best_lead - TIE]
        chosen = max(tied, key=lambda r: r[3])
    header = "| scan flags | all pass | smallest lead | worst bound | " + " | ".join(cases) + " |"
    print(header)
    print("|" + "---|" * (4 + len(cases)))
    for entry, ok, lead, bound, cells in rows:
        mark = " **chosen**" if chosen is not None and entry == chosen[0] else ""
        parts = [
            f"{s.precision or 0:.3f} / {s.recall:.3f} / {s.f1:.3f}, {lead_:+.3f}" for s, _, lead_, _ in cells.values()
        ]
        print(f"| `{entry}`{mark} | {'yes' if ok else 'no'} | {lead:+.3f} | {bound:.3f} | " + " | ".join(parts) + " |")
    print("peer F1: " + ", ".join(f"{n} {f:.3f}" for n, f in peer_f1.items()))
    return 0 if chosen is not None else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    raise SystemExit(main())
