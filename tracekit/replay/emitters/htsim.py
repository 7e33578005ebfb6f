"""htsim connection matrix (.cm), its topology and run command; the steps of a collective chained by triggers.

Target: Broadcom/csg-htsim 841d9e7, `htsim_eqds` or `htsim_ndp`, which read `start` in picoseconds;
`--htsim-binary uec` (the default) writes whole microseconds for ultraethernet/uet-htsim 40ccb05
`htsim_uec`, which runs every file eqds aborts on or slows down (research/simulators-run-2.md §4.1-4.3).
Rules from research/simulators-run.md §1, checked by ../shared/simcheck/htsim_cm.py.

* Hosts are NICs. On a two-tier fabric (clos2, rail; the ideal fabric is written as a non-blocking
  clos2 of its NICs) OUT/htsim/topology.topo describes it for `-topo` (tier 0: the leaves, NICs per
  leaf and their uplinks; tier 1: the spines) and host id = leaf × NICs per leaf + port, so each flow
  enters the leaf the replay's fabric puts its NIC on (a rail leaf on a rail-optimised fabric).
  Otherwise (clos3, rail-only) the built-in 3-tier fat tree is used (`Nodes` is its smallest size,
  ⌊K³/4⌋, holding every NIC; host id = global NIC id) and the notes say so.
* Header: `Nodes N`, `Connections`, `Triggers`. Single spaces, LF, comments only in the header.
* A flow starts on a trigger when every flow it waits for is a network flow (a collective's steps
  across hosts): `trigger <t>`, where trigger t is `oneshot` for one predecessor or `barrier count k`
  for k, and each predecessor fires it with `send_done_trigger t` (recv_done_trigger never fires in
  htsim). A flow that waits for NVLink transfers (a ring's hops inside the host, a PXN relay) starts
  at its replayed time instead: htsim does not simulate NVLink, and chaining through the left-out
  flows would drop their time (a ring over 8-GPU hosts then finished in 0.30-0.46× the replay's
  time; research/simulators-run-2.md §4.6). So does a flow whose predecessors already fire another
  trigger (a flow can fire one). Start times are relative to the first flow; picoseconds are rounded
  to the float32 value htsim's std::stof reads.
* Flow ids are 1.. in flow order; sizes above 2,147,483,647 bytes (int32) are cut into pieces.
  Only network flows by default.
* run.sh: the command with `-linkspeed` = the NIC speed in Mb/s (htsim's NIC defaults to 100 Gb/s
  whatever the topology says), `-end` past the replay's last flow, `-topo` when written.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.replay.emitters import Emission, Emitter
from tracekit.replay.network import network_flows, split_large

if TYPE_CHECKING:
    import numpy as np
    import polars as pl

    from tracekit.fabric.topology import Network
    from tracekit.replay.result import Replay

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
    result: Replay,
    out: Path,
    network: Network,
    binary: str = "uec",
    include_intra_host: bool = False,
    notes: list[str] | None = None,
) -> list[Path]:
    import polars as pl

    if binary not in BINARIES:
        raise InputError(f"htsim binary {binary!r} is not targeted; choose {', '.join(BINARIES)}")
    notes = notes if notes is not None else []
    out.mkdir(parents=True, exist_ok=True)
    keep = network_flows(result.flows, include_intra_host)
    host_of_nic, nodes, topo = _hosts(result, network, notes)
    flows = result.flows.filter(keep).select("flow_id", "src_rank", "dst_rank", "src_nic", "dst_nic", "bytes",
                                             "start_s", "end_s")  # fmt: skip
    flows = flows.with_columns(
        src_node=_node(flows, "src", result, host_of_nic), dst_node=_node(flows, "dst", result, host_of_nic)
    ).filter(pl.col("src_node") != pl.col("dst_node"))
    deps = _network_dependencies(result.flows, flows["flow_id"])
    flows = flows.join(deps, on="flow_id", how="left")
    pieces = split_large(flows, SIZE_LIMIT).sort("flow_id", "piece").with_row_index("conn_id", offset=1)
    if pieces.height > MAX_ID:
        raise InputError(f"job {result.job}: {pieces.height:,} connections exceed htsim's int32 flow ids")
    triggers, fired_by, waits_on, fallback = _triggers(pieces)
    if fallback:
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
    speed_mbps = linkspeed_mbps(network)
    header = [
        f"# tracekit replay of job {result.job}: {pieces.height} flows; start in {unit} for htsim_{binary}",
        f"# NICs at {speed_mbps / 1000:g} Gb/s: run with -linkspeed {speed_mbps} (see run.sh)",
        f"Nodes {nodes}",
        f"Connections {pieces.height}",
        f"Triggers {len(trigger_lines)}",
    ]
    path = out / "traffic.cm"
    path.write_text("\n".join(header + lines + trigger_lines) + "\n")
    written = [path]
    if topo is not None:
        topo_path = out / "topology.topo"
        topo_path.write_text(topo)
        written.append(topo_path)
    last = float(pieces["end_s"].max()) - first if pieces.height else 0.0  # type: ignore[arg-type]
    end_us = max(1000, round(3 * last * 1e6) + 1000)
    written.append(_run_script(out, result.job, binary, nodes, speed_mbps, end_us, topo is not None))
    return written


def _hosts(result: Replay, network: Network, notes: list[str]) -> tuple[np.ndarray, int, str | None]:
    """htsim host id of every global NIC, the `Nodes` count, and a -topo file (None: the built-in fat tree).

    htsim's leaf-spine runs every link at one rate and takes oversubscription from the radix
    (fat_tree_topology.cpp set_custom_params): a fabric whose uplinks run at another rate than its
    NICs, or whose uplinks do not divide its NICs per leaf, goes to the built-in fat tree.
    """
    import numpy as np

    nics = network.endpoints.nics
    nic_gbps = network.endpoints.nic_Bps * 8 / 1e9
    if network.kind == "ideal":  # one switch holding every NIC: non-blocking
        switch, port, uplinks, up_gbps = np.zeros(nics, dtype=np.int64), np.arange(nics, dtype=np.int64), nics, nic_gbps
    elif network.kind in ("clos2", "rail") and network.leaf_up.size:
        switch, port = network.nic_switch, network.nic_port
        uplinks = network.leaf_up.shape[1]
        up_gbps = float(network.capacity_Bps[network.leaf_up[0, 0]]) * 8 / 1e9
    else:
        uplinks, up_gbps = 0, 0.0
    radix = int(port.max()) + 1 if uplinks and nics else 1
    if uplinks and abs(up_gbps - nic_gbps) < 1e-6 and radix % uplinks == 0:
        leaves = int(switch.max()) + 1 if nics else 1
        return switch * radix + port, leaves * radix, _topo(leaves, radix, uplinks, network, nic_gbps)
    notes.append(
        f"job {result.job}: htsim: the {network.kind} fabric has no htsim topology file (htsim's leaf-spine runs "
        "every link at the NIC rate, oversubscribed by whole uplinks); the built-in 3-tier fat tree is used "
        "(host id = NIC id)"
    )
    return np.arange(nics, dtype=np.int64), fat_tree_nodes(max(nics, 1)), None


def _topo(leaves: int, radix: int, uplinks: int, network: Network, up_gbps: float) -> str:
    """A 2-tier leaf-spine -topo file: `radix` NICs and `uplinks` uplinks per leaf, every leaf to every spine."""
    down_gbps = network.endpoints.nic_Bps * 8 / 1e9
    latency_ns = round(float(network.latency_s.max(initial=0.0)) * 1e9)
    over = radix // uplinks
    lines = [
        f"Nodes {leaves * radix}",
        "Tiers 2",
        f"Podsize {leaves * radix}",
        "",
        "Tier 0",
        f"Downlink_speed_Gbps {down_gbps:g}",
        f"Radix_Down {radix}",
        f"Radix_Up {uplinks}",
        f"Downlink_Latency_ns {latency_ns}",
        "Switch_Latency_ns 0",
    ]
    if over > 1:
        lines.append(f"Oversubscribed {over}")
    lines += ["", "Tier 1", f"Downlink_speed_Gbps {up_gbps:g}", f"Radix_Down {leaves}",
              f"Downlink_Latency_ns {latency_ns}", "Switch_Latency_ns 0"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _node(flows: pl.DataFrame, end: str, result: Replay, host_of_nic: np.ndarray) -> pl.Series:
    """htsim host of each flow's end: its NIC's (an NVLink flow given with --intra-host: its GPU's own NIC's)."""
    import numpy as np
    import polars as pl

    placement = result.placement
    where = placement.locate(flows[f"{end}_rank"].to_numpy().astype(np.int64))
    own = where["host"] * placement.nics + where["nic"]
    nic = flows[f"{end}_nic"].fill_null(-1).to_numpy().astype(np.int64)
    return pl.Series(host_of_nic[np.where(nic >= 0, nic, own)], dtype=pl.Int64)


def _network_dependencies(all_flows: pl.DataFrame, kept: pl.Series) -> pl.DataFrame:
    """flow_id, net_deps: a kept flow's predecessors when every one of them is kept, else none (it starts at
    its time)."""
    import polars as pl

    kept_ids = kept.implode()
    edges = (
        all_flows.filter(pl.col("flow_id").is_in(kept_ids))
        .select("flow_id", pl.col("depends_on").alias("dep"))
        .explode("dep")
        .drop_nulls("dep")
    )
    judged = (
        edges.with_columns(ok=pl.col("dep").is_in(kept_ids))
        .group_by("flow_id")
        .agg(pl.col("dep").sort().alias("net_deps"), pl.col("ok").all().alias("all_kept"))
    )
    return judged.with_columns(
        pl.when(pl.col("all_kept")).then(pl.col("net_deps")).otherwise(pl.lit([], dtype=pl.List(pl.Int64)))
    ).select("flow_id", "net_deps")


def _triggers(pieces: pl.DataFrame) -> tuple[list[tuple[int, int]], dict[int, int], dict[int, int], int]:
    """Trigger ids with their activation counts; conn -> trigger it fires; conn -> trigger it waits on."""
    import polars as pl

    conns_of_flow = pieces.group_by("flow_id").agg(pl.col("conn_id").alias("conns"))
    waiting = pieces.filter(pl.col("net_deps").list.len().fill_null(0) > 0).select("conn_id", "net_deps")
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
        pieces["src_node"].to_list(),
        pieces["dst_node"].to_list(),
        pieces["bytes"].to_list(),
        text,
        strict=True,
    ):
        when = f"trigger {waits_on[c]}" if c in waits_on else f"start {start}"
        done = f" send_done_trigger {fired_by[c]}" if c in fired_by else ""
        lines.append(f"{src}->{dst} id {c} {when} size {size}{done}")
    return lines


def _run_script(out: Path, job: str, binary: str, nodes: int, speed_mbps: int, end_us: int, topo: bool) -> Path:
    parts = [f'"${{SIMS:-../../shared/sims}}/bin/htsim_{binary}"', "-tm traffic.cm"]
    if topo:
        parts.append("-topo topology.topo")
    if binary == "ndp":
        parts += [f"-nodes {nodes}", "-strat ecmp_host", "-paths 64", "-cwnd 100"]
    parts += [f"-linkspeed {speed_mbps}", f"-end {end_us}"]
    path = out / "run.sh"
    path.write_text(
        "#!/bin/sh\n"
        f"# htsim_{binary} on the replay of job {job}: NICs at {speed_mbps / 1000:g} Gb/s (-linkspeed, Mb/s); "
        "-end in µs\n"
        "# is 3x the replay's span plus 1 ms. Prints one 'finished' line per flow. SIMS: the folder holding bin/.\n"
        f'cd "$(dirname "$0")" && {" ".join(parts)}\n'
    )
    return path


def linkspeed_mbps(network: Network) -> int:
    """htsim's -linkspeed: the NICs' rate in Mb/s."""
    return round(network.endpoints.nic_Bps * 8 / 1e6)


def _write(e: Emission) -> tuple[list[Path], dict[str, Any]]:
    files = write_htsim(e.result, e.out, e.network, e.htsim_binary, e.include_intra_host, e.notes)
    return files, {"run": "sh htsim/run.sh", "binary": f"htsim_{e.htsim_binary}",
                   "linkspeed_mbps": linkspeed_mbps(e.network)}  # fmt: skip


EMITTER = Emitter(
    name="htsim",
    simulator="htsim",
    folder="htsim",
    summary="htsim connection matrix (.cm), topology and run.sh",
    write=_write,
)
