"""The `tracekit` command line: a thin client of the Python API (tracekit.ingest, tracekit.open).

Heavy modules (duckdb, polars, pyarrow) are imported inside commands so that `tracekit --help`
answers at once.
"""

from __future__ import annotations

import inspect
import re
import shlex
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
import typer.core

from tracekit.registry import names
from tracekit.terminal import cell, printable, shown

if TYPE_CHECKING:
    from rich.console import Console

    from tracekit.api import DatasetSummary
    from tracekit.errors import TracekitError
    from tracekit.ingest.report import IngestReport
    from tracekit.ingest.report import Progress as IngestProgress


class _Group(typer.core.TyperGroup):
    """Help shows what to type (PATH, DATASET, N), never Python types such as `<list[Path]>`, and the
    help texts as written (see `_as_help`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in [self, *self.commands.values()]:
            command.help = _as_help(command.help)
            for param in command.params:
                if isinstance(param, typer.core.TyperOption | typer.core.TyperArgument) and param.help:
                    param.help = _as_help(param.help)

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


# Lines of a help paragraph that keep a line of their own; the others are the source's wrapping.
_OWN_LINE = re.compile(r"(Example|then|Exit codes?)\b")


def _as_help(text: str | None) -> str | None:
    """A docstring or option help as typer should show it. Typer renders help as Rich markup (where
    `'tracekit[dask]'` loses `[dask]`, taken for a style), so markup is escaped; and it keeps every line
    break of a paragraph, so the lines a paragraph was wrapped into are joined again (blank lines part
    paragraphs; examples and exit codes start lines of their own)."""
    if text is None:
        return None
    from rich.markup import escape

    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and not _OWN_LINE.match(line):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return escape("\n\n".join(paragraphs))


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
EXIT_INTERRUPTED = 130
_ERRORS_SHOWN = 10
_WARNINGS_SHOWN = 10


def _version(value: bool) -> None:
    if value:
        from tracekit._version import __version__

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
        typer.Argument(
            help="Trace files, folders (searched recursively) and tar/tgz archives, in any format read: "
            f"{', '.join(names('tracekit.parsers.formats', 'PARSER', dashes=False))} (recognised from the content).",
            metavar="PATH",
        ),
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
    executor: Annotated[
        str | None,
        typer.Option(
            help="Where files are parsed: local (a process pool, the default), dask-local (a Dask cluster on "
            "this machine), or dask://HOST:PORT (a Dask scheduler's workers; pip install 'tracekit[dask]').",
            metavar="WHERE",
        ),
    ] = None,
    memory_budget: Annotated[
        str | None,
        typer.Option(
            help="Memory one file's parse may take, e.g. 2G (default: $TRACEKIT_MEMORY_BUDGET, else a quarter "
            "of RAM). A Kineto trace longer than a fifth of it is read in pieces of whole events.",
            metavar="SIZE",
        ),
    ] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when a job lacks ranks, too.")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar and no summary; errors and warnings only.")
    ] = False,
) -> None:
    """Parse traces (Chakra ET/JSON, PyTorch ET, Kineto, Flight Recorder) into DATASET as Parquet + DuckDB.

    Example: tracekit ingest sample_traces --out sample.dataset

    Exit codes: 0 every input file was read (ranks a job lacks are a warning: `job J: ranks 1–7 of
    8 missing`); 1 some inputs could not be read (each has a `traces` row with status 'error'), or,
    with --strict, a job lacks ranks; 2 nothing to ingest, or bad arguments or manifest (nothing
    written); 3 the dataset cannot be written (e.g. it is open in another program); 130
    interrupted (the dataset is unchanged, unless the message says the run was written: a Ctrl-C
    past the commit point).
    """
    from rich.console import Console

    from tracekit.errors import TracekitError
    from tracekit.ingest import ingest as run_ingest

    console = Console(stderr=True)
    if memory_budget is not None:
        _set_memory_budget(memory_budget)
    try:
        with _progress(console, quiet) as progress:
            report = run_ingest(
                paths,
                out,
                job=job,
                label=label,
                manifest=manifest,
                workers=workers,
                executor=executor,
                progress=progress,
            )
        if not quiet:
            _summary(console, report)
        else:
            _notes(console, report)
    except TracekitError as exc:
        _fail(console, exc)
    except KeyboardInterrupt:
        # After the commit point (the summary): the dataset holds the run.
        _say_interrupted(console, "interrupted after the run was written: the dataset holds it")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if not report.ok or (strict and not report.complete):
        raise typer.Exit(EXIT_INPUT_ERRORS)


def _set_memory_budget(text: str) -> None:
    """--memory-budget: handed to the parse workers (local processes inherit it) by the environment."""
    from tracekit.parse import set_memory_budget

    try:
        set_memory_budget(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--memory-budget") from None


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
        f"[{'red' if failed else 'green'}]{failed} failed[/] → {shown(report.dataset)}",
        highlight=False,
    )
    _totals(console, report.totals)
    _notes(console, report)
    if (report.dataset / "tracekit.duckdb").is_file():
        # Read-only: a shell holding the file read-write would lock the next ingest out.
        console.print(f"query it: duckdb -readonly {shown(report.dataset / 'tracekit.duckdb')}", highlight=False)


def _notes(console: Console, report: IngestReport) -> None:
    """Warnings (jobs lacking ranks first, once per job), then errors; each list capped."""
    _warnings(console, report.missing + report.warnings)
    _errors(console, report.errors)


def _warnings(console: Console, warnings: list[str]) -> None:
    more = " warnings: select path, unnest(warnings) from traces; select * from jobs where ranks_missing > 0"
    _lines(console, "[yellow]warning:[/yellow]", warnings, _WARNINGS_SHOWN, more)


def _lines(console: Console, tag: str, lines: list[str], count: int, more: str) -> None:
    """The first `count` of `lines`, one each, then how many more and the SQL that lists them all."""
    for line in lines[:count]:
        console.print(f"{tag} {shown(line)}", highlight=False, soft_wrap=True)
    if len(lines) > count:
        console.print(f"... and {len(lines) - count} more{more}", highlight=False)


def _totals(console: Console, summary: DatasetSummary | None) -> None:
    from rich.table import Table

    if summary is None:
        return
    console.print(
        f"dataset: {summary.jobs} jobs, {summary.ranks} ranks, {summary.traces_ok} traces ok, "
        f"{summary.traces_error} with errors",
        highlight=False,
    )
    table = Table("collective", "count", "in_bytes", title=None, box=None, pad_edge=False)
    for total in summary.collectives:
        table.add_row(shown(total.comm_type), f"{total.count:,}", _human_bytes(total.in_bytes))
    if summary.collectives:
        console.print(table)


def _errors(console: Console, errors: list[str]) -> None:
    more = ": select path, error from traces where status = 'error'"
    _lines(console, "[red]error:[/red]", errors, _ERRORS_SHOWN, more)


@app.command()
def info(dataset: Annotated[Path, typer.Argument(help="A dataset folder written by `tracekit ingest`.")]) -> None:
    """Summarise a dataset: jobs, ranks, collectives by type and bytes, gaps and failed files.

    Lists the jobs lacking ranks and the files that could not be read.

    Example: tracekit info sample.dataset
    """
    from rich.console import Console

    from tracekit.api import open as open_dataset
    from tracekit.errors import TracekitError

    console = Console()
    try:
        with open_dataset(dataset) as ds:
            summary = ds.summary()
    except TracekitError as exc:
        _fail(Console(stderr=True), exc)
    _totals(console, summary)
    _warnings(console, summary.missing)
    _errors(console, summary.errors)


@app.command()
def verify(dataset: Annotated[Path, typer.Argument(help="A dataset folder written by `tracekit ingest`.")]) -> None:
    """Check that the dataset's two copies agree: the DuckDB file (and its log) and the Parquet files.

    Compares every table's row count and content, checks every Parquet file against the size and
    SHA-256 its run recorded, finds damaged, missing or stray Parquet files and runs the DuckDB file
    lost; writes nothing. Exit 0 when they agree, 3 naming each problem otherwise.

    Example: tracekit verify sample.dataset
    """
    from rich.console import Console

    from tracekit.api import verify as compare
    from tracekit.errors import DatasetError, TracekitError

    try:
        verdict = compare(dataset)
    except TracekitError as exc:
        _fail(Console(stderr=True), exc)
    for note in verdict.notes:
        Console().print(f"note: {shown(note)}", highlight=False, soft_wrap=True)
    if verdict.problems:
        err = Console(stderr=True)
        for problem in verdict.problems:
            err.print(f"[red]error:[/red] {shown(problem)}", highlight=False, soft_wrap=True)
        err.print(f"repair it: tracekit repair {shown(str(dataset))}", highlight=False, soft_wrap=True)
        raise typer.Exit(DatasetError.exit_code)
    rows = sum(t.duckdb_rows or 0 for t in verdict.tables)
    files = sum(t.files for t in verdict.tables)
    Console().print(
        f"ok: {shown(str(dataset))}: {verdict.runs:,} runs, {len(verdict.tables)} tables, {rows:,} rows, "
        f"{files:,} Parquet files: both copies agree",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def repair(dataset: Annotated[Path, typer.Argument(help="A dataset folder written by `tracekit ingest`.")]) -> None:
    """Rebuild a dataset's damaged copy from its whole one (see `tracekit verify`).

    A DuckDB file that lost runs, cannot be opened, or differs from Parquet files that are exactly as
    their runs recorded them is rebuilt from the Parquet files (the old one kept in DATASET/.damaged/);
    damaged, missing or stray Parquet files are written again from the DuckDB file, and recorded.
    Exit 3 when neither copy is whole.

    Example: tracekit repair sample.dataset
    """
    from rich.console import Console

    from tracekit.api import repair as rebuild
    from tracekit.errors import TracekitError

    console = Console()
    try:
        done = rebuild(dataset)
    except TracekitError as exc:
        _fail(Console(stderr=True), exc)
    if done.rebuilt is None:
        console.print(f"nothing to repair: {shown(str(dataset))}: both copies agree", highlight=False)
        return
    for problem in done.before.problems:
        console.print(f"found: {shown(problem)}", highlight=False, soft_wrap=True)
    what = "the DuckDB file, from the Parquet files"
    if done.rebuilt == "parquet":
        what = "the Parquet files, from the DuckDB file"
    console.print(f"rebuilt {what}", highlight=False)
    if done.kept is not None:
        console.print(f"the old DuckDB file is kept in {shown(str(done.kept))}", highlight=False, soft_wrap=True)
    for note in done.notes:
        console.print(f"[yellow]warning:[/yellow] {shown(note)}", highlight=False, soft_wrap=True)
    for problem in done.after.problems:
        Console(stderr=True).print(f"[red]error:[/red] still: {shown(problem)}", highlight=False, soft_wrap=True)
    if done.after.problems:
        raise typer.Exit(3)


@app.command("split-log")
def split_log(
    logs: Annotated[
        list[Path], typer.Argument(metavar="LOG", help="NCCL INFO logs holding the lines of several processes.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="A new (or empty) folder for one log per process.")],
) -> None:
    """Split NCCL INFO logs of several ranks interleaved (`mpirun ... | tee`) into one file per process.

    Each line goes to the process its `host:pid:tid [dev] NCCL ...` prefix names, as
    OUT/<host>-pid<pid>.nccl.log: the files NCCL_DEBUG_FILE=%h.%p would have written, which
    `tracekit ingest OUT` reads as one job, every rank's collectives (an interleaved log ingested
    whole gives its lowest rank's). Lines no NCCL process printed are counted, not written. Exit 0:
    done; 1: a log could not be read or held no NCCL line (the others are split); 2: no log, a
    missing log, or OUT holds files; 3: OUT cannot be written; 130: interrupted (OUT unchanged).

    Example: tracekit split-log tests/parsers/nccl_log/interleaved/node-a.nccl.log -o node-a.split
    then: tracekit ingest node-a.split --out split.dataset
    """
    from rich.console import Console

    from tracekit.errors import TracekitError
    from tracekit.logsplit import split_log as split

    err = Console(stderr=True)
    try:
        done = split(logs, out)
    except TracekitError as exc:
        _fail(err, exc)
    lines = sum(done.lines.values())
    Console().print(
        f"{done.logs:,} log{'' if done.logs == 1 else 's'}: {lines:,} lines of {len(done.lines):,} "
        f"process{'' if len(done.lines) == 1 else 'es'} "
        f"-> {shown(str(out))}; ingest it: tracekit ingest {shown(str(out))} --out DATASET",
        highlight=False,
        soft_wrap=True,
    )
    if done.other_lines:
        noun = "line" if done.other_lines == 1 else "lines"
        err.print(f"note: {done.other_lines:,} {noun} no NCCL process printed: not written", highlight=False)
    if done.over_lines:
        err.print(
            f"[yellow]warning:[/yellow] {done.over_lines:,} lines of processes beyond the first "
            f"{len(done.lines):,}: not written",
            highlight=False,
        )
    _lines(err, "[red]error:[/red]", done.errors, _ERRORS_SHOWN, " logs not split")
    if done.errors:
        raise typer.Exit(1)


def _fail(console: Console, exc: TracekitError) -> NoReturn:
    from tracekit import interrupts
    from tracekit.errors import Interrupted

    if isinstance(exc, Interrupted):
        _say_interrupted(console, str(exc))
    elif interrupts.arrived():  # an error a Ctrl-C caused (a query it stopped): the Ctrl-C is what happened
        _say_interrupted(console)
        raise typer.Exit(EXIT_INTERRUPTED) from exc
    else:
        console.print(f"[red]error:[/red] {shown(str(exc))}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code) from exc


class _Said:
    """Whether the command said it was interrupted (it says so once)."""

    interrupted = False


def _say_interrupted(console: Console | None = None, text: str = "interrupted") -> None:
    if _Said.interrupted:
        return
    _Said.interrupted = True
    if console is None:
        from rich.console import Console

        console = Console(stderr=True)
    console.print(shown(text), highlight=False, soft_wrap=True)


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

    Example: tracekit generate --jobs 50 --seed 1 --profile sample --out fleet/
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
                console.print(f"profile fitted to {shown(fit)} → {shown(written)}", highlight=False)
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
            f"({summary.jobs_per_second:,.0f} jobs/s) → {shown(summary.out)}",
            highlight=False,
        )
        console.print(f"ingest it: tracekit ingest {shown(summary.out)} --out DATASET", highlight=False)


def _choices(name: str, values: tuple[str, ...]) -> Any:
    """A StrEnum of `values`, for typer's choices of an option whose values a registry lists."""
    return StrEnum(name, {value: value for value in values})


