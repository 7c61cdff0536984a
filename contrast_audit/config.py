"""Frozen settings for one audit, and ``[tool.contrast-audit]`` configuration files.

Precedence: command-line flags, then the configuration file, then the defaults below. The
effective configuration is echoed in every report (``AuditConfig.to_dict``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import tomllib

from contrast_audit.errors import ConfigError

DIRECTIONS = ("query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc")
SAMPLERS = ("random", "no-duplicates")
ON_BAD_ROW = ("skip-empty", "error", "skip")
ENGINES = ("auto", "memory", "stream", "ray")
STRATEGIES = ("mask", "group", "multi-positive", "cluster")  # manifest --strategy
WEIGHTS = ("anchor",)  # manifest --weight
MASK_SEVERITIES = ("certain", "likely", "suspect")  # evidence.SEVERITIES (that package imports this module)

# Characters folded from both ends of a text by default: sentence punctuation, quotes and
# brackets. Symbols that carry meaning at the edge of a text (``C++``, ``C#``, ``$5``, ``-1``) are kept.
DEFAULT_STRIP_CHARS = ".,;:!?¡¿\"'`“”‘’«»„‚()[]{}<>…–—"


@dataclass(frozen=True)
class ColumnMapping:
    """Which input columns hold each role; ``None`` means auto-detect."""

    anchor: str | None = None
    positive: str | None = None
    negatives: tuple[str, ...] = ()
    id: str | None = None
    source: str | None = None
    cohort: str | None = None
    group: str | None = None


@dataclass(frozen=True)
class NormaliseConfig:
    """How texts are folded before they are compared for exact identity."""

    unicode_form: str | None = "NFKC"
    casefold: bool = True
    collapse_whitespace: bool = True
    strip_chars: str = DEFAULT_STRIP_CHARS

    def __post_init__(self) -> None:
        if self.unicode_form not in (None, "NFC", "NFKC", "NFD", "NFKD"):
            raise ConfigError(
                f"normalise.unicode_form must be one of NFC, NFKC, NFD, NFKD or none, got {self.unicode_form!r}"
            )


@dataclass(frozen=True)
class LinkConfig:
    """The ``linked`` detector: chains of the dataset's own positive pairs."""

    max_hops: int = 2

    def __post_init__(self) -> None:
        if self.max_hops < 0:
            raise ConfigError(f"max_hops must be >= 0 (0 turns linked evidence off), got {self.max_hops}")


@dataclass(frozen=True)
class PlanConfig:
    """How batches are formed: the trainer's sampler, or a plan file."""

    batch_size: int = 32
    seed: int = 42
    epochs: int = 1
    drop_last: bool = False
    world_size: int = 1
    sampler: str = "random"
    plan_file: str | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.epochs < 1:
            raise ConfigError(f"epochs must be >= 1, got {self.epochs}")
        if self.world_size < 1:
            raise ConfigError(f"world_size must be >= 1, got {self.world_size}")
        if self.sampler not in SAMPLERS:
            raise ConfigError(f"sampler must be one of {', '.join(SAMPLERS)}, got {self.sampler!r}")


