"""When each flow starts and ends.

Inside a collective: its flows run on the fabric (tracekit.fabric: by default the ideal
non-blocking fabric at the placement's NIC speed, with each GPU's NVLink ports to its host's
NVSwitch) under max-min fair sharing. The flows of one step of the collective (a ring step on
every channel, a wave of a pipelined tree, every pair of an all-to-all with its PXN relays) are
in flight together: their rates are the max-min fair share of every link they cross, so the
flows of a step that share a NIC or an NVLink port share its bandwidth. A flow starts when the
flows it waits for have ended (the collective's steps, pipeline pieces and PXN hops), pays
NCCL's per-hop latency for its link class, algorithm and protocol (tuning.cc hwLat; a pipeline
piece that follows an earlier one on the same edge pays none, as NCCL overlaps them), then moves
its bytes at its step's rate. Rates are fixed per step, not recomputed whenever a flow of the
step ends: for the symmetric steps of collectives this is what the event-driven fluid model
(tracekit.fabric.fluid, run with `exact=True`) gives, at a cost of one fair-share solve per step
instead of one per event (tests compare the two). The collective adds NCCL's base latency
(tuning.cc baseLat) and lasts until its last flow ends. Collectives with the same flows (same
members, algorithm, sizes) are timed once. LL moves 8 bytes of flags per 8 of data and LL128 8
per 120: their flows occupy links for that much more.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.replay.collectives import JobCollectives
    from tracekit.fabric.topology import Network
    from tracekit.replay.decompose import Decomposition
    from tracekit.replay.placement import Placement

# Ops a dependency replay walks per job at most; beyond it only the communication ops are replayed.
MAX_REPLAY_OPS = 5_000_000


WIRE_FACTOR = {"LL": 2.0, "LL128": 128 / 120, "Simple": 1.0}
LINK_CLASS = {"nvlink": "nvlink", "pcie": "pcie", "network": "net"}


def schedule(
    flows: pl.DataFrame, dependencies: tuple[Any, Any], parts: Decomposition, placement: Placement,
    network: Network | None = None, routing: str | None = None, seed: int = 0, exact: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """Flows with offset_s (start within their collective) and duration_s, and per collective model_duration_s.

    `network` is the fabric the flows run on (default: the ideal fabric of the placement).
    """
    import numpy as np
    import polars as pl

    network = network if network is not None else ideal_network(placement, flows)
    timer = Timer(flows, dependencies, {cid: (c.algorithm, c.protocol) for cid, c in parts.choice.items()}, placement)
    offset = np.zeros(flows.height)
    duration = np.zeros(flows.height)
    run = timer.run(network, routing, seed, exact)
    for (lo, hi), key in zip(timer.slices, timer.keys, strict=True):
        start, end, _ = run.solved[key]
        offset[lo:hi] = start
        duration[lo:hi] = end - start
    flows = flows.with_columns(offset_s=pl.Series(offset), duration_s=pl.Series(duration))
    table = pl.DataFrame(
        {"collective_id": timer.ids, "model_duration_s": run.durations},
        schema={"collective_id": pl.Int64, "model_duration_s": pl.Float64},
    )
    return flows, table


@dataclass
class TimedRun:
    """One timing of a job's collectives on one network: per collective (Timer.ids order) its duration,
    every distinct collective's flows' start and end, and the bytes each link carried in all."""

    durations: list[float]
    solved: dict[bytes, tuple[Any, Any, float]]
    link_bytes: Any  # float64 per link of the network


class Timer:
    """A job's collectives ready to be timed on any network: their flows' arrays, and which collectives
    share flows (timed once)."""

    def __init__(
        self, flows: pl.DataFrame, dependencies: tuple[Any, Any], choices: dict[int, tuple[str, str]],
        placement: Placement,
    ) -> None:  # fmt: skip
        import numpy as np

        from tracekit.replay.nccl.tuning import PROTOCOLS

        ids = flows["collective_id"].to_numpy()
        self.arrays = _flow_arrays(flows, dependencies, placement) if len(ids) else {}
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, dtype=np.int64)
        ends = np.r_[starts[1:], len(ids)] if len(ids) else starts
        self.slices = list(zip(starts.tolist(), ends.tolist(), strict=True))
        self.ids = [int(ids[lo]) for lo, _ in self.slices]
        self.kinds: list[tuple[str, str]] = []
        self.keys: list[bytes] = []
        for cid, (lo, hi) in zip(self.ids, self.slices, strict=True):
            algorithm, protocol = choices.get(cid, ("p2p", "Simple"))
            protocol = protocol if protocol in PROTOCOLS else "Simple"
            self.kinds.append((algorithm, protocol))
            self.keys.append(_signature(self.arrays, lo, hi, algorithm, protocol))

    def run(self, network: Network, routing: str | None = None, seed: int = 0, exact: bool = False) -> TimedRun:
        import numpy as np

        from tracekit.fabric.routing import link_loads
        from tracekit.replay.nccl.tuning import BASE_LATENCY, PROTOCOLS

        solved: dict[bytes, tuple[Any, Any, float]] = {}
        loads: dict[bytes, Any] = {}
        link_bytes = np.zeros(network.links)
        durations = []
        for (lo, hi), key, (algorithm, protocol) in zip(self.slices, self.keys, self.kinds, strict=True):
            if key not in solved:
                base = BASE_LATENCY.get(algorithm, (0.0, 0.0, 0.0))[PROTOCOLS.index(protocol)] * 1e-6
                start, end, total, incidence, sizes = _solve(
                    self.arrays, lo, hi, algorithm, protocol, base, network, routing, seed, exact
                )
                solved[key] = (start, end, total)
                loads[key] = link_loads(incidence, sizes)
            link_bytes += loads[key]
            durations.append(solved[key][2])
        return TimedRun(durations, solved, link_bytes)


def ideal_network(placement: Placement, flows: pl.DataFrame) -> Network:
    """The ideal non-blocking fabric at the placement's NIC speed over the hosts the flows use."""
    from tracekit.fabric.topology import FabricSpec

    return FabricSpec("ideal").build(endpoints(placement, flows))


