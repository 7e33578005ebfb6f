"""The fluid model: closed forms (one flow, incast, unequal sizes, ring all-reduce), edge cases
(zero bytes, no links, zero and infinite capacity, cycles), the statistics, bad input, and
properties on random cases: bytes conserved, no flow faster than its path allows, no link over
capacity at any step, max-min fair at every step, dependencies respected, the exact event order
equal to a plain one-event-at-a-time reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.fabric.reference import simulate as reference
from tracekit.errors import InputError
from tracekit.fabric import Endpoints, FabricSpec, FlowEnds, FluidResult, Incidence, link_loads, route, simulate

B = 50e9  # 400 Gb/s


def incidence(paths: list[list[tuple[int, float]]], links: int) -> Incidence:
    flow = np.array([f for f, p in enumerate(paths) for _ in p], dtype=np.int64)
    link = np.array([lk for p in paths for lk, _ in p], dtype=np.int64)
    weight = np.array([w for p in paths for _, w in p], dtype=np.float64)
    n = len(paths)
    return Incidence(flow, link, weight, np.zeros(n), np.zeros(n, dtype=np.bool_), links)


def csr(deps: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.concatenate(([0], np.cumsum([len(d) for d in deps]))).astype(np.int64)
    return ptr, np.array([x for d in deps for x in d], dtype=np.int64)


Case = tuple[list[list[tuple[int, float]]], list[float], list[float], list[float], list[float], list[list[int]]]


def run(
    paths: list[list[tuple[int, float]]],
    capacity: list[float],
    sizes: list[float],
    *,
    release: list[float] | None = None,
    latency: list[float] | None = None,
    deps: list[list[int]] | None = None,
    rtol: float = 1e-3,
    series_buckets: int = 0,
    debug: bool = False,
) -> FluidResult:
    n = len(paths)
    ptr, idx = csr(deps) if deps is not None else (None, None)
    return simulate(
        incidence(paths, len(capacity)),
        np.array(capacity, dtype=np.float64),
        np.array(sizes, dtype=np.float64),
        np.zeros(n) if release is None else np.array(release, dtype=np.float64),
        np.zeros(n) if latency is None else np.array(latency, dtype=np.float64),
        ptr,
        idx,
        rtol=rtol,
        series_buckets=series_buckets,
        debug=debug,
    )


def test_one_flow_takes_its_latency_then_size_over_rate() -> None:
    r = run([[(0, 1.0), (1, 1.0)]], [B, 2 * B], [1e9], latency=[3e-6])
    assert r.start_s.tolist() == [0.0]
    assert r.end_s[0] == pytest.approx(3e-6 + 1e9 / B, rel=1e-12)
    assert r.link_bytes.tolist() == [1e9, 1e9]
    assert r.link_peak.tolist() == [1.0, 0.5]
    assert r.link_utilisation[0] == pytest.approx(1e9 / (B * r.makespan_s))


def test_an_incast_of_n_equal_flows_ends_together_after_n_sizes() -> None:
    ep = Endpoints(hosts=9, gpus_per_host=1, nics_per_host=1, nic_Bps=B, nvlink_Bps=1e12)
    net = FabricSpec(kind="ideal").build(ep)
    src = np.arange(1, 9)
    dst = np.zeros(8, dtype=np.int64)
    inc = route(net, FlowEnds(src, dst, src, dst, np.zeros(8, int), np.ones(8, int)))
    size = 64e6
    r = simulate(inc, net.capacity_Bps, np.full(8, size), np.zeros(8), inc.path_latency_s + 2e-6)
    assert np.allclose(r.end_s, 2e-6 + 2e-6 + 8 * size / B, rtol=1e-12)
    assert r.events == 2  # all start, all finish


def test_unequal_flows_on_one_link_the_small_finish_first_and_the_rest_speed_up() -> None:
    sizes = [10.0, 20.0, 30.0, 40.0]
    r = run([[(0, 1.0)]] * 4, [1.0], sizes)
    # all four at 1/4 until the 10 has moved (t = 40); three at 1/3 for the next 10 each (t = 70);
    # two at 1/2 (t = 90); the last alone (t = 100)
    assert r.end_s.tolist() == pytest.approx([40.0, 70.0, 90.0, 100.0], rel=1e-12)


def ring_all_reduce(
    ep: Endpoints, size: float, latency: float
) -> tuple[FlowEnds, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """2(n-1) dependent steps of n flows of size/n: rank i sends to i+1; step k of rank i waits for
    step k-1 of rank i-1 (the chunk it forwards)."""
    n = ep.gpus
    steps = 2 * (n - 1)
    k, i = (a.ravel() for a in np.meshgrid(np.arange(steps), np.arange(n), indexing="ij"))
    dst = (i + 1) % n
    same_host = i // ep.gpus_per_host == dst // ep.gpus_per_host
    src_nic = np.where(same_host, -1, ep.nic_of_gpu(i))
    dst_nic = np.where(same_host, -1, ep.nic_of_gpu(dst))
    flows = FlowEnds(src_nic, dst_nic, i, dst, np.zeros(len(i), int), np.where(same_host, 0, 1))
    deps = [[] if kk == 0 else [int((kk - 1) * n + (ii - 1) % n)] for kk, ii in zip(k, i, strict=True)]
    ptr, idx = csr(deps)
    return flows, np.full(len(i), size / n), ptr, idx, np.full(len(i), latency)


@pytest.mark.parametrize(("hosts", "gpus"), [(8, 1), (1, 8)])
def test_a_ring_all_reduce_on_a_non_blocking_fabric(hosts: int, gpus: int) -> None:
    ep = Endpoints(hosts=hosts, gpus_per_host=gpus, nics_per_host=1, nic_Bps=B, nvlink_Bps=9 * B)
    net = FabricSpec(kind="ideal", link_latency_s=0.0).build(ep)
    size, latency = 256e6, 5e-6
    flows, sizes, ptr, idx, lat = ring_all_reduce(ep, size, latency)
    r = simulate(route(net, flows), net.capacity_Bps, sizes, np.zeros(flows.size), lat, ptr, idx)
    n, rate = ep.gpus, B if hosts > 1 else 9 * B
    assert r.makespan_s == pytest.approx(2 * (n - 1) / n * size / rate + 2 * (n - 1) * latency, rel=1e-9)
    step_end = r.end_s.reshape(2 * (n - 1), n)
    assert np.allclose(step_end, step_end[:, :1])  # every step ends at once
    assert r.events == 2 * 2 * (n - 1)  # each step starts at once and ends at once


def test_spraying_over_a_2_to_1_leaf_halves_the_rate() -> None:
    ep = Endpoints(hosts=4, gpus_per_host=8, nics_per_host=8, nic_Bps=B, nvlink_Bps=1e12, hosts_per_rack=2)
    net = FabricSpec(kind="clos2", spines=4, oversubscription=2.0, link_latency_s=0.0).build(ep)
    src, dst = np.arange(16), np.arange(16, 32)  # rack 0 to rack 1, NIC to NIC
    inc = route(net, FlowEnds(src, dst, src, dst, np.zeros(16, int), np.ones(16, int)), "spray")
    r = simulate(inc, net.capacity_Bps, np.full(16, 1e9), np.zeros(16), np.zeros(16))
    assert np.allclose(r.end_s, 1e9 / (B / 2), rtol=1e-12)
    assert np.allclose(r.link_peak[net.leaf_up[0]], 1.0)


def test_zero_bytes_and_no_links_take_their_latency_only() -> None:
    r = run([[(0, 1.0)], [], [(0, 1.0)]], [1.0], [0.0, 5.0, 2.0], latency=[0.5, 0.25, 0.0], release=[1.0, 0.0, 0.0])
    assert r.end_s.tolist() == [1.5, 0.25, 2.0]
    assert r.link_bytes.tolist() == [2.0]


def test_infinite_capacity_constrains_nothing() -> None:
    r = run([[(0, 1.0), (1, 1.0)]], [math.inf, 2.0], [4.0])
    assert r.end_s.tolist() == [2.0]
    r = run([[(0, 1.0)]], [math.inf], [4.0], latency=[1.0])
    assert r.end_s.tolist() == [1.0]


def test_a_zero_capacity_link_never_finishes_and_nor_do_its_dependants() -> None:
    r = run([[(0, 1.0)], [(1, 1.0)], [(1, 1.0)], [(1, 1.0)]], [0.0, 1.0], [1.0, 1.0, 1.0, 1.0], deps=[[], [], [0], [2]])
    assert r.end_s[1] == 1.0
    assert math.isinf(r.end_s[0]) and math.isinf(r.start_s[2]) and math.isinf(r.end_s[3])
    assert r.unfinished == 3
    assert r.makespan_s == 1.0


def test_a_dependency_cycle_never_starts() -> None:
    r = run([[(0, 1.0)]] * 3, [1.0], [1.0, 1.0, 1.0], deps=[[1], [0], []])
    assert r.end_s[2] == 1.0 and r.unfinished == 2


def test_a_flow_waits_for_its_release_and_its_last_dependency() -> None:
    r = run(
        [[(0, 1.0)], [(1, 1.0)], [(2, 1.0)]],
        [1.0, 1.0, 1.0],
        [1.0, 3.0, 1.0],
        release=[0.0, 0.0, 2.0],
        deps=[[], [], [0, 1]],
        latency=[0, 0, 0.5],
    )
    assert r.start_s.tolist() == [0.0, 0.0, 3.0]
    assert r.end_s.tolist() == [1.0, 3.0, 4.5]


def test_completions_close_together_are_one_event() -> None:
    sizes = [1.0 + 1e-6 * k for k in range(100)]  # on one link: all finish within 1e-4 of each other
    exact = run([[(0, 1.0)]] * 100, [1.0], sizes, rtol=1e-9)
    batched = run([[(0, 1.0)]] * 100, [1.0], sizes, rtol=1e-3)
    assert (exact.events, batched.events) == (1 + 100, 1 + 1)
    assert np.allclose(batched.end_s, exact.end_s, rtol=1e-3)
    assert batched.end_s[0] == exact.end_s[0] == pytest.approx(100.0)


def test_independent_parts_move_in_the_same_step() -> None:
    r = run([[(k, 1.0)] for k in range(100)], [1.0] * 100, [1.0 + 0.01 * k for k in range(100)], rtol=1e-9)
    assert r.end_s.tolist() == pytest.approx([1.0 + 0.01 * k for k in range(100)], rel=1e-12)
    assert r.events == 2  # all start; then, nothing waiting, every part finishes in the same step


def test_the_series_is_bounded_and_adds_up_to_the_bytes() -> None:
    paths = [[(0, 1.0)], [(0, 1.0), (1, 1.0)], [(1, 1.0)]]
    r = run(paths, [1.0, 2.0], [1.0, 3.0, 5.0], release=[0.0, 1.0, 100.0], series_buckets=8)
    s = r.series
    assert s is not None and s.utilisation.shape[0] <= 8 and s.links.tolist() == [0, 1]
    width = np.diff(s.edges_s)
    carried = (s.utilisation * width[:, None] * np.array([1.0, 2.0])[None, :]).sum(axis=0)
    assert np.allclose(carried, r.link_bytes, rtol=1e-6)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"capacity": [-1.0]}, "capacity_Bps"),
        ({"capacity": [math.nan]}, "capacity_Bps"),
        ({"sizes": [-1.0]}, "bytes"),
        ({"sizes": [math.inf]}, "bytes"),
        ({"latency": [-1.0]}, "latency_s"),
        ({"release": [math.nan]}, "release_s"),
        ({"rtol": 0.5}, "rtol"),
        ({"deps": [[3]]}, "dep_idx"),
    ],
)
def test_bad_input_is_refused(changes: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"capacity": [1.0], "sizes": [1.0]}
    args.update(changes)
    capacity, sizes = args.pop("capacity"), args.pop("sizes")
    with pytest.raises(InputError, match=message):
        run([[(0, 1.0)]], capacity, sizes, **args)  # type: ignore[arg-type]


def test_bad_incidence_and_dependency_arrays_are_refused() -> None:
    inc = Incidence(np.array([0]), np.array([5]), np.array([1.0]), np.zeros(1), np.zeros(1, dtype=np.bool_), 1)
    with pytest.raises(InputError, match="out of range"):
        simulate(inc, np.ones(1), np.ones(1), np.zeros(1), np.zeros(1))
    inc = incidence([[(0, 0.0)]], 1)
    with pytest.raises(InputError, match="weights"):
        simulate(inc, np.ones(1), np.ones(1), np.zeros(1), np.zeros(1))
    inc = incidence([[(0, 1.0)], [(0, 1.0)]], 1)
    with pytest.raises(InputError, match="dep_ptr"):
        simulate(inc, np.ones(1), np.ones(2), np.zeros(2), np.zeros(2), np.array([0, 1, 0]), np.array([1]))


def test_an_unsorted_incidence_is_accepted() -> None:
    inc = Incidence(np.array([1, 0, 1]), np.array([0, 0, 1]), np.ones(3), np.zeros(2), np.zeros(2, dtype=np.bool_), 2)
    r = simulate(inc, np.array([3.0, 1.0]), np.array([1.0, 1.0]), np.zeros(2), np.zeros(2))
    assert r.end_s.tolist() == pytest.approx([0.5, 1.0])  # flow 1 held to 1 by link 1, flow 0 takes the rest


@st.composite
def cases(draw: st.DrawFn) -> Case:
    links = draw(st.integers(1, 5))
    n = draw(st.integers(1, 12))
    entry = st.tuples(st.integers(0, links - 1), st.sampled_from([1.0, 0.5, 0.25]))
    paths = [draw(st.lists(entry, max_size=3, unique_by=lambda e: e[0])) for _ in range(n)]
    capacity = draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0]), min_size=links, max_size=links))
    sizes = draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, 2.5, 7.0]), min_size=n, max_size=n))
    release = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.7]), min_size=n, max_size=n))
    latency = draw(st.lists(st.sampled_from([0.0, 0.1, 0.3]), min_size=n, max_size=n))
    deps = [sorted(draw(st.sets(st.integers(0, f - 1), max_size=2))) if f else [] for f in range(n)]
    return paths, capacity, sizes, release, latency, deps


@settings(max_examples=examples(300), deadline=None)
@given(cases())
def test_properties_on_random_cases(case: Case) -> None:
    paths, capacity, sizes, release, latency, deps = case
    r = run(paths, capacity, sizes, release=release, latency=latency, deps=deps, rtol=1e-9, debug=True)
    start, end = reference(paths, capacity, sizes, release, latency, deps)
    assert np.allclose(r.start_s, start, rtol=1e-9, atol=1e-12)
    assert np.allclose(r.end_s, end, rtol=1e-9, atol=1e-12)
    cap = np.array(capacity)
    done = np.isfinite(r.end_s)
    # bytes conserved: every finished flow moved all its bytes over each of its links
    inc = incidence(paths, len(capacity))
    expected = link_loads(inc, np.where(done, sizes, 0.0))
    assert np.allclose(r.link_bytes, expected) or not done.all()
    # no flow faster than its path allows: bytes x max(weight / capacity) after its latency
    for f, p in enumerate(paths):
        if done[f] and p and sizes[f] > 0:
            slowest = max(w / cap[lk] for lk, w in p)
            assert r.end_s[f] >= r.start_s[f] + latency[f] + sizes[f] * slowest * (1 - 1e-9)
        if math.isfinite(r.start_s[f]):
            assert r.start_s[f] >= max([release[f]] + [r.end_s[d] for d in deps[f]])
    for event in r.log:  # at every step: within capacity, and max-min fair
        load = np.zeros(len(capacity))
        rate = dict(zip(event.flows.tolist(), event.rate_Bps.tolist(), strict=True))
        for f, x in rate.items():
            for lk, w in paths[f]:
                load[lk] += w * x
        assert np.all(load <= cap * (1 + 1e-9) + 1e-12)
        for f, x in rate.items():
            if x > 0 or not any(cap[lk] == 0 for lk, _ in paths[f]):
                assert any(
                    load[lk] >= cap[lk] * (1 - 1e-9)
                    and all(rate[g] <= x * (1 + 1e-9) for g in rate if any(m == lk for m, _ in paths[g]))
                    for lk, _ in paths[f]
                )


@settings(max_examples=examples(100), deadline=None)
@given(cases())
def test_the_default_tolerance_stays_close_to_the_exact_order(case: Case) -> None:
    paths, capacity, sizes, release, latency, deps = case
    exact = run(paths, capacity, sizes, release=release, latency=latency, deps=deps, rtol=1e-9)
    batched = run(paths, capacity, sizes, release=release, latency=latency, deps=deps)
    assert np.array_equal(np.isfinite(exact.end_s), np.isfinite(batched.end_s))
    done = np.isfinite(exact.end_s)
    assert np.allclose(batched.end_s[done], exact.end_s[done], atol=1e-2 * max(exact.makespan_s, 1e-9))
