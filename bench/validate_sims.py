"""The model against the simulators: tracekit's timing of a collective on a fabric next to htsim's and
HPCC's completion of the same flows on the same topology (issue 19, item 4).

    python -m bench.validate_sims [--quick] [--markdown] [--ranks 8 16] [--keep DIR] [--json FILE]

The grid: one collective per job, written as Chakra traces and ingested (the user's path), ranks 8, 16,
32, 64 (--quick: 8, 16) with ONE GPU PER HOST, so every flow crosses the network (with 8 GPUs per host
the simulators would see only the inter-host part of each collective and htsim would chain it through
the dropped NVLink hops, research/simulators-run-2.md §4.6; the network model is what is validated
here). Collectives: ring all-reduce and tree all-reduce of 16 MiB, direct all-to-all of 1 MiB per
peer. NCCL protocol Simple (LL and LL128 put flag bytes on the wire that the simulators' flows do not
carry: the same bytes on both sides). Fabrics: two-tier Clos, 4 hosts (NICs) per leaf, uplinks at the
NIC rate (400 Gb/s), 4 spines (1:1) or 2 spines (2:1); 1 µs per link. These are the shapes
tracekit's htsim writer can express as a `-topo` file (htsim's leaf-spine runs every link at one rate
and oversubscribes by whole uplinks): the presets clos2-1to1/2to1 (16 spines, 2 hosts per rack) are
not, and would go to htsim's built-in fat tree. Routings: ECMP (the model: median over 8 hash seeds)
and spraying (the model: every flow split evenly over the equal-cost paths).

Per case, the replay (`tracekit.replay.replay` + `write_outputs(..., ["htsim", "hpcc"], fabric=...)`)
writes the simulators' files, and:

* model: `Timer(shapes).run(network, routing, seed)` (the waves model) on the fabric's Network, with
  NCCL's per-hop and base latencies (tuning.cc hwLat/baseLat: 14 µs per network hop for Simple) set
  to zero — the simulators model none of NCCL's software, only the wire — and its full time with them
  (`model+nccl`); `exact`: the event-driven fluid model (`exact=True`) on the same terms.
* htsim: `htsim_uec` on the replay's traffic.cm and topology.topo, at the run.sh's `-linkspeed` and
  `-end`; ECMP = `-paths 1` (one entropy per connection: the switches hash every packet of it to one
  path), median of seeds 1-3; spraying = `-paths 64` (64 entropies round-robin per packet). Both
  `-load_balancing_algo oblivious` (no path feedback: the model's routings react to nothing either).
* HPCC: the replay's hpcc/run.sh (HPCC CC, ns-3 per-flow ECMP), ECMP rows only.

A simulator's time is the collective's critical path re-timed with the simulated flow completion
times: each flow's FCT (finish - its start in the simulator), chained along the replay's
dependencies (end = latest end of what it waits for + FCT). HPCC's flow.txt carries no dependencies
(every flow starts at the replay's time) and htsim's .cm lets a flow fire one trigger only (most of a
pipelined tree's flows start at their replayed time), so their raw last finish is anchored to the
replay's own schedule; chaining FCTs measures the simulators alone (`raw_us` in --json keeps the
raw figure; for the fully triggered ring and the dependency-free all-to-all they agree). Ratio =
model / simulator. Every run must finish every flow, with the replay's flow count and bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tracekit.fabric.topology import NIC, FabricSpec, Network
from tracekit.ingest import ingest
from tracekit.replay import NcclOptions, Placement, Replay, replay, write_outputs
from tracekit.replay.nccl import tuning
from tracekit.replay.timing import Timer
from tracekit.writers.chakra_et import EtWriter, comm_node

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TRACEKIT_SHARED", ROOT.parent / "shared"))
SIMS = SHARED / "sims"
MIB = 1 << 20
RANKS, QUICK_RANKS = (8, 16, 32, 64), (8, 16)
MODEL_SEEDS = 8
HTSIM_SEEDS = (1, 2, 3)
SPRAY_PATHS = 64
PLACEMENT = Placement(gpus_per_host=1, hosts_per_rack=4)
OPTIONS = NcclOptions(protocol="Simple")
FABRICS = {
    "clos 1:1": FabricSpec(kind="clos2", name="clos 1:1", spines=4, oversubscription=1.0),
    "clos 2:1": FabricSpec(kind="clos2", name="clos 2:1", spines=2, oversubscription=2.0),
}
ROUTINGS = ("ecmp", "spray")
# HPCC costs 8-26 s per GiB here (research/simulators-run-2.md §0): cases above this are left to --all-hpcc.
HPCC_MAX_BYTES = 5 << 29
STRETCHES = (1.25, 1.6, 2.0, 3.0)
LOOSE_SLACK_US = 1.0  # htsim_uec reads starts in whole µs, HPCC in whole ns
TIMEOUT_S = 300.0  # one simulator run; a run over it is killed and its row marked failed


@dataclass(frozen=True)
class Collective:
    name: str
    comm_type: str
    algorithm: str
    per_rank_mib: int  # all-reduce: the buffer; all-to-all: per peer

    def comm_size(self, ranks: int) -> int:
        return self.per_rank_mib * MIB * (ranks if self.comm_type == "ALL_TO_ALL" else 1)


COLLECTIVES = (
    Collective("ring all-reduce", "ALL_REDUCE", "ring", 16),
    Collective("tree all-reduce", "ALL_REDUCE", "tree", 16),
    Collective("all-to-all", "ALL_TO_ALL", "auto", 1),
)


@dataclass
class Row:
    ranks: int
    collective: str
    fabric: str
    routing: str
    flows: int
    network_bytes: int
    model_us: float  # waves, NCCL latencies zeroed (what the simulators simulate)
    model_nccl_us: float  # waves with NCCL's latencies: tracekit's own figure
    exact_us: float
    htsim: list[SimRun] = field(default_factory=list)
    hpcc: SimRun | None = None
    error: str = ""  # the replay or the model failed: no times

    def failed(self, simulator: str) -> bool:
        """Whether a run of the simulator failed (crashed, timed out, or left flows unfinished)."""
        return any(r.error or not np.isfinite(r.chained_us) for r in self.runs(simulator))

    @property
    def case(self) -> str:
        return f"{self.ranks} {self.collective}, {self.fabric}, {self.routing}"

    def sim_us(self, simulator: str) -> float | None:
        """The simulator's time (median over htsim's ECMP seeds); None where a run failed."""
        runs = self.runs(simulator)
        return statistics.median(r.chained_us for r in runs) if runs and not self.failed(simulator) else None

    def reference_us(self, simulator: str) -> float | None:
        """The model's time the simulator's is compared with: seen through the same lens where the
        simulator's file could not carry the dependencies (see `loose_run`), else the model's own."""
        runs = self.runs(simulator)
        if not runs:
            return None
        lens = [r.model_lens_us for r in runs if np.isfinite(r.model_lens_us)]
        return statistics.median(lens) if lens else self.model_us

    def ratio(self, simulator: str) -> float | None:
        """model / simulator."""
        sim, model = self.sim_us(simulator), self.reference_us(simulator)
        return model / sim if sim and model and np.isfinite(sim) and np.isfinite(model) else None

    def own_ratio(self, simulator: str) -> float | None:
        """The model's own time (no lens) / the simulator's."""
        sim = self.sim_us(simulator)
        return self.model_us / sim if sim and np.isfinite(sim) and np.isfinite(self.model_us) else None

    def runs(self, simulator: str) -> list[SimRun]:
        return self.htsim if simulator == "htsim" else [self.hpcc] if self.hpcc else []


def have_simulators() -> bool:
    return (SIMS / "bin" / "htsim_uec").is_file() and (SIMS / "bin" / "hpcc_third").is_file()


# ---------------------------------------------------------------------------------------------
# Jobs: one collective per job, as Chakra traces, ingested


def job_name(ranks: int, collective: Collective) -> str:
    return f"{collective.comm_type.lower()}-{collective.algorithm}-{ranks}"


def build_dataset(root: Path, ranks: list[int], collectives: tuple[Collective, ...] = COLLECTIVES) -> Path:
    """One job per (ranks, collective): every rank's .et holds the one collective. The dataset's path."""
    for n in ranks:
        for c in collectives:
            name = job_name(n, c)
            folder = root / "traces" / name
            folder.mkdir(parents=True, exist_ok=True)
            for rank in range(n):
                with EtWriter(folder / f"{name}.{rank}.et") as writer:
                    writer.write_metadata()
                    writer.write_node(comm_node(0, name, c.comm_type, c.comm_size(n), start_us=0, duration_us=100))
    dataset = root / "dataset"
    report = ingest([root / "traces"], dataset, workers=1)
    if not report.ok:
        raise RuntimeError(f"ingest of the grid's jobs failed: {report.errors[:3]}")
    return dataset


# ---------------------------------------------------------------------------------------------
# The model


@contextlib.contextmanager
def without_nccl_latency() -> Iterator[None]:
    """NCCL's per-hop and base latencies (tuning.cc hwLat, baseLat) at zero while the Timer runs:
    what is left is the wire (link latencies and fair-share rates), what the simulators model."""
    hw = {link: {alg: (0.0, 0.0, 0.0) for alg in table} for link, table in tuning.HW_LATENCY.items()}
    base = {alg: (0.0, 0.0, 0.0) for alg in tuning.BASE_LATENCY}
    saved = tuning.HW_LATENCY, tuning.BASE_LATENCY
    tuning.HW_LATENCY, tuning.BASE_LATENCY = hw, base
    try:
        yield
    finally:
        tuning.HW_LATENCY, tuning.BASE_LATENCY = saved


def model_us(result: Replay, network: Network, routing: str, exact: bool = False, seeds: int = MODEL_SEEDS) -> float:
    """The collective's time on `network` (µs): the median over ECMP seeds, one run otherwise."""
    timer = Timer(result.shapes)
    runs = [timer.run(network, routing, seed, exact).durations(result.shapes)[0] for seed in range(seeds)]
    return statistics.median(runs) * 1e6


