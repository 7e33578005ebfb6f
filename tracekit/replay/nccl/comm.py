"""What NCCL builds for one communicator: its channels' rings and trees, and the NIC each uses on each host.

A `CommTopology` is the contract between where the structure comes from (NCCL's own rules, in
tracekit.replay.nccl.topology, or the rings and trees an NCCL INFO log printed, in
tracekit.replay.nccl.from_log) and the algorithms that turn it into transfers
(tracekit.replay.algorithms). Everything is over positions of the group's GroupLayout.

Per channel c (0..channels-1):

* `ring[c]`: the positions in ring order; position ring[c, i] sends to ring[c, i+1 mod n];
* `ring_send_nic[c, p]`: the local NIC through which position p's host sends channel c's ring to
  the next host, when p is the last of its host on the ring (-1 otherwise); `ring_recv_nic[c, p]`:
  the NIC at which the ring enters p's host, when p is the first (-1 otherwise);
* `tree_parent[c, p]`: p's parent in channel c's tree (-1 for the root): the position it sends its
  reduced data to, and receives the broadcast from;
* `tree_nic[c, p]`: the local NIC channel c's tree uses on p's host (for the links that cross hosts).

and what NCCL's tuner reads of its graphs (`graph_channels`, the per-channel `bw_intra`/`bw_inter` in
GB/s, whether any node's tree is NCCL's TREE pattern), the node count and ranks per node, and the
p2p channels (`p2p_channels` in all, `p2p_per_peer` to a remote peer).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


@dataclass
class CommTopology:
    channels: int
    # [channels, n] integer tables: the model keeps positions in int32 and NICs in int16 (int32 on a
    # host of 32,768 NICs or more); a topology read from an NCCL log holds int64.
    ring: np.ndarray
    ring_send_nic: np.ndarray
    ring_recv_nic: np.ndarray
    tree_parent: np.ndarray
    tree_nic: np.ndarray
    nodes: int = 1
    ranks_per_node: int = 1  # the most members on one host (NCCL's ppn)
    graph_channels: int = 1  # channels of NCCL's ring/tree graph search (before ncclTopoPostset)
    bw_intra: float = 0.0  # GB/s per graph channel inside a node
    bw_inter: float = 0.0  # GB/s per graph channel across nodes
    tree_pattern_tree: bool = True  # some node's tree is NCCL's TREE pattern (its tuner derates trees by 0.85)
    p2p_channels: int = 1
    p2p_per_peer: int = 1
    source: str = "model"  # "model", or the NCCL log it was read from
    _digest: bytes | None = field(default=None, init=False, repr=False, compare=False)

    def digest(self) -> bytes:
        """16 bytes that differ when the rings, trees or NICs differ (a template cache's key: the tables
        themselves are channels x ranks, 0.6 GB at the rank bound). The tables are never changed in place."""
        if self._digest is None:
            import numpy as np

            hashed = hashlib.blake2b(digest_size=16)
            for table in (self.ring, self.tree_parent, self.ring_send_nic, self.ring_recv_nic, self.tree_nic):
                hashed.update(f"{table.dtype.str}{table.shape}".encode())
                hashed.update(np.ascontiguousarray(table).data)  # a view: slices of the first axis are contiguous
            self._digest = hashed.digest()
        return self._digest

    @property
    def n(self) -> int:
        return int(self.ring.shape[1])

    def first(self, channels: int) -> CommTopology:
        """The structure of the first `channels` channels (what a collective using fewer channels runs on)."""
        return CommTopology(
            channels=channels,
            ring=self.ring[:channels],
            ring_send_nic=self.ring_send_nic[:channels],
            ring_recv_nic=self.ring_recv_nic[:channels],
            tree_parent=self.tree_parent[:channels],
            tree_nic=self.tree_nic[:channels],
            nodes=self.nodes,
            ranks_per_node=self.ranks_per_node,
            graph_channels=self.graph_channels,
            bw_intra=self.bw_intra,
            bw_inter=self.bw_inter,
            tree_pattern_tree=self.tree_pattern_tree,
            p2p_channels=self.p2p_channels,
            p2p_per_peer=self.p2p_per_peer,
            source=self.source,
        )