# The choices of --format and --algorithm are the registries' (built-in modules and installed plugins),
# listed without importing them (tracekit.registry.names); to the type checker they are strings.
if TYPE_CHECKING:
    ReplayFormat = str
    ReplayAlgorithm = str
else:
    ReplayFormat = _choices("ReplayFormat", ("flows", *names("tracekit.replay.emitters", "EMITTER"), "all"))
    ReplayAlgorithm = _choices(
        "ReplayAlgorithm", ("auto", "observed", *names("tracekit.replay.algorithms", "ALGORITHM"))
    )


class HtsimBinary(StrEnum):
    """`replay --htsim-binary`: the htsim binary whose time unit `start` uses."""

    uec = "uec"
    eqds = "eqds"
    ndp = "ndp"


class Protocol(StrEnum):
    """`replay --protocol`: NCCL_PROTO (auto: NCCL's tuner)."""

    auto = "auto"
    LL = "LL"
    LL128 = "LL128"
    Simple = "Simple"


class GpuArch(StrEnum):
    """`replay --gpu-arch`: the GPU generation whose NCCL tuning tables apply."""

    volta = "volta"
    ampere = "ampere"
    hopper = "hopper"
    blackwell = "blackwell"


class InNetwork(StrEnum):
    """`--in-network-reduction`: reductions done inside a switch."""

    nvls = "nvls"
    collnet = "collnet"


