"""The bundled sample traces: real captured PyTorch jobs (host + profiler traces per rank), the
same jobs converted to Chakra .et, each collective counted once and identical across formats."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import tracekit
from tracekit.ingest import ingest

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
# Per rank over the two profiled steps (sample_traces/README.md).
EXPECTED = {
    "ddp_mlp": {"ALL_REDUCE": 8, "BROADCAST": 2},
    "fsdp_mlp": {"ALL_GATHER": 12, "REDUCE_SCATTER": 6},
    "moe_alltoall": {"ALL_TO_ALL": 10, "ALL_REDUCE": 2},
    "pipeline_p2p": {"BROADCAST": 2, "ALL_REDUCE": 8, "SEND": 4, "RECV": 4},
}


def _ingest(tmp_path_factory: pytest.TempPathFactory, folder: str) -> Path:
    out = tmp_path_factory.mktemp(folder) / "ds"
    report = ingest([SAMPLES / folder], out)
    assert report.ok, report.errors
    return out


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _ingest(tmp_path_factory, "captured")


@pytest.fixture(scope="module")
def chakra_samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _ingest(tmp_path_factory, "chakra")


@pytest.mark.parametrize("job", sorted(EXPECTED))
def test_captured_jobs_count_each_collective_once_per_rank(samples: Path, job: str) -> None:
    with tracekit.open(samples) as ds:
        rows = ds.sql("select rank, comm_type, source, start_us from collectives where job_id = ?", [job]).fetchall()
        world = ds.sql("select world_size, ranks_seen from jobs where job_id = ?", [job]).fetchall()
    assert world == [(4, 4)]
    for rank in range(4):
        assert Counter(t for r, t, _, _ in rows if r == rank) == EXPECTED[job], f"rank {rank}"
    # Every collective was seen by both traces of its rank and merged into one row with timing.
    assert {s for _, _, s, _ in rows} == {"linked"}
    assert all(start is not None for *_, start in rows)


@pytest.mark.parametrize("job", sorted(EXPECTED))
def test_the_same_job_as_pytorch_traces_and_as_chakra_gives_the_same_rows(
    samples: Path, chakra_samples: Path, job: str
) -> None:
    query = (
        "select rank, comm_type, in_bytes, peer, count(*) from collectives where job_id = ? group by all order by all"
    )
    with tracekit.open(samples) as pytorch, tracekit.open(chakra_samples) as chakra:
        assert pytorch.sql(query, [job]).fetchall() == chakra.sql(query, [job]).fetchall()


def test_pipeline_peers_pair_up(samples: Path) -> None:
    with tracekit.open(samples) as ds:
        pairs = ds.sql(
            "select rank, comm_type, peer, count(*) from collectives "
            "where job_id = 'pipeline_p2p' and comm_type in ('SEND', 'RECV') group by all order by all"
        ).fetchall()
    assert pairs == [
        (0, "RECV", 1, 4),
        (0, "SEND", 1, 4),
        (1, "RECV", 0, 4),
        (1, "SEND", 0, 4),
        (2, "RECV", 3, 4),
        (2, "SEND", 3, 4),
        (3, "RECV", 2, 4),
        (3, "SEND", 2, 4),
    ]


def test_uneven_all_to_all_splits_are_consistent_across_ranks(samples: Path) -> None:
    with tracekit.open(samples) as ds:
        rows = ds.sql(
            "select rank, seq, op_id, in_splits, out_splits from collectives "
            "where job_id = 'moe_alltoall' and is_uneven order by rank, start_us"
        ).fetchall()
    by_rank: dict[int, list[tuple[list[int], list[int]]]] = {}
    for rank, _, _, ins, outs in rows:
        by_rank.setdefault(rank, []).append((ins, outs))
    assert sorted(by_rank) == [0, 1, 2, 3] and {len(v) for v in by_rank.values()} == {8}
    for k in range(8):
        for i in range(4):
            for j in range(4):
                # What rank i sends to j in its k-th all-to-allv is what j receives from i.
                assert by_rank[i][k][0][j] == by_rank[j][k][1][i]


def test_every_collective_uses_the_data_model_vocabulary(samples: Path, chakra_samples: Path) -> None:
    from tracekit.schema import COMM_TYPES

    for dataset in (samples, chakra_samples):
        with tracekit.open(dataset) as ds:
            found = {r[0] for r in ds.sql("select distinct comm_type from collectives").fetchall()}
        assert found and found <= set(COMM_TYPES)


def test_a_profiler_trace_taken_again_replaces_the_collectives_linked_to_it(tmp_path: Path) -> None:
    import gzip
    import shutil

    job = tmp_path / "in" / "ddp_mlp"
    shutil.copytree(SAMPLES / "captured" / "ddp_mlp", job)
    ingest([tmp_path / "in"], tmp_path / "ds")
    retaken = job / "kineto_rank1.json.gz"
    retaken.write_bytes(gzip.compress(gzip.decompress(retaken.read_bytes()) + b"\n"))
    report = ingest([tmp_path / "in"], tmp_path / "ds")
    assert report.files_replaced == [str(retaken)]
    with tracekit.open(tmp_path / "ds") as ds:
        per_rank = ds.sql("select rank, count(*) from collectives group by rank order by rank").fetchall()
        assert per_rank == [(rank, 10) for rank in range(4)]
        assert ds.sql("select count(*) from traces").fetchall() == [(8,)]
        parquet = ds.sql(f"select count(*) from read_parquet('{tmp_path / 'ds' / 'collectives'}/*.parquet')")
        assert parquet.fetchall() == [(40,)]
