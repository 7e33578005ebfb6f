"""Network indicators: locality, NIC balance, rails, connections and QPs, ECMP, burstiness; the host heatmap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tracekit.fabric.topology import FabricSpec
from tracekit.replay import NcclOptions, Placement, fleet_locality, host_matrix, replay
from tracekit.replay.indicators import burstiness, ecmp, network_indicators


def test_indicators_of_a_job_spread_over_hosts(captured_dataset: Path) -> None:
    result = replay(
        captured_dataset, "moe_alltoall", placement=Placement(gpus_per_host=1, hosts_per_rack=1),
        options=NcclOptions(qps=4),
    )  # fmt: skip
    row = network_indicators(result, trials=16)
    assert row["intra_host_bytes"] == 0 and row["inter_host_bytes"] == row["bytes"] > 0
    assert row["inter_rack_bytes"] == row["bytes"]
    assert row["max_peers_per_gpu"] == 3 and row["max_peer_hosts_per_host"] == 3  # all-to-all: full mesh
    assert row["host_pairs"] == 12
    assert row["network_qps"] >= row["network_connections"] >= 12
    assert row["cross_rail_bytes"] == 0  # one GPU per host: every NIC is rail 0
    assert row["iterations"] == 2  # two ProfilerStep spans were captured
    assert row["inter_host_bytes_per_gpu_per_iteration"] == row["inter_host_bytes"] / 4 / 2
    assert row["ecmp_trials"] == 16 and row["ecmp_flows"] > 12
    assert row["ecmp_byte_max_over_mean"] >= row["spray_byte_max_over_mean"] >= 1.0
    assert row["burst_peak_over_mean"] >= 1.0
    assert row["nic_egress_max_over_mean"] >= 1.0


def test_spraying_is_the_ideal_spread_and_ecmp_collides(captured_dataset: Path) -> None:
    result = replay(captured_dataset, "ddp_mlp", placement=Placement(gpus_per_host=1, hosts_per_rack=1))
    many = ecmp(result, FabricSpec("clos2", spines=16), trials=64, seed=1)
    assert many["spray_byte_max_over_mean"] == pytest.approx(1.0, rel=1e-3)
    assert many["ecmp_byte_max_over_mean"] > 1.2  # a ring's few connections hashed over 16 uplinks collide
    one = ecmp(result, FabricSpec("clos2", spines=1), trials=8)
    assert one["ecmp_byte_max_over_mean"] == pytest.approx(one["spray_byte_max_over_mean"])


def test_a_job_inside_one_host_has_no_network_indicators(captured_dataset: Path) -> None:
    row = network_indicators(replay(captured_dataset, "fsdp_mlp"))
    assert row["intra_host_share"] == 1.0 and row["network_connections"] == 0 and row["ecmp_trials"] == 0
    assert row["nic_egress_max_over_mean"] is None


def test_burstiness_buckets_keep_every_network_byte(captured_dataset: Path) -> None:
    result = replay(captured_dataset, "pipeline_p2p", placement=Placement(gpus_per_host=1))
    buckets = burstiness(result.flows)
    inter = result.flows.filter(pl.col("link") == "network")["bytes"].sum()
    assert buckets["bytes"].sum() == inter and buckets.height >= 2


def test_burstiness_buckets_are_bounded_however_long_the_span() -> None:
    flows = pl.DataFrame(
        {"link": ["network", "network"], "bytes": [10, 20], "start_s": [0.0, 1e7]}  # two calls 116 days apart
    )
    buckets = burstiness(flows)
    assert buckets.height <= 10_000 and buckets["bytes"].sum() == 30


def test_fleet_locality_per_class(captured_dataset: Path) -> None:
    table = fleet_locality(captured_dataset, placement=Placement(gpus_per_host=2))
    assert table["jobs"].sum() == 4
    assert all(0 <= share <= 1 for share in table["intra_host_share"])


def test_host_matrix_holds_network_bytes_only(captured_dataset: Path) -> None:
    result = replay(captured_dataset, "ddp_mlp", placement=Placement(gpus_per_host=1))
    matrix = host_matrix(result)
    assert matrix.columns == ["src_host", "dst_host", "bytes", "share"]
    assert matrix["share"].max() == pytest.approx(1.0) and (matrix["src_host"] != matrix["dst_host"]).all()
    network = result.flows.filter(pl.col("link") == "network")["bytes"].sum()
    assert matrix["bytes"].sum() == network


@settings(max_examples=examples(200), deadline=None)
@given(
    st.integers(1, 5).flatmap(
        lambda width: st.lists(
            st.tuples(*[st.integers(-(1 << 40), 1 << 40) | st.integers(-3, 3) for _ in range(width)]),
            min_size=1,
            max_size=60,
        )
    )
)
def test_distinct_rows_are_numpys_distinct_rows(rows: list[tuple[int, ...]]) -> None:
    from tracekit.replay.indicators import _rows

    table = np.array(rows, dtype=np.int64)
    assert np.array_equal(_rows(*table.T), np.unique(table, axis=0))
