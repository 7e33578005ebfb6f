"""`--nccl-log`: the rings, trees and NICs an NCCL log printed replace the model's, and a log that does
not fit the job is one line naming it."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.builders import write_et_job
from tests.replay.nccl.logs import NCCL_1412, render
from tracekit.errors import InputError
from tracekit.ingest import ingest
from tracekit.parsers.nccl_log import parse_nccl_log
from tracekit.replay import NcclOptions, Placement, replay
from tracekit.replay.layout import group_layout
from tracekit.replay.nccl.topology import model


@pytest.fixture(scope="module")
def job16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("log")
    write_et_job(root / "in" / "ar16", list(range(16)), [("ALL_REDUCE", 64 << 20)])
    assert ingest([root / "in"], root / "ds").ok
    return root / "ds"


def _ring_edges(flows: pl.DataFrame, channel: int) -> set[tuple[int, int]]:
    step0 = flows.filter((pl.col("channel") == channel) & (pl.col("step") == 0) & ~pl.col("pxn"))
    return set(step0.select("src_rank", "dst_rank").iter_rows())


def test_a_log_of_other_rings_and_trees_drives_the_flows(job16: Path) -> None:
    placement = Placement()
    layout = group_layout(list(range(16)), placement)
    topo = model(layout, placement, NcclOptions())
    # A log whose rings run the other way round on every node and whose trees are rooted on node 1
    reversed_rings = topo.ring[:, ::-1].copy()
    topo.ring = reversed_rings
    topo.ring_send_nic, topo.ring_recv_nic = topo.ring_recv_nic.copy(), topo.ring_send_nic.copy()
    text = render(topo, layout, ["nodeA", "nodeB"])
    log = parse_nccl_log(text, "reversed.log")
    result = replay(job16, "ar16", algorithm="ring", options=NcclOptions(log=log))
    for c in range(4):
        ring = reversed_rings[c]
        expected = {(int(ring[i]), int(ring[(i + 1) % 16])) for i in range(16)}
        assert _ring_edges(result.flows, c) == expected
    assert any("reversed.log" in note for note in result.notes)
    tree = replay(job16, "ar16", algorithm="tree", options=NcclOptions(log=log))
    up = tree.flows.filter((pl.col("channel") == 0) & (pl.col("step") == 0))
    assert set(up.select("src_rank", "dst_rank").iter_rows()) <= {
        (int(q), int(topo.tree_parent[0, q])) for q in range(16) if topo.tree_parent[0, q] >= 0
    }


def test_the_nccl_1412_excerpt_completed_to_eight_channels_gives_its_rings(job16: Path) -> None:
    # The excerpt prints channels 00-04; NCCL's channels 4-7 repeat 0-3 (ncclTopoPostset copies them),
    # so the three missing lines are channels 1-3's, added here (not part of the quote).
    lines = NCCL_1412.splitlines()
    rings = {int(line.split("Channel ")[1][:2]): line for line in lines if ": " in line and "Channel 0" in line}
    extra = [rings[c].replace(f"Channel {c:02d}/08", f"Channel {c + 4:02d}/08") for c in (1, 2, 3)]
    log = parse_nccl_log("\n".join(lines + extra) + "\n", "nccl-1412.log")
    placement = Placement(nics_per_host=4, nic_gbps=200, pcie_gbytes=24)
    result = replay(job16, "ar16", algorithm="ring", placement=placement, options=NcclOptions(log=log, gpu_arch=80))
    assert result.topologies[0].source == "nccl-1412.log" and result.topologies[0].channels == 8
    order = [0, 5, 4, 7, 6, 3, 2, 1, 8, 13, 12, 15, 14, 11, 10, 9]
    assert _ring_edges(result.flows, 0) == {(order[i], order[(i + 1) % 16]) for i in range(16)}


def test_a_log_that_does_not_fit_the_job_is_one_line_naming_it(job16: Path) -> None:
    # the log ran the 16 ranks on 4 hosts of 4; the replay's placement puts them on 2 hosts of 8
    four = Placement(gpus_per_host=4)
    layout = group_layout(list(range(16)), four)
    text = render(model(layout, four, NcclOptions()), layout, ["a", "b", "c", "d"])
    log = parse_nccl_log(text, "wrong.log")
    with pytest.raises(InputError, match=r"wrong.log: line \d+: the communicator of 16 ranks runs on 4 host"):
        replay(job16, "ar16", options=NcclOptions(log=log))
    assert replay(job16, "ar16", placement=four, options=NcclOptions(log=log)).topologies[0].source == "wrong.log"