GPU_ARCH = {"volta": 70, "ampere": 80, "hopper": 90, "blackwell": 100}

# Options `replay` and `whatif` share: where the ranks run and what NCCL does.
PlacementFile = Annotated[
    Path | None,
    typer.Option(
        "--placement", help="Placement file (JSON/TOML/YAML): GPUs and NICs per host, rails, link speeds, hosts."
    ),
]
GpusPerHost = Annotated[int | None, typer.Option(help="GPUs per host (default 8).")]
HostsPerRack = Annotated[int | None, typer.Option(help="Hosts per rack/leaf (default 2).")]
NicsPerHost = Annotated[int | None, typer.Option(help="NICs per host (default one per GPU).")]
NicGbps = Annotated[float | None, typer.Option(help="NIC line rate in Gb/s (default 400).")]
CrossNic = Annotated[
    int | None,
    typer.Option(help="NCCL_CROSS_NIC: 0 rings and trees stay on one NIC (rail), 1 free, 2 (default) pairs."),
]
Channels = Annotated[int | None, typer.Option(help="NCCL channels per communicator (default: what NCCL picks).")]
QpsPerConnection = Annotated[int, typer.Option(help="NCCL_IB_QPS_PER_CONNECTION: QPs (distinct flows) per connection.")]
Pxn = Annotated[bool, typer.Option("--pxn/--no-pxn", help="NCCL's PXN for p2p across hosts (NCCL >= 2.12).")]
ProtocolOpt = Annotated[Protocol, typer.Option("--protocol", help="NCCL_PROTO; auto: NCCL's tuner.")]
GpuArchOpt = Annotated[GpuArch, typer.Option("--gpu-arch", help="GPU generation of NCCL's tuning tables.")]
InNetworkOpt = Annotated[
    list[InNetwork] | None,
    typer.Option(
        "--in-network-reduction",
        help="Let NCCL's tuner also pick an in-network reduction (repeatable): nvls (NVLink SHARP in the "
        "host's NVSwitch; NVLSTree across hosts) or collnet (SHARP in the network's switches).",
    ),
]
NcclLogOpt = Annotated[
    Path | None,
    typer.Option(
        "--nccl-log", help="An NCCL_DEBUG=INFO log of the job: its rings, trees and NICs instead of the model's."
    ),
]
FleetWorkers = Annotated[
    int | None, typer.Option(help="With --fleet: worker processes (default: CPU count, at most 8).", metavar="N")
]
FleetExecutor = Annotated[
    str | None,
    typer.Option(
        help="With --fleet: local (a process pool, the default), dask-local or dask://HOST:PORT.", metavar="WHERE"
    ),
]
AlgorithmOpt = Annotated[
    ReplayAlgorithm,
    typer.Option(
        "--algorithm",
        help="Collective algorithm: auto (NCCL's cost model per size and group), observed (the algorithm and "
        "protocol NCCL recorded running each collective, NCCL Inspector v4.2+; auto where none was), or one of "
        f"{', '.join(names('tracekit.replay.algorithms', 'ALGORITHM'))} wherever it applies.",
    ),
]


