"""tracekit: what distributed training sends over the wire, fleet-wide.

    import tracekit
    tracekit.ingest(["traces/"], "my.dataset")
    with tracekit.open("my.dataset") as ds:
        ds.frame("collectives")

Attributes are imported on first use so that `import tracekit` (and the CLI) start fast.
"""

from __future__ import annotations

from typing import Any

from tracekit._version import __version__

__all__ = ["open", "ingest", "parse_file", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "open":
        from tracekit.api import open

        return open
    if name == "ingest":
        from tracekit.ingest import ingest

        return ingest
    if name == "parse_file":
        from tracekit.parse import parse_file

        return parse_file
    raise AttributeError(name)
