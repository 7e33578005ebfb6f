"""The NCCL INFO log reader (tracekit.parsers.nccl_log) on a real excerpt and on logs in NCCL's formats."""

from __future__ import annotations

from tests.replay.nccl.logs import NCCL_1412
from tracekit.parsers.nccl_log import parse_nccl_log


def test_the_nccl_1412_excerpt_gives_its_rings_and_trees() -> None:
    log = parse_nccl_log(NCCL_1412, "nccl-1412.log")
    assert not log.warnings
    # Rank 0's ring lines, its Init COMPLETE (commId) and the other ranks' comm lines are one communicator
    # per process here: rank 0's lines carry the ring and the commId.
    rank0 = next(c for c in log.comms if c.rings)
    assert rank0.nranks == 16 and rank0.channels == 8 and rank0.key == "id:0x49bbd7790311d5eb"
    assert rank0.rings[0] == [0, 5, 4, 7, 6, 3, 2, 1, 8, 13, 12, 15, 14, 11, 10, 9]
    assert rank0.rings[3][:4] == [0, 5, 12, 15] and sorted(rank0.rings) == [0, 1, 2, 3, 4]
    with_trees = [c for c in log.comms if c.trees]
    assert with_trees and with_trees[0].trees[(0, 1)] == (0, (2,)) and with_trees[0].trees[(1, 1)] == (0, ())


def test_lines_of_older_versions_and_a_launcher_tag() -> None:
    text = (
        "[0] h100clust-worker-1:497888:498098 [0] NCCL INFO Channel 07/0 : 0[0] -> 8[0] [send] via "
        "NET/IBext_v8/7/GDRDMA\n"
        "[0] h100clust-worker-1:497888:498098 [0] NCCL INFO Channel 01/1 : 1[0] -> 2[1] [send] via "
        "NET/NCCL RDMA Plugin v6/0(0)/GDRDMA/Shared\n"
        "[0] h100clust-worker-1:497888:498098 [0] NCCL INFO ncclCommInitRank comm 0x5610977 rank 0 nranks 24 "
        "cudaDev 0 nvmlDev 0 busId a4000 commId 0x1d39176440db4936 - Init COMPLETE\n"
    )
    log = parse_nccl_log(text)
    comm = log.comms[0]
    assert comm.nranks == 24 and comm.key == "id:0x1d39176440db4936"
    first, second = comm.connections
    assert (first.channel, first.conn, first.src, first.dst, first.nic, first.proxy) == (7, 0, 0, 8, 7, None)
    assert (second.conn, second.nic, second.proxy) == (1, 0, 0)


def test_values_past_the_bounds_are_warnings_naming_the_line() -> None:
    text = (
        "h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0\n"
        "h:1:2 [0] NCCL INFO Channel 99/100 :  0 1 2 3\n"
        "h:1:2 [0] NCCL INFO comm 0x2 rank 5000000 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0\n"
    )
    log = parse_nccl_log(text, "x.log")
    assert [w.split(": ", 2)[1] for w in log.warnings] == ["line 2", "line 3"]
    assert log.comms[0].rings == {}


def test_a_split_communicators_init_line_gives_its_comm_id() -> None:
    """ncclCommSplit's Init COMPLETE line (NCCL 2.21+, src/init.cc) names the parent, color and key
    before the commId: the rank files of one split join by it as ncclCommInitRank's do."""
    text = "".join(
        f"node-{r}:40{r}:41{r} [0] NCCL INFO ncclCommSplit comm 0x55d0c3f4e0a0 rank {r} nranks 2 cudaDev 0 "
        f"nvmlDev 0 busId 18000 parent 0x55d0c1a2b0c0 color 0 key {r} commId 0x2f6b8e0d4c1a9375 - Init COMPLETE\n"
        for r in (0, 1)
    )
    log = parse_nccl_log(text, "split.log")
    assert not log.warnings
    found = [(c.key, c.nranks, c.host_of) for c in log.comms]
    assert found == [("id:0x2f6b8e0d4c1a9375", 2, {0: "node-0", 1: "node-1"})]
