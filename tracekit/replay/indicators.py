"""Network indicators of a replayed job, and the fleet's bytes that stay inside a host per class.

Per job (research/meta-workload-findings.md §1.7-1.13):

* locality: bytes inside a host (NVLink, PXN relays among them), between hosts of a rack, across racks;
* NIC balance: each NIC's egress and ingress bytes, max over mean across the NICs of each host (the
  worst host), and across every NIC of the job; bytes that change rail between hosts (cross-rail);
* flow entropy: distinct (src host, dst host) pairs, network peers per host and per GPU;
  connections (NCCL opens one per channel and peer: distinct (src GPU, dst GPU, channel) network
  triples) and QPs (× NCCL_IB_QPS_PER_CONNECTION: distinct (src GPU, dst GPU, channel, QP)), per
  GPU and per NIC (mean and max);
* inter-host bytes per GPU per iteration (iterations: the ProfilerStep#N spans the trace holds,
  else 1);
* burstiness: network bytes per time bucket (a flow's bytes counted in the bucket of its start),
  and the peak bucket over the mean of the busy span;
* ECMP: the job's QP flows routed on a fabric (default: a two-tier Clos, 2 hosts per leaf, 16
  spines) with ECMP, one routing per hash seed over `trials` seeds: the max over mean load of the
  used leaf-spine links, its mean and 99th percentile over the seeds; against path pinning and
  the ideal spread of spraying.

Parallelism class: the dataset's `job_class` view (queries/job_class.sql: inferred from the
collectives, a 'class:model' label overriding it), read by `job_classes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.fabric.topology import FabricSpec
    from tracekit.replay import Replay
    from tracekit.replay.placement import Placement

# Seeds × QP flows routed at most per ECMP estimate (memory bound); the burstiness buckets at most.
MAX_ECMP_DRAWS = 20_000_000
MAX_BUCKETS = 10_000


def job_label(ds: TraceDataset, job: str) -> str | None:
    rows = ds.sql("select label from jobs where job_id = ?", [job]).fetchall()
    return rows[0][0] if rows else None


def class_of(ds: TraceDataset, job: str) -> str:
    """The job's parallelism class, from the dataset's job_class query."""
    rows = ds.sql("select class from job_class where job_id = ?", [job]).fetchall()
    return str(rows[0][0]) if rows else "other"


def job_classes(ds: TraceDataset) -> dict[str, str]:
    """Each job's parallelism class, from the dataset's job_class query."""
    return {str(job): str(cls) for job, cls in ds.query("job_class").select("job_id, class").fetchall()}


def iterations_of(ds: TraceDataset, job: str) -> int:
    """Training iterations the trace covers: distinct ProfilerStep#N on the busiest rank, at least 1."""
    rows = ds.sql(
        "select max(steps) from (select count(distinct name) as steps from ops "
        "where job_id = ? and name like 'ProfilerStep#%' group by rank)",
        [job],
    ).fetchall()
    return max(int(rows[0][0]), 1) if rows and rows[0][0] else 1


def network_indicators(
    result: Replay, fabric: FabricSpec | None = None, trials: int = 64, seed: int = 0
) -> dict[str, Any]:
    """One row of indicators for the job (see the module docstring)."""
    import polars as pl

    flows = result.flows
    net = flows.filter(pl.col("link") == "network")
    total = int(flows["bytes"].sum())
    inter = int(net["bytes"].sum())
    host_peers = net.group_by("src_host").agg(pl.col("dst_host").n_unique().alias("peers"))
    gpu_peers = net.group_by("src_rank").agg(pl.col("dst_rank").n_unique().alias("peers"))
    hosts = flows.select(pl.concat([flows["src_host"], flows["dst_host"]]).n_unique()).item() if flows.height else 0
    row: dict[str, Any] = {
        "job_id": result.job,
        "label": result.label,
        "class": result.job_class,
        "world_size": result.world_size,
        "hosts": hosts,
        "collectives": result.collectives.height,
        "flows": flows.height,
        "network_flows": net.height,
        "bytes": total,
        "intra_host_bytes": total - inter,
        "pxn_relay_bytes": int(flows.filter(pl.col("pxn") & (pl.col("link") != "network"))["bytes"].sum()),
        "inter_host_bytes": inter,
        "inter_rack_bytes": int(net.filter(pl.col("src_rack") != pl.col("dst_rack"))["bytes"].sum()),
        "intra_host_share": (total - inter) / total if total else None,
        "cross_rail_bytes": int(net.filter(pl.col("src_rail") != pl.col("dst_rail"))["bytes"].sum()),
        "host_pairs": net.select("src_host", "dst_host").unique().height,
        "mean_peer_hosts_per_host": _mean(host_peers["peers"]),
        "max_peer_hosts_per_host": _max(host_peers["peers"]),
        "mean_peers_per_gpu": _mean(gpu_peers["peers"]),
        "max_peers_per_gpu": _max(gpu_peers["peers"]),
        "qps_per_connection": result.options.qps,
        "network_connections": net.select("src_rank", "dst_rank", "channel").unique().height,
        "network_qps": net.select("src_rank", "dst_rank", "channel", "qp").unique().height,
        "iterations": result.iterations,
        "inter_host_bytes_per_gpu_per_iteration": inter / result.world_size / result.iterations
        if result.world_size
        else None,
        "timing": result.timing,
    }
    row |= nic_balance(result)
    row |= connections_per_endpoint(net)
    buckets = burstiness(flows)
    busy = buckets["bytes"].cast(pl.Float64).to_numpy()
    row["burst_peak_over_mean"] = float(busy.max() / busy.mean()) if len(busy) and busy.mean() > 0 else None
    row.update(ecmp(result, fabric, trials, seed))
    return row