@dataclass(frozen=True)
class PolicyConfig:
    """How semantic evidence is guarded (evidence/guards.py). Number guard: short texts (at most
    ``number_guard_words`` words) whose numbers differ are never MinHash or embedding
    near-duplicates; 0 turns it off. Alignment guard (when embeddings are on): short texts (at most
    ``alignment_words`` words) whose token alignment is below ``alignment_threshold`` are not
    near-duplicates either; a threshold of 0 turns it off. A token counts as aligned when its best
    match in the other text reaches ``alignment_match`` cosine (0: soft, BERTScore-style). Word-order
    guard (no model needed): short texts whose shared words come in a different order
    (``evidence.guards.word_order`` below ``word_order_threshold``) are not near-duplicates; 0 turns
    it off. Both guards count texts of at most ``alignment_words`` words as short. Entity guard (no
    model needed): short texts (at most ``entity_guard_words`` words) that each name something the
    other does not ("… in New Jersey?" / "… in Wisconsin?") are not near-duplicates; 0 turns it off.
    Negation guard (no model needed): short texts (at most ``negation_guard_words`` words) of which one
    is negated and the other not are not near-duplicates; 0 turns it off. ``near_identical``: an
    embedding match at or above this cosine is not held to the word-order and alignment guards (a
    change of article, voice or the place of a phrase), only to the number, entity and negation
    guards; 0 holds every match to all of them."""

    number_guard_words: int = 50
    entity_guard_words: int = 50
    alignment_threshold: float = 0.8
    alignment_words: int = 50
    alignment_match: float = 0.7
    word_order_threshold: float = 0.85
    negation_guard_words: int = 50
    near_identical: float = 0.97

    def __post_init__(self) -> None:
        if self.number_guard_words < 0:
            raise ConfigError(f"number-guard must be >= 0 words (0 turns it off), got {self.number_guard_words}")
        if self.entity_guard_words < 0:
            raise ConfigError(f"entity-guard must be >= 0 words (0 turns it off), got {self.entity_guard_words}")
        if self.negation_guard_words < 0:
            raise ConfigError(f"negation-guard must be >= 0 words (0 turns it off), got {self.negation_guard_words}")
        if not 0.0 <= self.near_identical <= 1.0:
            raise ConfigError(f"near-identical must be in [0, 1] (0 turns it off), got {self.near_identical}")
        if not 0.0 <= self.alignment_threshold <= 1.0:
            raise ConfigError(f"alignment must be in [0, 1] (0 turns it off), got {self.alignment_threshold}")
        if not 0.0 <= self.word_order_threshold <= 1.0:
            raise ConfigError(f"word-order must be in [0, 1] (0 turns it off), got {self.word_order_threshold}")
        if self.alignment_words < 1:
            raise ConfigError(f"alignment-words must be >= 1, got {self.alignment_words}")
        if isinstance(self.alignment_match, bool) or not 0.0 <= self.alignment_match < 1.0:
            raise ConfigError(f"alignment-match must be in [0, 1) (0: soft matching), got {self.alignment_match!r}")


@dataclass(frozen=True)
class MinHashConfig:
    """The ``minhash`` detector: verified Jaccard similarity of shingle sets (datasketch LSH)."""

    enabled: bool = True
    threshold: float = 0.7
    num_perm: int = 128
    shingle: str = "word"
    ngram: int = 3
    seed: int = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"minhash threshold must be in (0, 1], got {self.threshold}")


FIRST_STAGES = ("static", "none")  # which rows the full model embeds: those a static model finds near, or all
BACKENDS = ("auto", "onnx", "torch")  # what runs the model: ONNX Runtime where it is exact and kept, or torch
PRECISIONS = ("fp32", "bf16")  # the model's arithmetic when it encodes (torch autocast for bf16)


