"""A process group's members as the replay sees them: positions in placement order and where they sit.

Positions 0..n-1 are the group's members sorted by pod, rack, host and GPU, so a host's members
are consecutive. For each position: its global rank, its index in the group (NCCL's rank in the
communicator), its host, local GPU index, the local NIC serving that GPU and the NIC's rail.
NCCL numbers a communicator's nodes in the order of their lowest communicator rank (`nodes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.placement import Placement


@dataclass
class GroupLayout:
    ranks: np.ndarray  # global rank at each position
    members: np.ndarray  # index in the group (communicator rank) at each position
    hosts: np.ndarray  # global host id at each position
    gpus: np.ndarray  # local GPU index at each position
    nics: np.ndarray  # local NIC of that GPU at each position
    rails: np.ndarray  # rail of that NIC at each position
    position_of_member: np.ndarray  # group index -> position
    host_count: int
    max_per_host: int

    @property
    def n(self) -> int:
        return len(self.ranks)

    def positions(self, ranks: np.ndarray) -> np.ndarray:
        """Position of each global rank (which must be a member)."""
        import numpy as np

        order = np.argsort(self.ranks, kind="stable")
        return order[np.searchsorted(self.ranks[order], ranks)]

    def node_of(self) -> np.ndarray:
        """NCCL's node index of each position: nodes numbered by their lowest communicator rank."""
        import numpy as np

        if not self.n:
            return np.zeros(0, dtype=np.int64)
        starts = np.flatnonzero(np.r_[True, self.hosts[1:] != self.hosts[:-1]])  # positions are host-sorted
        lowest = np.minimum.reduceat(self.members, starts)
        node_of_host = np.empty(len(starts), dtype=np.int64)
        node_of_host[np.argsort(lowest, kind="stable")] = np.arange(len(starts))
        return np.repeat(node_of_host, np.diff(np.r_[starts, self.n]))

    def host_slots(self) -> np.ndarray:
        """Each position's host numbered 0..host_count-1 in placement order."""
        import numpy as np

        return np.unique(self.hosts, return_inverse=True)[1].astype(np.int64)

    def first_with(self, values: np.ndarray) -> np.ndarray:
        """table[host slot, v]: the lowest position on that host whose value is v (-1 where none), for
        values in 0..max (a member's NIC, rail)."""
        import numpy as np

        width = int(values.max(initial=0)) + 1
        none = np.iinfo(np.int64).max
        table = np.full((self.host_count, width), none, dtype=np.int64)
        np.minimum.at(table, (self.host_slots(), values.astype(np.int64)), np.arange(self.n, dtype=np.int64))
        table[table == none] = -1
        return table

    def key(self) -> bytes:
        """Identifies the layout for template caches: who sits where, and on which NIC (a digest: the
        tables are five values per member)."""
        import hashlib

        import numpy as np

        tables = np.concatenate([self.members, self.hosts, self.gpus, self.nics, self.rails]).astype(np.int64)
        return hashlib.blake2b(tables.data, digest_size=16).digest()


def group_layout(members: tuple[int, ...] | list[int], placement: Placement) -> GroupLayout:
    """The layout of a group whose members (global ranks, in group order) are `members`."""
    import numpy as np

    ranks = np.array(members, dtype=np.int64)
    where = placement.locate(ranks)
    order = np.lexsort((ranks, where["gpu"], where["host"], where["rack"], where["pod"]))
    position_of_member = np.empty(len(ranks), dtype=np.int64)
    position_of_member[order] = np.arange(len(ranks))
    hosts = where["host"][order]
    counts = np.unique(hosts, return_counts=True)[1] if len(hosts) else np.zeros(0, dtype=np.int64)
    return GroupLayout(
        ranks=ranks[order],
        members=order.astype(np.int64),
        hosts=hosts,
        gpus=where["gpu"][order],
        nics=where["nic"][order],
        rails=where["rail"][order],
        position_of_member=position_of_member,
        host_count=len(counts),
        max_per_host=int(counts.max()) if len(counts) else 0,
    )
