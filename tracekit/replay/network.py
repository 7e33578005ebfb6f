"""The flows a network simulator sees, and format size limits.

Packet simulators model NICs and switches, not NVLink: by default only flows between hosts with
bytes > 0 go to them (`network_flows`). A dropped flow's place in the dependency graph is taken by
what it waited for (`project_dependencies`): a network flow then waits for the nearest network
flows before it. Flows above a format's size field are cut into near-equal pieces that start
together (`split_large`); whoever waited for the flow waits for all its pieces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl


def network_flows(flows: pl.DataFrame, include_intra_host: bool = False) -> pl.Expr:
    """The mask of the flows a network simulator gets."""
    import polars as pl

    mask = pl.col("bytes") > 0
    if not include_intra_host:
        mask = mask & (pl.col("src_host") != pl.col("dst_host"))
    return mask


def project_dependencies(flows: pl.DataFrame, keep: pl.Expr) -> pl.DataFrame:
    """flow_id, net_deps (the kept flows it waits for, through dropped ones) of every kept flow."""
    import polars as pl

    marked = flows.select("flow_id", keep.alias("kept"))
    edges = (
        flows.select("flow_id", pl.col("depends_on").alias("dep"))
        .explode("dep")
        .drop_nulls("dep")
        .select(pl.col("flow_id"), pl.col("dep").cast(pl.Int64))
    )
    kept_ids = marked.filter(pl.col("kept")).select("flow_id")
    frontier = edges.join(kept_ids, on="flow_id", how="semi")
    resolved = []
    # A chain of dropped flows is at most as long as a collective has steps.
    steps = int(flows.select(pl.col("step").max().fill_null(0)).item()) + 2 if flows.height else 1
    for _ in range(steps):
        if not frontier.height:
            break
        frontier = frontier.join(marked.rename({"flow_id": "dep"}), on="dep", how="left")
        resolved.append(frontier.filter(pl.col("kept")).select("flow_id", "dep"))
        pending = frontier.filter(~pl.col("kept").fill_null(True)).select("flow_id", "dep")
        frontier = (
            pending.join(edges.rename({"flow_id": "dep", "dep": "next"}), on="dep")
            .select("flow_id", pl.col("next").alias("dep"))
            .unique()
        )
    deps = (
        pl.concat(resolved).unique().group_by("flow_id").agg(pl.col("dep").sort().alias("net_deps"))
        if resolved
        else pl.DataFrame(schema={"flow_id": pl.Int64, "net_deps": pl.List(pl.Int64)})
    )
    return (
        kept_ids.join(deps, on="flow_id", how="left")
        .with_columns(pl.col("net_deps").fill_null(pl.lit([], dtype=pl.List(pl.Int64))))
        .sort("flow_id")
    )


def split_large(flows: pl.DataFrame, limit: int) -> pl.DataFrame:
    """One row per piece: flows larger than `limit` bytes become ceil(bytes / limit) near-equal pieces.

    Adds `piece` (0-based) and rewrites `bytes`; every other column is repeated.
    """
    import polars as pl

    pieces = ((pl.col("bytes") + limit - 1) // limit).clip(lower_bound=1)
    out = flows.with_columns(pieces=pieces).with_columns(piece=pl.int_ranges(0, pl.col("pieces"))).explode("piece")
    q = pl.col("bytes") // pl.col("pieces")
    r = pl.col("bytes") % pl.col("pieces")
    return out.with_columns(bytes=q + (pl.col("piece") < r).cast(pl.Int64), piece=pl.col("piece").cast(pl.Int64)).drop(
        "pieces"
    )