def endpoints(placement: Placement, flows: pl.DataFrame) -> Any:
    """The fabric's view of the job's hosts (tracekit.fabric.Endpoints) from the placement."""
    import numpy as np

    from tracekit.fabric.endpoints import Endpoints

    hosts = 1
    if flows.height:
        hosts = int(max(flows["src_host"].max(), flows["dst_host"].max())) + 1  # type: ignore[arg-type]
    return Endpoints(
        hosts=hosts,
        gpus_per_host=placement.gpus_per_host,
        nics_per_host=placement.nics,
        nic_Bps=placement.nic_Bps,
        nvlink_Bps=placement.intra_Bps,
        pcie_Bps=float("inf"),
        nic_rail=tuple(int(r) for r in placement.rail_of_nic(np.arange(placement.nics))),
        hosts_per_rack=placement.hosts_per_rack,
    )


def _flow_arrays(flows: pl.DataFrame, dependencies: tuple[Any, Any], placement: Placement) -> dict[str, Any]:
    import numpy as np

    from tracekit.replay.indicators import connection_key

    src_rank = flows["src_rank"].to_numpy().astype(np.int64)
    dst_rank = flows["dst_rank"].to_numpy().astype(np.int64)
    world = int(max(src_rank.max(), dst_rank.max())) + 1
    where = placement.locate(np.arange(world, dtype=np.int64))
    gpu = where["host"] * placement.gpus_per_host + where["gpu"]  # global GPU id of each rank
    dep_ptr, dep_idx = dependencies
    network = (flows["link"] == "network").to_numpy()
    return {
        "src_gpu": gpu[src_rank],
        "dst_gpu": gpu[dst_rank],
        "src_nic": flows["src_nic"].fill_null(-1).to_numpy().astype(np.int64),
        "dst_nic": flows["dst_nic"].fill_null(-1).to_numpy().astype(np.int64),
        "qp": connection_key(flows),
        "channel": flows["channel"].to_numpy().astype(np.int64),
        "network": network,
        "link": flows["link"].to_numpy(),
        "bytes": flows["bytes"].to_numpy().astype(np.int64),
        "step": flows["step"].to_numpy().astype(np.int64),
        "src_rank": src_rank,
        "dst_rank": dst_rank,
        "dep_ptr": dep_ptr,
        "dep_idx": dep_idx,
    }


def _signature(arrays: dict[str, Any], lo: int, hi: int, algorithm: str, protocol: str) -> bytes:
    import hashlib

    digest = hashlib.blake2b(f"{algorithm}/{protocol}/{hi - lo}".encode(), digest_size=20)
    for name in ("src_rank", "dst_rank", "src_nic", "dst_nic", "qp", "bytes"):
        digest.update(arrays[name][lo:hi].tobytes())
    ptr = arrays["dep_ptr"]
    digest.update((ptr[lo : hi + 1] - ptr[lo]).tobytes())
    digest.update((arrays["dep_idx"][ptr[lo] : ptr[hi]] - lo).tobytes())
    return digest.digest()


