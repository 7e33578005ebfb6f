"""The NCCL settings a replay models (each named after the NCCL environment variable it stands for)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError

if TYPE_CHECKING:
    from tracekit.parsers.nccl_log import NcclLog

PROTOCOLS = ("LL", "LL128", "Simple")
MAX_CHANNELS = 64  # NCCL's MAXCHANNELS
MAX_QPS = 128  # NCCL_IB_QPS_PER_CONNECTION is capped at 128 (NCCL_NET_MAX_REQUESTS-sized arrays)
IN_NETWORK = ("nvls", "collnet")  # in-network reductions a replay may switch on (NCCL_NVLS_ENABLE, NCCL_COLLNET_ENABLE)


@dataclass(frozen=True)
class NcclOptions:
    channels: int | None = None  # NCCL_MIN/MAX_NCHANNELS: None = what NCCL picks for the topology
    p2p_channels: int = 2  # NCCL_NCHANNELS_PER_NET_PEER: p2p channels per remote peer
    qps: int = 1  # NCCL_IB_QPS_PER_CONNECTION
    pxn: bool = True  # NCCL_PXN_DISABLE=0 (NCCL >= 2.12)
    protocol: str | None = None  # NCCL_PROTO: None = NCCL's tuner
    gpu_arch: int = 90  # compute capability x10 of the GPUs (the tuner's tables): 80 Ampere, 90 Hopper, 100 Blackwell
    # NCCL_NVLS_ENABLE / NCCL_COLLNET_ENABLE: NVLink SHARP in the NVSwitch, SHARP in the network's
    # switches; off by default (they need NVSwitch multicast, or a SHARP fabric and NCCL's plugin)
    in_network: tuple[str, ...] = ()
    log: NcclLog | None = field(default=None, compare=False)  # rings, trees, NICs from an NCCL INFO log

    def __post_init__(self) -> None:
        if self.channels is not None:
            _check("channels", self.channels, 1, MAX_CHANNELS)
        _check("p2p_channels", self.p2p_channels, 1, MAX_CHANNELS)
        _check("qps", self.qps, 1, MAX_QPS)
        if self.protocol is not None and self.protocol not in PROTOCOLS:
            raise InputError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {self.protocol!r}")
        unknown = [r for r in self.in_network if r not in IN_NETWORK]
        if unknown or len(set(self.in_network)) != len(self.in_network):
            raise InputError(
                f"in_network must name each of {', '.join(IN_NETWORK)} at most once, not {self.in_network!r}"
            )
        if self.gpu_arch not in (70, 80, 90, 100):
            raise InputError(f"gpu_arch must be 70, 80, 90 or 100, not {self.gpu_arch!r}")

    def describe(self) -> dict[str, Any]:
        out = asdict(replace(self, log=None))
        out["log"] = None if self.log is None else self.log.path
        out["in_network"] = list(self.in_network)
        return out


def _check(name: str, value: Any, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InputError(f"{name} must be an integer in {lo}..{hi}, not {value!r}")
