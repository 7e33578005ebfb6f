"""One ingest, every executor: the local process pool and a Dask LocalCluster write the same dataset,
row for row, as parsing in the ingest process itself (tests skip Dask where it is not installed)."""

from __future__ import annotations

import gzip
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from tests.builders import et_bytes, write_et_job
from tests.conftest import PUBLIC_TRACES, SAMPLE_TRACES
from tracekit.errors import InputError
from tracekit.executors import check, open_executor
from tracekit.ingest import ingest

pytestmark = pytest.mark.slow  # commands and fleets end to end: make check runs them, make fast does not

HAS_DASK = importlib.util.find_spec("distributed") is not None
EXECUTORS = [
    pytest.param("local", id="process-pool"),
    pytest.param(
        "dask-local",
        id="dask-local",
        marks=[pytest.mark.slow, pytest.mark.skipif(not HAS_DASK, reason="dask[distributed] is not installed")],
    ),
]
# Columns that name the run or when it ran, which differ between any two runs.
VOLATILE = {"run_id", "ingested_at"}
TABLES = ("traces", "jobs", "process_groups", "collectives", "ops")


def _inputs(root: Path, samples: Path, public: Path | None) -> list[Path]:
    """Small jobs of every format, an archive, a file that fails, and the real traces when present."""
    for j in range(3):
        write_et_job(root / "fleet" / f"job{j}", list(range(4)), [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])
    (root / "fleet" / "job0" / "job0.9.et").write_bytes(et_bytes([("ALL_REDUCE", 64)])[:-3])  # truncated
    (root / "fleet" / "gz").mkdir()
    (root / "fleet" / "gz" / "gz.0.et.gz").write_bytes(gzip.compress(et_bytes([("BROADCAST", 8)])))
    paths = [root / "fleet", samples / "captured", samples / "chakra"]
    return paths + ([public] if public is not None else [])


def _rows(dataset: Path) -> dict[str, list[tuple[object, ...]]]:
    with tracekit.open(dataset) as ds:
        out = {}
        for table in TABLES:
            columns = [c for c in ds.table(table).columns if c not in VOLATILE]
            quoted = ", ".join(f'"{c}"' for c in columns)
            out[table] = ds.sql(f"select {quoted} from {table} order by all").fetchall()
        return out


@pytest.fixture(scope="module")
def inline_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    root = tmp_path_factory.mktemp("executors")
    paths = _inputs(root, SAMPLE_TRACES, PUBLIC_TRACES if PUBLIC_TRACES.is_dir() else None)
    report = ingest(paths, root / "inline", workers=1)
    assert report.files_added > 0 and len(report.errors) == 1
    return paths, root / "inline"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_every_executor_writes_the_same_dataset_row_for_row(
    inline_dataset: tuple[list[Path], Path], tmp_path: Path, executor: str
) -> None:
    paths, inline = inline_dataset
    report = ingest(paths, tmp_path / "ds", workers=2, executor=executor)
    assert report.parse_cpu_seconds > 0
    expected, got = _rows(inline), _rows(tmp_path / "ds")
    for table in TABLES:
        assert got[table] == expected[table], f"{table} differs under {executor}"
    again = ingest(paths, tmp_path / "ds", workers=2, executor=executor)
    assert again.files_added == 1 and again.files_skipped == report.files_added - 1  # the failed file is read again
    assert _rows(tmp_path / "ds") == got


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_batch_runs_on_the_executor_and_its_figures_come_back(executor: str) -> None:
    with open_executor(executor, 2) as run:
        assert run.slots == 2
        assert run.executor.submit(pow, 2, 10).result(timeout=60) == 1024


def test_executor_names_are_checked_before_anything_runs(tmp_path: Path) -> None:
    assert check(None) == "local" and check("dask://sched:8786") == "dask://sched:8786"
    write_et_job(tmp_path / "in" / "j", [0], [("ALL_REDUCE", 8)])
    with pytest.raises(InputError, match="--executor 'spark': expected local"):
        ingest([tmp_path / "in"], tmp_path / "ds", executor="spark")
    assert not (tmp_path / "ds").exists()


