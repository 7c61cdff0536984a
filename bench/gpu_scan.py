"""A 1M-pair scan with embeddings on an NVIDIA GPU, end to end, cold then warm; figures to a folder.

    python bench/gpu_scan.py --rows 1000000 --out "${OUT:-/tmp/ca-gpu}"
    python bench/gpu_scan.py --data pairs.jsonl --out /tmp/ca-gpu --embed-batch-size 1024
    python bench/gpu_scan.py --rows 1000000 --out /tmp/ca-gpu --engines memory ray   # needs the ray extra

Needs a machine with an NVIDIA GPU, a CUDA build of torch and this project installed with its
dependencies and the bundled model (or ``--model DIR``). Writes the synthetic pair file of
``bench/scan_scale.py`` (or scans ``--data``), then runs the whole CLI twice with one empty cache
directory: ``scan --device cuda --format json --output`` cold (every text embedded on the GPU) and
warm (every vector from the cache). Records wall and CPU seconds and peak RSS of each process, the
GPU's peak memory use (``nvidia-smi`` sampled every 200 ms), the report's counts and embedding figures,
and ``nvidia-smi``'s description of the GPU, into ``results.json`` and ``results.md`` in ``--out``.
With ``--engines memory ray`` each engine runs cold and warm with a cache of its own (``--engine ray``:
the vectors on a local Ray instance's actors, one per GPU), and the table says whether each engine's
findings are the first engine's.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scan_scale import timed, write_pairs  # noqa: E402


def _smi(*query: str) -> str:
    try:
        return subprocess.run(["nvidia-smi", *query], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"nvidia-smi failed ({exc}): this script needs an NVIDIA GPU") from exc


def run_with_gpu_memory(cmd: list[str], log: Path) -> dict:
    """Run ``cmd`` while sampling the GPU's used memory; wall, CPU, RSS and the GPU peak (MiB)."""
    with log.open("w") as handle:
        sampler = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-lms", "200"],
            stdout=handle,
            stderr=subprocess.DEVNULL,
        )
        try:
            wall, cpu, rss = timed(cmd)
        finally:
            sampler.terminate()
            sampler.wait()
    used = [int(x) for x in log.read_text().split() if x.isdigit()]
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mib": round(rss),
        "gpu_peak_mib": max(used, default=None),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="synthetic rows (ignored with --data)")
    parser.add_argument("--data", type=Path, help="scan this pair file instead of a synthetic one")
    parser.add_argument("--out", type=Path, required=True, help="folder for results.json and results.md")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--embed-batch-size", type=int, default=512)
    parser.add_argument("--scan-args", default="", help="extra scan flags, e.g. '--model DIR'")
    parser.add_argument("--engines", nargs="+", default=["memory"], choices=["memory", "ray"])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = _smi("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")
    exe = str(Path(sys.executable).with_name("contrast-audit"))
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = Path(tmp) / f"pairs_{args.rows}.jsonl"
            write_pairs(data, args.rows)
        runs = {}
        reference = None
        for engine in args.engines:
            cache = Path(tmp) / f"cache-{engine}"
            for name in ("cold", "warm"):
                label = f"{engine} {name}" if len(args.engines) > 1 else name
                report = Path(tmp) / f"{engine}-{name}.json"
                cmd = [
                    exe,
                    "scan",
                    str(data),
                    "--device",
                    "cuda",
                    "--engine",
                    engine,
                    "--batch-size",
                    str(args.batch_size),
                    "--embed-batch-size",
                    str(args.embed_batch_size),
                    "--cache-dir",
                    str(cache),
                    "--format",
                    "json",
                    "--output",
                    str(report),
                    "-q",
                    *shlex.split(args.scan_args),
                ]
                runs[label] = run_with_gpu_memory(cmd, Path(tmp) / f"{engine}-{name}-gpu.log")
                result = json.loads(report.read_text())
                findings = (result["findings"], result["mislabelled_negatives"])
                reference = findings if reference is None else reference
                runs[label]["same_findings"] = findings == reference
                runs[label]["counts"] = {
                    k: result["counts"].get(k) for k in ("rows", "texts", "candidates", "findings")
                }
                runs[label]["embedding"] = result.get("detectors", {}).get("embedding", {})
                print(f"{label}: {runs[label]}", flush=True)
    summary = {
        "gpu": gpu,
        "machine": platform.platform(),
        "data": str(args.data or f"synthetic {args.rows} rows"),
        "runs": runs,
    }
    (args.out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        f"GPU: {gpu}; data: {summary['data']}; batch size {args.batch_size}, embed batch {args.embed_batch_size}",
        "",
        "| run | wall s | CPU s | peak RSS MiB | GPU peak MiB | texts | findings | findings = first run's |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
        *(
            f"| {name} | {r['wall_s']} | {r['cpu_s']} | {r['peak_rss_mib']} | {r['gpu_peak_mib']} | "
            f"{r['counts']['texts']} | {r['counts']['findings']} | {'yes' if r['same_findings'] else 'no'} |"
            for name, r in runs.items()
        ),
    ]
    (args.out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
