"""`tracekit ingest` as scripts run it: exit codes, one-line messages, the real DuckDB shell holding the
dataset, and Ctrl-C (a real SIGINT to a real process) at the worst moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import tracekit
from tests.builders import write_et_job
from tests.cli.test_cli import tracekit as run
from tests.conftest import duckdb_shell, needs_duckdb_shell


def _as_from_a_terminal() -> None:
    """Ctrl-C as a terminal delivers it: a job started in the background (as CI runners and `cmd &`
    start tests) inherits SIGINT ignored, and Python then never turns it into KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_one_rank_of_a_multi_rank_job_exits_zero_with_one_warning_and_one_with_strict(
    public_traces: Path, tmp_path: Path
) -> None:
    result = run("ingest", public_traces / "hta-nccl-2gpu", "--out", tmp_path / "ds")
    assert result.returncode == 0, result.stderr
    assert _lines(result.stderr, "warning:") == ["warning: job hta-nccl-2gpu: rank 1 of 2 missing"]
    assert _lines(result.stderr, "error:") == []
    # The same again, strict: nothing new, the same answer, now a failure.
    strict = run("ingest", public_traces / "hta-nccl-2gpu", "--out", tmp_path / "ds", "--strict", "-q")
    assert strict.returncode == 1
    assert strict.stderr.splitlines() == ["warning: job hta-nccl-2gpu: rank 1 of 2 missing"]


def test_nothing_to_ingest_exits_two_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    cases = {
        "missing": (tmp_path / "nope",),
        "empty": (tmp_path / "empty",),
        "manifest": (tmp_path / "empty", "--manifest", tmp_path / "nofile.csv"),
    }
    for name, args in cases.items():
        result = run("ingest", *args, "--out", tmp_path / f"{name}.ds")
        assert result.returncode == 2, (name, result.stderr)
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("error: "), result.stderr
        assert "query it" not in result.stderr
        assert not (tmp_path / f"{name}.ds").exists()
    assert "nofile.csv: no such manifest file" in result.stderr


def test_a_missing_path_beside_good_ones_exits_one_every_time(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "j", [0, 1], [("ALL_REDUCE", 64)])
    for _ in range(2):
        result = run("ingest", tmp_path / "in", tmp_path / "nope", "--out", tmp_path / "ds", "-q")
        assert result.returncode == 1
        assert result.stderr.splitlines() == [f"error: {tmp_path / 'nope'}: no such file or folder"]
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select job_id from jobs").fetchall() == [("j",)]


def test_errors_are_listed_by_rank_as_numbers(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "j", [0], [("ALL_REDUCE", 64)])
    for rank in (2, 10, 11, 9):
        (tmp_path / "in" / "j" / f"j.{rank}.et").write_bytes(b"\x05\x0a")  # truncated record
    result = run("ingest", tmp_path / "in", "--out", tmp_path / "ds", "-q")
    assert result.returncode == 1
    assert [line.split(": ")[1].rsplit("/", 1)[1].split(" ")[0] for line in _lines(result.stderr, "error:")] == [
        "j.2.et",
        "j.9.et",
        "j.10.et",
        "j.11.et",
    ]
    info = run("info", tmp_path / "ds")
    assert [line.split("/")[-1].split(" ")[0] for line in _lines(info.stdout, "error:")] == [
        "j.2.et",
        "j.9.et",
        "j.10.et",
        "j.11.et",
    ]


@needs_duckdb_shell
def test_a_dataset_held_open_by_the_duckdb_shell_is_a_one_line_error(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "a", [0, 1], [("ALL_REDUCE", 64)])
    assert run("ingest", tmp_path / "in" / "a", "--out", tmp_path / "ds", "-q").returncode == 0
    write_et_job(tmp_path / "more" / "b", [0, 1], [("ALL_REDUCE", 64)])
    with duckdb_shell(tmp_path / "ds" / "tracekit.duckdb") as shell:
        result = run("ingest", tmp_path / "more", "--out", tmp_path / "ds")
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        f"error: {tmp_path / 'ds'}: the dataset is open in another program (duckdb, PID {shell.pid}): "
        "close it or use --out elsewhere"
    ]
    assert not any((tmp_path / "ds" / ".staging").glob("*"))
    again = run("ingest", tmp_path / "more", "--out", tmp_path / "ds", "-q")
    assert again.returncode == 0, again.stderr


