"""One rank's nodes as PyTorch Execution Trace JSON (`generate --trace-format pytorch-et`): the same
calls as a .et RankTrace, written as ExecutionTraceObserver does, which ingest reads into the same
collectives rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracekit.generate.rank_trace import CLOCK_ORIGIN_US, RankTrace
from tracekit.parsers.common.names import C10D_NAMES, DTYPE_BYTES

if TYPE_CHECKING:
    from tracekit.generate.alltoallv import Splits
    from tracekit.generate.jobs import JobSpec


class EtJsonRankTrace(RankTrace):
    """One rank's nodes as PyTorch ET JSON nodes (tracekit.writers.pytorch_et) instead of .et records.

    Same calls, ids, clock and `last` as RankTrace, so a builder makes the same nodes in both formats:
    node id = .et id + 3 (ids 1 and 2 are the process and thread nodes), rf_id = .et id + 1. Compute
    nodes are ops named as in the .et; collectives are record_param_comms nodes in the call's dtype,
    whose in_msg_nelems times its size is the .et comm_size, with the all-to-allv's splits. The ET
    tree is flat (every op under the thread node): plain ET has no times and no dependency edges.
    """

    def __init__(self, bytes_per_us: float, rank: int, tensor_ids: list[int]) -> None:
        super().__init__({}, bytes_per_us)
        from tracekit.writers import pytorch_et

        self._w = pytorch_et
        self.rank = rank
        self.device = f"cuda:{rank % 8}"
        self.nodes: list[dict[str, Any]] = [pytorch_et.thread_node()]
        # pg_name -> (desc, global ranks, size, this rank's group-local rank, rank start, rank stride)
        self.pgs: dict[str, tuple[str, list[int], int, int, int, int]] = {}
        self.seqs: dict[tuple[str, bool], int] = {}
        self.tensor_ids = tensor_ids

    def _next(self) -> int:
        node_id = self.next_id
        self.next_id += 1
        self.last = node_id
        return node_id

    def _tensor_id(self) -> int:
        self.tensor_ids[0] += 1
        return self.tensor_ids[0]

    def pg_init(self, entries: list[dict[str, Any]]) -> None:
        world = next(e["group_size"] for e in entries if e["pg_name"] == "0")
        groups = [{**e, "group_count": len(entries)} for e in entries]
        for e in entries:
            ranks = e["ranks"] or list(range(world))
            local = ranks.index(self.rank) if self.rank in ranks else -1
            start, stride = self._w.rank_range(e["ranks"])
            self.pgs[e["pg_name"]] = (e["pg_desc"], e["ranks"], e["group_size"], local, start, stride)
        node_id = self._next()
        self.nodes.append(self._w.pg_init_node(node_id + 3, groups, rf_id=node_id + 1))
        self.last = None

    def comp(self, name: str, duration_us: int, deps: tuple[int, ...] | None = None, advance: bool = True) -> int:
        node_id = self._next()
        self.nodes.append(self._w.op_node(node_id + 3, name, node_id + 1))
        if advance:
            self.clock += duration_us
        return node_id

    def _group(self, pg: str) -> tuple[str, list[int], int, int, int, int]:
        found = self.pgs.get(pg)
        return found if found is not None else ("", [self.rank], 1, 0, self.rank, 1)  # "": a one-rank group

    def _comm(
        self,
        collective: str,
        pg: str,
        dtype: str,
        in_nelems: int,
        out_nelems: int,
        rank_arg: int,
        splits: Splits | None = None,
        p2p: bool = False,
    ) -> int:
        desc, _, group_size, _, start, stride = self._group(pg)
        seq = self.seqs.get((pg, p2p), 0) + 1
        self.seqs[(pg, p2p)] = seq
        node_id = self._next()
        in_id = self._tensor_id()
        self.nodes.append(
            self._w.comm_node(
                node_id + 3,
                collective,
                rf_id=node_id + 1,
                seq=seq,
                dtype=dtype,
                in_nelems=in_nelems,
                out_nelems=out_nelems,
                rank=rank_arg,
                pg_name=pg,
                pg_desc=desc,
                pg_size=group_size,
                rank_start=start,
                rank_stride=stride,
                in_splits=splits.ins if splits else None,
                out_splits=splits.outs if splits else None,
                tensor_ids=(in_id, in_id if collective == "allreduce" else self._tensor_id()),
                device=self.device,
                p2p=p2p,
            )
        )
        return node_id

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
        duration = self.lasts(comm_type, size, group) if bus_bytes is None else self.duration(bus_bytes)
        nelems = size // DTYPE_BYTES[dtype]
        _, _, group_size, local, _, _ = self._group(pg)
        collective = C10D_NAMES[comm_type]
        if comm_type == "ALL_TO_ALL":
            collective = "all_to_allv" if splits is not None else collective
            out_nelems = splits.received if splits is not None else nelems
        elif comm_type == "ALL_GATHER":
            out_nelems = nelems * group_size
        elif comm_type == "REDUCE_SCATTER":
            out_nelems = nelems // group_size
        else:
            out_nelems = nelems
        node = self._comm(collective, pg, dtype, nelems, out_nelems, local, splits)
        if start is None:
            self.clock += duration
        return node

    def p2p(self, send: bool, name: str, size: int, rank: int, peer: int, tag: int, pg: str, dtype: str) -> int:
        duration = self.duration(size)
        nelems = size // DTYPE_BYTES[dtype]
        ranks = self._group(pg)[1]
        local_peer = ranks.index(peer) if peer in ranks else peer
        node = self._comm("send" if send else "recv", pg, dtype, nelems, nelems, local_peer, p2p=True)
        self.clock += duration
        return node

    def document(self, spec: JobSpec) -> dict[str, Any]:
        """The rank's ET JSON document: `time` is the job's start (UTC), `start_ts` in ms."""
        start_ms = int(spec.started_at.timestamp() * 1000)
        return self._w.document(
            [*self.nodes, self._w.process_node()],
            pid=1000 + self.rank,
            time=spec.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            start_ts=start_ms,
            finish_ts=start_ms + (self.clock - CLOCK_ORIGIN_US) // 1000,
        )
