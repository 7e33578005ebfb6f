"""Chakra ET as `chakra_jsonizer` writes it (protobuf-JSON objects back to back); read by
tracekit.parsers.chakra.jsonizer."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracekit.parsers.formats import Parser

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, Source, TraceMeta

# The first key of the first object is one chakra_jsonizer writes (GlobalMetadata's or a Node's).
_FIRST_KEYS = re.compile(
    rb'^\{\s*"(version|attr|id|name|type|ctrlDeps|dataDeps|startTimeMicros|durationMicros|inputs|outputs)"\s*:'
)


def sniff(head: bytes) -> bool:
    return _FIRST_KEYS.match(head.lstrip()) is not None


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    from tracekit.parsers.chakra import jsonizer

    return jsonizer.parse(source, sink)


# After Kineto (whose keys anywhere in the head decide); before PyTorch ET, so that a head whose
# first key is one of these is Chakra JSON whatever keys follow.
PARSER = Parser(
    name="chakra_json",
    summary="Chakra ET as chakra_jsonizer writes it: protobuf-JSON objects back to back",
    content="json",
    priority=20,
    sniff=sniff,
    suffixes=(".json", ".json.gz"),
    role="graph",
    parse=parse,
)