# ---------------------------------------------------------------------------------------------
# The simulators


def network_flows(result: Replay) -> pl.DataFrame:
    """The flows the simulators get (one GPU per host: every flow of the collective), by flow id."""
    flows = result.flows.filter(pl.col("bytes") > 0).sort("flow_id")
    if flows.filter(pl.col("src_host") == pl.col("dst_host")).height:
        raise ValueError(f"job {result.job}: flows inside a host; the grid needs one GPU per host")
    return flows


def chain(flows: pl.DataFrame, fct_us: np.ndarray) -> tuple[np.ndarray, float]:
    """Each flow's start when flow i (in flow-id order; dependencies point to earlier flows) lasts
    fct_us[i] from the end of the last flow it waits for; and the last end (µs)."""
    position = {fid: i for i, fid in enumerate(flows["flow_id"].to_list())}
    start, end = np.zeros(len(fct_us)), np.zeros(len(fct_us))
    for i, deps in enumerate(flows["depends_on"].to_list()):
        start[i] = max((end[position[d]] for d in deps or ()), default=0.0)
        end[i] = start[i] + fct_us[i]
    return start, float(end.max(initial=0.0))


@dataclass
class Measured:
    """One simulator run: flows finished of expected, bytes moved, each flow's FCT (µs, flow-id order)
    and the raw last finish (µs after the first start)."""

    finished: int
    expected: int
    bytes: int
    fct_us: np.ndarray
    starts_us: np.ndarray  # each flow's start in the simulator
    raw_us: float
    wall_s: float

    @property
    def complete(self) -> bool:
        return self.finished == self.expected and bool(np.isfinite(self.fct_us).all())


