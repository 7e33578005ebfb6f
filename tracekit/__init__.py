"""tracekit: what distributed training sends over the wire, fleet-wide.

    import tracekit
    tracekit.ingest(["traces/"], "my.dataset")
    with tracekit.open("my.dataset") as ds:
        ds.frame("collectives")

Attributes are imported on first use so that `import tracekit` (and the CLI) start fast.
"""

# signal's C module, loaded with Python (`signal` itself costs an import of enum); no stubs.
import _signal  # type: ignore[import-not-found]
import os
import sys


def _started_as_the_command() -> bool:
    """This process runs the `tracekit` command (its console script, or `python -m tracekit`)."""
    if os.path.basename(sys.argv[0]) == "tracekit":
        return True
    argv = sys.orig_argv
    return any(a == "-mtracekit" or (a == "-m" and argv[i + 1 : i + 2] == ["tracekit"]) for i, a in enumerate(argv))


def _interrupted_while_starting(signum: int, frame: object) -> None:
    # The command has done nothing yet (no file written, no process started): say so and go.
    os.write(2, b"interrupted\n")
    os._exit(130)


# The first code of tracekit a command runs: a Ctrl-C while the modules load is the command's
# (`interrupted`, exit 130) from here, not a traceback; tracekit.__main__ takes it over.
if _started_as_the_command() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _interrupted_while_starting)

from tracekit._version import __version__  # noqa: E402 - after the Ctrl-C guard

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["open", "ingest", "parse_file", "verify", "repair", "__version__"]


def __getattr__(name: str) -> "Any":
    if name == "open":
        from tracekit.api import open

        return open
    if name in ("verify", "repair"):
        from tracekit import api

        return getattr(api, name)
    if name == "ingest":
        from tracekit.ingest import ingest

        return ingest
    if name == "parse_file":
        from tracekit.parse import parse_file

        return parse_file
    raise AttributeError(name)