@dataclass(frozen=True)
class EmbeddingConfig:
    """The ``embedding``, ``anchor-embedding`` and ``margin`` detectors (sentence-transformers).

    ``positive_threshold``: cosine between a candidate and the anchor row's positive (or, for a
    query candidate, the anchor) at which the candidate is a near-duplicate: ``likely``.
    ``anchor_threshold``: cosine between two rows' anchors at which one row's positive answers the
    other's anchor: ``likely``. The margin rule, ``sim(a, c) > sim(a, p) * (1 - relative_margin)``
    or ``sim(a, c) > sim(a, p) - absolute_margin`` (GISTEmbedLoss / mine_hard_negatives vocabulary),
    is ``suspect``: it says "same topic", and read by a person its findings are false negatives well
    under half of the time on every measured genre (docs/quality.md); ``margin = true`` reports them.
    ``margin_support`` (off by default) makes it ``likely`` when the candidate is also within that
    cosine of the positive, in query→document rows only (the positive has at least ``margin_doc_ratio``
    times the anchor's words; 0 lets any row count). ``above_positive``: in a query→document row, a
    candidate that scores above the row's own positive and at or above this quantile of the data's own
    anchor–positive scores is ``likely`` (0, the default, turns it off: read by a person, it was right on
    forum questions and claims and about half of the time on CISI's broad relevance; docs/quality.md).
    ``pair_evidence`` (off by default): compare two rows through their four cross cosines (``pair`` evidence) against
    bars that ``calibration = "auto"`` derives from the data's own anchor–positive cosines (at
    ``calibration_quantile``, never under ``calibration_floor``; see ``contrast_audit.calibration``);
    ``"off"`` or an explicit ``pair_threshold`` fixes every bar. ``verifier``: a local CrossEncoder
    directory that rescores the likely and suspect findings (``evidence.verifier``), against
    ``verifier_threshold`` or the ``verifier_quantile`` of its scores on the data's own pairs.
    """

    enabled: bool = True
    model: str | None = None
    device: str | None = None
    query_prompt: str = ""
    doc_prompt: str = ""
    batch_size: int = 64
    precision: str = "fp32"
    first_stage: str = "static"
    backend: str = "auto"
    cache_dir: str | None = None
    use_cache: bool = True
    positive_threshold: float = 0.825
    anchor_threshold: float = 0.825
    margin: bool = False
    margin_support: float | None = None
    absolute_margin: float | None = None
    relative_margin: float | None = 0.25
    margin_doc_ratio: float = 3.0
    above_positive: float = 0.0
    pair_evidence: bool = False
    calibration: str = "auto"
    calibration_quantile: float = 0.9
    calibration_floor: float = 0.5
    pair_threshold: float | None = None
    verifier: str | None = None
    verifier_threshold: float | None = None
    verifier_quantile: float = 0.5

    def __post_init__(self) -> None:
        if self.verifier is not None and not str(self.verifier).strip():
            raise ConfigError(
                f"verifier is {self.verifier!r}, an empty name",
                fix="name a CrossEncoder directory or leave --verifier out",
            )
        if isinstance(self.above_positive, bool) or not 0.0 <= self.above_positive <= 1.0:
            raise ConfigError(f"above-positive must be in [0, 1] (0 turns it off), got {self.above_positive!r}")
        if not 0.0 <= self.verifier_quantile <= 1.0:
            raise ConfigError(f"verifier-quantile must be in [0, 1], got {self.verifier_quantile}")
        if self.precision not in PRECISIONS:
            raise ConfigError(
                f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}",
                fix="use fp32 (exact), or bf16 on a CPU or GPU with bfloat16 arithmetic",
            )
        if self.backend not in BACKENDS:
            raise ConfigError(
                f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}",
                fix="auto: ONNX Runtime on a CPU where the model exports exactly, else torch",
            )
        if self.first_stage not in FIRST_STAGES:
            raise ConfigError(
                f"first-stage must be one of {', '.join(FIRST_STAGES)}, got {self.first_stage!r}",
                fix="static: the full model embeds the rows a static model finds near; none: every text",
            )
        if self.calibration not in ("auto", "off"):
            raise ConfigError(
                f"calibration must be auto or off, got {self.calibration!r}", fix="--calibration auto|off"
            )
        for name in ("positive_threshold", "anchor_threshold", "margin_support", "calibration_floor"):
            value = getattr(self, name)
            if value is not None and not -1.0 <= value <= 1.0:
                raise ConfigError(f"{name.replace('_', '-')} is a cosine similarity in [-1, 1], got {value}")
        if self.batch_size < 1:
            raise ConfigError(f"embedding batch size must be >= 1, got {self.batch_size}")
        if self.absolute_margin is not None and self.relative_margin is not None:
            raise ConfigError("give absolute-margin or relative-margin, not both")
        if self.relative_margin is not None and not 0.0 <= self.relative_margin < 1.0:
            raise ConfigError(f"relative-margin must be in [0, 1), got {self.relative_margin}")


@dataclass(frozen=True)
class LossConfig:
    """Which comparisons the loss makes (MultipleNegativesRankingLoss vocabulary)."""

    directions: tuple[str, ...] = ("query_to_doc",)

    def __post_init__(self) -> None:
        bad = [d for d in self.directions if d not in DIRECTIONS]
        if bad or not self.directions:
            raise ConfigError(
                f"directions must be a non-empty subset of {', '.join(DIRECTIONS)}, "
                f"got {', '.join(self.directions) or 'nothing'}"
            )
        if "query_to_doc" not in self.directions:
            raise ConfigError(
                "directions must include query_to_doc: MultipleNegativesRankingLoss always scores it "
                "(it holds the positive pair)",
                fix="add query_to_doc, e.g. --directions query_to_doc --directions doc_to_query",
            )


