"""Session fixtures: a generated fleet, ingested; the profile fitted to it; a regenerated fleet.

Fleets are small (jobs of 8-32 GPUs, ~2,000 rank files each) so that ingest takes seconds; seeds
are fixed, so every statistical test below has one fixed outcome (and thresholds leave room).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tracekit
from tracekit.generate import fit_profile, generate_fleet, load_profile, write_profile
from tracekit.ingest import ingest

FLEET_JOBS = 160
TEST_PROFILE = """
extends = "sample"
name = "test-small"
description = "sample profile with jobs of at most 32 GPUs, for fast round-trip tests"

[job_size]
max_size = 32

[job_size.sources]
max_size = "[est] keeps the test fleets to ~2,000 rank files"
"""


@dataclass
class Fleet:
    profile: dict[str, Any]
    folder: Path
    dataset: Path


def _fleet(root: Path, profile: dict[str, Any], seed: int) -> Fleet:
    folder = root / "fleet"
    generate_fleet(folder, FLEET_JOBS, seed, profile)
    dataset = root / "fleet.dataset"
    report = ingest([folder], dataset)
    assert report.ok, report.errors[:5]
    return Fleet(profile, folder, dataset)


@pytest.fixture(scope="session")
def test_profile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("profile") / "test-small.toml"
    path.write_text(TEST_PROFILE)
    return load_profile(path)


@pytest.fixture(scope="session")
def fleet_a(tmp_path_factory: pytest.TempPathFactory, test_profile: dict[str, Any]) -> Fleet:
    return _fleet(tmp_path_factory.mktemp("fleet_a"), test_profile, seed=11)


@pytest.fixture(scope="session")
def fitted(fleet_a: Fleet, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    profile = fit_profile(fleet_a.dataset, base=fleet_a.profile)
    path = write_profile(profile, tmp_path_factory.mktemp("fitted") / "fitted.toml")
    return load_profile(path)


@pytest.fixture(scope="session")
def fleet_b(tmp_path_factory: pytest.TempPathFactory, fitted: dict[str, Any]) -> Fleet:
    return _fleet(tmp_path_factory.mktemp("fleet_b"), fitted, seed=12)


@pytest.fixture(scope="session", params=["generated", "regenerated_from_fit"])
def fleet(request: pytest.FixtureRequest) -> Fleet:
    """Each round-trip test runs on the generated fleet and on the one regenerated from its fit."""
    return request.getfixturevalue("fleet_a" if request.param == "generated" else "fleet_b")


def query(dataset: Path, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows of queries/<name>.sql over the dataset."""
    from tracekit.generate.fit import run_query

    with tracekit.open(dataset) as ds:
        return run_query(ds, name, params)


def period_params(profile: dict[str, Any]) -> dict[str, Any]:
    return {"start": str(profile["fleet"]["start"]), "period_months": profile["fleet"]["period_months"]}
