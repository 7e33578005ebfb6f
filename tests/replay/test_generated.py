"""Generated 64-GPU jobs (tracekit generate) replayed as NCCL runs them: NIC balance, PXN connections, bytes."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import tracekit
from tracekit.generate import generate_fleet
from tracekit.ingest import ingest
from tracekit.replay import NcclOptions, replay
from tracekit.replay.indicators import network_indicators

pytestmark = pytest.mark.slow  # commands and fleets end to end: make check runs them, make fast does not


@pytest.fixture(scope="module")
def fleet64(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A generated fleet's first 64-GPU FSDP job and first 64-GPU ranking job, ingested."""
    root = tmp_path_factory.mktemp("generated")
    generate_fleet(root / "fleet", 40, 7, "default")
    chosen: dict[str, str] = {}
    with (root / "fleet" / "tracekit_manifest.csv").open() as handle:
        for row in csv.DictReader(handle):
            cls = row["label"].split(":")[0]
            if row["world_size"] == "64" and cls in ("fsdp", "ranking-ddp") and cls not in chosen:
                chosen[cls] = row["job_id"]
    assert set(chosen) == {"fsdp", "ranking-ddp"}, chosen
    assert ingest([root / "fleet" / job for job in chosen.values()], root / "ds").ok
    return root / "ds", chosen


def test_fsdp_all_gather_and_reduce_scatter_spread_over_every_nic(fleet64: tuple[Path, dict[str, str]]) -> None:
    dataset, jobs = fleet64
    result = replay(dataset, jobs["fsdp"])
    net = result.flows.filter(
        (pl.col("link") == "network") & pl.col("comm_type").is_in(["ALL_GATHER", "REDUCE_SCATTER"])
    )
    assert net.height
    egress = net.group_by("src_nic").agg(pl.col("bytes").sum())["bytes"].to_numpy().astype(float)
    assert len(egress) == 64  # every NIC of the 8 hosts sends
    assert egress.max() / egress.mean() <= 1.1
    assert net.filter(pl.col("src_rail") != pl.col("dst_rail")).height == 0  # 8 hosts: paired rings stay on rails


def test_ranking_all_to_all_opens_one_network_connection_per_gpu_and_peer_host(
    fleet64: tuple[Path, dict[str, str]],
) -> None:
    dataset, jobs = fleet64
    result = replay(dataset, jobs["ranking-ddp"])
    a2a = result.flows.filter((pl.col("link") == "network") & (pl.col("comm_type") == "ALL_TO_ALL"))
    assert a2a.height
    per_pair = a2a.group_by("src_rank", "dst_host").agg(pl.col("dst_rank").n_unique().alias("peers"))
    assert per_pair["peers"].max() == 1
    without = replay(dataset, jobs["ranking-ddp"], options=NcclOptions(pxn=False)).flows
    a2a_off = without.filter((pl.col("link") == "network") & (pl.col("comm_type") == "ALL_TO_ALL"))
    assert a2a_off.group_by("src_rank", "dst_host").agg(pl.col("dst_rank").n_unique())["dst_rank"].max() == 8
    row = network_indicators(result, trials=4)
    assert row["max_peers_per_gpu"] <= 7 + 7  # one per remote host, plus its ring/tree peers


# An all-to-allv rank sends all of its input but its own split, S − S · own split / Σ splits, where
# collective_wire_bytes counts (n − 1)/n · S: the difference, over the job.
_UNEVEN_ALL_TO_ALL_BYTES = """
select sum(c.in_bytes - c.in_bytes * c.in_splits[coalesce(nullif(list_position(g.ranks, c.rank), 0), c.rank + 1)]
           / list_sum(c.in_splits) - (c.group_size - 1) / c.group_size * c.in_bytes)
from collectives c join process_groups g on g.job_id = c.job_id and g.pg_name = c.pg_name
where c.job_id = ? and c.comm_type = 'ALL_TO_ALL' and c.in_splits is not null
"""


def test_every_collective_delivers_the_bytes_of_the_wire_bytes_query(fleet64: tuple[Path, dict[str, str]]) -> None:
    # Independent of the replay: collective_wire_bytes (queries/) gives each rank's textbook bytes on the
    # wire; the replay's delivered bytes (every flow but the NVLink hop to a PXN proxy) must add up to them.
    dataset, jobs = fleet64
    for job in jobs.values():
        with tracekit.open(dataset) as ds:
            wire = ds.query("collective_wire_bytes", {"job_id": job}).pl()
            uneven = ds.sql(_UNEVEN_ALL_TO_ALL_BYTES, [job]).fetchall()[0][0]
            result = replay(ds, job)
        delivered = result.flows.filter(~(pl.col("pxn") & (pl.col("link") != "network")))
        by_type = delivered.group_by("comm_type").agg(pl.col("bytes").sum()).sort("comm_type")
        expected = wire.group_by("comm_type").agg(pl.col("wire_bytes").sum()).sort("comm_type")
        got = dict(by_type.iter_rows())
        if uneven is not None:  # the query's even-split value; the replay sends the recorded splits
            expected = expected.with_columns(
                pl.when(pl.col("comm_type") == "ALL_TO_ALL")
                .then(pl.col("wire_bytes") + uneven)
                .otherwise(pl.col("wire_bytes"))
                .alias("wire_bytes")
            )
        for comm_type, total in expected.iter_rows():
            if comm_type in ("SEND", "RECV") or comm_type not in got:
                continue
            assert abs(got[comm_type] - total) <= 1e-9 * total + 64 * 64, (job, comm_type)
    assert np.isfinite(result.collectives["model_duration_s"].to_numpy()).all()