def nic_balance(result: Replay) -> dict[str, Any]:
    """Egress and ingress bytes of every NIC of the job's hosts: max over mean per host (worst host) and job-wide."""
    import numpy as np
    import polars as pl

    net = result.flows.filter(pl.col("link") == "network")
    out: dict[str, Any] = {}
    if not net.height:
        return {f"nic_{d}_{k}": None for d in ("egress", "ingress") for k in ("max_over_mean", "host_max_over_mean")}
    nics = result.placement.nics
    hosts = np.unique(np.concatenate([net["src_host"].to_numpy(), net["dst_host"].to_numpy()]))
    for direction, column, host_column in (("egress", "src_nic", "src_host"), ("ingress", "dst_nic", "dst_host")):
        per_nic = net.group_by(column).agg(pl.col("bytes").sum())
        loads = np.zeros((len(hosts), nics))
        nic = per_nic[column].to_numpy()
        slot = np.searchsorted(hosts, nic // nics)
        loads[slot, nic % nics] = per_nic["bytes"].to_numpy()
        busy = loads.sum(axis=1) > 0
        per_host = loads[busy].max(axis=1) / loads[busy].mean(axis=1)
        out[f"nic_{direction}_host_max_over_mean"] = float(per_host.max())
        out[f"nic_{direction}_max_over_mean"] = float(loads[busy].max() / loads[busy].mean())
    return out


def connections_per_endpoint(net: pl.DataFrame) -> dict[str, Any]:
    """Connections and QPs opened per GPU and per NIC (mean and max over those that send)."""
    import polars as pl

    out: dict[str, Any] = {}
    for what, keys in (("connections", ["src_rank", "dst_rank", "channel"]), ("qps", ["src_rank", "dst_rank",
                                                                                      "channel", "qp"])):  # fmt: skip
        for by in ("src_rank", "src_nic"):
            counts = net.select(*{by, *keys}).unique().group_by(by).len()["len"] if net.height else pl.Series([])
            name = "gpu" if by == "src_rank" else "nic"
            out[f"mean_{what}_per_{name}"] = _mean(counts)
            out[f"max_{what}_per_{name}"] = _max(counts)
    return out


def _mean(values: pl.Series) -> float | None:
    return float(values.mean()) if values.len() else None  # type: ignore[arg-type]


def _max(values: pl.Series) -> int | None:
    return int(values.max()) if values.len() else None  # type: ignore[arg-type]


def burstiness(flows: pl.DataFrame, bucket_s: float | None = None) -> pl.DataFrame:
    """Network (inter-host) bytes per time bucket over the busy span: bucket, start_s, bytes.

    The default bucket is 1 ms, or 1/100 of the span when the span is shorter than 0.1 s, and never
    so narrow that the span needs more than MAX_BUCKETS buckets.
    """
    import polars as pl

    inter = flows.filter((pl.col("link") == "network") & (pl.col("bytes") > 0))
    if not inter.height:
        return pl.DataFrame(schema={"bucket": pl.Int64, "start_s": pl.Float64, "bytes": pl.Int64})
    first, last = float(inter["start_s"].min()), float(inter["start_s"].max())  # type: ignore[arg-type]
    span = last - first
    if bucket_s is None:
        bucket_s = 1e-3 if span >= 0.1 or span == 0 else span / 100
    bucket_s = max(bucket_s, span / (MAX_BUCKETS - 1))
    count = int(span / bucket_s) + 1
    per_bucket = inter.group_by(
        ((pl.col("start_s") - first) / bucket_s).floor().cast(pl.Int64).clip(0, count - 1).alias("bucket")
    ).agg(pl.col("bytes").sum())
    frame = pl.DataFrame({"bucket": range(count)}, schema={"bucket": pl.Int64})
    return (
        frame.join(per_bucket, on="bucket", how="left")
        .with_columns(pl.col("bytes").fill_null(0), start_s=first + pl.col("bucket") * bucket_s)
        .select("bucket", "start_s", "bytes")
    )


def connection_key(flows: pl.DataFrame) -> Any:
    """What tells a QP flow's 5-tuple from another's between the same two NICs: NCCL opens its QPs per
    channel (RoCE derives the UDP source port, hence the ECMP hash, from the QP), so channel × 128 + QP
    (NCCL has at most 64 channels and 128 QPs per connection)."""
    import numpy as np

    return flows["channel"].to_numpy().astype(np.int64) * 128 + flows["qp"].to_numpy().astype(np.int64)


def default_fabric(placement: Placement) -> FabricSpec:
    """The fabric the indicators hash onto unless told: a non-blocking two-tier Clos, a leaf per rack with
    as many uplinks at the NIC rate as it has NICs (one to each spine)."""
    from tracekit.fabric.topology import FabricSpec

    spines = placement.hosts_per_rack * placement.nics
    return FabricSpec("clos2", name=f"clos2-{spines}-spines", spines=spines, leaf_spine_Bps=placement.nic_Bps)


def ecmp(result: Replay, fabric: FabricSpec | None = None, trials: int = 64, seed: int = 0) -> dict[str, Any]:
    """Leaf-spine link loads of the job's QP flows under ECMP (one draw per seed), pinning and spraying."""
    import numpy as np
    import polars as pl

    from tracekit.fabric.routing import FlowEnds, link_loads, route
    from tracekit.fabric.topology import LEAF_SPINE
    from tracekit.replay.timing import endpoints

    fabric = fabric or default_fabric(result.placement)
    net = result.flows.filter(pl.col("link") == "network")
    qps = net.group_by("src_rank", "dst_rank", "channel", "qp").agg(
        pl.col("bytes").sum(), pl.col("src_nic").first(), pl.col("dst_nic").first()
    )
    out: dict[str, Any] = {"ecmp_fabric": fabric.label, "ecmp_trials": 0, "ecmp_flows": qps.height}
    if not qps.height:
        return out
    network = fabric.build(endpoints(result.placement, result.flows))
    where = result.placement.locate(np.concatenate([qps["src_rank"].to_numpy(), qps["dst_rank"].to_numpy()]))
    gpus = where["host"] * result.placement.gpus_per_host + where["gpu"]
    ends = FlowEnds(
        src_nic=qps["src_nic"].to_numpy().astype(np.int64),
        dst_nic=qps["dst_nic"].to_numpy().astype(np.int64),
        src_gpu=gpus[: qps.height],
        dst_gpu=gpus[qps.height :],
        qp=connection_key(qps),
        kind=np.ones(qps.height, dtype=np.int64),
    )
    sizes = qps["bytes"].to_numpy().astype(np.float64)
    tier = network.tier == LEAF_SPINE

    def spread(routing: str, s: int = 0) -> float | None:
        loads = link_loads(route(network, ends, routing, s), sizes)[tier]
        used = loads[loads > 0]
        return float(used.max() / used.mean()) if len(used) else None

    trials = max(1, min(trials, MAX_ECMP_DRAWS // qps.height)) if qps.height <= MAX_ECMP_DRAWS else 0
    draws = [spread("ecmp", seed + t) for t in range(trials)]
    values = np.array([d for d in draws if d is not None])
    out["ecmp_trials"] = trials
    if len(values):
        out["ecmp_byte_max_over_mean"] = float(values.mean())
        out["ecmp_byte_max_over_mean_p99"] = float(np.quantile(values, 0.99))
        out["pinned_byte_max_over_mean"] = spread("pinned")
        out["spray_byte_max_over_mean"] = spread("spray")
    return out


def fleet_locality(
    dataset: TraceDataset | str | Path, algorithm: str = "auto", placement: Any = None, progress: Any = None
) -> pl.DataFrame:
    """Per class: jobs replayed, bytes, bytes inside a host and their share (every job replayed)."""
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.errors import TracekitError
    from tracekit.replay import replay

    own = not isinstance(dataset, TraceDataset)
    ds = dataset if isinstance(dataset, TraceDataset) else TraceDataset(dataset)
    rows = []
    try:
        classes = job_classes(ds)
        for (job,) in ds.sql("select job_id from jobs order by job_id").fetchall():
            try:
                flows = replay(ds, job, algorithm=algorithm, placement=placement).flows
            except TracekitError:
                continue
            inter = int(flows.filter(pl.col("src_host") != pl.col("dst_host"))["bytes"].sum())
            total = int(flows["bytes"].sum())
            rows.append(
                {"job_id": job, "class": classes.get(job, "other"), "bytes": total, "intra_host_bytes": total - inter}
            )
            if progress:
                progress(1)
    finally:
        if own:
            ds.close()
    jobs = pl.DataFrame(
        rows, schema={"job_id": pl.String, "class": pl.String, "bytes": pl.Int64, "intra_host_bytes": pl.Int64}
    )
    return (
        jobs.group_by("class")
        .agg(pl.len().alias("jobs"), pl.col("bytes").sum(), pl.col("intra_host_bytes").sum())
        .with_columns(intra_host_share=pl.col("intra_host_bytes") / pl.col("bytes"))
        .sort("class")
    )