def _nccl_options(
    channels: int | None, qps: int, pxn: bool, protocol: Protocol, gpu_arch: GpuArch,
    nccl_log: Path | None, in_network: list[InNetwork] | None = None,
) -> Any:  # fmt: skip
    from tracekit.replay import NcclOptions

    return NcclOptions(
        channels=channels,
        qps=qps,
        pxn=pxn,
        protocol=None if protocol is Protocol.auto else protocol.value,
        gpu_arch=GPU_ARCH[gpu_arch.value],
        log=_nccl_log(nccl_log),
        in_network=tuple(dict.fromkeys(r.value for r in in_network or [])),
    )


@app.command()
def replay(
    dataset: Annotated[Path, typer.Argument(help="A dataset folder written by `tracekit ingest`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the flows and simulator inputs to.")],
    job: Annotated[
        str | None, typer.Option("--job", "-j", help="The job to replay (may be left out when the dataset has one).")
    ] = None,
    formats: Annotated[
        list[ReplayFormat] | None,
        typer.Option(
            "--format",
            "-f",
            help="Simulator input to write besides OUT/flows.parquet (repeatable): "
            f"{', '.join(names('tracekit.replay.emitters', 'EMITTER'))}, or all (`tracekit plugins --all` says "
            "what each writes).",
        ),
    ] = None,
    algorithm: AlgorithmOpt = "auto",
    placement: PlacementFile = None,
    gpus_per_host: GpusPerHost = None,
    hosts_per_rack: HostsPerRack = None,
    nics_per_host: NicsPerHost = None,
    nic_gbps: NicGbps = None,
    cross_nic: CrossNic = None,
    channels: Channels = None,
    qps_per_connection: QpsPerConnection = 1,
    pxn: Pxn = True,
    protocol: ProtocolOpt = Protocol.auto,
    gpu_arch: GpuArchOpt = GpuArch.hopper,
    nccl_log: NcclLogOpt = None,
    in_network_reduction: InNetworkOpt = None,
    fabric: Annotated[
        str | None,
        typer.Option(help="Fabric file (TOML/JSON/YAML) or preset for the ECMP indicator and the HPCC/htsim topology."),
    ] = None,
    htsim_binary: Annotated[
        HtsimBinary, typer.Option(help="htsim binary targeted: uec reads start in whole µs, eqds/ndp in ps.")
    ] = HtsimBinary.uec,
    intra_host: Annotated[
        bool, typer.Option("--intra-host", help="Also give NVLink (same-host) flows to hpcc and htsim.")
    ] = False,
    csv: Annotated[bool, typer.Option("--csv", help="Write OUT/flows.csv instead of flows.parquet.")] = False,
    max_flows: Annotated[int, typer.Option(help="Stop with an error past this many flows.")] = 50_000_000,
    compare_observed: Annotated[
        bool,
        typer.Option(
            "--compare-observed",
            help="Print the replay's network bytes beside what NCCL observed (NCCL Inspector proxy records, "
            "observed_transfers) per operation, rank, peer and channel (OUT/observed_vs_replay.parquet).",
        ),
    ] = False,
    fleet: Annotated[
        bool,
        typer.Option(
            "--fleet",
            help="Replay every job: per-job indicators and fabric timings into the dataset's replay_jobs and "
            "replay_fabrics tables and OUT (see README, Fleet replay).",
        ),
    ] = False,
    workers: FleetWorkers = None,
    executor: FleetExecutor = None,
    label: LabelOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")] = False,
) -> None:
    """Decompose a job's collectives into the flows NCCL sends, traffic matrices and simulator inputs.

    Example: tracekit replay sample.dataset --job captured/fsdp_mlp --gpus-per-host 1 --format all -o replay_out/

    Writes OUT/flows.parquet (one row per flow: channel, QP, NICs, rails, link class, bytes, times),
    collectives.parquet, matrix_{gpu,host,rack}.parquet, indicators.parquet, burstiness.parquet,
    observed_vs_replay.parquet (where the job has NCCL Inspector proxy records),
    replay.duckdb (queries/replay/*.sql as views) and replay.json, plus OUT/hpcc/, OUT/htsim/ or
    OUT/astra/ for each --format, each with a run.sh. OUT is replaced whole, and only when it is empty
    or holds an earlier replay. With --fleet, --job, --label, --since and --until select the jobs
    replayed (as the report's do), and only their rows of replay_jobs and replay_fabrics are replaced.
    Exit code 0: done; 2: unknown job, bad placement, fabric or log, a limit passed (the message says
    which), or --compare-observed of a job with no observed transfers; 3: no such dataset, or OUT cannot
    be written; 130: interrupted (OUT unchanged).
    """
    from rich.console import Console

    from tracekit.errors import InputError, TracekitError

    console = Console(stderr=True)
    wanted = [str(f) for f in formats or ["flows"]]
    if "all" in wanted:
        wanted = ["flows", *names("tracekit.replay.emitters", "EMITTER")]
    try:
        from tracekit.replay import replay as run_replay
        from tracekit.replay import write_outputs

        where = _placement(placement, gpus_per_host, hosts_per_rack, nics_per_host, nic_gbps, cross_nic)
        options = _nccl_options(channels, qps_per_connection, pxn, protocol, gpu_arch, nccl_log, in_network_reduction)
        network = _fabric(fabric)
        if not fleet and (label or since or until):
            raise InputError("--label, --since and --until select the jobs of --fleet; one job is named with --job")
        if fleet and compare_observed:
            raise InputError("--compare-observed compares one job's replay with what NCCL observed: name it with --job")
        if fleet:
            from tracekit.replay.fleet import FleetSettings, default_fabrics

            settings = FleetSettings(where, options, str(algorithm), default_fabrics(), max_flows=max_flows)
            scope = _scope([job] if job else None, label, since, until)
            _replay_fleet(console, dataset, out, settings, executor, workers, quiet, scope)
            return
        with _counter(console, quiet, "replay", "collectives") as advance:
            result = run_replay(dataset, job, str(algorithm), where, options, max_flows=max_flows, progress=advance)
            if compare_observed and not result.observed.height:
                raise InputError(
                    f"job {result.job}: no observed transfers to compare with: NCCL Inspector files of format v4.3+ "
                    "written with NCCL_INSPECTOR_ENABLE_PROXY=1 give them (table observed_transfers)"
                )
            files = write_outputs(
                result,
                out,
                wanted,
                csv=csv,
                fabric=network,
                htsim_binary=htsim_binary.value,
                include_intra_host=intra_host,
            )
    except TracekitError as exc:
        _fail(console, exc)
    if not quiet:
        _replay_summary(console, result, files, out)
    if compare_observed:
        _observed_summary(console, result)