@dataclass(frozen=True)
class ReferenceConfig:
    """Reference data new rows are checked against (``scan --against/--eval``).

    ``against``: existing training data, read with the scan's column mapping unless
    ``against_columns`` (``[tool.contrast-audit.against]``) names others. ``eval``: evaluation data:
    pair files (``eval_columns``), a single-text column (``eval_text``) or BEIR
    ``queries.jsonl``/``corpus.jsonl`` (files or their directory). ``index_dir``: where signatures and
    embeddings of the reference texts persist (default: ``index`` under the cache directory).
    ``with_existing``: plan the in-batch audit over new and existing rows together.
    ``eval_alignment``: the alignment guard's bar for matches with eval data (0, the default: not
    applied; a leak missed costs more than a false alarm), where existing data uses the scan's.
    ``repeats``: with a baseline, each new row's texts are also checked against the old rows of the
    scanned data themselves (a repeat, exact or near, of an existing row whatever the batches), reported
    as ``existing`` overlaps naming the old row's file and line.
    """

    against: tuple[str, ...] = ()
    eval: tuple[str, ...] = ()
    against_columns: ColumnMapping | None = None
    eval_columns: ColumnMapping | None = None
    eval_text: str | None = None
    index_dir: str | None = None
    use_index: bool = True
    with_existing: bool = False
    eval_alignment: float = 0.0
    repeats: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.eval_alignment <= 1.0:
            raise ConfigError(f"eval_alignment must be in [0, 1], got {self.eval_alignment}")
        if self.with_existing and not self.against:
            raise ConfigError("--with-existing needs existing data", fix="name it with --against EXISTING")


