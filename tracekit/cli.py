"""The `tracekit` command line: a thin client of the Python API (tracekit.ingest, tracekit.open).

Heavy modules (duckdb, polars, pyarrow) are imported inside commands so that `tracekit --help`
answers at once.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
import typer.core

if TYPE_CHECKING:
    from rich.console import Console

    from tracekit.errors import TracekitError
    from tracekit.ingest.run import IngestReport
    from tracekit.ingest.run import Progress as IngestProgress


class _Group(typer.core.TyperGroup):
    """Help shows what to type (PATH, DATASET, N), never Python types such as `<list[Path]>`."""

    def get_params(self, ctx: Any) -> Any:
        params = super().get_params(ctx)
        for param in params:
            _show_metavar_only(param)
        return params

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            for param in [*command.params, command.get_help_option(ctx)]:
                if param is not None:
                    _show_metavar_only(param)
        return command


def _show_metavar_only(param: Any) -> None:
    # typer renders the annotation's type beside each parameter; an argument's name column already
    # shows its metavar, and a flag takes no value.
    flag_or_argument = getattr(param, "is_flag", False) or isinstance(param, typer.core.TyperArgument)
    shown = None if flag_or_argument else param.metavar
    param.display_type_rich = lambda ctx: shown


app = typer.Typer(
    cls=_Group,
    help="Fleet-wide analysis of the collectives in distributed-training traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EXIT_INPUT_ERRORS = 1
EXIT_DATASET_ERROR = 3
EXIT_INTERRUPTED = 130
_ERRORS_SHOWN = 10
_WARNINGS_SHOWN = 10


def _version(value: bool) -> None:
    if value:
        from tracekit import __version__

        typer.echo(f"tracekit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Fleet-wide analysis of the collectives in distributed-training traces."""


