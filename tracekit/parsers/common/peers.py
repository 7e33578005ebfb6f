"""Peers: the global rank on the other side of a send or recv.

Traces record a send/recv peer as a rank *local to the op's process group* (the `rank` argument of
record_param_comms, the dst/src argument of `c10d::send`/`c10d::recv_`, `nccl:send 0->1`). It
becomes a global rank through what the trace says about that group:

* the group's rank list (`ranks[local]`), or the op's own `global_rank_start + local * stride`:
  read, not inferred; a local rank beyond the list is no peer (null);
* a group recorded with an empty rank list holds every rank but its order is not recorded
  (`pg_config_info` writes [] whenever the size equals the world's): the identity is assumed and
  `peer` is marked inferred; so it is when nothing is known of the group.

An op that names no group (c10d ops record their ProcessGroup as an opaque object) is read through
every group of the rank: if all groups that can hold the local rank agree, that is the peer (marked
inferred only if some reading assumed the identity); if they disagree, the default group is assumed
and `peer` is marked inferred. Its group is the one its peer is read in (`group_of_unnamed_peer`):
the only group of the rank that can hold the local rank, else the default group the reading
assumes; pg_name and group_size are then inferred.
"""

from __future__ import annotations

import re

from tracekit.parsers.base import ProcessGroup
from tracekit.parsers.common.groups import default_group, group_named
from tracekit.parsers.common.values import as_int

# Collectives whose `rank` argument is the peer's (group-local) rank, not the caller's own.
PEER_TYPES = ("SEND", "RECV")
# Collectives whose `rank` argument is the root's rank, not the caller's own.
ROOT_TYPES = ("BROADCAST", "REDUCE", "GATHER", "SCATTER")

_ARROW = re.compile(r"(-?\d{1,20})\s*(->|<-)\s*(-?\d{1,20})")


def peer_in_group(
    local: int | None, group: ProcessGroup | None, start: int | None = None, stride: int | None = None
) -> tuple[int | None, bool]:
    """(global rank, inferred) of group-local rank `local` in a group the op names."""
    if local is None or local < 0:
        return None, False
    if group is not None and group.ranks:
        return (group.ranks[local], False) if local < len(group.ranks) else (None, False)
    if start is not None and stride is not None and start >= 0 and stride > 0:
        return start + local * stride, False
    return local, True


def peer_in_unnamed_group(local: int | None, groups: list[ProcessGroup]) -> tuple[int | None, bool]:
    """(global rank, inferred) of group-local rank `local` of an op that does not name its group."""
    if local is None or local < 0:
        return None, False
    readings: set[tuple[int, bool]] = set()
    for group in groups:
        if not _can_hold(group, local):
            continue
        peer, inferred = peer_in_group(local, group)
        if peer is not None:
            readings.add((peer, inferred))
    peers = {peer for peer, _ in readings}
    if len(peers) == 1:
        return peers.pop(), any(inferred for _, inferred in readings)
    default = default_group(groups)
    if default is not None and default.ranks:
        return (default.ranks[local], True) if local < len(default.ranks) else (None, False)
    return local, True


def _can_hold(group: ProcessGroup, local: int) -> bool:
    size = len(group.ranks) if group.ranks else group.group_size
    return size is None or local < size


def group_of_unnamed_peer(local: int | None, groups: list[ProcessGroup]) -> ProcessGroup | None:
    """The group of a send/recv that names none, as its peer is read (see the module docstring)."""
    if local is None or local < 0:
        return None
    able = [group for group in groups if _can_hold(group, local)]
    if len(able) == 1:
        return able[0]
    default = default_group(groups)
    return default if default is not None and any(group is default for group in able) else None


def arrow_peer(name: str) -> int | None:
    """The peer of a backend annotation named `nccl:send 0->1` / `nccl:recv 0<-1` (group-local)."""
    match = _ARROW.search(name)
    return as_int(match.group(3)) if match else None


def peer_of_rank_arg(
    local: int | None,
    pg_name: str | None,
    groups: list[ProcessGroup],
    stated_ranks: list[int] | None = None,
    start: int | None = None,
    stride: int | None = None,
) -> tuple[int | None, bool]:
    """(global rank, inferred) of a send/recv whose `rank` argument is `local`.

    The op names its group by `pg_name` (looked up in the rank's groups), or states the group's
    ranks itself (`stated_ranks`, or `start` + k * `stride`); an op that names none is read
    through every group of the rank (see above).
    """
    group = group_named(groups, pg_name)
    if group is None and stated_ranks:
        group = ProcessGroup(pg_name or "", group_size=len(stated_ranks), ranks=stated_ranks)
    if group is not None or pg_name is not None or (start is not None and stride is not None):
        return peer_in_group(local, group, start, stride)
    return peer_in_unnamed_group(local, groups)
