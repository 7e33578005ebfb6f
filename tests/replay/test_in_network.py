"""In-network reductions (NVLS in the NVSwitch, CollNet in the network's switches): their traffic,
exact to the byte, the switch ends everywhere downstream, and NCCL's cost model choosing them.

Bytes over h hosts of g GPUs (n = h·g), all-reduce of S:
* NVLS: every GPU's buffer into the NVSwitch (n·S), each head's reduced slice back (h·S), the
  slice stored again (h·S) and multicast to every GPU (n·S); across hosts NCCL's tree between heads
  of one rail, 2(h-1)·S; so a GPU's NVLink carries S + S/g each way;
* CollNet Direct: each GPU's other slices to their heads and back over NVLink, 2(n - h)·S in all;
  each host's S into the switch and out of it, 2h·S on the network.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.replay.test_algorithms import build
from tracekit.errors import InputError
from tracekit.generate import generate_fleet
from tracekit.ingest import ingest
from tracekit.replay import NcclOptions, replay, whatif
from tracekit.replay.algorithms import NotApplicable
from tracekit.replay.algorithms.base import FROM_SWITCH, INTRA, NET, NO_SWITCH, TO_SWITCH
from tracekit.replay.indicators import network_indicators
from tracekit.replay.outputs import write_all
from tracekit.replay.stamp import Stamped

SIZES = st.integers(min_value=0, max_value=1 << 40)
CHANNELS = st.sampled_from([1, 2, 5, 16])
CHUNKS = st.sampled_from([1, 3])


def check_switch_structure(s: Stamped) -> None:
    sw = s.switch
    assert ((sw == NO_SWITCH) == (s.src != s.dst)).all(), "a switch flow names its one GPU at both ends"
    assert (s.bytes > 0).all()
    net = s.link == NET
    assert ((s.src_nic >= 0) == (net & (sw != FROM_SWITCH))).all(), "a NIC only where a network flow leaves one"
    assert ((s.dst_nic >= 0) == (net & (sw != TO_SWITCH))).all()
    owner = np.repeat(np.arange(len(s.src)), np.diff(s.dep_ptr))
    assert (s.dep_idx < owner).all()


def nvlink_per_gpu(s: Stamped, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Bytes each GPU sends up and receives down its NVLink (switch flows and GPU-to-GPU ones)."""
    intra, sw = s.link == INTRA, s.switch
    up = np.bincount(s.src[intra & (sw != FROM_SWITCH)], s.bytes[intra & (sw != FROM_SWITCH)], minlength=n)
    down = np.bincount(s.dst[intra & (sw != TO_SWITCH)], s.bytes[intra & (sw != TO_SWITCH)], minlength=n)
    return up, down


@settings(max_examples=examples(25), deadline=None)
@given(hosts=st.integers(1, 9), per_host=st.integers(2, 8), size=SIZES, channels=CHANNELS, chunks=CHUNKS)
def test_nvls_all_reduce_moves_s_plus_s_over_g_per_gpu_and_its_tree_between_heads(
    hosts: int, per_host: int, size: int, channels: int, chunks: int
) -> None:
    n = hosts * per_host
    s, layout = build("nvls", "ALL_REDUCE", n, size, per_host=per_host, channels=channels, chunks=chunks)
    check_switch_structure(s)
    sw, intra, net = s.switch, s.link == INTRA, s.link == NET
    assert s.bytes[intra & (sw == TO_SWITCH)].sum() == (n + hosts) * size
    assert s.bytes[intra & (sw == FROM_SWITCH)].sum() == (n + hosts) * size
    assert not (intra & (sw == NO_SWITCH)).any(), "NVLS sends nothing GPU to GPU inside a host"
    assert s.bytes[net].sum() == 2 * (hosts - 1) * size
    assert (layout.rails[s.src[net]] == layout.rails[s.dst[net]]).all(), "the tree between heads stays on one rail"
    up, down = nvlink_per_gpu(s, n)
    parts = channels * chunks  # each slice of a piece is exact to one byte
    assert np.abs(up - size * (1 + 1 / per_host)).max() <= parts + 1
    assert np.abs(down - size * (1 + 1 / per_host)).max() <= parts + 1


