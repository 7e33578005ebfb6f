"""htsim connection matrix (.cm) with the steps of each collective chained by triggers.

Target: Broadcom/csg-htsim 841d9e7, `htsim_eqds` (default) or `htsim_ndp`, which read `start` in
picoseconds; `--htsim-binary uec` writes whole microseconds for ultraethernet/uet-htsim 40ccb05
`htsim_uec`. (`htsim_roce`/`htsim_hpcc` ignore `start` and `htsim_swift` reads µs: not targeted.)
Rules from research/simulators-run.md §1, checked by ../shared/simcheck/htsim_cm.py.

* Header: `Nodes N` (hosts; N is the smallest size of htsim's built-in 3-tier fat tree, ⌊K³/4⌋ for
  even K, that holds every rank: run `htsim_eqds -tm traffic.cm -end <µs>` without -topo; host id =
  global rank, one NIC per GPU), `Connections`, `Triggers`. Single spaces, LF, comments only in the
  header.
* A flow with nothing to wait for starts at its replayed time (`start`, relative to the first
  flow; picoseconds are rounded to the float32 value htsim's std::stof reads, so nothing is rounded
  silently). A flow that waits for earlier network flows of its collective starts on a trigger:
  `trigger <t>`, where trigger t is `oneshot` for one predecessor or `barrier count k` for k, and
  each predecessor fires it with `send_done_trigger t` (recv_done_trigger never fires in htsim).
  A flow can fire one trigger only: when two different sets of flows wait on the same flow, the
  second set starts at its replayed time instead (counted in the notes).
* Flow ids are 1.. in flow order; sizes above 2,147,483,647 bytes (int32) are cut into pieces.
  Only flows between hosts by default (dependencies pass through the NVLink flows left out).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import InputError
from tracekit.replay.network import network_flows, project_dependencies, split_large

if TYPE_CHECKING:
    import polars as pl

    from tracekit.replay import Replay

SIZE_LIMIT = 2_147_483_647
MAX_ID = 2_147_483_647
BINARIES = {"eqds": "ps", "ndp": "ps", "uec": "us"}
MAX_UEC_START_US = 4_294_967_295


def fat_tree_nodes(hosts: int) -> int:
    """Smallest host count of htsim's built-in 3-tier fat tree (K³/4, even K ≥ 4) holding `hosts`."""
    k = 4
    while k**3 // 4 < hosts:
        k += 2
    return k**3 // 4


def write_htsim(
    result: Replay, out: Path, binary: str = "eqds", include_intra_host: bool = False, notes: list[str] | None = None
) -> list[Path]:

    if binary not in BINARIES:
        raise InputError(f"htsim binary {binary!r} is not targeted; choose {', '.join(BINARIES)}")
    out.mkdir(parents=True, exist_ok=True)
    keep = network_flows(result.flows, include_intra_host)
    deps = project_dependencies(result.flows, keep)
    flows = (
        result.flows.filter(keep).select("flow_id", "src_rank", "dst_rank", "bytes", "start_s").join(deps, on="flow_id")
    )
    pieces = split_large(flows, SIZE_LIMIT).sort("flow_id", "piece").with_row_index("conn_id", offset=1)
    if pieces.height > MAX_ID:
        raise InputError(f"job {result.job}: {pieces.height:,} connections exceed htsim's int32 flow ids")
    triggers, fired_by, waits_on, fallback = _triggers(pieces)
    if fallback and notes is not None:
        notes.append(
            f"job {result.job}: htsim: {fallback} flow(s) start at their replayed time instead of a trigger "
            "(their predecessors already fire another trigger)"
        )
    first = float(pieces["start_s"].min()) if pieces.height else 0.0  # type: ignore[arg-type]
    lines = _connection_lines(pieces, fired_by, waits_on, first, binary, result.job)
    trigger_lines = [
        f"trigger id {tid} oneshot" if count == 1 else f"trigger id {tid} barrier count {count}"
        for tid, count in triggers
    ]
    unit = "picoseconds" if BINARIES[binary] == "ps" else "whole microseconds"
    header = [
        f"# tracekit replay of job {result.job}: {pieces.height} flows; start in {unit} for htsim_{binary}",
        f"Nodes {fat_tree_nodes(max(result.world_size, 1))}",
        f"Connections {pieces.height}",
        f"Triggers {len(trigger_lines)}",
    ]
    path = out / "traffic.cm"
    path.write_text("\n".join(header + lines + trigger_lines) + "\n")
    return [path]


