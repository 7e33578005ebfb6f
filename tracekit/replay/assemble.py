"""Stamped transfers → the flows table (ranks, hosts, racks, times, dependencies)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.fabric.topology import Network
    from tracekit.replay.collectives import JobCollectives
    from tracekit.replay.decompose import Decomposition
    from tracekit.replay.placement import Placement
    from tracekit.replay.shapes import JobShapes


# The flows table's link classes other than NVLink/PCIe: NIC to NIC, then the in-network
# reductions' (GPU <-> its NVSwitch, NIC <-> the switch it attaches to); codes 1, 2, 3 of `link`
SWITCH_LINKS = ("nvls", "collnet")
NETWORK_LINKS = ("network", "collnet")  # those that cross the network


def flow_frame(parts: Decomposition, placement: Placement, world: int) -> pl.DataFrame:
    """One row per transfer: ids, channel, step, QP, ranks, hosts, racks, NICs, rails, link, bytes, depends_on.

    `link` is nvlink (or pcie), network, nvls (a GPU and its host's NVSwitch) or collnet (a NIC and
    the SHARP switch it attaches to); the switch end of an nvls or collnet flow has a null rank, NIC
    and rail, and for collnet a null host and rack. `flow_dependencies` gives the dependencies as CSR."""
    import numpy as np
    import polars as pl
    import pyarrow as pa

    from tracekit.replay.algorithms.base import FROM_SWITCH, NET, NO_SWITCH, TO_SWITCH

    src_rank, dst_rank, codes = [], [], []
    labels = sorted(set(parts.algorithm_of))
    for stamped, ranks, name in zip(parts.flows, parts.rank_of, parts.algorithm_of, strict=True):
        if ranks.ndim == 2:  # point-to-point: one (sender, receiver) pair per flow
            rows = np.arange(len(stamped.src))
            src_rank.append(ranks[rows, stamped.src])
            dst_rank.append(ranks[rows, stamped.dst])
        else:
            src_rank.append(ranks[stamped.src])
            dst_rank.append(ranks[stamped.dst])
        codes.append(np.full(len(stamped.src), labels.index(name), dtype=np.int32))

    def cat(arrays: list[np.ndarray], dtype: str) -> np.ndarray:
        return np.concatenate(arrays, dtype=dtype) if arrays else np.zeros(0, dtype=dtype)

    def field(name: str, dtype: str) -> np.ndarray:
        return cat([getattr(s, name) for s in parts.flows], dtype)

    src = cat(src_rank, "int32")
    dst = cat(dst_rank, "int32")
    where = {k: v.astype(np.int32) for k, v in placement.locate(np.arange(max(world, 1), dtype=np.int64)).items()}
    network = field("link", "int8") == NET
    switch = field("switch", "int8")
    intra_link = "nvlink" if placement.intra_host == "nvlink" else "pcie"
    # in-network reductions have link classes of their own: GPU <-> NVSwitch (nvls), NIC <-> switch (collnet)
    codes_of_link = network.astype(np.int32) + 2 * (switch != NO_SWITCH)
    link = pa.DictionaryArray.from_arrays(
        pa.array(codes_of_link), pa.array([intra_link, "network", *SWITCH_LINKS], pa.string())
    )
    src_nic, dst_nic = field("src_nic", "int32"), field("dst_nic", "int32")
    nics = placement.nics
    global_src_nic = where["host"][src] * nics + src_nic
    global_dst_nic = where["host"][dst] * nics + dst_nic
    no_src_nic, no_dst_nic = ~network | (src_nic < 0), ~network | (dst_nic < 0)
    # a SHARP switch is in no host (an NVSwitch is in its GPUs' host)
    off_host_src, off_host_dst = network & (switch == FROM_SWITCH), network & (switch == TO_SWITCH)
    # One CSR offsets array for all buckets: each bucket's offsets shifted by the entries before it.
    offsets, dep_idx = flow_dependencies(parts)
    depends_on = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(dep_idx))
    table = pa.table(
        {
            "flow_id": pa.array(np.arange(len(src), dtype=np.int64)),
            "collective_id": pa.array(field("collective", "int64")),
            "algorithm": pa.DictionaryArray.from_arrays(pa.array(cat(codes, "int32")), pa.array(labels, pa.string())),
            "channel": pa.array(field("channel", "int16")),
            "step": pa.array(field("step", "int32")),
            "qp": pa.array(field("qp", "int16")),
            "src_rank": pa.array(src, mask=switch == FROM_SWITCH),
            "dst_rank": pa.array(dst, mask=switch == TO_SWITCH),
            "src_host": pa.array(where["host"][src], mask=off_host_src),
            "dst_host": pa.array(where["host"][dst], mask=off_host_dst),
            "src_rack": pa.array(where["rack"][src], mask=off_host_src),
            "dst_rack": pa.array(where["rack"][dst], mask=off_host_dst),
            "link": link,
            "src_nic": pa.array(global_src_nic, mask=no_src_nic),
            "dst_nic": pa.array(global_dst_nic, mask=no_dst_nic),
            "src_rail": pa.array(placement.rail_of_nic(np.maximum(src_nic, 0)).astype(np.int32), mask=no_src_nic),
            "dst_rail": pa.array(placement.rail_of_nic(np.maximum(dst_nic, 0)).astype(np.int32), mask=no_dst_nic),
            "pxn": pa.array(field("pxn", "bool")),
            "bytes": pa.array(field("bytes", "int64")),
            "depends_on": depends_on,
        }
    )
    frame: pl.DataFrame = pl.from_arrow(table)  # type: ignore[assignment]
    # Text columns stay dictionary-encoded (Categorical): millions of rows hold a handful of values.
    return frame.with_columns(pl.col("algorithm").cast(pl.Categorical), pl.col("link").cast(pl.Categorical))


def flow_dependencies(parts: Decomposition) -> tuple[np.ndarray, np.ndarray]:
    """The flows' dependencies as one CSR (offsets, flow ids) over every bucket, in flow order."""
    import numpy as np

    shifts = np.cumsum([0] + [s.dep_ptr[-1] for s in parts.flows])
    offsets = np.concatenate(
        [s.dep_ptr[:-1] + shift for s, shift in zip(parts.flows, shifts, strict=False)] + [shifts[-1:]]
    )
    idx = [s.dep_idx for s in parts.flows]
    return offsets.astype(np.int64), (np.concatenate(idx).astype(np.int64) if idx else np.zeros(0, dtype=np.int64))


