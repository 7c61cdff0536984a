"""Typer commands only: flags → config, call the API, pick a formatter, map errors → exit codes."""

from __future__ import annotations

import functools
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from contrast_audit._version import __version__
from contrast_audit.errors import EXIT_GATE_FAILED, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, AuditError
from contrast_audit.gate import GRAMMAR as GATE_GRAMMAR

app = typer.Typer(
    name="contrast-audit",
    help="Find the false negatives that in-batch contrastive training will see in your pair data.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])
MAX_TOP = 1_000_000  # the most findings, negatives or annotations a --top (or --max-annotations) can ask for


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"
    sarif = "sarif"


class Annotations(str, Enum):
    auto = "auto"
    github = "github"
    none = "none"


class Sampler(str, Enum):
    random = "random"
    no_duplicates = "no-duplicates"


class NegativesFormat(str, Enum):
    text = "text"
    json = "json"


class CalibrationMode(str, Enum):
    auto = "auto"
    off = "off"


class OnBadRow(str, Enum):
    skip_empty = "skip-empty"
    error = "error"
    skip = "skip"


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def handle_errors(func: F) -> F:
    """User mistakes exit 2 with one clear line; bugs exit 3 and ask to be reported."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except typer.Exit:
            raise
        except AuditError as exc:
            _stderr().print(Text.assemble(("error:", "bold red"), " ", exc.render()))
            raise typer.Exit(EXIT_USAGE) from None
        except KeyboardInterrupt:
            _stderr().print(
                "contrast-audit: interrupted (Ctrl-C); outputs not yet written are left as they were", markup=False
            )
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            console = _stderr()
            console.print(
                Text.assemble(
                    ("internal error:", "bold red"),
                    f" {type(exc).__name__}: {exc} — this is a bug in contrast-audit {__version__}. "
                    "When you report it to the maintainers, include the version, the command you ran and "
                    "the output of the same command with CONTRAST_AUDIT_DEBUG=1 set (it adds the traceback).",
                )
            )
            if os.environ.get("CONTRAST_AUDIT_DEBUG"):
                traceback.print_exc()
            raise typer.Exit(EXIT_INTERNAL) from None

    return wrapper  # type: ignore[return-value]


@contextmanager
def progress_bars(enabled: bool) -> Iterator[Callable[[str, int], Callable[[int], None]] | None]:
    """Progress bars on stderr for long stages; nothing when not a TTY or with --quiet."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bars:

        def start(description: str, total: int) -> Callable[[int], None]:
            task = bars.add_task(description, total=total)
            return lambda n: bars.advance(task, n)

        yield start


def _version(value: bool) -> None:
    if value:
        typer.echo(f"contrast-audit {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """contrast-audit: audit contrastive training data for in-batch false negatives."""


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _opt(help_text: str, panel: str, *names: str, **kwargs: Any) -> Any:
    """An option whose help is plain text: brackets (``[tool.contrast-audit]``, ``{"rows": [id, ...]}``,
    ``[default: 32]``) are shown as written, never read as Rich markup."""
    return typer.Option(*names, help=plain_help(help_text), rich_help_panel=panel, **kwargs)


def plain_help(text: str) -> str:
    """``text`` escaped for Rich markup (a ``\\[`` already escaped is taken as a plain ``[``)."""
    from rich.markup import escape

    return escape(text.replace("\\[", "["))


# Option declarations; those in AUDIT_OPTIONS are shared by every command that plans and judges batches.
Data = Annotated[list[str], typer.Argument(help="Pair files (JSONL, CSV, TSV, Parquet) or globs.", show_default=False)]
AnchorCol = Annotated[str | None, _opt("Column holding the anchor (query).", "Columns")]
PositiveCol = Annotated[
    str | None, _opt("Column holding the positive (document); a list column gives one row per item.", "Columns")
]
NegativeCols = Annotated[
    list[str] | None, _opt("Hard-negative column; repeat it or name a list column.", "Columns", "--negative")
]
IdCol = Annotated[str | None, _opt("Column of unique row ids (default: 0-based row number).", "Columns", "--id")]
SourceCol = Annotated[str | None, _opt("Column naming each row's source, for breakdowns.", "Columns")]
CohortCol = Annotated[str | None, _opt("Column naming each row's cohort, for breakdowns.", "Columns")]
GroupCol = Annotated[str | None, _opt("Column whose equal values declare rows mutual positives.", "Columns")]
BatchSize = Annotated[int | None, _opt("Per-device batch size.  \\[default: 32]", "Batch plan")]
Seed = Annotated[int | None, _opt("The trainer's seed.  \\[default: 42]", "Batch plan")]
Epochs = Annotated[int | None, _opt("Epochs to plan.  \\[default: 1]", "Batch plan")]
DropLast = Annotated[
    bool | None, _opt("Drop the last incomplete batch.  \\[default: keep]", "Batch plan", "--drop-last/--keep-last")
]
WorldSize = Annotated[
    int | None,
    _opt(
        "Devices whose embeddings are gathered: the comparison set is the global batch.  \\[default: 1]", "Batch plan"
    ),
]
SamplerOpt = Annotated[
    Sampler | None, _opt("sentence-transformers batch sampler to reproduce.  \\[default: random]", "Batch plan")
]
PlanFile = Annotated[
    str | None,  # a str, not a Path: an empty name stays empty and is refused (config._NOT_EMPTY)
    _opt('A plan exported from your own loop: JSONL, {"rows": [id, ...]} per batch.', "Batch plan", "--plan"),
]
Directions = Annotated[
    list[str] | None,
    _opt(
        "Loss directions (MultipleNegativesRankingLoss): query_to_doc (required), query_to_query, doc_to_query, doc_to_doc; repeat or comma-separate.  \\[default: query_to_doc]",
        "Loss",
    ),
]
MaxHops = Annotated[
    int | None,
    _opt(
        "Longest chain of positive pairs that links two texts; 0 turns linked evidence off.  \\[default: 2]", "Evidence"
    ),
]
NumberGuardOpt = Annotated[
    int | None,
    _opt(
        "Short texts (at most N words) whose numbers differ are never near-duplicates; 0 turns this off.  \\[default: 50]",
        "Evidence",
    ),
]
EntityGuardOpt = Annotated[
    int | None,
    _opt(
        "Short texts (at most N words) that each name something the other does not (a place, product, person or "
        "language: 'in New Jersey' / 'in Wisconsin') are never near-duplicates; 0 turns this off.  \\[default: 50]",
        "Evidence",
    ),
]
NegationGuardOpt = Annotated[
    int | None,
    _opt(
        "Short texts (at most N words) of which one is negated and the other not ('is playing' / 'is not playing') "
        "are never near-duplicates; 0 turns this off.  \\[default: 50]",
        "Evidence",
    ),
]
NearIdentical = Annotated[
    float | None,
    _opt(
        "An embedding match at or above this cosine is held to the number, entity and negation guards only, not to "
        "word order and alignment (an article, the voice or a phrase's place changed); 0 turns this off.  "
        "\\[default: 0.97]",
        "Evidence",
    ),
]
Alignment = Annotated[
    float | None,
    _opt(
        "Short texts whose token alignment (the smaller idf-weighted share of each text's tokens matched in the other, with the embedding model) is below this are never near-duplicates; 0 turns this off.  \\[default: 0.8]",
        "Evidence",
    ),
]
AlignmentWords = Annotated[
    int | None,
    _opt(
        "Texts of at most N words count as short for the alignment and word-order guards.  \\[default: 50]", "Evidence"
    ),
]
WordOrder = Annotated[
    float | None,
    _opt(
        "Short texts whose shared words come in a different order (1 minus the share of neighbouring shared words split apart; a moved phrase keeps 1) below this are never near-duplicates; 0 turns this off.  \\[default: 0.85]",
        "Evidence",
    ),
]
AlignmentMatch = Annotated[
    float | None,
    _opt(
        "Token cosine (below 1) at which a token is matched in the other text, for the alignment guard; 0 scores soft (BERTScore).  \\[default: 0.7]",
        "Evidence",
    ),
]
MinHashOn = Annotated[
    bool | None, _opt("MinHash near-duplicate evidence.  \\[default: on]", "Evidence", "--minhash/--no-minhash")
]
MinHashThreshold = Annotated[
    float | None,
    _opt("Verified Jaccard similarity at which two texts are near-duplicates.  \\[default: 0.7]", "Evidence"),
]
NumPerm = Annotated[int | None, _opt("MinHash permutations.  \\[default: 128]", "Evidence")]
Shingle = Annotated[str | None, _opt("MinHash shingles: word or char n-grams.  \\[default: word]", "Evidence")]
NGram = Annotated[int | None, _opt("Shingle length in words or characters.  \\[default: 3]", "Evidence")]
EmbeddingsOn = Annotated[
    bool | None,
    _opt("Embedding evidence with the model below.  \\[default: on]", "Embeddings", "--embeddings/--no-embeddings"),
]
ModelPath = Annotated[
    str | None,
    _opt(
        "A local sentence-transformers model directory, or a Hugging Face hub id (BAAI/bge-small-en-v1.5) already "
        "in the hub's cache (HF_HUB_CACHE or HF_HOME; nothing is downloaded); a path that exists wins.  "
        "\\[default: packaged all-MiniLM-L6-v2]",
        "Embeddings",
        "--model",
    ),
]
Device = Annotated[str | None, _opt("Device for the model: cpu, cuda, cuda:1, mps.  \\[default: auto]", "Embeddings")]
QueryPrompt = Annotated[str | None, _opt("Prompt/prefix for anchors, as in training (e.g. 'query: ').", "Embeddings")]
DocPrompt = Annotated[str | None, _opt("Prompt/prefix for positives and negatives (e.g. 'passage: ').", "Embeddings")]
EmbedBatch = Annotated[int | None, _opt("Texts per encode batch.  \\[default: 64]", "Embeddings")]
Precision = Annotated[
    str | None,
    _opt(
        "The model's arithmetic: fp32, or bf16 (torch autocast; 1.7-2.4x faster on CPUs with bfloat16 instructions, slower on others; cached apart from fp32 vectors).  \\[default: fp32]",
        "Embeddings",
    ),
]
FirstStage = Annotated[
    str | None,
    _opt(
        "Which rows the full model embeds for the batch plan: static (those a static model, the model's own token "
        "embeddings mapped on a sample of the data, finds near another row of their batch) or none (every text). "
        "negatives and manifest always embed every text.  "
        "\\[default: static]",
        "Embeddings",
    ),
]
Backend = Annotated[
    str | None,
    _opt(
        "What runs the model: onnx (ONNX Runtime on the CPU, the model exported once to the cache and checked "
        "against it; no torch import), torch (sentence-transformers), or auto (onnx on a CPU-only machine for "
        "fp32 and a Transformer-Pooling-Normalize model, else torch). Vectors of the two are cached apart.  "
        "\\[default: auto]",
        "Embeddings",
    ),
]
CacheDir = Annotated[
    str | None,  # a str, not a Path: an empty name stays empty and is refused (config._NOT_EMPTY)
    _opt("Embedding cache directory.  \\[default: $CONTRAST_AUDIT_CACHE_DIR or ~/.cache/contrast-audit]", "Embeddings"),
]
UseCache = Annotated[
    bool | None, _opt("Read and write the embedding cache.  \\[default: on]", "Embeddings", "--cache/--no-cache")
]
PositiveThreshold = Annotated[
    float | None,
    _opt("Cosine to the anchor's positive at which a candidate is a near-duplicate.  \\[default: 0.825]", "Embeddings"),
]
AnchorThreshold = Annotated[
    float | None,
    _opt(
        "Cosine between two anchors at which each row's positive answers the other.  \\[default: 0.825]", "Embeddings"
    ),
]
MarginOn = Annotated[
    bool | None,
    _opt("Also report margin-only findings (suspect).  \\[default: off]", "Embeddings", "--margin/--no-margin"),
]
AbsoluteMargin = Annotated[
    float | None, _opt("Margin rule sim(a, c) > sim(a, p) - margin; replaces --relative-margin.", "Embeddings")
]
MarginSupport = Annotated[
    float | None,
    _opt(
        "Cosine to the positive that makes a margin finding likely in query->document rows (off by default: "
        "margin findings are suspect, docs/quality.md).",
        "Embeddings",
    ),
]
RelativeMargin = Annotated[
    float | None,
    _opt("Margin rule sim(a, c) > sim(a, p) * (1 - margin).  \\[default: 0.25]", "Embeddings"),
]
AbovePositive = Annotated[
    float | None,
    _opt(
        "In a query->document row, a candidate that scores above the row's own positive and at or above this "
        "quantile of the data's own anchor-positive scores is likely (it answers the query as well as only the "
        "best-answered pairs do), e.g. 0.9; read by a person it held on forum questions and claims and half of the "
        "time on broad relevance judgments (docs/quality.md).  \\[default: 0 (off)]",
        "Embeddings",
    ),
]
MarginDocRatio = Annotated[
    float | None,
    _opt(
        "Margin findings are likely only in query->document rows, whose positive has at least this many times the "
        "anchor's words; elsewhere (paraphrases, captions) the rule only says 'same topic' and stays suspect "
        "(docs/quality.md); 0 lets it be likely in any row.  \\[default: 3]",
        "Embeddings",
    ),
]
PairOn = Annotated[
    bool | None,
    _opt(
        "Pair evidence: two rows compared through their four cross cosines against calibrated bars.  \\[default: off]",
        "Embeddings",
        "--pair/--no-pair",
    ),
]
CalibrationOpt = Annotated[
    CalibrationMode | None,
    _opt(
        "Pair bars from the data's own anchor-positive cosines (auto) or fixed at --positive-threshold (off).  "
        "\\[default: auto]",
        "Embeddings",
    ),
]
CalibrationQuantile = Annotated[
    float | None,
    _opt("Quantile of the rows' own anchor-positive cosines that sets the pair bar.  \\[default: 0.9]", "Embeddings"),
]
CalibrationFloor = Annotated[
    float | None, _opt("No calibrated pair bar goes under this cosine.  \\[default: 0.5]", "Embeddings")
]
PairThreshold = Annotated[
    float | None, _opt("Fixed pair bar for every role pairing; wins over calibration.", "Embeddings")
]
VerifierOpt = Annotated[
    str | None,
    _opt(
        "A sentence-transformers CrossEncoder (one output: a duplicate-question, STS or relevance model), a local "
        "directory or a hub id already in the Hugging Face cache (nothing is downloaded), that rescores the likely "
        "and suspect findings: likely at or above its bar, suspect below.",
        "Embeddings",
    ),
]
VerifierThreshold = Annotated[
    float | None,
    _opt("The verifier's bar, fixed; by default calibrated from its scores on the data's own pairs.", "Embeddings"),
]
VerifierQuantile = Annotated[
    float | None,
    _opt(
        "Quantile of the verifier's scores on the data's own pairs that sets its bar (never under the 0.99 quantile "
        "of random pairs).  \\[default: 0.5]",
        "Embeddings",
    ),
]
OnBad = Annotated[
    OnBadRow | None,
    _opt(
        "Bad rows: skip-empty skips rows whose text is empty or nothing but punctuation or invisible characters "
        "(reported with file:line) and stops at any other bad row; error stops at every bad row; skip skips and "
        "reports every one.  \\[default: skip-empty]",
        "Input",
    ),
]
Delimiter = Annotated[
    str | None,
    _opt(
        "Separator of CSV/TSV data files: one character, or tab.  \\[default: from the extension (comma for .csv, "
        "tab for .tsv), or the one the header line uses when it lacks that]",
        "Input",
    ),
]
MaxMemory = Annotated[
    str | None,
    _opt(
        "Refuse input that would need more memory than this, before the costly stages: auto (what the machine "
        "or container has available), off, or a size such as 16G.  \\[default: auto]",
        "Input",
    ),
]


class EngineChoice(str, Enum):
    auto = "auto"
    memory = "memory"
    stream = "stream"
    ray = "ray"


EngineOpt = Annotated[
    EngineChoice | None,
    _opt(
        "memory: every text in memory; stream: texts on disk, rows judged run by run within --max-memory "
        "(not --against, --eval, --pair, --above-positive or --verifier); ray: the stream engine's "
        "runs judged and embedded on Ray Data workers (pip install 'contrast-audit[ray]'); "
        "auto: memory when the input fits, else stream.  \\[default: auto]",
        "Input",
        "--engine",
    ),
]
RayAddress = Annotated[
    str | None,
    _opt("The Ray cluster --engine ray joins (host:port, or auto); without it a local instance starts.", "Input"),
]
ConfigFile = Annotated[
    Path | None,
    _opt("Settings file (default: ./contrast-audit.toml or \\[tool.contrast-audit] in ./pyproject.toml).", "Input"),
]
FormatOpt = Annotated[Format | None, _opt("Report format.  \\[default: text]", "Output", "--format")]
OutputOpt = Annotated[
    str | None,
    _opt(
        "Write the report here (atomically; checked before the scan) instead of stdout; without --format the "
        "extension picks the format (.json, .md, .html, .sarif, .txt).",
        "Output",
    ),
]
Quiet = Annotated[bool, _opt("No progress bars and no summary line on stderr.", "Output", "--quiet", "-q")]

Against = Annotated[
    list[str] | None,
    _opt(
        "Existing training data (files or globs; repeatable): report new rows that repeat or paraphrase its rows. "
        "Read with the column flags above unless [tool.contrast-audit.against] names its columns.",
        "Reference data",
    ),
]
EvalData = Annotated[
    list[str] | None,
    _opt(
        "Evaluation data (pair files, single-text files with --eval-text, or BEIR queries.jsonl/corpus.jsonl or "
        "their directory; repeatable): report new rows that leak it.",
        "Reference data",
        "--eval",
    ),
]
EvalText = Annotated[
    str | None, _opt("The eval files hold one text per row, in this column (e.g. question).", "Reference data")
]
EvalAlignment = Annotated[
    float | None,
    _opt(
        "Alignment guard for matches with eval data (0 turns it off: a leak missed costs more than a false alarm; "
        "existing data uses --alignment).  \\[default: 0]",
        "Reference data",
    ),
]
WithExisting = Annotated[
    bool | None,
    _opt(
        "Plan the in-batch audit over new and existing rows together; report findings that involve a new row.",
        "Reference data",
        "--with-existing",
    ),
]
Since = Annotated[
    str | None,
    _opt(
        "A git revision (HEAD, origin/main, a sha): the baseline is the scanned files as they are there, so only what "
        "the rows added since bring counts (a pre-commit hook: --since HEAD). Instead of --baseline.",
        "Gate",
    ),
]
Repeats = Annotated[
    bool | None,
    _opt(
        "With --baseline, also check each new row's texts against the old rows of the scanned data: a repeat, exact "
        "or near, of an existing row is an overlap naming that row's file and line, whatever the batches.  "
        "\\[default: on]",
        "Gate",
        "--repeats/--no-repeats",
    ),
]
IndexDir = Annotated[
    str | None,  # a str, not a Path: an empty name stays empty and is refused (config._NOT_EMPTY)
    _opt(
        "Directory of the reference index (signatures and embeddings of reference texts, by text hash); cache it "
        "between CI runs.  \\[default: index/ under the cache directory]",
        "Reference data",
    ),
]
UseIndex = Annotated[
    bool | None,
    _opt("Read and write the reference index.  \\[default: on]", "Reference data", "--use-index/--no-index"),
]
BaselineOpt = Annotated[
    str | None,  # a str, not a Path: an empty name stays empty and is refused (config._NOT_EMPTY)
    _opt(
        "A JSON report of an earlier scan: what it already holds is marked baseline and not counted by the gate.",
        "Gate",
    ),
]


# The options every command that plans and judges batches shares (scan, negatives, manifest): declared
# once here, added to each command's signature by ``@audit_options`` and handed to it as one object.
AUDIT_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("anchor", AnchorCol),
    ("positive", PositiveCol),
    ("negative", NegativeCols),
    ("id_column", IdCol),
    ("source", SourceCol),
    ("cohort", CohortCol),
    ("group", GroupCol),
    ("batch_size", BatchSize),
    ("seed", Seed),
    ("epochs", Epochs),
    ("drop_last", DropLast),
    ("world_size", WorldSize),
    ("sampler", SamplerOpt),
    ("plan", PlanFile),
    ("directions", Directions),
    ("max_hops", MaxHops),
    ("number_guard", NumberGuardOpt),
    ("entity_guard", EntityGuardOpt),
    ("alignment", Alignment),
    ("alignment_words", AlignmentWords),
    ("alignment_match", AlignmentMatch),
    ("word_order", WordOrder),
    ("negation_guard", NegationGuardOpt),
    ("near_identical", NearIdentical),
    ("minhash", MinHashOn),
    ("minhash_threshold", MinHashThreshold),
    ("num_perm", NumPerm),
    ("shingle", Shingle),
    ("ngram", NGram),
    ("embeddings", EmbeddingsOn),
    ("model", ModelPath),
    ("device", Device),
    ("query_prompt", QueryPrompt),
    ("doc_prompt", DocPrompt),
    ("embed_batch_size", EmbedBatch),
    ("precision", Precision),
    ("first_stage", FirstStage),
    ("backend", Backend),
    ("cache_dir", CacheDir),
    ("cache", UseCache),
    ("positive_threshold", PositiveThreshold),
    ("anchor_threshold", AnchorThreshold),
    ("margin", MarginOn),
    ("margin_support", MarginSupport),
    ("absolute_margin", AbsoluteMargin),
    ("relative_margin", RelativeMargin),
    ("margin_doc_ratio", MarginDocRatio),
    ("above_positive", AbovePositive),
    ("pair_evidence", PairOn),
    ("calibration", CalibrationOpt),
    ("calibration_quantile", CalibrationQuantile),
    ("calibration_floor", CalibrationFloor),
    ("pair_threshold", PairThreshold),
    ("verifier", VerifierOpt),
    ("verifier_threshold", VerifierThreshold),
    ("verifier_quantile", VerifierQuantile),
    ("on_bad_row", OnBad),
    ("delimiter", Delimiter),
    ("max_memory", MaxMemory),
    ("engine", EngineOpt),
    ("ray_address", RayAddress),
)
_SETTING_NAMES = {"negative": "negatives", "id_column": "id"}  # flag parameter → settings key


@dataclass(frozen=True)
class AuditOptions:
    """The shared flags of one command line (those not given are ``None``) and its ``--config`` file."""

    flags: dict[str, Any]
    config: Path | None

    def settings(self, **own: Any) -> tuple[dict[str, Any], str | None]:
        """Settings: the shared flags and the command's own setting flags (``own``, those given), over the
        settings file. Returns them with the file they came from."""
        from contrast_audit.config import load_config_file

        flags = {_SETTING_NAMES.get(k, k): v for k, v in {**self.flags, **own}.items()}
        file_settings, origin = load_config_file(self.config)
        for key in ("negatives", "directions"):
            flags[key] = _split(flags.get(key))
        for key, value in list(flags.items()):
            if isinstance(value, Enum):
                flags[key] = value.value
            elif isinstance(value, Path):
                flags[key] = str(value)
        return {**file_settings, **{k: v for k, v in flags.items() if v is not None}}, origin


def audit_options(*, exclude: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Add the shared options (less ``exclude``) and ``--config`` after the command's first parameter (its
    DATA argument); the command receives them as ``options: AuditOptions``."""
    shared = [(name, annotation) for name, annotation in AUDIT_OPTIONS if name not in exclude]

    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "options"]
        added = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=None)
            for name, annotation in [*shared, ("config", ConfigFile)]
        ]
        keyword_own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[1:]]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            flags = {name: kwargs.pop(name, None) for name, _ in shared}
            options = AuditOptions(flags, kwargs.pop("config", None))
            return func(*args, options=options, **kwargs)

        wrapper.__signature__ = signature.replace(parameters=[own[0], *added, *keyword_own])  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


