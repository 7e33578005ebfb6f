"""Running the real simulators of ../shared/sims on what `tracekit replay` wrote (tests skip without them)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.replay.conftest import SHARED

SIMS = SHARED / "sims"


@dataclass
class Run:
    finished: int  # flows (htsim, HPCC) or ranks (ASTRA-sim) that finished
    expected: int
    end_us: float  # the last finish, µs after the first flow's start (ASTRA-sim: the slowest rank's cycles/1000)


def need(binary: str) -> Path:
    path = SIMS / "bin" / binary
    if not path.is_file():
        pytest.skip(f"the real simulators are not present at {SIMS} (../shared is absent)")
    return path


def _run(script: Path, timeout: float) -> str:
    env = dict(os.environ, SIMS=str(SIMS))
    done = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode == 128 + signal.SIGILL and not done.stdout:
        # Killed before main printed anything: the build uses instructions this CPU lacks (HPCC's
        # libns3 was built with AVX-512 in one provisioning of ../shared). Not a finding about the files.
        pytest.skip(f"{script.parent.name}: the simulator in {SIMS} cannot start on this CPU (SIGILL before main)")
    return done.stdout + done.stderr


def htsim(out: Path, binary: str = "uec", timeout: float = 300) -> Run:
    need(f"htsim_{binary}")
    text = _run(out / "htsim" / "run.sh", timeout)
    ends = [float(m[1]) for m in re.finditer(r"finished at ([0-9.e+]+)", text)]
    header = (out / "htsim" / "traffic.cm").read_text()
    expected = int(re.search(r"^Connections (\d+)$", header, re.M)[1])  # type: ignore[index]
    return Run(len(ends), expected, max(ends, default=0.0))


def hpcc(out: Path, timeout: float = 300) -> Run:
    need("hpcc_third")
    _run(out / "hpcc" / "run.sh", timeout)
    fct = out / "hpcc" / "fct.txt"
    lines = fct.read_text().split("\n") if fct.is_file() else []
    rows = [line.split() for line in lines if line.strip()]
    expected = int((out / "hpcc" / "flow.txt").read_text().split("\n", 1)[0])
    first = min((int(r[5]) for r in rows), default=0)
    end = max((int(r[5]) + int(r[6]) for r in rows), default=0)
    return Run(len(rows), expected, (end - first) / 1e3)


def astra(out: Path, npus: int, timeout: float = 300) -> Run:
    need("AstraSim_Analytical_Congestion_Unaware")
    text = _run(out / "astra" / "run.sh", timeout)
    if "libprotobuf" in text and "cannot open" in text:
        pytest.skip("ASTRA-sim needs libprotobuf.so.32 (apt-get install libprotobuf32; .ci/run installs it)")
    cycles = [int(m[1]) for m in re.finditer(r"sys\[\d+\] finished, (\d+) cycles", text)]
    return Run(len(cycles), npus, max(cycles, default=0) / 1e3)
