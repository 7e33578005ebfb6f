"""Interop: every real trace in ../shared/traces/public ingests and yields what its README states."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import tracekit
from tracekit.ingest import ingest

RESNET_ALLREDUCE = [8_196_000, 9_724_160, 26_255_360, 26_550_272, 31_502_336]
RESNET_BROADCAST = [424, 212_480]


@pytest.fixture(scope="module")
def public_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import PUBLIC_TRACES

    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"public reference traces not present at {PUBLIC_TRACES} (../shared is absent)")
    out = tmp_path_factory.mktemp("public") / "ds"
    report = ingest([PUBLIC_TRACES], out)
    # Every file is read; the two 2-GPU jobs hold one rank each: the other is reported missing.
    assert report.ok
    assert report.missing == [
        "job hta-nccl-2gpu: rank 1 of 2 missing",
        "job param-resnet-2gpu: rank 0 of 2 missing",
    ]
    return out


@pytest.fixture(scope="module")
def dlrm_alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each DLRM archive ingested on its own (one run each): two jobs, named after the archives."""
    from tests.conftest import PUBLIC_TRACES

    if not PUBLIC_TRACES.is_dir():
        pytest.skip(f"public reference traces not present at {PUBLIC_TRACES} (../shared is absent)")
    out = tmp_path_factory.mktemp("dlrm") / "ds"
    for name in ("dlrm_pytorch_et", "dlrm_kineto"):
        assert ingest([PUBLIC_TRACES / "param-dlrm-8rank" / f"{name}.tar.gz"], out).ok
    return out


def test_every_public_file_ingests_ok(public_dataset: Path) -> None:
    with tracekit.open(public_dataset) as ds:
        files = ds.sql("select path, status, error from traces where path is not null").fetchall()
    assert len(files) == 34
    assert [f for f in files if f[1] != "ok"] == []
    with tracekit.open(public_dataset) as ds:
        jobs = ds.sql("select job_id, world_size, ranks_seen, ranks_missing, missing_ranks from jobs order by 1")
        assert jobs.fetchall() == [
            ("astra-sim-microbenchmarks/all_gather", 4, 4, 0, ""),
            ("astra-sim-microbenchmarks/all_reduce", 4, 4, 0, ""),
            ("astra-sim-microbenchmarks/all_to_all", 4, 4, 0, ""),
            ("astra-sim-microbenchmarks/reduce_scatter", 4, 4, 0, ""),
            ("hta-nccl-2gpu", 2, 1, 1, "1"),
            ("param-dlrm-8rank", 8, 8, 0, ""),
            ("param-resnet-2gpu", 2, 1, 1, "0"),
        ]


@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "all_to_all", "reduce_scatter"])
def test_astra_microbenchmarks(public_dataset: Path, coll: str) -> None:
    with tracekit.open(public_dataset) as ds:
        rows = ds.sql(
            "select rank, comm_type, in_bytes, group_size from collectives where job_id = ? order by rank",
            [f"astra-sim-microbenchmarks/{coll}"],
        ).fetchall()
        world = ds.sql("select world_size from jobs where job_id = ?", [f"astra-sim-microbenchmarks/{coll}"]).fetchall()
    assert rows == [(r, coll.upper(), 1_048_576, 4) for r in range(4)]
    assert world == [(4,)]


@pytest.mark.parametrize("job", ["dlrm_pytorch_et", "param-dlrm-8rank"])
def test_dlrm_execution_traces(public_dataset: Path, dlrm_alone: Path, job: str) -> None:
    # Alone, and linked with its profiler traces (both archives in their folder are one job).
    with tracekit.open(public_dataset if job == "param-dlrm-8rank" else dlrm_alone) as ds:
        rows = ds.sql("select rank, comm_type, is_uneven, in_bytes from collectives where job_id = ?", [job]).fetchall()
    assert {r[0] for r in rows} == set(range(8))
    for rank in range(8):
        mine = [r[1:] for r in rows if r[0] == rank]
        assert Counter((t, u) for t, u, _ in mine) == {
            ("ALL_TO_ALL", True): 4,
            ("ALL_TO_ALL", False): 1,
            ("ALL_REDUCE", False): 3,
        }
        assert sorted(b for t, u, b in mine if t == "ALL_REDUCE") == [448, 907_840, 1_576_964]
        assert sorted(b for t, u, b in mine if u) == [1_536, 13_568, 24_576, 24_576]
        assert [b for t, u, b in mine if t == "ALL_TO_ALL" and not u] == [192]


