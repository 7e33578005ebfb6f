"""A parse worker killed mid-parse (the OOM killer, a segfault in a C extension) costs its batch, not
the run: the batch is parsed again in a fresh worker, its files one by one; a file whose worker dies
again gets an error row naming the signal, and everything else is committed (exit 1).

The workers are killed by a real trace: a plugin trace format (installed as a distribution with an
entry point in a temporary folder, as `pip install` would) whose parser kills its own process on a
`die` line. The plugin must be seen by the workers' interpreters, so every run is a `tracekit`
process of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

import tracekit
from tests.ingest.test_executors import EXECUTORS
from tracekit.executors import Death, open_executor
from tracekit.ingest.worker import SPILL_ROWS

# The format: "DIETRACE" on the first line, then one "name duration_us" line per op; `die SIGNAL`
# kills the process parsing it, `die-once FLAG SIGNAL` only while the file FLAG does not exist yet;
# `mark-and-sleep FLAG` makes the file FLAG, then sleeps for a minute; `staged PATTERN FILE` hands the
# ops read so far to the worker, waits a second and writes into FILE (once) the files PATTERN matches.
DYING_PARSER = """
import glob
import os
import signal
import time

from tracekit.parsers.base import TableBuffer, TraceError, TraceMeta
from tracekit.parsers.formats import Parser

MAGIC = b"DIETRACE\\n"


def sniff(head):
    return head.startswith(MAGIC)


def parse(source, sink):
    meta = TraceMeta(format="dying")
    ops = TableBuffer("ops", sink)
    data = source.read()
    if not data.startswith(MAGIC):
        raise TraceError("no DIETRACE line", "byte 0")
    for number, line in enumerate(data[len(MAGIC):].decode().splitlines()):
        word, _, rest = line.partition(" ")
        if word == "die":
            os.kill(os.getpid(), getattr(signal, rest))
        elif word == "die-once":
            flag, _, name = rest.partition(" ")
            if not os.path.exists(flag):
                open(flag, "w").close()
                os.kill(os.getpid(), getattr(signal, name))
        elif word == "mark-and-sleep":
            open(rest, "w").close()
            time.sleep(60)
        elif word == "staged":
            pattern, _, note = rest.partition(" ")
            ops.flush()
            time.sleep(1)
            if not os.path.exists(note):
                with open(note, "w") as f:
                    f.write("\\n".join(sorted(glob.glob(pattern))))
        else:
            ops.append({"op_id": number, "name": word, "duration_us": float(rest)})
            meta.node_count += 1
    ops.flush()
    return meta


PARSER = Parser(name="dying", summary="a format whose parser may kill its process", content="binary",
                priority=5, sniff=sniff, suffixes=(".die",), role="host", parse=parse)
"""

FILES = 24  # with --workers 2: batches of 3 files (tracekit.ingest.batching), 8 of them


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a `tracekit` with the dying format installed."""
    site = tmp_path_factory.mktemp("site")
    (site / "dying_tracekit").mkdir()
    (site / "dying_tracekit" / "__init__.py").write_text("")
    (site / "dying_tracekit" / "parser.py").write_text(textwrap.dedent(DYING_PARSER))
    info = site / "dying_tracekit-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dying-tracekit\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tracekit.parser]\ndying = dying_tracekit.parser\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}


def _job(folder: Path, lines: dict[int, str]) -> Path:
    """FILES rank files of two ops each; rank r also gets `lines[r]`, after its first op."""
    folder.mkdir(parents=True)
    for rank in range(FILES):
        extra = f"{lines[rank]}\n" if rank in lines else ""
        (folder / f"rank{rank}.die").write_text(f"DIETRACE\nforward {rank}.5\n{extra}backward 30\n")
    return folder


