#!/usr/bin/env python3
"""Capture small, real distributed-training traces on CPU with the gloo backend.

Every job is launched as ``world_size`` local processes (torch.multiprocessing,
no torchrun).  Each rank records, for the *same* profiled steps:

* a PyTorch execution trace (``torch.profiler.ExecutionTraceObserver``) ->
  ``et_rank<r>.json.gz``
* a PyTorch profiler / Kineto Chrome trace (``torch.profiler.profile`` with
  ``record_shapes=True``, CPU activity, ``export_chrome_trace``) ->
  ``kineto_rank<r>.json.gz``

The observer is handed to the profiler (``execution_trace_observer=``), so the
profiler starts and stops it together with the Kineto trace: both files cover
exactly the same steps, and the observer records the ``## process_group:init ##``
node when it starts.

Usage (torch must be importable: ``pip install -e '.[capture]'`` or
``pip install torch==2.13.0``)::

    /path/to/venv-with-torch/bin/python sample_traces/capture/capture.py
    /path/to/venv-with-torch/bin/python sample_traces/capture/capture.py --jobs ddp_mlp moe_alltoall

Outputs go to ``sample_traces/captured/<job>/`` (override with ``--out``).

With ``--flight-recorder`` each rank instead keeps PyTorch's Flight Recorder on (gloo records into
it from torch 2.10 on; ``TORCH_FR_BUFFER_SIZE`` entries, 2000 by default) and, for the jobs of
``FR_JOBS``, runs a warm-up step, one step under the profiler (Kineto trace only), one more step
unprofiled, then dumps the recorder on request, as pickle and as JSON, under the file name
PyTorch's own dump on timeout uses (``<prefix><rank>``)::

    sample_traces/flight_recorder/<job>/kineto_rank<r>.json.gz   # the profiled step
    sample_traces/flight_recorder/<job>/nccl_trace_rank_<r>       # torch._C._distributed_c10d._dump_fr_trace()
    sample_traces/flight_recorder/<job>/nccl_trace_rank_<r>.json  # ... _dump_fr_trace_json()

so the dumps hold entries before, inside and after the profiled window.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.profiler import ExecutionTraceObserver, ProfilerAction, ProfilerActivity, profile

SEED = 1234
WARMUP_STEPS = 1  # not profiled (DDP rebuilds its buckets after the first step)
PROFILED_STEPS = 2

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO_ROOT / "sample_traces" / "captured"
DEFAULT_FR_OUT = REPO_ROOT / "sample_traces" / "flight_recorder"
# The jobs captured with the Flight Recorder: DDP, FSDP, and pipeline stages with a sub-group each.
FR_JOBS = ("ddp_mlp", "fsdp_mlp", "pipeline_p2p")
FR_BUFFER_SIZE = "2000"  # PyTorch's default, set explicitly: TORCH_FR_BUFFER_SIZE=0 turns it off


# --------------------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mlp(d_in: int, d_hidden: int, d_out: int, n_hidden: int) -> nn.Sequential:
    layers: list[nn.Module] = [nn.Linear(d_in, d_hidden), nn.ReLU()]
    for _ in range(n_hidden - 1):
        layers += [nn.Linear(d_hidden, d_hidden), nn.ReLU()]
    layers.append(nn.Linear(d_hidden, d_out))
    return nn.Sequential(*layers)


def _data_gen(rank: int) -> torch.Generator:
    # Per-rank deterministic data; model init uses the global seed (same on all ranks).
    return torch.Generator().manual_seed(SEED + 1000 * (rank + 1))


# --------------------------------------------------------------------------- jobs
# Each job builder runs on every rank after init_process_group and returns a
# zero-argument ``step`` callable: one training iteration.


def job_ddp_mlp(rank: int, world: int):
    """DDP on a small MLP; bucket_cap_mb small enough for several gradient buckets."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(SEED)
    model = _mlp(64, 256, 16, n_hidden=4)  # ~0.8 MB of fp32 params in 5 Linear layers
    # 0.25 MB buckets -> several allreduces per step (with a non-default
    # bucket_cap_mb, DDP also caps the first bucket at the same size).
    ddp = DDP(model, bucket_cap_mb=0.25)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = _data_gen(rank)

    def step():
        x = torch.randn(8, 64, generator=gen)
        y = torch.randn(8, 16, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()

    return step


def job_fsdp_mlp(rank: int, world: int):
    """FSDP2 (torch.distributed.fsdp.fully_shard) on CPU + gloo."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(SEED)
    mesh = init_device_mesh("cpu", (world,))
    model = _mlp(64, 128, 16, n_hidden=2)
    # one FSDP unit per Linear layer, plus the root
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    gen = _data_gen(rank)

    def step():
        x = torch.randn(8, 64, generator=gen)
        y = torch.randn(8, 16, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    return step


def job_moe_alltoall(rank: int, world: int):
    """MoE-like step: even all_to_all_single of token counts, uneven (all-to-allv)
    all_to_all_single dispatch and combine (autograd runs the reverse a2av in
    backward), then an allreduce of the dense (gate) gradients."""
    import warnings

    # Deprecated in favour of _functional_collectives, but this one is the
    # eager path (c10d::alltoall_base_ with explicit split sizes) we want to record.
    warnings.filterwarnings("ignore", message=".*all_to_all_single is deprecated.*")
    from torch.distributed.nn.functional import all_to_all_single as a2a_autograd

    d = 32
    torch.manual_seed(SEED)
    gate = nn.Linear(d, d)  # replicated "dense" part
    torch.manual_seed(SEED + 7 + rank)
    expert = _mlp(d, 64, d, n_hidden=1)  # this rank's expert (not replicated)
    params = list(gate.parameters()) + list(expert.parameters())
    opt = torch.optim.SGD(params, lr=0.01)
    gen = _data_gen(rank)
    step_no = [0]

    def step():
        s = step_no[0]
        step_no[0] += 1
        # deterministic, deliberately uneven routing: tokens rank -> expert j
        send_counts = torch.tensor([1 + (rank * 3 + j * 2 + s) % 5 for j in range(world)], dtype=torch.int64)
        n_tok = int(send_counts.sum())
        x = torch.randn(n_tok, d, generator=gen)
        opt.zero_grad(set_to_none=True)
        h = gate(x)
        # 1) even all_to_all_single: exchange per-destination token counts
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts)
        in_splits = send_counts.tolist()
        out_splits = recv_counts.tolist()
        # 2) uneven dispatch (all-to-allv)
        routed = a2a_autograd(torch.empty(sum(out_splits), d), h, out_splits, in_splits)
        y = expert(routed)
        # 3) uneven combine (reverse splits)
        back = a2a_autograd(torch.empty(n_tok, d), y, in_splits, out_splits)
        loss = (back - x).pow(2).mean()
        loss.backward()  # backward of each a2av is another a2av
        # 4) allreduce the replicated gate's gradients (flattened, one call)
        flat = torch.cat([p.grad.reshape(-1) for p in gate.parameters()])
        dist.all_reduce(flat)
        flat /= world
        off = 0
        for p in gate.parameters():
            n = p.numel()
            p.grad.copy_(flat[off : off + n].view_as(p))
            off += n
        opt.step()

    return step


def job_pipeline_p2p(rank: int, world: int):
    """Two pipeline stages x two data-parallel replicas.

    stage 0 = ranks {0, 2}, stage 1 = ranks {1, 3}; pipelines 0->1 and 2->3.
    data-parallel groups [0, 2] and [1, 3] (dist.new_group).
    Per step: broadcast of a small control tensor from rank 0 (world group),
    2 micro-batches: send/recv activations forward, gradients backward,
    then allreduce of gradients inside the data-parallel group.

    Each rank is in two groups (the world and its data-parallel pair). The eager c10d ops
    (dist.all_reduce, dist.broadcast) record their ProcessGroup as an opaque "<Object>" on gloo,
    and the profiler trace records nothing of it, so no trace would say which group an
    all-reduce ran in. The broadcast and the all-reduces are therefore functional collectives
    (torch.distributed._functional_collectives, as DTensor and compiled code issue them): the
    `_c10d_functional::*` op names its group (`group_name`, the pg_name of the process-group
    records) and calls the same c10d op and gloo work underneath. Send/recv have no functional
    form; they run in the world group.
    """
    import torch.distributed._functional_collectives as funcol

    assert world == 4, "pipeline_p2p is laid out for 4 ranks"
    # every rank must call new_group for both groups; group_desc shows up as
    # pg_desc in the ET process-group node and in Kineto's distributedInfo
    dp_groups = [
        dist.new_group([0, 2], group_desc="dp_stage0"),
        dist.new_group([1, 3], group_desc="dp_stage1"),
    ]
    stage = rank % 2
    dp_group = dp_groups[stage]
    peer = rank + 1 if stage == 0 else rank - 1
    d, mb, n_micro = 32, 4, 2
    torch.manual_seed(SEED + stage)  # same weights within a stage
    net = _mlp(d, 64, d, n_hidden=1)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    gen = _data_gen(rank)

    def step():
        ctrl = torch.zeros(4)
        if rank == 0:
            ctrl += torch.tensor([0.01, 1.0, float(n_micro), 0.0])
        ctrl = funcol.wait_tensor(funcol.broadcast(ctrl, 0, dist.group.WORLD))
        opt.zero_grad(set_to_none=True)
        for _ in range(n_micro):
            if stage == 0:
                x = torch.randn(mb, d, generator=gen)
                act = net(x)
                dist.send(act.detach().contiguous(), dst=peer)
                g = torch.empty(mb, d)
                dist.recv(g, src=peer)
                act.backward(g)
            else:
                a = torch.empty(mb, d)
                dist.recv(a, src=peer)
                a.requires_grad_(True)
                out = net(a)
                loss = out.pow(2).mean()
                loss.backward()
                dist.send(a.grad.contiguous(), dst=peer)
        for p in net.parameters():
            p.grad.copy_(funcol.wait_tensor(funcol.all_reduce(p.grad, "sum", dp_group)))
            p.grad /= dist.get_world_size(dp_group)
        opt.step()

    return step


JOBS = {
    "ddp_mlp": (job_ddp_mlp, 4),
    "fsdp_mlp": (job_fsdp_mlp, 4),
    "moe_alltoall": (job_moe_alltoall, 4),
    "pipeline_p2p": (job_pipeline_p2p, 4),
}


# --------------------------------------------------------------------------- worker


def _record_every_step(step: int) -> ProfilerAction:
    return ProfilerAction.RECORD


def _worker(rank: int, job: str, world: int, port: int, out_dir: str, steps: int):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        step = JOBS[job][0](rank, world)
        for _ in range(WARMUP_STEPS):
            step()
        dist.barrier()

        out = Path(out_dir)
        et_path = out / f"et_rank{rank}.json.gz"
        kineto_path = out / f"kineto_rank{rank}.json.gz"
        et = ExecutionTraceObserver().register_callback(str(et_path))
        # The profiler starts/stops the observer with the Kineto trace and
        # finalises (gzips) the ET file on exit.
        with profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            # A schedule (always RECORD) makes prof.step() emit ProfilerStep#<n>
            # markers, which then appear in both the Kineto trace and the ET.
            schedule=_record_every_step,
            execution_trace_observer=et,
        ) as prof:
            for i in range(steps):
                step()
                if i + 1 < steps:  # no empty trailing ProfilerStep#<steps>
                    prof.step()
        prof.export_chrome_trace(str(kineto_path))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _worker_fr(rank: int, job: str, world: int, port: int, out_dir: str, steps: int):
    """A rank of a Flight Recorder capture: warm-up, `steps` profiled steps, one more step, dump."""
    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ["TORCH_FR_BUFFER_SIZE"] = FR_BUFFER_SIZE  # read when the recorder is first used
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        step = JOBS[job][0](rank, world)
        for _ in range(WARMUP_STEPS):
            step()
        dist.barrier()
        out = Path(out_dir)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, schedule=_record_every_step) as prof:
            for i in range(steps):
                step()
                if i + 1 < steps:
                    prof.step()
        prof.export_chrome_trace(str(out / f"kineto_rank{rank}.json.gz"))
        step()  # after the profiled window: only the recorder sees it
        dist.barrier()
        # The dump on request, with stack traces, as ProcessGroupNCCL's dump on timeout writes it.
        pickled = _dump_fr_trace(includeCollectives=True, includeStackTraces=True, onlyActive=False)
        (out / f"nccl_trace_rank_{rank}").write_bytes(pickled)
        as_json = _dump_fr_trace_json(includeCollectives=True, onlyActive=False)
        (out / f"nccl_trace_rank_{rank}.json").write_bytes(as_json if isinstance(as_json, bytes) else as_json.encode())
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_job(job: str, out_root: Path, steps: int, flight_recorder: bool = False) -> None:
    world = JOBS[job][1]
    out_dir = out_root / job
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    port = _free_port()
    t0 = time.time()
    worker = _worker_fr if flight_recorder else _worker
    mp.spawn(worker, args=(job, world, port, str(out_dir), steps), nprocs=world, join=True)
    sizes = {p.name: p.stat().st_size for p in sorted(out_dir.iterdir())}
    print(f"[{job}] {world} ranks, {time.time() - t0:.1f}s, {sum(sizes.values()) / 1024:.0f} KiB")
    for name, size in sizes.items():
        print(f"    {name:24s} {size / 1024:7.1f} KiB")
    if not flight_recorder:
        _check(out_dir, world)


# --------------------------------------------------------------------------- checks / summary

_COMM_PREFIXES = ("c10d::", "gloo:", "record_param_comms", "nccl:")


def _load(out_dir: Path, r: int) -> tuple[dict, dict]:
    with gzip.open(out_dir / f"et_rank{r}.json.gz", "rt") as f:
        et = json.load(f)
    with gzip.open(out_dir / f"kineto_rank{r}.json.gz", "rt") as f:
        kt = json.load(f)
    return et, kt


def _attr(node: dict, name: str):
    for a in node["attrs"]:
        if a["name"] == name:
            return a["value"]
    return None


def _et_comms(et: dict) -> list[dict]:
    return [n for n in et["nodes"] if n["name"].startswith(_COMM_PREFIXES)]


def _kt_comms(kt: dict) -> list[dict]:
    return [e for e in kt["traceEvents"] if e.get("ph") == "X" and e.get("name", "").startswith(_COMM_PREFIXES)]


def _check(out_dir: Path, world: int) -> None:
    """Sanity checks: PG init node in the ET, pg_config in Kineto, and the
    communication ops of ET and Kineto pair up one-to-one by record-function id."""
    for r in range(world):
        et, kt = _load(out_dir, r)
        names = [n["name"] for n in et["nodes"]]
        if "## process_group:init ##" not in names:
            print(f"    WARNING rank {r}: no '## process_group:init ##' node in ET")
        if "pg_config" not in kt.get("distributedInfo", {}):
            print(f"    WARNING rank {r}: no distributedInfo.pg_config in Kineto trace")
        et_ids = {(_attr(n, "rf_id"), n["name"]) for n in _et_comms(et)}
        kt_ids = {(e["args"].get("Record function id"), e["name"]) for e in _kt_comms(kt)}
        if et_ids != kt_ids:
            print(
                f"    WARNING rank {r}: ET/Kineto comm ops differ by (rf_id, name): "
                f"only ET {sorted(et_ids - kt_ids)[:5]}, only Kineto {sorted(kt_ids - et_ids)[:5]}"
            )
        else:
            print(f"    rank {r}: {len(et_ids)} comm ops, ET rf_id == Kineto 'Record function id'")


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def summarize(out_root: Path) -> str:
    """Markdown table of the c10d collectives each rank's ET holds."""
    lines = [
        "| job | rank | c10d op (gloo op) | calls | elements per call (dtype) |",
        "|---|---|---|---|---|",
    ]
    for job_dir in sorted(p for p in out_root.iterdir() if p.is_dir()):
        ranks = sorted(int(p.name[len("et_rank") : -len(".json.gz")]) for p in job_dir.glob("et_rank*.json.gz"))
        for r in ranks:
            et, _ = _load(job_dir, r)
            nodes = et["nodes"]
            by_op: dict[str, list[str]] = {}
            gloo_for: dict[str, set[str]] = {}
            c10d = [n for n in nodes if n["name"].startswith("c10d::")]
            gloo = [n for n in nodes if n["name"].startswith("gloo:")]
            # A gloo:* record function is opened inside its c10d op, so it belongs to
            # the c10d op with the largest rf_id below its own.
            c10d_rf = sorted((_attr(n, "rf_id"), n["name"]) for n in c10d)
            for g in gloo:
                owner = [name for rf, name in c10d_rf if rf < _attr(g, "rf_id")]
                if owner:
                    gloo_for.setdefault(owner[-1], set()).add(g["name"])
            for n in c10d:
                shapes, types, vals = n["inputs"]["shapes"], n["inputs"]["types"], n["inputs"]["values"]
                tens = [
                    (sh, ty)
                    for sh, ty in zip(shapes, types, strict=True)
                    if ty.startswith(("Tensor", "GenericList[Tensor"))
                ]
                desc = []
                for sh, ty in tens:
                    if ty.startswith("GenericList"):
                        desc.append("+".join(str(_numel(x)) for x in sh))
                    else:
                        desc.append(str(_numel(sh)))
                dtype = tens[0][1].split("(")[1].rstrip(")]") if tens else "?"
                d = "->".join(reversed(desc)) if len(desc) == 2 else ",".join(desc)
                splits = [v for v, ty in zip(vals, types, strict=True) if ty.startswith("GenericList[Int")]
                if splits:
                    d += f" splits out={splits[0]} in={splits[1]}"
                by_op.setdefault(n["name"], []).append(f"{d} ({dtype})")
            for op, calls in by_op.items():
                uniq: dict[str, int] = {}
                for c in calls:
                    uniq[c] = uniq.get(c, 0) + 1
                sizes = "; ".join(f"{c} x{k}" if k > 1 else c for c, k in uniq.items())
                g = "/".join(sorted(gloo_for.get(op, ())))
                lines.append(f"| {job_dir.name} | {r} | `{op}` (`{g}`) | {len(calls)} | {sizes} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output root")
    ap.add_argument("--jobs", nargs="*", default=list(JOBS), choices=list(JOBS))
    ap.add_argument("--steps", type=int, default=PROFILED_STEPS, help="profiled steps")
    ap.add_argument("--summary", action="store_true", help="only print a table of what --out holds")
    ap.add_argument(
        "--flight-recorder",
        action="store_true",
        help=f"capture Flight Recorder dumps and a profiler trace per rank of {', '.join(FR_JOBS)} "
        "(default --out sample_traces/flight_recorder, --steps 1)",
    )
    args = ap.parse_args(argv)
    if args.summary:
        print(summarize(args.out))
        return 0
    print(f"torch {torch.__version__}, gloo available: {dist.is_gloo_available()}")
    if args.flight_recorder:
        out = DEFAULT_FR_OUT if args.out == DEFAULT_OUT else args.out
        steps = 1 if args.steps == PROFILED_STEPS else args.steps
        for job in args.jobs if args.jobs != list(JOBS) else FR_JOBS:
            run_job(job, out, steps, flight_recorder=True)
        return 0
    for job in args.jobs:
        run_job(job, args.out, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
