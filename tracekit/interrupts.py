"""Ctrl-C (SIGINT) during an ingest: it stops the run at once, and never splits what must be whole.

A run interrupted before its commit leaves the dataset as it was and removes its staging folder; one
interrupted after the commit point finishes. SIGINT reaches the whole foreground process group, and
several libraries react to it on their own (DuckDB, polars raise their own errors or
KeyboardInterrupt, and Python's handler may still run afterwards), so:

- `noted` records that SIGINT arrived, whoever turned it into an exception, and raises
  KeyboardInterrupt unless an exception is already on its way (the run is stopping: raising again
  would break off its clean-up); the run checks `arrived()` between files and before its commit;
- `deferred` keeps SIGINT from raising inside a block that must finish (the commit's renames, the
  clean-up after an interrupt);
- `blocked` holds SIGINT back (it is delivered when the block ends) while a worker process starts;
- `interrupting(con)` stops a DuckDB statement as soon as SIGINT arrives (DuckDB's Python client
  looks for signals only between its tasks, which a long statement may not reach for minutes);
- `start_forkserver_ignoring_sigint` starts the pool's helper processes deaf to SIGINT: the parent
  alone handles it and stops the workers itself.

Signal handlers can only be set from the main thread: elsewhere these do nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Interruptible(Protocol):
    def interrupt(self) -> None: ...


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _handled() -> bool:
    """SIGINT raises in this process (not ignored, as in jobs started in the background)."""
    return callable(signal.getsignal(signal.SIGINT))


@contextmanager
def noted() -> Iterator[Callable[[], bool]]:
    """Yields `arrived()`: whether SIGINT arrived in the block (see the module docstring)."""
    arrived = False
    if not _main_thread() or not _handled():
        yield lambda: arrived
        return

    def note(signum: int, frame: Any) -> None:
        nonlocal arrived
        first = not arrived
        arrived = True
        if first and sys.exc_info()[1] is None:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield lambda: arrived
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def deferred() -> Iterator[None]:
    """SIGINT does not raise in the block (the block was started by, or outlives, an interrupt)."""
    if not _main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def blocked() -> Iterator[None]:
    """SIGINT waits until the block ends, then is delivered."""
    if not _main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def interrupting(con: Interruptible) -> Iterator[None]:
    """SIGINT calls `con.interrupt()` at once, from a thread woken through Python's wakeup fd."""
    if not _main_thread() or not _handled():
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)

    def watch() -> None:
        while data := os.read(read, 64):
            if signal.SIGINT in data:
                try:
                    con.interrupt()
                except Exception:  # the statement is already over (its connection closed)
                    pass
            if previous >= 0:
                try:
                    os.write(previous, data)  # whoever watched the wakeup fd before still hears it
                except OSError:
                    pass

    watcher = threading.Thread(target=watch, name="tracekit-sigint", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write)
        watcher.join()
        os.close(read)


def start_forkserver_ignoring_sigint() -> None:
    """Start multiprocessing's forkserver and resource tracker with SIGINT ignored from birth.

    They (and the workers forked from the forkserver) inherit the ignored disposition, so none
    prints a traceback when Ctrl-C lands while it imports its modules. SIGINT is blocked meanwhile,
    so one arriving then is not lost: it reaches this process right after.
    """
    from multiprocessing import forkserver

    if not _main_thread():
        forkserver.ensure_running()
        return
    with blocked():
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGINT, handler)
