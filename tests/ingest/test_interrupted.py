"""An ingest killed midway (Ctrl-C, SIGKILL) leaves the previous dataset whole and queryable."""

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
import tracekit.store.commit
from tests.builders import write_et_job
from tracekit.ingest import ingest


def _state(dataset: Path) -> tuple[int, int, int]:
    with tracekit.open(dataset) as ds:
        return (
            ds.sql("select count(*) from traces").fetchall()[0][0],
            ds.sql("select count(*) from collectives").fetchall()[0][0],
            ds.sql("select count(*) from ops").fetchall()[0][0],
        )


def _parquet_rows(dataset: Path, table: str) -> int:
    import polars as pl

    files = list((dataset / table).glob("*.parquet"))
    return sum(pl.read_parquet(f).height for f in files)


def _fleet(root: Path, jobs: int, ranks: int) -> None:
    for j in range(jobs):
        write_et_job(root / f"{root.name}{j:03d}", list(range(ranks)), [("ALL_REDUCE", 1 << 20)] * 20)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_ingest_leaves_the_previous_dataset_whole(tmp_path: Path, sig: signal.Signals) -> None:
    _fleet(tmp_path / "first", 2, 4)
    _fleet(tmp_path / "second", 60, 8)
    ingest([tmp_path / "first"], tmp_path / "ds")
    before = _state(tmp_path / "ds")
    full = (before[0] + 480, before[1] + 480 * 20, before[2] + 480 * 40)
    seen = set()
    # First as soon as the run has made its staging folder (it is parsing: the commit is still to
    # come, however fast the machine), then at fixed moments, which may land in the commit.
    for delay in (None, 0.3, 0.8, 1.5, 2.5):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tracekit",
                "ingest",
                str(tmp_path / "second"),
                "--out",
                str(tmp_path / "ds"),
                "-q",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_for(proc, tmp_path / "ds" / ".staging") if delay is None else time.sleep(delay)
        if proc.poll() is None:
            os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
        proc.wait(timeout=60)
        state = _state(tmp_path / "ds")
        assert state in (before, full), f"partial dataset after a kill at {delay}s: {state}"
        seen.add(state)
        if state == full:
            break
    assert before in seen, "no kill landed before the commit: the test did not exercise an interruption"
    # The next run finishes whatever is left and the Parquet files agree with the DuckDB file.
    report = ingest([tmp_path / "second"], tmp_path / "ds")
    assert report.ok
    assert _state(tmp_path / "ds") == full
    assert _parquet_rows(tmp_path / "ds", "collectives") == full[1]
    assert _parquet_rows(tmp_path / "ds", "ops") == full[2]
    assert not any((tmp_path / "ds" / ".staging").glob("*"))


def _wait_for(proc: subprocess.Popen[bytes], staging: Path) -> None:
    """Until the run has a staging folder (or has ended)."""
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        if staging.is_dir() and any(staging.iterdir()):
            return
        time.sleep(0.002)


def test_a_crash_between_commit_and_parquet_moves_is_finished_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fleet(tmp_path / "in", 2, 2)

    def crash(plan: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tracekit.store.commit, "apply_plan", crash)
    with pytest.raises(KeyboardInterrupt):
        ingest([tmp_path / "in"], tmp_path / "ds")
    monkeypatch.undo()
    committed = _state(tmp_path / "ds")
    assert committed[1] == 4 * 20
    assert _parquet_rows(tmp_path / "ds", "collectives") == 0  # not moved yet
    report = ingest([tmp_path / "in"], tmp_path / "ds")  # recovers, then finds nothing new
    assert report.files_added == 0
    assert _parquet_rows(tmp_path / "ds", "collectives") == committed[1]


