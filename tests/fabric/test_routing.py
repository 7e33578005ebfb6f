"""Routing: conservation of bytes, every NIC pair routed on every kind, the rail-only detour, ECMP
determinism and its hash, pinning by destination, spraying's even split."""

from __future__ import annotations

import numpy as np
import pytest

from tracekit.errors import InputError
from tracekit.fabric import KINDS, ROUTINGS, TIERS, Endpoints, FabricSpec, FlowEnds, Network, link_loads, route
from tracekit.fabric.routing import MAX_ENTRIES, ecmp_pick, flow_hash

EP = Endpoints(hosts=8, gpus_per_host=4, nics_per_host=4, nic_Bps=50e9, nvlink_Bps=450e9, hosts_per_rack=2)
SPECS = {
    "ideal": FabricSpec(kind="ideal"),
    "clos2": FabricSpec(kind="clos2", spines=4, links_per_spine=2),
    "clos3": FabricSpec(kind="clos3", racks_per_pod=2, spines=2, links_per_spine=2, cores=3),
    "rail": FabricSpec(kind="rail", hosts_per_group=4, spines=3),
    "rail-only": FabricSpec(kind="rail-only"),
}


def all_pairs(ep: Endpoints = EP, qps: int = 1) -> FlowEnds:
    """A network flow between every ordered pair of NICs (qps each), GPUs fed by those NICs."""
    n = ep.nics
    src, dst = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    keep = src != dst
    src, dst = np.repeat(src[keep], qps), np.repeat(dst[keep], qps)
    qp = np.tile(np.arange(qps), int(keep.sum()))
    return FlowEnds(src, dst, ep.gpu_of_nic(src), ep.gpu_of_nic(dst), qp, np.ones(len(src), dtype=np.int64))


def tier_bytes(net: Network, loads: np.ndarray, tier: str, up: bool) -> float:
    return float(loads[(net.tier == TIERS.index(tier)) & (net.up == up)].sum())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("routing", ROUTINGS)
def test_every_pair_is_routed_and_bytes_are_conserved(kind: str, routing: str) -> None:
    net = SPECS[kind].build(EP)
    flows = all_pairs()
    inc = route(net, flows, routing, seed=7)
    sizes = np.arange(1, flows.size + 1, dtype=np.float64)
    loads = link_loads(inc, sizes)
    total = sizes.sum()
    # every flow enters at its NIC up-link (or its detour's) and leaves at its destination's down-link
    assert tier_bytes(net, loads, "nic", True) == pytest.approx(total)
    assert tier_bytes(net, loads, "nic", False) == pytest.approx(total)
    assert np.allclose(loads[net.nic_down], np.bincount(flows.dst_nic, sizes, minlength=EP.nics))
    # each tier carries each flow that needs it exactly once, up and down
    leaves = net.nic_switch
    away = (leaves[flows.src_nic] != leaves[flows.dst_nic]) & (kind != "rail-only")
    cross = np.zeros(flows.size, dtype=np.bool_)
    if kind == "clos3":
        cross = away & (net.leaf_pod[leaves[flows.src_nic]] != net.leaf_pod[leaves[flows.dst_nic]])
        assert cross.any()
    assert tier_bytes(net, loads, "leaf-spine", True) == pytest.approx(sizes[away].sum())
    assert tier_bytes(net, loads, "leaf-spine", False) == pytest.approx(sizes[away].sum())
    assert tier_bytes(net, loads, "spine-core", True) == pytest.approx(sizes[cross].sum())
    assert tier_bytes(net, loads, "spine-core", False) == pytest.approx(sizes[cross].sum())
    # per flow, the weights on each hop add up to the whole flow: 2, 4 or 6 network hops
    per_flow = np.bincount(inc.flow, inc.weight, minlength=flows.size)
    nvlink = 2 * inc.detoured
    assert np.allclose(per_flow, 2 + 2 * away + 2 * cross + nvlink)


def test_paths_end_where_they_should() -> None:
    net = SPECS["clos3"].build(EP)
    flows = all_pairs()
    inc = route(net, flows, "ecmp")
    first = np.searchsorted(inc.flow, np.arange(flows.size))
    last = np.searchsorted(inc.flow, np.arange(flows.size), side="right") - 1
    assert np.array_equal(inc.link[first], net.nic_up[flows.src_nic])
    assert np.array_equal(inc.link[last], net.nic_down[flows.dst_nic])
    # each path is a chain of links: one link's head is the next one's tail
    same = inc.flow[1:] == inc.flow[:-1]
    assert np.array_equal(net.link_dst[inc.link[:-1]][same], net.link_src[inc.link[1:]][same])
    assert np.all(inc.path_latency_s[~(net.nic_switch[flows.src_nic] == net.nic_switch[flows.dst_nic])] > 2e-6)