def _observed_summary(console: Console, result: Any) -> None:
    from tracekit.replay.observed import agreement, compare

    table = compare(result)
    for line in agreement(result, table).lines(result.job, table):
        console.print(shown(line), highlight=False, soft_wrap=True)


def _replay_fleet(
    console: Console, dataset: Path, out: Path, settings: Any, executor: str | None, workers: int | None, quiet: bool,
    scope: Any,
) -> None:  # fmt: skip
    from tracekit.errors import DatasetError, InputError
    from tracekit.executors import check
    from tracekit.replay.fleet import job_ids, run_fleet

    check(executor)
    selected = job_ids(dataset, scope)
    if not selected and not scope.is_everything():
        raise InputError(f"no job of {dataset} matches the selection ({scope.describe()})")
    with _counter(console, quiet, "fleet replay", "jobs", total=len(selected)) as advance:
        run = run_fleet(dataset, out, settings, executor, workers, advance, scope)
    result = run.result
    _warnings(console, run.warnings)
    for job, why in result.skipped:
        console.print(f"[yellow]skipped[/yellow] job {shown(job)}: {shown(why)}", highlight=False, soft_wrap=True)
    if run.not_stored is not None:
        console.print(f"[red]error:[/red] {shown(run.not_stored)}", highlight=False, soft_wrap=True)
        console.print(
            f"the fleet's tables are in {shown(out)}: run again with the dataset free to store them", highlight=False
        )
        raise typer.Exit(DatasetError.exit_code)
    if not quiet:
        console.print(
            f"{result.jobs.height:,} jobs replayed ({len(result.skipped):,} skipped) on "
            f"{result.fabrics['fabric'].n_unique():,} fabrics → tables replay_jobs, replay_fabrics of {shown(dataset)} "
            f"and {shown(out)}; query: tracekit query fabric_slowdown_by_class {shown(shlex.quote(str(dataset)))}",
            highlight=False, soft_wrap=True,
        )  # fmt: skip
    if result.skipped:
        raise typer.Exit(EXIT_INPUT_ERRORS)


def _placement(
    path: Path | None,
    gpus_per_host: int | None,
    hosts_per_rack: int | None,
    nics_per_host: int | None,
    nic_gbps: float | None,
    cross_nic: int | None,
) -> Any:
    """The placement file (or the defaults) with the options given on the command line applied over it."""
    from dataclasses import replace

    from tracekit.replay import Placement, load_placement

    base = load_placement(path) if path is not None else Placement()
    changes: dict[str, Any] = {
        "gpus_per_host": gpus_per_host,
        "hosts_per_rack": hosts_per_rack,
        "nics_per_host": nics_per_host,
        "nic_gbps": nic_gbps,
        "cross_nic": cross_nic,
    }
    changes = {k: v for k, v in changes.items() if v is not None}
    if "gpus_per_host" in changes and base.gpu_nics is not None:
        changes["gpu_nics"] = None
    return replace(base, **changes) if changes else base


def _nccl_log(path: Path | None) -> Any:
    if path is None:
        return None
    from tracekit.replay.nccl.from_log import read_nccl_log

    return read_nccl_log(path)


def _fabric(value: str | None) -> Any:
    """A fabric preset by name, else a fabric file (None: the command's default)."""
    if value is None:
        return None
    from tracekit.fabric.files import load_fabric
    from tracekit.fabric.presets import PRESETS

    return PRESETS[value] if value in PRESETS else load_fabric(value)


class Routing(StrEnum):
    """`whatif --routing`: how flows are spread over equal-cost paths."""

    ecmp = "ecmp"
    pinned = "pinned"
    spray = "spray"


class TableFormat(StrEnum):
    """`whatif --format`: table (on screen), csv, json or parquet (the file's suffix decides when omitted)."""

    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