@settings(max_examples=examples(20), deadline=None)
@given(per_host=st.integers(2, 8), size=SIZES, channels=CHANNELS)
def test_nvls_reduce_scatter_and_all_gather_on_one_host(per_host: int, size: int, channels: int) -> None:
    rs, _ = build("nvls", "REDUCE_SCATTER", per_host, size, per_host=per_host, channels=channels)
    check_switch_structure(rs)
    assert rs.bytes[rs.switch == TO_SWITCH].sum() == per_host * size  # every GPU's whole input read
    assert rs.bytes[rs.switch == FROM_SWITCH].sum() == size  # each keeps its reduced slice
    shards = [size + k for k in range(per_host)]
    ag, _ = build("nvls", "ALL_GATHER", per_host, size, per_host=per_host, channels=channels, member_bytes=shards)
    check_switch_structure(ag)
    assert ag.bytes[ag.switch == TO_SWITCH].sum() == sum(shards)
    assert ag.bytes[ag.switch == FROM_SWITCH].sum() == per_host * sum(shards)  # multicast to every GPU


@settings(max_examples=examples(25), deadline=None)
@given(hosts=st.integers(2, 9), per_host=st.integers(1, 8), size=SIZES, channels=CHANNELS, chunks=CHUNKS)
def test_collnet_sends_each_hosts_bytes_once_into_the_network_and_once_out(
    hosts: int, per_host: int, size: int, channels: int, chunks: int
) -> None:
    n = hosts * per_host
    s, layout = build("collnet", "ALL_REDUCE", n, size, per_host=per_host, channels=channels, chunks=chunks)
    check_switch_structure(s)
    net, sw = s.link == NET, s.switch
    assert not (net & (sw == NO_SWITCH)).any(), "no NIC-to-NIC flow: the switches reduce"
    assert s.bytes[net & (sw == TO_SWITCH)].sum() == hosts * size
    assert s.bytes[net & (sw == FROM_SWITCH)].sum() == hosts * size
    for host in np.unique(layout.hosts):
        mine = net & (layout.hosts[s.src] == host)
        assert s.bytes[mine & (sw == TO_SWITCH)].sum() == size
        if size >= channels * chunks * per_host:  # every head's slice holds a byte
            nics = set(s.src_nic[mine & (sw == TO_SWITCH)].tolist())
            assert nics == set(layout.nics[layout.hosts == host].tolist()), "every NIC of the host"
    assert s.bytes[s.link == INTRA].sum() == 2 * (n - hosts) * size


def test_a_down_flow_waits_for_its_slice_from_every_host() -> None:
    s, layout = build("collnet", "ALL_REDUCE", 32, 1 << 20, per_host=8, channels=1)
    downs = np.flatnonzero(s.switch == FROM_SWITCH)
    for t in downs[:8].tolist():
        waits = s.dep_idx[s.dep_ptr[t] : s.dep_ptr[t + 1]]
        ups = waits[s.switch[waits] == TO_SWITCH]
        assert len(set(layout.hosts[s.src[ups]].tolist())) == 4


def test_in_network_algorithms_refuse_groups_nccl_would_not_run_them_on() -> None:
    with pytest.raises(NotApplicable):  # CollNet needs two nodes
        build("collnet", "ALL_REDUCE", 8, 1 << 20)
    with pytest.raises(NotApplicable):  # NVLS AllGather across hosts needs a CollNet plugin
        build("nvls", "ALL_GATHER", 16, 1 << 20)
    with pytest.raises(NotApplicable):  # one GPU per host: nothing for an NVSwitch to reduce
        build("nvls", "ALL_REDUCE", 4, 1 << 20, per_host=1)


