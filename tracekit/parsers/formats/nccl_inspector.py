"""NCCL Inspector JSON lines (NCCL's profiler plugin, `NCCL_INSPECTOR_ENABLE=1`): a process's
collectives and point-to-point operations with their GPU-timed execution; read by
tracekit.parsers.nccl_inspector."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracekit.parsers.formats import Parser

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, Source, TraceMeta

# The first line as inspector_json.cc writes it (compact JSON, one record a line): a record with its
# own context (`{"header":{...},"metadata":{"inspector_output_format_version":...`, v4.0 to v4.3's
# dump_stats marker), or a bare payload of a v4.3 dump whose marker was cut off.
_BARE = re.compile(rb'\s*\{\s*"(?:coll_perf|p2p_perf|proxy_trace)"\s*:\s*\{')
_HEADED = re.compile(rb'\s*\{\s*"header"\s*:\s*\{')
_VERSION = b'"inspector_output_format_version"'
_FIRST_LINE = 1 << 14  # bytes of the head's first line looked at


def sniff(head: bytes) -> bool:
    line = head[:_FIRST_LINE].split(b"\n", 1)[0]
    if _BARE.match(line):
        return True
    return _HEADED.match(line) is not None and _VERSION in line


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    from tracekit.parsers import nccl_inspector

    return nccl_inspector.parse(source, sink)


# Before Kineto (10): a strict test of the first line, which no profiler trace or Chakra JSON passes.
PARSER = Parser(
    name="nccl_inspector",
    summary="NCCL Inspector JSON lines (v4.0-v4.3): a process's collectives with GPU-timed execution per communicator",
    content="json",
    priority=5,
    sniff=sniff,
    suffixes=(".inspector.log", ".inspector.jsonl"),
    role="log",
    log_precedence=1,  # NCCL's communicators, but times (verbose output) and every operation of 8 KiB or more
    parse=parse,
    # inspector.cc names its files `<dump_dir>/<hostname>-pid<pid>.log`.
    names=r"-pid\d{1,10}\.log\Z",
)