def _ingest(env: dict[str, str], job: Path, out: Path, executor: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tracekit", "ingest", str(job), "--out", str(out), "--workers", "2", "-q"]
    return subprocess.run([*command, "--executor", executor], capture_output=True, text=True, env=env, timeout=600)


def _traces(dataset: Path) -> dict[str, tuple[str, str | None]]:
    with tracekit.open(dataset) as ds:
        rows = ds.sql("select path, status, error from traces").fetchall()
    return {Path(path).name: (status, error) for path, status, error in rows}


def _ops(dataset: Path) -> dict[int, list[tuple[str, float]]]:
    with tracekit.open(dataset) as ds:
        rows = ds.sql("select rank, name, duration_us from ops order by rank, op_id").fetchall()
    ops: dict[int, list[tuple[str, float]]] = {}
    for rank, name, duration in rows:
        ops.setdefault(rank, []).append((name, duration))
    return ops


def _expected_ops(ranks: range | list[int]) -> dict[int, list[tuple[str, float]]]:
    return {rank: [("forward", rank + 0.5), ("backward", 30.0)] for rank in ranks}


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_worker_that_dies_once_costs_nothing(plugin: dict[str, str], tmp_path: Path, executor: str) -> None:
    """Two files kill their workers the first time they are parsed (one a segfault): each batch is
    parsed again and every file's rows are in the dataset once."""
    flags = tmp_path / "flags"
    flags.mkdir()
    job = _job(tmp_path / "job", {4: f"die-once {flags / 'a'} SIGKILL", 17: f"die-once {flags / 'b'} SIGSEGV"})
    done = _ingest(plugin, job, tmp_path / "ds", executor)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in flags.iterdir()) == ["a", "b"]  # both workers did die
    if executor == "local":  # a warning for each death: the run went well, but memory may be short
        warnings = sorted(done.stderr.splitlines())
        assert len(warnings) == 2, done.stderr
        for warning, how in zip(warnings, ["signal 11 (SIGSEGV)", "signal 9 (SIGKILL)"], strict=True):
            assert warning.startswith(f"warning: {job}"), warning
            assert warning.endswith(
                f"and 2 more files: the worker parsing them died ({how}); parsed again, each was read"
            )
    else:  # Dask ran the task again on another worker itself
        assert done.stderr == ""
    assert set(_traces(tmp_path / "ds").values()) == {("ok", None)}
    assert _ops(tmp_path / "ds") == _expected_ops(range(FILES))
    again = _ingest(plugin, job, tmp_path / "ds", executor)  # the files are in the dataset: nothing added
    assert again.returncode == 0, again.stderr
    assert _ops(tmp_path / "ds") == _expected_ops(range(FILES))


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_file_that_always_kills_its_worker_gets_an_error_row(
    plugin: dict[str, str], tmp_path: Path, executor: str
) -> None:
    """Its batch's other files, retried one by one, and every other batch are committed; exit 1."""
    job = _job(tmp_path / "job", {7: "die SIGKILL"})
    done = _ingest(plugin, job, tmp_path / "ds", executor)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    traces = _traces(tmp_path / "ds")
    status, error = traces.pop("rank7.die")
    assert status == "error" and error is not None
    assert error.startswith(f"{job / 'rank7.die'}: worker died: signal 9 (SIGKILL)"), error
    # The file's error line, after the note any failed file of a job brings (its rank has no trace).
    assert done.stderr.splitlines() == ["warning: job job: rank 7 of 24 missing", f"error: {error}"], done.stderr
    assert set(traces.values()) == {("ok", None)} and len(traces) == FILES - 1
    assert _ops(tmp_path / "ds") == _expected_ops([r for r in range(FILES) if r != 7])
    assert tracekit.verify(tmp_path / "ds").problems == []
    # The dataset is whole: a run after it adds the fixed file and nothing twice.
    (job / "rank7.die").write_text("DIETRACE\nforward 7.5\nbackward 30\n")
    again = _ingest(plugin, job, tmp_path / "ds", executor)
    assert (again.returncode, again.stderr) == (0, ""), again.stderr
    assert set(_traces(tmp_path / "ds").values()) == {("ok", None)}
    assert _ops(tmp_path / "ds") == _expected_ops(range(FILES))


