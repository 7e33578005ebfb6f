"""When each collective of a replayed job starts.

The collective itself starts:

* at its trace timestamp when every collective of the job has one: the latest start among its
  participants (no data moves before the last member arrives), relative to the job's first
  collective (start_s = 0 there);
* otherwise at the time a replay of the job's ops gives it. The replay follows ASTRA-sim's workload
  semantics (astra-sim/workload/Workload.cc): an op is ready when its control and data dependencies
  (within its trace) have finished; compute ops run one at a time per rank for their recorded
  duration_us (missing: 0); the collectives of one process group run in issue order on each rank
  (one NCCL stream per communicator); a collective starts when it is ready on every participant that has a
  trace and lasts its modelled duration. A trace whose ops record no dependencies at all runs in op_id
  order. Ranks waiting on each other in a cycle (inconsistent traces) are unblocked by starting
  the waiting collective with the ranks that arrived; the notes say how often.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.replay.collectives import JobCollectives

# Ops a dependency replay walks per job at most; beyond it only the communication ops are replayed.
MAX_REPLAY_OPS = 5_000_000


def collective_starts(
    ds: TraceDataset, job: JobCollectives, durations: dict[int, float], notes: list[str]
) -> tuple[dict[int, float], str]:
    """collective_id -> start in seconds, and how it was found ('trace timestamps' or 'dependency replay')."""
    colls = job.collectives
    starts = colls["start_us"]
    if colls.height and starts.null_count() == 0:
        t0 = float(starts.min())  # type: ignore[arg-type]
        return {
            cid: (start - t0) / 1e6
            for cid, start in zip(colls["collective_id"].to_list(), starts.to_list(), strict=True)
        }, "trace timestamps"
    if starts.null_count() < colls.height:
        notes.append(
            f"job {job.job}: {starts.null_count()} of {colls.height} collectives have no timestamp: "
            "the whole job is timed by a replay of its ops"
        )
    return _replay_ops(ds, job, durations, notes), "dependency replay"


def _replay_ops(
    ds: TraceDataset, job: JobCollectives, durations: dict[int, float], notes: list[str]
) -> dict[int, float]:
    import polars as pl

    parts = job.participants.select("collective_id", "trace_id", "op_id")
    traces = parts["trace_id"].unique().to_list()
    total = ds.sql(
        "select count(*) from ops where job_id = ? and trace_id in (select unnest(?::VARCHAR[]))", [job.job, traces]
    ).fetchall()
    count = int(total[0][0]) if total else 0
    if count > MAX_REPLAY_OPS or count == 0:
        if count:
            notes.append(
                f"job {job.job}: {count:,} ops is past the replay limit of {MAX_REPLAY_OPS:,}; only the "
                "communication ops are replayed, in program order"
            )
        ops = parts.rename({"collective_id": "_cid"}).select(
            "trace_id",
            "op_id",
            pl.lit(0.0).alias("duration_us"),
            pl.lit(None, dtype=pl.List(pl.Int64)).alias("ctrl_deps"),
            pl.lit(None, dtype=pl.List(pl.Int64)).alias("data_deps"),
        )
    else:
        ops = ds.sql(
            "select trace_id, op_id, duration_us, ctrl_deps, data_deps from ops "
            "where job_id = ? and trace_id in (select unnest(?::VARCHAR[]))",
            [job.job, traces],
        ).pl()
    comm = {(t, o): c for c, t, o in parts.iter_rows()}
    group_of = dict(zip(job.collectives["collective_id"].to_list(), job.collectives["group"].to_list(), strict=True))
    expected: dict[int, int] = {}
    for cid in parts["collective_id"].to_list():
        expected[cid] = expected.get(cid, 0) + 1
    sim = _Replay(comm, expected, durations, group_of)
    for (trace_id,), nodes in ops.sort("op_id").partition_by("trace_id", as_dict=True).items():
        sim.add_trace(str(trace_id), nodes)
    starts = sim.run()
    if sim.forced:
        notes.append(f"job {job.job}: the ops replay unblocked {sim.forced} collective(s) that not all ranks reached")
    missing = [c for c in expected if c not in starts]
    if missing:
        end = max(starts.values(), default=0.0)
        notes.append(
            f"job {job.job}: {len(missing)} collective(s) never became ready in the ops replay; placed at the end"
        )
        for cid in missing:
            starts[cid] = end
    for cid in durations:
        starts.setdefault(cid, 0.0)
    return starts


class _Replay:
    """Discrete-event replay of every rank's ops (see the module docstring)."""

    def __init__(
        self,
        comm: dict[tuple[str, int], int],
        expected: dict[int, int],
        durations: dict[int, float],
        group_of: dict[int, int],
    ) -> None:
        self.comm = comm
        self.group_of = group_of
        self.expected = expected
        self.durations = durations
        self.traces: list[dict[str, Any]] = []
        self.events: list[tuple[float, int, int, int]] = []  # (time, seq, trace, node)
        self.seq = 0
        self.arrivals: dict[int, list[tuple[int, int, float]]] = {}
        self.starts: dict[int, float] = {}
        self.forced = 0

    def add_trace(self, trace_id: str, nodes: pl.DataFrame) -> None:
        ids = nodes["op_id"].to_list()
        index = {op: i for i, op in enumerate(ids)}
        ctrl = nodes["ctrl_deps"].to_list()
        data = nodes["data_deps"].to_list()
        has_deps = any(c for c in ctrl) or any(d for d in data)
        colls = [self.comm.get((trace_id, op)) for op in ids]
        children: list[list[int]] = [[] for _ in ids]
        indegree = [0] * len(ids)
        last_on_stream: dict[int, int] = {}  # a group's collectives run in issue order (one stream each)
        for i in range(len(ids)):
            if has_deps:
                parents = {index[d] for d in (ctrl[i] or []) + (data[i] or []) if d in index and index[d] != i}
            else:
                parents = {i - 1} if i else set()
            cid = colls[i]
            if cid is not None:
                stream = self.group_of.get(cid, -1)
                if stream in last_on_stream:
                    parents.add(last_on_stream[stream])
                last_on_stream[stream] = i
            for p in parents:
                children[p].append(i)
            indegree[i] = len(parents)
        durations = [max(d or 0.0, 0.0) / 1e6 for d in nodes["duration_us"].to_list()]
        self.traces.append(
            {
                "ids": ids,
                "coll": colls,
                "children": children,
                "indegree": indegree,
                "duration": durations,
                "queue": [],
                "busy": False,
            }
        )

    def run(self) -> dict[int, float]:
        for t, trace in enumerate(self.traces):
            for i, degree in enumerate(trace["indegree"]):
                if degree == 0:
                    self._ready(t, i, 0.0)
            self._compute(t, 0.0)
        while True:
            while self.events:
                time, _, t, i = heapq.heappop(self.events)
                self._finish(t, i, time)
            if not self._unblock():
                return self.starts

    def _push(self, time: float, t: int, i: int) -> None:
        self.seq += 1
        heapq.heappush(self.events, (time, self.seq, t, i))

    def _ready(self, t: int, i: int, time: float) -> None:
        trace = self.traces[t]
        cid = trace["coll"][i]
        if cid is None:
            heapq.heappush(trace["queue"], (time, i))
            return
        arrived = self.arrivals.setdefault(cid, [])
        arrived.append((t, i, time))
        if len(arrived) == self.expected.get(cid, 1):
            self._start(cid)

    def _start(self, cid: int) -> None:
        arrived = self.arrivals.pop(cid)
        start = max(time for _, _, time in arrived)
        self.starts[cid] = start
        for t, i, _ in arrived:
            self._push(start + self.durations.get(cid, 0.0), t, i)

    def _compute(self, t: int, time: float) -> None:
        trace = self.traces[t]
        if trace["busy"] or not trace["queue"]:
            return
        ready, i = heapq.heappop(trace["queue"])
        trace["busy"] = True
        self._push(max(time, ready) + trace["duration"][i], t, i)

    def _finish(self, t: int, i: int, time: float) -> None:
        trace = self.traces[t]
        if trace["coll"][i] is None:
            trace["busy"] = False
        for child in trace["children"][i]:
            trace["indegree"][child] -= 1
            if trace["indegree"][child] == 0:
                self._ready(t, child, time)
        self._compute(t, time)

    def _unblock(self) -> bool:
        """Start the pending collective whose last arrival is earliest; False when none is pending."""
        if not self.arrivals:
            return False
        cid = min(self.arrivals, key=lambda c: max(time for _, _, time in self.arrivals[c]))
        self.forced += 1
        self._start(cid)
        return True
