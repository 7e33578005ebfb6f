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

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from tracekit.api import TraceDataset
    from tracekit.fabric.topology import FabricSpec
    from tracekit.replay.placement import Placement
    from tracekit.replay.result import Replay
    from tracekit.replay.shapes import JobShapes

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

    facts = JobFacts(result.label, result.job_class, result.iterations)
    row = job_indicators(result.job, facts, result.collectives.height, result.options.qps, result.shapes, fabric,
                         trials, seed)  # fmt: skip
    row["timing"] = result.timing
    buckets = burstiness(result.flows)
    busy = buckets["bytes"].cast(pl.Float64).to_numpy()
    row["burst_peak_over_mean"] = float(busy.max() / busy.mean()) if len(busy) and busy.mean() > 0 else None
    return row


@dataclass(frozen=True)
class JobFacts:
    """What the dataset says of a job besides its collectives."""

    label: str | None
    job_class: str
    iterations: int


def job_facts(ds: TraceDataset, jobs: list[str]) -> dict[str, JobFacts]:
    """The label, parallelism class and iterations of each of `jobs`, as job_label, class_of and
    iterations_of give them, from two queries for them all."""
    classes = {
        job: (label, job_class or "other")
        for job, label, job_class in ds.sql(
            "select j.job_id, j.label, c.class from jobs j left join job_class c using (job_id) "
            "where j.job_id in (select unnest(?))",
            [jobs],
        ).fetchall()
    }
    steps = dict(
        ds.sql(
            "select job_id, max(steps) from (select job_id, count(distinct name) as steps from ops "
            "where job_id in (select unnest(?)) and name like 'ProfilerStep#%' group by job_id, rank) group by job_id",
            [jobs],
        ).fetchall()
    )
    return {
        job: JobFacts(classes.get(job, (None, "other"))[0], classes.get(job, (None, "other"))[1],
                      max(int(steps.get(job) or 0), 1))
        for job in jobs
    }  # fmt: skip