# Runs `tracekit ingest` with the final DuckDB write slowed down (a long query on the same
# connection, once the new tables are in), and says so on stdout: the test then sends SIGINT.
_SLOW_WRITE = textwrap.dedent(
    """
    import sys
    import tracekit.store.commit
    from tracekit.cli import main

    original = tracekit.store.commit.store_queries

    def slow(con):
        original(con)
        print("writing", flush=True)
        con.execute("select sum(i) from range(100000000000) t(i)").fetchall()

    if __name__ == "__main__":  # not in the pool's forkserver, which imports this file too
        tracekit.store.commit.store_queries = slow
        sys.argv = ["tracekit", *sys.argv[1:]]
        main()
    """
)


def _state(dataset: Path) -> tuple[int, int]:
    with tracekit.open(dataset) as ds:
        return ds.sql("select (select count(*) from traces), (select count(*) from collectives)").fetchall()[0]


def test_ctrl_c_during_the_final_write_exits_130_and_leaves_the_dataset_unchanged(tmp_path: Path) -> None:
    write_et_job(tmp_path / "a" / "j", [0, 1], [("ALL_REDUCE", 64)])
    write_et_job(tmp_path / "b" / "k", list(range(8)), [("ALL_REDUCE", 64)] * 10)
    assert run("ingest", tmp_path / "a", "--out", tmp_path / "ds", "-q").returncode == 0
    before = _state(tmp_path / "ds")
    (tmp_path / "slow.py").write_text(_SLOW_WRITE)
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "slow.py"), "ingest", str(tmp_path / "b"), "--out", str(tmp_path / "ds")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_as_from_a_terminal,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "writing"
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.splitlines() == ["interrupted, dataset unchanged"]
    assert _state(tmp_path / "ds") == before
    assert not (tmp_path / "ds" / ".staging").exists()


_CTRL_C_AFTER_THE_COMMIT = textwrap.dedent(
    """
    import os, signal, sys, threading
    import duckdb
    import tracekit.ingest.run
    from tracekit.cli import main

    how = sys.argv.pop(1)

    def ctrl_c(dataset):
        if how == "python":
            raise KeyboardInterrupt  # as a Ctrl-C landing just past the commit point
        # A real Ctrl-C while DuckDB runs the summary's query: it becomes DuckDB's RuntimeError.
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        duckdb.connect().execute("select sum(i) from range(1000000000) t(i)").fetchall()

    if __name__ == "__main__":
        tracekit.ingest.run.dataset_summary = ctrl_c
        sys.argv = ["tracekit", *sys.argv[1:]]
        main()
    """
)


