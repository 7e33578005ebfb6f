"""Where each rank runs, and the host it runs on: rank → GPU → host → rack (leaf switch) → pod, NICs.

Defaults describe an H100-class training host in Meta's RoCE AI zone (research/meta-workload-findings.md
§1.12): 8 GPUs per host on an NVSwitch; NVLink 4 at 370.8 GB/s per GPU and direction, the figure NCCL's
topology uses (18 links × 20.6 GB/s, NVIDIA/nccl src/graph/topo.h SM90_NVLINK_BW; the datasheet's
line rate is 450 GB/s); one 400 Gb/s NIC per GPU (ConnectX-7, Grand Teton), each on its own rail
(NIC i of every host is on rail i); GPU↔NIC over PCIe Gen5 x16 (48 GB/s, NCCL's figure, topo.cc);
2 hosts per rack under one leaf (RTSW); 192 racks per pod (AI zone). Ranks are placed
host-contiguously: `host = rank // gpus_per_host`, `gpu = rank % gpus_per_host`.

A placement file (JSON, TOML, or YAML when PyYAML is installed) overrides any of these:

    {"gpus_per_host": 8, "hosts_per_rack": 2, "racks_per_pod": 192,
     "hosts": [[0, 1, 2, 3], [4, 5, 6, 7]],
     "nics_per_host": 4, "gpu_nics": [0, 0, 1, 1, 2, 2, 3, 3], "nic_rails": [0, 1, 2, 3],
     "nic_gbps": 400, "nvlink_gbytes": 370.8, "pcie_gbytes": 48, "intra_host": "nvlink",
     "cross_nic": 2}

* `hosts` lists the ranks of each host in GPU order (GPU index = position in the list); a rank that
  is not listed is an error. Racks group consecutive hosts (`rack = host // hosts_per_rack`), pods
  consecutive racks.
* `nics_per_host` (default: one per GPU) and `gpu_nics`, the NIC serving each local GPU (default:
  GPU g uses NIC g·nics/gpus, so two GPUs share a NIC when there are half as many); `nic_rails`,
  the rail of each NIC (default: its index). NICs have global ids `host · nics_per_host + nic`.
* `intra_host`: `nvlink` (GPUs talk over NVLink/NVSwitch) or `pcie` (a PCIe-only host).
* `cross_nic`: NCCL's `NCCL_CROSS_NIC`: 0 makes every ring and tree channel leave a host on the NIC
  it entered by (one rail from host to host; a ring's last GPU reaches that NIC through PXN when it
  is not its own), 1 lets a ring leave on its last GPU's own NIC (crossing rails between hosts), 2
  (NCCL's default) pairs the channels so that each enters on one NIC and leaves on another while
  every hop between hosts stays on one rail (odd hosts run the pair's other ring; with an odd host
  count the hop back to the first host crosses rails).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.fabric.files import read_mapping

if TYPE_CHECKING:
    import numpy as np

    from tracekit.fabric.endpoints import Endpoints

# One placement may describe at most this many ranks (a value read from a file sizes arrays).
MAX_RANKS = 1 << 20
# GPUs and NICs of one host at most (NVL72-class domains hold 72 GPUs; 1,024 leaves room).
MAX_PER_HOST = 1024
INTRA_HOST = ("nvlink", "pcie")
_KEYS = {
    "gpus_per_host",
    "hosts_per_rack",
    "racks_per_pod",
    "hosts",
    "nics_per_host",
    "gpu_nics",
    "nic_rails",
    "nic_gbps",
    "nvlink_gbytes",
    "pcie_gbytes",
    "intra_host",
    "cross_nic",
}


@dataclass(frozen=True)
class Placement:
    """Rank → GPU/host/rack/pod, and each host's NICs and link speeds (see the module docstring)."""

    gpus_per_host: int = 8
    hosts_per_rack: int = 2
    racks_per_pod: int = 192
    hosts: tuple[tuple[int, ...], ...] | None = None
    nics_per_host: int | None = None
    gpu_nics: tuple[int, ...] | None = None
    nic_rails: tuple[int, ...] | None = None
    nic_gbps: float = 400.0
    nvlink_gbytes: float = 370.8
    pcie_gbytes: float = 48.0
    intra_host: str = "nvlink"
    cross_nic: int = 2
    _index: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("gpus_per_host", "hosts_per_rack", "racks_per_pod"):
            _check_int(name, getattr(self, name), MAX_RANKS)
        if self.nics_per_host is not None:
            _check_int("nics_per_host", self.nics_per_host, MAX_PER_HOST)
        if self.gpus_per_host > MAX_PER_HOST and (self.gpu_nics is not None or self.nics_per_host is not None):
            raise InputError(f"placement: NICs are described for at most {MAX_PER_HOST} GPUs per host")
        for name in ("nic_gbps", "nvlink_gbytes", "pcie_gbytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1e6:
                raise InputError(f"placement: {name} must be a number in (0, 1e6], not {value!r}")
        if self.intra_host not in INTRA_HOST:
            raise InputError(f"placement: intra_host must be one of {', '.join(INTRA_HOST)}, not {self.intra_host!r}")
        if isinstance(self.cross_nic, bool) or self.cross_nic not in (0, 1, 2):
            raise InputError(f"placement: cross_nic must be 0, 1 or 2 (NCCL_CROSS_NIC), not {self.cross_nic!r}")
        self._check_nics()
        if self.hosts is not None:
            self._index.update(_host_index(self.hosts, self.gpus_per_host))

    def _check_nics(self) -> None:
        nics = self.nics
        if self.gpu_nics is not None:
            if len(self.gpu_nics) != self.gpus_per_host:
                raise InputError(f"placement: gpu_nics lists {len(self.gpu_nics)} NICs for {self.gpus_per_host} GPUs")
            bad = [n for n in self.gpu_nics if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < nics]
            if bad:
                raise InputError(f"placement: gpu_nics names NIC {bad[0]!r}, not one of the host's {nics} NICs")
        if self.nic_rails is not None:
            if len(self.nic_rails) != nics:
                raise InputError(f"placement: nic_rails lists {len(self.nic_rails)} rails for {nics} NICs")
            bad = [r for r in self.nic_rails if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < nics]
            if bad:
                raise InputError(f"placement: nic_rails names rail {bad[0]!r}, not in 0..{nics - 1}")

    @property
    def nics(self) -> int:
        """NICs per host."""
        return self.nics_per_host if self.nics_per_host is not None else self.gpus_per_host

    def nic_of_gpu(self, gpu: np.ndarray) -> np.ndarray:
        """The local NIC serving each local GPU index."""
        import numpy as np

        gpu = np.asarray(gpu, dtype=np.int64)
        if self.gpu_nics is not None:
            return np.asarray(self.gpu_nics, dtype=np.int64)[gpu]
        return gpu * self.nics // self.gpus_per_host

    def rail_of_nic(self, nic: np.ndarray) -> np.ndarray:
        """The rail of each local NIC index."""
        import numpy as np

        nic = np.asarray(nic, dtype=np.int64)
        if self.nic_rails is not None:
            return np.asarray(self.nic_rails, dtype=np.int64)[nic]
        return nic

    def endpoints(self, hosts: int) -> Endpoints:
        """The fabric's view of `hosts` hosts of this placement."""
        import numpy as np

        from tracekit.fabric.endpoints import Endpoints

        return Endpoints(
            hosts=max(hosts, 1),
            gpus_per_host=self.gpus_per_host,
            nics_per_host=self.nics,
            nic_Bps=self.nic_Bps,
            nvlink_Bps=self.intra_Bps,
            pcie_Bps=float("inf"),
            nic_rail=tuple(int(r) for r in self.rail_of_nic(np.arange(self.nics))),
            hosts_per_rack=self.hosts_per_rack,
        )

    def locate(self, ranks: np.ndarray) -> dict[str, np.ndarray]:
        """host, gpu (index within the host), nic (local), rail, rack and pod of each global rank (int arrays)."""
        import numpy as np

        ranks = np.asarray(ranks, dtype=np.int64)
        if self.hosts is None:
            host = ranks // self.gpus_per_host
            gpu = ranks % self.gpus_per_host
        else:
            missing = [int(r) for r in np.unique(ranks) if int(r) not in self._index]
            if missing:
                raise InputError(f"placement: rank(s) {missing[:8]} are not on any host of the placement file")
            pairs = np.array([self._index[int(r)] for r in ranks], dtype=np.int64).reshape(-1, 2)
            host, gpu = pairs[:, 0], pairs[:, 1]
        rack = host // self.hosts_per_rack
        nic = self.nic_of_gpu(gpu)
        return {
            "host": host,
            "gpu": gpu,
            "nic": nic,
            "rail": self.rail_of_nic(nic),
            "rack": rack,
            "pod": rack // self.racks_per_pod,
        }

    @property
    def nic_Bps(self) -> float:
        """NIC line rate per direction, bytes/s."""
        return self.nic_gbps * 1e9 / 8

    @property
    def intra_Bps(self) -> float:
        """GPU-to-GPU bandwidth inside a host per GPU and direction, bytes/s (NVLink, or PCIe hosts)."""
        return (self.nvlink_gbytes if self.intra_host == "nvlink" else self.pcie_gbytes) * 1e9

    def describe(self) -> dict[str, Any]:
        """The placement as plain values (written to OUT/replay.json)."""
        out: dict[str, Any] = {
            "gpus_per_host": self.gpus_per_host,
            "hosts_per_rack": self.hosts_per_rack,
            "racks_per_pod": self.racks_per_pod,
            "nics_per_host": self.nics,
            "gpu_nics": [int(n) for n in self.nic_of_gpu(_arange(min(self.gpus_per_host, MAX_PER_HOST)))],
            "nic_rails": [int(r) for r in self.rail_of_nic(_arange(min(self.nics, MAX_PER_HOST)))],
            "nic_gbps": self.nic_gbps,
            "nvlink_gbytes": self.nvlink_gbytes,
            "pcie_gbytes": self.pcie_gbytes,
            "intra_host": self.intra_host,
            "cross_nic": self.cross_nic,
        }
        if self.hosts is not None:
            out["hosts"] = [list(h) for h in self.hosts]
        return out


def _arange(n: int) -> np.ndarray:
    import numpy as np

    return np.arange(n, dtype=np.int64)


def _check_int(name: str, value: Any, limit: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
        raise InputError(f"placement: {name} must be an integer in 1..{limit}, not {value!r}")


def _host_index(hosts: tuple[tuple[int, ...], ...], gpus_per_host: int) -> dict[int, tuple[int, int]]:
    index: dict[int, tuple[int, int]] = {}
    for host, ranks in enumerate(hosts):
        if len(ranks) > gpus_per_host:
            raise InputError(
                f"placement: host {host} lists {len(ranks)} ranks, more than gpus_per_host {gpus_per_host}"
            )
        for gpu, rank in enumerate(ranks):
            if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < MAX_RANKS:
                raise InputError(f"placement: host {host} lists {rank!r}, not a rank in 0..{MAX_RANKS - 1}")
            if rank in index:
                raise InputError(f"placement: rank {rank} is listed on host {index[rank][0]} and on {host}")
            index[rank] = (host, gpu)
    return index


def load_placement(path: str | Path) -> Placement:
    """A Placement from a JSON, TOML or YAML file (see the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the placement file ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not a text file (byte {exc.start})") from exc
    try:
        data = read_mapping(path, text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: not a valid placement file ({exc})") from exc
    return placement_from_dict(data, where=str(path))


def placement_from_dict(data: Any, where: str = "placement") -> Placement:
    """A Placement from parsed file content, every value checked."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: the placement must be a mapping of {sorted(_KEYS)}")
    unknown = set(data) - _KEYS
    if unknown:
        raise InputError(f"{where}: unknown placement key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    values = dict(data)
    hosts = values.pop("hosts", None)
    if hosts is not None:
        if not isinstance(hosts, list) or not all(isinstance(h, list) for h in hosts):
            raise InputError(f"{where}: 'hosts' must be a list of lists of ranks")
        if sum(len(h) for h in hosts) > MAX_RANKS:
            raise InputError(f"{where}: 'hosts' lists more than {MAX_RANKS} ranks")
        values["hosts"] = tuple(tuple(h) for h in hosts)
    for key in ("gpu_nics", "nic_rails"):
        if key in values:
            listed = values[key]
            if not isinstance(listed, list) or len(listed) > MAX_PER_HOST:
                raise InputError(f"{where}: '{key}' must be a list of at most {MAX_PER_HOST} integers")
            values[key] = tuple(listed)
    try:
        return Placement(**values)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from exc
    except TypeError as exc:  # a value of the wrong kind where a comparison needs a number
        raise InputError(f"{where}: {exc}") from exc
