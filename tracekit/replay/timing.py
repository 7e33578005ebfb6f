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

When each collective starts is tracekit.replay.starts's; the waves timing and its plans are
tracekit.replay.waves's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tracekit.replay.waves import PLANS, WavePlan, digest, network_key, structure_digest

if TYPE_CHECKING:
    import polars as pl

    from tracekit.fabric.topology import Network
    from tracekit.replay.placement import Placement
    from tracekit.replay.shapes import JobShapes


WIRE_FACTOR = {"LL": 2.0, "LL128": 128 / 120, "Simple": 1.0}
LINK_CLASS = {"nvlink": "nvlink", "pcie": "pcie", "network": "net"}


def schedule(
    flows: pl.DataFrame, shapes: JobShapes, network: Network | None = None, routing: str | None = None,
    seed: int = 0, exact: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    """Flows with offset_s (start within their collective) and duration_s, and per collective model_duration_s.

    `network` is the fabric the flows run on (default: the ideal fabric of the job's hosts).
    """
    import numpy as np
    import polars as pl

    network = network if network is not None else ideal_network(shapes)
    run = Timer(shapes).run(network, routing, seed, exact)
    ids = flows["collective_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], len(ids)] if len(ids) else starts
    where = {int(ids[lo]): (lo, hi) for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True)}
    offset = np.zeros(len(ids))
    duration = np.zeros(len(ids))
    per_collective: dict[int, float] = {}
    for shape, (start, end, total) in zip(shapes.shapes, run.solved, strict=True):
        for cid in shape.collective_ids:
            per_collective[cid] = total
            if cid in where:
                lo, hi = where[cid]
                offset[lo:hi] = start
                duration[lo:hi] = end - start
    flows = flows.with_columns(offset_s=pl.Series(offset), duration_s=pl.Series(duration))
    table = pl.DataFrame(
        {"collective_id": list(per_collective), "model_duration_s": list(per_collective.values())},
        schema={"collective_id": pl.Int64, "model_duration_s": pl.Float64},
    )
    return flows, table


@dataclass
class TimedRun:
    """One timing of a job's shapes on one network: per shape its flows' start and end and its duration,
    and the bytes each link of the network carried over all the job's collectives."""

    solved: list[tuple[Any, Any, float]]
    link_bytes: Any  # float64 per link of the network

    def durations(self, shapes: JobShapes) -> list[float]:
        """Each shape's duration (one per distinct collective, in the shapes' order)."""
        return [total for _, _, total in self.solved]

    def communication_s(self, shapes: JobShapes) -> float:
        """The job's collectives one after another: sum over shapes of duration × count, in the shapes' order."""
        return float(sum(total * shape.count for (_, _, total), shape in zip(self.solved, shapes.shapes, strict=True)))


class Timer:
    """A job's distinct collectives timed on a network (see the module docstring)."""

    def __init__(self, shapes: JobShapes) -> None:
        from tracekit.replay.algorithms.base import NET

        self.shapes = shapes
        # A shape with no network flow runs on its hosts' NVLink ports alone, the same on every fabric
        # and routing: timed once (a single-host job's collectives, most of a fleet's jobs).
        self._inside = [not bool((shape.flows["link"] == NET).any()) for shape in shapes.shapes]
        self._timed_inside: dict[tuple[int, bool, float], tuple[Any, Any, float]] = {}
        self._structures: dict[int, bytes] = {}  # a shape's structure digest, taken once for all its runs

    def run(self, network: Network, routing: str | None = None, seed: int = 0, exact: bool = False) -> TimedRun:
        import numpy as np

        from tracekit.fabric.routing import link_loads
        from tracekit.replay.nccl.tuning import BASE_LATENCY, PROTOCOLS

        solved = []
        link_bytes = np.zeros(network.links)
        for index, shape in enumerate(self.shapes.shapes):
            key = (index, exact, float(network.endpoints.nvlink_Bps))
            if self._inside[index] and key in self._timed_inside:
                solved.append(self._timed_inside[key])
                incidence, sizes = _routed(shape.flows, shape.protocol, network, routing, seed)
                link_bytes += link_loads(incidence, sizes) * shape.count
                continue
            protocol = shape.protocol if shape.protocol in PROTOCOLS else "Simple"
            base = BASE_LATENCY.get(shape.algorithm, (0.0, 0.0, 0.0))[PROTOCOLS.index(protocol)] * 1e-6
            if index not in self._structures:
                self._structures[index] = structure_digest(shape.flows)
            start, end, total, incidence, sizes = _solve(
                shape.flows, shape.algorithm, protocol, base, network, routing, seed, exact,
                self.shapes.placement.intra_host, self._structures[index],
            )  # fmt: skip
            solved.append((start, end, total))
            if self._inside[index]:
                self._timed_inside[key] = (start, end, total)
            link_bytes += link_loads(incidence, sizes) * shape.count
        return TimedRun(solved, link_bytes)

    def has_choices(self, network: Network) -> bool:
        """Whether any network flow of the job has more than one equal-cost path on `network`: where
        none has, every routing and hash seed routes (and times) the job alike."""
        import numpy as np

        from tracekit.fabric.routing import route

        for index, shape in enumerate(self.shapes.shapes):
            if not self._inside[index] and bool(np.any(route(network, _ends(shape.flows), "spray").weight < 1.0)):
                return True
        return False


def ideal_network(shapes: JobShapes) -> Network:
    """The ideal non-blocking fabric at the placement's NIC speed over the job's hosts."""
    from tracekit.fabric.topology import FabricSpec

    return FabricSpec("ideal").build(shapes.network())


def endpoints(placement: Placement, flows: pl.DataFrame) -> Any:
    """The fabric's view of the hosts a flows table uses (tracekit.fabric.Endpoints)."""
    hosts = 1
    if flows.height:
        hosts = int(max(flows["src_host"].max(), flows["dst_host"].max())) + 1  # type: ignore[arg-type, type-var]
    return placement.endpoints(hosts)


def _ends(flows: dict[str, Any]) -> Any:
    """The fabric's view of a shape's flows (NCCL's QPs are per channel: what varies the 5-tuple)."""
    from tracekit.fabric.routing import FlowEnds
    from tracekit.replay.algorithms.base import NET

    return FlowEnds(
        src_nic=flows["src_nic"],
        dst_nic=flows["dst_nic"],
        src_gpu=flows["src_gpu"],
        dst_gpu=flows["dst_gpu"],
        qp=flows["channel"] * 128 + flows["qp"],
        kind=(flows["link"] == NET).astype("int64"),
    )


def _routed(flows: dict[str, Any], protocol: str, network: Network, routing: str | None, seed: int) -> tuple[Any, Any]:
    """A shape's flows routed, and their sizes on the wire."""
    from tracekit.fabric.routing import route

    return route(network, _ends(flows), routing, seed), flows["bytes"] * WIRE_FACTOR.get(protocol, 1.0)


def _solve(
    flows: dict[str, Any], algorithm: str, protocol: str, base_s: float, network: Network, routing: str | None,
    seed: int, exact: bool = False, intra_link: str = "nvlink", structure: bytes | None = None,
) -> tuple[Any, Any, float, Any, Any]:  # fmt: skip
    """Start and end (relative to the collective's start) of a shape's flows, the collective's duration,
    and the flows' incidence and wire sizes on the network."""
    import numpy as np

    from tracekit.fabric.fluid import simulate

    ptr, idx = flows["dep_ptr"], flows["dep_idx"]
    sizes = flows["bytes"] * WIRE_FACTOR[protocol]
    release = np.full(len(sizes), base_s)
    if exact:
        incidence, latency = _routing_and_latency(flows, algorithm, protocol, network, routing, seed, intra_link)
        result = simulate(incidence, network.capacity_Bps, sizes, release, latency, ptr, idx)
        start, end = result.start_s, result.end_s
    else:
        plan = _plan(flows, algorithm, protocol, network, routing, seed, intra_link, structure)
        incidence, latency = plan.incidence, plan.latency
        start, end = plan.times(sizes, release)
        start, end = _within_capacity(start, end, incidence, sizes, network.capacity_Bps, base_s, latency)
    end = np.where(np.isfinite(end), end, base_s)
    return start, end, float(end.max(initial=base_s)), incidence, sizes


def _routing_and_latency(
    flows: dict[str, Any], algorithm: str, protocol: str, network: Network, routing: str | None, seed: int,
    intra_link: str,
) -> tuple[Any, Any]:  # fmt: skip
    """A shape's flows routed on the network, and the latency each pays before moving its bytes."""
    import numpy as np

    from tracekit.fabric.routing import route
    from tracekit.replay.algorithms.base import NET

    incidence = route(network, _ends(flows), routing, seed)
    inside, across = _hop_latencies(algorithm, protocol, intra_link)
    latency = np.where(flows["link"] == NET, across, inside)
    latency = np.where(_follows(flows, flows["dep_ptr"], flows["dep_idx"]), 0.0, latency) + incidence.path_latency_s
    return incidence, latency


def _hop_latencies(algorithm: str, protocol: str, intra_link: str) -> tuple[float, float]:
    """NCCL's per-hop latency (s) of a flow inside a host and across the network (tuning.cc hwLat)."""
    from tracekit.replay.nccl import in_network, tuning

    if algorithm in in_network.ALGORITHMS:
        inside_us, across_us = in_network.hop_latencies_us(algorithm)
        return inside_us * 1e-6, across_us * 1e-6
    p = tuning.PROTOCOLS.index(protocol)
    table = "tree" if algorithm == "tree" else "ring"
    return tuning.HW_LATENCY[LINK_CLASS[intra_link]][table][p] * 1e-6, tuning.HW_LATENCY["net"][table][p] * 1e-6


def _plan(
    flows: dict[str, Any], algorithm: str, protocol: str, network: Network, routing: str | None, seed: int,
    intra_link: str, structure: bytes | None = None,
) -> WavePlan:  # fmt: skip
    key = digest(
        [],
        structure if structure is not None else structure_digest(flows),
        repr((_hop_latencies(algorithm, protocol, intra_link), routing, seed)).encode(),
        network_key(network),
    )
    plan = PLANS.get(key)
    if plan is None:
        incidence, latency = _routing_and_latency(flows, algorithm, protocol, network, routing, seed, intra_link)
        plan = WavePlan.build(incidence, network.capacity_Bps, latency, flows["step"], flows["dep_ptr"],
                              flows["dep_idx"])  # fmt: skip
        PLANS.put(key, plan)
    return plan


def _within_capacity(
    start: Any, end: Any, incidence: Any, sizes: Any, capacity: Any, base_s: float, latency: Any
) -> tuple[Any, Any]:
    """The waves' times stretched, where needed, so that no link carries more than its capacity over
    the collective: steps solved apart may overlap in time on a link (a chain slowed by an ECMP
    collision lags behind the others), which the per-step rates do not see."""
    import numpy as np

    from tracekit.fabric.routing import link_loads

    finite = np.isfinite(end)
    if not finite.any():
        return start, end
    span = float(end[finite].max()) - base_s
    busiest = float((link_loads(incidence, sizes) / capacity).max(initial=0.0))
    floor = busiest + float(latency[finite].min())
    if span <= 0 or floor <= span:
        return start, end
    stretch = floor / span
    return base_s + (start - base_s) * stretch, base_s + (end - base_s) * stretch


def _follows(flows: dict[str, Any], ptr: Any, idx: Any) -> Any:
    """Flows that wait for an earlier piece on the same edge and channel (pipelined: latency overlapped)."""
    import numpy as np

    count = len(flows["bytes"])
    owner = np.repeat(np.arange(count), np.diff(ptr))
    same = np.ones(len(owner), dtype=bool)
    for name in ("src_rank", "dst_rank", "channel"):
        column = flows[name]
        same &= column[owner] == column[idx]
    out = np.zeros(count, dtype=bool)
    out[owner[same]] = True
    return out
