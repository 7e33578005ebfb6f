"""The rings, trees and NICs an NCCL INFO log printed, as the CommTopology of a replayed group.

`--nccl-log FILE` (tracekit.parsers.nccl_log reads the file). A communicator of the log is used for
a process group of the job when it has as many ranks; communicator rank r is the group's r-th
member (how PyTorch creates NCCL communicators). Its hosts must group its ranks as the placement
groups the members (else one line naming the log line of the communicator); the channels, each
channel's ring (rank 0's `Channel` lines, or every rank's `Ring` lines), each rank's tree parent
(`Trees` lines) and the NIC each network connection uses (`via NET/.../<nic>` lines, connection
index 0) replace the model's. NCCL numbers NICs in its own (IB device) order: a NIC that a GPU uses
without PXN is the placement's NIC of that GPU, and the log's other NIC numbers on that host are
mapped the same way. What the log does not give (trees of ranks it has no line for, NICs of
connections it does not list) stays the model's, and the notes say so. `communicator` is what a
replay asks for each group: the log's structure where it has the group, else NCCL's model
(tracekit.replay.nccl.topology).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError
from tracekit.parsers.nccl_log import LogComm, NcclLog, read_nccl_log

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.layout import GroupLayout
    from tracekit.replay.nccl.comm import CommTopology
    from tracekit.replay.nccl.options import NcclOptions
    from tracekit.replay.placement import Placement

__all__ = ["NcclLog", "read_nccl_log", "topology_from_log"]


def communicator(
    layout: GroupLayout, placement: Placement, options: NcclOptions, notes: list[str] | None = None
) -> CommTopology:
    """NCCL's structure for the group `layout` (see the module docstring); an NCCL log overrides it."""
    if options.log is not None:
        found = topology_from_log(options.log, layout, placement, options, notes)
        if found is not None:
            return found
    from tracekit.replay.nccl.topology import model

    return model(layout, placement, options)


def topology_from_log(
    log: NcclLog, layout: GroupLayout, placement: Placement, options: NcclOptions, notes: list[str] | None = None
) -> CommTopology | None:
    """The group's CommTopology from the log, or None when no communicator of the log has its size."""
    comms = [c for c in log.comms if c.nranks == layout.n and (c.rings or c.ring_next)]
    if not comms or layout.n < 2:
        return None
    comm = comms[0]
    _check_hosts(log, comm, layout)
    return _topology(log, comm, layout, placement, options, notes if notes is not None else [])


def _check_hosts(log: NcclLog, comm: LogComm, layout: GroupLayout) -> None:
    """The log's hosts must split the communicator's ranks as the placement splits the group's members."""
    missing = [r for r in range(comm.nranks) if r not in comm.host_of]
    if missing:
        return  # the log does not say where every rank ran: nothing to check against
    by_log: dict[str, set[int]] = {}
    for rank, host in comm.host_of.items():
        by_log.setdefault(host, set()).add(rank)
    by_placement: dict[int, set[int]] = {}
    for position in range(layout.n):
        by_placement.setdefault(int(layout.hosts[position]), set()).add(int(layout.members[position]))
    if sorted(map(sorted, by_log.values())) != sorted(map(sorted, by_placement.values())):
        raise InputError(
            f"{log.path}: line {comm.line}: the communicator of {comm.nranks} ranks runs on {len(by_log)} host(s) "
            f"as {_groups(by_log)}; the placement puts the group on {len(by_placement)} as {_groups(by_placement)}"
        )


def _groups(groups: Mapping[Any, set[int]]) -> str:
    shown = sorted(sorted(g) for g in groups.values())[:3]
    text = " ".join("{" + ",".join(map(str, g[:8])) + ("..." if len(g) > 8 else "") + "}" for g in shown)
    return text + (" ..." if len(groups) > 3 else "")