@pytest.mark.parametrize("how", ["python", "duckdb"])
def test_ctrl_c_after_the_commit_exits_130_and_says_the_run_was_written(tmp_path: Path, how: str) -> None:
    write_et_job(tmp_path / "b" / "k", [0, 1, 2], [("ALL_REDUCE", 64)] * 4)
    (tmp_path / "ctrl_c.py").write_text(_CTRL_C_AFTER_THE_COMMIT)
    command = ["ingest", str(tmp_path / "b"), "--out", str(tmp_path / "ds")]
    done = subprocess.run(
        [sys.executable, str(tmp_path / "ctrl_c.py"), how, *command],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_as_from_a_terminal,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr.splitlines() == ["interrupted after the run was written: the dataset holds it"]
    assert _state(tmp_path / "ds") == (3, 12)


@pytest.mark.slow
def test_ctrl_c_at_any_moment_exits_130_or_0_without_a_traceback(tmp_path: Path) -> None:
    """Moments taken from what the run is doing, not from a clock a loaded machine shifts: as soon as
    the run has its staging folder (it is parsing: the commit is still to come, however fast the
    machine), then at moments after that, which may land in the parse, the commit or past it; each
    outcome must leave what it says. (A Ctrl-C while Python imports: tests/cli/test_interrupted.py.)"""
    for j in range(30):
        write_et_job(tmp_path / "fleet" / f"job{j:02d}", list(range(8)), [("ALL_REDUCE", 1 << 20)] * 20)
    write_et_job(tmp_path / "first" / "j", [0, 1], [("ALL_REDUCE", 64)])
    assert run("ingest", tmp_path / "first", "--out", tmp_path / "ds", "-q").returncode == 0
    before = _state(tmp_path / "ds")
    full = (before[0] + 240, before[1] + 240 * 20)
    seen = []
    for after in (None, 0.1, 0.3, 0.6, 1.0, 1.5, 2.2, 3.0, 4.5):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tracekit", "ingest", str(tmp_path / "fleet"), "--out", str(tmp_path / "ds")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=_as_from_a_terminal,
        )
        _until_staged(proc, tmp_path / "ds" / ".staging")
        time.sleep(after or 0)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole process group
        _, stderr = proc.communicate(timeout=120)
        assert "Traceback" not in stderr, stderr
        left = sorted(str(p) for p in (tmp_path / "ds" / ".staging").rglob("*"))
        assert not left, (after, proc.returncode, stderr, left)
        last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        state = _state(tmp_path / "ds")
        if proc.returncode == 130 and last == "interrupted, dataset unchanged":
            assert state == before, (after, stderr)
        else:  # past the commit point, or done: the run is in the dataset, whole
            assert proc.returncode == 0 or (
                proc.returncode == 130 and last == "interrupted after the run was written: the dataset holds it"
            ), (after, proc.returncode, stderr)
            assert state == full, (after, stderr)
        seen.append(state)
        if state == full:
            break
    assert seen[0] == before, "the Ctrl-C at the staging folder's birth did not stop the run"
    assert _no_tracekit_process_left(tmp_path)


def _until_staged(proc: subprocess.Popen[str], staging: Path) -> None:
    """Until the run has a staging folder (or has ended)."""
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if staging.is_dir() and any(staging.iterdir()):
            return
        time.sleep(0.002)


def _no_tracekit_process_left(tmp_path: Path) -> bool:
    """No process (pool worker, forkserver) still has the fleet's folder on its command line."""
    deadline = time.time() + 10
    while time.time() < deadline:
        found = subprocess.run(["pgrep", "-f", str(tmp_path / "fleet")], capture_output=True, text=True).stdout.split()
        if not found:
            return True
        time.sleep(0.2)
    return False


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"tracekit {tracekit.__version__}"


def test_help_texts_show_no_type_placeholders() -> None:
    import re

    import typer.main

    from tracekit.cli import app

    placeholder = re.compile(r"<(?:int|str|path|bool|float|list\[\w+\]|[a-z]+ range)>")
    for name in ["--help", *sorted(typer.main.get_command(app).commands)]:  # type: ignore[attr-defined]
        text = run(*([name, "--help"] if name != "--help" else ["--help"])).stdout
        assert not placeholder.search(text), f"`tracekit {name} --help` shows a type placeholder:\n{text}"


def test_progress_reports_the_total_then_the_final_write(tmp_path: Path) -> None:
    from tracekit.ingest import ingest
    from tracekit.ingest.report import Progress

    write_et_job(tmp_path / "in" / "j", list(range(6)), [("ALL_REDUCE", 64)])
    events: list[Progress] = []
    ingest([tmp_path / "in"], tmp_path / "ds", progress=events.append)
    assert events[0] == Progress("parse", 0, 6)
    assert [(e.stage, e.done, e.total) for e in events[1:7]] == [("parse", n, 6) for n in range(1, 7)]
    assert events[-1] == Progress("write", 6, 6)


def test_past_ten_errors_and_warnings_the_rest_are_counted_with_the_sql_that_lists_them() -> None:
    from rich.console import Console

    from tracekit.cli import _errors, _warnings

    console = Console(record=True, width=400)
    _warnings(console, [f"w{i}" for i in range(12)])
    _errors(console, [f"e{i}" for i in range(11)])
    lines = console.export_text().splitlines()
    assert lines[:10] == [f"warning: w{i}" for i in range(10)]
    assert lines[10] == (
        "... and 2 more warnings: select path, unnest(warnings) from traces; select * from jobs where ranks_missing > 0"
    )
    assert lines[11:21] == [f"error: e{i}" for i in range(10)]
    assert lines[21] == "... and 1 more: select path, error from traces where status = 'error'"
