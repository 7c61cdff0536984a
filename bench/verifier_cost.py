"""What the cross-encoder verifier (``scan --verifier``) costs per 1,000 candidates.

    python -m bench.verifier_cost --data /work/shared/data [--pairs 1000] [--model DIR]

Scores ``--pairs`` real sentence pairs (STS-B train, in file order) with a one-output CrossEncoder the
way the verifier does (``Verifier.score``: ``CrossEncoder.predict``, batch 32) and prints the wall
time per 1,000 pairs, after one warm-up batch. Without ``--model`` the cross-encoder is built from
the packaged all-MiniLM-L6-v2 (6 layers, 384 wide, the size of the common ``cross-encoder/ms-marco-
MiniLM-L6-v2`` and ``cross-encoder/stsb-*`` MiniLM models), with its one-output head initialised
from seed 0: its scores mean nothing, its cost is that of a real MiniLM cross-encoder.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from bench.quality.cases import read_sts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--pairs", type=int, default=1000)
    p.add_argument("--model", type=Path, help="a CrossEncoder directory (default: built from the packaged model)")
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from sentence_transformers import CrossEncoder

    from contrast_audit.evidence.verifier import Verifier
    from contrast_audit.model import default_model_dir

    sts = read_sts(args.data / "stsbenchmark" / "sts-train.csv", "train")
    left = [s.text1 for s in sts][: args.pairs]
    right = [s.text2 for s in sts][: args.pairs]
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model
        if path is None:
            torch.manual_seed(0)
            CrossEncoder(str(default_model_dir()), num_labels=1).save_pretrained(tmp)
            path = Path(tmp)
        v = Verifier(str(path), threshold=0.0, batch_size=args.batch_size)
        v.model = v._load()
        v.score(left[: args.batch_size], right[: args.batch_size])  # warm-up
        start = time.perf_counter()
        v.score(left, right)
        seconds = time.perf_counter() - start
    print(
        f"threads {torch.get_num_threads()}, batch {args.batch_size}, {len(left)} pairs in {seconds:.2f} s: "
        f"{seconds * 1000 / len(left):.2f} s per 1,000 candidates"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
