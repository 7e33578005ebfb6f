"""The errors tracekit reports to users: each carries a one-line message and the CLI's exit code.

The CLI catches `TracekitError` (never bare ValueError or OSError), prints `error: <message>`
and exits with `exit_code`. A file that cannot be parsed is not one of these: it is a
`tracekit.parsers.base.TraceError`, recorded as an error row while the rest of the run goes on.
"""

from __future__ import annotations


class TracekitError(Exception):
    """An error the user can act on, reported in one line."""

    exit_code = 3


class InputError(TracekitError, ValueError):
    """An argument, manifest or profile the command cannot start with."""


class DatasetError(TracekitError):
    """The dataset folder cannot be used (not writable, locked, not a folder, not a dataset)."""
