"""Shared fixtures: where the project's sample traces and the public reference traces live, and the
samples' dataset as `tracekit report` makes it for a new user.

`samples` runs `tracekit report` with no DATASET, as a new user would: it ingests the bundled samples
into a cache folder (XDG_CACHE_HOME points into the session's temporary folder) and reports on them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.examples import register_profiles
from tracekit.errors import ParserBug

register_profiles()  # before the hypothesis plugin loads the one --hypothesis-profile names

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACES = ROOT / "sample_traces"
PUBLIC_TRACES = ROOT.parent / "shared" / "traces" / "public"
# The DuckDB shell that tracekit installs (the duckdb-cli package), as users start it.
DUCKDB = shutil.which("duckdb", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
needs_duckdb_shell = pytest.mark.skipif(
    DUCKDB is None, reason="the duckdb shell (pip install duckdb-cli) is not installed"
)


@dataclass
class Shell:
    """A DuckDB shell with a database open, waiting for input; `pid` is the process holding the file."""

    process: subprocess.Popen[str]
    pid: int

    def run(self, sql: str) -> list[str]:
        """Run `sql` in the shell and return the lines it printed."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{sql}\nselect 'tracekit-test-done';\n")
        self.process.stdin.flush()
        lines = []
        while "tracekit-test-done" not in (line := self.process.stdout.readline()):
            assert line, "the duckdb shell ended"
            lines.append(line.rstrip("\n"))
        return lines


@contextmanager
def duckdb_shell(database: Path, *options: str) -> Iterator[Shell]:
    """The real DuckDB shell holding `database` open (read-write unless `-readonly`), as a user leaves
    it open in another terminal, until the block ends."""
    assert DUCKDB is not None
    process = subprocess.Popen(
        [DUCKDB, "-csv", "-noheader", *options, str(database)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        shell = Shell(process, process.pid)
        shell.run("select 1;")  # the file is open (and locked) once the shell answers
        shell.pid = _binary_of(process.pid)
        yield shell
    finally:
        process.communicate(".quit\n", timeout=30)


def _binary_of(pid: int) -> int:
    """The pid of the shell binary: .venv/bin/duckdb is a Python launcher running it as a child."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    found = children.read_text().split() if children.exists() else []
    return int(found[0]) if found else pid


@pytest.fixture(autouse=True)
def _parser_bugs_fail_the_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser's own exception becomes a ParserBug, a TraceError, so that a run goes on; a test
    expecting `TraceError` would take it for a refusal. Here any ParserBug made in the test's
    process fails the test (unless marked `parser_bug_expected`), with the exception it wraps."""
    if request.node.get_closest_marker("parser_bug_expected"):
        return
    made = ParserBug.of

    def fail(exc: BaseException, fmt: str | None) -> ParserBug:
        bug = made(exc, fmt)
        pytest.fail(f"parser bug: {bug.message}", pytrace=False)

    monkeypatch.setattr(ParserBug, "of", fail)


@pytest.fixture
def public_traces() -> Path:
    """../shared/traces/public: real traces from public repositories (CI and developer machines)."""
    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"public reference traces not present at {PUBLIC_TRACES} (../shared is absent)")
    return PUBLIC_TRACES


@pytest.fixture
def sample_traces() -> Path:
    return SAMPLE_TRACES


def run_tracekit(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=600,
    )


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`tracekit ARGS` run in this process (typer's runner): its exit code, stdout and stderr as a process
    would give them, without an interpreter's start. For tests of what a command prints and exits
    with; those of signals, environment, working folder or start-up keep `run_tracekit`."""
    from typer.testing import CliRunner

    from tracekit.cli import app

    argv = [str(a) for a in args]
    result = CliRunner().invoke(app, argv, prog_name="tracekit")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback the user would see: the test fails with it
    return subprocess.CompletedProcess(["tracekit", *argv], result.exit_code, result.stdout, result.stderr)


@dataclass
class SampleRun:
    cache: Path  # XDG_CACHE_HOME of the run
    dataset: Path  # the samples' dataset it made there
    page: Path  # the report it wrote
    stderr: str


@pytest.fixture(scope="session")
def samples(tmp_path_factory: pytest.TempPathFactory) -> SampleRun:
    root = tmp_path_factory.mktemp("samples")
    env = {"XDG_CACHE_HOME": str(root / "cache")}
    result = run_tracekit("report", "-o", root / "report.html", env=env, cwd=root)
    assert result.returncode == 0, result.stderr
    found = sorted((root / "cache" / "tracekit").glob("samples-*"))
    assert len(found) == 1, found
    return SampleRun(root / "cache", found[0], root / "report.html", result.stderr)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nobody may write into: mode 555, and immutable where the tests run as root (root
    ignores modes)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    immutable = os.geteuid() == 0
    if immutable and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("running as root, where only an immutable folder is read-only, and chattr +i failed here")
    try:
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)
