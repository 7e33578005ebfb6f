"""Max-min fair rates: closed forms, weights, zero capacity, the bottleneck property on random
cases against a plain progressive filling; independent parts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import examples
from tests.fabric.reference import max_min
from tracekit.fabric.fairshare import components, max_min_rates


def rates(paths: list[list[tuple[int, float]]], capacity: list[float]) -> list[float]:
    ef = np.array([f for f, p in enumerate(paths) for _ in p], dtype=np.int64)
    el = np.array([lk for p in paths for lk, _ in p], dtype=np.int64)
    ew = np.array([w for p in paths for _, w in p], dtype=np.float64)
    return max_min_rates(ef, el, ew, len(paths), np.array(capacity, dtype=np.float64)).tolist()


def test_flows_sharing_one_link_share_it_equally() -> None:
    assert rates([[(0, 1.0)]] * 4, [8.0]) == [2.0] * 4


def test_the_classic_three_flow_line() -> None:
    # links 0 and 1 (capacity 1): flow 0 crosses both, flows 1 and 2 one each -> all 1/2
    assert rates([[(0, 1.0), (1, 1.0)], [(0, 1.0)], [(1, 1.0)]], [1.0, 1.0]) == [0.5, 0.5, 0.5]
    # a roomier second link: flow 2 takes what flow 0 leaves there
    assert rates([[(0, 1.0), (1, 1.0)], [(0, 1.0)], [(1, 1.0)]], [1.0, 3.0]) == [0.5, 0.5, 2.5]


def test_weights_are_shares_of_the_rate() -> None:
    # a sprayed flow puts half of its rate on each of two links
    assert rates([[(0, 0.5), (1, 0.5)], [(0, 1.0)]], [1.0, 10.0]) == [2 / 3, 2 / 3]


def test_a_zero_capacity_link_stops_its_flows_only() -> None:
    assert rates([[(0, 1.0), (1, 1.0)], [(1, 1.0)]], [0.0, 4.0]) == [0.0, 4.0]


paths_strategy = st.lists(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from([1.0, 0.5, 0.25])),
        min_size=1,
        max_size=3,
        unique_by=lambda e: e[0],
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=examples(200), deadline=None)
@given(paths_strategy, st.lists(st.sampled_from([0.0, 1.0, 2.0, 5.0]), min_size=6, max_size=6))
def test_rates_are_max_min_fair(paths: list[list[tuple[int, float]]], capacity: list[float]) -> None:
    got = np.array(rates(paths, capacity))
    assert np.allclose(got, max_min(paths, capacity), rtol=1e-9, atol=1e-12)
    load = np.zeros(6)
    for f, p in enumerate(paths):
        for lk, w in p:
            load[lk] += w * got[f]
    assert np.all(load <= np.array(capacity) * (1 + 1e-9) + 1e-12)
    # every flow has a bottleneck: a saturated link where no flow has a higher rate
    for f, p in enumerate(paths):
        assert any(
            load[lk] >= capacity[lk] * (1 - 1e-9)
            and all(got[g] <= got[f] * (1 + 1e-9) for g, q in enumerate(paths) if any(m == lk for m, _ in q))
            for lk, _ in p
        )


def test_components_split_independent_flows() -> None:
    ef = np.array([0, 0, 1, 2, 3])
    el = np.array([0, 1, 1, 2, 3])
    flow_part, link_part = components(ef, el, 5, 4)
    assert flow_part[0] == flow_part[1] != flow_part[2] != flow_part[3]
    assert link_part[0] == link_part[1] == flow_part[0]
    assert len(set(flow_part.tolist())) == 4  # flow 4 crosses nothing: a part of its own


def test_components_of_a_long_chain() -> None:
    n = 1000  # flow i crosses links i and i + 1: one part
    ef = np.repeat(np.arange(n), 2)
    el = (np.arange(2 * n) + 1) // 2
    flow_part, _ = components(ef, el, n, n + 1)
    assert len(set(flow_part.tolist())) == 1
