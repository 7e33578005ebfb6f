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


# An error or warning about a file is one line of at most MAX_LINE_CHARS characters, whatever the
# file holds (a reason may quote a value read from it): the reason at most MAX_MESSAGE_CHARS, the
# place MAX_WHERE_CHARS. Every error and warning text is built by `TraceError`/`describe` below.
MAX_LINE_CHARS = 500
MAX_MESSAGE_CHARS = 300
MAX_WHERE_CHARS = 120
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str, limit: int) -> str:
    """`text` as one printable line of at most `limit` characters, always writable as UTF-8.

    Line breaks, control characters, lone surrogates (from JSON escapes, or undecodable file
    names) and other unprintable characters are escaped as Python writes them (`\\n`, `\\x00`,
    `\\ud800`); a longer text is cut, ending in `…`. Costs O(limit) whatever the length of `text`.
    """
    text = text[: limit + 1]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else _escape(c) for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _escape(char: str) -> str:
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class TraceError(Exception):
    """A file that cannot be read. `where` names the place: a record, a byte offset, a line.

    The message and place are cleaned on the way in (`one_line`), so that no file, however
    hostile, can make an error text that spans lines, runs to megabytes or cannot be written.
    """

    def __init__(self, message: str, where: str | None = None) -> None:
        self.message = one_line(message, MAX_MESSAGE_CHARS)
        super().__init__(self.message)
        self.where = where
        # The file, once known to whoever reports the error to a person (tracekit.parse_file): then
        # str() is the whole line, `file at place: message`.
        self.file: str | None = None

    def __str__(self) -> str:
        return self.message if self.file is None else self.describe(self.file)

    @property
    def where(self) -> str | None:
        return self._where

    @where.setter
    def where(self, value: str | None) -> None:
        self._where = one_line(value, MAX_WHERE_CHARS) if value else value

    def describe(self, display: str) -> str:
        """The one-line reason stored in `traces.error`."""
        return describe(display, self.where, self.message)


class ParserBug(TraceError):
    """A parser failed on a file with an exception of its own instead of a TraceError.

    That is a bug, and tests treat it as one; but a run must not be lost to it, so it is
    recorded like any unreadable file, with a reason that names the parser and the line of code.
    """

    @classmethod
    def of(cls, exc: BaseException, fmt: str | None) -> ParserBug:
        import traceback
        from pathlib import Path

        frames = traceback.extract_tb(exc.__traceback__)
        code = f"; {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        detail = one_line(str(exc), 120)
        parser = f"the {fmt} parser" if fmt else "format detection"
        return cls(f"internal error in {parser} ({type(exc).__name__}: {detail}{code}); please report")


def describe(display: str, where: str | None, message: str) -> str:
    """`file at place: message`, the one-line form of every error and warning about a file."""
    place = f" at {one_line(where, MAX_WHERE_CHARS)}" if where else ""
    line = f"{one_line(display, MAX_LINE_CHARS)}{place}: {one_line(message, MAX_MESSAGE_CHARS)}"
    return one_line(line, MAX_LINE_CHARS)


class OutputError(TracekitError):
    """A file or folder the command was asked to write cannot be written."""

    @classmethod
    def of(cls, exc: OSError, path: object) -> OutputError:
        """`PATH: cannot write (reason)`, naming the file the OS refused (else `path`)."""
        return cls(f"{exc.filename or path}: cannot write ({exc.strerror or exc})")


class Interrupted(KeyboardInterrupt, TracekitError):
    """Ctrl-C (SIGINT) before the run committed: the dataset is as it was before the run.

    Still a KeyboardInterrupt, so code that stops on interrupts (notebooks, scripts) keeps doing so.
    """

    exit_code = 130

    def __init__(self, message: str = "interrupted, dataset unchanged") -> None:
        super().__init__(message)