# Report formats implied by an --output extension.
EXTENSION_FORMATS = {
    ".json": "json",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".txt": "text",
    ".sarif": "sarif",
}


def output_format_for(output: str | None, explicit: str | None, allowed: tuple[str, ...]) -> str:
    """The format: ``--format`` (or the settings file), else the output's extension, else text. A
    format that contradicts a known extension is refused (a .json file holding text would mislead)."""
    from contrast_audit.errors import ConfigError

    implied = EXTENSION_FORMATS.get(Path(output).suffix.lower()) if output else None
    if explicit is not None:
        if explicit not in allowed:
            raise ConfigError(f"format must be one of {', '.join(allowed)}, got {explicit!r}")
        if implied is not None and implied != explicit:
            raise ConfigError(
                f"--format {explicit} contradicts --output {output} (a {implied} file name)",
                fix=f"drop --format, or name the file for {explicit}",
            )
        return explicit
    if implied is not None and implied not in allowed:
        raise ConfigError(
            f"--output {output}: this command writes {' or '.join(allowed)}, not {implied}",
            fix="choose another file name or pass --format",
        )
    return implied or "text"


def open_output(
    output: str | None, data: list[str], settings: dict[str, Any], origin: str | None, option: str = "--output"
):
    """The checked ``--output`` (see ``io.atomic.OutputTarget``), before any work; None for stdout."""
    from contrast_audit.io.atomic import OutputTarget
    from contrast_audit.io.load import expand_paths

    if output is None:
        return nullcontext(None)
    inputs = [str(p) for p in expand_paths(data)]
    inputs += [str(v) for v in (settings.get("plan"), origin) if v]
    for key in ("against", "eval"):  # reference data is input too (a baseline report may be replaced)
        value = settings.get(key) or []
        patterns = [str(p) for p in ([value] if isinstance(value, str) else value)]
        if patterns:
            from contrast_audit.overlap import eval_files

            inputs += [str(p) for p in (eval_files(patterns) if key == "eval" else expand_paths(patterns))]
    return OutputTarget(output, inputs=inputs, option=option)