@app.command()
def whatif(
    dataset: Annotated[Path, typer.Argument(help="A dataset folder written by `tracekit ingest`.")],
    fabric: Annotated[
        list[str],
        typer.Option("--fabric", help="A fabric preset (see README, Fabrics) or file (TOML/JSON/YAML); repeatable."),
    ],
    job: Annotated[
        str | None, typer.Option("--job", "-j", help="The job to time (may be left out when the dataset has one).")
    ] = None,
    routing: Annotated[
        list[Routing] | None,
        typer.Option("--routing", help="ecmp (hash per QP flow, over --seeds seeds), pinned, spray; repeatable."),
    ] = None,
    seeds: Annotated[int, typer.Option(help="ECMP hash seeds (the table gives the median and p95).")] = 8,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the table to this file (csv/json/parquet).")
    ] = None,
    output_format: Annotated[TableFormat | None, typer.Option("--format", "-f", help="Output format.")] = None,
    algorithm: AlgorithmOpt = "auto",
    placement: PlacementFile = None,
    gpus_per_host: GpusPerHost = None,
    hosts_per_rack: HostsPerRack = None,
    nics_per_host: NicsPerHost = None,
    nic_gbps: NicGbps = None,
    cross_nic: CrossNic = None,
    channels: Channels = None,
    qps_per_connection: QpsPerConnection = 1,
    pxn: Pxn = True,
    protocol: ProtocolOpt = Protocol.auto,
    gpu_arch: GpuArchOpt = GpuArch.hopper,
    nccl_log: NcclLogOpt = None,
    in_network_reduction: InNetworkOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no table on screen.")] = False,
) -> None:
    """Time a job's collectives on candidate fabrics and routings against the ideal fabric of the same NICs.

    Example: tracekit whatif sample.dataset -j captured/moe_alltoall --gpus-per-host 1 --fabric clos2-1to1

    One row per fabric × routing × collective type (and 'all' for the job): collectives, network bytes,
    time (median over ECMP seeds, and p95), the ideal fabric's time, slowdown, and the busiest network
    link's utilisation. Exit code 0: done; 2: unknown job, fabric or option; 3: no such dataset, or the
    file cannot be written; 130: interrupted.
    """
    from rich.console import Console

    from tracekit.errors import InputError, OutputError, TracekitError

    console = Console(stderr=True)
    try:
        from tracekit.replay import whatif as run_whatif
        from tracekit.replay.fabric_whatif import plan

        specs = [_fabric(f) for f in fabric]
        routings = [r.value for r in routing] if routing else None
        kind = output_format.value if output_format else (out.suffix.lstrip(".").lower() if out else "table")
        if kind not in ("table", "csv", "json", "parquet") or (out is not None and kind == "table"):
            raise InputError(f"--out {out}: say --format csv, json or parquet (its suffix says none of them)")
        where = _placement(placement, gpus_per_host, hosts_per_rack, nics_per_host, nic_gbps, cross_nic)
        options = _nccl_options(channels, qps_per_connection, pxn, protocol, gpu_arch, nccl_log, in_network_reduction)
        total = len(plan(specs, routings, seeds))
        with _counter(console, quiet, "whatif", "fabric runs", total=total) as advance:
            result = run_whatif(dataset, job, specs, routings, where, options, str(algorithm), seeds, advance)
        if out is not None:
            _write_frame(result.table, kind, out)
    except TracekitError as exc:
        _fail(console, exc)
    except OSError as exc:
        _fail(console, OutputError(f"{out}: cannot write ({exc.strerror})"))
    if not quiet:
        _whatif_summary(console, result, out)


def _write_frame(frame: Any, kind: str, out: Path) -> None:
    if kind == "parquet":
        frame.write_parquet(out)
    elif kind == "json":
        frame.write_json(out)
    else:
        frame.write_csv(out, float_precision=None)


def _whatif_summary(console: Console, result: Any, out: Path | None) -> None:
    from rich import box
    from rich.table import Table

    rows = result.table.rows(named=True)
    columns: dict[str, list[str]] = {
        "fabric": [shown(r["fabric"]) for r in rows],
        "routing": [r["routing"] for r in rows],
        "collectives": [f"{r['comm_type']} ({r['collectives']:,})" for r in rows],
        "ms": [_ms(r["time_s"]) for r in rows],
        "p95 ms": [_ms(r["time_p95_s"]) for r in rows],
        "ideal ms": [_ms(r["ideal_s"]) for r in rows],
        "slowdown": [f"{r['slowdown']:.2f}x" for r in rows],
        "p95": [f"{r['slowdown_p95']:.2f}x" for r in rows],
        "busiest link": ["-" if r["busiest_link_utilisation"] is None else f"{r['busiest_link_utilisation']:.0%}"
                         for r in rows],
    }  # fmt: skip
    table = Table(title=f"job {shown(result.job)}: collectives timed per fabric", title_justify="left",
                  box=box.SIMPLE_HEAD)  # fmt: skip
    widths = [max(len(name), *map(len, values)) for name, values in columns.items()]
    for (name, _), width in zip(columns.items(), widths, strict=True):  # whole values, never cut to fit
        table.add_column(name, justify="left" if name in ("fabric", "routing", "collectives") else "right",
                         min_width=width, no_wrap=True)  # fmt: skip
    for values in zip(*columns.values(), strict=True):
        table.add_row(*values)
    console.print(table, width=max(console.width, sum(widths) + 3 * len(widths) + 2), crop=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {shown(note)}", highlight=False, soft_wrap=True)
    if out is not None:
        console.print(f"→ {shown(out)}", highlight=False)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:,.3f}"


class _steps:
    """A progress bar on a terminal: the steps of each stage done of its total (the report's queries,
    its job sections, the page); nothing otherwise."""

    def __init__(self, console: Console) -> None:
        self.enabled = console.is_terminal
        self.console = console

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("starting", total=None)
        return self.update

    def update(self, step: Any) -> None:
        self.bar.update(self.task, description=step.stage, total=step.total, completed=step.done)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()