def job_indicators(
    job: str,
    facts: JobFacts,
    collectives: int,
    qps: int,
    shapes: JobShapes,
    fabric: FabricSpec | None = None,
    trials: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """The indicators of a job from its distinct collectives: the row a fleet replay stores for it."""
    row: dict[str, Any] = {
        "job_id": job,
        "label": facts.label,
        "class": facts.job_class,
        "world_size": shapes.world_size,
        "collectives": collectives,
        "iterations": facts.iterations,
        "qps_per_connection": qps,
    }
    row |= shape_indicators(shapes, fabric, trials, seed)
    row["inter_host_bytes_per_gpu_per_iteration"] = (
        row["inter_host_bytes"] / shapes.world_size / facts.iterations if shapes.world_size else None
    )
    return row


def shape_indicators(
    shapes: JobShapes, fabric: FabricSpec | None = None, trials: int = 64, seed: int = 0
) -> dict[str, Any]:
    """Locality, NIC balance, rails, peers, connections and QPs, ECMP of a job's distinct collectives, each
    counted as often as it occurs (the same numbers for a job replayed alone or in a fleet)."""
    import numpy as np

    from tracekit.replay.algorithms.base import NET, NO_SWITCH

    flows = _flows_of(shapes)
    weight = flows["weight"]
    net = flows["link"] == NET
    between = net & (flows["switch"] == NO_SWITCH)
    moved = flows["bytes"] * weight
    row: dict[str, Any] = {
        "hosts": int(np.unique(np.concatenate([flows["src_host"], flows["dst_host"]])).size) if len(weight) else 0,
        "flows": int(weight.sum()),
        "network_flows": int(weight[net].sum()),
        "bytes": int(moved.sum()),
        "intra_host_bytes": int(moved[~net].sum()),
        "pxn_relay_bytes": int(moved[flows["pxn"] & ~net].sum()),
        "inter_host_bytes": int(moved[net].sum()),
        "inter_rack_bytes": int(moved[between & (flows["src_rack"] != flows["dst_rack"])].sum()),
        "cross_rail_bytes": int(moved[between & (flows["src_rail"] != flows["dst_rail"])].sum()),
        "switch_bytes": int(moved[flows["switch"] != NO_SWITCH].sum()),
    }
    row["intra_host_share"] = row["intra_host_bytes"] / row["bytes"] if row["bytes"] else None
    row |= _nic_balance({k: v[net] for k, v in flows.items()}, shapes.placement.nics)
    # peers, connections and ECMP are between two NICs: a SHARP switch end is none of them
    n = {k: v[between] for k, v in flows.items()}
    row["host_pairs"] = len(_rows(n["src_host"], n["dst_host"]))
    row |= _peers(n, "src_host", "dst_host", "peer_hosts_per_host")
    row |= _peers(n, "src_rank", "dst_rank", "peers_per_gpu")
    connections = _rows(n["src_rank"], n["dst_rank"], n["channel"], n["src_nic"])
    qps = _rows(n["src_rank"], n["dst_rank"], n["channel"], n["src_nic"], n["qp"])
    row["network_connections"], row["network_qps"] = len(connections), len(qps)
    for what, distinct in (("connections", connections), ("qps", qps)):
        for name, column in (("gpu", 0), ("nic", 3)):
            counts = np.unique(distinct[:, column], return_counts=True)[1] if len(distinct) else np.zeros(0)
            row[f"mean_{what}_per_{name}"] = float(counts.mean()) if len(counts) else None
            row[f"max_{what}_per_{name}"] = int(counts.max()) if len(counts) else None
    row |= _ecmp(shapes, n, fabric, trials, seed)
    return row


def _flows_of(shapes: JobShapes) -> dict[str, Any]:
    """Every shape's flows end to end, with `weight`: how many collectives send each."""
    import numpy as np

    names = ("src_rank", "dst_rank", "src_host", "dst_host", "src_rack", "dst_rack", "src_rail", "dst_rail",
             "src_nic", "dst_nic", "src_gpu", "dst_gpu", "channel", "qp", "link", "switch", "pxn", "bytes")  # fmt: skip
    out = {name: np.concatenate([s.flows[name] for s in shapes.shapes]) if shapes.shapes else np.zeros(0, np.int64)
           for name in names}  # fmt: skip
    out["pxn"] = out["pxn"].astype(bool)
    out["weight"] = (
        np.concatenate([np.full(s.size, s.count, dtype=np.int64) for s in shapes.shapes])
        if shapes.shapes
        else np.zeros(0, np.int64)
    )
    return out


def _rows(*columns: Any) -> Any:
    """The distinct rows of the columns side by side, sorted."""
    import numpy as np

    if not len(columns[0]):
        return np.zeros((0, len(columns)), dtype=np.int64)
    first, _ = _row_groups(*columns)
    return np.stack(columns, axis=1).astype(np.int64)[first]


def _row_groups(*columns: Any) -> tuple[Any, Any]:
    """For the rows of the columns side by side: the index of each distinct row's first occurrence (in
    sorted row order) and each row's group, as np.unique(axis=0, return_index, return_inverse) gives."""
    import numpy as np

    table = np.stack(columns, axis=1).astype(np.int64)
    if not len(table):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    low = table.min(axis=0)
    spans = table.max(axis=0) - low + 1
    if float(np.prod(spans.astype(np.float64))) >= 2.0**62:  # no single key holds them: sort rows
        _, first, inverse = np.unique(table, axis=0, return_index=True, return_inverse=True)
    else:
        # one integer per row (mixed radix, the first column most significant, so the same order):
        # np.unique(axis=0) sorts rows as structured records, ten times slower
        radix = np.concatenate((np.cumprod(spans[::-1])[::-1][1:], [1]))
        _, first, inverse = np.unique((table - low) @ radix, return_index=True, return_inverse=True)
    return first.astype(np.int64), inverse.reshape(-1).astype(np.int64)


def _peers(n: dict[str, Any], src: str, dst: str, name: str) -> dict[str, Any]:
    import numpy as np

    pairs = _rows(n[src], n[dst])
    counts = np.unique(pairs[:, 0], return_counts=True)[1] if len(pairs) else np.zeros(0)
    return {f"mean_{name}": float(counts.mean()) if len(counts) else None,
            f"max_{name}": int(counts.max()) if len(counts) else None}  # fmt: skip


def _nic_balance(n: dict[str, Any], nics: int) -> dict[str, Any]:
    """Egress and ingress bytes of every NIC of the hosts that use the network: max over mean per host
    (the worst host), and across every NIC of the job."""
    import numpy as np

    out: dict[str, Any] = {}
    if not len(n["bytes"]):
        return {f"nic_{d}_{k}": None for d in ("egress", "ingress") for k in ("max_over_mean", "host_max_over_mean")}
    moved = (n["bytes"] * n["weight"]).astype(np.float64)
    hosts = np.unique(np.concatenate([n["src_host"], n["dst_host"]]))
    for direction, column in (("egress", "src_nic"), ("ingress", "dst_nic")):
        loads = np.zeros((len(hosts), nics))
        nic = n[column]
        has = nic >= 0  # not the switch end of a SHARP flow
        np.add.at(loads, (np.searchsorted(hosts, nic[has] // nics), nic[has] % nics), moved[has])
        busy = loads.sum(axis=1) > 0
        per_host = loads[busy].max(axis=1) / loads[busy].mean(axis=1)
        out[f"nic_{direction}_host_max_over_mean"] = float(per_host.max())
        out[f"nic_{direction}_max_over_mean"] = float(loads[busy].max() / loads[busy].mean())
    return out


def _ecmp(shapes: JobShapes, n: dict[str, Any], fabric: FabricSpec | None, trials: int, seed: int) -> dict[str, Any]:
    """Leaf-spine link loads of the job's QP flows under ECMP (one draw per seed), pinning and spraying."""
    import numpy as np

    from tracekit.fabric.routing import FlowEnds, link_loads, route
    from tracekit.fabric.topology import LEAF_SPINE

    fabric = fabric or default_fabric(shapes.placement)
    out: dict[str, Any] = {"ecmp_fabric": fabric.label, "ecmp_trials": 0, "ecmp_flows": 0}
    if not len(n["bytes"]):
        return out
    first, inverse = _row_groups(n["src_rank"], n["dst_rank"], n["channel"], n["src_nic"], n["qp"])  # QP flows
    sizes = np.bincount(inverse, weights=(n["bytes"] * n["weight"]).astype(np.float64), minlength=len(first))
    out["ecmp_flows"] = len(first)
    network = fabric.build(shapes.network())
    ends = FlowEnds(
        src_nic=n["src_nic"][first],
        dst_nic=n["dst_nic"][first],
        src_gpu=n["src_gpu"][first],
        dst_gpu=n["dst_gpu"][first],
        qp=n["channel"][first] * 128 + n["qp"][first],  # NCCL's QPs are per channel: what varies the 5-tuple
        kind=np.ones(len(first), dtype=np.int64),
    )
    tier = network.tier == LEAF_SPINE

    def spread(loads: np.ndarray) -> float | None:
        used = loads[tier][loads[tier] > 0]
        return float(used.max() / used.mean()) if len(used) else None

    trials = max(1, min(trials, MAX_ECMP_DRAWS // len(first)))
    values = np.array([v for v in map(spread, _ecmp_loads(network, ends, sizes, seed, trials)) if v is not None])
    out["ecmp_trials"] = trials
    if len(values):
        out["ecmp_byte_max_over_mean"] = float(values.mean())
        out["ecmp_byte_max_over_mean_p99"] = float(np.quantile(values, 0.99))
        out["pinned_byte_max_over_mean"] = spread(link_loads(route(network, ends, "pinned"), sizes))
        out["spray_byte_max_over_mean"] = spread(link_loads(route(network, ends, "spray"), sizes))
    return out


ECMP_BATCH = 1 << 20  # QP flows routed per route() call when drawing many seeds at once


def _ecmp_loads(network: Any, ends: Any, sizes: Any, seed: int, trials: int) -> Iterator[Any]:
    """Each link's bytes under ECMP for seeds seed .. seed+trials-1, one array per seed: several seeds
    routed in one call (the flows repeated, one seed per copy), which is what makes 64 draws cheap."""
    import numpy as np

    from tracekit.fabric.routing import route

    per_call = max(1, ECMP_BATCH // ends.size)
    for first in range(0, trials, per_call):
        count = min(per_call, trials - first)
        many = ends.tiled(count)
        seeds = np.repeat(np.arange(seed + first, seed + first + count, dtype=np.int64), ends.size)
        inc = route(network, many, "ecmp", seeds)
        draw = inc.flow // ends.size
        weights = inc.weight * np.tile(sizes, count)[inc.flow]
        loads = np.bincount(draw * inc.num_links + inc.link, weights, minlength=count * inc.num_links)
        yield from loads.reshape(count, inc.num_links)


def _mean(values: pl.Series) -> float | None:
    return float(values.mean()) if values.len() else None  # type: ignore[arg-type]


def _max(values: pl.Series) -> int | None:
    return int(values.max()) if values.len() else None  # type: ignore[arg-type]


def burstiness(flows: pl.DataFrame, bucket_s: float | None = None, notes: list[str] | None = None) -> pl.DataFrame:
    """Network (inter-host) bytes per time bucket over the busy span: bucket, start_s, bytes.

    The default bucket is 1 ms, or 1/100 of the span when the span is shorter than 0.1 s, and never
    so narrow that the span needs more than MAX_BUCKETS buckets (the work is bounded by the buckets,
    never by the span a trace's timestamps claim); a bucket widened so is said in `notes`.
    """
    import polars as pl

    from tracekit.replay.assemble import NETWORK_LINKS

    inter = flows.filter(pl.col("link").is_in(NETWORK_LINKS) & (pl.col("bytes") > 0))
    if not inter.height:
        return pl.DataFrame(schema={"bucket": pl.Int64, "start_s": pl.Float64, "bytes": pl.Int64})
    first, last = float(inter["start_s"].min()), float(inter["start_s"].max())  # type: ignore[arg-type]
    span = last - first
    if bucket_s is None:
        bucket_s = 1e-3 if span >= 0.1 or span == 0 else span / 100
    if span / (MAX_BUCKETS - 1) > bucket_s:
        if notes is not None:
            notes.append(
                f"burstiness: buckets of {span / (MAX_BUCKETS - 1):.6g} s, not {bucket_s:.6g} s: the busy span of "
                f"{span:.6g} s in at most {MAX_BUCKETS:,} buckets"
            )
        bucket_s = span / (MAX_BUCKETS - 1)
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


def default_fabric(placement: Placement) -> FabricSpec:
    """The fabric the indicators hash onto unless told: a non-blocking two-tier Clos, a leaf per rack with
    as many uplinks at the NIC rate as it has NICs (one to each spine)."""
    from tracekit.fabric.topology import FabricSpec

    spines = placement.hosts_per_rack * placement.nics
    return FabricSpec("clos2", name=f"clos2-{spines}-spines", spines=spines, leaf_spine_Bps=placement.nic_Bps)


def ecmp(result: Replay, fabric: FabricSpec | None = None, trials: int = 64, seed: int = 0) -> dict[str, Any]:
    """The ECMP indicators of a replayed job (see shape_indicators)."""
    row = shape_indicators(result.shapes, fabric, trials, seed)
    return {k: v for k, v in row.items() if k.startswith(("ecmp", "pinned", "spray"))}
