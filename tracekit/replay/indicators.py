"""Network indicators of a replayed job, and the fleet's bytes that stay inside a host per class.

Per job (research/meta-workload-findings.md §1.7-1.13):

* locality: bytes inside a host (NVLink), between hosts of a rack, across racks;
* flow entropy: distinct (src host, dst host) pairs, network peers per host and per GPU (the NIC
  connections NCCL opens: the paper's ~4 QPs per GPU for AllReduce, ~15 for AlltoAll), and the
  connections after a QP-scaling factor (NCCL_IB_QPS_PER_CONNECTION; Meta uses 4 for ranking, 16
  for LLM);
* inter-host bytes per GPU per iteration (iterations: the ProfilerStep#N spans the trace holds,
  else 1);
* burstiness: network bytes per time bucket (a flow's bytes counted in the bucket of its start),
  and the peak bucket over the mean of the busy span;
* ECMP: every inter-rack connection (× QPs) is hashed uniformly onto one of its leaf's uplinks
  (spine), `trials` times; the max over mean load of the used leaf→spine and spine→leaf links, in
  bytes and in flows, against the ideal spread (each leaf's bytes split evenly over its uplinks).

Parallelism class: the dataset's `job_class` view (queries/job_class.sql: inferred from the
collectives, a 'class:model' label overriding it), read by `job_classes`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.replay.clos import Clos

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.replay import Replay

# Trials × hashed connections drawn at most per ECMP estimate (memory bound).
MAX_ECMP_DRAWS = 20_000_000


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
    result: Replay, qp_scaling: int = 1, clos: Clos | None = None, trials: int = 200, seed: int = 0
) -> dict[str, Any]:
    """One row of indicators for the job (see the module docstring)."""
    import polars as pl

    flows = result.flows.filter(pl.col("bytes") > 0)
    inter = flows.filter(pl.col("src_host") != pl.col("dst_host"))
    total = int(flows["bytes"].sum())
    intra_host = total - int(inter["bytes"].sum())
    inter_rack = int(inter.filter(pl.col("src_rack") != pl.col("dst_rack"))["bytes"].sum())
    host_peers = inter.group_by("src_host").agg(pl.col("dst_host").n_unique().alias("peers"))
    gpu_peers = inter.group_by("src_rank").agg(pl.col("dst_rank").n_unique().alias("peers"))
    connections = inter.select("src_rank", "dst_rank").unique().height
    hosts = flows.select(pl.concat([flows["src_host"], flows["dst_host"]]).n_unique()).item() if flows.height else 0
    row: dict[str, Any] = {
        "job_id": result.job,
        "label": result.label,
        "class": result.job_class,
        "world_size": result.world_size,
        "hosts": hosts,
        "collectives": result.collectives.height,
        "flows": flows.height,
        "bytes": total,
        "intra_host_bytes": intra_host,
        "inter_host_bytes": total - intra_host,
        "inter_rack_bytes": inter_rack,
        "intra_host_share": intra_host / total if total else None,
        "host_pairs": inter.select("src_host", "dst_host").unique().height,
        "mean_peer_hosts_per_host": _mean(host_peers["peers"]),
        "max_peer_hosts_per_host": _max(host_peers["peers"]),
        "mean_peers_per_gpu": _mean(gpu_peers["peers"]),
        "max_peers_per_gpu": _max(gpu_peers["peers"]),
        "qp_scaling": qp_scaling,
        "network_connections": connections,
        "connections_after_qp_scaling": connections * qp_scaling,
        "iterations": result.iterations,
        "inter_host_bytes_per_gpu_per_iteration": (total - intra_host) / result.world_size / result.iterations
        if result.world_size
        else None,
        "timing": result.timing,
    }
    buckets = burstiness(result.flows)
    busy = buckets["bytes"].cast(pl.Float64).to_numpy()
    row["burst_peak_over_mean"] = float(busy.max() / busy.mean()) if len(busy) and busy.mean() > 0 else None
    row.update(ecmp(result, clos or Clos(), qp_scaling, trials, seed))
    return row


def _mean(values: pl.Series) -> float | None:
    return float(values.mean()) if values.len() else None  # type: ignore[arg-type]


def _max(values: pl.Series) -> int | None:
    return int(values.max()) if values.len() else None  # type: ignore[arg-type]


def burstiness(flows: pl.DataFrame, bucket_s: float | None = None) -> pl.DataFrame:
    """Network (inter-host) bytes per time bucket over the busy span: bucket, start_s, bytes.

    The default bucket is 1 ms, or 1/100 of the span when the span is shorter than 0.1 s.
    """
    import polars as pl

    inter = flows.filter((pl.col("src_host") != pl.col("dst_host")) & (pl.col("bytes") > 0))
    if not inter.height:
        return pl.DataFrame(schema={"bucket": pl.Int64, "start_s": pl.Float64, "bytes": pl.Int64})
    first, last = float(inter["start_s"].min()), float(inter["start_s"].max())  # type: ignore[arg-type]
    span = last - first
    if bucket_s is None:
        bucket_s = 1e-3 if span >= 0.1 or span == 0 else span / 100
    count = int(span / bucket_s) + 1
    per_bucket = inter.group_by(((pl.col("start_s") - first) / bucket_s).floor().cast(pl.Int64).alias("bucket")).agg(
        pl.col("bytes").sum()
    )
    frame = pl.DataFrame({"bucket": range(count)}, schema={"bucket": pl.Int64})
    return (
        frame.join(per_bucket, on="bucket", how="left")
        .with_columns(pl.col("bytes").fill_null(0), start_s=first + pl.col("bucket") * bucket_s)
        .select("bucket", "start_s", "bytes")
    )


def ecmp(result: Replay, clos: Clos, qp_scaling: int = 1, trials: int = 200, seed: int = 0) -> dict[str, Any]:
    """Leaf-spine link loads when inter-rack connections are hashed at random (see the module docstring)."""
    import numpy as np
    import polars as pl

    flows = result.flows.filter((pl.col("src_rack") != pl.col("dst_rack")) & (pl.col("bytes") > 0))
    conns = flows.group_by("src_rank", "dst_rank", "src_rack", "dst_rack").agg(pl.col("bytes").sum())
    out: dict[str, Any] = {"ecmp_spines": clos.spines, "ecmp_uplinks_per_leaf": clos.uplinks, "ecmp_trials": 0}
    if not conns.height:
        return out | {"ecmp_connections": 0}
    qp = max(int(qp_scaling), 1)
    leaves = np.unique(np.concatenate([conns["src_rack"].to_numpy(), conns["dst_rack"].to_numpy()]))
    src_leaf = np.searchsorted(leaves, np.repeat(conns["src_rack"].to_numpy(), qp))
    dst_leaf = np.searchsorted(leaves, np.repeat(conns["dst_rack"].to_numpy(), qp))
    weights = np.repeat(conns["bytes"].to_numpy().astype(np.float64) / qp, qp)
    k = len(weights)
    trials = max(1, min(trials, MAX_ECMP_DRAWS // k)) if k <= MAX_ECMP_DRAWS else 0
    out |= {"ecmp_connections": k, "ecmp_trials": trials}
    if not trials:
        return out
    rng = np.random.default_rng(seed)
    uplink = rng.integers(0, clos.uplinks, size=(trials, k))
    spine = uplink // clos.links_per_spine
    links = len(leaves) * clos.uplinks
    up = (src_leaf[None, :] * clos.uplinks + uplink) + (np.arange(trials)[:, None] * links)
    down = (dst_leaf[None, :] + spine * len(leaves)) + (np.arange(trials)[:, None] * (len(leaves) * clos.spines))
    used_up = np.unique(src_leaf)
    used_down = np.unique(dst_leaf)

    up_loads = np.bincount(up.reshape(-1), weights=np.tile(weights, trials), minlength=trials * links).reshape(
        trials, len(leaves), clos.uplinks
    )[:, used_up, :]
    down_loads = np.bincount(
        down.reshape(-1), weights=np.tile(weights, trials), minlength=trials * len(leaves) * clos.spines
    ).reshape(trials, clos.spines, len(leaves))[:, :, used_down]
    up_count = np.bincount(up.reshape(-1), minlength=trials * links).reshape(trials, len(leaves), clos.uplinks)[
        :, used_up
    ]
    byte_mmr = np.concatenate(
        [_mmr(up_loads.reshape(trials, -1))[:, None], _mmr(down_loads.reshape(trials, -1))[:, None]], axis=1
    ).max(axis=1)
    flow_mmr = _mmr(up_count.reshape(trials, -1).astype(np.float64))
    leaf_up = np.bincount(src_leaf, weights=weights, minlength=len(leaves))[used_up]
    return out | {
        "ecmp_byte_max_over_mean": float(byte_mmr.mean()),
        "ecmp_byte_max_over_mean_p99": float(np.quantile(byte_mmr, 0.99)),
        "ecmp_flow_max_over_mean": float(flow_mmr.mean()),
        "ideal_byte_max_over_mean": float(leaf_up.max() / leaf_up.mean()),
    }


def _mmr(loads: Any) -> Any:
    means = loads.mean(axis=1)
    return loads.max(axis=1) / means


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
