"""What the HTML report's plots cost on top of a scan.

    .venv/bin/python bench/html_plots.py --rows 100000 --batch-size 64

Writes the synthetic pairs of ``bench/scan_scale.py``, audits them with lexical evidence, then
gives the result an embedding store of random 384-dimensional unit vectors (the plots read the
store the scan already holds; no model runs), and times the per-anchor scores (one more pass over
every in-batch query→doc pair's cosine), all plots, and the whole HTML page. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scan_scale import write_pairs  # noqa: E402

from contrast_audit.api import audit  # noqa: E402
from contrast_audit.config import EmbeddingConfig, build_config  # noqa: E402
from contrast_audit.embed import EmbeddingStore  # noqa: E402


@dataclasses.dataclass
class _Holder:
    store: EmbeddingStore
    name: str = "embedding"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000])
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    from contrast_audit.report.html import render
    from contrast_audit.report.plots import anchor_scores, plots

    print(
        "| rows | in-batch query→doc pairs | anchor scores (s) | all plots, scores included (s) | HTML page, plots included (s) | page size (KiB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.rows:
            path = Path(tmp) / f"pairs-{n}.jsonl"
            write_pairs(path, n)
            cfg = build_config({"embeddings": False, "minhash": False, "batch_size": args.batch_size})
            result = audit([str(path)], cfg)
            rng = np.random.default_rng(0)
            vectors = rng.normal(size=(result.corpus.n_texts, 384)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store = EmbeddingStore(EmbeddingConfig(), query=vectors, doc=vectors)
            result = dataclasses.replace(result, detectors=[*result.detectors, _Holder(store)])
            t0 = time.perf_counter()
            anchor_scores(result)
            t1 = time.perf_counter()
            plots(result)
            t2 = time.perf_counter()
            page = render(result)
            t3 = time.perf_counter()
            pairs = result.judgement.candidates_by_direction.get("query_to_doc", 0)
            print(f"| {n:,} | {pairs:,} | {t1 - t0:.1f} | {t2 - t1:.1f} | {t3 - t2:.1f} | {len(page) / 1024:,.0f} |")


if __name__ == "__main__":
    main()
