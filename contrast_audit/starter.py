"""``contrast-audit init``: a commented starter ``contrast-audit.toml`` listing every settings key
with its default and meaning. Every line is commented out, so the file changes nothing until a
key is uncommented; keys without a default show an example value instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contrast_audit.config import _FILE_KEYS, AuditConfig
from contrast_audit.errors import ConfigError
from contrast_audit.io import write_atomic

FILE_NAME = "contrast-audit.toml"

# Sections of the file, and per key: (meaning, example value for keys whose default is "none").
SECTIONS: list[tuple[str, dict[str, tuple[str, Any]]]] = [
    (
        "Columns (default: detected from the file's layout, see docs/scan.md)",
        {
            "anchor": ("Column holding the anchor (query).", "question"),
            "positive": ("Column holding the positive (document); a list column gives one row per item.", "answer"),
            "negatives": ("Hard-negative columns, or one list column.", ["hard_negative"]),
            "negative": ("The same as negatives (one column name or a list).", "hard_negative"),
            "id": ("Column of unique row ids (default: the 0-based row number).", "id"),
            "source": ("Column naming each row's source, for breakdowns.", "source"),
            "cohort": ("Column naming each row's cohort, for breakdowns.", "cohort"),
            "group": ("Column whose equal values declare rows mutual positives.", "group"),
            "on_bad_row": (
                "Bad rows: skip-empty skips rows whose text is empty after normalisation and stops at any other; "
                "error stops at every bad row; skip skips every one. Skipped rows are reported.",
                None,
            ),
            "delimiter": ("Separator of CSV/TSV files (default: from the extension, or detected).", ";"),
            "max_memory": (
                "Refuse input needing more memory than this before the costly stages: auto, off or a size (16G).",
                None,
            ),
            "engine": (
                "auto (in memory when the input fits max_memory, else streamed), memory, stream, or ray.",
                None,
            ),
            "ray_address": (
                'The Ray cluster engine = "ray" joins (host:port or auto; only with that engine); unset: a '
                "local instance.",
                "head-node:6379",
            ),
        },
    ),
    (
        "Text normalisation (what counts as the same text)",
        {
            "unicode_form": ('Unicode normal form: NFC, NFKC, NFD, NFKD or "none".', None),
            "casefold": ("Fold case.", None),
            "collapse_whitespace": ("Collapse runs of whitespace.", None),
            "strip_chars": ("Characters folded from both ends of a text.", None),
        },
    ),
    (
        "Batch plan (reproduce your trainer's batches)",
        {
            "batch_size": ("Per-device batch size.", None),
            "seed": ("The trainer's seed.", None),
            "epochs": ("Epochs to plan.", None),
            "drop_last": ("Drop the last incomplete batch.", None),
            "world_size": ("Devices whose embeddings are gathered: the comparison set is the global batch.", None),
            "sampler": ("sentence-transformers batch sampler: random or no-duplicates.", None),
            "plan": (
                'A plan file from your own loop (JSONL, {"rows": [id, ...]} per batch) or a manifest.',
                "plan.jsonl",
            ),
        },
    ),
    (
        "Loss",
        {
            "directions": (
                "MultipleNegativesRankingLoss directions: query_to_doc (required), query_to_query, doc_to_query, doc_to_doc.",
                None,
            ),
        },
    ),
    (
        "Lexical evidence",
        {
            "max_hops": ("Longest chain of positive pairs that links two texts; 0 turns linked evidence off.", None),
            "minhash": ("MinHash near-duplicate evidence.", None),
            "minhash_threshold": ("Verified Jaccard similarity at which two texts are near-duplicates.", None),
            "num_perm": ("MinHash permutations.", None),
            "shingle": ("MinHash shingles: word or char n-grams.", None),
            "ngram": ("Shingle length in words or characters.", None),
            "minhash_seed": ("MinHash seed (signatures with different seeds are never compared).", None),
        },
    ),
    (
        "Guards against false near-duplicate claims",
        {
            "number_guard": (
                "Short texts (at most N words) whose numbers differ are never near-duplicates; 0: off.",
                None,
            ),
            "entity_guard": (
                "Short texts (at most N words) that each name something the other does not are never near-duplicates; 0: off.",
                None,
            ),
            "alignment": ("Token alignment below which short texts are never near-duplicates; 0: off.", None),
            "alignment_words": (
                "Texts of at most N words count as short for the alignment and word-order guards.",
                None,
            ),
            "alignment_match": ("Token cosine (below 1) at which a token is matched; 0 scores soft (BERTScore).", None),
            "word_order": ("Word-order agreement below which short texts are never near-duplicates; 0: off.", None),
            "negation_guard": (
                "Short texts (at most N words), one negated and the other not, are never near-duplicates; 0: off.",
                None,
            ),
            "near_identical": (
                "Embedding cosine from which a match skips the word-order and alignment guards; 0: off.",
                None,
            ),
        },
    ),
    (
        "Embedding evidence (sentence-transformers)",
        {
            "embeddings": ("Embedding evidence with the model below.", None),
            "model": (
                "A local sentence-transformers model directory (default: the packaged all-MiniLM-L6-v2).",
                "models/my-encoder",
            ),
            "device": ("Device for the model: cpu, cuda, cuda:1, mps (default: chosen automatically).", "cpu"),
            "query_prompt": ("Prompt/prefix for anchors, as in training.", None),
            "doc_prompt": ("Prompt/prefix for positives and negatives, as in training.", None),
            "embed_batch_size": ("Texts per encode batch.", None),
            "precision": ("The model's arithmetic: fp32, or bf16 (faster on CPUs with bfloat16 instructions).", None),
            "first_stage": (
                "Which rows the full model embeds: static (those a static model finds near another row of their "
                "batch, plus a sample) or none (every text).",
                None,
            ),
            "backend": (
                "What runs the model: auto (ONNX Runtime on a CPU-only machine where the model exports exactly, "
                "else torch), onnx or torch.",
                None,
            ),
            "cache_dir": (
                "Embedding cache directory (default: $CONTRAST_AUDIT_CACHE_DIR or ~/.cache/contrast-audit).",
                ".contrast-audit-cache",
            ),
            "cache": ("Read and write the embedding cache.", None),
            "positive_threshold": ("Cosine to the anchor's positive at which a candidate is a near-duplicate.", None),
            "anchor_threshold": ("Cosine between two anchors at which each row's positive answers the other.", None),
            "margin": ("Also report margin-only findings (suspect).", None),
            "margin_support": (
                "Cosine to the positive that makes a margin finding likely in query->document rows (off: suspect).",
                0.65,
            ),
            "relative_margin": ("Margin rule sim(a, c) > sim(a, p) * (1 - margin).", None),
            "absolute_margin": ("Margin rule sim(a, c) > sim(a, p) - margin; replaces relative_margin.", 0.1),
            "above_positive": (
                "Quantile of the data's own positive scores above which a candidate beating its row's positive is likely "
                "(e.g. 0.9); 0: off.",
                None,
            ),
            "margin_doc_ratio": (
                "Margin findings are likely only where the positive has this many times the anchor's words.",
                None,
            ),
            "pair": ("Pair evidence: two rows compared through their four cross cosines.", None),
            "pair_evidence": ("The same as pair.", True),
            "calibration": ("Pair bars from the data's own anchor-positive cosines (auto) or fixed (off).", None),
            "calibration_quantile": ("Quantile of the rows' own anchor-positive cosines that sets the pair bar.", None),
            "calibration_floor": ("No calibrated pair bar goes under this cosine.", None),
            "pair_threshold": ("Fixed pair bar for every role pairing; wins over calibration.", 0.85),
            "verifier": (
                "A local CrossEncoder directory that rescores likely and suspect findings.",
                "models/my-cross-encoder",
            ),
            "verifier_threshold": ("The verifier's bar, fixed; by default calibrated from the data's own pairs.", 0.5),
            "verifier_quantile": ("Quantile of the verifier's scores on the data's own pairs that sets its bar.", None),
        },
    ),
    (
        "Reference data (scan --against/--eval; docs/ci.md)",
        {
            "against": (
                "Existing training data (files or globs): new rows that repeat or paraphrase it.",
                ["data/*.jsonl"],
            ),
            "eval": (
                "Evaluation data (pair files, single-text files with eval_text, or BEIR queries/corpus): new rows that leak it.",
                ["eval/queries.jsonl"],
            ),
            "against_columns": (
                "Columns of the existing data when they differ from the new data's (anchor, positive, negatives, id); "
                "an [against] table with paths and these keys does the same.",
                {"anchor": "question", "positive": "answer"},
            ),
            "eval_columns": (
                "Columns of the eval data (anchor, positive, negatives, id); an [eval] table with paths, these keys "
                "and text does the same.",
                {"anchor": "query", "positive": "passage"},
            ),
            "eval_text": ("The eval files hold one text per row, in this column.", "question"),
            "eval_alignment": (
                "Alignment guard for matches with eval data (0: off, a leak missed costs more than a false alarm; "
                "existing data uses alignment).",
                None,
            ),
            "with_existing": ("Plan the in-batch audit over new and existing rows together.", None),
            "repeats": (
                "With a baseline, report new rows that repeat (exactly or nearly) old rows of the scanned data.",
                None,
            ),
            "index": (
                "Directory of the reference index (default: index/ under the cache directory).",
                ".contrast-audit-index",
            ),
            "use_index": ("Read and write the reference index.", None),
            "baseline": (
                "A JSON report of an earlier scan: what it holds is not counted by the gate.",
                "baseline.json",
            ),
            "since": (
                "A git revision: the baseline is the scanned files as they are there (instead of baseline).",
                "origin/main",
            ),
        },
    ),
    (
        "Manifest (contrast-audit manifest)",
        {
            "strategy": (
                "mask: your plan with findings masked; group: related rows re-planned into different batches, the "
                "rest masked; multi-positive: related rows batched together as each other's positives; cluster: "
                "topic-hard batches (k-means on the anchors' embeddings), false negatives masked.",
                None,
            ),
            "mask_severity": ("Act on findings of this severity and above: certain, likely or suspect.", None),
            "balance": (
                "At most this many rows of one anchor (same anchor text or group) per batch, or the fewest the "
                "epoch allows; 1 spreads each anchor's rows as evenly as possible (mask, group, cluster).",
                1,
            ),
            "clusters": ("k of the cluster strategy's k-means (default: distinct anchors / global batch size).", 64),
            "weight": (
                "anchor: each row's loss term weighted so every anchor (same anchor text or group) carries the same "
                "share of the loss; the weights are written into the manifest and applied by the trainer.",
                "anchor",
            ),
        },
    ),
    (
        "Report and gate",
        {
            "format": ("Report format: text, json, markdown, html or sarif.", None),
            "fail_on": (
                "Gate: exit 1 when any METRIC OP NUMBER holds (see docs/scan.md for the metrics).",
                ["findings>0"],
            ),
        },
    ),
]

_TOP_LEVEL_DEFAULTS = {
    "on_bad_row": "skip-empty",
    "max_memory": "auto",
    "engine": "auto",
    "ray_address": None,
    "delimiter": None,
    "format": "text",
    "fail_on": None,
    "strategy": "mask",
    "mask_severity": "likely",
    "balance": None,
    "clusters": None,
    "weight": None,
    "baseline": None,
    "since": None,
}


def default_of(key: str) -> Any:
    """The default of a settings key, as the configuration file spells it (``None``: no default)."""
    section, attr = _FILE_KEYS[key]
    if section is None:
        return _TOP_LEVEL_DEFAULTS.get(attr)
    value = getattr(getattr(AuditConfig(), section), attr)
    if key in ("negative", "pair_evidence"):
        return None  # an alias has no default of its own
    if isinstance(value, tuple):
        return list(value)
    return value


def toml_value(value: Any) -> str:
    """A TOML literal for strings, numbers, booleans and lists of them (JSON's forms are TOML's)."""
    if isinstance(value, float) and value.is_integer():
        return f"{value:.1f}"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value, ensure_ascii=False)


def render() -> str:
    """The starter file's text."""
    documented = {key for _, keys in SECTIONS for key in keys}
    missing = [key for key in _FILE_KEYS if key not in documented]  # listed, undescribed (a test fails)
    sections = (
        [*SECTIONS, ("Other settings", {key: ("(undocumented)", None) for key in missing})] if missing else SECTIONS
    )
    out = [
        "# contrast-audit settings. Command-line flags override these; every line is commented out,",
        "# so this file changes nothing until you uncomment a key. Keys may be written with - or _.",
        "# The same keys also work under [tool.contrast-audit] in pyproject.toml.",
        "",
    ]
    for title, keys in sections:
        out.append(f"# --- {title} ---")
        out.append("")
        for key, (meaning, example) in keys.items():
            default = default_of(key)
            name = key.replace("_", "-")
            if default is None:
                out.append(f"# {meaning} No default; for example:")
                out.append(f"# {name} = {toml_value(example)}")
            else:
                out.append(f"# {meaning}")
                out.append(f"# {name} = {toml_value(default)}")
            out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def write(path: Path, *, force: bool = False) -> Path:
    """Write the starter file to ``path`` (a directory gets ``contrast-audit.toml``)."""
    target = path / FILE_NAME if path.is_dir() else path
    if target.exists() and not force:
        raise ConfigError(f"{target}: already exists", fix="pass --force to overwrite it, or --output another path")
    write_atomic(target, render())
    return target


__all__ = ["FILE_NAME", "SECTIONS", "default_of", "render", "toml_value", "write"]