@app.command()
def ingest(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Trace files, folders (searched recursively) and tar/tgz archives.", metavar="PATH"),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Dataset folder to create or add to.", metavar="DATASET")],
    job: Annotated[str | None, typer.Option(help="Put every input in this one job.", metavar="NAME")] = None,
    label: Annotated[str | None, typer.Option(help="Model or workload name of the job(s).", metavar="MODEL")] = None,
    manifest: Annotated[
        Path | None,
        typer.Option(
            help="CSV mapping files/folders/archives to jobs: columns job_id, path[, label, started_at].",
            metavar="FILE",
        ),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Parser processes (default: CPU count, at most 4).", metavar="N")
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when a job lacks ranks, too.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar and no summary; errors and warnings only.")
    ] = False,
) -> None:
    """Parse traces (Chakra ET/JSON, PyTorch ET, Kineto) into DATASET as Parquet plus a DuckDB file.

    Example: tracekit ingest sample_traces --out sample.dataset

    Exit codes: 0 every input file was read (ranks a job lacks are a warning: `job J: ranks 1–7 of
    8 missing`); 1 some inputs could not be read (each has a `traces` row with status 'error'), or,
    with --strict, a job lacks ranks; 2 nothing to ingest, or bad arguments or manifest (nothing
    written); 3 the dataset cannot be written (e.g. it is open in another program); 130
    interrupted (the dataset is unchanged).
    """
    from rich.console import Console

    from tracekit.errors import TracekitError
    from tracekit.ingest import ingest as run_ingest

    console = Console(stderr=True)
    try:
        with _progress(console, quiet) as progress:
            report = run_ingest(paths, out, job=job, label=label, manifest=manifest, workers=workers, progress=progress)
        if not quiet:
            _summary(console, report)
        else:
            _notes(console, report)
    except TracekitError as exc:
        _fail(console, exc)
    except KeyboardInterrupt:
        # After the commit point (the summary): the dataset holds the run.
        console.print("interrupted", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if not report.ok or (strict and not report.complete):
        raise typer.Exit(EXIT_INPUT_ERRORS)


class _progress:
    """A progress bar on a terminal (files done of the total, percent, ETA, then the final write)."""

    def __init__(self, console: Console, quiet: bool) -> None:
        self.enabled = console.is_terminal and not quiet
        self.console = console

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            MofNCompleteColumn(),
            TextColumn("files"),
            TimeRemainingColumn(),
            TimeElapsedColumn(),
            SpinnerColumn(finished_text=""),
            console=self.console,
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("finding files", total=None)
        return self.update

    def update(self, event: IngestProgress) -> None:
        if event.stage == "write":
            self.bar.update(self.task, description="writing the dataset", total=None, completed=event.done)
        else:
            self.bar.update(self.task, description="reading", total=event.total or None, completed=event.done)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()


def _human_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return str(value)


def _summary(console: Console, report: IngestReport) -> None:
    failed = len(report.errors)
    duplicates = f", {report.files_duplicate} duplicates not added" if report.files_duplicate else ""
    console.print(
        f"[bold]{report.files_added}[/bold] files added, {report.files_skipped} already present{duplicates}, "
        f"[{'red' if failed else 'green'}]{failed} failed[/] → {report.dataset}",
        highlight=False,
    )
    _totals(console, report.totals)
    _notes(console, report)
    if (report.dataset / "tracekit.duckdb").is_file():
        console.print(f"query it: duckdb {report.dataset / 'tracekit.duckdb'}", highlight=False)


def _notes(console: Console, report: IngestReport) -> None:
    """Warnings (jobs lacking ranks first, once per job), then errors; each list capped."""
    warnings = report.missing + report.warnings
    for warning in warnings[:_WARNINGS_SHOWN]:
        console.print(f"[yellow]warning:[/yellow] {_escape(warning)}", highlight=False, soft_wrap=True)
    if len(warnings) > _WARNINGS_SHOWN:
        console.print(
            f"... and {len(warnings) - _WARNINGS_SHOWN} more warnings: "
            "select path, unnest(warnings) from traces; select * from jobs where ranks_missing > 0",
            highlight=False,
        )
    _errors(console, report.errors)


def _totals(console: Console, totals: dict[str, Any]) -> None:
    from rich.table import Table

    if not totals:
        return
    console.print(
        f"dataset: {totals['jobs']} jobs, {totals['ranks']} ranks, {totals['traces_ok']} traces ok, "
        f"{totals['traces_error']} with errors",
        highlight=False,
    )
    table = Table("collective", "count", "in_bytes", title=None, box=None, pad_edge=False)
    for row in totals["collectives"]:
        table.add_row(row["comm_type"], f"{row['count']:,}", _human_bytes(row["in_bytes"]))
    if totals["collectives"]:
        console.print(table)


def _errors(console: Console, errors: list[str]) -> None:
    for error in errors[:_ERRORS_SHOWN]:
        console.print(f"[red]error:[/red] {_escape(error)}", highlight=False, soft_wrap=True)
    if len(errors) > _ERRORS_SHOWN:
        console.print(
            f"... and {len(errors) - _ERRORS_SHOWN} more: select path, error from traces where status = 'error'"
        )


@app.command()
def info(dataset: Annotated[Path, typer.Argument(help="A dataset folder written by `tracekit ingest`.")]) -> None:
    """Summarise a dataset: jobs, ranks, collectives by type and bytes, and the files that failed.

    Example: tracekit info sample.dataset
    """
    from rich.console import Console

    from tracekit.dataset import Dataset
    from tracekit.ingest.run import dataset_totals

    console = Console()
    found = Dataset(dataset)
    if not found.exists():
        console.print(f"[red]error:[/red] {_escape(str(dataset))}: not a tracekit dataset", highlight=False)
        raise typer.Exit(EXIT_DATASET_ERROR)
    _totals(console, dataset_totals(found))
    errors = [
        r["error"]
        for r in found.query_rows(
            "select error from traces where status = 'error' order by job_id, rank nulls last, path", []
        )
    ]
    _errors(console, errors)


def _fail(console: Console, exc: TracekitError) -> NoReturn:
    from tracekit.errors import Interrupted

    prefix = "" if isinstance(exc, Interrupted) else "[red]error:[/red] "
    console.print(f"{prefix}{_escape(str(exc))}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code) from exc


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


class TraceFormat(StrEnum):
    """`generate --trace-format`: the per-rank file format."""

    chakra = "chakra"
    pytorch_et = "pytorch-et"


@app.command()
def generate(
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write the fleet (or, with --fit, the profile) to.")
    ],
    jobs: Annotated[int, typer.Option("--jobs", "-n", help="Number of jobs.")] = 100,
    seed: Annotated[int, typer.Option(help="Random seed: the same seed and profile give the same bytes.")] = 0,
    profile: Annotated[
        str, typer.Option(help="Built-in profile (default, sample, meta-llm-tail) or a profile TOML file.")
    ] = "default",
    fit: Annotated[
        Path | None,
        typer.Option(help="Instead of a fleet, fit a profile to this ingested DATASET and write it to --out."),
    ] = None,
    archive: Annotated[
        bool, typer.Option(help="One .tgz per job instead of a folder of rank files (small, few files).")
    ] = False,
    workers: Annotated[int | None, typer.Option(help="Writer processes (default: CPU count).")] = None,
    trace_format: Annotated[
        TraceFormat,
        typer.Option(
            "--trace-format",
            help="Per-rank file format: chakra (<job>.<rank>.et) or pytorch-et (PyTorch Execution Trace "
            "JSON of the same nodes, <job>.<rank>.json.gz).",
        ),
    ] = TraceFormat.chakra,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No summary.")] = False,
) -> None:
    """Write a synthetic fleet of per-rank Chakra .et traces plus a manifest that `ingest` picks up.

    With --trace-format pytorch-et each rank is a PyTorch Execution Trace JSON file instead.

    Example: tracekit generate --jobs 300 --seed 1 --profile sample --out fleet/
    then:    tracekit ingest fleet/ --out fleet.dataset

    With --fit DATASET: write the profile fitted to an ingested dataset (statistics only, no traces)
    to --out (a .toml file), to regenerate a look-alike fleet with --profile.
    Exit code 0: done; 2: bad profile or arguments (e.g. --out already holds a fleet); 3: unreadable dataset.
    """
    from rich.console import Console

    from tracekit.errors import TracekitError

    console = Console(stderr=True)
    try:
        if fit is not None:
            from tracekit.generate import fit_profile, write_profile

            written = write_profile(fit_profile(fit, base=profile), out)
            if not quiet:
                console.print(f"profile fitted to {fit} → {written}", highlight=False)
            return
        from tracekit.generate import generate_fleet

        summary = generate_fleet(
            out, jobs, seed, profile, workers=workers, archive=archive, trace_format=trace_format.value
        )
    except TracekitError as exc:
        _fail(console, exc)
    if not quiet:
        mix = ", ".join(f"{name} {count}" for name, count in sorted(summary.classes.items()))
        console.print(
            f"[bold]{summary.jobs}[/bold] jobs ({mix}), {summary.files:,} rank files, "
            f"{_human_bytes(summary.bytes)} in {summary.seconds:.1f} s "
            f"({summary.jobs_per_second:,.0f} jobs/s) → {summary.out}",
            highlight=False,
        )
        console.print(f"ingest it: tracekit ingest {summary.out} --out DATASET", highlight=False)


def main() -> None:
    app(prog_name="tracekit")
