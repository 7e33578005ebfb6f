"""The parallelism class that queries/job_class.sql infers from a job's collectives alone.

Measured on hand-made jobs of known class that sit where a rule reading shares would go wrong
(tests/job_class_cases.py), against the generator's labels on fleets of every built-in profile, on
the captured sample jobs (the class their README names), and on jobs of which only some ranks were
ingested. bench/bench_report.py measures agreement on larger fleets.
"""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES
from tests.job_class_cases import CASES, Case
from tracekit.generate import generate_fleet, load_profile
from tracekit.ingest import ingest

AGREEMENT = 0.95
JOBS = 30
# The LLM tail of meta-llm-tail (0.2% of jobs) at its smallest size, so that a small fleet has it.
TAIL_ONLY = """
extends = "meta-llm-tail"
name = "tail-only"
description = "meta-llm-tail's 256-GPU tail jobs only"

[tail]
share = 1.0
sizes = [256]
weights = [1.0]
"""


@pytest.fixture(scope="module")
def hand_made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every case of tests/job_class_cases.py, ingested as one fleet: job -> inferred class."""
    root = tmp_path_factory.mktemp("hand-made")
    for case in CASES:
        case.write(root / "jobs")
    report = ingest([root / "jobs"], root / "ds")
    assert report.ok, report.errors[:3]
    with tracekit.open(root / "ds") as ds:
        return dict(ds.sql("select job_id, inferred_class from job_class").fetchall())


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_hand_made_job_gets_its_true_class(hand_made: dict[str, str], case: Case) -> None:
    assert hand_made[case.name] == case.true_class, case.why


def _fleet(root: Path, profile: str | Path, jobs: int, seed: int, trace_format: str = "chakra") -> Path:
    generate_fleet(root / "fleet", jobs, seed, profile, trace_format=trace_format)
    report = ingest([root / "fleet"], root / "ds")
    assert report.ok, report.errors[:3]
    return root / "ds"


def _agreement(dataset: Path) -> tuple[float, list[tuple[str, str, str]]]:
    with tracekit.open(dataset) as ds:
        rows = ds.sql("select job_id, label_class, inferred_class from job_class").fetchall()
    assert rows and all(label for _, label, _ in rows)
    wrong = [row for row in rows if row[1] != row[2]]
    return 1 - len(wrong) / len(rows), wrong


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["default", "sample", "meta-llm-tail"])
def test_inferred_class_agrees_with_the_generator(profile: str, tmp_path: Path) -> None:
    share, wrong = _agreement(_fleet(tmp_path, profile, JOBS, seed=3))
    assert share >= AGREEMENT, wrong


@pytest.mark.slow
def test_the_llm_tail_is_3d_parallel(tmp_path: Path) -> None:
    (tmp_path / "tail.toml").write_text(TAIL_ONLY)
    share, wrong = _agreement(_fleet(tmp_path, tmp_path / "tail.toml", 2, seed=5))
    assert share == 1.0, wrong


@pytest.mark.slow
def test_pytorch_execution_traces_of_a_fleet_get_the_same_classes(tmp_path: Path) -> None:
    share, wrong = _agreement(_fleet(tmp_path, "sample", JOBS, seed=3, trace_format="pytorch-et"))
    assert share >= AGREEMENT, wrong


@pytest.mark.parametrize(
    ("job", "expected"),
    [("ddp_mlp", "ddp"), ("fsdp_mlp", "fsdp"), ("moe_alltoall", "ranking-ddp"), ("pipeline_p2p", "llm-3d")],
)
@pytest.mark.parametrize("form", ["captured", "chakra"])
def test_each_captured_sample_gets_the_class_its_readme_names(
    form: str, job: str, expected: str, tmp_path: Path
) -> None:
    assert ingest([SAMPLE_TRACES / form / job], tmp_path / "ds").ok
    with tracekit.open(tmp_path / "ds") as ds:
        [(inferred, source)] = ds.sql("select inferred_class, class_source from job_class").fetchall()
    assert (inferred, source) == (expected, "inferred")


@pytest.mark.slow
def test_a_job_seen_through_half_of_its_ranks_keeps_its_class(tmp_path: Path) -> None:
    generate_fleet(tmp_path / "fleet", 24, 7, "sample")
    with open(tmp_path / "fleet" / "tracekit_manifest.csv") as handle:
        labels = {row["job_id"]: row["label"].split(":")[0] for row in csv.DictReader(handle)}
    for job in labels:
        files = sorted((tmp_path / "fleet" / job).iterdir(), key=lambda p: int(p.name.split(".")[-2]))
        half = tmp_path / "half" / job
        half.mkdir(parents=True)
        for path in files[: len(files) // 2]:
            shutil.copy(path, half / path.name)
    ingest([tmp_path / "half"], tmp_path / "ds")  # missing ranks may be flagged: not `.ok`
    with tracekit.open(tmp_path / "ds") as ds:
        inferred = dict(ds.sql("select job_id, inferred_class from job_class").fetchall())
    found = {job.split("/")[-1]: cls for job, cls in inferred.items()}
    assert {job: found[job] for job in labels} == labels
    assert len(set(labels.values())) == 3  # every generated class was in the test


def test_a_label_overrides_the_inferred_class_and_says_so(tmp_path: Path) -> None:
    assert ingest([SAMPLE_TRACES / "captured" / "ddp_mlp"], tmp_path / "ds", label="fsdp:mlp").ok
    with tracekit.open(tmp_path / "ds") as ds:
        row = ds.query("job_class").pl().row(0, named=True)
    assert (row["class"], row["class_source"], row["inferred_class"], row["overridden"]) == (
        "fsdp",
        "label",
        "ddp",
        True,
    )
    assert row["model"] == "mlp"


def test_the_profiles_classes_are_the_ones_the_rule_names() -> None:
    # The rule's SQL: computed per job at ingest (queries/job_class.sql reads the table it fills).
    rule = (Path(__file__).resolve().parent.parent / "queries" / "rollups" / "job_classes.sql").read_text()
    for profile in ("default", "sample", "meta-llm-tail"):
        for cls in load_profile(profile)["classes"]:
            assert f"'{cls}'" in rule
