"""ECMP collisions: the router's hash over many seeds converges to the balls-into-bins closed
forms; spraying spreads flows evenly."""

from __future__ import annotations

import math

import pytest

from tracekit.errors import InputError
from tracekit.fabric import collision_probability, collision_stats, expected_max_load


def test_closed_forms_on_small_cases_by_hand() -> None:
    assert collision_probability(2, 2) == 0.5
    assert collision_probability(3, 3) == pytest.approx(1 - 6 / 27)
    assert collision_probability(5, 4) == 1.0
    assert expected_max_load(2, 2) == pytest.approx(1.5)
    # 3 flows on 3 links: max 1 (6/27), 3 (3/27), 2 (18/27)
    assert expected_max_load(3, 3) == pytest.approx((6 * 1 + 18 * 2 + 3 * 3) / 27)
    assert expected_max_load(1, 8) == pytest.approx(1.0)
    assert expected_max_load(8, 1) == pytest.approx(8.0)


@pytest.mark.parametrize(("flows", "links"), [(4, 16), (8, 8), (16, 16), (32, 8)])
def test_the_hash_converges_to_the_closed_forms(flows: int, links: int) -> None:
    seeds = 20_000
    stats = collision_stats(flows, links, seeds)
    p = collision_probability(flows, links)
    # within 5 standard errors of the binomial proportion, and of the mean of the max
    assert abs(stats.collision_probability - p) <= 5 * math.sqrt(max(p * (1 - p), 1e-12) / seeds) + 1e-12
    assert stats.mean_max == pytest.approx(
        expected_max_load(flows, links), abs=5 * stats.max_load.std() / math.sqrt(seeds)
    )


def test_meta_s_max_mean_ratio_for_1000_flows_on_16_links() -> None:
    # SIGCOMM'24 (research note §1.7): "already above 1.2 for 1,000 flows over 16 links"
    assert expected_max_load(1000, 16) / (1000 / 16) == pytest.approx(1.2296, abs=1e-3)
    assert collision_stats(1000, 16, 2000).max_mean_ratio == pytest.approx(1.2296, abs=0.01)


def test_spraying_gives_the_ideal_spread() -> None:
    stats = collision_stats(100, 16, 10, routing="spray")
    assert stats.max_mean_ratio == 1.0 and stats.collision_probability == 1.0


def test_bad_arguments() -> None:
    with pytest.raises(InputError, match="flows must be an integer"):
        collision_stats(0, 4)
    with pytest.raises(InputError, match="routing must be ecmp or spray"):
        collision_stats(4, 4, routing="pinned")
