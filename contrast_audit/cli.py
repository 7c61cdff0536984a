"""Typer commands only: flags → config, call the API, pick a formatter, map errors → exit codes."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

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
            _stderr().print(f"[bold red]error:[/bold red] {exc.render()}", markup=True)
            raise typer.Exit(EXIT_USAGE) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 - the last line of defence
            console = _stderr()
            console.print(
                f"[bold red]internal error:[/bold red] {type(exc).__name__}: {exc} — this is a bug in "
                f"contrast-audit {__version__}; please report it with the command you ran at {ISSUES_URL}",
                markup=True,
            )
            if "--debug" in sys.argv:
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


@app.command()
@handle_errors
def scan(
    data: Annotated[
        list[str], typer.Argument(help="Pair files (JSONL, CSV, TSV, Parquet) or globs.", show_default=False)
    ],
    anchor: Annotated[
        str | None, typer.Option(help="Column holding the anchor (query).", rich_help_panel="Columns")
    ] = None,
    positive: Annotated[
        str | None,
        typer.Option(
            help="Column holding the positive (document); a list column gives one row per item.",
            rich_help_panel="Columns",
        ),
    ] = None,
    negative: Annotated[
        list[str] | None,
        typer.Option(
            "--negative", help="Hard-negative column; repeat it or name a list column.", rich_help_panel="Columns"
        ),
    ] = None,
    id_column: Annotated[
        str | None,
        typer.Option("--id", help="Column of unique row ids (default: 0-based row number).", rich_help_panel="Columns"),
    ] = None,
    source: Annotated[
        str | None, typer.Option(help="Column naming each row's source, for breakdowns.", rich_help_panel="Columns")
    ] = None,
    cohort: Annotated[
        str | None, typer.Option(help="Column naming each row's cohort, for breakdowns.", rich_help_panel="Columns")
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(help="Column whose equal values declare rows mutual positives.", rich_help_panel="Columns"),
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Per-device batch size.  [default: 32]", rich_help_panel="Batch plan")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="The trainer's seed.  [default: 42]", rich_help_panel="Batch plan")
    ] = None,
    epochs: Annotated[
        int | None, typer.Option(help="Epochs to plan.  [default: 1]", rich_help_panel="Batch plan")
    ] = None,
    drop_last: Annotated[
        bool | None,
        typer.Option(
            "--drop-last/--keep-last",
            help="Drop the last incomplete batch.  [default: keep]",
            rich_help_panel="Batch plan",
        ),
    ] = None,
    world_size: Annotated[
        int | None,
        typer.Option(
            help="Devices whose embeddings are gathered: the comparison set is the global batch.  [default: 1]",
            rich_help_panel="Batch plan",
        ),
    ] = None,
    sampler: Annotated[
        Sampler | None,
        typer.Option(
            help="sentence-transformers batch sampler to reproduce.  [default: random]", rich_help_panel="Batch plan"
        ),
    ] = None,
    plan: Annotated[
        Path | None,
        typer.Option(
            help='A plan exported from your own loop: JSONL, {"rows": [id, ...]} per batch.',
            rich_help_panel="Batch plan",
        ),
    ] = None,
    directions: Annotated[
        list[str] | None,
        typer.Option(
            help="Loss directions (MultipleNegativesRankingLoss): query_to_doc, query_to_query, doc_to_query, doc_to_doc; repeat or comma-separate.  [default: query_to_doc]",
            rich_help_panel="Loss",
        ),
    ] = None,
    max_hops: Annotated[
        int | None,
        typer.Option(
            help="Longest chain of positive pairs that links two texts; 0 turns linked evidence off.  [default: 2]",
            rich_help_panel="Evidence",
        ),
    ] = None,
    on_bad_row: Annotated[
        OnBadRow | None,
        typer.Option(
            help="What to do with a malformed row: stop with an error, or skip it and report it.  [default: error]",
            rich_help_panel="Input",
        ),
    ] = None,
    output_format: Annotated[
        Format | None, typer.Option("--format", help="Report format.  [default: text]", rich_help_panel="Output")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(help="Write the report here (atomically) instead of stdout.", rich_help_panel="Output"),
    ] = None,
    top: Annotated[
        int, typer.Option(help="Findings shown in text and markdown reports.", rich_help_panel="Output")
    ] = 20,
    fail_on: Annotated[
        list[str] | None,
        typer.Option(
            help="Gate: exit 1 when METRIC OP NUMBER holds, e.g. findings>0, fn-rate>0.001, likely>10; repeatable.",
            rich_help_panel="Gate",
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="No progress bars and no summary line on stderr.", rich_help_panel="Output"),
    ] = False,
    config: Annotated[
        Path | None,
        typer.Option(
            help="Settings file (default: ./contrast-audit.toml or [tool.contrast-audit] in ./pyproject.toml).",
            rich_help_panel="Input",
        ),
    ] = None,
) -> None:
    """Simulate the batch plan and report the false negatives each batch will contain."""
    from contrast_audit.api import audit
    from contrast_audit.config import build_config, load_config_file
    from contrast_audit.gate import evaluate, parse
    from contrast_audit.io import write_atomic
    from contrast_audit.report import FORMATTERS, summary_line

    file_settings, origin = load_config_file(config)
    flags = {
        "anchor": anchor,
        "positive": positive,
        "negatives": _split(negative),
        "id": id_column,
        "source": source,
        "cohort": cohort,
        "group": group,
        "batch_size": batch_size,
        "seed": seed,
        "epochs": epochs,
        "drop_last": drop_last,
        "world_size": world_size,
        "sampler": sampler.value if sampler else None,
        "plan": str(plan) if plan else None,
        "directions": _split(directions),
        "max_hops": max_hops,
        "on_bad_row": on_bad_row.value if on_bad_row else None,
        "fail_on": fail_on or None,
        "format": output_format.value if output_format else None,
    }
    settings = {**file_settings, **{k: v for k, v in flags.items() if v is not None}}
    cfg = build_config(settings)
    fmt = settings.get("format", "text")
    if fmt not in FORMATTERS:
        from contrast_audit.errors import ConfigError

        raise ConfigError(f"format must be one of {', '.join(FORMATTERS)}, got {fmt!r}")
    expressions = settings.get("fail_on") or []
    expressions = [expressions] if isinstance(expressions, str) else list(expressions)

    with progress_bars(not quiet and sys.stderr.isatty()) as progress:
        result = audit(data, cfg, progress=progress, config_file=origin)
    conditions = parse(expressions, sorted(result.metrics()))

    color = fmt == "text" and output is None and sys.stdout.isatty()
    rendered = FORMATTERS[fmt](result, top=top, color=color)
    if output is not None:
        write_atomic(output, rendered)
    else:
        sys.stdout.write(rendered)
        sys.stdout.flush()

    gate = evaluate(conditions, result.metrics())
    if not quiet:
        err = _stderr()
        err.print(summary_line(result), markup=False)
        for cond, value in gate.checked:
            verdict = "FAILED" if (cond, value) in gate.failed else "passed"
            err.print(f"gate {cond}: {verdict} (value {value:g})", markup=False)
    raise typer.Exit(EXIT_GATE_FAILED if not gate.passed else EXIT_OK)


def main() -> None:
    """Console-script entry point."""
    app()