class _counter:
    """A counting progress line on a terminal (long replays); nothing otherwise."""

    def __init__(self, console: Console, quiet: bool, what: str, unit: str, total: int | None = None) -> None:
        self.enabled = console.is_terminal and not quiet
        self.console, self.what, self.unit, self.total = console, what, unit, total

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        from rich.progress import (
            BarColumn,
            Progress,
            SpinnerColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        if self.total is None:
            columns: list[Any] = [SpinnerColumn(), TextColumn(self.what), TextColumn("{task.completed:,} " + self.unit),
                                  TimeElapsedColumn()]  # fmt: skip
        else:
            columns = [TextColumn(self.what), BarColumn(), TextColumn("{task.completed:,}/{task.total:,} " + self.unit),
                       TaskProgressColumn(), TimeRemainingColumn()]  # fmt: skip
        self.bar = Progress(*columns, console=self.console, transient=True)
        self.bar.start()
        task = self.bar.add_task(self.what, total=self.total)
        return lambda done: self.bar.update(task, advance=done)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()


def _replay_summary(console: Console, result: Any, files: list[Path], out: Path) -> None:
    from tracekit.replay.assemble import NETWORK_LINKS

    flows = result.flows
    total = int(flows["bytes"].sum())
    inter = int(flows.filter(flows["link"].is_in(NETWORK_LINKS))["bytes"].sum())
    console.print(
        f"job {shown(result.job)}: [bold]{flows.height:,}[/bold] flows from {result.collectives.height:,} "
        f"collectives, {_human_bytes(total)} ({_human_bytes(inter)} between hosts); times from {shown(result.timing)}",
        highlight=False,
    )
    for note in result.notes:
        console.print(f"[yellow]note:[/yellow] {shown(note)}", highlight=False, soft_wrap=True)
    console.print(f"{len(files)} files → {shown(out)}; query: duckdb {shown(out / 'replay.duckdb')}", highlight=False)


def _dataset_or_samples(dataset: Path | None, console: Console) -> Path:
    """DATASET, or with none the bundled samples' dataset (ingested into the cache on first use)."""
    if dataset is not None:
        return dataset
    from tracekit.samples import sample_dataset

    return sample_dataset(lambda text: console.print(printable(text), highlight=False, markup=False, soft_wrap=True))


# The selection of jobs that report, query and replay --fleet share (tracekit.scope.Scope).
LabelOpt = Annotated[
    list[str] | None,
    typer.Option("--label", help="Only jobs with this label, or this class part of a 'class:model' label."),
]
SinceOpt = Annotated[str | None, typer.Option(help="Only jobs started on or after this date (YYYY-MM-DD).")]
UntilOpt = Annotated[str | None, typer.Option(help="Only jobs started before this date (YYYY-MM-DD).")]
JobsOpt = Annotated[list[str] | None, typer.Option("--job", help="Only this job (repeat for several).")]


def _scope(jobs: list[str] | None, labels: list[str] | None, since: str | None, until: str | None) -> Any:
    from tracekit.scope import Scope

    return Scope(tuple(jobs or ()), tuple(labels or ()), _date(since, "--since"), _date(until, "--until"))


def _date(value: str | None, option: str) -> Any:
    from datetime import date

    from tracekit.errors import InputError

    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError as exc:
        raise InputError(f"{option} {value}: not a date (YYYY-MM-DD)") from exc


@app.command()
def report(
    dataset: Annotated[
        Path | None,
        typer.Argument(help="A dataset folder written by `tracekit ingest` (default: the bundled samples)."),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write.")] = Path("report.html"),
    job: Annotated[
        list[str] | None,
        typer.Option("--job", help="Only this job, with a section of its own (repeat for several)."),
    ] = None,
    label: LabelOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    compare: Annotated[
        str | None,
        typer.Option(help="Put another DATASET, or a period SINCE..UNTIL of this one, side by side with it."),
    ] = None,
) -> None:
    """Write one self-contained HTML page of the fleet's collectives: figures, headlines, jobs table.

    Job sizes, collective mix per class (calls, bytes passed in, bytes on the wire), message sizes per
    collective and model, GPUs per collective against job size and over time, and a section for each
    job chosen with --job (else the largest job of each class). It opens offline: the charting
    libraries are inside the page.

    Example: tracekit report sample.dataset -o report.html
    Example: tracekit report sample.dataset --since 2024-01-01 --compare 2023-01-01..2024-01-01
    Exit code 0: written; 2: no such job, bad date or --compare; 3: no such dataset, or the file cannot
    be written.
    """
    from rich.console import Console

    from tracekit.errors import OutputError, TracekitError

    console = Console(stderr=True)
    try:
        from tracekit.report import build_report

        scope = _scope(job, label, since, until)
        path = _dataset_or_samples(dataset, console)
        with _steps(console) as progress:
            result = build_report(
                path, out, scope, compare, dataset_arg=str(dataset) if dataset else "", progress=progress
            )
    except TracekitError as exc:
        _fail(console, exc)
    except OSError as exc:
        _fail(console, OutputError(f"{out}: cannot write ({exc.strerror})"))
    for missing in result.missing_jobs:
        console.print(f"[yellow]warning:[/yellow] no job named {shown(missing)}", highlight=False)
    console.print(
        f"report: {result.jobs:,} job{'s' if result.jobs != 1 else ''}, {result.figures} figures, "
        f"{_human_bytes(result.bytes)} in {result.seconds:.1f} s → {shown(result.path)}",
        highlight=False,
        soft_wrap=True,
    )


class OutputFormat(StrEnum):
    """`query --format`."""

    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


def _param(text: str) -> tuple[str, Any]:
    from tracekit.errors import InputError

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InputError(f"--param {text}: expected key=value")
    return key, value  # typed by the query's header (tracekit.store.queries.Param), so job_id=007 stays a string


@app.command()
def query(
    name: Annotated[str, typer.Argument(help="The query's name (`tracekit queries` lists them).")],
    dataset: Annotated[
        Path | None,
        typer.Argument(help="A dataset folder written by `tracekit ingest` (default: the bundled samples)."),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="A parameter of the query, key=value (repeat for several)."),
    ] = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--format", "-f", help="table (on screen), csv, json or parquet.")
    ] = OutputFormat.table,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of the screen.")] = None,
    job: JobsOpt = None,
    label: LabelOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
) -> None:
    """Run one of the shipped queries (queries/*.sql) on a dataset and print or save its rows.

    Example: tracekit query collective_mix_by_class sample.dataset
    Example: tracekit query group_size_trend sample.dataset -p start=2023-01-01 -p period_months=3 -f csv
    Example: tracekit query message_size_percentiles sample.dataset --label fsdp --since 2024-06-01
    --job, --label, --since and --until select the jobs the query reads, as the report's do.
    Exit code 0: done; 2: unknown query or parameter, or a bad date; 3: no such dataset, or the file
    cannot be written.
    """
    from rich.console import Console

    from tracekit.errors import InputError, OutputError, TracekitError

    console = Console(stderr=True)
    try:
        if output_format is OutputFormat.parquet and out is None:
            raise InputError("--format parquet needs --out FILE")
        from tracekit.api import open as open_dataset

        params = dict(_param(p) for p in param or [])
        scope = _scope(job, label, since, until)
        with open_dataset(_dataset_or_samples(dataset, console), scope) as ds:
            if not scope.is_everything() and not ds.sql("select count(*) from jobs").fetchall()[0][0]:
                raise InputError(f"no job of {dataset or 'the samples'} matches the selection ({scope.describe()})")
            relation = ds.query(name, params)
            with ds.computing(name):
                _write_rows(relation, output_format, out)
    except TracekitError as exc:
        _fail(console, exc)
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as other command-line tools do.
        import os
        import sys

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError as exc:
        _fail(console, OutputError(f"{out}: cannot write ({exc.strerror})"))


