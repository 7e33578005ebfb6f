"""PyTorch execution traces (ExecutionTraceObserver JSON), a rank's host side; read by
tracekit.parsers.pytorch_et."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracekit.parsers.formats import Parser

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, Source, TraceMeta

_KEYS = re.compile(rb'"(schema|nodes)"\s*:')


def sniff(head: bytes) -> bool:
    return _KEYS.search(head) is not None


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    from tracekit.parsers import pytorch_et

    return pytorch_et.parse(source, sink)


# Last of the JSON formats: "schema" and "nodes" are common words, asked only when no other rule decides.
PARSER = Parser(
    name="pytorch_et",
    summary="PyTorch execution traces (ExecutionTraceObserver JSON): a rank's host side",
    content="json",
    priority=30,
    sniff=sniff,
    suffixes=(".json", ".json.gz"),
    role="host",
    parse=parse,
)
