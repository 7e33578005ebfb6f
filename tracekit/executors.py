"""Where ingest's work runs: a standard `concurrent.futures.Executor`, chosen by name.

- `local` (the default): a process pool on this machine. Its workers ignore Ctrl-C (the ingest
  stops them itself) and exit as soon as the ingest process is gone, whatever killed it.
- `dask-local`: a Dask LocalCluster of `workers` single-threaded worker processes on this machine
  (`pip install 'tracekit[dask]'`); mostly for trying the distributed path.
- `dask://HOST:PORT` (or `tcp://HOST:PORT`, `tls://HOST:PORT`): the Dask scheduler at that
  address, whose workers (on any number of machines) must see the input files and the dataset's
  staging folder at the same paths as this machine.

`open_executor` yields the executor and how many tasks it runs at once; on an exception (Ctrl-C
included) it stops the work still queued before the exception goes on. A task handed out through
`Slots.submit` that fails because a worker died is told apart by `Slots.death`: the local pool is
started afresh after a death (a ProcessPoolExecutor is unusable once one of its workers is gone) and
names the task the dead worker ran and the signal that killed it; Dask names a task whose workers
died as often as its scheduler allows (KilledWorker).

`worker_context` is the multiprocessing context of tracekit's own process pools (this one and
`tracekit generate`'s): forkserver (safe when the caller has threads, as DuckDB and notebooks do),
and processes that never import the caller's main module. multiprocessing would run it again in
the forkserver and in every worker (as `__mp_main__`), so a script calling `tracekit.ingest` without
an `if __name__ == "__main__":` guard ran itself three times and broke its own pool; tracekit's
workers run tracekit's functions only, so they have no use for it.
"""

from __future__ import annotations

import functools
import logging
import os
import select
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import context as mp_context
from multiprocessing import popen_forkserver, spawn
from typing import Any, TypeVar

from tracekit import interrupts
from tracekit.errors import InputError

LOCAL = "local"
DASK_LOCAL = "dask-local"
_DASK_SCHEMES = ("dask://", "tcp://", "tls://")
# How often a worker looks whether the ingest process is still there, where the kernel has no pidfd.
_POLL_SECONDS = 0.5
# How long a worker told to stop (SIGTERM) has before it is killed.
_TERMINATE_SECONDS = 5.0
# How long a task Dask gave up on (KilledWorker) waits for its worker's nanny to say how it died.
_EXIT_NOTE_SECONDS = 2.0
_LOCAL_CLUSTER_CONFIG = {"distributed.deploy.lost-worker-timeout": "3650d"}
T = TypeVar("T")


@dataclass(frozen=True)
class Death:
    """A task lost because a worker died. `how` says how the worker that ran it died (`signal 9
    (SIGKILL)`); None when it was only lost with the other tasks of a pool that another task's
    death broke: it is not to blame, and runs again as it was."""

    how: str | None


@dataclass
class Slots:
    """An executor and the number of tasks it runs at once. `submit` hands it a task; `death` says
    whether a task that failed was lost to a worker's death (else its exception is the task's own)."""

    executor: Executor
    slots: int
    # Whether `death` blames only the task a dead worker ran. Dask's KilledWorker also falls on tasks
    # only queued on workers that died (each death counts against every task the worker held), so
    # tasks run again after a death there run one at a time.
    blames_exactly = False

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        return self.executor.submit(fn, *args)

    def death(self, future: Future[Any]) -> Death | None:
        return None


def describe_choices() -> str:
    return f"{LOCAL} (a process pool, the default), {DASK_LOCAL}, or dask://HOST:PORT"


def check(spec: str | None) -> str:
    """The executor name `spec` stands for (None: local); InputError for names it cannot be."""
    name = (spec or LOCAL).strip()
    if name in (LOCAL, DASK_LOCAL) or (name.startswith(_DASK_SCHEMES) and len(name.split("://", 1)[1]) > 0):
        return name
    raise InputError(f"--executor {spec!r}: expected {describe_choices()}")


