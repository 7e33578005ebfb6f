"""The parallelism class that queries/job_class.sql infers from a job's collectives alone.

Measured on hand-made jobs of known class that sit where a rule reading shares would go wrong
(tests/job_class_cases.py), against the generator's labels on fleets of every built-in profile, on
the captured sample jobs (the class their README names), and on jobs of which only some ranks were
ingested. bench/bench_report.py measures agreement on larger fleets.
"""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES
from tests.job_class_cases import CASES, Case
from tracekit.generate import generate_fleet, load_profile
from tracekit.ingest import ingest
from tracekit.store.queries import query_header, rollup_query

ROOT = Path(__file__).resolve().parent.parent

AGREEMENT = 1.0  # every generated job
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
    ("form", "job", "expected"),
    [
        (form, job, expected)
        for form in ("captured", "chakra")
        for job, expected in (("ddp_mlp", "ddp"), ("fsdp_mlp", "fsdp"), ("pipeline_p2p", "llm-3d"))
    ]
    + [
        ("captured", "moe_alltoall", "moe"),
        # The Chakra copy carries the element types (dtype attributes) too: fp32 tokens, not ids.
        ("chakra", "moe_alltoall", "moe"),
    ],
)
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


def _classes_of_the_rule() -> list[str]:
    """The classes the rule's numbered lines name, in order (queries/job_class.sql's header)."""
    return list(dict.fromkeys(cls for _, cls, _ in _numbered_rules()))


def test_the_profiles_classes_are_the_ones_the_rule_names() -> None:
    # The rule's SQL: computed per job at ingest (queries/job_class.sql reads the table it fills).
    rule = (ROOT / "queries" / "rollups" / "job_classes.sql").read_text()
    named = _classes_of_the_rule()
    for cls in named:
        assert f"'{cls}'" in rule
    for profile in ("default", "sample", "meta-llm-tail"):
        assert set(load_profile(profile)["classes"]) <= set(named)
    assert {case.true_class for case in CASES} == set(named)  # every class has hand-made jobs


# ---------------------------------------------------------------------------------------------
# The rule's text (the SQL header, quoted by the README and the report) against its numbers

# How the header words each number of the rollup's `constants` CTE ({} is the value; shares in %).
WORDING = {
    "data_bytes": "more than {} bytes or of unknown size",
    "host_gpus": "hosts of {} GPUs",
    "ids_per_peer": "more than {} per peer",
    "mesh_peers": "exchanges with {} peers or more",
    "alltoall_min": "all-to-all are >= {} of data calls",
    "pipeline_per_rank": "pipeline send/recv are >= {} data calls per rank",
    "tp_min": "in host groups are >= {} of data calls",
    "replica_per_scatter": "are >= {} per host-group reduce-scatter",
    "allreduce_min": "whose all-reduces are >= {}",
    "modal_min": ">= {} of them of one size",
    "modal_per_rank": ">= {} per rank: tensor",
    "paired_min": "up to padding) are >= {}",
    "dp_min": "send/recv are >= {}, an all-reduce",
}


def _constants() -> dict[str, float]:
    """The numbers of the rule, as its SQL holds them (the rollup's `constants` CTE)."""
    body = rollup_query("job_classes")
    block = body[body.index("constants as (") : body.index("),")]
    return {name: float(value) for value, name in re.findall(r"([\d.]+) as (\w+)", block)}


def _worded(name: str, value: float) -> str:
    text = f"{value * 100:g}%" if value < 1 and name.endswith("_min") else f"{value:g}"
    return WORDING[name].format(text)


def _flat(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def _rule_text() -> str:
    return _flat(query_header("job_class")["rule"])


def _numbered_rules() -> list[tuple[str, str, str]]:
    """(number, class, text) of each numbered rule of the header."""
    return re.findall(r"(\d)\. ([a-z0-9-]+) (.+?)(?= \d\. [a-z]|$)", _rule_text())


def test_the_rule_text_states_the_numbers_its_sql_uses() -> None:
    constants = _constants()
    assert set(constants) == set(WORDING)
    text = _rule_text()
    for name, value in constants.items():
        assert _worded(name, value) in text, (name, value)
    # The class of each rule number is the one the SQL gives it.
    body = rollup_query("job_classes")
    for number, cls, _ in _numbered_rules():
        assert f"({number}, '{cls}')" in body
    assert [n for n, _, _ in _numbered_rules()] == [str(n) for n in range(1, 9)]


def test_the_readme_states_the_rule_of_the_sql() -> None:
    readme = (ROOT / "README.md").read_text()
    section = _flat(readme[readme.index("- **Class** (`job_class`)") : readme.index("- **Bytes on the wire**")])
    preamble = _rule_text()[: _rule_text().index(" 1. ")]
    assert preamble in section
    for number, cls, text in _numbered_rules():
        assert f"{number}. {cls}: {text}" in section, number