@dataclass(frozen=True)
class AuditConfig:
    """Everything one audit depends on; reports echo it as the effective configuration."""

    mapping: ColumnMapping = field(default_factory=ColumnMapping)
    normalise: NormaliseConfig = field(default_factory=NormaliseConfig)
    link: LinkConfig = field(default_factory=LinkConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    minhash: MinHashConfig = field(default_factory=MinHashConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    on_bad_row: str = "skip-empty"
    reference: ReferenceConfig = field(default_factory=ReferenceConfig)
    baseline: str | None = None
    since: str | None = None  # a git revision: the baseline is the scanned files as they are there
    max_memory: str = "auto"  # refuse input that would need more (contrast_audit.resources)
    engine: str = "auto"  # memory, stream, ray, or auto: memory when the input fits max_memory (contrast_audit.engine)
    ray_address: str | None = None  # the Ray cluster --engine ray joins; None: a local instance
    delimiter: str | None = None  # the separator of CSV/TSV data files; None: from the extension, or detected

    def __post_init__(self) -> None:
        if self.on_bad_row not in ON_BAD_ROW:
            raise ConfigError(f"on_bad_row must be one of {', '.join(ON_BAD_ROW)}, got {self.on_bad_row!r}")
        if self.baseline and self.since:
            raise ConfigError(
                "--baseline and --since both name a baseline", fix="pass one: a JSON report, or a git revision"
            )
        if self.engine not in ENGINES:
            raise ConfigError(
                f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}", fix="pass --engine auto"
            )
        if self.ray_address is not None and self.engine != "ray":
            raise ConfigError(
                f"--ray-address (the ray-address setting) is used by --engine ray only, and the engine is "
                f"{self.engine}",
                fix='add --engine ray or drop it (in a settings file: engine = "ray", or no ray-address key)',
            )
        if str(self.max_memory).strip().lower() not in ("auto", "off"):
            from contrast_audit.resources import parse_size

            parse_size(self.max_memory)  # a bad size fails here, before any file is read
        if self.delimiter is not None:
            from contrast_audit.io.readers import parse_delimiter

            object.__setattr__(self, "delimiter", parse_delimiter(self.delimiter))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mapping"]["negatives"] = list(self.mapping.negatives)
        data["loss"]["directions"] = list(self.loss.directions)
        return data


# Config-file keys (flat, kebab or snake case) → (section, field).
_FILE_KEYS: dict[str, tuple[str | None, str]] = {
    "anchor": ("mapping", "anchor"),
    "positive": ("mapping", "positive"),
    "negative": ("mapping", "negatives"),
    "negatives": ("mapping", "negatives"),
    "id": ("mapping", "id"),
    "source": ("mapping", "source"),
    "cohort": ("mapping", "cohort"),
    "group": ("mapping", "group"),
    "unicode_form": ("normalise", "unicode_form"),
    "casefold": ("normalise", "casefold"),
    "collapse_whitespace": ("normalise", "collapse_whitespace"),
    "strip_chars": ("normalise", "strip_chars"),
    "max_hops": ("link", "max_hops"),
    "batch_size": ("plan", "batch_size"),
    "seed": ("plan", "seed"),
    "epochs": ("plan", "epochs"),
    "drop_last": ("plan", "drop_last"),
    "world_size": ("plan", "world_size"),
    "sampler": ("plan", "sampler"),
    "plan": ("plan", "plan_file"),
    "directions": ("loss", "directions"),
    "on_bad_row": (None, "on_bad_row"),
    "max_memory": (None, "max_memory"),
    "engine": (None, "engine"),
    "ray_address": (None, "ray_address"),
    "delimiter": (None, "delimiter"),
    "fail_on": (None, "fail_on"),
    "format": (None, "format"),
    "strategy": (None, "strategy"),
    "mask_severity": (None, "mask_severity"),
    "balance": (None, "balance"),
    "clusters": (None, "clusters"),
    "weight": (None, "weight"),
    "number_guard": ("policy", "number_guard_words"),
    "entity_guard": ("policy", "entity_guard_words"),
    "alignment": ("policy", "alignment_threshold"),
    "alignment_words": ("policy", "alignment_words"),
    "alignment_match": ("policy", "alignment_match"),
    "word_order": ("policy", "word_order_threshold"),
    "negation_guard": ("policy", "negation_guard_words"),
    "near_identical": ("policy", "near_identical"),
    "minhash": ("minhash", "enabled"),
    "minhash_threshold": ("minhash", "threshold"),
    "num_perm": ("minhash", "num_perm"),
    "shingle": ("minhash", "shingle"),
    "ngram": ("minhash", "ngram"),
    "minhash_seed": ("minhash", "seed"),
    "embeddings": ("embedding", "enabled"),
    "model": ("embedding", "model"),
    "device": ("embedding", "device"),
    "query_prompt": ("embedding", "query_prompt"),
    "doc_prompt": ("embedding", "doc_prompt"),
    "embed_batch_size": ("embedding", "batch_size"),
    "precision": ("embedding", "precision"),
    "first_stage": ("embedding", "first_stage"),
    "backend": ("embedding", "backend"),
    "cache_dir": ("embedding", "cache_dir"),
    "cache": ("embedding", "use_cache"),
    "positive_threshold": ("embedding", "positive_threshold"),
    "anchor_threshold": ("embedding", "anchor_threshold"),
    "margin": ("embedding", "margin"),
    "margin_support": ("embedding", "margin_support"),
    "absolute_margin": ("embedding", "absolute_margin"),
    "relative_margin": ("embedding", "relative_margin"),
    "margin_doc_ratio": ("embedding", "margin_doc_ratio"),
    "above_positive": ("embedding", "above_positive"),
    "pair": ("embedding", "pair_evidence"),
    "pair_evidence": ("embedding", "pair_evidence"),
    "calibration": ("embedding", "calibration"),
    "calibration_quantile": ("embedding", "calibration_quantile"),
    "calibration_floor": ("embedding", "calibration_floor"),
    "pair_threshold": ("embedding", "pair_threshold"),
    "verifier": ("embedding", "verifier"),
    "verifier_threshold": ("embedding", "verifier_threshold"),
    "verifier_quantile": ("embedding", "verifier_quantile"),
    "against": ("reference", "against"),
    "eval": ("reference", "eval"),
    "against_columns": ("reference", "against_columns"),
    "eval_columns": ("reference", "eval_columns"),
    "eval_text": ("reference", "eval_text"),
    "index": ("reference", "index_dir"),
    "use_index": ("reference", "use_index"),
    "with_existing": ("reference", "with_existing"),
    "eval_alignment": ("reference", "eval_alignment"),
    "repeats": ("reference", "repeats"),
    "baseline": (None, "baseline"),
    "since": (None, "since"),
}
# Keys of the ``[tool.contrast-audit.against]`` / ``[tool.contrast-audit.eval]`` tables.
_REFERENCE_TABLE_KEYS = ("paths", "anchor", "positive", "negatives", "negative", "id", "text")


# Type and range of each setting, checked for the settings file and for flags alike:
# (kind, low, high, high is exclusive). Kinds: int, float, bool, str, strs (a string or a list of them).
_BIG = 2**31 - 1
SETTING_RULES: dict[str, tuple[str, float | None, float | None, bool]] = {
    **dict.fromkeys(
        (
            "anchor",
            "positive",
            "id",
            "source",
            "cohort",
            "group",
            "unicode_form",
            "strip_chars",
            "sampler",
            "plan",
            "on_bad_row",
            "max_memory",
            "engine",
            "ray_address",
            "delimiter",
            "format",
            "strategy",
            "mask_severity",
            "weight",
            "shingle",
            "model",
            "device",
            "precision",
            "first_stage",
            "backend",
            "query_prompt",
            "doc_prompt",
            "cache_dir",
            "calibration",
            "verifier",
        ),
        ("str", None, None, False),
    ),
    **dict.fromkeys(("negative", "negatives", "directions", "fail_on", "against", "eval"), ("strs", None, None, False)),
    **dict.fromkeys(("eval_text", "index", "baseline", "since"), ("str", None, None, False)),
    # against_columns / eval_columns come from the [against] / [eval] tables, checked key by key where read
    **dict.fromkeys(("against_columns", "eval_columns"), ("table", None, None, False)),
    **dict.fromkeys(
        (
            "casefold",
            "collapse_whitespace",
            "drop_last",
            "minhash",
            "embeddings",
            "cache",
            "margin",
            "with_existing",
            "repeats",
            "use_index",
            "pair",
            "pair_evidence",
        ),
        ("bool", None, None, False),
    ),
    "max_hops": ("int", 0, 1000, False),
    "balance": ("int", 1, _BIG, False),
    "clusters": ("int", 1, _BIG, False),
    "batch_size": ("int", 1, _BIG, False),
    "seed": ("int", 0, 2**63 - 1, False),
    "epochs": ("int", 1, 100_000, False),
    "world_size": ("int", 1, 1_000_000, False),
    "number_guard": ("int", 0, _BIG, False),
    "entity_guard": ("int", 0, _BIG, False),
    "negation_guard": ("int", 0, _BIG, False),
    "alignment_words": ("int", 1, _BIG, False),
    "num_perm": ("int", 1, 65_536, False),
    "ngram": ("int", 1, 1000, False),
    "minhash_seed": ("int", 0, 2**32 - 1, False),
    "embed_batch_size": ("int", 1, _BIG, False),
    "alignment": ("float", 0.0, 1.0, False),
    "word_order": ("float", 0.0, 1.0, False),
    "near_identical": ("float", 0.0, 1.0, False),
    "eval_alignment": ("float", 0.0, 1.0, False),
    "alignment_match": ("float", 0.0, 1.0, True),
    "minhash_threshold": ("float", 0.0, 1.0, False),
    "positive_threshold": ("float", -1.0, 1.0, False),
    "anchor_threshold": ("float", -1.0, 1.0, False),
    "margin_support": ("float", -1.0, 1.0, False),
    "absolute_margin": ("float", 0.0, 2.0, False),
    "relative_margin": ("float", 0.0, 1.0, True),
    "margin_doc_ratio": ("float", 0.0, 1000.0, False),
    "above_positive": ("float", 0.0, 1.0, False),
    "calibration_quantile": ("float", 0.0, 1.0, False),
    "calibration_floor": ("float", -1.0, 1.0, False),
    "pair_threshold": ("float", -1.0, 1.0, False),
    "verifier_threshold": ("float", None, None, False),
    "verifier_quantile": ("float", 0.0, 1.0, False),
}


# Settings that take one of a fixed set of values: checked where the value is read (the settings file,
# naming the file and key; flags and build_config), before any work.
SETTING_CHOICES: dict[str, tuple[str, ...]] = {
    "engine": ENGINES,
    "sampler": SAMPLERS,
    "on_bad_row": ON_BAD_ROW,
    "precision": PRECISIONS,
    "first_stage": FIRST_STAGES,
    "backend": BACKENDS,
    "strategy": STRATEGIES,
    "mask_severity": MASK_SEVERITIES,
    "weight": WEIGHTS,
}
# What each of them means, for the fix of a bad value.
_CHOICE_HINTS = {
    "engine": "auto: in memory when the input fits max-memory, else streamed",
    "weight": "anchor: every anchor the same share of the loss; leave it out for none",
}
# String settings that name something, and what: an empty one would silently mean "not given".
_NOT_EMPTY = {
    "verifier": "a CrossEncoder directory",
    "model": "a sentence-transformers model directory",
    "device": "a device (cpu, cuda, cuda:1, mps)",
    "cache_dir": "a cache directory",
    "plan": "a plan or manifest file",
    "baseline": "the JSON report of an earlier scan",
    "since": "a git revision (HEAD, origin/main, a sha)",
    "eval_text": "the text column of the eval data",
    "index": "a directory for the reference index",
    "ray_address": "a Ray cluster (host:port, or auto)",
}


def _bound(value: float) -> str:
    if isinstance(value, int) and value >= 2**16 and (value + 1) & value == 0:
        return f"2^{(value + 1).bit_length() - 1} - 1"
    return f"{value:g}" if isinstance(value, float) else f"{value:,}"


def describe_rule(name: str) -> str:
    """``an integer in [1, 2,147,483,647]`` for ``batch_size``, and so on."""
    kind, low, high, open_high = SETTING_RULES[name]
    text = {
        "int": "an integer",
        "float": "a number",
        "bool": "true or false",
        "str": "a string",
        "strs": "a string or a list of strings",
        "table": "a table of column names",
    }[kind]
    if low is not None and high is not None:
        text += f" in [{_bound(low)}, {_bound(high)}{')' if open_high else ']'}"
    return text


def check_setting(name: str, value: Any, where: str) -> Any:
    """``value`` if it has the type and range of setting ``name``; else a ``ConfigError`` naming
    ``where`` (``file.toml: setting 'batch-size'`` or ``--batch-size``). Floats accept integers."""
    rule = SETTING_RULES.get(name)
    if rule is None or value is None:
        return value
    kind, low, high, open_high = rule
    ok = True
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "str":
        ok = isinstance(value, str)
    elif kind == "table":
        ok = isinstance(value, dict) or hasattr(value, "anchor")
    elif kind == "strs":
        ok = isinstance(value, str) or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))
    if ok and low is not None and high is not None:
        ok = low <= value and (value < high if open_high else value <= high)
    if not ok:
        shown = repr(value) if not isinstance(value, int) or abs(value) < 10**12 else f"{value}"
        raise ConfigError(
            f"{where} must be {describe_rule(name)}, got {shown} ({_type_name(value)})",
            fix=f"set {name.replace('_', '-')} to {describe_rule(name)}",
        )
    choices = SETTING_CHOICES.get(name)
    if choices is not None and value not in choices:
        hint = _CHOICE_HINTS.get(name)
        raise ConfigError(
            f"{where} must be one of {', '.join(choices)}, got {_clip(repr(value))}",
            fix=f"set {name.replace('_', '-')} to one of them" + (f" ({hint})" if hint else ""),
        )
    if name in _NOT_EMPTY and not value.strip():
        flag = f"--{name.replace('_', '-')}"
        leave = f"leave {flag} out" if where.startswith("--") else f"remove the {name.replace('_', '-')} key"
        raise ConfigError(f"{where} is {value!r}, an empty name", fix=f"name {_NOT_EMPTY[name]} or {leave}")
    return float(value) if kind == "float" else value


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "table"}.get(
        type(value), type(value).__name__
    )


