"""What pair evidence and its calibration cost in a scan: the scan's wall time, and the time spent in
the pair detector (calibration in ``prepare``, the four cosines in ``detect``), measured in one run.

    .venv/bin/python -m bench.quality.cost /tmp/ca-quality/captions --cold

``--cold`` gives the scan an empty embedding cache, so every text is embedded (a cold scan). The
share printed is the pair detector's time over the whole scan's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from contrast_audit.api import audit
from contrast_audit.config import build_config
from contrast_audit.evidence import default_detectors


class Timed:
    """A detector whose prepare and detect are timed."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.description = inner.description
        self.seconds = 0.0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def prepare(self, corpus) -> None:
        start = time.perf_counter()
        self.inner.prepare(corpus)
        self.seconds += time.perf_counter() - start

    def detect(self, pairs):
        start = time.perf_counter()
        out = self.inner.detect(pairs)
        self.seconds += time.perf_counter() - start
        return out

    def info(self) -> dict:
        return self.inner.info()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality.cost", description=__doc__.splitlines()[0])
    parser.add_argument("case", help="a built case directory (pairs.jsonl, plan.jsonl)")
    parser.add_argument("--cold", action="store_true", help="an empty embedding cache")
    args = parser.parse_args(argv)
    case = Path(args.case)
    with tempfile.TemporaryDirectory(prefix="ca-cost-") as tmp:
        settings = {"plan": str(case / "plan.jsonl")}
        if args.cold:
            settings["cache_dir"] = tmp
        cfg = build_config(settings)
        detectors = [Timed(d) if d.name == "pair" else d for d in default_detectors(cfg)]
        # the embedding store is prepared by the first embedding detector; pair preparation reuses it
        start = time.perf_counter()
        result = audit([str(case / "pairs.jsonl")], replace(cfg), detectors=detectors)
        total = time.perf_counter() - start
    pair = next(d for d in detectors if d.name == "pair")
    print(
        f"{case.name}: scan {total:.1f} s ({'cold' if args.cold else 'warm'} cache), pair evidence and calibration "
        f"{pair.seconds:.2f} s = {100 * pair.seconds / total:.1f}%; findings {result.findings.height}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