def _solve(
    arrays: dict[str, Any], lo: int, hi: int, algorithm: str, protocol: str, base_s: float, network: Network,
    routing: str | None, seed: int, exact: bool = False,
) -> tuple[Any, Any, float, Any, Any]:  # fmt: skip
    """Start and end (relative to the collective's start) of flows lo..hi, the collective's duration, and
    the flows' incidence and wire sizes on the network."""
    import numpy as np

    from tracekit.fabric.fluid import simulate
    from tracekit.fabric.routing import FlowEnds, route
    from tracekit.replay.nccl.tuning import HW_LATENCY, PROTOCOLS

    net = arrays["network"][lo:hi]
    ends = FlowEnds(
        src_nic=np.where(net, arrays["src_nic"][lo:hi], -1),
        dst_nic=np.where(net, arrays["dst_nic"][lo:hi], -1),
        src_gpu=arrays["src_gpu"][lo:hi],
        dst_gpu=arrays["dst_gpu"][lo:hi],
        qp=arrays["qp"][lo:hi],
        kind=net.astype(np.int64),
    )
    incidence = route(network, ends, routing, seed)
    ptr = arrays["dep_ptr"][lo : hi + 1] - arrays["dep_ptr"][lo]
    idx = arrays["dep_idx"][arrays["dep_ptr"][lo] : arrays["dep_ptr"][hi]] - lo
    p = PROTOCOLS.index(protocol)
    table = "tree" if algorithm == "tree" else "ring"
    classes = arrays["link"][lo:hi]
    hop = np.array([HW_LATENCY[LINK_CLASS[c]][table][p] for c in ("nvlink", "pcie", "network")]) * 1e-6
    latency = np.select([classes == "nvlink", classes == "pcie"], [hop[0], hop[1]], hop[2])
    latency = np.where(_follows(arrays, lo, hi, ptr, idx), 0.0, latency) + incidence.path_latency_s
    release = np.full(hi - lo, base_s)
    sizes = arrays["bytes"][lo:hi] * WIRE_FACTOR[protocol]
    if exact:
        result = simulate(incidence, network.capacity_Bps, sizes, release, latency, ptr, idx)
        start, end = result.start_s, result.end_s
    else:
        start, end = waves(incidence, network.capacity_Bps, sizes, release, latency, ptr, idx, arrays["step"][lo:hi])
    end = np.where(np.isfinite(end), end, base_s)
    return start, end, float(end.max(initial=base_s)), incidence, sizes


def waves(
    incidence: Any, capacity: Any, sizes: Any, release: Any, latency: Any, ptr: Any, idx: Any, step: Any
) -> tuple[Any, Any]:
    """Start and end of every flow: the max-min fair rates of each step's flows in flight together, then
    every flow after the flows it waits for (see the module docstring). Dependencies point to earlier
    flows; those inside one step (a PXN relay and its send) are followed in a few passes."""
    import numpy as np

    from tracekit.fabric.fairshare import max_min_rates, ranges

    count = len(sizes)
    order = np.lexsort((np.arange(count), step))
    bounds = np.flatnonzero(np.r_[True, step[order][1:] != step[order][:-1], True])
    entry_step = step[incidence.flow]
    entries = np.argsort(entry_step, kind="stable")  # still sorted by flow within a step
    entry_bounds = np.searchsorted(entry_step[entries], step[order][bounds[:-1]])
    entry_bounds = np.r_[entry_bounds, len(entries)]
    start = np.zeros(count)
    end = np.full(count, np.inf)
    local = np.zeros(count, dtype=np.int64)
    for w in range(len(bounds) - 1):
        members = order[bounds[w] : bounds[w + 1]]
        local[members] = np.arange(len(members))
        chosen = entries[entry_bounds[w] : entry_bounds[w + 1]]
        ef = local[incidence.flow[chosen]]
        keep = np.argsort(ef, kind="stable")
        rates = max_min_rates(ef[keep], incidence.link[chosen][keep], incidence.weight[chosen][keep], len(members),
                              capacity)  # fmt: skip
        with np.errstate(divide="ignore", invalid="ignore"):
            moving = np.where(sizes[members] > 0, sizes[members] / rates, 0.0)
        has_links = np.bincount(ef, minlength=len(members)) > 0
        duration = latency[members] + np.where(has_links, moving, 0.0)
        counts = ptr[members + 1] - ptr[members]
        flat = idx[ranges(ptr[members], counts)] if counts.sum() else np.zeros(0, dtype=np.int64)
        owner = np.repeat(np.arange(len(members)), counts)
        ready = release[members].astype(np.float64)
        for _ in range(8):  # dependencies inside the step are at most a few hops deep (PXN relay, then send)
            waited = ready.copy()
            if len(flat):
                np.maximum.at(waited, owner, end[flat])
            settled = np.array_equal(start[members], waited) and np.isfinite(waited).all()
            start[members] = waited
            end[members] = waited + duration
            if settled or not len(flat):
                break
    return start, end


def _follows(arrays: dict[str, Any], lo: int, hi: int, ptr: Any, idx: Any) -> Any:
    """Flows that wait for an earlier piece on the same edge and channel (pipelined: latency overlapped)."""
    import numpy as np

    owner = np.repeat(np.arange(hi - lo), np.diff(ptr))
    same = np.ones(len(owner), dtype=bool)
    for name in ("src_rank", "dst_rank", "channel"):
        column = arrays[name][lo:hi]
        same &= column[owner] == column[idx]
    out = np.zeros(hi - lo, dtype=bool)
    out[owner[same]] = True
    return out


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