def check_stdout(output: str | None) -> None:
    """Before any work: a report bound for standard output needs one (``>&-`` closed it)."""
    from contrast_audit.errors import ConfigError

    if output is None and STDOUT_CLOSED:
        raise ConfigError(
            "standard output is closed (>&-), so the report has nowhere to go",
            fix="pass --output FILE, or redirect standard output to a file",
        )


def _emit(rendered: str | Iterable[str], target: Any) -> None:
    """Write a report (whole, or in pieces as they are made) to ``target``, or to stdout. A failing
    stdout (``> /dev/full``, a closed pipe) is exit 2 saying so."""
    from contrast_audit.errors import AuditError

    if target is not None:
        target.write(rendered)
        return
    try:
        for piece in (rendered,) if isinstance(rendered, str) else rendered:
            sys.stdout.write(piece)
        sys.stdout.flush()
    except OSError as exc:
        _drop_stdout()
        if isinstance(exc, BrokenPipeError):
            raise AuditError("standard output was closed by its reader before the report was whole") from None
        raise AuditError(
            f"writing the report to standard output failed ({exc.strerror or exc})",
            fix="free space where standard output goes, or pass --output FILE",
        ) from None


def _drop_stdout() -> None:
    """After a failed write, point stdout at /dev/null: the interpreter's last flush would fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115


def _warn(warnings: list[str]) -> None:
    err = _stderr()
    for line in warnings:
        err.print(Text.assemble(("warning:", "bold yellow"), " ", line))


@app.command()
@handle_errors
@audit_options()
def scan(
    data: Data,
    options: AuditOptions,
    output_format: FormatOpt = None,
    output: OutputOpt = None,
    top: Annotated[int, _opt("Findings shown in text, markdown and html reports.", "Output", min=0, max=MAX_TOP)] = 20,
    fail_on: Annotated[
        list[str] | None,
        _opt(
            "Gate: exit 1 when a condition holds, e.g. findings>0, fn-rate>0.001, likely>10. Grammar: "
            + GATE_GRAMMAR
            + ". Metrics: findings, certain, likely, suspect, fn-rate, rows-affected, mislabelled, one per evidence "
            "kind (exact, same-anchor, linked, declared, minhash, embedding, anchor-embedding, margin, pair), and "
            "overlaps and leaks (new rows repeating --against data or leaking --eval data).",
            "Gate",
        ),
    ] = None,
    report: Annotated[
        list[str] | None,
        _opt(
            "Also write the report in another format, FORMAT=PATH (e.g. sarif=reports/scan.sarif); repeatable, so one scan feeds every CI output.",
            "Output",
        ),
    ] = None,
    annotations: Annotated[
        Annotations,
        _opt(
            "GitHub workflow-command annotations on the offending rows, on stderr: auto (when GITHUB_ACTIONS=true), github or none.",
            "CI",
        ),
    ] = Annotations.auto,
    max_annotations: Annotated[
        int,
        _opt("At most N annotations, then a notice of how many more (0: only the notice).", "CI", min=0, max=MAX_TOP),
    ] = 50,
    quiet: Quiet = False,
    against: Against = None,
    eval_data: EvalData = None,
    eval_text: EvalText = None,
    eval_alignment: EvalAlignment = None,
    with_existing: WithExisting = None,
    index: IndexDir = None,
    use_index: UseIndex = None,
    baseline: BaselineOpt = None,
    since: Since = None,
    repeats: Repeats = None,
) -> None:
    """Simulate the batch plan and report the false negatives each batch will contain."""
    from contrast_audit.api import AuditResult, audit
    from contrast_audit.config import build_config
    from contrast_audit.errors import ConfigError
    from contrast_audit.gate import evaluate, parse
    from contrast_audit.report import FORMATTERS, pieces, summary_line

    settings, origin = options.settings(
        format=output_format,
        fail_on=fail_on,
        against=against or None,
        eval=eval_data or None,
        eval_text=eval_text,
        eval_alignment=eval_alignment,
        with_existing=with_existing,
        index=index,
        use_index=use_index,
        baseline=baseline,
        since=since,
        repeats=repeats,
    )
    cfg = build_config(settings)
    fmt = output_format_for(output, settings.get("format"), tuple(FORMATTERS))
    expressions = settings.get("fail_on") or []
    expressions = [expressions] if isinstance(expressions, str) else list(expressions)

    conditions = parse(expressions, sorted(AuditResult.METRICS))  # before the scan: typos cost nothing
    _check_reference_conditions(conditions, cfg, origin)
    if max_annotations < 0:
        raise ConfigError(f"--max-annotations must be >= 0, got {max_annotations}")
    extra = [_report_target(value, tuple(FORMATTERS)) for value in report or []]
    check_stdout(output)

    with ExitStack() as stack:
        target = stack.enter_context(open_output(output, data, settings, origin))
        extra_targets = [
            (name, stack.enter_context(open_output(path, data, settings, origin, "--report"))) for name, path in extra
        ]
        with progress_bars(not quiet and sys.stderr.isatty()) as progress:
            result = audit(data, cfg, progress=progress, config_file=origin)
        _warn(result.warnings)
        gate = evaluate(conditions, result.metrics())  # before the reports: the HTML report opens with it
        color = fmt == "text" and output is None and sys.stdout.isatty()
        _emit(pieces(fmt, result, top=top, color=color, gate=gate), target)
        for name, extra_target in extra_targets:
            _emit(pieces(name, result, top=top, color=False, gate=gate), extra_target)

    if not quiet:
        err = _stderr()
        err.print(summary_line(result), markup=False)
        for cond, value in gate.checked:
            verdict = "FAILED" if (cond, value) in gate.failed else "passed"
            err.print(f"gate {cond}: {verdict} (value {value:g})", markup=False)
    _github_outputs(result, gate, annotations.value, max_annotations)
    raise typer.Exit(EXIT_GATE_FAILED if not gate.passed else EXIT_OK)


def _check_reference_conditions(conditions: list, cfg: Any, origin: str | None) -> None:
    """A gate on leaks with no eval data, or on overlaps with nothing to overlap, would pass whatever the
    data holds: exit 2 naming the condition (a settings change that drops the eval set cannot pass a leak)."""
    from contrast_audit.errors import ConfigError

    where = f" (fail-on in {origin})" if origin else ""
    ref = cfg.reference
    for c in conditions:
        if c.metric == "leaks" and not ref.eval:
            raise ConfigError(
                f"--fail-on {c}{where} gates leaks of eval data, and no eval data is configured, so it would always pass",
                fix="name the eval data with --eval PATH or eval = [...] in the settings file, or drop the leaks condition",
            )
        if c.metric == "overlaps" and not (ref.against or cfg.baseline or cfg.since):
            raise ConfigError(
                f"--fail-on {c}{where} gates overlaps with existing data, and none is given, so it would always pass",
                fix="name existing data with --against PATH, or give --baseline REPORT.json or --since REV (new rows "
                "are then checked against the old ones), or drop the overlaps condition",
            )


def _report_target(value: str, formats: tuple[str, ...]) -> tuple[str, str]:
    """``FORMAT=PATH`` of ``--report``, checked before the scan (a format contradicting the file's
    extension is refused, as for ``--output``)."""
    from contrast_audit.errors import ConfigError

    name, sep, path = value.partition("=")
    if not sep or not path.strip() or name not in formats:
        raise ConfigError(
            f"--report '{value}' is not FORMAT=PATH with FORMAT one of {', '.join(formats)}",
            fix="write for example --report sarif=reports/scan.sarif",
        )
    return output_format_for(path, name, formats), path


def _github_outputs(result: Any, gate: Any, mode: str, max_annotations: int) -> None:
    """Annotations on stderr (stdout may hold the report) and the step summary, under GitHub Actions."""
    from contrast_audit.report import github

    if github.annotations_enabled(mode):
        lines = github.annotations(result, max_annotations=max_annotations)
        sys.stderr.write("".join(line + "\n" for line in lines))
        sys.stderr.flush()
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        github.append_step_summary(summary, github.step_summary(result, gate))


@app.command()
@handle_errors
@audit_options(exclude=("embeddings",))
def negatives(
    data: Data,
    options: AuditOptions,
    output_format: Annotated[
        NegativesFormat | None, _opt("Output format.  \\[default: text]", "Output", "--format")
    ] = None,
    output: Annotated[
        str | None,
        _opt(
            "Write the list here (atomically; checked before the scan) instead of stdout; without --format a .json "
            "name writes JSON.",
            "Output",
        ),
    ] = None,
    top: Annotated[
        int,
        _opt("How many alleged negatives (or anchors, with --per-anchor) to list.", "Output", min=1, max=MAX_TOP),
    ] = 20,
    per_anchor: Annotated[
        int,
        _opt(
            "List each anchor's K highest-scoring negatives, for the --top anchors whose best negative scores highest; 0 lists negatives globally.",
            "Output",
            min=0,
            max=MAX_TOP,
        ),
    ] = 0,
    only_source: Annotated[list[str] | None, _opt("Only anchors from these sources (repeatable).", "Filter")] = None,
    only_cohort: Annotated[list[str] | None, _opt("Only anchors from these cohorts (repeatable).", "Filter")] = None,
    quiet: Quiet = False,
) -> None:
    """List the highest-scoring alleged negatives: candidate and positive scores, margin, and whether and why each is flagged."""
    from contrast_audit.api import audit
    from contrast_audit.config import build_config
    from contrast_audit.errors import ConfigError
    from contrast_audit.negatives import alleged_negatives, in_memory, render_json, render_text
    from contrast_audit.report.common import plural

    settings, origin = options.settings()
    settings["embeddings"] = True
    settings["first_stage"] = "none"  # the ranking reads every comparison with the full model
    cfg = in_memory(build_config(settings))
    fmt = output_format_for(output, output_format.value if output_format else None, ("text", "json"))
    if top < 1 or per_anchor < 0:
        raise ConfigError("--top must be >= 1 and --per-anchor >= 0")
    check_stdout(output)
    with open_output(output, data, settings, origin) as target:
        with progress_bars(not quiet and sys.stderr.isatty()) as progress:
            result = audit(data, cfg, progress=progress, config_file=origin, every_vector=True)
            table = alleged_negatives(result, top=top, per_anchor=per_anchor, sources=only_source, cohorts=only_cohort)
        _warn(result.warnings)
        if fmt == "json":
            _emit(render_json(result, table, top=top, per_anchor=per_anchor), target)
        else:
            color = output is None and sys.stdout.isatty()
            _emit(render_text(result, table, per_anchor=per_anchor, color=color), target)
    if not quiet:
        _stderr().print(
            f"contrast-audit: {plural(table.height, 'alleged negative')} listed from "
            f"{plural(result.judgement.candidates, 'candidate')}",
            markup=False,
        )
    raise typer.Exit(EXIT_OK)


class Strategy(str, Enum):
    mask = "mask"
    group = "group"
    multi_positive = "multi-positive"
    cluster = "cluster"


class Severity(str, Enum):
    certain = "certain"
    likely = "likely"
    suspect = "suspect"


class Weight(str, Enum):
    anchor = "anchor"


@app.command()
@handle_errors
@audit_options()
def manifest(
    data: Data,
    options: AuditOptions,
    out: Annotated[str, _opt("Write the manifest here (JSON Lines, atomically).", "Output", "--out")],
    strategy: Annotated[
        Strategy | None,
        _opt(
            "mask: your plan, findings masked; group: related rows re-planned into different batches, the rest masked; multi-positive: related rows batched together as each other's positives; cluster: topic-hard batches from k-means on the anchors' embeddings, false negatives masked.  \\[default: mask]",
            "Manifest",
        ),
    ] = None,
    mask_severity: Annotated[
        Severity | None,
        _opt("Act on findings of this severity and above.  \\[default: likely]", "Manifest"),
    ] = None,
    balance: Annotated[
        int | None,
        _opt(
            "At most N rows of one anchor (same anchor text or group) per batch, or the fewest the epoch allows; every row still trained on. 1 spreads each anchor as evenly as possible.  \\[default: off]",
            "Manifest",
        ),
    ] = None,
    clusters: Annotated[
        int | None,
        _opt("k for --strategy cluster.  \\[default: distinct anchors / global batch size]", "Manifest"),
    ] = None,
    weight: Annotated[
        Weight | None,
        _opt(
            "anchor: weight each row's loss term so every anchor (same anchor text or group) carries the same share of the loss (written per row into the manifest; the trainer applies it).  \\[default: off]",
            "Manifest",
        ),
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Write a batch manifest that masks, separates or groups the false negatives (or builds topic-hard batches with them masked), for the bundled trainer or your own."""
    from contrast_audit.config import build_config
    from contrast_audit.manifest import build_manifest

    settings, origin = options.settings(
        strategy=strategy, mask_severity=mask_severity, balance=balance, clusters=clusters, weight=weight
    )
    cfg = build_config(settings)
    with (
        open_output(out, data, settings, origin, "--out") as target,
        progress_bars(not quiet and sys.stderr.isatty()) as progress,
    ):
        result = build_manifest(
            data,
            cfg,
            strategy=settings.get("strategy", "mask"),
            mask_severity=settings.get("mask_severity", "likely"),
            balance=settings.get("balance"),
            clusters=settings.get("clusters"),
            weight=settings.get("weight"),
            progress=progress,
            config_file=origin,
        )
        target.write(result.render())
    if not quiet:
        c = result.counts
        _stderr().print(
            f"contrast-audit: {result.manifest.strategy} manifest for {c['rows_planned']} rows in {c['batches']} "
            f"batches written to {out}: {c['masked_pairs']} masked pairs, {c['positive_pairs']} positive pairs, "
            f"{c['conflicts_left']} related pairs left sharing a batch (masked)" + _plan_note(result.manifest.header),
            markup=False,
        )
    raise typer.Exit(EXIT_OK)


