"""Stages on single large files, end to end through `tracekit ingest`, against baselines measured in
the same run:

  chakra-et  a 1 M-node .et      vs one ParseFromString into a dict per node, and the bare decode
                                  floor (ParseFromString of every record, nothing else)
  kineto     a 200 MB Kineto     vs json.load + a plain loop over the events
  stream     a 4 GB Kineto read incrementally (peak memory), beside the whole-file path's peak on a
             smaller file (only when named: it writes 4 GB)

Inputs are generated into the work folder once (`--quick`: small ones, seconds). Each action runs
in a fresh process (`python -m bench.parsers ACTION JSON`, as bench.probe), so its peak memory is
its own.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.suite import ROOT, Context, Measure, Row, probe, ratio_row, stage

ET_NODES = 1_000_000
_NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
KINETO_BYTES = 200 << 20
STREAM_BYTES = 4 << 30

_OPS = (
    "aten::mm",
    "aten::add_",
    "aten::empty",
    "aten::as_strided",
    "aten::slice",
    "aten::relu",
    "aten::linear",
    "aten::addmm",
    "aten::t",
    "aten::view",
    "aten::copy_",
    "autograd::engine::evaluate_function: MmBackward0",
)


# ---------------------------------------------------------------------------------------------
# Inputs


def write_et(path: Path, nodes: int, seed: int = 1) -> Path:
    """A .et file of `nodes` nodes shaped like the PyTorch converter's: compute nodes with control
    and data dependencies, times, an is_cpu_op and an rf_id attribute, inputs on some; every 100th
    node an all-reduce with comm_type, comm_size and pg_name."""
    from tracekit.parsers import et_def_pb2 as pb
    from tracekit.writers.chakra_et import frame

    rnd = random.Random(seed)
    tmp = path.with_suffix(".part")
    clock = 1_000_000
    with open(tmp, "wb") as out:
        parts = [frame(pb.GlobalMetadata(version="0.0.4").SerializeToString())]
        for i in range(nodes):
            nid = i + 1
            if i % 100 == 99:
                node = pb.Node(
                    id=nid,
                    name="nccl:all_reduce",
                    type=pb.COMM_COLL_NODE,
                    ctrl_deps=[nid - 1],
                    start_time_micros=clock,
                    duration_micros=rnd.randint(10, 900),
                    attr=[
                        pb.AttributeProto(name="is_cpu_op", bool_val=False),
                        pb.AttributeProto(name="comm_type", int64_val=0),
                        pb.AttributeProto(name="comm_size", int64_val=rnd.randint(1, 1 << 26)),
                        pb.AttributeProto(name="pg_name", string_val="0"),
                    ],
                )
            else:
                node = pb.Node(
                    id=nid,
                    name=rnd.choice(_OPS),
                    type=pb.COMP_NODE,
                    ctrl_deps=[max(1, nid - rnd.randint(1, 5))],
                    data_deps=[nid - k for k in range(1, rnd.randint(0, 3) + 1) if nid - k > 0],
                    start_time_micros=clock,
                    duration_micros=rnd.randint(0, 400),
                    attr=[
                        pb.AttributeProto(name="is_cpu_op", bool_val=rnd.random() < 0.5),
                        pb.AttributeProto(name="rf_id", int64_val=nid * 3),
                    ],
                )
                if rnd.random() < 0.3:
                    node.inputs.values = f"[[{nid}, 0, 0, 512, 4, 'cpu']]"
                    node.inputs.shapes = "[[64, 128]]"
                    node.inputs.types = "['Tensor(float)']"
            clock += rnd.randint(1, 50)
            parts.append(frame(node.SerializeToString()))
            if len(parts) >= 65_536:
                out.write(b"".join(parts))
                parts = []
        out.write(b"".join(parts))
    tmp.replace(path)
    return path


def _kineto_step(rnd: random.Random, step: int, clock: float, ext: int, corr: int) -> tuple[list[str], float, int, int]:
    """One training step of a GPU rank: cpu ops launching kernels, and an NCCL all-reduce (its
    c10d op, record_param_comms, nccl: annotation, launch and kernel), as Kineto writes them."""
    events = []
    for _ in range(40):
        name = rnd.choice(_OPS)
        dur = rnd.randint(5, 60)
        ext += 1
        corr += 1
        events.append(
            f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 4242, "tid": 4242, "ts": {clock:.3f}, '
            f'"dur": {dur}, "args": {{"External id": {ext}, "Record function id": {ext}, "Ev Idx": {ext}, '
            f'"Input Dims": [[64, 128], [128, 256]], "Input type": ["float", "float"]}}}}'
        )
        events.append(
            f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4242, "tid": 4242, '
            f'"ts": {clock + 1:.3f}, "dur": 3, "args": {{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}}'
        )
        events.append(
            f'{{"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float, 128>(Params)", "pid": 0, "tid": 7, '
            f'"ts": {clock + 5:.3f}, "dur": {dur * 2}, "args": {{"External id": {ext}, "queued": 0, "device": 0, '
            f'"context": 1, "stream": 7, "correlation": {corr}, "registers per thread": 128, '
            f'"shared memory": 0, "blocks per SM": 1.5, "warps per SM": 4.0, "grid": [80, 1, 1], '
            f'"block": [256, 1, 1], "est. achieved occupancy %": 25}}}}'
        )
        clock += dur + 2
    ext += 1
    corr += 1
    size = rnd.randint(1 << 16, 1 << 24)
    comm = (
        f'"Collective name": "allreduce", "dtype": "Float", "In msg nelems": {size}, "Out msg nelems": {size}, '
        f'"Group size": 8, "In split size": "[]", "Out split size": "[]", "Process Group Name": "0", '
        f'"Process Group Description": "default_pg", "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"'
    )
    events += [
        f'{{"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 4242, "tid": 4242, "ts": {clock:.3f}, '
        f'"dur": 40, "args": {{"External id": {ext}, "Record function id": {ext}}}}}',
        f'{{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 4242, "tid": 4242, '
        f'"ts": {clock + 2:.3f}, "dur": 30, "args": {{"External id": {ext + 1}, "Record function id": {ext + 1}, '
        f"{comm}}}}}",
        f'{{"ph": "X", "cat": "user_annotation", "name": "nccl:all_reduce", "pid": 4242, "tid": 4242, '
        f'"ts": {clock + 3:.3f}, "dur": 20, "args": {{"External id": {ext + 2}}}}}',
        f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernelExC", "pid": 4242, "tid": 4242, '
        f'"ts": {clock + 10:.3f}, "dur": 4, "args": {{"External id": {ext + 1}, "correlation": {corr}}}}}',
        f'{{"ph": "X", "cat": "kernel", "name": "{_NCCL_KERNEL}", '
        f'"pid": 0, "tid": 20, "ts": {clock + 15:.3f}, "dur": {size // 4000 + 5}, "args": {{"External id": {ext + 1}, '
        f'"device": 0, "stream": 20, "correlation": {corr}, {comm}}}}}',
    ]
    return events, clock + 60, ext + 3, corr


def write_kineto(path: Path, size: int, seed: int = 1) -> Path:
    """A Kineto trace of about `size` bytes: GPU training steps (see _kineto_step), one rank of 8."""
    rnd = random.Random(seed)
    tmp = path.with_suffix(".part")
    head = (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [],\n'
        '  "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8, "pg_count": 1, "pg_config": '
        '[{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": 8, '
        '"ranks": [0, 1, 2, 3, 4, 5, 6, 7]}]},\n'
        '  "baseTimeNanoseconds": 1790857026000000000,\n  "traceEvents": [\n'
    )
    written, step, clock, ext, corr = 0, 0, 1000.0, 0, 0
    with open(tmp, "w") as out:
        out.write(head)
        first = True
        while written < size:
            events, clock, ext, corr = _kineto_step(rnd, step, clock, ext, corr)
            text = ",\n".join(events)
            out.write(("" if first else ",\n") + text)
            written += len(text) + 2
            first = False
            step += 1
        out.write('\n  ],\n  "traceName": "rank0.pt.trace.json"\n}\n')
    tmp.replace(path)
    return path


def _input(ctx: Context, name: str, write: Any, amount: int) -> Path:
    path = ctx.workdir / name
    if not path.is_file():
        write(path, amount)
    return path


# ---------------------------------------------------------------------------------------------
# Actions (each in a fresh process)


def _et_dicts(args: dict[str, Any]) -> dict[str, Any]:
    """The naive baseline: ParseFromString each record into a fresh Node, then a dict per node."""
    from tracekit.parsers import et_def_pb2
    from tracekit.parsers.chakra.framing import decode_varint

    data = Path(args["path"]).read_bytes()
    rows = []
    pos, first = 0, True
    while pos < len(data):
        length, pos = decode_varint(data, pos)
        if first:
            et_def_pb2.GlobalMetadata().ParseFromString(data[pos : pos + length])
        else:
            n = et_def_pb2.Node()
            n.ParseFromString(data[pos : pos + length])
            rows.append(
                {
                    "id": n.id,
                    "name": n.name,
                    "type": n.type,
                    "ctrl_deps": list(n.ctrl_deps),
                    "data_deps": list(n.data_deps),
                    "start_us": n.start_time_micros,
                    "duration_us": n.duration_micros,
                }
            )
        pos += length
        first = False
    return {"records": len(rows)}


def _et_floor(args: dict[str, Any]) -> dict[str, Any]:
    """The bare decode floor: ParseFromString of every record into a fresh message, nothing else."""
    from bench.probe import decode_records

    return {"records": decode_records(Path(args["path"]).read_bytes())}


def _et_parse(args: dict[str, Any]) -> dict[str, Any]:
    """The parse stage alone: tracekit's .et parser into a sink that drops the batches."""
    from tracekit.parsers.chakra import et as chakra_et
    from tracekit.sources import FileSource

    class Drop:
        def write(self, table: str, batch: Any) -> None:
            pass

    path = Path(args["path"])
    parse = chakra_et.parse_records if args.get("records") else chakra_et.parse
    meta = parse(FileSource(path, str(path)), Drop())
    return {"records": meta.node_count}


