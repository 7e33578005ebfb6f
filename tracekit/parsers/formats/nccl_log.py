"""NCCL (and RCCL) INFO logs, `NCCL_DEBUG=INFO`: a process's communicators and, with
`NCCL_DEBUG_SUBSYS=COLL`, every collective it enqueued; read by tracekit.parsers.nccl_collectives."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.parsers.formats import Parser

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, Source, TraceMeta

# A line as NCCL's debug.cc prints it: `host:pid:tid [cudaDev] NCCL INFO ` (WARN lines name a source
# file after the device), at the start of a line or after a launcher's tag (`[rank0]:`, Ray's
# `(RayTrainWorker pid=615, ip=...) `) of at most _TAG bytes, within the first bytes of the file.
_MARK = b"] NCCL "
_LEVELS = (b"INFO ", b"WARN ")
_TAG = 512
_TRIES = 64  # marks looked at, at most: every binary head is asked, so a sniff must cost little


def sniff(head: bytes) -> bool:
    at = head.find(_MARK)
    for _ in range(_TRIES):
        if at < 0:
            return False
        if _prefixed(head, at):
            # Text: a protobuf stream or a pickle holding such a string somewhere has zero bytes before it.
            return b"\0" not in head[:at]
        at = head.find(_MARK, at + 1)
    return False


def _prefixed(head: bytes, at: int) -> bool:
    """Whether the mark at `at` ends `host:pid:tid [dev` and starts its line's first _TAG bytes (read
    from the mark backwards, in time linear in the line)."""
    if not head.startswith(_LEVELS, at + len(_MARK)):
        return False
    start = head.rfind(b"\n", max(0, at - _TAG), at) + 1
    if start == 0 and at > _TAG:
        return False
    before, bracket, dev = head[start:at].rpartition(b" [")
    if not bracket or not dev.isdigit() or len(dev) > 6:
        return False
    parts = before.rsplit(b" ", 1)[-1].rsplit(b":", 2)
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 10 for p in parts[1:]):
        return False
    return parts[0][-1:] not in (b"", b"[", b"]", b":")


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
    log_precedence=2,  # NCCL's communicators and no times
    parse=parse,
    # Logs are named by whoever redirected stderr: any name with `nccl` or `rccl` in it ending .log, .txt or .out.
    names=r"(?i)[nr]ccl[^/]*\.(?:log|txt|out)\Z",
)
