"""Datasets for the replay tests (ingested once per session) and the simulator-input checkers."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tracekit.ingest import ingest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("TRACEKIT_SHARED", ROOT.parent / "shared"))  # ../shared beside the project
PUBLIC = SHARED / "traces" / "public"
SIMCHECK = SHARED / "simcheck"
MICROBENCHMARKS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
CAPTURED_JOBS = ("ddp_mlp", "fsdp_mlp", "moe_alltoall", "pipeline_p2p")


@pytest.fixture(scope="session")
def captured_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The four captured 4-rank CPU/gloo jobs of sample_traces/captured."""
    out = tmp_path_factory.mktemp("replay") / "captured.dataset"
    assert ingest([ROOT / "sample_traces" / "captured"], out).ok
    return out


@pytest.fixture(scope="session")
def dlrm_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real 8-rank DLRM job of param-dlrm-8rank (PyTorch ET + Kineto)."""
    folder = PUBLIC / "param-dlrm-8rank"
    if not folder.is_dir():
        pytest.skip(f"public reference traces not present at {PUBLIC} (../shared is absent)")
    out = tmp_path_factory.mktemp("replay") / "dlrm.dataset"
    archives = [folder / "dlrm_pytorch_et.tar.gz", folder / "dlrm_kineto.tar.gz"]
    assert ingest(archives, out, job="dlrm").ok
    return out


@pytest.fixture(scope="session")
def micro_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ASTRA-sim's 4-rank 1 MiB microbenchmarks, one job each."""
    folder = PUBLIC / "astra-sim-microbenchmarks"
    if not folder.is_dir():
        pytest.skip(f"public reference traces not present at {PUBLIC} (../shared is absent)")
    out = tmp_path_factory.mktemp("replay") / "micro.dataset"
    for name in MICROBENCHMARKS:
        assert ingest([folder / name], out, job=name).ok
    return out


@pytest.fixture(scope="session")
def simcheck() -> dict[str, ModuleType]:
    """../shared/simcheck's checkers (htsim_cm, hpcc_flow, astra_et), imported from where they live."""
    if not SIMCHECK.is_dir():
        pytest.skip(f"the simulator-input checkers are not present at {SIMCHECK} (../shared is absent)")
    sys.path.insert(0, str(SIMCHECK))
    try:
        return {name: importlib.import_module(name) for name in ("htsim_cm", "hpcc_flow", "astra_et")}
    finally:
        sys.path.remove(str(SIMCHECK))
