"""Ctrl-C in every command, at moments chosen by what the command is doing (not by a clock, which a
loaded machine shifts): `interrupted` on stderr and exit 130, never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.builders import write_et_job
from tracekit.ingest import ingest

# The console script pip writes for `tracekit` (named `tracekit` too: that is how the CLI knows it
# is the command), with a Ctrl-C delivered to itself as Python starts importing a module.
_CONSOLE_SCRIPT = textwrap.dedent(
    """\
    import os, signal, sys


    class CtrlCOnImport:
        def find_spec(self, name, path=None, target=None):
            if name == os.environ["CTRL_C_ON_IMPORT"]:
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
            return None


    sys.meta_path.insert(0, CtrlCOnImport())
    if os.environ.get("CTRL_C_AT_QUERY"):
        import tracekit.api

        run = tracekit.api.TraceDataset.query

        def query(self, name, params=None):  # a long statement, then a Ctrl-C while DuckDB runs it
            if name == os.environ["CTRL_C_AT_QUERY"]:
                import threading

                threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
                self.con.execute("select sum(i) from range(100000000000) t(i)").fetchall()
            return run(self, name, params)

        tracekit.api.TraceDataset.query = query
    from tracekit.__main__ import main
    if __name__ == "__main__":
        sys.exit(main())
    """
)


def _as_from_a_terminal() -> None:
    """SIGINT as a terminal delivers it: a job started in the background inherits it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ctrl-c")
    (root / "bin").mkdir()
    (root / "bin" / "tracekit").write_text(_CONSOLE_SCRIPT)
    write_et_job(root / "in" / "jobA", [0, 1, 2, 3], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])
    assert ingest([root / "in"], root / "ds").ok
    return root


def _interrupted(workdir: Path, args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(workdir / "bin" / "tracekit"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=workdir,
        env={**os.environ, "CTRL_C_ON_IMPORT": "", **env},
        preexec_fn=_as_from_a_terminal,
    )


def _commands(workdir: Path) -> dict[str, list[str]]:
    ds = str(workdir / "ds")
    return {
        "help": ["--help"],
        "info": ["info", ds],
        "query": ["query", "job_class", ds],
        "queries": ["queries"],
        "report": ["report", ds, "-o", str(workdir / "r.html")],
        "replay": ["replay", ds, "--job", "jobA", "-o", str(workdir / "replay")],
        "ingest": ["ingest", str(workdir / "in"), "--out", str(workdir / "new.dataset")],
        "generate": ["generate", "--jobs", "4", "--out", str(workdir / "fleet")],
    }


# Python itself is still starting until the first line of tracekit runs (`import tracekit`): a
# Ctrl-C before it is Python's to report. Every module imported from then on is tracekit's moment.
_EVERY_COMMAND_IMPORTS = ["tracekit._version", "tracekit.__main__", "tracekit.cli", "typer", "rich.console"]
_EACH_COMMAND_IMPORTS = {
    "help": ["typer.rich_utils"],
    "info": ["duckdb", "tracekit.api"],
    "query": ["tracekit.store.queries", "duckdb"],
    "queries": ["tracekit.store.queries", "rich.table"],
    "report": ["tracekit.report", "altair", "polars"],
    "replay": ["tracekit.replay", "numpy"],
    "ingest": ["tracekit.ingest", "pyarrow", "multiprocessing.forkserver"],
    "generate": ["tracekit.generate", "tracekit.writers.chakra_et"],
}
_CASES = [("info", m) for m in _EVERY_COMMAND_IMPORTS] + [
    (command, module) for command, modules in _EACH_COMMAND_IMPORTS.items() for module in modules
]


@pytest.mark.parametrize(("command", "module"), _CASES)
def test_ctrl_c_while_python_imports_says_interrupted_and_exits_130(workdir: Path, command: str, module: str) -> None:
    result = _interrupted(workdir, _commands(workdir)[command], CTRL_C_ON_IMPORT=module)
    # An ingest that has begun says what became of the dataset.
    said = ["interrupted\n", "interrupted, dataset unchanged\n"] if command == "ingest" else ["interrupted\n"]
    assert result.returncode == 130 and result.stderr in said, result.stderr


@pytest.mark.parametrize(("command", "query"), [("report", "job_overview"), ("query", "job_class")])
def test_ctrl_c_while_duckdb_runs_a_query_says_interrupted_and_exits_130(
    workdir: Path, command: str, query: str
) -> None:
    """DuckDB turns the Ctrl-C into an error of its own (`RuntimeError: Query interrupted`), and
    looks for one only between its tasks: the statement is interrupted at once all the same."""
    result = _interrupted(workdir, _commands(workdir)[command], CTRL_C_AT_QUERY=query)
    assert (result.returncode, result.stderr) == (130, "interrupted\n"), result.stderr


def test_a_ctrl_c_pending_when_the_command_is_over_keeps_its_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found in CI: an ingest interrupted at a random moment said `interrupted, dataset unchanged`
    # and then died of SIGINT (exit -2, not 130). A SIGINT that reached another thread is run by
    # the main thread at its next check: `signal.signal` runs pending handlers before it changes
    # one, so the handler in force raised KeyboardInterrupt out of the `finally` that ignores late
    # Ctrl-Cs, and an uncaught KeyboardInterrupt makes Python kill itself with SIGINT.
    import tracekit.__main__ as entry
    import tracekit.cli

    def command() -> None:
        raise SystemExit(130)

    real = signal.signal
    pending = [True]

    def pending_then_set(signum: int, handler: object) -> object:
        if handler is signal.SIG_IGN and pending:
            pending.clear()
            raise KeyboardInterrupt  # the pending Ctrl-C's handler, run by signal.signal first
        return real(signum, handler)  # type: ignore[arg-type]

    monkeypatch.setattr(tracekit.cli, "main", command)
    monkeypatch.setattr(entry.signal, "signal", pending_then_set)
    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as stopped:
            entry.main()
    finally:
        real(signal.SIGINT, previous)
    assert stopped.value.code == 130
