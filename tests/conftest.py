"""Shared fixtures: where the project's sample traces and the public reference traces live."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACES = ROOT / "sample_traces"
PUBLIC_TRACES = ROOT.parent / "shared" / "traces" / "public"


@pytest.fixture
def public_traces() -> Path:
    """../shared/traces/public: real traces from public repositories (CI and developer machines)."""
    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"public reference traces not present at {PUBLIC_TRACES} (../shared is absent)")
    return PUBLIC_TRACES


@pytest.fixture
def sample_traces() -> Path:
    return SAMPLE_TRACES
