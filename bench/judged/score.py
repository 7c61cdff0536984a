"""Score a scan against the person-judged set: precision per severity and per severity rule, with 95%
Wilson intervals, and the share of judged-equivalent pairs the scan still reports.

    python -m bench.judged.score --data /work/shared/data --work /tmp/judged [--scan-args "..."] [--out FILE]

For each data set it builds the natural training file (``natural.py``), scans it with ``--batch-size 64
--seed S`` and the given flags (the defaults otherwise), and reads every finding whose pair of texts
is judged in ``bench/judged/judgments.jsonl``:

- **precision** of a severity: judged EQUIVALENT / judged findings at that severity (RELATED and
  UNRELATED pairs are not false negatives: the loss is right to push them apart);
- **recall**: of the judged EQUIVALENT pairs of the scanned seeds (drawn from every severity and from
  the unflagged top negatives), the share the scan reports at ``likely`` or ``certain``;
- **coverage**: how many of the scan's findings at each severity are judged. A severity whose findings
  are mostly unjudged is not measured: draw and judge more with ``sample.py``;
- **missed at the top**: of the ``--top-unflagged`` (30) highest-scoring alleged negatives per seed that the
  scan does not report at ``likely`` or ``certain`` (``negatives``), how many are judged and how many of
  those are EQUIVALENT: the false negatives a user meets first and the tool does not stop.

Findings whose severity rests on the data's own labels (``exact`` texts, ``same-anchor``, ``declared``
groups, a ``linked`` row pairing the anchor itself with the candidate) are false negatives of the loss
by construction: the data asks the model to rank the candidate first for this very anchor text in
another row. Read by a person they measure how far the data's labels hold, not the detector, so they
are counted apart ("labels") from the findings that rest on evidence ("evidence").
"""

from __future__ import annotations

import argparse
import shlex
from collections import Counter, defaultdict
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
    wilson,
)

GATED = ("certain", "likely")
GATED_RANK = {"certain": 2, "likely": 1, "suspect": 0}
BY_CONSTRUCTION = ("exact", "same-anchor", "declared", "linked: one hop from the anchor")


def by_construction(rule: str | None) -> bool:
    return bool(rule) and rule.startswith(BY_CONSTRUCTION)


def _p(k: int, n: int) -> str:
    if n == 0:
        return "–"
    lo, hi = wilson(k, n)
    return f"{k / n:.2f} ({lo:.2f}–{hi:.2f})"


def score_set(name: str, judged: dict[str, dict], args: argparse.Namespace) -> dict[str, Any]:
    pairs = natural.build(name, args.data, args.work)
    rows = read_rows(pairs)
    extra = shlex.split(args.scan_args)
    findings: list[dict] = []
    vetoes: list[tuple[str, str]] = []
    top: dict[int, list[str]] = {}
    for seed in args.seeds:
        command = scan_command(args.scan_cmd)
        report = run([*command, "scan", str(pairs), *plan_args(seed), *extra], args.work / name / f"score-{seed}.json")
        findings += findings_with_texts(report, rows)
        vetoes += guard_vetoes(report, rows)
        if args.top_unflagged:
            negs = run(
                [*command, "negatives", str(pairs), *plan_args(seed), "--top", "300", *extra],
                args.work / name / f"score-negatives-{seed}.json",
            )["negatives"]
            top[seed] = unreported_keys(negs, args.top_unflagged)
    out = tally(name, findings, judged, args.seeds)
    out["vetoes"] = Counter()
    for key, guard in set(vetoes):
        if key in judged:
            out["vetoes"][(guard, judged[key]["label"] == "EQUIVALENT")] += 1
    out["top"] = {seed: [judged[k]["label"] if k in judged else None for k in keys] for seed, keys in top.items()}
    return out


