"""What a fabric attaches to: the job's hosts, their GPUs and NICs, and the rates inside a host.

Global ids: NIC `host * nics_per_host + local_nic`, GPU `host * gpus_per_host + local_gpu`. Local
GPU g sends through local NIC `g * nics_per_host // gpus_per_host` (one NIC per GPU when the counts
match, one NIC per pair of GPUs with 4 NICs for 8 GPUs, ...). Rates are bytes per second per
direction (400 Gb/s = 50e9 B/s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from tracekit.errors import InputError

# A job has at most this many GPUs and this many NICs (the replay's placement allows 2^20 ranks):
# a Network allocates a few links per GPU and per NIC.
MAX_DEVICES = 1 << 20
MAX_PER_HOST = 1 << 10


@dataclass(frozen=True)
class Endpoints:
    """The job's hosts 0..hosts-1, what each holds, and the rates inside a host (bytes/s).

    `nic_rail` gives the rail of each local NIC (default: rail = NIC index). `pcie_Bps` is the
    GPU<->NIC PCIe rate per GPU and direction; `math.inf` means NICs are fed directly (no PCIe
    links on any path). `hosts_per_rack` is the placement's grouping of hosts under one leaf
    switch (Clos fabrics).
    """

    hosts: int
    gpus_per_host: int
    nics_per_host: int
    nic_Bps: float
    nvlink_Bps: float
    pcie_Bps: float = math.inf
    nic_rail: tuple[int, ...] = ()
    hosts_per_rack: int = 2

    def __post_init__(self) -> None:
        for name in ("hosts", "gpus_per_host", "nics_per_host", "hosts_per_rack"):
            _check_count(name, getattr(self, name), MAX_DEVICES)
        for name in ("gpus_per_host", "nics_per_host"):
            _check_count(name, getattr(self, name), MAX_PER_HOST)
        if self.hosts * max(self.gpus_per_host, self.nics_per_host) > MAX_DEVICES:
            raise InputError(f"endpoints: at most {MAX_DEVICES} GPUs and NICs per job")
        for name in ("nic_Bps", "nvlink_Bps"):
            _check_rate(name, getattr(self, name), allow_inf=False)
        _check_rate("pcie_Bps", self.pcie_Bps, allow_inf=True)
        rails = tuple(self.nic_rail) if self.nic_rail else tuple(range(self.nics_per_host))
        if len(rails) != self.nics_per_host or not all(_is_int(r) and 0 <= r < MAX_PER_HOST for r in rails):
            raise InputError(
                f"endpoints: nic_rail must give a rail in 0..{MAX_PER_HOST - 1} for each of the "
                f"{self.nics_per_host} NICs of a host, not {self.nic_rail!r}"
            )
        object.__setattr__(self, "nic_rail", rails)

    @property
    def nics(self) -> int:
        return self.hosts * self.nics_per_host

    @property
    def gpus(self) -> int:
        return self.hosts * self.gpus_per_host

    def nic_of_gpu(self, gpu: NDArray[np.int64]) -> NDArray[np.int64]:
        """The global NIC that feeds each global GPU in `gpu`."""
        host, local = np.divmod(np.asarray(gpu, dtype=np.int64), self.gpus_per_host)
        return host * self.nics_per_host + local * self.nics_per_host // self.gpus_per_host

    def gpu_of_nic(self, nic: NDArray[np.int64]) -> NDArray[np.int64]:
        """The GPU attached to each global NIC in `nic` (the GPU a relay through that NIC uses): the
        first GPU it feeds, or with more NICs than GPUs the GPU whose NICs it is among."""
        host, local = np.divmod(np.asarray(nic, dtype=np.int64), self.nics_per_host)
        scaled = local * self.gpus_per_host
        if self.gpus_per_host >= self.nics_per_host:
            gpu = -(-scaled // self.nics_per_host)  # ceil: the first g with g * N // G == local
        else:
            gpu = scaled // self.nics_per_host
        return host * self.gpus_per_host + gpu


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _check_count(name: str, value: object, limit: int) -> None:
    if not _is_int(value) or not 1 <= int(value) <= limit:  # type: ignore[call-overload]
        raise InputError(f"endpoints: {name} must be an integer in 1..{limit}, not {value!r}")


def _check_rate(name: str, value: object, allow_inf: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    if not ok or math.isnan(value) or (math.isinf(value) and not allow_inf):  # type: ignore[arg-type]
        raise InputError(f"endpoints: {name} must be a positive {'' if allow_inf else 'finite '}rate, not {value!r}")
