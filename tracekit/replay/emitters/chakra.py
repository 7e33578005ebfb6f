"""Chakra execution traces for ASTRA-sim: one `workload.<rank>.et` per rank plus a comm-group JSON.

Target: astra-sim/astra-sim 518bd51 (ASTRA-sim 2.x, Chakra feeder_v3), analytical backend
(research/simulators-run.md §3; checked by ../shared/simcheck/astra_et.py). Written with
tracekit.writers.chakra_et: GlobalMetadata{version "0.0.4"} first, node ids unique per file,
attribute types as the reference generators write them (comm_type/comm_size int64,
comm_src/comm_dst/comm_tag int32, is_cpu_op bool false on communication nodes, pg_name string).

Each rank's file holds, in the job's collective order (replayed start time, then collective id;
the same order on every member, which ASTRA-sim needs or ranks hang):

* AllReduce, AllGather, ReduceScatter and even AllToAll as one COMM_COLL_NODE with comm_size = S,
  the collective's in_bytes (Chakra's convention, which ASTRA-sim's ring reads the same way: the
  local shard for AllGather) and pg_name = the group id: "0" for the whole world, else the key of
  its ranks in comm_groups.json;
* every other collective (all-to-allv, Broadcast, Reduce, Gather, Scatter) and every send/recv as
  COMM_SEND_NODE / COMM_RECV_NODE pairs, one per replayed flow, with matching (src, dst, tag, size)
  on both sides (tag = flow id + 1); a send waits for the receives its flow depended on. ASTRA-sim
  does not simulate those collectives itself (Broadcast is only replayed for its duration);
  barriers carry no data and are left out;
* between two collectives, a COMP_NODE for the compute gap the replay measured (whole µs, when at
  least 1 µs), so the simulator sees the trace's compute time.

Every node depends on the previous step of its rank (data_deps), so each rank runs in order.
Also written: network.yml, a 1-D Switch of all ranks matched to the replay's network
(`matched_network`: bandwidth in GiB/s, latency per hop, as the analytical backend reads them),
system.json (one dataset split, so no latency is paid four times; for each collective type the
implementation of the algorithm the replay used most: ring, doubleBinaryTree for tree, direct,
halvingDoubling; ASTRA-sim runs its own implementation, not the replay's channels, and the notes
say where the replay mixed algorithms), remote_memory.json, and run.sh with the command:

    AstraSim_Analytical_Congestion_Unaware --workload-configuration=astra/workload \\
      --comm-group-configuration=astra/comm_groups.json --system-configuration=astra/system.json \\
      --network-configuration=astra/network.yml --remote-memory-configuration=astra/remote_memory.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.replay.emitters import Emission, Emitter

if TYPE_CHECKING:
    import polars as pl

    from tracekit.replay.result import Replay

SIMULATED = {"ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL"}
MAX_TAG = 2**31 - 1
PREFIX = "workload"


def write_astra(result: Replay, out: Path, notes: list[str] | None = None) -> list[Path]:
    return _write_files(result, out, notes, matched_network(result))


def _write_files(result: Replay, out: Path, notes: list[str] | None, matched: tuple[float, float]) -> list[Path]:
    """The files, on the 1-D Switch `matched` (matched_network: GiB/s, ns per hop)."""
    import polars as pl

    from tracekit.writers.chakra_et import EtWriter

    if result.flows.height and int(result.flows["flow_id"].max()) + 1 > MAX_TAG:  # type: ignore[arg-type]
        raise InputError(f"job {result.job}: more than {MAX_TAG:,} flows: ASTRA-sim tags are int32")
    out.mkdir(parents=True, exist_ok=True)
    colls = result.collectives.sort("start_s", "collective_id", nulls_last=True)
    group_ids = _group_ids(result)
    p2p_flows = _p2p_flows(result, colls)
    plan = _per_rank_plan(result, colls, group_ids)
    skipped = colls.filter(pl.col("comm_type") == "BARRIER").height
    if skipped and notes is not None:
        notes.append(f"job {result.job}: ASTRA-sim: {skipped} barrier(s) left out (no data)")
    paths = []
    for rank in range(result.world_size):
        path = out / f"{PREFIX}.{rank}.et"
        with EtWriter(path) as writer:
            writer.write_metadata("0.0.4")
            writer.write_nodes(_rank_nodes(rank, plan.get(rank, []), p2p_flows))
        paths.append(path)
    groups_path = out / "comm_groups.json"
    groups_path.write_text(
        json.dumps({str(gid): list(result.groups[g]) for g, gid in group_ids.items() if gid != 0}, indent=1) + "\n"
    )
    paths.append(groups_path)
    paths.extend(_configs(result, out, matched, notes))
    return paths


def _group_ids(result: Replay) -> dict[int, int]:
    """Group index -> ASTRA-sim group id (0 = all ranks; others numbered from 1)."""
    whole = tuple(range(result.world_size))
    ids: dict[int, int] = {}
    for index, ranks in enumerate(result.groups):
        ids[index] = 0 if ranks == whole else len([v for v in ids.values() if v]) + 1
    return ids


def _p2p_flows(result: Replay, colls: pl.DataFrame) -> dict[int, list[tuple[int, int, int, int, list[int]]]]:
    """collective_id -> (flow_id, src, dst, bytes, depends_on) of collectives written as send/recv."""
    import polars as pl

    as_pairs = colls.filter(
        ~(pl.col("comm_type").is_in(list(SIMULATED)) & ~pl.col("is_uneven").fill_null(False))
        & (pl.col("comm_type") != "BARRIER")
    )["collective_id"]
    flows = result.flows.filter(pl.col("collective_id").is_in(as_pairs.implode()) & (pl.col("bytes") > 0))
    out: dict[int, list[tuple[int, int, int, int, list[int]]]] = {}
    for row in flows.select("collective_id", "flow_id", "src_rank", "dst_rank", "bytes", "depends_on").iter_rows():
        out.setdefault(row[0], []).append((row[1], row[2], row[3], row[4], row[5] or []))
    return out


def _per_rank_plan(result: Replay, colls: pl.DataFrame, group_ids: dict[int, int]) -> dict[int, list[dict[str, Any]]]:
    plan: dict[int, list[dict[str, Any]]] = {}
    for row in colls.iter_rows(named=True):
        if row["comm_type"] == "BARRIER":
            continue
        if row["group"] >= 0:
            members = result.groups[row["group"]]
        else:
            members = (row["src"], row["dst"])
        step = {
            "collective_id": row["collective_id"],
            "comm_type": row["comm_type"],
            "collective": row["comm_type"] in SIMULATED and not row["is_uneven"] and row["group"] >= 0,
            "size": int(row["size"]),
            "pg": str(group_ids.get(row["group"], 0)),
            "name": row["op_name"] or row["comm_type"].lower(),
            "start_s": row["start_s"] or 0.0,
            "end_s": (row["start_s"] or 0.0) + (row["model_duration_s"] or 0.0),
        }
        for rank in members:
            plan.setdefault(rank, []).append(step)
    return plan


def _rank_nodes(
    rank: int, steps: list[dict[str, Any]], p2p: dict[int, list[tuple[int, int, int, int, list[int]]]]
) -> Any:
    from tracekit.writers.chakra_et import comm_node, comp_node, recv_node, send_node

    next_id = 0
    previous: list[int] = []
    busy_until: float | None = None
    for step in steps:
        if busy_until is not None:
            gap_us = int((step["start_s"] - busy_until) * 1e6)
            if gap_us >= 1:
                yield comp_node(next_id, "compute", gap_us, data_deps=previous)
                previous, next_id = [next_id], next_id + 1
        busy_until = step["end_s"] if busy_until is None else max(busy_until, step["end_s"])
        if step["collective"]:
            yield comm_node(next_id, step["name"], step["comm_type"], step["size"], step["pg"], data_deps=previous)
            previous, next_id = [next_id], next_id + 1
            continue
        recv_of: dict[int, int] = {}
        block: list[int] = []
        for flow_id, src, dst, size, _ in p2p.get(step["collective_id"], []):
            if dst == rank:
                yield recv_node(
                    next_id, f"{step['name']}_recv", size, src, rank=rank, tag=flow_id + 1, data_deps=previous
                )
                recv_of[flow_id] = next_id
                block.append(next_id)
                next_id += 1
        for flow_id, src, dst, size, depends_on in p2p.get(step["collective_id"], []):
            if src == rank:
                waits = [recv_of[d] for d in depends_on if d in recv_of]
                yield send_node(
                    next_id, f"{step['name']}_send", size, dst, rank=rank, tag=flow_id + 1, data_deps=previous + waits
                )
                block.append(next_id)
                next_id += 1
        if block:
            previous = block


ASTRA_IMPLEMENTATION = {"ring": "ring", "tree": "doubleBinaryTree", "direct": "direct",
                        "halving-doubling": "halvingDoubling", "hierarchical": "ring"}  # fmt: skip
GIB = 1 << 30


def matched_network(result: Replay) -> tuple[float, float]:
    """(bandwidth in GiB/s, latency in ns) of a 1-D Switch whose ring takes the time the replay's ring does.

    ASTRA-sim's analytical backend reads `bandwidth` in GiB/s and pays `latency` on each of a Switch's
    two hops (research/simulators-run-2.md §4.5). Bandwidth: what a rank's ring step gets on the
    replay's hosts: min(NICs × NIC rate, NVLink × k/(k−1)) with k GPUs per host taking part (the ring
    crosses to the next host once per channel per host, so its data spreads over the host's NICs and
    a GPU sends (k−1)/k of it over NVLink); NVLink alone inside one host; divided by the wire factor
    of the protocol that carries most of the job's bytes (LL 2, LL128 128/120). Latency: NCCL's
    per-step latency of a ring over the world in that protocol, halved for the two hops.
    """
    import polars as pl

    from tracekit.replay.layout import group_layout
    from tracekit.replay.nccl.topology import model
    from tracekit.replay.nccl.tuning import BASE_LATENCY, PROTOCOLS, latency
    from tracekit.replay.timing import WIRE_FACTOR

    placement = result.placement
    world = max(result.world_size, 1)
    k = min(placement.gpus_per_host, world)
    intra = placement.intra_Bps
    if world <= placement.gpus_per_host:
        beta = intra
    else:
        nics = placement.nics if k == placement.gpus_per_host else max(1, k * placement.nics // placement.gpus_per_host)
        beta = min(nics * placement.nic_Bps, intra * k / (k - 1) if k > 1 else float("inf"))
    colls = result.collectives
    protocol = "Simple"
    if colls.height and "protocol" in colls.columns:
        by_bytes = (
            colls.filter(pl.col("protocol").is_in(list(PROTOCOLS))).group_by("protocol").agg(pl.col("bytes").sum())
        )
        if by_bytes.height:
            protocol = str(by_bytes.sort("bytes", descending=True)["protocol"][0])
    layout = group_layout(list(range(world)), placement)
    topo = model(layout, placement, result.options)
    steps = max(2 * (world - 1), 1)
    base = BASE_LATENCY["ring"][PROTOCOLS.index(protocol)]
    per_step_us = (latency("ALL_REDUCE", "ring", protocol, topo, placement, world) - base) / steps
    return beta / WIRE_FACTOR[protocol] / GIB, per_step_us * 1e3 / 2


def _implementations(result: Replay, notes: list[str] | None) -> dict[str, str]:
    """The ASTRA-sim implementation of each collective type: the replay's most used algorithm for it."""
    import polars as pl

    used = (
        result.collectives.filter(pl.col("comm_type").is_in(list(SIMULATED)) & pl.col("algorithm").is_not_null())
        .group_by("comm_type", "algorithm")
        .len()
        .sort("len", descending=True)
    )
    chosen: dict[str, str] = {}
    for comm_type, algorithm, _ in used.iter_rows():
        if comm_type not in chosen:
            chosen[comm_type] = ASTRA_IMPLEMENTATION.get(algorithm, "ring")
    for comm_type in SIMULATED:
        algorithms = sorted(set(used.filter(pl.col("comm_type") == comm_type)["algorithm"].to_list()))
        if len(algorithms) > 1 and notes is not None:
            notes.append(
                f"job {result.job}: ASTRA-sim runs one {comm_type} implementation ({chosen[comm_type]}); the replay "
                f"used {', '.join(algorithms)}, each with its own channels: compare per collective type"
            )
    return chosen