def load_config_file(path: Path | None = None, cwd: Path | None = None) -> tuple[dict[str, Any], str | None]:
    """Read settings from ``path``, or find ``contrast-audit.toml`` / ``pyproject.toml`` in ``cwd``.

    Returns the flat settings (snake_case keys) and the file they came from (``None`` if none).
    """
    if path is None:
        base = cwd or Path.cwd()
        for candidate in (base / "contrast-audit.toml", base / "pyproject.toml"):
            if candidate.is_file():
                settings, origin = _read_toml(candidate, candidate.name == "pyproject.toml")
                if origin is not None:
                    return settings, origin
        return {}, None
    if not path.is_file():
        raise ConfigError(f"{path}: configuration file not found", fix="check the --config path")
    settings, origin = _read_toml(path, path.name == "pyproject.toml")
    return settings, origin or str(path)


def _read_toml(path: Path, in_pyproject: bool) -> tuple[dict[str, Any], str | None]:
    try:
        # utf-8-sig: a byte-order mark (some Windows editors write one) is not part of the TOML.
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})", fix="fix the file's syntax") from exc
    tool = data.get("tool")
    if in_pyproject or tool is not None:
        if tool is not None and not isinstance(tool, dict):
            raise _not_a_table(path, "tool", tool, "[tool.contrast-audit]")
        section = (tool or {}).get("contrast-audit")
        if section is None and in_pyproject:
            return {}, None
        if section is not None:
            if not isinstance(section, dict):
                raise _not_a_table(path, "tool.contrast-audit", section, "[tool.contrast-audit] with key = value lines")
            data = section
    settings: dict[str, Any] = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name in ("against", "eval") and isinstance(value, dict):
            settings.update(_reference_table(path, name, value))
            continue
        if name not in _FILE_KEYS:
            raise ConfigError(f"{path}: unknown setting '{key}'", fix=_did_you_mean(key, _SETTING_KEYS))
        settings[name] = check_setting(name, value, f"{path}: setting '{key}'")
    return settings, str(path)