def _topology(
    log: NcclLog, comm: LogComm, layout: GroupLayout, placement: Placement, options: NcclOptions, notes: list[str]
) -> CommTopology:
    import dataclasses

    import numpy as np

    from tracekit.replay.nccl.topology import model

    base = model(layout, placement, dataclasses.replace(options, log=None))
    channels = comm.channels or max(comm.rings, default=-1) + 1
    pos = layout.position_of_member  # communicator rank -> position
    ring = np.zeros((channels, layout.n), dtype=np.int64)
    for c in range(channels):
        order = _ring(log, comm, c)
        ring[c] = pos[np.array(order, dtype=np.int64)]
    parent = np.array([base.tree_parent[c % base.channels] for c in range(channels)], dtype=np.int64)
    known_trees = 0
    for (c, rank), (up, _) in comm.trees.items():
        if c < channels and rank < layout.n and up < layout.n:
            parent[c, pos[rank]] = pos[up] if up >= 0 else -1
            known_trees += 1
    if known_trees < channels * layout.n:
        notes.append(
            f"{log.path}: the communicator of {comm.nranks} ranks has Trees lines for {known_trees} of "
            f"{channels * layout.n} (channel, rank) pairs; the model's trees fill the rest"
        )
    send, recv, tree_nic = _nics(log, comm, layout, placement, ring, parent, base, channels)
    return dataclasses.replace(
        base,
        channels=channels,
        ring=ring,
        ring_send_nic=send,
        ring_recv_nic=recv,
        tree_parent=parent,
        tree_nic=tree_nic,
        source=log.path,
    )


def _ring(log: NcclLog, comm: LogComm, c: int) -> list[int]:
    """Channel c's ring as communicator ranks, from rank 0's line or from every rank's `Ring` line."""
    line = comm.rings.get(c)
    if line is not None and c not in comm.cut and sorted(line) == list(range(comm.nranks)):
        return line
    following = {rank: nxt for (channel, rank), nxt in comm.ring_next.items() if channel == c}
    if len(following) == comm.nranks:
        order = [0]
        while len(order) < comm.nranks and following.get(order[-1], -1) not in order:
            order.append(following[order[-1]])
        if len(order) == comm.nranks:
            return order
    why = "is cut short by NCCL (128 characters)" if c in comm.cut else "is missing or not a ring of every rank"
    raise InputError(
        f"{log.path}: line {comm.line}: the ring of channel {c} of the communicator of {comm.nranks} ranks {why}, "
        "and no 'Ring' lines of every rank give it (NCCL_DEBUG_SUBSYS=INIT,GRAPH prints them)"
    )


def _nics(
    log: NcclLog,
    comm: LogComm,
    layout: GroupLayout,
    placement: Placement,
    ring: np.ndarray,
    parent: np.ndarray,
    base: CommTopology,
    channels: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import numpy as np

    pos = layout.position_of_member
    send = np.array([base.ring_send_nic[c % base.channels] for c in range(channels)], dtype=np.int64)
    recv = np.array([base.ring_recv_nic[c % base.channels] for c in range(channels)], dtype=np.int64)
    tree_nic = np.array([base.tree_nic[c % base.channels] for c in range(channels)], dtype=np.int64)
    mapping = _nic_mapping(log, comm, layout, placement)
    successor = np.zeros((channels, layout.n), dtype=np.int64)
    for c in range(channels):
        successor[c, ring[c]] = np.roll(ring[c], -1)
    for conn in comm.connections:
        if conn.conn != 0 or conn.channel >= channels or max(conn.src, conn.dst) >= layout.n:
            continue
        a, b = int(pos[conn.src]), int(pos[conn.dst])
        host = comm.host_of.get(conn.src if conn.direction == "send" else conn.dst, "")
        nic = mapping.get((host, conn.nic), conn.nic)
        if nic >= placement.nics:
            raise InputError(
                f"{log.path}: line {conn.line}: NIC {conn.nic} is past the placement's {placement.nics} NICs per host"
            )
        c = conn.channel
        if successor[c, a] == b:
            (send if conn.direction == "send" else recv)[c, a if conn.direction == "send" else b] = nic
        elif parent[c, a] == b or parent[c, b] == a:
            tree_nic[c, layout.hosts == layout.hosts[a if conn.direction == "send" else b]] = nic
    return send, recv, tree_nic


def _nic_mapping(log: NcclLog, comm: LogComm, layout: GroupLayout, placement: Placement) -> dict[tuple[str, int], int]:
    """(host, NCCL NIC index) -> the placement's local NIC: a GPU that sends through a NIC without PXN owns it."""
    mapping: dict[tuple[str, int], int] = {}
    for conn in comm.connections:
        if conn.direction != "send" or conn.proxy is not None or conn.src >= layout.n:
            continue
        host = comm.host_of.get(conn.src)
        if host is None:
            continue
        own = int(layout.nics[layout.position_of_member[conn.src]])
        if mapping.setdefault((host, conn.nic), own) != own:
            raise InputError(
                f"{log.path}: line {conn.line}: NIC {conn.nic} of {host} is sent on by GPUs the placement gives "
                "different NICs (set gpu_nics in the placement file as NCCL numbers them)"
            )
    return mapping
