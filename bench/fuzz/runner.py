"""Run mutated inputs through `tracekit.parse_file` in worker processes, bounded in time and memory.

Input number i of a campaign is made the same way in any process (its mutations come from a
random stream seeded by the campaign seed and i), so workers make their own inputs and the parent
only hands out numbers; a finding is re-made in the parent to be saved. The parent kills a worker
whose input runs past the time bound or whose resident memory passes the memory bound, records
that as a finding, and starts a new worker. Peak memory per input is the worker's VmHWM, reset
before each input through /proc/self/clear_refs (Linux); the worker's own imports are included.

Time is the CPU time the worker spends parsing the input (/proc/<pid>/stat), not the wall clock:
on a shared machine a stall of other processes' making stretched two parses of 0.3 s past 10 s of
wall time at once. A parse that does not use the CPU yet does not end (a hang) is caught by the
wall clock at HANG_FACTOR times the bound. Both count as timeouts.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from bench.fuzz.mutate import Mutant, mutate
from bench.fuzz.seeds import FORMATS, load_seeds

# A one-line message naming the file and the place needs no more than this.
MAX_MESSAGE = 500
OUTCOMES = ("ok", "trace_error", "exception", "bad_message", "timeout", "over_memory", "worker_died", "fuzzer_error")
# Every outcome but a parse or a TraceError is a finding; `fuzzer_error` (the fuzzer failed to make
# the input) is the fuzzer's own bug, counted so that it cannot pass unseen.
FINDINGS = frozenset(OUTCOMES[2:])


# A parse that has used no more CPU than the bound but has run this many times the bound on the
# wall clock is hung (waiting on something), and is a timeout too.
HANG_FACTOR = 10
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    index: int
    outcome: str
    detail: str = ""
    seconds: float = 0.0  # CPU seconds of the parse
    peak_mb: float = 0.0
    wall: float = 0.0


@dataclass
class Campaign:
    """What a campaign found, per format."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    slowest: dict[str, float] = field(default_factory=dict)  # CPU seconds
    slowest_wall: dict[str, float] = field(default_factory=dict)
    peak_mb: dict[str, float] = field(default_factory=dict)
    findings: list[tuple[str, Mutant | None, Result]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def inputs(self) -> int:
        return sum(self.counts.values())

    def add(self, fmt: str, mutant: Mutant | None, result: Result) -> None:
        self.counts[(fmt, result.outcome)] += 1
        self.slowest[fmt] = max(self.slowest.get(fmt, 0.0), result.seconds)
        self.slowest_wall[fmt] = max(self.slowest_wall.get(fmt, 0.0), result.wall)
        self.peak_mb[fmt] = max(self.peak_mb.get(fmt, 0.0), result.peak_mb)
        if result.outcome in FINDINGS:
            self.findings.append((fmt, mutant, result))

    def table(self) -> str:
        """Per format: how many inputs parsed, raised TraceError, and broke the contract (by kind)."""
        kinds = [o for o in OUTCOMES if o in FINDINGS]
        labels = {"bad_message": "bad msg", "over_memory": "over mem", "worker_died": "died", "fuzzer_error": "fuzzer"}
        head = f"{'format':<12}{'inputs':>9}{'ok':>9}{'TraceError':>11}"
        head += "".join(f"{labels.get(k, k):>10}" for k in kinds) + f"{'max cpu s':>10}{'wall s':>8}{'peak MB':>9}"
        lines = [head]
        formats = sorted({f for f, _ in self.counts})
        for fmt in [*formats, "all"]:
            every = formats if fmt == "all" else [fmt]
            n = sum(c for (f, _), c in self.counts.items() if f in every)
            cells = [sum(self.counts[(f, o)] for f in every) for o in ("ok", "trace_error", *kinds)]
            slowest = max((self.slowest.get(f, 0.0) for f in every), default=0.0)
            wall = max((self.slowest_wall.get(f, 0.0) for f in every), default=0.0)
            peak = max((self.peak_mb.get(f, 0.0) for f in every), default=0.0)
            lines.append(
                f"{fmt:<12}{n:>9,}{cells[0]:>9,}{cells[1]:>11,}"
                + "".join(f"{c:>10,}" for c in cells[2:])
                + f"{slowest:>10.2f}{wall:>8.2f}{peak:>9.0f}"
            )
        rate = self.inputs / max(self.seconds, 1e-9)
        found = len(self.findings)
        lines.append(f"{self.inputs:,} inputs in {self.seconds:,.0f} s ({rate:,.0f}/s); {found} findings")
        return "\n".join(lines)


class Inputs:
    """The campaign's inputs: the formats take turns, so each gets an equal share."""

    def __init__(self, seed: int, formats: tuple[str, ...]) -> None:
        self.seed = seed
        self.seeds = load_seeds(seed)
        self.by_format = {f: s for f in formats if (s := [x for x in self.seeds if x.format == f])}
        self.order = sorted(self.by_format)

    def format_of(self, index: int) -> str:
        return self.order[index % len(self.order)]

    def make(self, index: int) -> Mutant:
        rng = random.Random(f"{self.seed}:{index}")
        return mutate(rng.choice(self.by_format[self.format_of(index)]), self.seeds, rng)


# ------------------------------------------------------------------------------------ worker


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _status_mb(pid: int | str, key: str) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def check_message(message: str) -> str | None:
    """Why a TraceError's text breaks the contract, or None when it keeps it."""
    if "\n" in message or "\r" in message:
        return "message spans several lines"
    if len(message) > MAX_MESSAGE:
        return f"message of {len(message):,} characters"
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:
        return "message cannot be written as UTF-8"
    return None


def parse_one(name: str, data: bytes) -> tuple[str, str]:
    """(outcome, detail) of parsing one input in this process."""
    import tracekit
    from tracekit.errors import ParserBug, TraceError

    try:
        tracekit.parse_file(data=data, name=name)
    except ParserBug as exc:  # a parser's own exception, caught by the last line of defence
        return "exception", exc.message
    except TraceError as exc:
        text = exc.describe(name)
        bad = check_message(text)
        return ("bad_message", f"{bad}: {text[:300]!r}") if bad else ("trace_error", text)
    except Exception as exc:  # the findings this fuzzer exists for
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(last.filename).name}:{last.lineno} in {last.name}"
        return "exception", f"{type(exc).__name__} at {where}: {str(exc)[:200]!r}"
    return "ok", ""


