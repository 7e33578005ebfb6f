"""Presets: each builds for a Meta-like placement, says where its numbers come from, and has the
shape its source describes."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit.fabric.presets as presets_module
from tracekit.errors import InputError
from tracekit.fabric import PRESETS, Endpoints, preset

META = Endpoints(hosts=32, gpus_per_host=8, nics_per_host=8, nic_Bps=50e9, nvlink_Bps=450e9, hosts_per_rack=2)


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_builds_and_is_documented_with_its_source(name: str) -> None:
    net = preset(name).build(META)
    assert net.name == name and net.links > 0
    assert f"`{name}`" in (presets_module.__doc__ or "")


def test_meta_ai_zone_is_a_non_blocking_rtsw_ctsw_clos() -> None:
    net = preset("meta-ai-zone").build(META)
    assert net.kind == "clos2" and net.leaf_up.shape == (16, 16)
    # an RTSW: 16 NICs of 400G down, as much up
    assert net.capacity_Bps[net.leaf_up[0]].sum() == pytest.approx(16 * 50e9)
    doubled = preset("meta-ai-zone-2x").build(META)
    assert doubled.capacity_Bps[doubled.leaf_up[0]].sum() == pytest.approx(2 * 16 * 50e9)


def test_meta_24k_oversubscribes_above_the_zone_7_to_1() -> None:
    net = preset("meta-24k").build(
        Endpoints(hosts=768, gpus_per_host=8, nics_per_host=8, nic_Bps=50e9, nvlink_Bps=1e12)
    )
    assert net.leaf_pod.max() == 1  # two zones of 192 racks
    zone_down = 192 * 16 * 50e9
    assert net.capacity_Bps[net.spine_up[0]].sum() == pytest.approx(zone_down / 7)


def test_the_superpod_is_rail_aligned_in_units_of_32_nodes() -> None:
    net = preset("dgx-h100-superpod").build(
        Endpoints(hosts=64, gpus_per_host=8, nics_per_host=8, nic_Bps=50e9, nvlink_Bps=1e12)
    )
    assert net.kind == "rail" and net.leaf_up.shape == (2 * 8, 32)
    assert np.allclose(net.capacity_Bps[net.leaf_up], 50e9)  # NDR 400G uplinks, 32 per leaf
    assert net.routing == "spray"


def test_an_unknown_preset() -> None:
    with pytest.raises(InputError, match="no preset 'x'; presets are ideal, meta-ai-zone"):
        preset("x")
