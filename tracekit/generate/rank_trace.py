"""One rank's Chakra .et node records: the job's process groups, and the builder the class workloads call.

Every collective names its process group (pg_name) and each rank's `process_group:init` METADATA
node lists the groups it belongs to with their ranks, so ingest records explicit group sizes. A
collective takes as long on every rank of its group as its busiest rank needs at `fleet.link_gbps`:
its bytes by nccl-tests' bus-bandwidth definition (`bus`: S x 2(n-1)/n for all-reduce, ...), or for
an all-to-allv the most any rank sends or receives, so no rank reads above the link's speed.
Identical records are serialized once per job: most ranks of a job share most of their bytes.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from tracekit.parsers import et_def_pb2
from tracekit.parsers.common.names import PG_INIT_NAME
from tracekit.writers.chakra_et import comm_node, comp_node, recv_node, send_node

if TYPE_CHECKING:
    from tracekit.generate.alltoallv import Splits

ET_VERSION = "0.0.4"
CLOCK_ORIGIN_US = 1_000_000
BACKEND = "cuda:nccl"


class Groups:
    """The job's process groups: name -> (desc, ranks or None for the whole world)."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.groups: dict[str, tuple[str, list[int] | None]] = {"0": ("default_pg", None)}

    def add(self, desc: str, ranks: list[int]) -> str:
        """The group's name: "0" for the whole world, "" for a single rank (no group made)."""
        if len(ranks) == self.world:
            return "0"
        if len(ranks) < 2:
            return ""
        name = str(len(self.groups))
        self.groups[name] = (desc, ranks)
        return name

    def entries(self, names: list[str]) -> list[dict[str, Any]]:
        out = []
        for name in dict.fromkeys(["0", *(n for n in names if n)]):
            desc, ranks = self.groups[name]
            out.append(
                {
                    "pg_name": name,
                    "pg_desc": desc,
                    "backend_config": BACKEND,
                    "ranks": [] if ranks is None else ranks,
                    "group_size": self.world if ranks is None else len(ranks),
                }
            )
        return out


class RankTrace:
    """Builds one rank's records; `cache` (shared by the job's ranks) holds serialized records."""

    def __init__(self, cache: dict[tuple[Any, ...], bytes], bytes_per_us: float) -> None:
        self.cache = cache
        self.records: list[bytes] = []
        self.next_id = 0
        self.clock = CLOCK_ORIGIN_US
        self.last: int | None = None
        self.bytes_per_us = bytes_per_us
        self.durations: dict[tuple[str, int, int], int] = {}

    def _emit(self, key: tuple[Any, ...], build: Any) -> int:
        node_id = self.next_id
        self.next_id += 1
        full = (node_id, *key)
        payload = self.cache.get(full)
        if payload is None:
            payload = build(node_id).SerializeToString()
            self.cache[full] = payload
        self.records.append(payload)
        self.last = node_id
        return node_id

    def _deps(self, deps: tuple[int, ...] | None) -> tuple[int, ...]:
        if deps is not None:
            return deps
        return () if self.last is None else (self.last,)

    def duration(self, bus_bytes: float) -> int:
        """Microseconds the link takes for `bus_bytes` (whole microseconds, rounded up, at least 1)."""
        return max(1, math.ceil(bus_bytes / self.bytes_per_us))

    def lasts(self, comm_type: str, size: int, group: int) -> int:
        """duration() of a collective whose ranks pass in `size` bytes each (memoized per job)."""
        key = (comm_type, size, group)
        found = self.durations.get(key)
        if found is None:
            found = self.durations[key] = self.duration(bus(comm_type, size, group))
        return found

    def pg_init(self, entries: list[dict[str, Any]]) -> None:
        text = json.dumps(entries, separators=(",", ":"))
        values = str([text])

        def build(node_id: int) -> Any:
            return et_def_pb2.Node(
                id=node_id,
                name=PG_INIT_NAME,
                type=et_def_pb2.METADATA_NODE,
                inputs=et_def_pb2.IOInfo(values=values),
            )

        self._emit(("pg", values), build)
        self.last = None

    def comp(self, name: str, duration_us: int, deps: tuple[int, ...] | None = None, advance: bool = True) -> int:
        ctrl = self._deps(deps)
        start = self.clock
        node = self._emit(
            ("comp", name, duration_us, ctrl, start),
            lambda i: comp_node(i, name, duration_us, ctrl_deps=ctrl, start_us=start),
        )
        if advance:
            self.clock += duration_us
        return node

    def coll(
        self,
        name: str,
        comm_type: str,
        size: int,
        pg: str,
        group: int,
        dtype: str,
        data: tuple[int, ...] | None = None,
        start: int | None = None,
        splits: Splits | None = None,
        bus_bytes: float | None = None,
    ) -> int:
        """A collective over a group of `group` ranks; it lasts what its bus bytes take on the link
        (`bus_bytes` where the ranks' sizes differ, else this rank's, by bus_bytes()), the same on
        every rank, and moves the clock on unless it starts at `start`."""
        duration = self.lasts(comm_type, size, group) if bus_bytes is None else self.duration(bus_bytes)
        begin = self.clock if start is None else start
        ctrl = () if data is not None else self._deps(None)

        def build(i: int) -> Any:
            attrs: dict[str, Any] = {"dtype": dtype}
            if splits is not None:
                attrs["out_msg_nelems"] = splits.received
            return comm_node(
                i,
                name,
                comm_type,
                size,
                pg,
                ctrl_deps=ctrl,
                data_deps=data or (),
                start_us=begin,
                duration_us=duration,
                attrs=attrs,
            )

        if splits is None:
            node = self._emit(("coll", name, comm_type, size, pg, dtype, ctrl, data, begin, duration), build)
        else:  # every rank's splits differ: nothing to share, the split fields appended as bytes
            node = self.next_id
            self.next_id += 1
            self.records.append(build(node).SerializeToString() + splits.fields)
            self.last = node
        if start is None:
            self.clock += duration
        return node

    def p2p(self, send: bool, name: str, size: int, rank: int, peer: int, tag: int, pg: str, dtype: str) -> int:
        duration = self.duration(size)
        ctrl = self._deps(None)
        begin = self.clock
        builder = send_node if send else recv_node
        node = self._emit(
            ("p2p", send, name, size, rank, peer, tag, pg, dtype, ctrl, begin),
            lambda i: builder(
                i,
                name,
                size,
                peer,
                rank=rank,
                tag=tag,
                pg_name=pg,
                ctrl_deps=ctrl,
                start_us=begin,
                duration_us=duration,
                attrs={"dtype": dtype},
            ),
        )
        self.clock += duration
        return node


def bus(comm_type: str, size: int, group: int) -> float:
    """Bytes a rank's link carries for one collective of `size` bytes passed in (nccl-tests' bus
    bytes: S x 2(n-1)/n for all-reduce, S x n x (n-1)/n for all-gather (S the shard), S x (n-1)/n for
    reduce-scatter and all-to-all, S for the rest)."""
    if group <= 1:
        return 0.0
    if comm_type == "ALL_REDUCE":
        return size * 2.0 * (group - 1) / group
    if comm_type == "ALL_GATHER":
        return float(size * (group - 1))
    if comm_type in ("REDUCE_SCATTER", "ALL_TO_ALL"):
        return size * (group - 1) / group
    return float(size)