def test_nvlink_flows_cross_their_gpu_ports() -> None:
    net = SPECS["clos2"].build(EP)
    flows = FlowEnds(np.array([-1]), np.array([-1]), np.array([1]), np.array([3]), np.array([0]), np.array([0]))
    inc = route(net, flows, "ecmp")
    assert inc.link.tolist() == [net.gpu_up[1], net.gpu_down[3]]
    assert inc.path_latency_s.tolist() == [0.0]


def test_a_flow_into_or_out_of_a_switch_crosses_only_its_own_end() -> None:
    """In-network reductions: GPU -> NVSwitch, NVSwitch -> GPU, NIC -> SHARP switch, SHARP switch -> NIC."""
    ep = Endpoints(hosts=2, gpus_per_host=2, nics_per_host=2, nic_Bps=50e9, nvlink_Bps=1e11, pcie_Bps=64e9)
    net = SPECS["clos2"].build(ep)
    flows = FlowEnds(
        src_nic=np.array([-1, -1, 2, -1]), dst_nic=np.array([-1, -1, -1, 1]),
        src_gpu=np.array([1, -1, 2, -1]), dst_gpu=np.array([-1, 3, -1, 1]),
        qp=np.zeros(4, dtype=np.int64), kind=np.array([0, 0, 1, 1]),
    )  # fmt: skip
    inc = route(net, flows, "ecmp")
    paths = [inc.link[inc.flow == f].tolist() for f in range(4)]
    assert paths == [[net.gpu_up[1]], [net.gpu_down[3]], [net.pcie_up[2], net.nic_up[2]],
                     [net.nic_down[1], net.pcie_down[1]]]  # fmt: skip
    none = np.array([-1])
    nowhere = FlowEnds(none, none, none, none, np.array([0]), np.array([1]))
    with pytest.raises(InputError, match="NIC is not in the job"):  # both ends a switch: no flow of a job
        route(net, nowhere)


def test_pcie_is_crossed_first_and_last_when_modelled() -> None:
    ep = Endpoints(hosts=2, gpus_per_host=2, nics_per_host=2, nic_Bps=50e9, nvlink_Bps=1e11, pcie_Bps=64e9)
    net = FabricSpec(kind="ideal").build(ep)
    flows = FlowEnds(np.array([0]), np.array([3]), np.array([0]), np.array([3]), np.array([0]), np.array([1]))
    inc = route(net, flows)
    assert inc.link.tolist() == [net.pcie_up[0], net.nic_up[0], net.nic_down[3], net.pcie_down[3]]


def test_rail_only_detours_cross_rail_flows_over_nvlink() -> None:
    net = SPECS["rail-only"].build(EP)
    # NIC 1 (rail 1, host 0) to NIC 6 (rail 2, host 1): relay through host 0's GPU of rail 2
    flows = FlowEnds(
        np.array([1, 1]), np.array([6, 5]), np.array([1, 1]), np.array([6, 5]), np.zeros(2, int), np.ones(2, int)
    )
    inc = route(net, flows)
    assert inc.detoured.tolist() == [True, False]
    assert inc.link[inc.flow == 0].tolist() == [net.gpu_up[1], net.gpu_down[2], net.nic_up[2], net.nic_down[6]]
    assert inc.link[inc.flow == 1].tolist() == [net.nic_up[1], net.nic_down[5]]


def test_ecmp_is_deterministic_per_seed_and_varies_with_seed_and_qp() -> None:
    net = SPECS["clos2"].build(EP)
    flows = all_pairs(qps=4)
    a, b, c = (route(net, flows, "ecmp", seed=s) for s in (1, 1, 2))
    assert np.array_equal(a.link, b.link)
    assert not np.array_equal(a.link, c.link)
    # the QPs of one connection take different uplinks (not all the same)
    up = np.isin(a.link, net.leaf_up.ravel())
    per_qp = a.link[up].reshape(-1, 4)
    assert (per_qp != per_qp[:, :1]).any(axis=1).mean() > 0.5


def test_ecmp_uses_the_published_hash() -> None:
    net = SPECS["clos2"].build(EP)
    flows = all_pairs(qps=2)
    inc = route(net, flows, "ecmp", seed=11)
    up = np.isin(inc.link, net.leaf_up.ravel())
    away = net.nic_switch[flows.src_nic] != net.nic_switch[flows.dst_nic]
    pick = ecmp_pick(flow_hash(flows.src_nic[away], flows.dst_nic[away], flows.qp[away], 11), 1, net.leaf_up.shape[1])
    leaf = net.nic_switch[flows.src_nic[away]]
    assert np.array_equal(inc.link[up], net.leaf_up[leaf, pick])