@pytest.fixture(scope="module")
def ranking64(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A generated 64-GPU ranking job (DDP all-reduces of several sizes, all-to-alls), ingested."""
    root = tmp_path_factory.mktemp("in_network")
    generate_fleet(root / "fleet", 40, 7, "default")
    with (root / "fleet" / "tracekit_manifest.csv").open() as handle:
        job = next(r["job_id"] for r in csv.DictReader(handle)
                   if r["world_size"] == "64" and r["label"].startswith("ranking-ddp"))  # fmt: skip
    assert ingest([root / "fleet" / job], root / "ds").ok
    return root / "ds", job


def test_a_replay_with_nvls_sends_into_the_nvswitch_and_times_it_as_nccl_models_it(
    ranking64: tuple[Path, str],
) -> None:
    dataset, job = ranking64
    result = replay(dataset, job, options=NcclOptions(in_network=("nvls",)))
    colls = result.collectives.filter(pl.col("algorithm") == "nvls")
    assert colls.height, "NCCL's model picks NVLSTree for the large all-reduces of 8 x 8 H100"
    assert set(colls["comm_type"].to_list()) == {"ALL_REDUCE"}
    ratio = (colls["model_duration_s"] / colls["nccl_estimate_s"]).to_numpy()
    assert (ratio > 0.7).all() and (ratio < 1.5).all(), ratio
    nvls = result.flows.filter(pl.col("link") == "nvls")
    assert nvls.height and (nvls["src_rank"].is_null() ^ nvls["dst_rank"].is_null()).all()
    assert (nvls["src_host"] == nvls["dst_host"]).all() and nvls["src_nic"].is_null().all()
    ids = colls["collective_id"].implode()
    mine = result.flows.filter(pl.col("collective_id").is_in(ids))
    net = mine.filter(pl.col("link") == "network")
    assert (net["src_rail"] == net["dst_rail"]).all(), "NVLSTree's network hops stay on one rail"
    assert not mine.filter(pl.col("link") == "nvlink").height, "no GPU-to-GPU NVLink flow in NVLS"
    row = network_indicators(result)
    assert row["switch_bytes"] == int(nvls["bytes"].sum())
    assert row["cross_rail_bytes"] == 0 or row["cross_rail_bytes"] < row["inter_host_bytes"]


def test_a_replay_with_collnet_sends_each_hosts_bytes_to_the_switch_once(ranking64: tuple[Path, str]) -> None:
    dataset, job = ranking64
    result = replay(dataset, job, algorithm="collnet")
    colls = result.collectives.filter(pl.col("algorithm") == "collnet")
    assert colls.height and set(colls["comm_type"].to_list()) == {"ALL_REDUCE"}
    flows = result.flows.filter(pl.col("collective_id").is_in(colls["collective_id"].implode()))
    sharp = flows.filter(pl.col("link") == "collnet")
    into = sharp.filter(pl.col("dst_rank").is_null())
    # 8 hosts each send every all-reduced byte once into the network, and get it back once
    assert int(into["bytes"].sum()) == 8 * int(colls["size"].sum())
    assert int(sharp["bytes"].sum()) == 16 * int(colls["size"].sum())
    assert into["dst_host"].is_null().all() and into["src_nic"].is_not_null().all()
    assert not flows.filter(pl.col("link") == "network").height
    row = network_indicators(result)
    assert row["nic_egress_host_max_over_mean"] == pytest.approx(1.0, abs=0.1), "heads on every NIC"


def test_simulator_inputs_refuse_flows_that_end_in_a_switch(ranking64: tuple[Path, str], tmp_path: Path) -> None:
    dataset, job = ranking64
    result = replay(dataset, job, algorithm="collnet")
    for fmt in ("htsim", "hpcc", "chakra"):
        with pytest.raises(InputError, match="in-network reduction"):
            write_all(result, tmp_path / fmt, ["flows", fmt])
        assert not (tmp_path / fmt).exists()
    assert write_all(result, tmp_path / "flows", ["flows"])


def test_whatif_times_an_in_network_reduction_on_a_fabric(ranking64: tuple[Path, str]) -> None:
    dataset, job = ranking64
    from tracekit.fabric.presets import preset

    table = whatif(dataset, job, [preset("clos2-1to1")], ["spray"], algorithm="collnet", seeds=1).table
    row = table.filter(pl.col("comm_type") == "ALL_REDUCE").row(0, named=True)
    assert row["time_s"] > 0 and row["slowdown"] >= 0.99


@pytest.mark.slow
def test_collnet_over_many_hosts_is_built_as_arrays_and_bounded_by_max_flows() -> None:
    """A down waits for its slice from every host: 1,024 ranks make 4 million transfers and 41 million
    dependencies, built as arrays (a Python list per transfer took 560 MB at 256 ranks)."""
    from tracekit.replay.algorithms import Request, template
    from tracekit.replay.decompose import _estimate
    from tracekit.replay.layout import group_layout
    from tracekit.replay.nccl.options import NcclOptions
    from tracekit.replay.nccl.topology import model
    from tracekit.replay.placement import Placement

    placement = Placement()
    layout = group_layout(list(range(1024)), placement)
    req = Request("ALL_REDUCE", layout, model(layout, placement, NcclOptions()).first(16), channels=16, chunks=16)
    t = template("collnet", req)
    assert t.size == 2 * 1024 * 8 * 16 * 16
    assert t.size + t.dep_count <= _estimate("collnet", req, 1)
