"""Network indicators, ECMP hashing trials, the fleet locality table and the host heatmap."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tracekit.replay import Placement, fleet_locality, host_matrix, replay
from tracekit.replay.clos import Clos
from tracekit.replay.indicators import burstiness, ecmp, network_indicators


def test_indicators_of_a_job_spread_over_hosts(captured_dataset: Path) -> None:
    result = replay(captured_dataset, "moe_alltoall", placement=Placement(gpus_per_host=1, hosts_per_rack=1))
    row = network_indicators(result, qp_scaling=4, clos=Clos(spines=4), trials=50)
    assert row["intra_host_bytes"] == 0 and row["inter_host_bytes"] == row["bytes"] > 0
    assert row["inter_rack_bytes"] == row["bytes"]
    assert row["max_peers_per_gpu"] == 3 and row["max_peer_hosts_per_host"] == 3  # all-to-all: full mesh
    assert row["host_pairs"] == 12
    assert row["connections_after_qp_scaling"] == 4 * row["network_connections"] == 4 * 12
    assert row["iterations"] == 2  # two ProfilerStep spans were captured
    assert row["inter_host_bytes_per_gpu_per_iteration"] == row["inter_host_bytes"] / 4 / 2
    assert row["ecmp_trials"] == 50 and row["ecmp_connections"] == 48
    assert row["ecmp_byte_max_over_mean"] >= row["ideal_byte_max_over_mean"] >= 1.0
    assert row["burst_peak_over_mean"] >= 1.0


def test_ecmp_with_one_uplink_is_the_ideal_spread(captured_dataset: Path) -> None:
    result = replay(captured_dataset, "ddp_mlp", placement=Placement(gpus_per_host=1, hosts_per_rack=1))
    one = ecmp(result, Clos(spines=1), trials=10)
    assert one["ecmp_byte_max_over_mean"] == pytest.approx(one["ideal_byte_max_over_mean"])
    many = ecmp(result, Clos(spines=16), trials=200, seed=1)
    assert many["ecmp_byte_max_over_mean"] > 1.5  # a ring: 4 connections hashed over 16 uplinks collide


def test_a_job_inside_one_host_has_no_network_indicators(captured_dataset: Path) -> None:
    row = network_indicators(replay(captured_dataset, "fsdp_mlp"))
    assert row["intra_host_share"] == 1.0 and row["network_connections"] == 0 and row["ecmp_trials"] == 0


def test_burstiness_buckets_keep_every_network_byte(captured_dataset: Path) -> None:
    result = replay(captured_dataset, "pipeline_p2p", placement=Placement(gpus_per_host=1))
    buckets = burstiness(result.flows)
    inter = result.flows.filter(pl.col("src_host") != pl.col("dst_host"))["bytes"].sum()
    assert buckets["bytes"].sum() == inter and buckets.height >= 2


def test_fleet_locality_per_class(captured_dataset: Path) -> None:
    table = fleet_locality(captured_dataset, placement=Placement(gpus_per_host=2))
    # The classes of the job_class view: inferred from each job's collectives (no labels here).
    assert dict(zip(table["class"], table["jobs"], strict=True)) == {"ddp": 1, "fsdp": 1, "ranking-ddp": 1, "llm-3d": 1}
    assert all(0 <= share <= 1 for share in table["intra_host_share"])


def test_host_matrix_holds_network_bytes_only(captured_dataset: Path) -> None:
    result = replay(captured_dataset, "ddp_mlp", placement=Placement(gpus_per_host=1))
    matrix = host_matrix(result)
    assert matrix.columns == ["src_host", "dst_host", "bytes", "share"]
    assert matrix["share"].max() == pytest.approx(1.0) and (matrix["src_host"] != matrix["dst_host"]).all()
    network = result.flows.filter(pl.col("src_host") != pl.col("dst_host"))["bytes"].sum()
    assert matrix["bytes"].sum() == network