def _json_loop(args: dict[str, Any]) -> dict[str, Any]:
    """The naive Kineto baseline: json.load, then a plain loop taking every complete event's row
    and counting the collectives' kernels."""
    with open(args["path"]) as f:
        doc = json.load(f)
    rows = []
    collectives = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            rows.append((e.get("name"), e.get("cat"), e.get("ts"), e.get("dur")))
            if e.get("cat") == "kernel" and e.get("name", "").startswith("nccl"):
                collectives += 1
    return {"events": len(rows), "collectives": collectives}


def _ingest_within(args: dict[str, Any]) -> dict[str, Any]:
    """`ingest` (bench.probe) with the memory budget `args["budget"]` (TRACEKIT_MEMORY_BUDGET), then
    the dataset's row counts."""
    import os

    import tracekit
    from bench.probe import ACTIONS as PROBE_ACTIONS

    if args.get("budget"):
        os.environ["TRACEKIT_MEMORY_BUDGET"] = args["budget"]
    result = PROBE_ACTIONS["ingest"](args)
    with tracekit.open(args["out"]) as ds:
        for table in ("ops", "collectives"):
            result[table] = ds.sql(f"select count(*) from {table}").fetchall()[0][0]
    return result


ACTIONS = {
    "et_dicts": _et_dicts,
    "et_floor": _et_floor,
    "et_parse": _et_parse,
    "json_loop": _json_loop,
    "ingest_within": _ingest_within,
}