@pytest.mark.skipif(HAS_DASK, reason="checks the message shown where Dask is not installed")
def test_without_dask_the_dask_executor_says_how_to_install_it(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "j", [0], [("ALL_REDUCE", 8)])
    with pytest.raises(InputError, match=r"pip install 'tracekit\[dask\]'"):
        ingest([tmp_path / "in"], tmp_path / "ds", executor="dask-local")
    shutil.rmtree(tmp_path / "ds", ignore_errors=True)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.skipif(not HAS_DASK, reason="dask[distributed] is not installed")
def test_the_cli_ingests_on_a_dask_scheduler_started_as_the_readme_says(
    inline_dataset: tuple[list[Path], Path], tmp_path: Path
) -> None:
    """`dask scheduler` and `dask worker` started as on a cluster; `tracekit ingest --executor dask://...`."""
    import subprocess
    import sys
    import time

    from tests.conftest import run_tracekit

    paths, inline = inline_dataset
    port = _free_port()
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    scheduler = subprocess.Popen(
        [*dask, "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_worker", f"tcp://127.0.0.1:{port}"]
        + ["--nworkers", "2", "--nthreads", "1", "--no-dashboard"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        import distributed

        with distributed.Client(f"tcp://127.0.0.1:{port}", timeout="60s") as client:
            deadline = time.time() + 60
            while len(client.nthreads()) < 2 and time.time() < deadline:
                time.sleep(0.2)
        done = run_tracekit("ingest", *paths, "--out", tmp_path / "ds", "--executor", f"dask://127.0.0.1:{port}", "-q")
    finally:
        worker.terminate()
        scheduler.terminate()
        worker.wait(timeout=60)
        scheduler.wait(timeout=60)
    assert done.returncode == 1, done.stderr  # the one truncated file
    assert _rows(tmp_path / "ds") == _rows(inline)


# A script as a notebook user writes one: no `if __name__ == "__main__":` guard.
_UNGUARDED = """
import sys
import tracekit
from tracekit.generate import generate_fleet

print("the script ran", flush=True)
report = tracekit.ingest([sys.argv[1]], sys.argv[2], workers=2)
print(f"{report.files_added} files added", flush=True)
summary = generate_fleet(sys.argv[3], 8, seed=1, profile="sample", workers=2)
print(f"{summary.jobs} jobs generated", flush=True)
"""


def test_a_script_without_a_main_guard_runs_once_and_its_workers_work(tmp_path: Path) -> None:
    """The process pool's workers (and its forkserver) imported the caller's main module, running an
    unguarded script again in each: BrokenProcessPool, 'another ingest is writing this dataset'."""
    for j in range(3):
        write_et_job(tmp_path / "in" / f"job{j}", [0, 1, 2, 3], [("ALL_REDUCE", 1 << 20)] * 4)
    (tmp_path / "script.py").write_text(_UNGUARDED)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "script.py"), str(tmp_path / "in"), str(tmp_path / "ds"), str(tmp_path / "f")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["the script ran", "12 files added", "8 jobs generated"], done.stdout
    assert "Traceback" not in done.stderr, done.stderr


_BIG_RESULT = """
from pathlib import Path


def big(marker: str) -> bytes:
    data = b"x" * (512 << 20)
    Path(marker).touch()  # made: the worker is about to write it into the pool's result pipe
    return data
"""

_STOPPED_WHILE_A_WORKER_WRITES = """
import os, sys, time
from tracekit.executors import open_executor
from big_result import big

try:
    with open_executor("local", 1) as run:
        run.executor.submit(big, "made")
        while not os.path.exists("made"):
            time.sleep(0.001)
        time.sleep(0.5)  # it writes 512 MiB into the pipe now
        raise KeyboardInterrupt  # as a Ctrl-C does
except KeyboardInterrupt:
    print("stopped", flush=True)
"""


def test_stopping_the_pool_while_a_worker_writes_its_result_does_not_hang(tmp_path: Path) -> None:
    """A worker stopped halfway through writing its result left half a message in the result pipe,
    and the pool's manager thread waited for the rest for ever: a Ctrl-C that never ended."""
    (tmp_path / "big_result.py").write_text(_BIG_RESULT)
    (tmp_path / "stop.py").write_text(_STOPPED_WHILE_A_WORKER_WRITES)
    try:
        done = subprocess.run([sys.executable, "stop.py"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the pool did not stop within 60 s of the interrupt")
    assert done.returncode == 0 and done.stdout == "stopped\n", done.stderr
    assert "Traceback" not in done.stderr, done.stderr