def test_a_dead_workers_staged_rows_are_not_committed(plugin: dict[str, str], tmp_path: Path) -> None:
    """A file long enough to spill its rows to staged files of its own (past SPILL_ROWS) kills its
    worker once it has: its rows are in the dataset once, from its retry."""
    flags = tmp_path / "flags"
    flags.mkdir()
    many = "\n".join(f"op{i} {i}" for i in range(SPILL_ROWS + 1000))
    staged = tmp_path / "ds" / ".staging" / "*" / "ops" / "file-*.parquet"
    job = _job(tmp_path / "job", {})
    (job / "rank3.die").write_text(
        f"DIETRACE\n{many}\nstaged {staged} {flags / 'staged'}\ndie-once {flags / 'died'} SIGKILL\n"
    )
    done = _ingest(plugin, job, tmp_path / "ds", "local")
    assert done.returncode == 0, done.stderr
    assert "the worker parsing them died (signal 9 (SIGKILL))" in done.stderr
    assert (flags / "staged").read_text(), "the worker died before it staged rows of its own"
    with tracekit.open(tmp_path / "ds") as ds:
        counts = dict(ds.sql("select rank, count(*) from ops group by rank").fetchall())
    assert counts == {**dict.fromkeys([r for r in range(FILES) if r != 3], 2), 3: SPILL_ROWS + 1000}
    assert not (tmp_path / "ds" / ".staging").exists()


def test_ctrl_c_while_a_dead_batch_is_retried_leaves_the_dataset_unchanged(
    plugin: dict[str, str], tmp_path: Path
) -> None:
    """The retry's pool is stopped as the first one is: `interrupted, dataset unchanged`, exit 130,
    and no worker left behind."""
    flags = tmp_path / "flags"
    flags.mkdir()
    # Rank 2 kills its worker; parsed again, it says so (`retrying`) and sleeps: the Ctrl-C lands then.
    job = _job(tmp_path / "job", {2: f"die-once {flags / 'died'} SIGKILL\nmark-and-sleep {flags / 'retrying'}"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "ingest", str(job), "--out", str(tmp_path / "ds"), "--workers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=plugin,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not (flags / "retrying").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert (flags / "retrying").exists(), "the file was not parsed again"
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal sends it: to the whole foreground group
    started = time.monotonic()
    _, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, stderr) == (130, "interrupted, dataset unchanged\n"), stderr
    assert time.monotonic() - started < 30  # the sleeping worker was stopped, not waited for
    assert not (tmp_path / "ds" / "tracekit.duckdb").exists()
    deadline = time.monotonic() + 5
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _session(proc.pid), "a worker outlived the interrupted ingest"


def _session(sid: int) -> list[int]:
    """Pids of the live processes of session `sid` (the ingest and every process it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                alive = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
                if alive and os.getsid(int(entry.name)) == sid:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _die(signum: int) -> None:
    """A task that kills the worker running it."""
    os.kill(os.getpid(), signum)


def _sleep_then_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_the_pool_names_the_task_whose_worker_died_and_starts_afresh() -> None:
    with open_executor("local", 2) as run:
        # Both workers up first: the pool's manager thread misses the death of a worker it started
        # while it was waiting (CPython 3.11), until the next result comes.
        for started in [run.submit(_sleep_then_pid, 1.0) for _ in range(2)]:
            started.result(timeout=60)
        innocent = run.submit(_sleep_then_pid, 30.0)  # running on the other worker when the first dies
        dead = run.submit(_die, signal.SIGSEGV)
        assert isinstance(dead.exception(timeout=60), BrokenProcessPool)
        assert isinstance(innocent.exception(timeout=60), BrokenProcessPool)  # lost with the pool
        later = run.submit(pow, 2, 10)  # handed to a fresh pool
        assert later.result(timeout=60) == 1024
        assert run.death(dead) == Death("signal 11 (SIGSEGV)")
        assert run.death(innocent) == Death(None)
        assert run.death(later) is None
        failed = run.submit(int, "x")  # a task's own exception is no death
        assert isinstance(failed.exception(timeout=60), ValueError) and run.death(failed) is None


def test_a_worker_stopped_from_outside_makes_every_task_it_broke_suspect() -> None:
    """SIGTERM is how the pool stops the workers a death left: no exit tells which task was to blame."""
    with open_executor("local", 2) as run:
        pids = {run.submit(_sleep_then_pid, 0.5).result(timeout=60) for _ in range(4)}
        lost = [run.submit(_sleep_then_pid, 30.0) for _ in range(2)]
        time.sleep(1.0)  # both are running
        os.kill(min(pids), signal.SIGTERM)
        for future in lost:
            assert isinstance(future.exception(timeout=60), BrokenProcessPool)
            death = run.death(future)
            assert death is not None and death.how is not None and death.how.startswith("cause unknown")