def _worker(conn: Connection, seed: int, formats: tuple[str, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import tracekit.parse  # noqa: F401 - import once, before the first timed input

    made = Inputs(seed, formats)
    conn.send(_READY)  # the clock of an input starts once its worker is up, not while it imports
    while True:
        try:
            index = conn.recv()
        except EOFError:
            return
        if index is None:
            return
        try:
            mutant = made.make(index)
        except Exception as exc:  # the fuzzer's bug, not the parser's: reported, never silent
            conn.send(Result(index, "fuzzer_error", f"making the input: {type(exc).__name__}: {exc}"[:300]))
            continue
        _reset_peak()
        conn.send(_STARTED)  # the input is made: its parse starts now
        start, cpu = time.perf_counter(), time.process_time()
        outcome, detail = parse_one(mutant.name, mutant.data)
        seconds, wall = time.process_time() - cpu, time.perf_counter() - start
        conn.send(Result(index, outcome, detail, seconds, _status_mb("self", "VmHWM"), wall))


_READY = "ready"
_STARTED = "started"
_START_SECONDS = 600


@dataclass
class _Slot:
    process: Any
    conn: Connection
    index: int | None = None
    started: float = 0.0  # wall clock when the input was sent
    parsing_cpu: float | None = None  # the worker's CPU seconds when its parse started


class _Pool:
    """Worker processes running `target(conn, *args)`: the parse worker here, or another mode's
    (bench.fuzz.datasets), which speaks the same protocol (_READY, then _STARTED and a Result per input)."""

    def __init__(self, workers: int, args: tuple[Any, ...], target: Any = None) -> None:
        self.context = multiprocessing.get_context("forkserver")
        self.args = args
        self.target = target or _worker
        self.slots = [self._start() for _ in range(workers)]
        for slot in self.slots:
            self._wait_ready(slot)

    def _start(self) -> _Slot:
        parent, child = self.context.Pipe()
        process = self.context.Process(target=self.target, args=(child, *self.args), daemon=True)
        process.start()
        child.close()
        return _Slot(process, parent)

    @staticmethod
    def _wait_ready(slot: _Slot) -> None:
        """Starting (imports, seeds) takes seconds, minutes on a loaded machine: no input's time."""
        if not slot.conn.poll(_START_SECONDS) or slot.conn.recv() != _READY:
            slot.process.kill()
            raise RuntimeError(f"a fuzz worker did not start within {_START_SECONDS} s")

    def replace(self, slot: _Slot) -> None:
        slot.process.kill()
        slot.process.join()
        slot.conn.close()
        fresh = self._start()
        self._wait_ready(fresh)
        slot.process, slot.conn, slot.index, slot.parsing_cpu = fresh.process, fresh.conn, None, None

    def close(self) -> None:
        for slot in self.slots:
            try:
                slot.conn.send(None)
            except OSError:
                pass
        for slot in self.slots:
            slot.process.join(timeout=2)
            if slot.process.is_alive():
                slot.process.kill()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _check(slot: _Slot, ready: list[Any], timeout: float, max_rss_mb: float, pool: _Pool) -> Result | None:
    """The result of the slot's input if it has one: returned, killed for time or memory, or lost."""
    index = slot.index
    assert index is not None
    elapsed = time.perf_counter() - slot.started
    if slot.conn in ready:
        try:
            message = slot.conn.recv()
        except EOFError:
            pool.replace(slot)
            return Result(index, "worker_died", f"exit code {slot.process.exitcode}", elapsed)
        if message == _STARTED:
            slot.parsing_cpu = _cpu_seconds(slot.process.pid)
            return None
        result: Result = message
        # Over a bound between two polls: what the worker measured tells.
        if result.seconds > timeout and result.outcome not in FINDINGS:
            result.outcome, result.detail = "timeout", f"took {result.seconds:.1f} s of CPU"
        elif result.peak_mb > max_rss_mb and result.outcome not in FINDINGS:
            result.outcome, result.detail = "over_memory", f"peak {result.peak_mb:,.0f} MB"
        return result
    if slot.parsing_cpu is not None:
        cpu = _cpu_seconds(slot.process.pid) - slot.parsing_cpu
        if cpu > timeout:
            pool.replace(slot)
            return Result(index, "timeout", f"still running after {cpu:.0f} s of CPU", cpu, wall=elapsed)
    if elapsed > HANG_FACTOR * timeout:
        pool.replace(slot)
        return Result(index, "timeout", f"hung: still running after {elapsed:.0f} s", wall=elapsed)
    # The bound is the parse's: the worker making the input (the fuzzer's work) is not measured.
    rss = _status_mb(slot.process.pid, "VmRSS") if slot.parsing_cpu is not None else 0.0
    if rss > max_rss_mb:
        pool.replace(slot)
        return Result(index, "over_memory", f"{rss:,.0f} MB resident", elapsed, rss)
    return None


def drive(
    pool: _Pool, indices: range, timeout: float, max_rss_mb: float, take: Callable[[_Slot, Result], None]
) -> None:
    """Hand `indices` to the pool's workers, one at a time each, and each result (past a bound, the
    one `_check` made) to `take`, until every index is done."""
    waiting = iter(indices)
    while True:
        for slot in pool.slots:
            if slot.index is None and (index := next(waiting, None)) is not None:
                slot.index, slot.started, slot.parsing_cpu = index, time.perf_counter(), None
                slot.conn.send(index)
        busy = [s for s in pool.slots if s.index is not None]
        if not busy:
            return
        ready = wait([s.conn for s in busy], timeout=0.05)
        for slot in busy:
            result = _check(slot, ready, timeout, max_rss_mb, pool)
            if result is not None:
                slot.index = None
                take(slot, result)


def run_campaign(
    count: int,
    *,
    seed: int = 0,
    workers: int = 2,
    timeout: float = 10.0,
    max_rss_mb: float = 1024.0,
    formats: tuple[str, ...] = FORMATS,
    progress: Any = None,
) -> Campaign:
    """Parse `count` mutants of the seeds here; see the module docstring for what is checked."""
    campaign = Campaign()
    started = time.perf_counter()
    made = Inputs(seed, formats)
    pool = _Pool(workers, (seed, formats))

    def take(slot: _Slot, result: Result) -> None:
        mutant = None
        if result.outcome in FINDINGS and result.outcome != "fuzzer_error":
            mutant = made.make(result.index)
        campaign.add(made.format_of(result.index), mutant, result)
        if progress:
            progress(campaign)

    try:
        drive(pool, range(count), timeout, max_rss_mb, take)
    finally:
        pool.close()
    campaign.seconds = time.perf_counter() - started
    return campaign


def save_findings(campaign: Campaign, out: Path) -> None:
    """Each finding as <index>.input.<name> plus <index>.finding.json (how it was made, what it did)."""
    out.mkdir(parents=True, exist_ok=True)
    for fmt, mutant, result in campaign.findings:
        stem = f"{result.index:07d}"
        if mutant is not None:
            (out / f"{stem}.input.{Path(mutant.name).name}").write_bytes(mutant.data)
        description = {
            "format": fmt,
            "name": mutant.name if mutant else None,
            "steps": mutant.steps if mutant else [],
            "outcome": result.outcome,
            "detail": result.detail,
            "seconds": round(result.seconds, 3),
            "peak_mb": round(result.peak_mb, 1),
        }
        (out / f"{stem}.finding.json").write_text(json.dumps(description, indent=1, ensure_ascii=True))


def default_workers() -> int:
    return max(1, min(4, os.cpu_count() or 1))