def _plan_note(header: dict) -> str:
    """The clustering, balance and weight a manifest header records, in words."""
    parts = []
    if "clustering" in header:
        parts.append(f"{header['clustering']['k']} clusters (seed {header['clustering']['seed']})")
    if "balance" in header:
        b = header["balance"]
        parts.append(
            f"balance {b['max_per_batch']}: at most {b['most_rows_of_one_anchor_in_a_batch']} rows of one anchor "
            f"in a batch, {b['rows_over_quota']} over quota"
        )
    if "weight" in header:
        w = header["weight"]
        parts.append(f"weight {w['by']}: each of {w['units']} anchors carries the same share of the loss")
    return "; " + "; ".join(parts) if parts else ""


@app.command()
@handle_errors
def init(
    output: Annotated[
        Path, _opt("Where to write the settings file (a directory gets contrast-audit.toml).", "Output")
    ] = Path("contrast-audit.toml"),
    force: Annotated[bool, _opt("Overwrite an existing file.", "Output", "--force")] = False,
) -> None:
    """Write a commented starter contrast-audit.toml: every setting with its default and meaning."""
    from contrast_audit.starter import write

    target = write(output, force=force)
    _stderr().print(f"contrast-audit: wrote {target}; uncomment the settings you want to change", markup=False)