@pytest.mark.parametrize("kind", ["clos2", "clos3", "rail"])
def test_pinned_routing_is_a_function_of_the_destination_only(kind: str) -> None:
    net = SPECS[kind].build(EP)
    flows = all_pairs(qps=3)
    inc = route(net, flows, "pinned", seed=5)
    assert np.array_equal(inc.link, route(net, flows, "pinned", seed=99).link)
    up = np.isin(inc.link, net.leaf_up.ravel())
    uplink = np.full(flows.size, -1)
    uplink[inc.flow[up]] = inc.link[up]
    index = np.where(
        uplink >= 0, np.argmax(net.leaf_up.ravel()[None, :] == uplink[:, None], axis=1) % net.leaf_up.shape[1], -1
    )
    for d in np.unique(flows.dst_nic):
        chosen = index[(flows.dst_nic == d) & (index >= 0)]
        assert len(set(chosen.tolist())) <= 1, f"destination {d} reached over several uplinks"


def test_pinned_spreads_a_leafs_destinations_over_its_uplinks() -> None:
    ep = Endpoints(hosts=4, gpus_per_host=8, nics_per_host=8, nic_Bps=50e9, nvlink_Bps=1e11, hosts_per_rack=2)
    net = FabricSpec(kind="clos2", spines=16).build(ep)
    src = np.arange(16, 32)
    dst = np.arange(16)  # every NIC of rack 1 to one NIC of rack 0
    flows = FlowEnds(src, dst, src, dst, np.zeros(16, int), np.ones(16, int))
    loads = link_loads(route(net, flows, "pinned"), np.ones(16))
    assert loads[net.leaf_up[1]].tolist() == [1.0] * 16


def test_spray_splits_evenly_over_the_uplinks() -> None:
    net = SPECS["clos2"].build(EP)
    flows = FlowEnds(np.array([0]), np.array([12]), np.array([0]), np.array([12]), np.array([0]), np.array([1]))
    inc = route(net, flows, "spray")
    loads = link_loads(inc, np.array([8.0]))
    assert loads[net.leaf_up[0]].tolist() == [1.0] * 8
    assert loads[net.leaf_down[net.nic_switch[12]]].tolist() == [1.0] * 8


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("kind", 2, "kind is not 0"),
        ("src_nic", 99, "NIC is not in the job"),
        ("src_gpu", 99, "GPU is neither -1 nor in the job"),
        ("qp", -1, "qp is not in"),
    ],
)
def test_bad_flows_are_refused_with_a_count_and_the_first(field: str, value: int, why: str) -> None:
    flows = all_pairs()
    arrays = {k: getattr(flows, k).copy() for k in ("src_nic", "dst_nic", "src_gpu", "dst_gpu", "qp", "kind")}
    arrays[field][3] = value
    with pytest.raises(InputError, match=f"1 flow\\(s\\): .*{why}.*first: flow 3"):
        route(SPECS["clos2"].build(EP), FlowEnds(**arrays))


def test_nvlink_flows_between_hosts_are_refused() -> None:
    flows = FlowEnds(np.array([-1]), np.array([-1]), np.array([0]), np.array([4]), np.array([0]), np.array([0]))
    with pytest.raises(InputError, match="different hosts"):
        route(SPECS["ideal"].build(EP), flows)


def test_flow_arrays_of_different_lengths_are_refused() -> None:
    with pytest.raises(InputError, match="different lengths"):
        FlowEnds(
            np.zeros(2, int), np.zeros(3, int), np.zeros(2, int), np.zeros(2, int), np.zeros(2, int), np.ones(2, int)
        )


def test_spray_past_the_entry_cap_is_refused_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tracekit.fabric.routing.MAX_ENTRIES", 1000)
    with pytest.raises(InputError, match="more than 1000 flow-link entries"):
        route(SPECS["clos2"].build(EP), all_pairs(), "spray")
    assert MAX_ENTRIES == 1 << 26


def test_no_flows() -> None:
    empty = np.zeros(0, dtype=np.int64)
    inc = route(SPECS["clos2"].build(EP), FlowEnds(empty, empty, empty, empty, empty, empty))
    assert inc.num_flows == 0 and inc.flow.size == 0


def test_many_seeds_routed_at_once_take_the_paths_each_seed_takes_alone() -> None:
    net = SPECS["clos3"].build(EP)
    flows = all_pairs(qps=2)
    copies = flows.tiled(3)
    together = route(net, copies, "ecmp", np.repeat(np.array([5, 6, 7]), flows.size))
    for k, seed in enumerate((5, 6, 7)):
        alone = route(net, flows, "ecmp", seed)
        mine = (together.flow >= k * flows.size) & (together.flow < (k + 1) * flows.size)
        assert together.link[mine].tolist() == alone.link.tolist()
    with pytest.raises(InputError, match="2 seeds for"):
        route(net, flows, "ecmp", np.array([1, 2]))
