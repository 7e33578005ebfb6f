"""Trace formats as a registry: one module per format, each defining `PARSER`.

A `Parser` names its format (the `traces.format` value), says in a line what it is (`summary`),
tells its files from their first bytes (`sniff`, asked in `priority` order among the parsers of the
same `content`: a JSON object, or anything else; a format written both ways names both), lists the
file-name endings of its files (`suffixes`: the ingest looks for files so named; a binary format is
also taken by them when no sniff rule decides) and, for files that often carry none, a pattern of
their names (`names`: PyTorch writes Flight Recorder dumps as `nccl_trace_rank_3`), says which side
of a rank a trace records (`role`) and reads a file (`parse`, and `parse_many` for a reader that
amortises its set-up over many small files).

Adding a format is one new module of this package that defines `PARSER`: format detection
(tracekit.parsers), the ingest's dispatch (tracekit.ingest.worker) and its pairing of a rank's
host and device traces (tracekit.ingest.jobs, tracekit.ingest.identity) read this registry. The
modules stay light (a regular expression, a few byte tests): each imports its reader inside
`parse`, so reading the registry costs no polars, pyarrow or protobuf.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, FilesSink, Source, TraceError, TraceMeta

# What a trace records: the host side of a rank (PyTorch ET: the CPU ops that issue collectives),
# its device side (Kineto: the kernels that run them), a whole execution graph (Chakra), or the log
# the communication library keeps of the rank's collectives whether or not anyone profiles
# (PyTorch's Flight Recorder): a log's collectives that a trace of the same rank also holds are that
# trace's (tracekit.ingest.logs).
Role = Literal["host", "device", "graph", "log"]
# What a sniff rule is asked about: a head that is a JSON object (starts with "{" after
# whitespace), or any other head.
Content = Literal["json", "binary"]

Parse = Callable[["Source", "BatchSink"], "TraceMeta"]
ParseMany = Callable[[Sequence["Source"], "FilesSink"], "list[TraceMeta | TraceError | None]"]


@dataclass(frozen=True)
class Parser:
    name: str  # the `traces.format` value
    summary: str  # one line for people: what the format is
    content: Content | tuple[Content, ...]  # the heads `sniff` is asked about
    priority: int  # lower first, among the parsers of one content: the sniff rules' precedence
    sniff: Callable[[bytes], bool]  # whether the first bytes (decompressed, at most SNIFF_BYTES) are this format's
    suffixes: tuple[str, ...]  # its files' name endings (binary: the tie-break when no sniff rule decides)
    role: Role
    parse: Parse  # reads one file into the sink: see tracekit.parsers.base
    # Reads many files at once (see tracekit.ingest.worker); None outcomes are left to `parse`.
    parse_many: ParseMany | None = None
    # A collective that names no process group runs on every rank of the world (ASTRA-sim's reading
    # of Chakra ET): the ingest fills its group size with the world size.
    ungrouped_is_world: bool = False
    # A regular expression (searched in the file name) for files of the format without one of its
    # `suffixes`: the ingest looks for them too, and a binary head no sniff rule takes is this format.
    names: str | None = None
    # Among the logs of one rank (role "log"), the one of lowest precedence stands: another log's
    # entries recorded while it was, or of no time to place them, are its entries (tracekit.ingest.logs).
    log_precedence: int = 0

    @property
    def contents(self) -> tuple[Content, ...]:
        return self.content if isinstance(self.content, tuple) else (self.content,)

    def names_file(self, name: str) -> bool:
        """Whether a file so named is, by its name alone, one of this format's."""
        return name.endswith(self.suffixes) or (
            self.names is not None and _pattern(self.names).search(name) is not None
        )


@cache
def parsers() -> dict[str, Parser]:
    """Every PARSER defined by a module of this package, by format name, in module order."""
    from tracekit.parsers import formats as package
    from tracekit.registry import discover

    return discover(package, "PARSER", Parser)


def sniff_order(content: Content) -> list[Parser]:
    """The parsers whose sniff rules are asked about heads of `content`, in the order they are asked."""
    return sorted((p for p in parsers().values() if content in p.contents), key=lambda p: (p.priority, p.name))


def names() -> tuple[str, ...]:
    return tuple(parsers())


def role_of(fmt: str | None) -> Role | None:
    """The role of format `fmt`; None for no format or one no parser reads."""
    parser = parsers().get(fmt or "")
    return parser.role if parser is not None else None


def log_precedence(fmt: str | None) -> int:
    """Where format `fmt` stands among the logs of a rank (Parser.log_precedence); last for no format or
    one no parser reads."""
    parser = parsers().get(fmt or "")
    return parser.log_precedence if parser is not None else 1 << 16


def suffixes() -> tuple[str, ...]:
    """Every file-name ending a parser declares, each once."""
    return tuple(dict.fromkeys(suffix for p in parsers().values() for suffix in p.suffixes))


def named_by_pattern(name: str) -> bool:
    """Whether a file so named is a format's by its name pattern (`Parser.names`)."""
    return any(p.names is not None and _pattern(p.names).search(name) for p in parsers().values())


@cache
def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(text)