class MultiPositive(str, Enum):
    sum = "sum"
    mean = "mean"
    off = "off"


@app.command()
@handle_errors
def train(
    data: Data,
    manifest: Annotated[
        str, _opt("The manifest planned for DATA (contrast-audit manifest).", "Training", "--manifest")
    ],
    out: Annotated[
        str, _opt("Write the trained model directory here (atomically; must not exist).", "Output", "--out")
    ],
    model: Annotated[
        str | None,
        _opt("Local sentence-transformers model to start from.  \\[default: the bundled all-MiniLM-L6-v2]", "Training"),
    ] = None,
    max_steps: Annotated[int | None, _opt("Stop after this many optimizer steps.", "Training")] = None,
    epochs: Annotated[
        int | None, _opt("Epochs to train (at most the manifest's).  \\[default: the manifest's]", "Training")
    ] = None,
    lr: Annotated[float, _opt("Learning rate.", "Training")] = 2e-5,
    seed: Annotated[
        int, _opt("Seed for dropout and initialisation (the batches come from the manifest).", "Training")
    ] = 0,
    scale: Annotated[float, _opt("Similarity scale = 1/temperature (logged as both).", "Training")] = 20.0,
    multi_positive: Annotated[
        MultiPositive,
        _opt(
            "Label normalisation for a multi-positive manifest: sum = -log of the positive set's summed probability; mean = mean -log over positives; off = mask them instead.",
            "Training",
        ),
    ] = MultiPositive.sum,
    quiet: Quiet = False,
) -> None:
    """Fine-tune a model on DATA as a manifest plans it: its batches, with its false negatives masked."""
    from contrast_audit.train.trainer import train as run_training

    result = run_training(
        data,
        manifest,
        out,
        model=model,
        epochs=epochs,
        max_steps=max_steps,
        lr=lr,
        seed=seed,
        scale=scale,
        multi_positive=multi_positive.value,
        progress=not quiet and sys.stderr.isatty(),
    )
    if not quiet:
        padded = (
            f"; {result.padded_negatives} missing hard negatives of {result.padded_rows} rows padded and masked"
            if result.padded_negatives
            else ""
        )
        weighted = f"; the manifest's {result.weight.get('by', 'row')} weights applied" if result.weight else ""
        _stderr().print(
            f"contrast-audit: trained {result.steps} steps (scale {scale:g}, temperature {1 / scale:g}){weighted}{padded}; model written to {out}, log {result.log}",
            markup=False,
        )
    raise typer.Exit(EXIT_OK)


