"""The bundled sample traces: real captured PyTorch jobs (host + profiler traces per rank), the
same jobs converted to Chakra .et, each collective counted once and identical across formats."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tracekit.ingest import ingest
from tracekit.replay import replay

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


# What both copies of a job must say of each rank's collectives, row for row. is_uneven only where
# a collective can be uneven: the Chakra parser leaves it null on the others (an all-reduce).
_AGREEMENT = (
    "select rank, comm_type, in_bytes, pg_name, group_size, peer, in_splits, out_splits, "
    "case when comm_type in ('ALL_TO_ALL', 'ALL_GATHER', 'REDUCE_SCATTER', 'GATHER', 'SCATTER') then is_uneven end, "
    "count(*) from collectives where job_id = ? group by all order by all"
)


@pytest.mark.parametrize("job", sorted(EXPECTED))
def test_both_copies_of_a_job_give_the_same_types_sizes_groups_and_splits(
    samples: Path, chakra_samples: Path, job: str
) -> None:
    with tracekit.open(samples) as pytorch, tracekit.open(chakra_samples) as chakra:
        captured = pytorch.sql(_AGREEMENT, [job]).fetchall()
        converted = chakra.sql(_AGREEMENT, [job]).fetchall()
    assert captured == converted
    # Every collective of the samples runs in a process group the traces name, of a known size.
    assert all(row[3] is not None and row[4] is not None for row in captured), job


@pytest.mark.parametrize("folder", ["captured", "chakra"])
def test_pipeline_all_reduces_run_in_the_data_parallel_pair(samples: Path, chakra_samples: Path, folder: str) -> None:
    dataset = samples if folder == "captured" else chakra_samples
    with tracekit.open(dataset) as ds:
        groups = ds.sql(
            "select rank, comm_type, pg_name, group_size, count(*) from collectives "
            "where job_id = 'pipeline_p2p' and comm_type in ('ALL_REDUCE', 'BROADCAST') group by all order by all"
        ).fetchall()
        members = dict(ds.sql("select pg_name, ranks from process_groups where job_id = 'pipeline_p2p'").fetchall())
        wire = ds.sql(
            "select sum(wire_bytes) from collective_wire_bytes('pipeline_p2p') where comm_type = 'ALL_REDUCE'"
        ).fetchall()
        replayed = replay(ds, "pipeline_p2p")
    all_reduces = replayed.collectives.filter(pl.col("comm_type") == "ALL_REDUCE")
    flows = replayed.flows.join(all_reduces.select("collective_id"), on="collective_id")
    # README: stage 0 = ranks 0 and 2 (dp_stage0), stage 1 = ranks 1 and 3 (dp_stage1); the
    # broadcast runs in the world group.
    dp = {0: "1", 2: "1", 1: "2", 3: "2"}
    assert groups == sorted(
        [(rank, "ALL_REDUCE", dp[rank], 2, 8) for rank in range(4)]
        + [(rank, "BROADCAST", "0", 4, 2) for rank in range(4)]
    )
    assert (members["1"], members["2"]) == ([0, 2], [1, 3])
    # A ring all-reduce over 2 ranks sends each rank's buffer once: 134,144 bytes, not 1.5x that
    # (over all 4 ranks), in the wire-bytes query and in the replay's flows alike.
    assert wire == [(134_144.0,)]
    assert all_reduces.height == 16 and set(all_reduces["participants"]) == {2}
    assert int(flows["bytes"].sum()) == 134_144


@pytest.mark.parametrize("folder", ["captured", "chakra"])
def test_moe_all_to_allv_splits_are_in_both_copies(samples: Path, chakra_samples: Path, folder: str) -> None:
    dataset = samples if folder == "captured" else chakra_samples
    with tracekit.open(dataset) as ds:
        rows = ds.sql(
            "select rank, is_uneven, in_splits, out_splits, in_bytes from collectives "
            "where job_id = 'moe_alltoall' and comm_type = 'ALL_TO_ALL' order by rank, op_id"
        ).fetchall()
    uneven = [r for r in rows if r[1]]
    assert len(rows) == 40 and len(uneven) == 32
    # README: rank 1, first profiled step, in splits [5,2,4,1] -> out splits [4,2,5,3] rows of 32 fp32.
    assert any((r[2], r[3]) == ([160, 64, 128, 32], [128, 64, 160, 96]) for r in uneven if r[0] == 1)
    assert all(4 * sum(r[2]) == r[4] for r in uneven)  # fp32: the splits add up to the bytes passed in


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
