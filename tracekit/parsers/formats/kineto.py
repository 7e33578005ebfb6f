"""Kineto (PyTorch profiler) Chrome-trace JSON, a rank's device side; read by tracekit.parsers.kineto."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracekit.parsers.formats import Parser

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, Source, TraceMeta

_KEYS = re.compile(rb'"(traceEvents|schemaVersion|deviceProperties|distributedInfo)"\s*:')


def sniff(head: bytes) -> bool:
    return _KEYS.search(head) is not None


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    from tracekit.parsers import kineto

    return kineto.parse(source, sink)


# First of the JSON formats: its keys, anywhere in the head, are written by no other producer.
PARSER = Parser(
    name="kineto",
    summary="Kineto (PyTorch profiler) Chrome-trace JSON: a rank's device side",
    content="json",
    priority=10,
    sniff=sniff,
    suffixes=(".json", ".json.gz"),
    role="device",
    parse=parse,
)
