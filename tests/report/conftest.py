"""Datasets the report is tested on (and `samples`, from tests/conftest.py), and one headless Chromium
for the whole session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES
from tests.report.cdp import CHROMIUM, Browser
from tracekit.ingest import ingest


@pytest.fixture(scope="session")
def one_job_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("one") / "ds"
    assert ingest([SAMPLE_TRACES / "captured" / "moe_alltoall"], out).ok
    return out


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed here (apt-get install chromium); .ci/run installs it for CI")
    started = Browser()
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="session")
def timed_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated fleet of the sample profile, every job replayed and timed (`tracekit replay --fleet`)."""
    from tracekit.generate import generate_fleet, load_profile
    from tracekit.replay.fleet import FleetSettings, replay_fleet, store

    root = tmp_path_factory.mktemp("timed")
    generate_fleet(root / "fleet", 80, 1, load_profile("sample"))
    assert ingest([root / "fleet"], root / "ds").ok
    store(replay_fleet(root / "ds", FleetSettings(seeds=2), workers=2), root / "ds")
    return root / "ds"