def is_local(spec: str | None) -> bool:
    return check(spec) == LOCAL


@contextmanager
def open_executor(spec: str | None, workers: int) -> Iterator[Slots]:
    """The executor `spec` names (see the module docstring), with `workers` processes where it starts them."""
    name = check(spec)
    if name == LOCAL:
        with _process_pool(workers) as slots:
            yield slots
    else:
        with _dask(name, workers) as slots:
            yield slots


def worker_context() -> mp_context.BaseContext:
    """The context tracekit's pools start their processes in (see the module docstring); its
    forkserver is running, deaf to Ctrl-C, once this returns."""
    with _caller_main_hidden():
        interrupts.start_forkserver_ignoring_sigint()
    return _CONTEXT


class _WorkerPopen(popen_forkserver.Popen):
    def _launch(self, process_obj: Any) -> None:
        with _caller_main_hidden():
            super()._launch(process_obj)  # type: ignore[misc]


class _WorkerProcess(mp_context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _WorkerPopen(process_obj)


class _WorkerContext(mp_context.ForkServerContext):
    Process = _WorkerProcess


_CONTEXT = _WorkerContext()


_hiding = threading.local()
# What multiprocessing's preparation data name the main module by (main_path: what the forkserver's
# own start looks for).
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path", "main_path")


@contextmanager
def _caller_main_hidden() -> Iterator[None]:
    """What multiprocessing sends a process it starts in this thread meanwhile says nothing of the
    main module, so the process does not import (run) it."""
    if not getattr(spawn.get_preparation_data, "hides_main", False):
        spawn.get_preparation_data = _without_main(spawn.get_preparation_data)
    _hiding.on = True
    try:
        yield
    finally:
        _hiding.on = False


def _without_main(prepare: Any) -> Any:
    @functools.wraps(prepare)
    def preparation_data(name: str) -> dict[str, Any]:
        data = prepare(name)
        if getattr(_hiding, "on", False):
            for key in _MAIN_KEYS:
                data.pop(key, None)
        return data

    preparation_data.hides_main = True  # type: ignore[attr-defined]
    return preparation_data


@contextmanager
def _process_pool(workers: int) -> Iterator[Slots]:
    pool = _LocalPool(workers)
    try:
        yield pool
    except BaseException:
        # Interrupted or failed: stop the workers now, so none writes into a staging folder that is
        # about to be removed.
        with interrupts.deferred():
            _stop_workers(pool.executor)
            pool.executor.shutdown(wait=True, cancel_futures=True)
        raise
    pool.executor.shutdown(wait=True)


# A lost task whose pool no worker's exit explains (a worker stopped by SIGTERM from outside):
# every task lost with it is suspect.
_UNEXPLAINED = "cause unknown (a process of the pool ended)"


class _LocalPool(Slots):
    """The local process pool, started afresh when a worker dies.

    One dead worker breaks a ProcessPoolExecutor: every task in flight fails with BrokenProcessPool
    and the pool stops the other workers (SIGTERM). Each worker notes the task it runs in shared
    memory (`_Running`), which outlives it; once the broken pool is shut down, the exit codes of its
    processes say which worker died on its own, so which task was running there and how it died.
    """

    blames_exactly = True  # each worker notes the task it runs (_Running)

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.generation = 0  # pools started so far, less one
        self.tokens = 0
        # Each task handed out: (the pool it went to, its token), as long as someone holds its future.
        self.placed: weakref.WeakKeyDictionary[Future[Any], tuple[int, int]] = weakref.WeakKeyDictionary()
        # By broken pool: the tasks whose workers died and how; None when no exit explains the break.
        self.culprits: dict[int, dict[int, str] | None] = {}
        super().__init__(*self._start())

    def _start(self) -> tuple[Executor, int]:
        from concurrent.futures import ProcessPoolExecutor

        self.running = _Running(_CONTEXT, self.workers)
        pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=worker_context(),
            initializer=start_worker,
            initargs=(os.getpid(), self.running),
        )
        return pool, self.workers

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T]:
        from concurrent.futures.process import BrokenProcessPool

        self.tokens += 1
        try:
            future = self.executor.submit(_run_task, self.tokens, fn, *args)
        except BrokenProcessPool:  # a worker died since the last task was handed out
            self._restart()
            future = self.executor.submit(_run_task, self.tokens, fn, *args)
        self.placed[future] = (self.generation, self.tokens)
        return future

    def death(self, future: Future[Any]) -> Death | None:
        from concurrent.futures.process import BrokenProcessPool

        exc = future.exception()
        placed = self.placed.get(future)
        # A broken pool with a cause could not read a result: no worker died.
        if not isinstance(exc, BrokenProcessPool) or exc.__cause__ is not None or placed is None:
            return None
        generation, token = placed
        if generation == self.generation:
            self._restart()
        culprits = self.culprits[generation]
        return Death(_UNEXPLAINED if culprits is None else culprits.get(token))

    def _restart(self) -> None:
        """The current pool is broken: shut it down, see which workers died and running what, start a fresh one."""
        broken = self.executor
        processes = dict(getattr(broken, "_processes", None) or {})
        broken.shutdown(wait=True)  # its manager thread has stopped every worker and waited for them
        ran = self.running.tasks()
        culprits = {
            ran[pid]: _exit_described(process.exitcode)
            for pid, process in processes.items()
            if process.exitcode not in (None, 0, -signal.SIGTERM) and ran.get(pid)
        }
        self.culprits[self.generation] = culprits or None
        self.generation += 1
        self.executor, _ = self._start()


