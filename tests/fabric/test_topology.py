"""Fabric kinds build the links their definitions say, with the capacities oversubscription gives,
and refuse sizes past the caps before allocating anything."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.errors import InputError
from tracekit.fabric import KINDS, TIERS, Endpoints, FabricSpec
from tracekit.fabric.topology import MAX_LINKS_PER_TIER

NIC = 50e9


def endpoints(hosts: int = 4, **changes: object) -> Endpoints:
    args: dict[str, object] = {"hosts": hosts, "gpus_per_host": 8, "nics_per_host": 8, "nic_Bps": NIC}
    args.update({"nvlink_Bps": 450e9, **changes})
    return Endpoints(**args)  # type: ignore[arg-type]


def count(net: object, tier: str) -> int:
    return int(np.count_nonzero(net.tier == TIERS.index(tier)))  # type: ignore[attr-defined]


def test_every_kind_has_nvlink_ports_and_nic_links() -> None:
    ep = endpoints()
    for kind in KINDS:
        net = FabricSpec(kind=kind).build(ep)
        assert count(net, "nvlink") == 2 * ep.gpus
        assert count(net, "nic") == 2 * ep.nics
        assert np.all(net.capacity_Bps[net.gpu_up] == 450e9)
        assert np.all(net.capacity_Bps[net.nic_down] == NIC)
        assert count(net, "pcie") == 0 and np.all(net.pcie_up == -1)


def test_pcie_links_when_the_endpoints_give_a_rate() -> None:
    net = FabricSpec(kind="ideal").build(endpoints(pcie_Bps=64e9))
    assert count(net, "pcie") == 2 * 32
    assert np.all(net.capacity_Bps[net.pcie_up] == 64e9)


def test_clos2_leaves_hold_racks_and_oversubscription_sets_uplink_capacity() -> None:
    ep = endpoints(hosts=5, hosts_per_rack=2)  # 3 leaves, the last half full
    net = FabricSpec(kind="clos2", spines=4, oversubscription=2.0).build(ep)
    assert net.leaf_up.shape == (3, 4)
    assert net.nic_switch.tolist() == [h // 2 for h in range(5) for _ in range(8)]
    # a full leaf: 2 hosts x 8 NICs x 50 GB/s down; up = down / 2 over 4 uplinks
    assert np.allclose(net.capacity_Bps[net.leaf_up], 2 * 8 * NIC / 2 / 4)
    assert count(net, "leaf-spine") == 2 * 3 * 4
    assert net.nic_port[:16].tolist() == list(range(16))


def test_the_uplink_speed_may_be_given_instead_and_both_must_agree() -> None:
    ep = endpoints()
    net = FabricSpec(kind="clos2", spines=16, leaf_spine_Bps=NIC).build(ep)
    assert np.allclose(net.capacity_Bps[net.leaf_up], NIC)
    assert FabricSpec(kind="clos2", spines=16, leaf_spine_Bps=NIC, oversubscription=1.0).build(ep)
    with pytest.raises(InputError, match="disagrees"):
        FabricSpec(kind="clos2", spines=16, leaf_spine_Bps=NIC, oversubscription=2.0).build(ep)


def test_parallel_links_are_lanes_to_the_same_spine() -> None:
    net = FabricSpec(kind="clos2", spines=4, links_per_spine=2).build(endpoints())
    names = [net.link_name(int(i)) for i in net.leaf_up[0]]
    assert names[:4] == [f"leaf-spine:leaf0->spine{s}" for s in range(4)]
    assert names[4:] == [f"leaf-spine:leaf0->spine{s}#1" for s in range(4)]


def test_rail_has_one_leaf_per_rail_per_group() -> None:
    ep = endpoints(hosts=6)
    net = FabricSpec(kind="rail", hosts_per_group=4, spines=8).build(ep)
    assert net.leaf_up.shape == (2 * 8, 8)
    host, rail = np.divmod(np.arange(ep.nics), 8)
    assert np.array_equal(net.nic_switch, (host // 4) * 8 + rail)
    # each rail leaf of a full group: 4 NICs down
    assert np.allclose(net.capacity_Bps[net.leaf_up], 4 * NIC / 8)


def test_rails_given_per_nic_group_nics_on_the_same_rail() -> None:
    ep = endpoints(nic_rail=(0, 0, 1, 1, 2, 2, 3, 3))
    net = FabricSpec(kind="rail", hosts_per_group=4, spines=2).build(ep)
    assert net.leaf_up.shape == (4, 2)
    assert np.allclose(net.capacity_Bps[net.leaf_up], 4 * 2 * NIC / 2)


def test_clos3_pods_and_spine_planes() -> None:
    ep = endpoints(hosts=8, hosts_per_rack=2)  # 4 leaves
    net = FabricSpec(kind="clos3", racks_per_pod=2, spines=2, cores=3, core_oversubscription=4.0).build(ep)
    assert net.leaf_pod.tolist() == [0, 0, 1, 1]
    assert net.spine_up.shape == (2, 2, 3)
    leaf_up = 2 * 8 * NIC / 2  # non-blocking leaf, 2 uplinks
    spine_down = 2 * leaf_up  # two leaves per pod, one link each
    assert np.allclose(net.capacity_Bps[net.spine_up], spine_down / 4.0 / 3)
    dst = net.link_dst[net.spine_up[1, 1, 2]]
    assert net.link_name(int(net.spine_up[1, 1, 2])).startswith("spine-core:spine3->core5")
    assert net.node_index[dst] == 1 * 3 + 2


def test_rail_only_has_one_switch_per_rail_and_no_spines() -> None:
    net = FabricSpec(kind="rail-only").build(endpoints())
    assert net.leaf_up.size == 0 and net.spines == 0
    assert net.nic_switch.tolist() == list(range(8)) * 4


def test_nic_rate_override() -> None:
    net = FabricSpec(kind="ideal", nic_Bps=25e9).build(endpoints())
    assert np.all(net.capacity_Bps[net.nic_up] == 25e9)
    assert net.endpoints.nic_Bps == 25e9


def test_sizes_past_the_caps_are_refused_before_allocating() -> None:
    ep = endpoints(hosts=4096, hosts_per_rack=1)
    with pytest.raises(InputError, match=f"more than {MAX_LINKS_PER_TIER} leaf-spine links"):
        FabricSpec(kind="clos2", spines=4096).build(ep)
    with pytest.raises(InputError, match="spines must be an integer"):
        FabricSpec(kind="clos2", spines=5000)


@pytest.mark.parametrize(
    "changes",
    [
        {"kind": "torus"},
        {"routing": "random"},
        {"spines": 0},
        {"links_per_spine": 1.5},
        {"oversubscription": 0.0},
        {"oversubscription": float("inf")},
        {"leaf_spine_Bps": -1.0},
        {"link_latency_s": -1e-6},
        {"link_latency_s": 2.0},
        {"name": 3},
    ],
)
def test_bad_parameters_are_refused(changes: dict[str, object]) -> None:
    with pytest.raises(InputError, match="fabric: "):
        FabricSpec(**changes)  # type: ignore[arg-type]


def test_describe_lists_what_the_kind_reads() -> None:
    d = FabricSpec(kind="clos2", spines=8).describe()
    assert d["spines"] == 8 and "cores" not in d and d["kind"] == "clos2"
