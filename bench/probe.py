"""One measured action in a fresh process: `python -m bench.probe ACTION JSON-ARGS` prints one JSON
line: wall and CPU seconds, peak resident memory (MiB) and what the action counted.

CPU and memory include the parse workers (their own accounting, carried back by ingest: the pool's
processes are not this process's children to wait for). A fresh process per action keeps one
action's peak memory from hiding in another's.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any


def _decode_floor(args: dict[str, Any]) -> dict[str, Any]:
    """Read every .et file and decode every record with ParseFromString into a fresh message: what any
    Chakra reader must do at least (the varint framing in Python, as every ET reader here does)."""
    records = size = 0
    for path in sorted(Path(args["folder"]).rglob("*.et")):
        data = path.read_bytes()
        size += len(data)
        records += decode_records(data)
    return {"records": records, "bytes": size}


def decode_records(data: bytes) -> int:
    """Decode every record of one .et file's bytes into a fresh message, nothing else: how many."""
    from tracekit.parsers import et_def_pb2
    from tracekit.parsers.chakra.framing import decode_varint

    records, pos, first = 0, 0, True
    while pos < len(data):
        length, pos = decode_varint(data, pos)
        message = et_def_pb2.GlobalMetadata() if first else et_def_pb2.Node()
        message.ParseFromString(data[pos : pos + length])
        pos += length
        first = False
        records += 1
    return records


def _ingest(args: dict[str, Any]) -> dict[str, Any]:
    from tracekit.ingest import ingest

    report = ingest(args["paths"], args["out"], workers=args.get("workers"), executor=args.get("executor"))
    # One local worker parses in this process, whose CPU time counts it already.
    inline = args.get("workers") == 1 and args.get("executor") in (None, "local")
    return {
        "files": report.files_seen,
        "added": report.files_added,
        "errors": len(report.errors),
        "parse_cpu": 0.0 if inline else report.parse_cpu_seconds,
        "parse_peak": report.parse_peak_rss,
    }


def _queries(args: dict[str, Any]) -> dict[str, Any]:
    """Each query of `args["queries"]` ([name, params]) run to its last row, timed alone: the median of
    `args["repeat"]` runs (a machine shared with other work makes single runs noisy)."""
    import statistics

    import tracekit

    seconds, cpu = {}, {}
    with tracekit.open(args["dataset"]) as ds:
        assert ds.con is not None  # connected before timing: the action is the query
        for name, params in args["queries"]:
            runs, cpu_runs = [], []
            for _ in range(args.get("repeat", 1)):
                started, cpu_started = time.perf_counter(), time.process_time()
                for _ in ds.query(name, params or None).to_arrow_reader(100_000):
                    pass  # every row computed and handed over, none kept
                runs.append(time.perf_counter() - started)
                cpu_runs.append(time.process_time() - cpu_started)  # every thread of this process
            seconds[name], cpu[name] = statistics.median(runs), statistics.median(cpu_runs)
    return {"seconds": seconds, "cpu_seconds": cpu}


def _scan(args: dict[str, Any]) -> dict[str, Any]:
    """The baseline of the queries: one pass over the collectives' sizes."""
    import tracekit

    with tracekit.open(args["dataset"]) as ds:
        assert ds.con is not None
        started = time.perf_counter()
        rows = ds.sql("select count(*), sum(in_bytes) from collectives").fetchall()
        return {"rows": rows[0][0], "seconds": time.perf_counter() - started}


def _report(args: dict[str, Any]) -> dict[str, Any]:
    from tracekit.report import render_report

    html, _ = render_report(args["dataset"])
    return {"bytes": len(html.encode())}


def _report_queries(args: dict[str, Any]) -> dict[str, Any]:
    """The baseline of the report: the queries it runs, alone."""
    import tracekit
    from tracekit.report.data import load_fleet, load_job, pick_jobs

    with tracekit.open(args["dataset"]) as ds:
        data = load_fleet(ds)
        for job in pick_jobs(data.jobs, ())[0]:
            load_job(ds, job)
    return {}


def _fleet_replay(args: dict[str, Any]) -> dict[str, Any]:
    """`tracekit replay --fleet`'s work: every job replayed and timed on the default fabrics."""
    from tracekit.replay.fleet import replay_fleet

    result = replay_fleet(args["dataset"], workers=args.get("workers"))
    return {"jobs": result.jobs.height, "skipped": len(result.skipped), "fabric_rows": result.fabrics.height}


def _whatif(args: dict[str, Any]) -> dict[str, Any]:
    """A synthetic job (bench/bench_replay.py's mix) decomposed, then timed on two fabrics; with
    `decompose_only`, the decomposition alone (the baseline)."""
    from bench.bench_replay import synthetic_job
    from tracekit.fabric.presets import preset
    from tracekit.replay.decompose import decompose
    from tracekit.replay.fabric_whatif import time_shapes
    from tracekit.replay.placement import Placement
    from tracekit.replay.shapes import job_shapes

    job = synthetic_job(args["ranks"], args["collectives"])
    parts = decompose(job, Placement(), unique=True)
    comm = dict(zip(job.collectives["collective_id"].to_list(), job.collectives["comm_type"].to_list(), strict=True))
    shapes = job_shapes(job.job, job.world_size, parts, comm, Placement())
    flows = sum(s.size for s in shapes.shapes)
    if args.get("decompose_only"):
        return {"flows": flows}
    fabrics = [preset("clos2-1to1"), preset("dgx-h100-superpod")]
    table, _ = time_shapes(shapes, fabrics, ["ecmp", "spray"], seeds=args.get("seeds", 4))
    return {"flows": flows, "rows": table.height}


ACTIONS = {
    "decode_floor": _decode_floor,
    "ingest": _ingest,
    "queries": _queries,
    "scan": _scan,
    "report": _report,
    "report_queries": _report_queries,
    "fleet_replay": _fleet_replay,
    "whatif": _whatif,
}


def main() -> None:
    action, args = sys.argv[1], json.loads(sys.argv[2])
    wall, cpu = time.perf_counter(), time.process_time()
    result = ACTIONS[action](args)
    result["wall"] = time.perf_counter() - wall
    result["cpu"] = time.process_time() - cpu + result.pop("parse_cpu", 0.0)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result["peak"] = max(own, result.pop("parse_peak", 0)) / 2**20
    print(json.dumps(result))


if __name__ == "__main__":
    main()
