"""Detection-quality harness: build the labelled cases, run the scan and the peer rules, score them.

    .venv/bin/python -m bench.quality.run --data /work/shared/data --work /tmp/ca-quality

For each case: build pairs/plan/truth under WORK/CASE, run
``contrast-audit scan WORK/CASE/pairs.jsonl --plan WORK/CASE/plan.jsonl --format json --output
WORK/CASE/report.json --quiet`` (plus ``--scan-args``), score its query_to_doc findings against the
truth overall and per evidence kind, score the peers on the same records, and print / write a
markdown table per case and pooled over the cases. Exit 0, or 2 when a case or the scan fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.quality import peers as peer_rules
from bench.quality.cases import (
    CASE_BATCH_SIZE,
    CASES,
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_PAIRS,
    DEFAULT_SEED,
    KINDS,
    PARTS,
    Case,
    write_atomic,
)
from bench.quality.score import (
    Score,
    Truth,
    finding_masks,
    findings_from_report,
    margin_line,
    markdown_table,
    pooled,
    read_truth,
    report_kinds,
    score,
)

DEFAULT_OUT = Path(__file__).with_name("results.md")
SCAN_OK = (0, 1)  # 1 = the gate failed, still a complete report
LABEL_AUDIT_COSINE = 0.9


class HarnessError(Exception):
    """A case could not be built or scanned; the message says which and why."""


@dataclass
class CaseResult:
    case: Case
    scan_command: list[str]
    scan_exit: int
    seconds: dict[str, float]
    scan_scores: dict[str, Score]  # "all" and one per evidence kind
    peer_scores: dict[str, Score] = field(default_factory=dict)
    diagnostics: str = ""


def default_scan_command() -> list[str]:
    return [str(Path(sys.executable).with_name("contrast-audit"))]


def run_scan(case: Case, scan_command: list[str], extra: list[str]) -> tuple[list[str], int, dict]:
    out = case.path
    report_path = out / "report.json"
    report_path.unlink(missing_ok=True)
    command = [
        *scan_command,
        "scan",
        str(out / "pairs.jsonl"),
        "--plan",
        str(out / "plan.jsonl"),
        "--format",
        "json",
        "--output",
        str(report_path),
        "--quiet",
        *extra,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode not in SCAN_OK or not report_path.is_file():
        raise HarnessError(
            f"{case.name}: scan exited {proc.returncode} ({shlex.join(command)}):\n{proc.stderr.strip()[-2000:]}"
        )
    return command, proc.returncode, json.loads(report_path.read_text(encoding="utf-8"))


def check_report(case: Case, truth: Truth, report: dict) -> list[str]:
    """Warnings when the scan did not compare what the truth lists."""
    warnings = []
    batches = report.get("counts", {}).get("batches")
    if batches != case.batches:
        warnings.append(f"{case.name}: the scan planned {batches} batches, the case has {case.batches}")
    compared = report.get("counts", {}).get("candidates_by_direction", {}).get("query_to_doc")
    if compared != len(truth):
        warnings.append(f"{case.name}: the scan compared {compared} query_to_doc pairs, the truth lists {len(truth)}")
    return warnings


def read_rows(path: Path) -> dict[str, tuple[str, str]]:
    rows = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                r = json.loads(line)
                rows[str(r["id"])] = (r["anchor"], r["positive"])
    return rows


def diagnostics(truth: Truth, sim_ac: np.ndarray) -> str:
    """Mean cosine per truth kind, and random pairs the model scores as near-paraphrases (possible
    unlabelled positives)."""
    parts = []
    for kind in KINDS:
        sel = truth.kinds == kind
        if sel.any():
            parts.append(f"{kind} {float(sim_ac[sel].mean()):.3f}")
    random_high = int(((truth.kinds == "random") & (sim_ac >= LABEL_AUDIT_COSINE)).sum())
    return (
        f"Mean cosine(anchor, candidate) by truth kind: {', '.join(parts)}. "
        f"Random (label 0) pairs with cosine >= {LABEL_AUDIT_COSINE}: {random_high:,} "
        f"of {int((truth.kinds == 'random').sum()):,}."
    )


def evaluate_case(
    name: str,
    args: argparse.Namespace,
    scan_command: list[str],
    extra: list[str],
    embedder: list,
) -> CaseResult:
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    try:
        sizes = {"max_pairs": args.max_pairs} if args.max_pairs is not None else {}
        case = CASES[name](
            Path(args.data),
            Path(args.work) / name,
            **sizes,
            batch_size=args.batch_size or CASE_BATCH_SIZE.get(name, DEFAULT_BATCH_SIZE),
            seed=args.seed,
            part=args.part,
        )
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise HarnessError(f"{name}: cannot build the case from {args.data}: {exc}") from exc
    seconds["build"] = time.perf_counter() - start
    truth = read_truth(case.path / "truth.jsonl")

    start = time.perf_counter()
    command, exit_code, report = run_scan(case, scan_command, extra)
    seconds["scan"] = time.perf_counter() - start
    for warning in check_report(case, truth, report):
        print(f"warning: {warning}", file=sys.stderr)
    kinds = report_kinds(report)
    masks, outside = finding_masks(truth, findings_from_report(report), kinds)
    scan_scores = {kind: score(truth, mask, outside if kind == "all" else 0) for kind, mask in masks.items()}
    result = CaseResult(case, command, exit_code, seconds, scan_scores)

    if not args.no_peers:
        start = time.perf_counter()
        if not embedder:
            cache = Path(args.peer_cache) if args.peer_cache else None
            embedder.append(peer_rules.default_embedder(batch_size=args.embed_batch_size, cache=cache))
        texts = peer_rules.pair_texts(read_rows(case.path / "pairs.jsonl"), truth.anchor_ids, truth.candidate_ids)
        peer_masks, sim_ac = peer_rules.run_peers(texts, embedder[0])
        result.peer_scores = {peer: score(truth, mask) for peer, mask in peer_masks.items()}
        result.diagnostics = diagnostics(truth, sim_ac)
        seconds["peers"] = time.perf_counter() - start
    return result


def nothing_flagged(s: Score) -> Score:
    return Score(s.pairs, s.positives, 0, 0, 0, 0)


def method_rows(scan_scores: dict[str, Score], peer_scores: dict[str, Score]) -> list[tuple[str, Score]]:
    rows = [("contrast-audit scan (all evidence)", scan_scores["all"])]
    rows += [(f"scan, evidence `{kind}`", s) for kind, s in sorted(scan_scores.items()) if kind != "all"]
    rows += [(f"peer: {peer}", s) for peer, s in peer_scores.items()]
    return rows


def render(results: list[CaseResult], harness_command: str, args: argparse.Namespace) -> str:
    out = ["# Detection quality: contrast-audit scan vs peer rules\n\n"]
    out.append(
        "Generated by `bench/quality/run.py` (see bench/quality/README.md). A flagged pair is an "
        "(anchor row, other row's positive) comparison called a false negative; scores are over every "
        "ordered in-batch pair of the plan (direction query_to_doc).\n\n"
    )
    out.append("Peer rules:\n\n")
    out += [f"- `{peer}`: {rule}\n" for peer, rule in peer_rules.PEERS.items()]
    out.append("\nCommands:\n\n```\n" + harness_command + "\n")
    out += [shlex.join(r.scan_command) + "\n" for r in results]
    out.append("```\n")
    for r in results:
        c = r.case
        times = ", ".join(f"{stage} {sec:.1f} s" for stage, sec in r.seconds.items())
        out.append(f"\n## {c.name}\n\n")
        out.append(
            f"{c.rows:,} rows in {c.batches} batches of {c.batch_size}; labelled pairs: "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(c.pairs.items()))
            + f"; truth records: {sum(c.truth.values()):,} ({c.positives:,} positive). "
            f"Scan exit code {r.scan_exit}. Wall time: {times}.\n\n"
        )
        out.append(markdown_table(method_rows(r.scan_scores, r.peer_scores)))
        out.append("\n" + margin_line(r.scan_scores["all"], r.peer_scores) + "\n")
        if r.diagnostics:
            out.append("\n" + r.diagnostics + "\n")
    if len(results) > 1:
        kinds = sorted({k for r in results for k in r.scan_scores})
        # a kind missing from one case's report counts as flagging nothing there
        scan_total = {
            k: pooled(r.scan_scores.get(k) or nothing_flagged(r.scan_scores["all"]) for r in results) for k in kinds
        }
        peer_total = {p: pooled(r.peer_scores[p] for r in results) for p in (results[0].peer_scores or {})}
        out.append("\n## Overall (pooled over " + ", ".join(r.case.name for r in results) + ")\n\n")
        out.append(markdown_table(method_rows(scan_total, peer_total)))
        out.append("\n" + margin_line(scan_total["all"], peer_total) + "\n")
    return "".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality.run", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--data", required=True, help="directory holding mrpc/, stsbenchmark/, scifact_beir/")
    parser.add_argument("--work", default="/tmp/ca-quality", help="where cases and reports are written")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument(
        "--max-pairs",
        type=int,
        default=None,
        help=f"cap per label (paraphrase, distractor); default {DEFAULT_MAX_PAIRS}, captions 400, "
        "natural 128 images per draw",
    )
    parser.add_argument(
        "--batch-size", type=int, default=None, help=f"default {DEFAULT_BATCH_SIZE}, 64 for captions and natural"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument(
        "--part",
        choices=PARTS,
        default="all",
        help="held-out protocol: build the cases from one fixed half of the source pairs (tune or test)",
    )
    parser.add_argument(
        "--scan-args", default="", help='extra scan flags, one string: --scan-args "--max-hops 0" (or --scan-args=...)'
    )
    parser.add_argument(
        "--scan-cmd", default=None, help="the scan executable (a command line); default: contrast-audit beside python"
    )
    parser.add_argument("--no-peers", action="store_true", help="skip the peers (no embedding model)")
    parser.add_argument("--embed-batch-size", type=int, default=64)
    parser.add_argument(
        "--peer-cache", default=None, help="an .npz file keeping the peers' vectors between runs (saves time only)"
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="markdown results file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd() + os.sep) else sys.executable
    harness_command = shlex.join([python, "-m", "bench.quality.run", *(sys.argv[1:] if argv is None else argv)])
    scan_command = shlex.split(args.scan_cmd) if args.scan_cmd else default_scan_command()
    extra = shlex.split(args.scan_args)
    print(f"$ {harness_command}", file=sys.stderr)
    embedder: list = []
    results = []
    try:
        for name in args.cases:
            print(f"[{name}] building, scanning, scoring …", file=sys.stderr)
            result = evaluate_case(name, args, scan_command, extra, embedder)
            print(f"$ {shlex.join(result.scan_command)}", file=sys.stderr)
            results.append(result)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = render(results, harness_command, args)
    write_atomic(Path(args.out), text)
    print(text)
    print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
