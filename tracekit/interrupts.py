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
  alone handles it and stops the workers itself. Nothing here ignores SIGINT in this process: the
  kernel may hand it to any of its threads, and an ignored one is lost.

A command of the CLI (one process, one command) runs under `for_command`: SIGINT raises
KeyboardInterrupt as Python's own handler does, whatever the command is doing, and is remembered,
because a library may turn it into an error of its own (DuckDB's `RuntimeError: Query interrupted`):
an error after a Ctrl-C is the Ctrl-C. DuckDB statements of connections handed to `watch` are
interrupted at once; `command_over` makes later Ctrl-Cs (the exit code is decided) do nothing.

Signal handlers can only be set from the main thread: elsewhere these do nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import weakref
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


class _Command:
    """Ctrl-C during the command this process runs (`for_command`)."""

    arrived = False
    over = False
    connections: weakref.WeakSet[Any] = weakref.WeakSet()


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
        _Command.arrived = True
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
    """SIGINT waits until the block ends, then is delivered.

    Blocked in this thread, and held back by a handler that only notes it: the kernel hands a
    process's signal to any thread that does not block it (a pool's, a library's), and Python then
    runs its handler in this one all the same."""
    if not _main_thread():
        yield
        return
    came: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        came.append(signum)
        _Command.arrived = True

    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)  # one pending here is noted now
        signal.signal(signal.SIGINT, previous)
        if came and callable(previous):
            previous(signal.SIGINT, None)


@contextmanager
def interrupting(con: Interruptible) -> Iterator[None]:
    """SIGINT calls `con.interrupt()` at once, from a thread woken through Python's wakeup fd."""
    if not _main_thread() or not _handled():
        yield
        return
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    watcher = threading.Thread(
        target=_call_on_sigint, args=(read, previous, [con]), name="tracekit-sigint", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous)
        os.close(write)
        watcher.join()
        os.close(read)


def _call_on_sigint(read: int, previous: int, connections: Any) -> None:
    """Until `read` closes: interrupt `connections` at every SIGINT written to the wakeup fd."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # the kernel gives it to the main thread
    while data := os.read(read, 64):
        if signal.SIGINT in data:
            for con in list(connections):
                try:
                    con.interrupt()
                except Exception:  # the statement is already over (its connection closed)
                    pass
        if previous >= 0:
            try:
                os.write(previous, data)  # whoever watched the wakeup fd before still hears it
            except OSError:
                pass


def for_command() -> None:
    """Handle SIGINT for the rest of this process, which runs one command (see the module docstring)."""
    if not _main_thread() or not _handled():
        return

    def interrupted(signum: int, frame: Any) -> None:
        if not _Command.over:
            _Command.arrived = True
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    read, write = os.pipe()
    os.set_blocking(write, False)
    previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    args = (read, previous, _Command.connections)
    threading.Thread(target=_call_on_sigint, args=args, name="tracekit-sigint", daemon=True).start()


def arrived() -> bool:
    """Whether a Ctrl-C came during the command (`for_command`), whichever of tracekit's handlers
    took it (an ingest's `noted` too)."""
    return _Command.arrived


def command_over() -> None:
    """The command's outcome is decided: a Ctrl-C from now on changes nothing."""
    _Command.over = True


def watch(con: Interruptible) -> None:
    """Interrupt `con`'s statement at once on Ctrl-C during the command (kept until `con` is gone)."""
    _Command.connections.add(con)


def start_forkserver_ignoring_sigint() -> None:
    """Start multiprocessing's forkserver (and its resource tracker) deaf to SIGINT from birth.

    SIGINT is blocked in this thread while it starts them, and a started process inherits the
    mask: none prints a traceback when Ctrl-C lands while it imports its modules (the forkserver
    then ignores SIGINT, and so do the workers forked from it). Not ignored here meanwhile: the
    kernel would hand the signal to another thread of this process (DuckDB's), and it would be lost;
    `blocked` delivers it right after.
    """
    from multiprocessing import forkserver, resource_tracker

    # The tracker first: its own start blocks SIGINT in this thread, then unblocks it.
    resource_tracker.ensure_running()
    with blocked():
        forkserver.ensure_running()