class EvalFormat(str, Enum):
    text = "text"
    json = "json"


@app.command("eval")
@handle_errors
def eval_command(
    model: Annotated[
        str, typer.Argument(help="A trained model directory, or 'default' for the bundled model.", show_default=False)
    ],
    queries: Annotated[str, _opt("BEIR queries.jsonl (_id, text).", "Data")],
    corpus: Annotated[str, _opt("BEIR corpus.jsonl (_id, title, text).", "Data")],
    qrels: Annotated[str, _opt("BEIR qrels TSV (query-id, corpus-id, score; score > 0 is relevant).", "Data")],
    query_prompt: Annotated[str | None, _opt("Prefix for queries (the scoring contract, as in scan).", "Data")] = None,
    doc_prompt: Annotated[str | None, _opt("Prefix for documents (the scoring contract, as in scan).", "Data")] = None,
    output_format: Annotated[EvalFormat, _opt("Output format.", "Output", "--format")] = EvalFormat.text,
) -> None:
    """Retrieval quality of MODEL on held-out queries: Recall@1/5/10, MRR@10, nDCG@10."""
    check_stdout(None)  # before the imports: they take seconds
    from contrast_audit.train.evaluate import evaluate, render_json, render_text

    result = evaluate(
        None if model == "default" else model, queries, corpus, qrels, query_prompt=query_prompt, doc_prompt=doc_prompt
    )
    _emit(render_json(result) if output_format == EvalFormat.json else render_text(result), None)
    raise typer.Exit(EXIT_OK)


class _QuietOnFailure:
    """Standard error that cannot fail the run: when it is full or gone (``2>/dev/full``), messages are
    lost but the exit code still says how the run ended."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


STDOUT_CLOSED = False  # standard output was closed when the command started (``>&-``)


def guard_standard_streams() -> None:
    """Closed standard streams (``>&-``, ``2>&-``) are opened on /dev/null, so no file the run opens can
    take their descriptor and receive stray output; stderr becomes one that never fails the run."""
    global STDOUT_CLOSED
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            if getattr(sys, name) is not None:
                continue
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        if name == "stdout":
            STDOUT_CLOSED = True
        setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))  # noqa: SIM115
    sys.stderr = _QuietOnFailure(sys.stderr)


def main() -> None:
    """Console-script entry point."""
    guard_standard_streams()
    app()


if __name__ == "__main__":
    main()
