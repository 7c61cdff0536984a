"""What a new rule would add: candidate rules over the judged pairs a scan leaves short of ``likely``.

    python -m bench.judged.rules --work /tmp/judged [--out FILE]

``--work`` is a folder ``score.py`` filled (its ``SET/pairs.jsonl`` and ``SET/score-SEED.json``). For every
judged pair the tool computes, with the bundled model, what a reader-like rule could use:

- ``ac``, ``pc``, ``ap``: the cosines anchor–candidate, positive–candidate and anchor–positive (sentence
  vectors, as the scan's ``embedding`` detector reads them);
- ``cover``: how much of the candidate the anchor covers, token by token: each candidate token's best
  cosine to the anchor's tokens (the model's token vectors), weighted by the token's idf over the judged
  texts (BERTScore's precision of the candidate against the anchor).

It then prints, per data set and for each rule, ``equivalent/flagged`` among the judged pairs the scan
reports short of ``likely``: what turning the rule on would add, and how often a reader calls it right.
A rule worth shipping adds equivalents at 0.90 or better on every set (docs/quality.md).
"""

from __future__ import annotations

import argparse
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.judged.common import findings_with_texts, read_judgments, read_rows
from bench.judged.natural import BUILDERS
from bench.judged.score import GATED, GATED_RANK

Rule = Callable[[dict[str, float]], bool]

RULES: dict[str, Rule] = {
    "ac >= ap, ac >= 0.75": lambda f: f["ac"] >= f["ap"] and f["ac"] >= 0.75,
    "ac >= ap, ac >= 0.80": lambda f: f["ac"] >= f["ap"] and f["ac"] >= 0.80,
    "ac >= ap + 0.05, ac >= 0.80": lambda f: f["ac"] >= f["ap"] + 0.05 and f["ac"] >= 0.80,
    "pc >= ap, pc >= 0.75": lambda f: f["pc"] >= f["ap"] and f["pc"] >= 0.75,
    "min(ac, pc) >= 0.95 ap, >= 0.75": lambda f: (
        min(f["ac"], f["pc"]) >= 0.95 * f["ap"] and min(f["ac"], f["pc"]) >= 0.75
    ),
    "cover >= 0.85": lambda f: f["cover"] >= 0.85,
    "cover >= 0.90": lambda f: f["cover"] >= 0.90,
    "cover >= 0.80, ac >= ap": lambda f: f["cover"] >= 0.80 and f["ac"] >= f["ap"],
}


def current_severity(work: Path, sets: list[str]) -> dict[str, str]:
    """Per judged-pair key, the highest severity the scans in ``work`` report it at."""
    out: dict[str, str] = {}
    for name in sets:
        rows = read_rows(work / name / "pairs.jsonl")
        for report in sorted((work / name).glob("score-[0-9]*.json")):
            import json

            for f in findings_with_texts(json.loads(report.read_text(encoding="utf-8")), rows):
                best = out.get(f["key"])
                if best is None or GATED_RANK[f["severity"]] > GATED_RANK[best]:
                    out[f["key"]] = f["severity"]
    return out


def features(judged: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per key, the cosines and the token cover of its three texts (the bundled model, on this CPU)."""
    from sentence_transformers import SentenceTransformer

    from contrast_audit.model import default_model_dir

    model = SentenceTransformer(str(default_model_dir()), device="cpu")
    texts = sorted({j[r] for j in judged.values() for r in ("anchor", "positive", "candidate")})
    sentence = dict(zip(texts, model.encode(texts, batch_size=64, normalize_embeddings=True), strict=True))
    tokens = model.encode(texts, output_value="token_embeddings", batch_size=32)
    ids = model.tokenizer(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]
    df = Counter(t for x in ids for t in set(x))
    token: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for text, vectors, seq in zip(texts, tokens, ids, strict=True):
        v = vectors.numpy()[1:-1]  # without [CLS] and [SEP]
        token[text] = (
            v / np.linalg.norm(v, axis=1, keepdims=True),
            np.array([math.log((len(texts) + 1) / (df[t] + 1)) for t in seq[1:-1]]),
        )

    def cover(candidate: str, anchor: str) -> float:
        c, weight = token[candidate]
        best = (c @ token[anchor][0].T).max(axis=1)
        return float((best * weight).sum() / weight.sum())

    out = {}
    for key, j in judged.items():
        a, p, c = (sentence[j[r]] for r in ("anchor", "positive", "candidate"))
        out[key] = {
            "ac": float(a @ c),
            "pc": float(p @ c),
            "ap": float(a @ p),
            "cover": cover(j["candidate"], j["anchor"]),
        }
    return out


def table(judged: dict[str, dict], severity: dict[str, str], feats: dict[str, dict], sets: list[str]) -> str:
    short = {k: j for k, j in judged.items() if severity.get(k) not in GATED}
    lines = [
        "| rule | " + " | ".join(sets) + " |",
        "|---|" + "---:|" * len(sets),
        "| (judged short of likely: equivalent / all) | "
        + " | ".join(
            f"{sum(j['label'] == 'EQUIVALENT' for j in short.values() if j['dataset'] == s)}"
            f"/{sum(1 for j in short.values() if j['dataset'] == s)}"
            for s in sets
        )
        + " |",
    ]
    for name, rule in RULES.items():
        cells = []
        for s in sets:
            hit = [j for k, j in short.items() if j["dataset"] == s and rule(feats[k])]
            cells.append(f"{sum(j['label'] == 'EQUIVALENT' for j in hit)}/{len(hit)}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, required=True, help="a folder bench.judged.score filled")
    p.add_argument("--sets", nargs="+", default=list(BUILDERS), choices=list(BUILDERS))
    p.add_argument("--out", type=Path, help="also write the table here")
    args = p.parse_args(argv)
    judged = {k: j for k, j in read_judgments().items() if j["dataset"] in args.sets}
    text = table(judged, current_severity(args.work, args.sets), features(judged), args.sets)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
