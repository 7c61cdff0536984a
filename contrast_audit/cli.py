"""Typer commands only: flags → config, call the API, pick a formatter, map errors → exit codes."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from contrast_audit import __version__
from contrast_audit.errors import EXIT_GATE_FAILED, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, AuditError

app = typer.Typer(
    name="contrast-audit",
    help="Find the false negatives that in-batch contrastive training will see in your pair data.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

ISSUES_URL = "https://github.com/contrast-audit/contrast-audit/issues"
F = TypeVar("F", bound=Callable[..., Any])


class Format(str, Enum):
    text = "text"
    json = "json"
    markdown = "markdown"
    html = "html"


class Sampler(str, Enum):
    random = "random"
    no_duplicates = "no-duplicates"


class OnBadRow(str, Enum):
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
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            console = _stderr()
            console.print(
                Text.assemble(
                    ("internal error:", "bold red"),
                    f" {type(exc).__name__}: {exc} — this is a bug in contrast-audit {__version__}; "
                    f"please report it with the command you ran at {ISSUES_URL}",
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
    return typer.Option(*names, help=help_text, rich_help_panel=panel, **kwargs)


# Options shared by `scan` and `negatives`: one declaration each.
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
    Path | None,
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
Alignment = Annotated[
    float | None,
    _opt(
        "Short texts whose token alignment (the smaller idf-weighted share of each text's tokens matched in the other, with the embedding model) is below this are never near-duplicates; 0 turns this off.  \\[default: 0.8]",
        "Evidence",
    ),
]
AlignmentWords = Annotated[
    int | None,
    _opt("Texts of at most N words count as short for the alignment guard.  \\[default: 50]", "Evidence"),
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
        "A local sentence-transformers model directory.  \\[default: packaged all-MiniLM-L6-v2]",
        "Embeddings",
        "--model",
    ),
]
Device = Annotated[str | None, _opt("Device for the model: cpu, cuda, cuda:1, mps.  \\[default: auto]", "Embeddings")]
QueryPrompt = Annotated[str | None, _opt("Prompt/prefix for anchors, as in training (e.g. 'query: ').", "Embeddings")]
DocPrompt = Annotated[str | None, _opt("Prompt/prefix for positives and negatives (e.g. 'passage: ').", "Embeddings")]
EmbedBatch = Annotated[int | None, _opt("Texts per encode batch.  \\[default: 64]", "Embeddings")]
CacheDir = Annotated[
    Path | None,
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
    float | None, _opt("Cosine to the positive that makes a margin finding likely.  \\[default: 0.65]", "Embeddings")
]
RelativeMargin = Annotated[
    float | None,
    _opt("Margin rule sim(a, c) > sim(a, p) * (1 - margin).  \\[default: 0.25]", "Embeddings"),
]
OnBad = Annotated[
    OnBadRow | None,
    _opt("What to do with a malformed row: stop with an error, or skip it and report it.  \\[default: error]", "Input"),
]
ConfigFile = Annotated[
    Path | None,
    _opt("Settings file (default: ./contrast-audit.toml or \\[tool.contrast-audit] in ./pyproject.toml).", "Input"),
]
FormatOpt = Annotated[Format | None, _opt("Report format.  \\[default: text]", "Output", "--format")]
OutputOpt = Annotated[Path | None, _opt("Write the report here (atomically) instead of stdout.", "Output")]
Quiet = Annotated[bool, _opt("No progress bars and no summary line on stderr.", "Output", "--quiet", "-q")]


def _settings(config: Path | None, **flags: Any) -> tuple[dict[str, Any], str | None]:
    """Flags (those given) over the settings file."""
    from contrast_audit.config import load_config_file

    file_settings, origin = load_config_file(config)
    for key in ("negatives", "directions"):
        flags[key] = _split(flags.get(key))
    for key, value in list(flags.items()):
        if isinstance(value, Enum):
            flags[key] = value.value
        elif isinstance(value, Path):
            flags[key] = str(value)
    return {**file_settings, **{k: v for k, v in flags.items() if v is not None}}, origin


def _emit(rendered: str, output: Path | None) -> None:
    from contrast_audit.io import write_atomic

    if output is not None:
        write_atomic(output, rendered)
    else:
        sys.stdout.write(rendered)
        sys.stdout.flush()


@app.command()
@handle_errors
def scan(
    data: Data,
    anchor: AnchorCol = None,
    positive: PositiveCol = None,
    negative: NegativeCols = None,
    id_column: IdCol = None,
    source: SourceCol = None,
    cohort: CohortCol = None,
    group: GroupCol = None,
    batch_size: BatchSize = None,
    seed: Seed = None,
    epochs: Epochs = None,
    drop_last: DropLast = None,
    world_size: WorldSize = None,
    sampler: SamplerOpt = None,
    plan: PlanFile = None,
    directions: Directions = None,
    max_hops: MaxHops = None,
    number_guard: NumberGuardOpt = None,
    alignment: Alignment = None,
    alignment_words: AlignmentWords = None,
    alignment_match: AlignmentMatch = None,
    minhash: MinHashOn = None,
    minhash_threshold: MinHashThreshold = None,
    num_perm: NumPerm = None,
    shingle: Shingle = None,
    ngram: NGram = None,
    embeddings: EmbeddingsOn = None,
    model: ModelPath = None,
    device: Device = None,
    query_prompt: QueryPrompt = None,
    doc_prompt: DocPrompt = None,
    embed_batch_size: EmbedBatch = None,
    cache_dir: CacheDir = None,
    cache: UseCache = None,
    positive_threshold: PositiveThreshold = None,
    anchor_threshold: AnchorThreshold = None,
    margin: MarginOn = None,
    margin_support: MarginSupport = None,
    absolute_margin: AbsoluteMargin = None,
    relative_margin: RelativeMargin = None,
    on_bad_row: OnBad = None,
    output_format: FormatOpt = None,
    output: OutputOpt = None,
    top: Annotated[int, _opt("Findings shown in text, markdown and html reports.", "Output")] = 20,
    fail_on: Annotated[
        list[str] | None,
        _opt(
            "Gate: exit 1 when METRIC OP NUMBER holds, e.g. findings>0, fn-rate>0.001, likely>10; repeatable.", "Gate"
        ),
    ] = None,
    quiet: Quiet = False,
    config: ConfigFile = None,
) -> None:
    """Simulate the batch plan and report the false negatives each batch will contain."""
    given = dict(locals())
    from contrast_audit.api import AuditResult, audit
    from contrast_audit.config import build_config
    from contrast_audit.errors import ConfigError
    from contrast_audit.gate import evaluate, parse
    from contrast_audit.report import FORMATTERS, summary_line

    flags = {k: v for k, v in given.items() if k not in ("data", "top", "quiet", "config", "output")}
    flags["negatives"] = flags.pop("negative")
    flags["id"] = flags.pop("id_column")
    flags["format"] = flags.pop("output_format")
    flags["fail_on"] = fail_on or None
    settings, origin = _settings(config, **flags)
    cfg = build_config(settings)
    fmt = settings.get("format", "text")
    if fmt not in FORMATTERS:
        raise ConfigError(f"format must be one of {', '.join(FORMATTERS)}, got {fmt!r}")
    expressions = settings.get("fail_on") or []
    expressions = [expressions] if isinstance(expressions, str) else list(expressions)

    conditions = parse(expressions, sorted(AuditResult.METRICS))  # before the scan: typos cost nothing

    with progress_bars(not quiet and sys.stderr.isatty()) as progress:
        result = audit(data, cfg, progress=progress, config_file=origin)

    color = fmt == "text" and output is None and sys.stdout.isatty()
    _emit(FORMATTERS[fmt](result, top=top, color=color), output)

    gate = evaluate(conditions, result.metrics())
    if not quiet:
        err = _stderr()
        err.print(summary_line(result), markup=False)
        for cond, value in gate.checked:
            verdict = "FAILED" if (cond, value) in gate.failed else "passed"
            err.print(f"gate {cond}: {verdict} (value {value:g})", markup=False)
    raise typer.Exit(EXIT_GATE_FAILED if not gate.passed else EXIT_OK)


@app.command()
@handle_errors
def negatives(
    data: Data,
    anchor: AnchorCol = None,
    positive: PositiveCol = None,
    negative: NegativeCols = None,
    id_column: IdCol = None,
    source: SourceCol = None,
    cohort: CohortCol = None,
    group: GroupCol = None,
    batch_size: BatchSize = None,
    seed: Seed = None,
    epochs: Epochs = None,
    drop_last: DropLast = None,
    world_size: WorldSize = None,
    sampler: SamplerOpt = None,
    plan: PlanFile = None,
    directions: Directions = None,
    max_hops: MaxHops = None,
    number_guard: NumberGuardOpt = None,
    alignment: Alignment = None,
    alignment_words: AlignmentWords = None,
    alignment_match: AlignmentMatch = None,
    minhash: MinHashOn = None,
    minhash_threshold: MinHashThreshold = None,
    num_perm: NumPerm = None,
    shingle: Shingle = None,
    ngram: NGram = None,
    model: ModelPath = None,
    device: Device = None,
    query_prompt: QueryPrompt = None,
    doc_prompt: DocPrompt = None,
    embed_batch_size: EmbedBatch = None,
    cache_dir: CacheDir = None,
    cache: UseCache = None,
    positive_threshold: PositiveThreshold = None,
    anchor_threshold: AnchorThreshold = None,
    margin: MarginOn = None,
    margin_support: MarginSupport = None,
    absolute_margin: AbsoluteMargin = None,
    relative_margin: RelativeMargin = None,
    on_bad_row: OnBad = None,
    output_format: Annotated[
        Format | None, _opt("Output format: text or json.  \\[default: text]", "Output", "--format")
    ] = None,
    output: OutputOpt = None,
    top: Annotated[int, _opt("How many alleged negatives (or anchors, with --per-anchor) to list.", "Output")] = 20,
    per_anchor: Annotated[
        int,
        _opt(
            "List each anchor's K highest-scoring negatives, for the --top anchors whose best negative scores highest; 0 lists negatives globally.",
            "Output",
        ),
    ] = 0,
    only_source: Annotated[list[str] | None, _opt("Only anchors from these sources (repeatable).", "Filter")] = None,
    only_cohort: Annotated[list[str] | None, _opt("Only anchors from these cohorts (repeatable).", "Filter")] = None,
    quiet: Quiet = False,
    config: ConfigFile = None,
) -> None:
    """List the highest-scoring alleged negatives: candidate and positive scores, margin, and whether and why each is flagged."""
    given = dict(locals())
    from contrast_audit.api import audit
    from contrast_audit.config import build_config
    from contrast_audit.errors import ConfigError
    from contrast_audit.negatives import alleged_negatives, render_json, render_text

    flags = {
        k: v
        for k, v in given.items()
        if k
        not in ("data", "top", "quiet", "config", "output", "per_anchor", "only_source", "only_cohort", "output_format")
    }
    flags["negatives"] = flags.pop("negative")
    flags["id"] = flags.pop("id_column")
    settings, origin = _settings(config, **flags)
    settings["embeddings"] = True
    cfg = build_config(settings)
    fmt = output_format.value if output_format else "text"
    if fmt not in ("text", "json"):
        raise ConfigError(f"negatives --format must be text or json, got {fmt!r}")
    if top < 1 or per_anchor < 0:
        raise ConfigError("--top must be >= 1 and --per-anchor >= 0")
    with progress_bars(not quiet and sys.stderr.isatty()) as progress:
        result = audit(data, cfg, progress=progress, config_file=origin)
        table = alleged_negatives(result, top=top, per_anchor=per_anchor, sources=only_source, cohorts=only_cohort)
    if fmt == "json":
        _emit(render_json(result, table, top=top, per_anchor=per_anchor), output)
    else:
        _emit(render_text(result, table, per_anchor=per_anchor, color=output is None and sys.stdout.isatty()), output)
    if not quiet:
        _stderr().print(
            f"contrast-audit: {table.height} alleged negatives listed from {result.judgement.candidates} candidates",
            markup=False,
        )
    raise typer.Exit(EXIT_OK)


def main() -> None:
    """Console-script entry point."""
    app()
