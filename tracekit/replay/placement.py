"""Where each rank runs: rank → GPU → host → rack (leaf switch) → pod.

Defaults (Meta's RoCE AI zone, research/meta-workload-findings.md §1.12): 8 GPUs per host, one
NIC per GPU; 2 hosts per rack under one leaf (RTSW); 192 racks per pod (AI zone). Ranks are placed
host-contiguously: `host = rank // gpus_per_host`, `gpu = rank % gpus_per_host`.

A placement file (JSON, TOML, or YAML when PyYAML is installed) overrides any of these and may list
the ranks of each host explicitly, in GPU order:

    {"gpus_per_host": 8, "hosts_per_rack": 2, "racks_per_pod": 192,
     "hosts": [[0, 1, 2, 3], [4, 5, 6, 7]]}

With `hosts`, host h holds the listed ranks (GPU index = position in the list); a rank that is not
listed is an error. Racks group consecutive hosts (`rack = host // hosts_per_rack`), pods
consecutive racks.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError

if TYPE_CHECKING:
    import numpy as np

# One placement may describe at most this many ranks (a value read from a file sizes arrays).
MAX_RANKS = 1 << 20
_KEYS = {"gpus_per_host", "hosts_per_rack", "racks_per_pod", "hosts"}


@dataclass(frozen=True)
class Placement:
    """Rank → GPU/host/rack/pod. `hosts` (optional) lists the ranks of each host in GPU order."""

    gpus_per_host: int = 8
    hosts_per_rack: int = 2
    racks_per_pod: int = 192
    hosts: tuple[tuple[int, ...], ...] | None = None
    _index: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("gpus_per_host", "hosts_per_rack", "racks_per_pod"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RANKS:
                raise InputError(f"placement: {name} must be an integer in 1..{MAX_RANKS}, not {value!r}")
        if self.hosts is not None:
            index: dict[int, tuple[int, int]] = {}
            for host, ranks in enumerate(self.hosts):
                for gpu, rank in enumerate(ranks):
                    if not isinstance(rank, int) or not 0 <= rank < MAX_RANKS:
                        raise InputError(f"placement: host {host} lists {rank!r}, not a rank in 0..{MAX_RANKS - 1}")
                    if rank in index:
                        raise InputError(f"placement: rank {rank} is listed on host {index[rank][0]} and on {host}")
                    index[rank] = (host, gpu)
            self._index.update(index)

    def locate(self, ranks: np.ndarray) -> dict[str, np.ndarray]:
        """host, gpu (index within the host), rack and pod of each global rank in `ranks` (int arrays)."""
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
        return {"host": host, "gpu": gpu, "rack": rack, "pod": rack // self.racks_per_pod}

    def describe(self) -> dict[str, Any]:
        """The placement as plain values (written to OUT/replay.json)."""
        out: dict[str, Any] = {
            "gpus_per_host": self.gpus_per_host,
            "hosts_per_rack": self.hosts_per_rack,
            "racks_per_pod": self.racks_per_pod,
        }
        if self.hosts is not None:
            out["hosts"] = [list(h) for h in self.hosts]
        return out


def load_placement(path: str | Path) -> Placement:
    """A Placement from a JSON, TOML or YAML file (see the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the placement file ({exc.strerror})") from exc
    try:
        data = _parse(path, text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{path}: not a valid placement file ({exc})") from exc
    return placement_from_dict(data, where=str(path))


def _parse(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return tomllib.loads(text)
    if suffix in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError as exc:
            raise InputError(f"{path}: reading YAML needs PyYAML (pip install pyyaml); or write JSON") from exc
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(str(exc).splitlines()[0]) from exc
    return json.loads(text)


def placement_from_dict(data: Any, where: str = "placement") -> Placement:
    """A Placement from parsed file content, every value checked."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: the placement must be a mapping of {sorted(_KEYS)}")
    unknown = set(data) - _KEYS
    if unknown:
        raise InputError(f"{where}: unknown placement key(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    hosts = data.get("hosts")
    if hosts is not None:
        if not isinstance(hosts, list) or not all(isinstance(h, list) for h in hosts):
            raise InputError(f"{where}: 'hosts' must be a list of lists of ranks")
        if sum(len(h) for h in hosts) > MAX_RANKS:
            raise InputError(f"{where}: 'hosts' lists more than {MAX_RANKS} ranks")
        hosts = tuple(tuple(h) for h in hosts)
    try:
        return Placement(
            gpus_per_host=data.get("gpus_per_host", 8),
            hosts_per_rack=data.get("hosts_per_rack", 2),
            racks_per_pod=data.get("racks_per_pod", 192),
            hosts=hosts,
        )
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from exc