_SETTING_KEYS = sorted(k.replace("_", "-") for k in _FILE_KEYS)


def _did_you_mean(key: str, valid: list[str]) -> str:
    """``did you mean 'batch-size'?`` for a near miss, else where the valid keys are listed."""
    import difflib

    close = difflib.get_close_matches(key.replace("_", "-").lower(), valid, n=3, cutoff=0.6)
    if close:
        return f"did you mean {' or '.join(repr(c) for c in close)}? (keys are the flag names, without --)"
    return "keys are the flag names without -- (contrast-audit init writes every key with its meaning)"


def _not_a_table(path: Path, key: str, value: Any, fix: str) -> ConfigError:
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
    return ConfigError(f"{path}: '{key}' must be a table, got {shown} ({_type_name(value)})", fix=f"write {fix}")


def _reference_table(path: Path, name: str, table: dict[str, Any]) -> dict[str, Any]:
    """``[tool.contrast-audit.against]`` / ``.eval``: paths and the columns of that data."""
    out: dict[str, Any] = {}
    columns: dict[str, Any] = {}
    valid = [k for k in _REFERENCE_TABLE_KEYS if k != "text" or name == "eval"]
    for key, value in table.items():
        attr = key.replace("-", "_")
        if attr not in valid:
            raise ConfigError(f"{path}: unknown setting '{name}.{key}'", fix=_did_you_mean(key, valid))
        lists = attr in ("paths", "negatives", "negative")
        if not (
            isinstance(value, str) or (lists and isinstance(value, list) and all(isinstance(v, str) for v in value))
        ):
            what = "a string or a list of strings" if lists else "a string"
            raise ConfigError(
                f"{path}: setting '{name}.{key}' must be {what}, got {value!r} ({_type_name(value)})",
                fix=f"set {name}.{key} to {what}",
            )
        if attr == "paths":
            out[name] = value
        elif attr == "text":
            out["eval_text"] = value
        else:
            columns["negatives" if attr == "negative" else attr] = value
    if columns:
        out[f"{name}_columns"] = columns
    return out


