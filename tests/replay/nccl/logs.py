"""NCCL INFO logs for tests, in NCCL 2.30's exact line formats (debug.cc prefix, init.cc, rings.cc, net.cc)."""

from __future__ import annotations

from tracekit.replay.layout import GroupLayout
from tracekit.replay.nccl.comm import CommTopology


def render(topo: CommTopology, layout: GroupLayout, hosts: list[str], comm_id: str = "0x5a1e0c0ffee") -> str:
    """The log lines NCCL would print for `topo` over `layout` (communicator rank = group index)."""
    n = layout.n
    rank_at = [int(r) for r in layout.members]  # position -> communicator rank
    host_of = {rank_at[p]: hosts[int(layout.hosts[p])] for p in range(n)}
    dev_of = {rank_at[p]: int(layout.gpus[p]) for p in range(n)}
    nodes = len(set(host_of.values()))
    lines = ["NCCL version 2.30.7+cuda12.9"]

    def prefix(rank: int) -> str:
        return f"{host_of[rank]}:{4000 + dev_of[rank]}:{5000 + dev_of[rank]} [{dev_of[rank]}] NCCL INFO "

    for rank in range(n):
        local = [r for r in range(n) if host_of[r] == host_of[rank]]
        lines.append(
            prefix(rank) + f"comm 0x{0x1000 + rank:x} rank {rank} nRanks {n} nNodes {nodes} localRanks "
            f"{len(local)} localRank {local.index(rank)} MNNVL 0"
        )
    for c in range(topo.channels):
        ring = topo.ring[c]
        successor = {rank_at[int(ring[i])]: rank_at[int(ring[(i + 1) % n])] for i in range(n)}
        order = [0]
        while len(order) < n:
            order.append(successor[order[-1]])
        width = len(str(n - 1))
        lines.append(prefix(0) + f"Channel {c:02d}/{topo.channels:02d} :" + "".join(f" {r:{width}d}" for r in order))
    for rank in range(n):
        p = int(layout.position_of_member[rank])
        entries = []
        for c in range(topo.channels):
            up = int(topo.tree_parent[c, p])
            downs = [rank_at[q] for q in range(n) if int(topo.tree_parent[c, q]) == p][:3]
            downs += [-1] * (3 - len(downs))
            entries.append(f" [{c}] {downs[0]}/{downs[1]}/{downs[2]}->{rank}->{rank_at[up] if up >= 0 else -1}")
        lines.append(prefix(rank) + "Trees" + "".join(entries))
    for c in range(topo.channels):
        ring = topo.ring[c]
        for i in range(n):
            a, b = int(ring[i]), int(ring[(i + 1) % n])
            if layout.hosts[a] == layout.hosts[b]:
                continue
            ra, rb = rank_at[a], rank_at[b]
            send, recv = int(topo.ring_send_nic[c, a]), int(topo.ring_recv_nic[c, b])
            lines.append(prefix(ra) + f"Channel {c:02d}/0 : {ra}[{dev_of[ra]}] -> {rb}[{dev_of[rb]}] [send] via "
                         f"NET/IB/{send}/GDRDMA")  # fmt: skip
            lines.append(prefix(rb) + f"Channel {c:02d}/0 : {ra}[{dev_of[ra]}] -> {rb}[{dev_of[rb]}] [receive] via "
                         f"NET/IB/{recv}/GDRDMA")  # fmt: skip
    for rank in range(n):
        lines.append(
            prefix(rank) + f"ncclCommInitRank comm 0x{0x1000 + rank:x} rank {rank} nranks {n} cudaDev {dev_of[rank]} "
            f"nvmlDev {dev_of[rank]} busId {0x18000 + dev_of[rank]:x} commId {comm_id} - Init COMPLETE"
        )
    return "\n".join(lines) + "\n"


# NVIDIA/nccl#1412 ("NCCL Infiniband Issue", 2024-08): 2 nodes x 8 A100 (4 NICs each shared by two
# GPUs), NCCL 2.22 (its "%3d" ring columns). These lines are quoted verbatim from the issue thread.
NCCL_1412 = """\
swat1-04:2017630:2017675 [6] NCCL INFO comm 0x8ec0ac0 rank 6 nRanks 16 nNodes 2 localRanks 8 localRank 6 MNNVL 0
swat1-04:2017630:2017672 [3] NCCL INFO comm 0x8e0c400 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0
swat1-04:2017630:2017674 [5] NCCL INFO comm 0x8e84880 rank 5 nRanks 16 nNodes 2 localRanks 8 localRank 5 MNNVL 0
swat1-04:2017630:2017676 [7] NCCL INFO comm 0x8efcbc0 rank 7 nRanks 16 nNodes 2 localRanks 8 localRank 7 MNNVL 0
swat1-04:2017630:2017669 [0] NCCL INFO Channel 00/08 :    0   5   4   7   6   3   2   1   8  13  12  15  14  11  10   9
swat1-04:2017630:2017669 [0] NCCL INFO Channel 01/08 :    0   5   4   7   6   3  10   9   8  13  12  15  14  11   2   1
swat1-04:2017630:2017669 [0] NCCL INFO Channel 02/08 :    0   5   4   7  14  11  10   9   8  13  12  15   6   3   2   1
swat1-04:2017630:2017670 [1] NCCL INFO Trees [0] 2/-1/-1->1->0 [1] -1/-1/-1->1->0 [2] 2/-1/-1->1->0 [3] 2/-1/-1->1->0 [4] 2/-1/-1->1->0 [5] -1/-1/-1->1->0 [6] 2/-1/-1->1->0 [7] 2/-1/-1->1->0
swat1-04:2017630:2017670 [1] NCCL INFO P2P Chunksize set to 131072
swat1-04:2017630:2017669 [0] NCCL INFO Channel 03/08 :    0   5  12  15  14  11  10   9   8  13   4   7   6   3   2   1
swat1-04:2017630:2017669 [0] NCCL INFO Channel 04/08 :    0   5   4   7   6   3   2   1   8  13  12  15  14  11  10   9
swat1-04:2017630:2017669 [0] NCCL INFO ncclCommInitRank comm 0x8d57d40 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 7000 commId 0x49bbd7790311d5eb - Init COMPLETE
"""