FLOW_COLUMNS = (
    "flow_id", "collective_id", "comm_type", "algorithm", "protocol", "channel", "step", "qp", "src_rank",
    "dst_rank", "src_host", "dst_host", "src_rack", "dst_rack", "link", "src_nic", "dst_nic", "src_rail",
    "dst_rail", "pxn", "bytes", "start_s", "end_s", "depends_on",
)  # fmt: skip


def assemble(
    ds: TraceDataset,
    job: JobCollectives,
    parts: Decomposition,
    placement: Placement,
    notes: list[str],
    network: Network | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, str, JobShapes]:
    """The flows table with start/end times, the collectives table, how times were found, and the job's shapes."""
    import numpy as np
    import polars as pl

    from tracekit.replay.shapes import job_shapes
    from tracekit.replay.starts import collective_starts
    from tracekit.replay.timing import schedule

    flows = flow_frame(parts, placement, job.world_size)
    comm_type = dict(zip(job.collectives["collective_id"].to_list(), job.collectives["comm_type"].to_list(),
                         strict=True))  # fmt: skip
    shapes = job_shapes(job.job, job.world_size, parts, comm_type, placement)
    flows, durations = schedule(flows, shapes, network)
    duration_of = dict(zip(durations["collective_id"].to_list(), durations["model_duration_s"].to_list(), strict=True))
    starts, timing = collective_starts(ds, job, duration_of, notes)
    start_frame = pl.DataFrame(
        {"collective_id": list(starts), "collective_start_s": list(starts.values())},
        schema={"collective_id": pl.Int64, "collective_start_s": pl.Float64},
    )
    choices = _choices(parts)
    # Collective ids are 0..C-1 (the row index of job.collectives): per-flow values by plain indexing.
    count = job.collectives.height
    start_of = np.zeros(count)
    start_of[np.array(list(starts), dtype=np.int64)] = np.array(list(starts.values()), dtype=np.float64)
    comm_types = job.collectives["comm_type"].cast(pl.Categorical)
    protocol_of = np.full(count, None, dtype=object)
    for cid, choice in parts.choice.items():
        protocol_of[cid] = choice.protocol
    ids = flows["collective_id"].to_numpy()
    begin = start_of[ids] + flows["offset_s"].to_numpy()
    flows = flows.with_columns(
        comm_type=comm_types.gather(ids),
        protocol=pl.Series(protocol_of[ids], dtype=pl.String).cast(pl.Categorical)
        if len(ids)
        else pl.Series([], dtype=pl.Categorical),
        start_s=pl.Series(begin),
        end_s=pl.Series(begin + flows["duration_s"].to_numpy()),
    ).select(FLOW_COLUMNS)
    network_flows = pl.col("link").is_in(NETWORK_LINKS)
    totals = flows.group_by("collective_id").agg(
        pl.len().alias("flows"),
        pl.col("bytes").sum().alias("bytes"),
        pl.col("bytes").filter(network_flows).sum().alias("inter_host_bytes"),
    )
    collectives = (
        job.collectives.rename({"start_us": "trace_start_us", "duration_us": "trace_duration_us"})
        .join(choices, on="collective_id", how="left")
        .join(start_frame.rename({"collective_start_s": "start_s"}), on="collective_id", how="left")
        .join(durations, on="collective_id", how="left")
        .join(totals, on="collective_id", how="left")
        .with_columns(
            pl.col("flows").fill_null(0).cast(pl.Int64),
            pl.col("bytes").fill_null(0),
            pl.col("inter_host_bytes").fill_null(0),
            pl.col("model_duration_s").fill_null(0.0),
        )
        .rename({"key": "match_key"})
        .drop("order")
        .sort("collective_id")
    )
    return flows, collectives, timing, shapes


def _choices(parts: Decomposition) -> pl.DataFrame:
    """Per collective: algorithm, protocol, channels and pipeline pieces chosen, and NCCL's own estimate."""
    import polars as pl

    rows = [(cid, c.algorithm, c.protocol, c.channels, c.chunks, c.estimate_us * 1e-6 or None)
            for cid, c in parts.choice.items()]  # fmt: skip
    return pl.DataFrame(
        rows,
        schema={"collective_id": pl.Int64, "algorithm": pl.String, "protocol": pl.String, "channels": pl.Int32,
                "pipeline_chunks": pl.Int32, "nccl_estimate_s": pl.Float64},
        orient="row",
    )  # fmt: skip