def _write_rows(relation: Any, output_format: OutputFormat, out: Path | None) -> None:
    import csv
    import json
    import sys

    if output_format is OutputFormat.parquet:
        from tracekit.api import write_parquet

        assert out is not None  # `query` refuses parquet without --out
        write_parquet(relation, out)
        return
    columns, rows = relation.columns, relation.fetchall()
    if output_format is OutputFormat.table:
        from rich.console import Console
        from rich.table import Table

        table = Table(*map(shown, columns), box=None, pad_edge=False, header_style="bold")
        for row in rows:
            table.add_row(*(cell(_cell(v)) for v in row))
        # On a terminal columns wrap to its width; elsewhere (a pipe, a file) nothing is cut.
        if out is None:
            screen = Console()
            (screen if screen.is_terminal else Console(width=_UNLIMITED)).print(table)
        else:
            with open(out, "w") as table_file:
                Console(file=table_file, width=_UNLIMITED).print(table)
        return
    handle: Any = open(out, "w", newline="") if out is not None else sys.stdout
    try:
        if output_format is OutputFormat.csv:
            writer = csv.writer(handle)
            writer.writerow(columns)
            writer.writerows([_cell(v, blank="", exact=True) for v in row] for row in rows)
        else:
            records = [dict(zip(columns, row, strict=True)) for row in rows]
            json.dump(records, handle, default=str, indent=1)
            handle.write("\n")
    finally:
        if out is not None:
            handle.close()


_UNLIMITED = 100_000


def _cell(value: Any, blank: str = "NULL", exact: bool = False) -> str:
    """A value as text: floats to 6 significant digits on screen, every digit (`exact`) in files."""
    if value is None:
        return blank
    if isinstance(value, float):
        return repr(value) if exact else f"{value:.6g}"
    if isinstance(value, list):
        return "[" + ", ".join(_cell(v, exact=exact) for v in value) + "]"
    return str(value)


@app.command()
def queries() -> None:
    """List the shipped queries: name, parameters and the question each answers.

    Each is also stored in every dataset's DuckDB file: a view (select * from NAME), or a table macro
    when it takes parameters (select * from NAME(...)).
    Example: tracekit queries
    """
    from rich.console import Console
    from rich.table import Table

    from tracekit.store.queries import query_names, query_params, query_summary

    table = Table("query", "parameters", "answers", box=None, pad_edge=False, header_style="bold")
    for name in query_names():
        table.add_row(shown(name), shown(", ".join(query_params(name))), shown(query_summary(name)))
    Console().print(table)


@app.command()
def plugins(
    all_: Annotated[bool, typer.Option("--all", help="Also list what tracekit has built in.")] = False,
) -> None:
    """List the installed plugins: the trace formats, simulator formats, algorithms and report charts they add.

    A plugin is a Python package that declares an entry point in the group tracekit.parser,
    tracekit.emitter, tracekit.algorithm or tracekit.chart, named for what it adds and pointing at
    the module that defines it (see README, Plugins). A plugin that cannot be used is listed as a warning saying why.
    Example: tracekit plugins --all
    """
    from rich.console import Console
    from rich.table import Table

    from tracekit.registry import extensions

    found = [e for e in extensions() if all_ or e.source != "built-in"]
    if not found:
        Console(stderr=True).print("no plugins installed (tracekit plugins --all lists the built-in ones)")
        return
    table = Table("kind", "name", "from", "what it does", box=None, pad_edge=False, header_style="bold")
    for e in found:
        table.add_row(*(shown(v) for v in (e.kind, e.name, e.source, e.summary)))
    Console().print(table)


def main() -> None:
    """Run the command; a Ctrl-C at any moment ends it with `interrupted` (or what the command says
    instead: `interrupted, dataset unchanged`) and exit 130, whatever error it caused on its way."""
    from tracekit import interrupts

    _warnings_on_one_line()
    interrupts.for_command()
    try:
        app(prog_name="tracekit")
    except BaseException as exc:
        interrupts.command_over()
        if not _stopped_by_ctrl_c(exc, interrupts.arrived()):
            raise
        _say_interrupted()
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        interrupts.command_over()


def _warnings_on_one_line() -> None:
    """A Python warning (a plugin that cannot be used, say) reads as tracekit's own: `warning: ...`."""
    import warnings

    warnings.formatwarning = lambda message, *_args, **_kwargs: f"warning: {message}\n"


def _stopped_by_ctrl_c(exc: BaseException, arrived: bool) -> bool:
    """The command ended because of a Ctrl-C: typer's exit 130, or any failure after one arrived."""
    if isinstance(exc, SystemExit):
        return exc.code == EXIT_INTERRUPTED or (exc.code not in (0, None) and arrived)
    return arrived or isinstance(exc, KeyboardInterrupt)
