"""Endpoints: every value checked, and the GPU <-> NIC association the router relies on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tracekit.errors import InputError
from tracekit.fabric import Endpoints


def test_defaults_give_one_rail_per_nic_and_no_pcie() -> None:
    ep = Endpoints(hosts=4, gpus_per_host=8, nics_per_host=8, nic_Bps=50e9, nvlink_Bps=450e9)
    assert ep.nic_rail == tuple(range(8))
    assert math.isinf(ep.pcie_Bps)
    assert (ep.nics, ep.gpus) == (32, 32)


@pytest.mark.parametrize(
    ("gpus", "nics", "gpu_to_nic", "nic_to_gpu"),
    [
        (8, 8, list(range(8)), list(range(8))),
        (8, 4, [0, 0, 1, 1, 2, 2, 3, 3], [0, 2, 4, 6]),
        (4, 8, [0, 2, 4, 6], [0, 0, 1, 1, 2, 2, 3, 3]),
    ],
)
def test_gpu_and_nic_association(gpus: int, nics: int, gpu_to_nic: list[int], nic_to_gpu: list[int]) -> None:
    ep = Endpoints(hosts=2, gpus_per_host=gpus, nics_per_host=nics, nic_Bps=1.0, nvlink_Bps=1.0)
    assert ep.nic_of_gpu(np.arange(gpus)).tolist() == gpu_to_nic
    assert ep.gpu_of_nic(np.arange(nics)).tolist() == nic_to_gpu
    # the second host's ids are offset by a host's worth
    assert ep.nic_of_gpu(np.array([gpus])).tolist() == [nics]
    assert ep.gpu_of_nic(np.array([nics])).tolist() == [gpus]


@pytest.mark.parametrize(
    "changes",
    [
        {"hosts": 0},
        {"hosts": 1.5},
        {"hosts": True},
        {"gpus_per_host": 2000},
        {"hosts": 1 << 20, "gpus_per_host": 2},
        {"nic_Bps": 0.0},
        {"nic_Bps": math.inf},
        {"nvlink_Bps": math.nan},
        {"pcie_Bps": -1.0},
        {"nic_rail": (0, 1)},
        {"nic_rail": (0, 1, 2, -1, 0, 0, 0, 0)},
        {"hosts_per_rack": 0},
    ],
)
def test_bad_values_are_refused(changes: dict[str, object]) -> None:
    args: dict[str, object] = {"hosts": 2, "gpus_per_host": 8, "nics_per_host": 8, "nic_Bps": 50e9, "nvlink_Bps": 1e11}
    args.update(changes)
    with pytest.raises(InputError, match="endpoints: "):
        Endpoints(**args)  # type: ignore[arg-type]
