"""Write a replay to OUT/: the flows and what derives from them, then each simulator format.

Always written (the canonical output; every simulator file is rendered from the flows):

    flows.parquet (or flows.csv)   one row per transfer (tracekit.replay.FLOW_COLUMNS; depends_on
                                   is a ;-separated list in CSV)
    collectives.parquet            one row per logical collective: algorithm, protocol, channels, size
                                   S, start, modelled duration, NCCL's own estimate, flows, bytes
    matrix_gpu.parquet, matrix_host.parquet, matrix_rack.parquet   traffic matrices (matrices.py)
    indicators.parquet             the job's network indicators, one row (indicators.py)
    burstiness.parquet             network bytes per time bucket
    observed_vs_replay.parquet     where the job has observed transfers (NCCL Inspector proxy records):
                                   their bytes beside the replay's per operation, rank, peer, channel
    replay.duckdb                  tables flows, collectives and observed (the job's observed transfers,
                                   peers global), and every queries/replay/*.sql as a view over them:
                                   `duckdb OUT/replay.duckdb -c "from traffic_matrix_host"`
    replay.json                    job, placement, NCCL settings, fabric, algorithm, timing, link
                                   speeds and run command of each simulator, notes

Formats: hpcc → OUT/hpcc/{flow,topology,trace,config}.txt and run.sh; htsim → OUT/htsim/traffic.cm,
topology.topo and run.sh; chakra → OUT/astra/workload.<rank>.et, comm_groups.json, configs and run.sh.

OUT is written whole or not at all: everything goes to a staging folder beside it, which replaces
OUT in one rename at the end (an interrupted replay leaves OUT as it was); what a previous replay
left in OUT is replaced, and the notes say so.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.replay.emitters import Emission, emitters, names

if TYPE_CHECKING:
    import polars as pl

    from tracekit.fabric.topology import FabricSpec
    from tracekit.replay.result import Replay

FORMATS = ("flows", *names())  # the flows, then every emitter of tracekit.replay.emitters
MARKER = "replay.json"


def write_all(
    result: Replay,
    out: Path,
    formats: list[str],
    csv: bool = False,
    fabric: FabricSpec | None = None,
    htsim_binary: str = "uec",
    include_intra_host: bool = False,
    ecmp_trials: int = 64,
) -> list[Path]:
    """Every output of `result` into `out` (see the module docstring); returns the files written."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise InputError(f"unknown format(s) {unknown}; choose from {', '.join(FORMATS)}")
    _refuse_switch_flows(result, formats)
    staging = staging_for(out)
    try:
        written = _write(result, staging, formats, csv, fabric, htsim_binary, include_intra_host, ecmp_trials)
        replaced = swap_in(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if replaced:
        result.notes.append(f"{out}: the earlier replay's files there were replaced")
    return [out / path.relative_to(staging) for path in written]


def _refuse_switch_flows(result: Replay, formats: list[str]) -> None:
    """Simulator inputs join two hosts' GPUs or NICs: a flow that ends in a switch (NVLS, CollNet) has no
    place in them, and leaving it out would misstate the traffic."""
    import polars as pl

    from tracekit.replay.assemble import SWITCH_LINKS

    asked = [emitters()[f].simulator for f in formats if f in emitters()]
    if not asked:
        return
    switch = result.flows.filter(pl.col("link").is_in(SWITCH_LINKS))
    if switch.height:
        raise InputError(
            f"--format: {', '.join(asked)} cannot express the {switch.height:,} flows into or out of a switch "
            "(in-network reduction): replay without --in-network-reduction (or --algorithm nvls/collnet) for "
            "simulator inputs"
        )


def staging_for(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise InputError(f"{out}: a folder that holds other files than a replay's; choose an empty or new folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.parent / f".{out.name}.tracekit-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
    except OSError as exc:
        raise InputError(f"{out}: cannot create the output folder ({exc.strerror})") from exc
    return staging


def swap_in(staging: Path, out: Path) -> bool:
    """Move staging into place as out; True when it replaced an earlier replay."""
    replaced = out.is_dir() and any(out.iterdir())
    old = out.parent / f".{out.name}.tracekit-old-{os.getpid()}"
    try:
        if out.exists():
            out.rename(old)
        staging.rename(out)
    except OSError as exc:
        if old.exists() and not out.exists():
            old.rename(out)
        raise InputError(f"{out}: cannot write the output folder ({exc.strerror})") from exc
    shutil.rmtree(old, ignore_errors=True)
    return replaced


def _write(
    result: Replay,
    out: Path,
    formats: list[str],
    csv: bool,
    fabric: FabricSpec | None,
    htsim_binary: str,
    include_intra_host: bool,
    ecmp_trials: int,
) -> list[Path]:
    import polars as pl

    from tracekit.replay.indicators import burstiness, default_fabric, network_indicators
    from tracekit.replay.matrices import gpu_matrix, host_level_matrix, rack_matrix
    from tracekit.replay.timing import endpoints

    fabric = fabric or default_fabric(result.placement)
    network = fabric.build(endpoints(result.placement, result.flows))
    written: list[Path] = [_write_flows(result.flows, out, csv)]
    notes = list(result.notes)
    tables = {
        "collectives": result.collectives,
        "matrix_gpu": gpu_matrix(result.flows),
        "matrix_host": host_level_matrix(result.flows),
        "matrix_rack": rack_matrix(result.flows),
        "indicators": pl.DataFrame([network_indicators(result, fabric, ecmp_trials)]),
        "burstiness": burstiness(result.flows, notes=notes),
    }
    if result.observed is not None and result.observed.height:
        from tracekit.replay.observed import compare

        tables["observed_vs_replay"] = compare(result)
    for name, frame in tables.items():
        path = out / f"{name}.parquet"
        frame.write_parquet(path)
        written.append(path)
    written.append(_write_duckdb(result, out))
    simulators: dict[str, Any] = {}  # replay.json's facts per simulator: how to run it, its link speeds
    for name in formats:
        emitter = emitters().get(name)
        if emitter is not None:
            emission = Emission(result, out / emitter.folder, network, htsim_binary, include_intra_host, notes)
            files, simulators[emitter.folder] = emitter.write(emission)
            written.extend(files)
    written.append(_write_metadata(result, out, formats, fabric, simulators, include_intra_host, notes))
    return written


def _write_flows(flows: pl.DataFrame, out: Path, csv: bool) -> Path:
    import polars as pl

    if not csv:
        path = out / "flows.parquet"
        flows.write_parquet(path)
        return path
    path = out / "flows.csv"
    flows.with_columns(pl.col("depends_on").cast(pl.List(pl.String)).list.join(";")).write_csv(
        path, float_precision=None
    )
    return path


def _write_duckdb(result: Replay, out: Path) -> Path:
    from tracekit.store import connect
    from tracekit.store.queries import catalog_statement, query_names

    path = out / "replay.duckdb"
    path.unlink(missing_ok=True)
    con = connect.memory()
    try:
        connect.attach(con, path, "r", storage_version=connect.STORAGE_VERSION)
        con.register("flows_frame", result.flows.to_arrow())
        con.register("collectives_frame", result.collectives.to_arrow())
        con.register("observed_frame", _observed(result).to_arrow())
        con.execute("CREATE TABLE r.flows AS SELECT * FROM flows_frame")
        con.execute("CREATE TABLE r.collectives AS SELECT * FROM collectives_frame")
        con.execute("CREATE TABLE r.observed AS SELECT * FROM observed_frame")
        con.execute("USE r")
        for name in query_names("replay"):
            con.execute(catalog_statement(name, folder="replay"))
        con.execute("USE memory")
        con.execute("DETACH r")
    finally:
        con.close()
    return path


def _observed(result: Replay) -> pl.DataFrame:
    import polars as pl

    from tracekit.replay.observed import observed_schema

    return result.observed if result.observed is not None else pl.DataFrame(schema=observed_schema())


def _write_metadata(
    result: Replay,
    out: Path,
    formats: list[str],
    fabric: FabricSpec,
    simulators: dict[str, Any],
    intra: bool,
    notes: list[str],
) -> Path:
    flows = result.flows
    last_end = float(flows["end_s"].max()) if flows.height else 0.0  # type: ignore[arg-type]
    meta: dict[str, Any] = {
        "job": result.job,
        "label": result.label,
        "world_size": result.world_size,
        "algorithm": result.algorithm,
        "timing": result.timing,
        "size_convention": "S = collectives.in_bytes (Chakra comm_size: local shard for all-gather)",
        "placement": result.placement.describe(),
        "nccl": result.options.describe(),
        "fabric": fabric.describe(),
        "link_speeds": {"nic_gbps": result.placement.nic_gbps, "intra_host_gbytes": result.placement.intra_Bps / 1e9},
        "formats": formats,
        "simulators": simulators,
        "network_flows_include_intra_host": intra,
        "replay_end_s": last_end,
        "hpcc_stop_time_s_at_least": round(last_end + 1.0, 3),
        "flows": flows.height,
        "bytes": int(flows["bytes"].sum()),
        "collectives": result.collectives.height,
        "notes": notes,
    }
    path = out / MARKER
    path.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    return path