def _exit_described(exitcode: int) -> str:
    """`signal 9 (SIGKILL)`, `exit status 3`: how a process ended."""
    if exitcode >= 0:
        return f"exit status {exitcode}"
    try:
        return f"signal {-exitcode} ({signal.Signals(-exitcode).name})"
    except ValueError:
        return f"signal {-exitcode}"


class _Running:
    """Which task each worker of a pool runs: a (pid, token) row per worker in shared memory, which
    the pool reads once a worker has died. A worker claims its row as it starts (`claim`, under the
    lock: a worker killed holding it breaks the pool, which stops the others)."""

    def __init__(self, context: mp_context.BaseContext, workers: int) -> None:
        self.table = context.RawArray("q", 2 * workers)
        self.lock = context.Lock()

    def claim(self) -> None:
        """In a worker as it starts: its row, which `_run_task` writes the token of each task into."""
        with self.lock:
            for row in range(0, len(self.table), 2):
                if self.table[row] == 0:
                    self.table[row] = os.getpid()
                    _ROW[:] = [self.table, row + 1]
                    return

    def tasks(self) -> dict[int, int]:
        """The token of the task each worker ran last, by pid."""
        table = self.table
        return {table[row]: table[row + 1] for row in range(0, len(table), 2) if table[row]}


# In a pool worker: the shared table and the index in it of this worker's task (see _Running).
_ROW: list[Any] = []


def _run_task(token: int, fn: Callable[..., T], *args: Any) -> T:
    """A task in a pool worker: noted as this worker's, then run."""
    if _ROW:
        _ROW[0][_ROW[1]] = token
    return fn(*args)


def _stop_workers(pool: Any) -> None:
    """Terminate the pool's workers and wait until they are gone.

    A worker stopped halfway through writing its result leaves half a message in the result pipe,
    and the pool's manager thread would wait for the rest for ever (the shutdown with it). With the
    workers gone, this process holds the pipe's last write end: closing it ends that wait (the pool
    then shuts down as broken, which it is)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(_TERMINATE_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    if writer is not None:
        writer.close()


def start_worker(ingest_pid: int, running: _Running | None = None) -> None:
    """Pool initializer: Ctrl-C is the ingest's to handle, and the worker ends with the ingest;
    `running`: where it notes the task it runs."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(ingest_pid,), name="tracekit-watch-ingest", daemon=True).start()
    if running is not None:
        running.claim()