def guard_vetoes(report: dict[str, Any], rows: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    """(pair key, guard) for every guard that vetoed a semantic match of a pair the scan reports short of
    likely: its ``vetoed`` pairs and its suspect findings' ``why_not``."""
    pairs = [f for f in report["findings"] if f["severity"] == "suspect"] + [
        {**v, "severity": None} for v in report.get("vetoed", [])
    ]
    out = []
    for f in findings_with_texts({"findings": pairs}, rows):
        out += [(f["key"], w["guard"]) for w in f.get("why_not") or [] if w.get("guard")]
    return out


def unreported_keys(negatives: list[dict], n: int) -> list[str]:
    """The keys of the ``n`` highest-scoring alleged negatives not reported at likely or certain."""
    out = []
    for neg in negatives:
        if neg.get("severity") in GATED:
            continue
        anchor = neg["positive_text"] if neg["direction"].startswith("doc_to") else neg["anchor_text"]
        out.append(pair_key(neg["direction"], anchor, neg["candidate_text"]))
        if len(out) == n:
            break
    return out


def tally(name: str, findings: list[dict], judged: dict[str, dict], seeds: list[int]) -> dict[str, Any]:
    """Judged precision of one data set's findings (each pair of texts once, at its highest severity)
    and the share of its judged-equivalent pairs reported at likely or certain."""
    reported: dict[str, dict] = {}
    for f in findings:
        best = reported.get(f["key"])
        if best is None or GATED_RANK[f["severity"]] > GATED_RANK[best["severity"]]:
            reported[f["key"]] = f
    mine = {k: j for k, j in judged.items() if j["dataset"] == name}
    by_sev: dict[str, Counter] = defaultdict(Counter)
    by_rule: dict[str, Counter] = defaultdict(Counter)
    count = Counter(f["severity"] for f in reported.values())
    for f in reported.values():
        if f["severity"] in GATED:
            count["labels" if by_construction(f.get("severity_rule")) else "evidence"] += 1
    for key, f in reported.items():
        j = mine.get(key)
        if j is None:
            continue
        by_sev[f["severity"]][j["label"]] += 1
        if f["severity"] in GATED:
            by_sev["labels" if by_construction(f.get("severity_rule")) else "evidence"][j["label"]] += 1
            by_rule[f.get("severity_rule") or "(not recorded)"][j["label"]] += 1
    equivalent = [k for k, j in mine.items() if j["label"] == "EQUIVALENT" and j["sampled_as"]["seed"] in seeds]
    kept = sum(1 for k in equivalent if k in reported and reported[k]["severity"] in GATED)
    return {
        "name": name,
        "count": count,
        "by_sev": by_sev,
        "by_rule": by_rule,
        "equivalent": len(equivalent),
        "kept": kept,
    }


def render(results: list[dict[str, Any]], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "`labels`: certain and likely findings that rest on the data's own labels (exact, same-anchor, declared, "
        "a linked row pairing the anchor with the candidate); `evidence`: those that rest on the detectors' "
        "evidence. Both are also counted in their severity's row.",
        "",
        "| data | severity | reported | judged | equivalent | precision (95% Wilson) |",
        "|---|---|---:|---:|---:|---|",
    ]
    total: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        for sev in ("certain", "likely", "suspect", "labels", "evidence"):
            c = r["by_sev"].get(sev, Counter())
            n, k = sum(c.values()), c["EQUIVALENT"]
            total[sev].update(c)
            if r["count"][sev] or n:
                lines.append(f"| {r['name']} | {sev} | {r['count'][sev]} | {n} | {k} | {_p(k, n)} |")
        c = r["by_sev"].get("certain", Counter()) + r["by_sev"].get("likely", Counter())
        n, k = sum(c.values()), c["EQUIVALENT"]
        lines.append(
            f"| {r['name']} | **certain + likely** | {r['count']['certain'] + r['count']['likely']} | {n} | {k} | **{_p(k, n)}** |"
        )
    for sev in ("certain", "likely", "suspect", "labels", "evidence"):
        n, k = sum(total[sev].values()), total[sev]["EQUIVALENT"]
        lines.append(f"| all | {sev} | {sum(r['count'][sev] for r in results)} | {n} | {k} | {_p(k, n)} |")
    lines += ["", "| data | judged equivalent pairs | reported at likely or certain | share |", "|---|---:|---:|---|"]
    eq = kept = 0
    for r in results:
        eq, kept = eq + r["equivalent"], kept + r["kept"]
        lines.append(f"| {r['name']} | {r['equivalent']} | {r['kept']} | {_p(r['kept'], r['equivalent'])} |")
    lines.append(f"| all | {eq} | {kept} | {_p(kept, eq)} |")
    if any(r.get("top") for r in results):
        lines += [
            "",
            "| data | seed | top negatives short of likely | judged | equivalent |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in results:
            for seed, labels in sorted(r.get("top", {}).items()):
                judged_n = sum(1 for x in labels if x is not None)
                lines.append(
                    f"| {r['name']} | {seed} | {len(labels)} | {judged_n} | {sum(1 for x in labels if x == 'EQUIVALENT')} |"
                )
    vetoes: Counter = Counter()
    for r in results:
        vetoes.update(r.get("vetoes", Counter()))
    if vetoes:
        lines += [
            "",
            "| guard (its vetoes of judged pairs the scan leaves short of likely, all data) | judged | equivalent |",
            "|---|---:|---:|",
        ]
        for guard in sorted({g for g, _ in vetoes}):
            n = vetoes[(guard, True)] + vetoes[(guard, False)]
            lines.append(f"| {guard} | {n} | {vetoes[(guard, True)]} |")
    rules: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        for rule, c in r["by_rule"].items():
            rules[rule].update(c)
    lines += [
        "",
        "| severity rule (certain and likely findings, all data) | judged | equivalent | precision |",
        "|---|---:|---:|---|",
    ]
    for rule in sorted(rules):
        n, k = sum(rules[rule].values()), rules[rule]["EQUIVALENT"]
        lines.append(f"| {rule} | {n} | {k} | {_p(k, n)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    data_arguments(p)
    p.add_argument("--scan-args", default="", help="extra scan flags (the defaults otherwise)")
    p.add_argument("--out", type=Path, help="also write the tables here")
    p.add_argument(
        "--top-unflagged",
        type=int,
        default=30,
        help="judge the N highest-scoring negatives short of likely per seed (0: skip the negatives runs)",
    )
    args = p.parse_args(argv)
    judged = read_judgments()
    results = [score_set(name, judged, args) for name in args.sets]
    command = "python -m bench.judged.score " + shlex.join(argv if argv is not None else __import__("sys").argv[1:])
    text = render(results, command)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
