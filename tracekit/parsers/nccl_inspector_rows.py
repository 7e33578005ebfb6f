"""The rows NCCL Inspector records give beside `collectives`: what NCCL ran and measured for an
operation (`observed_collectives`, from coll_perf/p2p_perf) and what one channel's proxy sent to or
received from one peer (`observed_transfers`, from a final proxy_op); read by
tracekit.parsers.nccl_inspector, which knows the file's context (communicator, parent operation)."""

from __future__ import annotations

from typing import Any

from tracekit.parsers.common.rows import CollectiveRow
from tracekit.parsers.common.values import COUNT, INT64, RANK, Bound, Checker

OBSERVED = "observed_transfers"
MEASURED = "observed_collectives"
_MAX_WORD = 64  # characters of an algorithm, protocol or timing source name (NCCL's are below 16)
_CHANNEL_BOUND = Bound(0, 1023)  # NCCL's MAXCHANNELS is 64 (128 on newer parts): room to spare
_STEPS_BOUND = Bound(0, (1 << 31) - 1)  # int32 columns


def measured_row(
    check: Checker, row: CollectiveRow, perf: dict[str, Any], prefix: str, size: int | None, where: str
) -> dict[str, Any]:
    """A coll_perf/p2p_perf record's observed_collectives row (`row`: its collectives row)."""
    return {
        "record_id": row.op_id,
        "pg_name": row.pg_name,
        "comm_type": row.comm_type,
        "op_name": row.op_name,
        "seq": row.seq,
        "group_size": row.group_size,
        "peer": row.peer,
        "msg_bytes": size,
        "algorithm": _word(check, perf.get(f"{prefix}_algo"), f"{prefix}_algo", where),
        "protocol": _word(check, perf.get(f"{prefix}_proto"), f"{prefix}_proto", where),
        "timing_source": _word(check, perf.get(f"{prefix}_timing_source"), f"{prefix}_timing_source", where),
        "duration_us": row.duration_us,
        "algbw_gbs": check.number(perf.get(f"{prefix}_algobw_gbs"), f"{prefix}_algobw_gbs", where),
        "busbw_gbs": check.number(perf.get(f"{prefix}_busbw_gbs"), f"{prefix}_busbw_gbs", where),
    }


def transfer_row(
    check: Checker, record: dict[str, Any], comm_id: str | None, nranks: int | None, largest: int, number: int
) -> dict[str, Any]:
    """A final proxy_op record's observed_transfers row, but its parent operation. `nranks`: its
    communicator's size; `largest`: the largest the file names (a peer of a smaller one is the
    communicator's rank, marked inferred)."""
    where = f"line {number}"
    direction = record.get("direction")
    if direction not in ("send", "recv"):
        if direction is not None:
            check.note("proxy_trace.direction", "is neither send nor recv", direction, where)
        direction = None
    channel = check.integer(record.get("channel_id"), "proxy_trace.channel_id", _CHANNEL_BOUND, where)
    local = check.integer(record.get("peer"), "proxy_trace.peer", RANK, where)
    if local is not None and nranks is not None and local >= nranks:
        check.note("proxy_trace.peer", f"is not below n_ranks {nranks}", local, where)
        local = None
    inferred = ["peer"] if local is not None and (nranks is None or nranks < largest) else []
    trace = record.get("event_trace_ts")
    start = trace.get("proxy_op_start_ts") if isinstance(trace, dict) else None
    return {
        "record_id": number,
        "pg_name": comm_id,
        "proxy_op_seq": check.integer(record.get("proxy_op_sn"), "proxy_trace.proxy_op_sn", INT64, where),
        "channel": channel,
        "peer": local,
        "direction": direction,
        "bytes": check.integer(record.get("trans_size_bytes"), "proxy_trace.trans_size_bytes", COUNT, where),
        "steps": check.integer(record.get("n_steps"), "proxy_trace.n_steps", _STEPS_BOUND, where),
        "steps_completed": check.integer(
            record.get("n_steps_completed"), "proxy_trace.n_steps_completed", _STEPS_BOUND, where
        ),
        "steps_dropped": check.integer(
            record.get("n_steps_dropped"), "proxy_trace.n_steps_dropped", _STEPS_BOUND, where
        ),
        "chunk_bytes": check.integer(record.get("chunk_size_bytes"), "proxy_trace.chunk_size_bytes", COUNT, where),
        "start_us": check.time(start, "proxy_trace.event_trace_ts.proxy_op_start_ts", where),
        "duration_us": check.time(record.get("total_us"), "proxy_trace.total_us", where),
        "inferred": inferred,
    }


def _word(check: Checker, value: Any, field: str, where: str) -> str | None:
    """A short name NCCL writes (RING, SIMPLE, kernel_gpu): a string of at most _MAX_WORD characters."""
    if value is None:
        return None
    if not isinstance(value, str):
        check.note(field, "is not a string", value, where)
        return None
    if len(value) > _MAX_WORD:
        check.note(field, f"is longer than {_MAX_WORD} characters", value, where, "cut")
        return value[:_MAX_WORD]
    return value