def _triggers(pieces: pl.DataFrame) -> tuple[list[tuple[int, int]], dict[int, int], dict[int, int], int]:
    """Trigger ids with their activation counts; conn -> trigger it fires; conn -> trigger it waits on."""
    import polars as pl

    conns_of_flow = pieces.group_by("flow_id").agg(pl.col("conn_id").alias("conns"))
    waiting = pieces.filter(pl.col("net_deps").list.len() > 0).select("conn_id", "net_deps")
    if not waiting.height:
        return [], {}, {}, 0
    # Each waiting conn's predecessor set, as conn ids (a split predecessor counts all its pieces).
    expanded = (
        waiting.explode("net_deps")
        .join(conns_of_flow, left_on="net_deps", right_on="flow_id")
        .explode("conns")
        .group_by("conn_id")
        .agg(pl.col("conns").unique().sort().alias("preds"))
    )
    # Sets are numbered by their first waiting conn, so that the output is the same on every run.
    sets = (
        expanded.sort("conn_id")
        .group_by("preds", maintain_order=True)
        .agg(pl.col("conn_id").alias("targets"))
        .with_row_index("set", offset=1)
    )
    members = sets.select("set", "preds").explode("preds")
    shared = members.group_by("preds").agg(pl.col("set").n_unique().alias("sets"), pl.col("set").min().alias("first"))
    # A conn can fire one trigger: sets that reuse a conn another (earlier) set already uses fall back.
    conflict = members.join(shared, on="preds").filter((pl.col("sets") > 1) & (pl.col("set") != pl.col("first")))
    bad = set(conflict["set"].unique().to_list())
    good = sets.filter(~pl.col("set").is_in(list(bad)))
    triggers: list[tuple[int, int]] = []
    fired_by: dict[int, int] = {}
    waits_on: dict[int, int] = {}
    for tid, (preds, targets) in enumerate(good.select("preds", "targets").iter_rows(), start=1):
        triggers.append((tid, len(preds)))
        for conn in preds:
            fired_by[conn] = tid
        for conn in targets:
            waits_on[conn] = tid
    fallback = int(sets.filter(pl.col("set").is_in(list(bad)))["targets"].list.len().sum() or 0)
    return triggers, fired_by, waits_on, fallback


def _connection_lines(
    pieces: pl.DataFrame, fired_by: dict[int, int], waits_on: dict[int, int], first: float, binary: str, job: str
) -> list[str]:
    import numpy as np

    conn = pieces["conn_id"].to_numpy()
    relative = pieces["start_s"].to_numpy() - first
    if BINARIES[binary] == "ps":
        starts = np.round(relative * 1e12).astype(np.float32).astype(np.float64)  # the value stof reads
        text = [f"{s:.0f}" for s in starts.tolist()]
    else:
        micros = np.round(relative * 1e6).astype(np.int64)
        if micros.size and micros.max() > MAX_UEC_START_US:
            raise InputError(f"job {job}: htsim_uec reads start as uint32 µs; the replay spans {micros.max()} µs")
        text = [str(m) for m in micros]
    lines = []
    for c, src, dst, size, start in zip(
        conn.tolist(),
        pieces["src_rank"].to_list(),
        pieces["dst_rank"].to_list(),
        pieces["bytes"].to_list(),
        text,
        strict=True,
    ):
        when = f"trigger {waits_on[c]}" if c in waits_on else f"start {start}"
        done = f" send_done_trigger {fired_by[c]}" if c in fired_by else ""
        lines.append(f"{src}->{dst} id {c} {when} size {size}{done}")
    return lines
