"""Write a replay to OUT/: the flows and what derives from them, then each simulator format.

Always written (the canonical output; every simulator file is rendered from the flows):

    flows.parquet (or flows.csv)   one row per transfer (tracekit.replay.FLOW_COLUMNS; depends_on
                                   is a ;-separated list in CSV)
    collectives.parquet            one row per logical collective: algorithm, size S, start, flows, bytes
    matrix_gpu.parquet, matrix_host.parquet, matrix_rack.parquet   traffic matrices (matrices.py)
    indicators.parquet             the job's network indicators, one row (indicators.py)
    burstiness.parquet             network bytes per time bucket
    replay.duckdb                  tables flows and collectives, and every queries/replay/*.sql as a
                                   view over them: `duckdb OUT/replay.duckdb -c "from traffic_matrix_host"`
    replay.json                    job, placement, network model, Clos, algorithm, timing, notes

Formats: hpcc → OUT/hpcc/{flow,topology,trace}.txt; htsim → OUT/htsim/traffic.cm;
chakra → OUT/astra/workload.<rank>.et, comm_groups.json and run configs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.replay.clos import Clos

if TYPE_CHECKING:
    import polars as pl

    from tracekit.replay import Replay

FORMATS = ("flows", "hpcc", "htsim", "chakra")


def write_all(
    result: Replay,
    out: Path,
    formats: list[str],
    csv: bool = False,
    clos: Clos | None = None,
    htsim_binary: str = "eqds",
    include_intra_host: bool = False,
    qp_scaling: int = 1,
    ecmp_trials: int = 200,
) -> list[Path]:
    """Every output of `result` into `out` (see the module docstring); returns the files written."""
    import polars as pl

    from tracekit.replay.indicators import burstiness, network_indicators
    from tracekit.replay.matrices import gpu_matrix, host_level_matrix, rack_matrix

    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        raise InputError(f"unknown format(s) {unknown}; choose from {', '.join(FORMATS)}")
    clos = clos or Clos()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{out}: cannot create the output folder ({exc.strerror})") from exc
    written: list[Path] = []
    notes = list(result.notes)
    written.append(_write_flows(result.flows, out, csv))
    tables = {
        "collectives": result.collectives,
        "matrix_gpu": gpu_matrix(result.flows),
        "matrix_host": host_level_matrix(result.flows),
        "matrix_rack": rack_matrix(result.flows),
        "indicators": pl.DataFrame([network_indicators(result, qp_scaling, clos, ecmp_trials)]),
        "burstiness": burstiness(result.flows),
    }
    for name, frame in tables.items():
        path = out / f"{name}.parquet"
        frame.write_parquet(path)
        written.append(path)
    written.append(_write_duckdb(result, out))
    if "hpcc" in formats:
        from tracekit.replay.hpcc import write_hpcc

        written.extend(write_hpcc(result, out / "hpcc", clos, include_intra_host))
    if "htsim" in formats:
        from tracekit.replay.htsim import write_htsim

        written.extend(write_htsim(result, out / "htsim", htsim_binary, include_intra_host, notes))
    if "chakra" in formats:
        from tracekit.replay.astra import write_astra

        written.extend(write_astra(result, out / "astra", notes))
    written.append(_write_metadata(result, out, formats, clos, htsim_binary, include_intra_host, notes))
    return written


def _write_flows(flows: pl.DataFrame, out: Path, csv: bool) -> Path:
    import polars as pl

    if not csv:
        path = out / "flows.parquet"
        flows.write_parquet(path)
        return path
    path = out / "flows.csv"
    flows.with_columns(pl.col("depends_on").cast(pl.List(pl.String)).list.join(";")).write_csv(path)
    return path


def _write_duckdb(result: Replay, out: Path) -> Path:
    import duckdb

    from tracekit.dataset import STORAGE_VERSION
    from tracekit.queries import catalog_statement, query_names

    path = out / "replay.duckdb"
    path.unlink(missing_ok=True)
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS r (STORAGE_VERSION '{STORAGE_VERSION}')")
        con.register("flows_frame", result.flows.to_arrow())
        con.register("collectives_frame", result.collectives.to_arrow())
        con.execute("CREATE TABLE r.flows AS SELECT * FROM flows_frame")
        con.execute("CREATE TABLE r.collectives AS SELECT * FROM collectives_frame")
        con.execute("USE r")
        for name in query_names("replay"):
            con.execute(catalog_statement(name, folder="replay"))
        con.execute("USE memory")
        con.execute("DETACH r")
    finally:
        con.close()
    return path


def _write_metadata(
    result: Replay, out: Path, formats: list[str], clos: Clos, binary: str, intra: bool, notes: list[str]
) -> Path:
    flows = result.flows
    last_start = float(flows["start_s"].max()) if flows.height else 0.0  # type: ignore[arg-type]
    meta: dict[str, Any] = {
        "job": result.job,
        "label": result.label,
        "world_size": result.world_size,
        "algorithm": result.algorithm,
        "timing": result.timing,
        "size_convention": "S = collectives.in_bytes (Chakra comm_size: local shard for all-gather)",
        "placement": result.placement.describe(),
        "network_model": result.model.describe(),
        "clos": clos.describe(),
        "formats": formats,
        "network_flows_include_intra_host": intra,
        "htsim_binary": binary if "htsim" in formats else None,
        "hpcc_stop_time_s_at_least": round(last_start + 1.0, 3),
        "flows": flows.height,
        "bytes": int(flows["bytes"].sum()),
        "collectives": result.collectives.height,
        "notes": notes,
    }
    path = out / "replay.json"
    path.write_text(json.dumps(meta, indent=2) + "\n")
    return path