@pytest.mark.parametrize("job", ["dlrm_kineto", "param-dlrm-8rank"])
def test_dlrm_profiler_traces(public_dataset: Path, dlrm_alone: Path, job: str) -> None:
    with tracekit.open(public_dataset if job == "param-dlrm-8rank" else dlrm_alone) as ds:
        rows = ds.sql(
            "select rank, comm_type, count(*) from collectives where job_id = ? group by all order by all", [job]
        ).fetchall()
    assert rows == [(r, t, n) for r in range(8) for t, n in (("ALL_REDUCE", 3), ("ALL_TO_ALL", 5))]


def test_resnet_seen_as_execution_trace_and_as_profiler_trace_gives_the_same_rows(
    public_dataset: Path,
) -> None:
    query = "select comm_type, in_bytes, group_size from collectives where job_id = ? order by comm_type, in_bytes"
    with tracekit.open(public_dataset) as ds:
        host = ds.sql(query, ["param-resnet-2gpu"]).fetchall()
        device = ds.sql(query, ["hta-nccl-2gpu"]).fetchall()
        groups = ds.sql("select job_id, pg_desc, group_size, ranks from process_groups order by 1").fetchall()
    assert host == device
    assert Counter(t for t, _, _ in host) == {"ALL_REDUCE": 15, "BROADCAST": 6}
    assert sorted({b for t, b, _ in host if t == "ALL_REDUCE"}) == RESNET_ALLREDUCE
    assert sorted({b for t, b, _ in host if t == "BROADCAST"}) == RESNET_BROADCAST
    assert {g for _, _, g in host} == {2}
    assert groups == [
        ("hta-nccl-2gpu", "default_pg", 2, [0, 1]),
        ("param-resnet-2gpu", "default_pg", 2, [0, 1]),
    ]


@pytest.mark.parametrize("job", ["dlrm", None])
def test_dlrm_host_and_device_traces_link_into_one_row_per_collective(
    public_traces: Path, tmp_path: Path, job: str | None
) -> None:
    # With --job, and without: the two archives side by side in their folder are one run.
    report = ingest([public_traces / "param-dlrm-8rank"], tmp_path / "ds", job=job)
    assert report.ok and report.complete
    with tracekit.open(tmp_path / "ds") as ds:
        assert ds.sql("select job_id, world_size, trace_count from jobs").fetchall() == [
            (job or "param-dlrm-8rank", 8, 16)
        ]
    with tracekit.open(tmp_path / "ds") as ds:
        per_rank = ds.sql(
            "select rank, source, comm_type, count(*), count(start_us), count(linked_trace_id) "
            "from collectives group by all order by all"
        ).fetchall()
        sizes = ds.sql(
            "select comm_type, in_bytes, count(*) from collectives where rank = 0 group by all order by all"
        ).fetchall()
    assert per_rank == [(r, "linked", t, n, n, n) for r in range(8) for t, n in (("ALL_REDUCE", 3), ("ALL_TO_ALL", 5))]
    assert sizes == [
        ("ALL_REDUCE", 448, 1),
        ("ALL_REDUCE", 907_840, 1),
        ("ALL_REDUCE", 1_576_964, 1),
        ("ALL_TO_ALL", 192, 1),
        ("ALL_TO_ALL", 1_536, 1),
        ("ALL_TO_ALL", 13_568, 1),
        ("ALL_TO_ALL", 24_576, 2),
    ]


def test_every_collective_uses_the_data_model_vocabulary(public_dataset: Path) -> None:
    from tracekit.schema import COMM_TYPES

    with tracekit.open(public_dataset) as ds:
        found = {r[0] for r in ds.sql("select distinct comm_type from collectives").fetchall()}
    assert found and found <= set(COMM_TYPES)
