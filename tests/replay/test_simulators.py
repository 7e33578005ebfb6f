"""The replay's files in the real simulators (../shared/sims): accepted, every flow and rank finished, and
times that agree with the replay's where the models are the same (marked slow)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

from tests.builders import write_et_job
from tests.replay import sims
from tests.replay.conftest import CAPTURED_JOBS
from tracekit.ingest import ingest
from tracekit.replay import Placement, replay, write_outputs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def one_all_reduce(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 64 MiB AllReduce over 16 ranks (2 hosts of 8 GPUs)."""
    root = tmp_path_factory.mktemp("sims")
    write_et_job(root / "in" / "ar16", list(range(16)), [("ALL_REDUCE", 64 << 20)])
    assert ingest([root / "in"], root / "ds", workers=1).ok
    return root / "ds"


@pytest.mark.parametrize("simulator", ["htsim", "hpcc", "astra"])
@pytest.mark.parametrize("job", CAPTURED_JOBS)
def test_every_simulator_runs_every_captured_job_to_the_end(
    captured_dataset: Path, tmp_path: Path, job: str, simulator: str
) -> None:
    sims.need("htsim_uec")
    result = replay(captured_dataset, job, placement=Placement(gpus_per_host=1))
    write_outputs(result, tmp_path, ["hpcc", "htsim", "chakra"])
    runs: dict[str, Callable[[Path], sims.Run]] = {
        "htsim": sims.htsim,
        "hpcc": sims.hpcc,
        "astra": lambda out: sims.astra(out, 4),
    }
    run = runs[simulator](tmp_path)
    assert run.finished == run.expected > 0, (job, run)


def test_astra_sims_matched_switch_takes_the_replays_ring_time(one_all_reduce: Path, tmp_path: Path) -> None:
    result = replay(one_all_reduce, "ar16", algorithm="ring")
    write_outputs(result, tmp_path, ["chakra"])
    run = sims.astra(tmp_path, 16)
    assert run.finished == 16
    replayed = float(result.collectives["model_duration_s"][0]) * 1e6
    assert 0.85 <= run.end_us / replayed <= 1.15, (run.end_us, replayed)


@pytest.mark.parametrize("simulator", ["htsim", "hpcc"])
@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_htsim_and_hpcc_finish_every_flow_of_an_all_reduce_across_two_hosts(
    one_all_reduce: Path, tmp_path: Path, algorithm: str, simulator: str
) -> None:
    result = replay(one_all_reduce, "ar16", algorithm=algorithm)
    write_outputs(result, tmp_path, [simulator])
    network = result.flows.filter(pl.col("link") == "network")
    runs: dict[str, Callable[[Path], sims.Run]] = {"htsim": sims.htsim, "hpcc": sims.hpcc}
    run = runs[simulator](tmp_path)
    assert run.finished == run.expected == network.height, run
    span = (network["end_s"].to_numpy().max() - network["start_s"].to_numpy().min()) * 1e6
    assert 0.5 <= run.end_us / span <= 2.0, (algorithm, run.end_us, span)
