"""The errors tracekit reports: a run-stopping `TracekitError`, or a per-file `TraceError`.

The CLI catches `TracekitError` (never bare ValueError or OSError), prints `error: <message>`
and exits with `exit_code`. A file that cannot be read is not one of these: it is a `TraceError`
(raised by the sources and the parsers), recorded as an error row while the rest of the run goes on.

Exit codes: 2 the command cannot start (bad arguments, manifest or profile; nothing to ingest),
3 the dataset (or an output file) cannot be used, 130 interrupted. (1 is not an error raised here:
it is a run that finished but could not read some of its inputs.)
"""

from __future__ import annotations


class TracekitError(Exception):
    """An error the user can act on, reported in one line."""

    exit_code = 3


class InputError(TracekitError, ValueError):
    """An argument, manifest or profile the command cannot start with; nothing was written."""

    exit_code = 2


class DatasetError(TracekitError):
    """The dataset folder cannot be used (not writable, locked, not a folder, not a dataset)."""

    exit_code = 3


class TraceError(Exception):
    """A file that cannot be read. `where` names the place: a record, a byte offset, a line."""

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def describe(self, display: str) -> str:
        """The one-line reason stored in `traces.error`."""
        return describe(display, self.where, self.message)


def describe(display: str, where: str | None, message: str) -> str:
    """`file at place: message`, the one-line form of every error and warning about a file."""
    place = f" at {where}" if where else ""
    return f"{display}{place}: {message}"


class OutputError(TracekitError):
    """A file or folder the command was asked to write cannot be written."""


class Interrupted(KeyboardInterrupt, TracekitError):
    """Ctrl-C (SIGINT) before the run committed: the dataset is as it was before the run.

    Still a KeyboardInterrupt, so code that stops on interrupts (notebooks, scripts) keeps doing so.
    """

    exit_code = 130

    def __init__(self, message: str = "interrupted, dataset unchanged") -> None:
        super().__init__(message)
