"""Replay of real traces (DLRM splits, ASTRA-sim microbenchmarks) and of generated jobs: exact bytes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import tracekit
from tracekit.replay import Placement, replay

MiB = 1 << 20


def test_dlrm_all_to_allv_flows_reproduce_the_recorded_splits_exactly(dlrm_dataset: Path) -> None:
    with tracekit.open(dlrm_dataset) as ds:
        rows = ds.sql(
            "select rank, seq, dtype, in_splits, out_splits from collectives "
            "where job_id = 'dlrm' and is_uneven order by seq, rank"
        ).pl()
        result = replay(ds, "dlrm")
    elem = {"Float": 4, "Int": 4}
    checked = 0
    for (seq,), group in rows.group_by("seq"):
        # rows of one operation share (process group, seq): the collective's match_key is s<seq>
        collective = result.collectives.filter(pl.col("match_key") == f"s{seq}")["collective_id"].item()
        got = {
            (r["src_rank"], r["dst_rank"]): r["bytes"]
            for r in result.flows.filter(pl.col("collective_id") == collective).iter_rows(named=True)
        }
        for row in group.iter_rows(named=True):
            for peer, count in enumerate(row["in_splits"]):
                expected = count * elem[row["dtype"]]
                if peer != row["rank"] and expected:
                    assert got.pop((row["rank"], peer)) == expected
                    checked += 1
                # the recorded matrix is consistent: the receiver's out_split says the same
                receiver = group.filter(pl.col("rank") == peer).row(0, named=True)
                assert receiver["out_splits"][row["rank"]] == count
        assert not got, f"flows not in the recorded splits: {got}"
    assert checked == 4 * 8 * 7  # 4 all-to-allv calls, every ordered pair non-zero


@pytest.mark.parametrize(
    ("job", "per_rank", "total"),
    [
        # ring over 4 ranks, S = 1 MiB: AllReduce 2(n-1)/n*S, AllGather (n-1)*S, ReduceScatter (n-1)/n*S;
        # direct AllToAll (n-1)/n*S per rank.
        ("all_reduce", 3 * MiB // 2, 6 * MiB),
        ("all_gather", 3 * MiB, 12 * MiB),
        ("reduce_scatter", 3 * MiB // 4, 3 * MiB),
        ("all_to_all", 3 * MiB // 4, 3 * MiB),
    ],
)
def test_astra_sim_microbenchmarks_give_the_textbook_byte_totals(
    micro_dataset: Path, job: str, per_rank: int, total: int
) -> None:
    result = replay(micro_dataset, job)
    flows = result.flows
    assert int(flows["bytes"].sum()) == total
    sent = flows.group_by("src_rank").agg(pl.col("bytes").sum()).sort("src_rank")
    received = flows.group_by("dst_rank").agg(pl.col("bytes").sum()).sort("dst_rank")
    assert sent["bytes"].to_list() == [per_rank] * 4 == received["bytes"].to_list()
    assert (flows["src_rank"] != flows["dst_rank"]).all()
    assert result.timing == "dependency replay"  # Chakra microbenchmarks carry no timestamps
    # the first flows start after NCCL's base latency of the collective's algorithm and protocol
    first = flows.filter(pl.col("step") == 0)["start_s"].to_numpy()
    assert first.min() == first.max() and 0 <= first.max() < 20e-6


def test_every_flow_starts_once_the_flows_it_waits_for_have_ended(micro_dataset: Path) -> None:
    flows = replay(micro_dataset, "all_reduce").flows
    ends = dict(zip(flows["flow_id"].to_list(), flows["end_s"].to_list(), strict=True))
    for start, deps in zip(flows["start_s"].to_list(), flows["depends_on"].to_list(), strict=True):
        assert all(start >= ends[d] - 1e-12 for d in deps)
    assert flows["step"].max() == 5  # 2(n-1) ring steps


def test_dlrm_on_two_gpus_per_host_crosses_hosts_and_uses_trace_times(dlrm_dataset: Path) -> None:
    result = replay(dlrm_dataset, "dlrm", placement=Placement(gpus_per_host=2))
    assert result.timing == "trace timestamps"
    assert result.flows["src_host"].n_unique() == 4
    inter = result.flows.filter(pl.col("src_host") != pl.col("dst_host"))
    assert inter.height and inter["bytes"].sum() > 0
    # every collective starts at its recorded time: no two collectives share a start
    assert result.collectives["start_s"].n_unique() == result.collectives.height


FLEET = Path(__file__).resolve().parents[2] / "sample_traces" / "fleet"


def expected_total(comm_type: str, algorithm: str, n: int, size: int) -> int | None:
    """Bytes a collective moves in all, by the textbook formulas (None: not a fixed formula)."""
    if comm_type == "ALL_REDUCE":
        if algorithm == "halving-doubling":
            p = 1 << (n.bit_length() - 1)
            return 2 * (p - 1) * size + 2 * (n - p) * size
        return 2 * (n - 1) * size
    return {
        "REDUCE_SCATTER": (n - 1) * size,
        "ALL_GATHER": n * (n - 1) * size,
        "BROADCAST": (n - 1) * size,
        "SEND": size,
    }.get(comm_type)


@pytest.mark.parametrize(("archive", "label"), [("job-000058.tgz", "llm-3d:gpt-13b"), ("job-000000.tgz", None)])
def test_every_collective_of_a_generated_job_moves_its_textbook_bytes(tmp_path: Path, archive: str, label) -> None:  # type: ignore[no-untyped-def]
    from tracekit.ingest import ingest

    assert ingest([FLEET / archive], tmp_path / "ds", label=label).ok
    job = archive.removesuffix(".tgz")
    result = replay(tmp_path / "ds", job)
    assert not result.notes
    colls = result.collectives.filter(pl.col("participants") == pl.col("n"))
    assert colls.height == result.collectives.height  # every member of every group took part
    checked = 0
    for row in colls.iter_rows(named=True):
        if row["comm_type"] == "ALL_TO_ALL" and not row["is_uneven"]:
            total = None  # per-rank buffers: (n-1)/n of each, checked by the conservation tests
        else:
            total = expected_total(row["comm_type"], row["algorithm"], row["n"], row["size"])
        if total is not None:
            assert row["bytes"] == total, row
            checked += 1
    assert checked > 0
    if label:
        assert result.label == label and set(result.collectives["algorithm"]) >= {"p2p", "ring"}


def test_moe_all_to_allv_moves_exactly_the_bytes_each_rank_passes_in(captured_dataset: Path) -> None:
    # The sample's all-to-allv splits count rows of 32 fp32 in the trace: replayed as elements they
    # moved 1/32 of the data until the rulebook converted them (sizes.splits_in_elements).
    with tracekit.open(captured_dataset) as ds:
        rows = ds.sql(
            "select rank, in_bytes, out_bytes, in_splits, out_splits, dtype from collectives "
            "where job_id = 'moe_alltoall' and is_uneven"
        ).pl()
        result = replay(ds, "moe_alltoall")
    uneven = result.collectives.filter(pl.col("is_uneven"))["collective_id"].implode()
    flows = result.flows.filter(pl.col("collective_id").is_in(uneven))
    assert rows.height == 4 * 8 and set(rows["dtype"]) == {"Float"}
    for rank in range(4):
        mine = rows.filter(pl.col("rank") == rank)
        kept = sum(splits[rank] * 4 for splits in mine["in_splits"])
        assert kept == sum(splits[rank] * 4 for splits in mine["out_splits"])
        sent = int(flows.filter(pl.col("src_rank") == rank)["bytes"].sum())
        received = int(flows.filter(pl.col("dst_rank") == rank)["bytes"].sum())
        assert sent + kept == mine["in_bytes"].sum()
        assert received + kept == mine["out_bytes"].sum()