def _configs(result: Replay, out: Path, matched: tuple[float, float], notes: list[str] | None) -> list[Path]:
    bandwidth, latency_ns = matched
    network = out / "network.yml"
    network.write_text(
        "# 1-D Switch matched to tracekit's replay (tracekit.replay.emitters.chakra.matched_network): "
        "bandwidth in GiB/s per\n"
        "# NPU, latency in ns per hop (a Switch message pays two hops).\n"
        "topology: [ Switch ]\n"
        f"npus_count: [ {result.world_size} ]\n"
        f"bandwidth: [ {bandwidth:.6g} ]\n"
        f"latency: [ {latency_ns:.6g} ]\n"
    )
    implementations = _implementations(result, notes)
    system = out / "system.json"
    system.write_text(
        json.dumps(
            {
                "scheduling-policy": "LIFO",
                "endpoint-delay": 10,
                "active-chunks-per-dimension": 1,
                "preferred-dataset-splits": 1,
                "all-reduce-implementation": [implementations.get("ALL_REDUCE", "ring")],
                "all-gather-implementation": [implementations.get("ALL_GATHER", "ring")],
                "reduce-scatter-implementation": [implementations.get("REDUCE_SCATTER", "ring")],
                "all-to-all-implementation": [implementations.get("ALL_TO_ALL", "direct")],
                "collective-optimization": "localBWAware",
                # the replay models no reduction cost (NCCL's kernels overlap it with the transfers)
                "local-mem-bw": 100000,
                "boost-mode": 0,
            },
            indent=2,
        )
        + "\n"
    )
    memory = out / "remote_memory.json"
    memory.write_text(json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}) + "\n")
    run = out / "run.sh"
    run.write_text(
        "#!/bin/sh\n"
        f"# ASTRA-sim analytical on the replay of job {result.job}: a 1-D Switch at "
        f"{bandwidth * GIB / 1e9:.4g} GB/s per NPU,\n"
        f"# {latency_ns:.4g} ns per hop. Count the 'sys[i] finished' lines: the exit code says nothing (0 with hung\n"
        "# ranks, 134 at teardown after every rank finished). SIMS: the folder holding bin/.\n"
        'cd "$(dirname "$0")" && "${SIMS:-../../shared/sims}/bin/AstraSim_Analytical_Congestion_Unaware" '
        "--workload-configuration=workload --comm-group-configuration=comm_groups.json "
        "--system-configuration=system.json --network-configuration=network.yml "
        "--remote-memory-configuration=remote_memory.json\n"
    )
    return [network, system, memory, run]


def _write(e: Emission) -> tuple[list[Path], dict[str, Any]]:
    bandwidth, latency = matched = matched_network(e.result)
    files = _write_files(e.result, e.out, e.notes, matched)
    return files, {"run": "sh astra/run.sh", "bandwidth_gbytes": round(bandwidth * GIB / 1e9, 4),
                   "latency_ns_per_hop": round(latency, 1)}  # fmt: skip


EMITTER = Emitter(
    name="chakra",
    simulator="ASTRA-sim",
    folder="astra",
    summary="ASTRA-sim: a Chakra ET per rank, comm_groups.json, configs and run.sh",
    write=_write,
)