def _exit_with(pid: int) -> None:
    """Exit this worker as soon as the process `pid` is gone, whatever killed it.

    A worker left waiting for work that will never come holds the pipes of the task queue and the
    forkserver's liveness pipe, so the forkserver and the resource tracker would stay alive too.
    """
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # already gone, or a kernel without pidfds (before Linux 5.3)
        while _alive(pid):
            time.sleep(_POLL_SECONDS)
    else:
        select.select([fd], [], [])  # readable once the process has exited
    os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def _dask(name: str, workers: int) -> Iterator[Slots]:
    try:
        import distributed
    except ImportError as exc:
        raise InputError(f"--executor {name}: Dask is not installed (pip install 'tracekit[dask]')") from exc
    import dask

    # A LocalCluster drops for good a worker still gone when the timer of its loss fires (15 s later),
    # even one its nanny is starting again after a later death: a few deaths in a row left it no
    # worker at all, and the run waited for ever.
    with dask.config.set(_LOCAL_CLUSTER_CONFIG if name == DASK_LOCAL else {}):
        exits: dict[str, int] | None = None  # how each worker of a LocalCluster ended, by address
        with interrupts.blocked():  # a cluster being started is never left half-started
            if name == DASK_LOCAL:
                exits = {}
                cluster = _local_cluster(distributed, workers, exits)
                client = distributed.Client(cluster, set_as_default=False)
            else:
                cluster = None
                address = "tcp://" + name.split("://", 1)[1] if name.startswith("dask://") else name
                try:
                    client = distributed.Client(address, timeout="30s", set_as_default=False)
                except (OSError, TimeoutError) as exc:
                    raise InputError(f"--executor {name}: cannot reach the Dask scheduler ({exc})") from exc
        try:
            slots = max(1, sum(client.nthreads().values()))
            executor = client.get_executor(pure=False)
            try:
                yield _DaskSlots(executor, slots, exits)
            except BaseException:
                with interrupts.deferred():
                    executor.shutdown(wait=False)
                raise
        finally:
            with interrupts.deferred():
                client.close()
                if cluster is not None:
                    cluster.close()


class _DaskSlots(Slots):
    """A Dask client's executor. Its scheduler runs a task whose worker died on another worker, up to
    `distributed.scheduler.allowed-failures` times (3 by default), then fails it with KilledWorker:
    that task is the one lost. How its last worker died is known where this process runs the workers'
    nannies (dask-local): `exits`, by worker address (None: elsewhere)."""

    def __init__(self, executor: Executor, slots: int, exits: dict[str, int] | None) -> None:
        super().__init__(executor, slots)
        self.exits = exits

    def death(self, future: Future[Any]) -> Death | None:
        from distributed.scheduler import KilledWorker

        exc = future.exception()
        if not isinstance(exc, KilledWorker):
            return None
        address, exits = exc.last_worker.address, self.exits if self.exits is not None else {}
        deadline = time.monotonic() + (_EXIT_NOTE_SECONDS if self.exits is not None else 0)
        while address not in exits and time.monotonic() < deadline:
            time.sleep(0.05)  # the scheduler may hear of the death before the nanny
        how = _exit_described(exits[address]) if address in exits else "lost by Dask"
        return Death(f"{how}, the last of {exc.allowed_failures + 1} Dask workers that died running it")


def _local_cluster(distributed: Any, workers: int, exits: dict[str, int]) -> Any:
    """A LocalCluster whose worker processes ignore Ctrl-C from birth (the ingest stops them), and
    whose nannies note in `exits` how each worker process ended."""

    class Nanny(distributed.Nanny):
        async def _on_worker_exit(self, exitcode: int) -> None:
            if self.worker_address is not None:
                exits[self.worker_address] = exitcode
            await super()._on_worker_exit(exitcode)

    main = threading.current_thread() is threading.main_thread()
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        return distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            # Its scheduler's own errors about a dead worker (`Couldn't gather keys`) are the run's
            # to report, in one line per file.
            silence_logs=logging.CRITICAL,
            worker_class=Nanny,
        )
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
