"""tracekit.parsers.common.peers: one rule from a group-local peer to a global rank."""

from __future__ import annotations

from tracekit.parsers.base import ProcessGroup
from tracekit.parsers.common.finish import take_peer_group
from tracekit.parsers.common.peers import (
    arrow_peer,
    group_of_unnamed_peer,
    peer_in_group,
    peer_in_unnamed_group,
    peer_of_rank_arg,
)
from tracekit.parsers.common.rows import CollectiveRow

WORLD_UNLISTED = ProcessGroup("0", "default_pg", group_size=4, ranks=[])
WORLD_LISTED = ProcessGroup("0", "default_pg", group_size=4, ranks=[0, 1, 2, 3])
DP = ProcessGroup("2", "dp", group_size=2, ranks=[1, 3])


def test_in_a_named_group() -> None:
    assert peer_in_group(1, DP) == (3, False)  # read through the listed ranks
    assert peer_in_group(2, DP) == (None, False)  # beyond the list: no peer
    assert peer_in_group(2, WORLD_UNLISTED) == (2, True)  # order not recorded: identity assumed
    assert peer_in_group(1, None, start=4, stride=2) == (6, False)  # the op's own start/stride
    assert peer_in_group(1, None) == (1, True)
    assert peer_in_group(-1, DP) == (None, False) and peer_in_group(None, DP) == (None, False)


def test_in_an_unnamed_group() -> None:
    # Only the world can hold local rank 2; its order is not listed: inferred.
    assert peer_in_unnamed_group(2, [WORLD_UNLISTED, DP]) == (2, True)
    # ... listed: certain.
    assert peer_in_unnamed_group(2, [WORLD_LISTED, DP]) == (2, False)
    # The groups disagree (world: 1, dp: 3): the default group is assumed.
    assert peer_in_unnamed_group(1, [WORLD_LISTED, DP]) == (1, True)
    assert peer_in_unnamed_group(1, [DP]) == (3, False)
    assert peer_in_unnamed_group(5, []) == (5, True)


def test_the_group_of_an_unnamed_send_is_the_one_its_peer_is_read_in() -> None:
    # Only the world can hold local rank 2.
    assert group_of_unnamed_peer(2, [WORLD_UNLISTED, DP]) is WORLD_UNLISTED
    # Both can hold local rank 1: the default group the peer reading assumes.
    assert group_of_unnamed_peer(1, [WORLD_LISTED, DP]) is WORLD_LISTED
    assert group_of_unnamed_peer(1, [DP]) is DP
    # Two sub-groups, no default among them: not told.
    other = ProcessGroup("3", "pp", group_size=2, ranks=[0, 2])
    assert group_of_unnamed_peer(1, [DP, other]) is None
    assert group_of_unnamed_peer(None, [DP]) is None and group_of_unnamed_peer(-1, [DP]) is None
    assert group_of_unnamed_peer(0, []) is None


def test_an_unnamed_send_takes_that_group_as_inferred() -> None:
    row, inferred = CollectiveRow(op_id=1, comm_type="SEND", source="c10d"), ["peer"]
    take_peer_group(row, 1, [WORLD_LISTED, DP], inferred)
    assert (row.pg_name, row.group_size, inferred) == ("0", 4, ["peer", "pg_name", "group_size"])
    # A group already named stays.
    named, inferred = CollectiveRow(op_id=2, comm_type="SEND", source="c10d", pg_name="2"), []
    take_peer_group(named, 1, [WORLD_LISTED, DP], inferred)
    assert (named.pg_name, named.group_size, inferred) == ("2", None, [])


def test_rank_argument_of_a_send() -> None:
    groups = [WORLD_LISTED, DP]
    assert peer_of_rank_arg(1, "2", groups) == (3, False)
    assert peer_of_rank_arg(1, "9", groups) == (1, True)  # a group the trace does not list
    assert peer_of_rank_arg(1, "9", groups, stated_ranks=[5, 6]) == (6, False)
    assert peer_of_rank_arg(1, None, groups) == (1, True)


def test_arrow_peer() -> None:
    assert arrow_peer("nccl:send 0->1") == 1 and arrow_peer("nccl:recv 3<-2") == 2
    assert arrow_peer("nccl:send") is None
