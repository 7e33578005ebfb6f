"""The last rules a collective row passes before anything reads it, and the group of an op that names none.

`finished`: the row's values are checked against the bounds (tracekit.parsers.common.values) and
its split lists turned into elements (tracekit.parsers.common.sizes). `take_only_group` and
`take_peer_group`: an op that names no process group ran in the rank's only group, and a
send/recv in the group its peer was read in (tracekit.parsers.common.groups, .peers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.parsers.common.groups import only_group
from tracekit.parsers.common.peers import group_of_unnamed_peer
from tracekit.parsers.common.sizes import splits_in_elements

if TYPE_CHECKING:
    from tracekit.parsers.base import ProcessGroup
    from tracekit.parsers.common.rows import CollectiveRow
    from tracekit.parsers.common.values import Checker


def finished(row: CollectiveRow, checker: Checker, where: str | None) -> CollectiveRow:
    """The row as it may be written: values out of bounds null (with a warning), splits in elements
    (splits already in elements, as tracekit's Chakra writer writes them, sum to the element count
    and stay as they are)."""
    checker.row(row, where)
    splits_in_elements(row, checker, where)
    return row


def take_only_group(row: CollectiveRow, groups: list[ProcessGroup], inferred: list[str]) -> None:
    """An op that names no group ran in the rank's only group, when it has one (see groups.only_group)."""
    _take_group(row, only_group(groups), inferred)


def take_peer_group(row: CollectiveRow, local: int | None, groups: list[ProcessGroup], inferred: list[str]) -> None:
    """A send/recv that names no group ran in the group its peer was read in (see
    peers.group_of_unnamed_peer), when the rank's groups tell one."""
    if row.pg_name is None:
        _take_group(row, group_of_unnamed_peer(local, groups), inferred)


def _take_group(row: CollectiveRow, group: ProcessGroup | None, inferred: list[str]) -> None:
    """The row's group (name and size, recorded as inferred) is `group`, when there is one."""
    if group is None:
        return
    row.pg_name = group.pg_name
    inferred.append("pg_name")
    if group.group_size is not None:
        row.group_size = group.group_size
        inferred.append("group_size")