@pytest.mark.parametrize("reader", [False, True], ids=["in-place", "copy"])
def test_a_crash_just_before_the_commit_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: bool
) -> None:
    """Whether the run writes the DuckDB file in place or (while a reader has it open) a copy of it."""
    _fleet(tmp_path / "in", 1, 2)
    ingest([tmp_path / "in"], tmp_path / "ds")
    before = _state(tmp_path / "ds")
    _fleet(tmp_path / "more", 1, 2)

    def crash(*args: object) -> None:  # the last step before the commit: the run's plan made durable
        raise KeyboardInterrupt

    monkeypatch.setattr(tracekit.store.commit, "fsync", crash)
    with tracekit.open(tmp_path / "ds") as held:
        if reader:
            held.sql("select count(*) from jobs").fetchall()  # the file is open here while the run writes
        with pytest.raises(KeyboardInterrupt):
            ingest([tmp_path / "more"], tmp_path / "ds")
    monkeypatch.undo()
    assert _state(tmp_path / "ds") == before
    ingest([tmp_path / "in"], tmp_path / "ds")  # recovery discards the uncommitted staging
    assert not any((tmp_path / "ds" / ".staging").glob("*"))
    assert _state(tmp_path / "ds") == before


def _session(sid: int) -> list[int]:
    """Pids of the live processes in session `sid` (the ingest and everything it started)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid and not _is_zombie(entry):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _is_zombie(entry: Path) -> bool:
    try:
        return (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.slow
def test_killing_the_ingest_process_alone_leaves_no_worker_behind(tmp_path: Path) -> None:
    _fleet(tmp_path / "in", 60, 8)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "ingest", str(tmp_path / "in"), "--out", str(tmp_path / "ds"), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while len(_session(proc.pid)) < 4 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the ingest, its forkserver, two workers (and a resource tracker)
    assert proc.poll() is None, "the ingest ended before its pool was killed: make the input larger"
    started = len(_session(proc.pid))
    proc.kill()  # SIGKILL to the ingest alone, as the OOM killer or a scheduler would
    proc.wait()
    deadline = time.monotonic() + 5
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _session(proc.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{len(left)} of {started} processes still alive 5 s after the ingest was killed"


# Runs `tracekit ingest` and, while the pool's forkserver starts, has SIGINT delivered to another
# thread of the process (the kernel hands a process's signal to any thread not blocking it: DuckDB's
# threads, a pool's), or to the forkserver itself while it is still importing its modules.
_CTRL_C_AS_THE_POOL_STARTS = textwrap.dedent(
    """
    import os, signal, sys, threading
    from multiprocessing import forkserver
    from tracekit.__main__ import main

    start = forkserver.ForkServer.ensure_running
    to = sys.argv[1]

    def ctrl_c_to_another_thread():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # as a library's thread may
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    def ensure_running(self):
        first = self._forkserver_pid is None
        start(self)
        if first and to == "thread":
            helper = threading.Thread(target=ctrl_c_to_another_thread)
            helper.start()
            helper.join()
        elif first:
            os.kill(self._forkserver_pid, signal.SIGINT)  # it has just been started: still importing

    if __name__ == "__main__":
        forkserver.ensure_running = lambda: ensure_running(forkserver._forkserver)
        sys.argv = ["tracekit", *sys.argv[2:]]
        main()
    """
)


@pytest.mark.parametrize("to", ["thread", "forkserver"])
def test_a_ctrl_c_as_the_pool_starts_is_neither_lost_nor_a_traceback(tmp_path: Path, to: str) -> None:
    """SIGINT was ignored in the whole process while the forkserver started: one the kernel handed to
    another thread then was lost, and the run went on to the end."""
    _fleet(tmp_path / "in", 4, 4)
    (tmp_path / "ctrl_c.py").write_text(_CTRL_C_AS_THE_POOL_STARTS)
    done = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "ctrl_c.py"),
            to,
            "ingest",
            str(tmp_path / "in"),
            "--out",
            str(tmp_path / "ds"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert "Traceback" not in done.stderr, done.stderr
    if to == "thread":
        assert (done.returncode, done.stderr) == (130, "interrupted, dataset unchanged\n"), done.stderr
        assert not (tmp_path / "ds" / "tracekit.duckdb").exists()
    else:  # the forkserver alone was sent it: deaf from birth, it serves the run to the end
        assert done.returncode == 0, done.stderr
