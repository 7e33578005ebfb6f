"""Shared fixtures: where the project's sample traces and the public reference traces live, and the
samples' dataset as `tracekit report` makes it for a new user.

`samples` runs `tracekit report` with no DATASET, as a new user would: it ingests the bundled samples
into a cache folder (XDG_CACHE_HOME points into the session's temporary folder) and reports on them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tracekit.errors import ParserBug

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_TRACES = ROOT / "sample_traces"
PUBLIC_TRACES = ROOT.parent / "shared" / "traces" / "public"


@pytest.fixture(autouse=True)
def _parser_bugs_fail_the_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A parser's own exception becomes a ParserBug, a TraceError, so that a run goes on; a test
    expecting `TraceError` would take it for a refusal. Here any ParserBug made in the test's
    process fails the test (unless marked `parser_bug_expected`), with the exception it wraps."""
    if request.node.get_closest_marker("parser_bug_expected"):
        return
    made = ParserBug.of

    def fail(exc: BaseException, fmt: str | None) -> ParserBug:
        bug = made(exc, fmt)
        pytest.fail(f"parser bug: {bug.message}", pytrace=False)

    monkeypatch.setattr(ParserBug, "of", fail)


@pytest.fixture
def public_traces() -> Path:
    """../shared/traces/public: real traces from public repositories (CI and developer machines)."""
    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"public reference traces not present at {PUBLIC_TRACES} (../shared is absent)")
    return PUBLIC_TRACES


@pytest.fixture
def sample_traces() -> Path:
    return SAMPLE_TRACES


def run_tracekit(
    *args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=600,
    )


@dataclass
class SampleRun:
    cache: Path  # XDG_CACHE_HOME of the run
    dataset: Path  # the samples' dataset it made there
    page: Path  # the report it wrote
    stderr: str


@pytest.fixture(scope="session")
def samples(tmp_path_factory: pytest.TempPathFactory) -> SampleRun:
    root = tmp_path_factory.mktemp("samples")
    env = {"XDG_CACHE_HOME": str(root / "cache")}
    result = run_tracekit("report", "-o", root / "report.html", env=env, cwd=root)
    assert result.returncode == 0, result.stderr
    found = sorted((root / "cache" / "tracekit").glob("samples-*"))
    assert len(found) == 1, found
    return SampleRun(root / "cache", found[0], root / "report.html", result.stderr)
