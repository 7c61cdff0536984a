"""Would a cascade save embedding time? A static model decides which rows can have an embedding finding
at all; the full model would embed only those. Measured on the quality cases' own batches and scan
reports.

    .venv/bin/python bench/cascade.py --static /tmp/m2v --work /tmp/q/test --cases natural captions mrpc

``--static`` is a static (model2vec) model distilled locally from the bundled all-MiniLM-L6-v2: a
directory with ``model.safetensors`` (one vector per token) and ``tokenizer.json``. It is read here with
``tokenizers`` and ``safetensors`` (a text's vector is the mean of its tokens' vectors, as model2vec
computes it), so the package does not need model2vec. Distilling needs model2vec's ``distill`` extra,
whose dependencies clash with the project's transformers, so it runs in a virtual environment of its
own (docs/benchmarks.md gives the commands).

``--work`` is a ``bench.quality.run`` work directory whose cases were built and scanned (``pairs.jsonl``,
``plan.jsonl``, ``truth.jsonl``, ``report.json``). For every row, the cascade looks at the static cosine
of each of its texts with every text of the other rows in its batch; a row whose best such cosine is
below the bar ``tau`` is not embedded, and every finding resting on embedding evidence alone (``embedding``,
``anchor-embedding``, ``margin``, ``pair``) that involves it is lost. Printed per case and bar: the share
of texts the full model would still embed, the findings lost, and the true positives (truth label 1)
among the scan's findings that are lost.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.quality.run import read_rows  # noqa: E402
from bench.quality.score import read_truth  # noqa: E402

EMBEDDING_KINDS = {"embedding", "anchor-embedding", "margin", "pair"}


class StaticModel:
    """A model2vec directory read with tokenizers and safetensors: mean of token vectors, unit length."""

    def __init__(self, directory: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        tensors = load_file(str(directory / "model.safetensors"))
        self.table = np.asarray(tensors.get("embeddings", next(iter(tensors.values()))), dtype=np.float32)
        self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.table.shape[1]), dtype=np.float32)
        for i, enc in enumerate(self.tokenizer.encode_batch(texts, add_special_tokens=False)):
            ids = [t for t in enc.ids if t < self.table.shape[0]]
            if ids:
                out[i] = self.table[ids].mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


def best_partner(rows: dict[str, tuple[str, str]], batches: list[list[str]], vectors: dict[str, np.ndarray]) -> dict:
    """Per row id: the highest static cosine of its texts with any text of another row in its batch."""
    best: dict[str, float] = {}
    for batch in batches:
        texts = [t for rid in batch for t in rows[rid]]
        owner = np.repeat(np.arange(len(batch)), 2)
        mat = np.stack([vectors[t] for t in texts])
        sim = mat @ mat.T
        sim[owner[:, None] == owner[None, :]] = -1.0  # a row's own texts do not count
        per_text = sim.max(axis=1)
        for k, rid in enumerate(batch):
            best[rid] = max(best.get(rid, -1.0), float(per_text[2 * k : 2 * k + 2].max()))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--static", type=Path, required=True, help="a model2vec model directory")
    parser.add_argument("--work", type=Path, required=True, help="a bench.quality.run work directory")
    parser.add_argument("--cases", nargs="+", required=True)
    parser.add_argument("--tau", nargs="+", type=float, default=[0.3, 0.4, 0.5, 0.6, 0.7])
    args = parser.parse_args(argv)
    model = StaticModel(args.static)
    print("| case | bar | texts embedded | findings lost | true positives lost |")
    print("|---|---:|---:|---:|---:|")
    for name in args.cases:
        case = args.work / name
        rows = read_rows(case / "pairs.jsonl")
        batches = [json.loads(line)["rows"] for line in (case / "plan.jsonl").open(encoding="utf-8") if line.strip()]
        report = json.loads((case / "report.json").read_text(encoding="utf-8"))
        truth = read_truth(case / "truth.jsonl")
        labels = {key: bool(truth.labels[i]) for key, i in truth.index.items()}
        distinct = sorted({t for pair in rows.values() for t in pair})
        start = time.perf_counter()
        vectors = dict(zip(distinct, model.encode(distinct), strict=True))
        static_s = time.perf_counter() - start
        best = best_partner(rows, batches, vectors)
        findings = [
            (f["anchor_id"], f["candidate_id"], {e["kind"] for e in f["evidence"]})
            for f in report["findings"]
            if f["direction"] == "query_to_doc"
        ]
        positives = [f for f in findings if labels.get((f[0], f[1]), False)]
        for tau in args.tau:
            skipped = {rid for rid, b in best.items() if b < tau}
            kept_texts = {t for rid in rows if rid not in skipped for t in rows[rid]}

            def lost(f: tuple[str, str, set[str]], skipped: set[str] = skipped) -> bool:
                return f[2] <= EMBEDDING_KINDS and (f[0] in skipped or f[1] in skipped)

            n_lost = sum(lost(f) for f in findings)
            tp_lost = sum(lost(f) for f in positives)
            print(
                f"| {name} | {tau:.2f} | {len(kept_texts) / len(distinct):.1%} | "
                f"{n_lost} of {len(findings)} ({n_lost / max(1, len(findings)):.1%}) | "
                f"{tp_lost} of {len(positives)} ({tp_lost / max(1, len(positives)):.1%}) |"
            )
        print(f"({name}: {len(distinct):,} texts, static vectors in {static_s:.2f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
