"""PyTorch Flight Recorder dumps: the ring buffer of a rank's last collectives that c10d keeps.

What writes them. `torch._C._distributed_c10d._dump_fr_trace()` (`_dump_nccl_trace` before torch
2.7) returns the pickle, `_dump_fr_trace_json()` (`_dump_nccl_trace_json`) the JSON; a collective
that times out makes every rank write the pickle to `<TORCH_FR_DUMP_TEMP_FILE><rank>` (formerly
TORCH_NCCL_DEBUG_INFO_TEMP_FILE; `/tmp/nccl_trace_rank_`, later `~/.cache/torch/nccl_trace_rank_` and
`comm_lib_trace_rank_`) when TORCH_FR_DUMP_ON_TIMEOUT (TORCH_NCCL_DUMP_ON_TIMEOUT) is set. The buffer
holds TORCH_FR_BUFFER_SIZE (TORCH_NCCL_TRACE_BUFFER_SIZE) entries, 2000 by default from torch 2.10,
when gloo started recording into it too. The dump names no rank: the file name does (PyTorch's own
analyzer reads it from there, torch/distributed/flight_recorder/components/loader.py).

The layout, by `version` (pytorch/pytorch torch/csrc/distributed/c10d/FlightRecorder.hpp and
FlightRecorderDetail.hpp at 2.10; FlightRecorder.hpp at 2.7; NCCLUtils.hpp's NCCLTraceBuffer at 2.3;
the analyzer torch/distributed/flight_recorder/components/{types,utils,builder}.py of torch 2.13):

* top level: `version` ("2.3" ... "2.10"), `pg_config` {group name: {name, desc, ranks: "[0, 1]"}},
  `pg_status` {pg id: last enqueued/started/completed sequence id}, `entries` (left out when a dump
  is asked for without collectives), `nccl_comm_state`; `nccl_version` from 2.7, renamed
  `comm_lib_version` in 2.10. Versions 1.x (torch 2.2) and 2.0-2.2 were NCCL-only and written by the
  same code with fewer keys; every key is read where present, and one a dump lacks is null;
* an entry: `record_id`, `pg_id`, `process_group` (name, desc), `collective_seq_id` (per group, one
  per collective or coalesced group), `p2p_seq_id` (per group, send/recv), `op_id` (per group, every
  operation), `profiling_name` (`nccl:all_reduce`, `nccl:send 1->2` and `nccl:recv 3<-0` in group
  ranks, `gloo:broadcast`, any `<backend>:` from 2.10), `time_created_ns` (wall clock, when the work
  was enqueued), `input_sizes`/`output_sizes` (a shape per tensor), `input_dtypes`/`output_dtypes`
  (c10 ScalarType names), `state` (scheduled | started | completed), `time_discovered_started_ns` and
  `_completed_ns` (when a CPU thread noticed: late by design), `duration_ms` (GPU time, only with
  TORCH_NCCL_ENABLE_TIMING), `retired`, `timeout_ms`, `is_p2p` (2.3), `frames` (the Python stack,
  pickle only), `thread_id`/`thread_name` (2.10);
* JSON: the same keys; `process_group` a list, unknown discovery times 0, no frames.

The rows (`source = 'flight_recorder'`), one per entry whose profiling name is a collective (by the
rulebook, tracekit.parsers.common.names: `nccl:coalesced`, `split`, `new_window` are not):

* comm_type and the element type from the names; op_name the profiling name without its peer
  (`nccl:send`); pg_name the entry's group; group_size from `pg_config`'s ranks of that group;
* in/out elements and bytes summed over the entry's tensors (shape product x dtype size); the
  tensors c10d records are the rank's own buffers, so in_bytes is Chakra's comm_size (the shard of
  an all-gather, the whole input of a reduce-scatter, the message of a send or recv);
* seq = collective_seq_id, the same on every member of the group: rows of one collective match
  across ranks by (pg_name, seq), as PyTorch's analyzer matches them (and the replay and the
  stragglers query do); a send/recv's is its p2p_seq_id, the rank's own count of its point-to-point
  operations in the group (sends and recvs pair by peer and order, in every format);
* peer: the other side of `send a->b` / `recv a<-b`, a group rank, made global by the group's ranks;
* start_us = time_created_ns / 1000: wall-clock µs since the epoch (so the dump's `epoch_offset_us`
  is 0); duration_us from duration_ms, else null (the discovery times say when a thread looked);
* `ops`: every entry, named by its profiling name, typed by its state; `started_at` is the earliest
  entry's creation.

What is not read, and why: `pg_status`, `frames`, `timeout_ms`, `retired`, thread ids (nothing of a
collective's traffic). What gloo writes, as torch 2.13.0 does (sample_traces/flight_recorder): no
entry for send/recv (their op_ids are skipped: a warning counts them), a reduce-scatter as the
all-reduce of the whole buffer that gloo runs (`gloo:all_reduce`, its input the full tensor), every
state `scheduled` and no discovery times, and `pg_config` holding one entry named '' (the ranks of
whichever group the rank made last, recorded before it was named): not read. The default group
('0', 'default_pg') named by entries is listed with no ranks, PyTorch's way of saying the world.

Bounds: at most MAX_ENTRIES entries are read (the buffer's default is 2000), lists of tensors,
dimensions and ranks at most 2**20 long, and the values visited at most WORK_PER_BYTE per byte of
the file (a pickle can refer to one list a million times in a few bytes each). Values out of bounds
are null with a warning, an entry that is not an object is skipped with one, and anything the
decoder refuses (tracekit.parsers.flight_recorder.decode) is a one-line error.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tracekit.parsers.base import BatchSink, Source, TraceError, TraceMeta
from tracekit.parsers.common.finish import finished
from tracekit.parsers.common.rows import CollectiveBuffer
from tracekit.parsers.common.values import Checker, excerpt
from tracekit.parsers.flight_recorder.decode import read_document
from tracekit.parsers.flight_recorder.rows import MAX_ENTRIES, WORK_PER_BYTE, Entries, Work, read_groups

FORMAT = "flight_recorder"
# The newest layout this reader knows (see the module docstring).
NEWEST = (2, 10)
_TOP_KEYS = ("version", "entries", "pg_config", "pg_status")

__all__ = ["FORMAT", "MAX_ENTRIES", "WORK_PER_BYTE", "parse"]


def parse(source: Source, sink: BatchSink) -> TraceMeta:
    """Read one dump: an ops row per entry, a collectives row per entry that is a collective."""
    meta = TraceMeta(format=FORMAT, epoch_offset_us=0.0)
    checker = Checker(meta)
    document, size = read_document(source)
    if not isinstance(document, dict) or not any(key in document for key in _TOP_KEYS):
        found = type(document).__name__ if not isinstance(document, dict) else f"keys {excerpt(list(document))}"
        raise TraceError(f"not a Flight Recorder dump: no version, entries or pg_config ({found})", "top level")
    meta.schema_version = _version(document.get("version"), meta)
    work = Work(size)
    groups = read_groups(document.get("pg_config"), checker, work)
    entries = document.get("entries")
    if entries is None:
        entries = []
    elif not isinstance(entries, list):
        raise TraceError(f"entries is not a list ({excerpt(entries)})", "entries")
    reader = Entries(groups, checker, work)
    buffer = CollectiveBuffer(sink)
    for index, row in reader.rows(entries):
        buffer.append(finished(row, checker, f"entries[{index}]"))
    buffer.flush()
    reader.write_ops(sink)
    reader.note_gaps()
    meta.process_groups = reader.groups
    meta.world_size = reader.world_size()
    meta.node_count = reader.count
    meta.started_at = _wall_clock(reader.first_us)
    return meta


def _wall_clock(us: float | None) -> datetime | None:
    if us is None:
        return None
    try:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)
    except (OverflowError, ValueError):
        return None  # beyond what datetime holds (year 1 to 9999)


def _version(raw: object, meta: TraceMeta) -> str | None:
    """The dump's `version`, noted when it is missing, unreadable or newer than NEWEST."""
    if raw is None:
        meta.warn(f"no version: read as the layout of {NEWEST[0]}.{NEWEST[1]}", "version")
        return None
    text = raw if isinstance(raw, str) else None
    parts = text.split(".") if text is not None and len(text) <= 16 else []
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        meta.warn(f"version {excerpt(raw)} is not major.minor: read as {NEWEST[0]}.{NEWEST[1]}", "version")
        return None if text is None else text[:32]
    if (int(parts[0]), int(parts[1])) > NEWEST:
        meta.warn(f"version {text} is newer than {NEWEST[0]}.{NEWEST[1]}: read as that layout", "version")
    return text