def run(action: str, args: dict[str, Any]) -> Measure:
    """One action of this module (or of bench.probe) in a fresh process."""
    if action not in ACTIONS:
        return probe(action, args)
    done = subprocess.run(
        [sys.executable, "-m", "bench.parsers", action, json.dumps(args)], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"bench.parsers {action} failed:\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Measure(figures.pop("wall"), figures.pop("cpu"), figures.pop("peak"), figures)


def _ingest(ctx: Context, path: Path, name: str, **options: Any) -> Measure:
    return run("ingest", {"paths": [str(path)], "out": str(ctx.fresh(name)), "workers": 1, **options})


# ---------------------------------------------------------------------------------------------
# Stages


@stage("chakra-et", "a 1 M-node .et through `tracekit ingest`, against ParseFromString + dict and the decode floor")
def chakra_et_stage(ctx: Context) -> list[Row]:
    nodes = 20_000 if ctx.quick else ET_NODES
    path = _input(ctx, f"nodes-{nodes}.et", write_et, nodes)
    mb = path.stat().st_size / 2**20
    dicts = run("et_dicts", {"path": str(path)})
    floor = run("et_floor", {"path": str(path)})
    parsed = run("et_parse", {"path": str(path)})
    ingested = _ingest(ctx, path, "chakra-et-dataset")
    name = f"{nodes:,}-node .et ({mb:.0f} MB)"
    return [
        ratio_row(
            "chakra-et",
            f"ingest {name}",
            ingested,
            dicts,
            "ParseFromString + dict",
            amount=nodes,
            unit="nodes",
            of="wall",
            target="<= 0.56x (1.8x faster)",
            limit=None if ctx.quick else 1 / 1.8,
        ),
        ratio_row(
            "chakra-et",
            "parse stage alone",
            parsed,
            floor,
            "bare decode floor",
            amount=nodes,
            unit="nodes",
            of="wall",
            target="<= 1.67x (0.6x the floor's speed)",
            limit=None if ctx.quick else 1 / 0.6,
        ),
        Row("chakra-et", "ParseFromString + dict (baseline)", dicts, nodes, "nodes"),
        Row("chakra-et", "bare decode floor", floor, nodes, "nodes"),
    ]


@stage("kineto", "a 200 MB Kineto trace through `tracekit ingest`, against json.load + a plain loop")
def kineto_stage(ctx: Context) -> list[Row]:
    size = (4 << 20) if ctx.quick else KINETO_BYTES
    path = _input(ctx, f"kineto-{size >> 20}MB.json", write_kineto, size)
    loop = run("json_loop", {"path": str(path)})
    ingested = _ingest(ctx, path, "kineto-dataset")
    return [
        ratio_row(
            "kineto",
            f"ingest {size >> 20} MB Kineto",
            ingested,
            loop,
            "json.load + loop",
            amount=path.stat().st_size / 2**20,
            unit="MB",
            of="wall",
            target="<= 0.33x (3x faster)",
            limit=None if ctx.quick else 1 / 3,
        ),
        Row("kineto", "json.load + loop (baseline)", loop, path.stat().st_size / 2**20, "MB"),
    ]


@stage(
    "stream",
    "a 4 GB Kineto trace read in pieces (peak memory), beside the whole-document path on 200 MB",
    default=False,
)
def stream_stage(ctx: Context) -> list[Row]:
    small_size, big_size = (4 << 20, 16 << 20) if ctx.quick else (KINETO_BYTES, STREAM_BYTES)
    small = _input(ctx, f"kineto-{small_size >> 20}MB.json", write_kineto, small_size)
    big = _input(ctx, f"kineto-{big_size >> 20}MB.json", write_kineto, big_size)
    forced = "1M" if ctx.quick else "100M"  # a budget that makes the small trace stream too
    whole = run("ingest_within", {"paths": [str(small)], "out": str(ctx.fresh("stream-whole")), "workers": 1})
    pieces = run(
        "ingest_within",
        {"paths": [str(small)], "out": str(ctx.fresh("stream-pieces")), "workers": 1, "budget": forced},
    )
    streamed = run(
        "ingest_within",
        {"paths": [str(big)], "out": str(ctx.fresh("stream-big")), "workers": 1, "budget": "4M" if ctx.quick else ""},
    )
    same = all(whole.counts[t] == pieces.counts[t] for t in ("ops", "collectives"))
    mb_small, mb_big = small.stat().st_size / 2**20, big.stat().st_size / 2**20
    rows = [
        Row("stream", f"{mb_small:.0f} MB Kineto, whole document", whole, mb_small, "MB"),
        ratio_row(
            "stream",
            f"{mb_small:.0f} MB Kineto, in pieces",
            pieces,
            whole,
            "the same, whole document",
            amount=mb_small,
            unit="MB",
            of="wall",
            target=f"same rows: {'yes' if same else 'NO'} ({pieces.counts['ops']:,} ops)",
        ),
        Row(
            "stream",
            f"{mb_big:,.0f} MB Kineto, in pieces",
            streamed,
            mb_big,
            "MB",
            target=f"peak <= 1,536 MiB ({streamed.counts['ops']:,} ops)",
            met=None if ctx.quick else streamed.peak_mib <= 1536,
        ),
    ]
    rows[1].met = same
    return rows


def main() -> None:
    from bench.probe import ACTIONS as PROBE_ACTIONS
    from bench.probe import main as probe_main

    PROBE_ACTIONS.update(ACTIONS)
    probe_main()


if __name__ == "__main__":
    main()
