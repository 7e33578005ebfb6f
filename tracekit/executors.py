"""Where ingest's work runs: a standard `concurrent.futures.Executor`, chosen by name.

- `local` (the default): a process pool on this machine. Its workers ignore Ctrl-C (the ingest
  stops them itself) and exit as soon as the ingest process is gone, whatever killed it.
- `dask-local`: a Dask LocalCluster of `workers` single-threaded worker processes on this machine
  (`pip install 'tracekit[dask]'`); mostly for trying the distributed path.
- `dask://HOST:PORT` (or `tcp://HOST:PORT`, `tls://HOST:PORT`): the Dask scheduler at that
  address, whose workers (on any number of machines) must see the input files and the dataset's
  staging folder at the same paths as this machine.

`open_executor` yields the executor and how many tasks it runs at once; on an exception (Ctrl-C
included) it stops the work still queued before the exception goes on.

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
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import context as mp_context
from multiprocessing import popen_forkserver, spawn
from typing import Any

from tracekit import interrupts
from tracekit.errors import InputError

LOCAL = "local"
DASK_LOCAL = "dask-local"
_DASK_SCHEMES = ("dask://", "tcp://", "tls://")
# How often a worker looks whether the ingest process is still there, where the kernel has no pidfd.
_POLL_SECONDS = 0.5
# How long a worker told to stop (SIGTERM) has before it is killed.
_TERMINATE_SECONDS = 5.0


@dataclass(frozen=True)
class Slots:
    """An executor and the number of tasks it runs at once."""

    executor: Executor
    slots: int


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
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=worker_context(),
        initializer=start_worker,
        initargs=(os.getpid(),),
    )
    try:
        yield Slots(pool, workers)
    except BaseException:
        # Interrupted or failed: stop the workers now, so none writes into a staging folder that is
        # about to be removed.
        with interrupts.deferred():
            _stop_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


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


def start_worker(ingest_pid: int) -> None:
    """Pool initializer: Ctrl-C is the ingest's to handle, and the worker ends with the ingest."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with, args=(ingest_pid,), name="tracekit-watch-ingest", daemon=True).start()


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
    with interrupts.blocked():  # a cluster being started is never left half-started
        if name == DASK_LOCAL:
            cluster = _local_cluster(distributed, workers)
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
            yield Slots(executor, slots)
        except BaseException:
            with interrupts.deferred():
                executor.shutdown(wait=False)
            raise
    finally:
        with interrupts.deferred():
            client.close()
            if cluster is not None:
                cluster.close()


def _local_cluster(distributed: Any, workers: int) -> Any:
    """A LocalCluster whose worker processes ignore Ctrl-C from birth (the ingest stops them)."""
    import signal

    main = threading.current_thread() is threading.main_thread()
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        return distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        )
    finally:
        if handler is not None:
            signal.signal(signal.SIGINT, handler)
