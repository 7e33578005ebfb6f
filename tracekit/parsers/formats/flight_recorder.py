"""PyTorch Flight Recorder dumps (c10d's ring buffer of a rank's last collectives), pickle or JSON, a
rank's log; read by tracekit.parsers.flight_recorder."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tracekit.parsers.formats import Parser

if TYPE_CHECKING:
    from tracekit.parsers.base import BatchSink, Source, TraceMeta

# The dump's top-level keys (torch/csrc/distributed/c10d/FlightRecorder.hpp, versions 2.3 to 2.10).
_TOP_KEYS = rb"version|entries|pg_config|pg_status|comm_lib_version|nccl_version|nccl_comm_state"
# A pickle (protocol 2 as c10d's pickler writes it, or 3-5 as Python re-saves it) of a dict whose
# first key is one of those: PROTO, an optional FRAME, EMPTY_DICT, an optional memo put, MARK, then
# the key as BINUNICODE, SHORT_BINUNICODE or SHORT_BINSTRING.
_PICKLE_HEAD = re.compile(
    rb"\A\x80[\x02-\x05](?:\x95[\s\S]{8})?\}(?:q[\s\S]|r[\s\S]{4}|\x94)?\((?:X[\s\S]{4}|\x8c[\s\S]|U[\s\S])(?:"
    + _TOP_KEYS
    + rb")"
)
# JSON: a key only Flight Recorder writes, or its version beside its entries or groups.
_JSON_ONLY_KEYS = re.compile(
    rb'"(?:profiling_name|collective_seq_id|p2p_seq_id|pg_status|comm_lib_version|nccl_comm_state|nccl_version)"\s*:'
)
_JSON_VERSION = re.compile(rb'"version"\s*:')
_JSON_BODY = re.compile(rb'"(?:entries|pg_config)"\s*:')


def sniff(head: bytes) -> bool:
    stripped = head.lstrip()
    if stripped[:1] == b"{":
        return _JSON_ONLY_KEYS.search(head) is not None or (
            _JSON_VERSION.search(head) is not None and _JSON_BODY.search(head) is not None
        )
    return _PICKLE_HEAD.match(head) is not None


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    from tracekit.parsers import flight_recorder

    return flight_recorder.parse(source, sink)


# JSON: after Kineto (whose distributedInfo also holds `pg_config` and `nccl_version`), before Chakra
# JSON (whose first key may be `version`). Binary: after Chakra ET, whose varint rule a pickle's first
# bytes never meet (0x80 0x02..0x05 frames a record whose first tag is field 15 or 18).
PARSER = Parser(
    name="flight_recorder",
    summary="PyTorch Flight Recorder dumps (pickle or JSON): the last collectives c10d recorded on a rank",
    content=("binary", "json"),
    priority=15,
    sniff=sniff,
    suffixes=(".pkl", ".pickle"),
    role="log",
    log_precedence=0,  # PyTorch's own groups and sequence ids, which the traces of the rank share
    parse=parse,
    # PyTorch names a dump `<prefix><rank>` with no extension: /tmp/nccl_trace_rank_3,
    # ~/.cache/torch/comm_lib_trace_rank_3 (DebugInfoWriter::getWriter), torchtitan's comm_traces/rank_3.
    names=r"(?:\A|[_.-])rank_?\d{1,7}\Z",
)