def bounded(command: list[str], timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """`command` run to its end or killed, with every process it started, after `timeout` seconds
    (subprocess.run's timeout kills the direct child only: HPCC's run.sh would leave hpcc_third
    running, holding the output pipes open)."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                          **kwargs) as process:  # fmt: skip
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


CM_LINE = re.compile(r"^(\d+)->(\d+) id (\d+) (?:start (\d+)|trigger (\d+)) size (\d+)(?: send_done_trigger (\d+))?$")
FINISHED = re.compile(r"flowId (\d+) .*?finished at ([0-9.e+-]+)")


def run_options(out: Path) -> tuple[int, int]:
    """-linkspeed (Mb/s) and -end (µs) of the replay's htsim/run.sh."""
    text = (out / "htsim" / "run.sh").read_text()
    speed = re.search(r"-linkspeed (\d+)", text)
    end = re.search(r"-end (\d+)", text)
    if not speed or not end or "-topo topology.topo" not in text:
        raise ValueError(f"{out}/htsim/run.sh: no -linkspeed, -end or -topo")
    return int(speed[1]), int(end[1])


def htsim_connections(out: Path, flows: pl.DataFrame) -> list[re.Match[str]]:
    """The connections of the replay's traffic.cm, checked to be its flows in flow-id order."""
    lines = [CM_LINE.match(line) for line in (out / "htsim" / "traffic.cm").read_text().splitlines()]
    conns = [m for m in lines if m]
    if [int(m[6]) for m in conns] != flows["bytes"].to_list():
        raise ValueError(f"{out}/htsim/traffic.cm: its connections are not the replay's flows in order")
    return conns


def anchored(out: Path, flows: pl.DataFrame) -> int:
    """Connections of traffic.cm that wait for other flows but start at a replayed time (htsim lets a
    connection fire one trigger only)."""
    conns = htsim_connections(out, flows)
    waits = [bool(d) for d in flows["depends_on"].to_list()]
    return sum(1 for m, w in zip(conns, waits, strict=True) if w and m[4] is not None)


def run_htsim(out: Path, flows: pl.DataFrame, routing: str, seed: int, timeout: float | None = None) -> Measured:
    """htsim_uec on the replay's traffic.cm and topology.topo (see the module docstring)."""
    folder = out / "htsim"
    conns = htsim_connections(out, flows)
    speed, end = run_options(out)
    paths = "1" if routing == "ecmp" else str(SPRAY_PATHS)
    command = [str(SIMS / "bin" / "htsim_uec"), "-tm", "traffic.cm", "-topo", "topology.topo",
               "-linkspeed", str(speed), "-end", str(end), "-paths", paths,
               "-load_balancing_algo", "oblivious", "-seed", str(seed)]  # fmt: skip
    started = time.perf_counter()
    done = bounded(command, timeout or TIMEOUT_S, cwd=folder)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{folder}: htsim_uec exited {done.returncode}: {done.stderr[-500:]}")
    finish = {int(i): float(t) for i, t in FINISHED.findall(done.stdout)}
    # A triggered connection starts when the last connection firing its trigger finishes (uec.cpp
    # checkFinished activates the send_done trigger where it prints "finished").
    fired_by: dict[int, list[int]] = {}
    for m in conns:
        if m[7]:
            fired_by.setdefault(int(m[7]), []).append(int(m[3]))
    fct, starts = np.full(len(conns), np.nan), np.full(len(conns), np.nan)
    for k, m in enumerate(conns):
        conn = int(m[3])
        if conn not in finish:
            continue
        if m[4] is not None:
            starts[k] = float(m[4])  # whole µs for htsim_uec
        else:
            starts[k] = max((finish.get(c, np.nan) for c in fired_by.get(int(m[5]), [])), default=np.nan)
        fct[k] = finish[conn] - starts[k]
    moved = sum(int(m[6]) for m in conns if int(m[3]) in finish)
    return Measured(len(finish), len(conns), moved, fct, starts, max(finish.values(), default=0.0), wall)


def run_hpcc(out: Path, flows: pl.DataFrame, timeout: float | None = None) -> Measured:
    """HPCC's ns-3 (scratch/third) through the replay's hpcc/run.sh; each fct.txt line matched to its flow."""
    folder = out / "hpcc"
    rows = [line.split() for line in (folder / "flow.txt").read_text().splitlines()[1:] if line.strip()]
    # write_hpcc's order: by start (whole ns), then flow id.
    ordered = flows.with_columns(start_ns=(pl.col("start_s") * 1e9).round().cast(pl.Int64)).sort("start_ns", "flow_id")
    expect = list(zip(ordered["src_nic"].to_list(), ordered["dst_nic"].to_list(), ordered["bytes"].to_list(),
                      strict=True))  # fmt: skip
    if [(int(r[0]), int(r[1]), int(r[4])) for r in rows] != expect:
        raise ValueError(f"{folder}/flow.txt: its lines are not the replay's flows in start order")
    # third.cc numbers the source ports of each (src, dst) pair from 10000 in flow.txt order.
    key_of: dict[tuple[int, int, int], int] = {}
    seen: dict[tuple[int, int], int] = {}
    for line, fid in enumerate(ordered["flow_id"].to_list()):
        pair = (int(rows[line][0]), int(rows[line][1]))
        key_of[(*pair, 10000 + seen.get(pair, 0))] = fid
        seen[pair] = seen.get(pair, 0) + 1
    fct_file = folder / "fct.txt"
    fct_file.unlink(missing_ok=True)
    env = dict(os.environ, SIMS=str(SIMS))
    started = time.perf_counter()
    bounded(["sh", str(folder / "run.sh")], timeout or TIMEOUT_S, env=env)
    wall = time.perf_counter() - started
    lines = [line.split() for line in fct_file.read_text().splitlines() if line.strip()] if fct_file.is_file() else []
    position = {fid: i for i, fid in enumerate(flows["flow_id"].to_list())}
    fct, starts = np.full(flows.height, np.nan), np.full(flows.height, np.nan)
    moved, first, last = 0, float("inf"), 0.0
    for sip, dip, sport, _, size, start_ns, fct_ns, *_ in lines:
        src, dst = (int(sip, 16) >> 8) & 0xFFFF, (int(dip, 16) >> 8) & 0xFFFF
        fid = key_of.get((src, dst, int(sport)))
        if fid is None:
            raise ValueError(f"{fct_file}: a finished flow {src}->{dst} port {sport} that flow.txt does not hold")
        fct[position[fid]] = int(fct_ns) / 1e3
        starts[position[fid]] = int(start_ns) / 1e3
        moved += int(size)
        first, last = min(first, int(start_ns) / 1e3), max(last, (int(start_ns) + int(fct_ns)) / 1e3)
    return Measured(len(lines), len(rows), moved, fct, starts, last - first if lines else 0.0, wall)


@dataclass
class SimRun:
    """A simulator's time for one case: flows finished of expected, bytes moved, the critical path of
    its FCTs (µs), the raw last finish (µs), the schedule's stretch over the model's and the runs it
    took, the model's own time seen the same way (µs; see `loose_run`) and wall seconds of every run."""

    finished: int
    expected: int
    bytes: int
    chained_us: float
    raw_us: float
    stretch: float
    runs: int
    model_lens_us: float
    wall_s: float
    error: str = ""  # the run crashed or timed out: no times

    @classmethod
    def failure(cls, expected: int, error: BaseException) -> SimRun:
        nan = float("nan")
        text = f"timed out after {error.timeout:.0f} s" if isinstance(error, subprocess.TimeoutExpired) else str(error)
        return cls(0, expected, 0, nan, nan, nan, 0, nan, 0.0, f"{type(error).__name__}: {text}"[:300])


SIM_FAILURES = (subprocess.SubprocessError, RuntimeError, OSError, ValueError)


def attempt(expected: int, run: Any) -> SimRun:
    """`run()`, or a failed SimRun where the simulator crashed, timed out or wrote what cannot be read."""
    try:
        return run()
    except SIM_FAILURES as error:
        print(f"    failed: {error}"[:300], file=sys.stderr, flush=True)
        return SimRun.failure(expected, error)


def loose_run(
    result: Replay, network: Network, routing: str, seed: int, out: Path, simulator: str, run: Any, anchored: bool,
    first_stretch: float = STRETCHES[0],
) -> SimRun:  # fmt: skip
    """A simulator's FCTs with no flow started before what it waits for has ended in the simulator.

    Where the simulator's file cannot say that a flow waits (`anchored`: every HPCC flow; a pipelined
    tree's flows in htsim, which lets a connection fire one trigger), the flow starts at its time in
    the model's schedule stretched by STRETCHES[k]: each run is checked (every such flow's start at or
    after the simulated end of each flow it waits for) and the next stretch tried until one holds.
    Stretching keeps the flows that start together in the model together (a step's flows, a parent's
    children), but thins the overlap of a pipeline's consecutive pieces: `model_lens_us` is the fluid
    model's own time seen through the same lens (the same starts, no dependencies, FCTs chained), so
    that what the lens does to the model is measured."""
    flows = network_flows(result)
    base = model_schedule(result, network, routing, seed)
    wall, runs, loose = 0.0, 0, False
    for stretch in [x for x in STRETCHES if x >= first_stretch] if anchored else [1.0]:
        starts_s = base * stretch
        write_schedule(result, network, out, starts_s, simulator)
        measured = run(out, network_flows(_scheduled(result, starts_s)))
        wall += measured.wall_s
        runs += 1
        if not measured.complete:
            return SimRun(measured.finished, measured.expected, measured.bytes, float("nan"), measured.raw_us,
                          stretch, runs, float("nan"), wall)  # fmt: skip
        loose = not anchored or _loose(flows, measured.fct_us, measured.starts_us)
        if loose:
            break
    _, completion = chain(flows, measured.fct_us)
    lens = model_lens_us(result, network, routing, seed, starts_s) if anchored else float("nan")
    # No stretch kept every flow after what it waits for: the simulator overlapped what the replay
    # chains, its figure is not the collective's; the run counts as failed.
    error = "" if loose else f"no stretch up to {STRETCHES[-1]} kept every flow after what it waits for"
    return SimRun(measured.finished, measured.expected, measured.bytes, completion, measured.raw_us, stretch, runs,
                  lens, wall, error)  # fmt: skip


def _loose(flows: pl.DataFrame, fct_us: np.ndarray, starts_us: np.ndarray) -> bool:
    """No flow started before a flow it waits for had ended in the simulator."""
    position = {fid: i for i, fid in enumerate(flows["flow_id"].to_list())}
    ends = starts_us + fct_us
    for i, deps in enumerate(flows["depends_on"].to_list()):
        if deps and starts_us[i] + LOOSE_SLACK_US < max(ends[position[d]] for d in deps):
            return False
    return True


def model_lens_us(result: Replay, network: Network, routing: str, seed: int, starts_s: np.ndarray) -> float:
    """The fluid model's time seen as `loose_run` sees a simulator's: every flow released at `starts_s`
    without dependencies (tracekit.fabric.simulate, NCCL latencies aside), its FCTs chained."""
    from tracekit.fabric.fluid import simulate
    from tracekit.fabric.routing import FlowEnds, route
    from tracekit.replay.algorithms.base import NET

    f = result.shapes.shapes[0].flows
    ends = FlowEnds(
        src_nic=f["src_nic"],
        dst_nic=f["dst_nic"],
        src_gpu=f["src_gpu"],
        dst_gpu=f["dst_gpu"],
        qp=f["channel"] * 128 + f["qp"],
        kind=(f["link"] == NET).astype(np.int64),
    )  # as timing._solve
    incidence = route(network, ends, routing, seed)
    count = len(f["bytes"])
    fluid = simulate(
        incidence,
        network.capacity_Bps,
        f["bytes"].astype(np.float64),
        starts_s,
        incidence.path_latency_s,
        np.zeros(count + 1, dtype=np.int64),
        np.zeros(0, dtype=np.int64),
    )
    _, completion = chain(network_flows(result), (fluid.end_s - starts_s) * 1e6)  # fmt: skip
    return completion


def _scheduled(result: Replay, starts_s: np.ndarray) -> Replay:
    """The replay with its flows (in flow-id order) starting at `starts_s` (ending at start + model duration)."""
    flows = result.flows.sort("flow_id")
    length = (flows["end_s"] - flows["start_s"]).to_numpy()
    flows = flows.with_columns(start_s=pl.Series(starts_s), end_s=pl.Series(starts_s + length))
    return dataclasses.replace(result, flows=flows)


def write_schedule(result: Replay, network: Network, out: Path, starts_s: np.ndarray, simulator: str) -> None:
    """The replay's htsim or HPCC files again, its flows starting at `starts_s`."""
    from tracekit.replay.emitters.hpcc import write_hpcc
    from tracekit.replay.emitters.htsim import write_htsim

    scheduled = _scheduled(result, starts_s)
    if simulator == "htsim":
        write_htsim(scheduled, out / "htsim", network, "uec")
    else:
        write_hpcc(scheduled, out / "hpcc", network)


def model_schedule(result: Replay, network: Network, routing: str, seed: int = 0) -> np.ndarray:
    """Each flow's start (s, flow-id order) in the model on `network` (NCCL latencies zeroed)."""
    shape = result.shapes.shapes[0]
    flows = result.flows.sort("flow_id")
    if len(result.shapes.shapes) != 1 or not all(
        np.array_equal(shape.flows[k], flows[k].to_numpy()) for k in ("src_rank", "dst_rank", "bytes", "step")
    ):
        raise ValueError(f"job {result.job}: not one collective whose flows are the shape's, in order")
    with without_nccl_latency():
        start, _, _ = Timer(result.shapes).run(network, routing, seed).solved[0]
    return np.asarray(start, dtype=np.float64)


def check_same_network(out: Path, network: Network) -> None:
    """The simulators' files describe the model's network: NIC and uplink rates, the leaf shape, and
    an ECN entry in HPCC's config for every rate of its topology."""
    gbps = {round(float(c) * 8 / 1e9, 6) for c in network.capacity_Bps[network.tier >= NIC]}
    topo = (out / "htsim" / "topology.topo").read_text()
    speeds = {float(v) for v in re.findall(r"Downlink_speed_Gbps (\S+)", topo)}
    if speeds != gbps or run_options(out)[0] != round(network.endpoints.nic_Bps * 8 / 1e6):
        raise ValueError(f"{out}: htsim's link rates {speeds} are not the model's {gbps}")
    uplinks = network.leaf_up.shape[1]
    if f"Radix_Up {uplinks}" not in topo:
        raise ValueError(f"{out}: htsim's leaves do not have the model's {uplinks} uplinks")
    hpcc_rates = {
        float(r.removesuffix("Gbps")) for r in re.findall(r" (\S+Gbps) ", (out / "hpcc/topology.txt").read_text())
    }
    config = (out / "hpcc" / "config.txt").read_text()
    if hpcc_rates != gbps or any(f" {round(g * 1e9)} " not in config.split("KMAX_MAP")[1] for g in gbps):
        raise ValueError(f"{out}: HPCC's link rates {hpcc_rates} or ECN maps do not match the model's {gbps}")


# ---------------------------------------------------------------------------------------------
# The grid


def run_case(
    dataset: Path, work: Path, ranks: int, collective: Collective, fabric: FabricSpec, hpcc: bool = True
) -> list[Row]:
    """Both routings of one (ranks, collective, fabric): the model's and the simulators' times."""
    result = replay(dataset, job_name(ranks, collective), algorithm=collective.algorithm, placement=PLACEMENT,
                    options=OPTIONS)  # fmt: skip
    out = work / f"{job_name(ranks, collective)}-{fabric.label.replace(' ', '').replace(':', 'to')}"
    write_outputs(result, out, ["htsim", "hpcc"], fabric=fabric)
    network = fabric.build(result.shapes.network())
    check_same_network(out, network)
    flows = network_flows(result)
    waits = bool(flows["depends_on"].list.len().sum())
    htsim_anchored = anchored(out, flows) > 0
    hpcc_run = None
    if hpcc and flows["bytes"].sum() <= HPCC_MAX_BYTES:
        hpcc_run = attempt(flows.height, lambda: loose_run(result, network, "ecmp", 0, out, "hpcc", run_hpcc, waits))
    rows = []
    for routing in ROUTINGS:
        seeds = MODEL_SEEDS if routing == "ecmp" else 1
        full = model_us(result, network, routing, seeds=seeds)
        with without_nccl_latency():
            bare = model_us(result, network, routing, seeds=seeds)
            exact = model_us(result, network, routing, exact=True, seeds=seeds)
        sims: list[SimRun] = []
        for seed in HTSIM_SEEDS if routing == "ecmp" else (1,):
            # the seeds of one case need about the same stretch
            first = sims[-1].stretch if sims and not sims[-1].error else STRETCHES[0]
            run = functools.partial(run_htsim, routing=routing, seed=seed)
            timed = functools.partial(loose_run, result, network, routing, 0, out, "htsim", run, htsim_anchored, first)
            sims.append(attempt(flows.height, timed))
        rows.append(
            Row(ranks, collective.name, fabric.label, routing, flows.height, int(flows["bytes"].sum()), bare, full,
                exact, sims, hpcc_run if routing == "ecmp" else None)
        )  # fmt: skip
    return rows


def run_grid(
    ranks: list[int], work: Path, collectives: tuple[Collective, ...] = COLLECTIVES, fabrics: list[str] | None = None,
    hpcc: bool = True, progress: bool = False,
) -> list[Row]:  # fmt: skip
    dataset = build_dataset(work, ranks, collectives)
    rows: list[Row] = []
    for n in ranks:
        for c in collectives:
            for name in fabrics or list(FABRICS):
                started = time.perf_counter()
                try:
                    rows.extend(run_case(dataset, work, n, c, FABRICS[name], hpcc))
                except Exception as error:  # the replay or the model: the case's rows say so, the grid goes on
                    print(f"  {n} {c.name}, {name}: failed: {error!r}"[:300], file=sys.stderr, flush=True)
                    nan = float("nan")
                    rows.extend(Row(n, c.name, name, routing, 0, 0, nan, nan, nan, error=repr(error)[:300])
                                for routing in ROUTINGS)  # fmt: skip
                if progress:
                    print(f"  {n} {c.name}, {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
    return rows


def problems(row: Row) -> list[str]:
    """What a simulator run left undone: unfinished flows, another flow count or other bytes."""
    if row.error:
        return [f"{row.case}: {row.error}"]
    out = []
    for name, run in [("htsim", r) for r in row.htsim] + ([("hpcc", row.hpcc)] if row.hpcc else []):
        if run.error:
            out.append(f"{row.case}: {name} failed: {run.error}")
            continue
        if not run.finished == run.expected == row.flows:
            out.append(f"{row.case}: {name} finished {run.finished} of {run.expected} flows (replay: {row.flows})")
        if run.bytes != row.network_bytes:
            out.append(f"{row.case}: {name} moved {run.bytes} bytes, the replay {row.network_bytes}")
    return out


# ---------------------------------------------------------------------------------------------
# Output


@dataclass
class Summary:
    """The model/simulator ratios of one simulator, fabric and routing: how many, median, min, max,
    and the median of the model's own time over the simulator's (no lens), and runs that failed."""

    simulator: str
    fabric: str
    routing: str
    count: int
    median: float
    low: float
    high: float
    own_median: float
    failed: int


def medians(rows: list[Row]) -> list[Summary]:
    """Per simulator × fabric × routing, the median (min, max) model/simulator ratio."""
    out = []
    for simulator in ("htsim", "hpcc"):
        for fabric in FABRICS:
            for routing in ROUTINGS:
                group = [r for r in rows if r.fabric == fabric and r.routing == routing]
                values = [v for r in group if (v := r.ratio(simulator)) is not None]
                own = [v for r in group if (v := r.own_ratio(simulator)) is not None]
                failed = sum(1 for r in group if r.error or r.failed(simulator))
                if values or failed:
                    nan = float("nan")
                    out.append(Summary(simulator, fabric, routing, len(values),
                                       statistics.median(values) if values else nan, min(values, default=nan),
                                       max(values, default=nan), statistics.median(own) if own else nan,
                                       failed))  # fmt: skip
    return out


def _fmt(value: float | None, digits: int = 0) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{value:,.{digits}f}"


def _sim_cell(row: Row, simulator: str) -> str:
    """The simulator's µs, with [the model through the same lens] where that is what the ratio uses."""
    if row.runs(simulator) and row.failed(simulator):
        return "failed"
    sim, reference = row.sim_us(simulator), row.reference_us(simulator)
    lens = f" [{_fmt(reference)}]" if reference is not None and reference != row.model_us else ""
    return _fmt(sim) + lens


def table(rows: list[Row], markdown: bool) -> str:
    head = ["case", "flows", "model µs", "model+nccl µs", "exact µs", "htsim µs", "ratio", "HPCC µs", "ratio"]
    body = [
        [r.case, f"{r.flows:,}", _fmt(r.model_us), _fmt(r.model_nccl_us), _fmt(r.exact_us), _sim_cell(r, "htsim"),
         _fmt(r.ratio("htsim"), 2), _sim_cell(r, "hpcc"), _fmt(r.ratio("hpcc"), 2)]
        if not r.error else [r.case, "failed", *["—"] * 7]
        for r in rows
    ]  # fmt: skip
    sums = ["simulator", "fabric", "routing", "cases", "median", "min", "max", "median, model's own", "failed"]
    summary = [
        [m.simulator, m.fabric, m.routing, str(m.count), _fmt(m.median, 2), _fmt(m.low, 2), _fmt(m.high, 2),
         _fmt(m.own_median, 2), str(m.failed)]
        for m in medians(rows)
    ]  # fmt: skip
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(b) + " |" for b in body]
        lines += ["", "| " + " | ".join(sums) + " |", "|" + "---|" * len(sums)]
        lines += ["| " + " | ".join(x) + " |" for x in summary]
        return "\n".join(lines)
    lines = _columns(head, body) + ["", "model/simulator:"] + _columns(sums, summary)
    return "\n".join(lines)


def _columns(head: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    return ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)) for line in [head, *body]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"ranks {', '.join(map(str, QUICK_RANKS))} only")
    parser.add_argument("--ranks", type=int, nargs="+", help="the rank counts (default 8 16 32 64)")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    parser.add_argument("--no-hpcc", action="store_true", help="skip HPCC (the slowest simulator)")
    parser.add_argument("--keep", type=Path, help="write the jobs, replays and simulator files here and keep them")
    parser.add_argument("--json", type=Path, help="every row, every simulator run, as JSON")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds one simulator run may take")
    args = parser.parse_args()
    globals()["TIMEOUT_S"] = args.timeout  # every simulator run reads it
    if not have_simulators():
        parser.exit(2, f"the simulators are not present at {SIMS} (set TRACEKIT_SHARED)\n")
    ranks = args.ranks or list(QUICK_RANKS if args.quick else RANKS)
    work = args.keep or Path(tempfile.mkdtemp(prefix="validate_sims_"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        rows = run_grid(ranks, work, hpcc=not args.no_hpcc, progress=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows, args.markdown))
    issues = [p for r in rows for p in problems(r)]
    for issue in issues:
        print("PROBLEM:", issue)
    print(f"\n{len(rows)} rows in {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    if issues:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
