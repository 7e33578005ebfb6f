"""NCCL (and RCCL) INFO logs, `NCCL_DEBUG=INFO`: a process's communicators and, with
`NCCL_DEBUG_SUBSYS=COLL`, every collective it enqueued; read by tracekit.parsers.nccl_collectives."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracekit.parsers.formats import Parser

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, Source, TraceMeta

# A line as NCCL's debug.cc prints it: `host:pid:tid [cudaDev] NCCL INFO ` (WARN lines name a source
# file after the device), at the start of a line or after a launcher's tag (`[rank0]:`, Ray's
# `(RayTrainWorker pid=615, ip=...) `), within the first bytes of the file.
_LINE = re.compile(rb"(?:\A|\n)[^\n]{0,256}?[^\s:\[\]]+:\d{1,10}:\d{1,10} \[\d{1,6}\] NCCL (?:INFO|WARN) ")


def sniff(head: bytes) -> bool:
    found = _LINE.search(head)
    # Text: a protobuf stream or a pickle holding such a string somewhere has zero bytes before it.
    return found is not None and b"\0" not in head[: found.end()]


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    from tracekit.parsers import nccl_collectives

    return nccl_collectives.parse(source, sink)


# Before Chakra ET (10): a text log is told by its line prefix, which no protobuf stream starts with.
PARSER = Parser(
    name="nccl_log",
    summary="NCCL/RCCL INFO logs (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=COLL): a process's collectives and communicators",
    content="binary",
    priority=5,
    sniff=sniff,
    suffixes=(".nccl.log",),
    role="log",
    parse=parse,
    # Logs are named by whoever redirected stderr: any name with `nccl` or `rccl` in it ending .log, .txt or .out.
    names=r"(?i)[nr]ccl[^/]*\.(?:log|txt|out)\Z",
)
