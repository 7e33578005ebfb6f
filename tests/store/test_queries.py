"""Every shipped query has its header, binds its parameters, and runs on an ingested dataset."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import tracekit
from tests.builders import write_et_job
from tests.cli.test_cli import DUCKDB
from tracekit.errors import InputError
from tracekit.ingest import ingest
from tracekit.parsers.common.values import MAX_RANKS
from tracekit.replay import Placement
from tracekit.replay.fleet import FleetSettings, replay_fleet, store
from tracekit.store.queries import load_query, query_call, query_header, query_names, query_param_specs, query_params

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
INSPECTOR_V43 = Path(__file__).resolve().parents[1] / "parsers" / "nccl_inspector" / "v4_3"
PARAMS = {"start": "2024-01-01", "period_months": 3, "rank": 0, "job_id": "moe_alltoall", "ranks_per_cell": 1}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("queries")
    write_et_job(root / "in" / "jobA", [0, 1, 2, 3], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])
    (root / "in" / "tracekit_manifest.csv").write_text(
        "job_id,path,label,started_at\njobA,jobA,fsdp:llama-7b,2024-02-01\n"
    )
    assert ingest([root / "in"], root / "ds").ok
    # A real captured job with sub-groups and send/recv.
    assert ingest([SAMPLES / "captured" / "pipeline_p2p"], root / "ds", label="llm-3d:pipeline").ok
    # Real all-to-allv with recorded splits and profiler timing.
    assert ingest([SAMPLES / "captured" / "moe_alltoall"], root / "ds").ok
    # NCCL Inspector v4.3 files: what NCCL ran and measured (observed_collectives, observed_transfers).
    assert ingest([INSPECTOR_V43], root / "ds").ok
    # The fleet replay's tables (replay_jobs, replay_fabrics), which fabric_slowdown_by_class reads.
    one_gpu_per_host = FleetSettings(placement=Placement(gpus_per_host=1))  # so that every job uses the network
    store(replay_fleet(root / "ds", one_gpu_per_host, workers=1), root / "ds")
    return root / "ds"


def test_there_are_queries() -> None:
    assert len(query_names()) >= 5


@pytest.mark.parametrize("name", query_names())
def test_query_has_a_header_and_reads_no_files(name: str) -> None:
    header = query_header(name)
    assert header["name"] == name
    assert header["answers"] and "params" in header and header["returns"]
    body = "\n".join(line for line in load_query(name).splitlines() if not line.startswith("--"))
    assert not re.search(r"read_(parquet|csv|json)|'[^']*\.(parquet|csv|json|duckdb)'", body)


@pytest.mark.parametrize("name", query_names())
def test_query_runs_with_its_declared_parameters(dataset: Path, name: str) -> None:
    declared = set(re.findall(r"\$(\w+)", query_header(name)["params"]))
    body = "\n".join(line for line in load_query(name).splitlines() if not line.startswith("--"))
    assert declared == set(re.findall(r"\$(\w+)", body))
    with tracekit.open(dataset) as ds:
        rows = ds.query(name, {k: PARAMS[k] for k in declared} or None).fetchall()
    assert rows, f"{name} returned nothing on a one-job dataset"


@pytest.mark.skipif(DUCKDB is None, reason="the duckdb shell (pip install duckdb-cli) is not installed")
@pytest.mark.parametrize("name", query_names())
def test_every_query_is_in_the_dataset_for_the_duckdb_shell(dataset: Path, name: str) -> None:
    params = query_params(name)
    literal = {k: f"'{v}'" if isinstance(v, str) else str(v) for k, v in PARAMS.items()}
    call = f"{name}({', '.join(literal[p] for p in params)})" if params else name
    with tracekit.open(dataset) as ds:
        expected = len(ds.query(name, {p: PARAMS[p] for p in params} or None).fetchall())
    assert DUCKDB is not None
    shell = subprocess.run(
        [DUCKDB, "-csv", "-noheader", str(dataset / "tracekit.duckdb"), "-c", f"select count(*) from {call}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 0, shell.stderr
    assert int(shell.stdout.strip()) == expected > 0


@pytest.mark.parametrize("name", query_names())
def test_every_parameter_declares_its_type(name: str) -> None:
    for spec in query_param_specs(name):
        assert spec.type in ("string", "integer", "timestamp"), (name, spec)
        assert spec.description, (name, spec)
        if spec.name in ("rank", "ranks_per_cell"):  # the bounds every parser holds ranks to
            assert (spec.minimum, spec.maximum) == ((0, MAX_RANKS - 1) if spec.name == "rank" else (1, MAX_RANKS))


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("group_size_trend", {"start": "notadate", "period_months": "3"}, "start=notadate"),
        ("group_size_trend", {"start": "2023-01-01", "period_months": "0"}, "period_months=0"),
        ("group_size_trend", {"start": "2023-01-01", "period_months": "-3"}, "period_months=-3"),
        ("group_size_trend", {"start": "2023-01-01", "period_months": "abc"}, "period_months=abc"),
        ("group_size_trend", {"start": "2023-01-01", "period_months": 2.5}, "period_months=2.5"),
        ("group_size_trend", {"start": "2023-01-01", "period_months": True}, "period_months=True"),
        ("group_size_trend", {"start": "2023-01-01", "period_months": 1 << 64}, f"period_months={1 << 64}"),
        ("alltoallv_matrix", {"job_id": "j", "ranks_per_cell": "0"}, "ranks_per_cell=0"),
        ("message_sizes_by_label", {"rank": "abc"}, "rank=abc"),
        ("message_sizes_by_label", {"rank": -1}, "rank=-1"),
        ("job_bytes_by_collective", {"job_id": 7}, "job_id=7"),
    ],
)
def test_a_parameter_outside_its_type_or_range_is_refused_by_name(
    name: str, params: dict[str, object], message: str
) -> None:
    with pytest.raises(InputError, match=re.escape(message)) as refused:
        query_call(name, params)
    assert "\n" not in str(refused.value)


def test_parameters_take_their_declared_types() -> None:
    _, bound = query_call("group_size_trend", {"start": "2023-01-01", "period_months": "3"})
    assert bound == {"start": "2023-01-01 00:00:00", "period_months": 3}
    _, bound = query_call("job_bytes_by_collective", {"job_id": "007"})
    assert bound == {"job_id": "007"}
    _, bound = query_call("collective_wire_bytes", {"job_id": None})  # NULL: every job
    assert bound == {"job_id": None}