def build_config(settings: dict[str, Any]) -> AuditConfig:
    """Turn flat settings (already merged: flags over file) into an ``AuditConfig``."""
    sections: dict[str | None, dict[str, Any]] = {}
    for name, value in settings.items():
        if value is None or name not in _FILE_KEYS:
            continue
        value = check_setting(name, value, f"--{name.replace('_', '-')}")
        section, attr = _FILE_KEYS[name]
        if section is None and attr not in (
            "on_bad_row",
            "baseline",
            "since",
            "max_memory",
            "engine",
            "ray_address",
            "delimiter",
        ):
            continue
        if attr in ("negatives", "directions", "against", "eval"):
            value = tuple([value] if isinstance(value, str) else value)
        if attr in ("against_columns", "eval_columns") and isinstance(value, dict):
            negatives = value.get("negatives", ())
            value = ColumnMapping(
                **{**value, "negatives": tuple([negatives] if isinstance(negatives, str) else negatives)}
            )
        if section == "normalise" and attr == "unicode_form" and str(value).lower() == "none":
            value = None
        sections.setdefault(section, {})[attr] = value
    emb = sections.get("embedding", {})
    if "absolute_margin" in emb and "relative_margin" not in emb:
        emb["relative_margin"] = None  # the absolute form replaces the default relative one
    base = AuditConfig()
    try:
        parts = {
            name: replace(getattr(base, name), **sections.get(name, {}))
            for name in ("mapping", "normalise", "link", "plan", "loss", "minhash", "embedding", "policy", "reference")
        }
        top = sections.get(None, {})
        return AuditConfig(
            **parts,
            on_bad_row=top.get("on_bad_row", "skip-empty"),
            baseline=top.get("baseline"),
            since=top.get("since"),
            max_memory=top.get("max_memory", "auto"),
            engine=top.get("engine", "auto"),
            ray_address=top.get("ray_address"),
            delimiter=top.get("delimiter"),
        )
    except TypeError as exc:
        raise ConfigError(f"invalid setting: {exc}") from exc
