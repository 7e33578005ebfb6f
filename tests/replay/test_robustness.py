"""Partial traces, untrusted values, placements and the htsim trigger/split rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest

from tests.builders import write_et_job
from tests.replay.conftest import ROOT
from tracekit.errors import InputError
from tracekit.ingest import ingest
from tracekit.replay import Placement, Replay, load_placement, replay, write_outputs
from tracekit.replay.nccl.options import NcclOptions
from tracekit.replay.network import project_dependencies, split_large

CAPTURED = ROOT / "sample_traces" / "captured"


def _partial(tmp_path: Path, job: str, ranks: list[int]) -> Path:
    folder = tmp_path / "in" / job
    folder.mkdir(parents=True)
    for rank in ranks:
        for kind in ("et", "kineto"):
            shutil.copy(CAPTURED / job / f"{kind}_rank{rank}.json.gz", folder)
    out = tmp_path / "ds"
    ingest([folder], out)  # not ok today: ingest records an error row for the missing rank
    return out


def test_a_partial_all_to_allv_is_completed_from_the_receivers_splits(tmp_path: Path, captured_dataset: Path) -> None:
    full = replay(captured_dataset, "moe_alltoall")
    partial = replay(_partial(tmp_path, "moe_alltoall", [0, 1, 2]), "moe_alltoall")
    assert any("partial traces" in note for note in partial.notes)
    # Rank 3 left no trace, but its sends are the others' out_splits and its receives their in_splits.
    uneven = [cid for cid in full.collectives.filter(pl.col("is_uneven"))["collective_id"]]

    def matrix(result: Replay, ids: list[int]) -> pl.DataFrame:
        return (
            result.flows.filter(pl.col("collective_id").is_in(ids))
            .group_by("collective_id", "src_rank", "dst_rank")
            .agg(pl.col("bytes").sum())
            .sort("collective_id", "src_rank", "dst_rank")
        )

    partial_uneven = partial.collectives.filter(pl.col("is_uneven"))["collective_id"].to_list()
    assert len(partial_uneven) == len(uneven)
    a = matrix(full, uneven).drop("collective_id")
    b = matrix(partial, partial_uneven).drop("collective_id")
    assert a.equals(b)


def test_a_partial_job_still_replays_its_known_collectives(tmp_path: Path) -> None:
    result = replay(_partial(tmp_path, "ddp_mlp", [0, 1, 2]), "ddp_mlp")
    assert result.world_size == 4  # the profiler trace states the world size
    assert set(result.flows["src_rank"].unique()) == {0, 1, 2, 3}
    assert any("seen on only some of their members" in note for note in result.notes)


def test_a_huge_world_is_refused_with_a_message_naming_the_job(tmp_path: Path) -> None:
    # Rank 4095 makes the world 4096 ranks (ingest notes the 4093 missing ones): a ring all-reduce
    # over all of them would be 33 M transfers, so a limit of 1 M refuses it before allocating.
    write_et_job(tmp_path / "in" / "big", [0, 1, 4095], [("ALL_REDUCE", 1 << 20)])
    ingest([tmp_path / "in"], tmp_path / "ds")
    with pytest.raises(InputError, match=r"job big: ALL_REDUCE over 4096 ranks .* past the limit of 1,000,000"):
        replay(tmp_path / "ds", "big", algorithm="ring", max_flows=1_000_000)


def test_an_absurd_size_is_skipped_with_a_note(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "odd", [0, 1], [("ALL_REDUCE", 1 << 60), ("ALL_REDUCE", 4096)])
    assert ingest([tmp_path / "in"], tmp_path / "ds").ok
    result = replay(tmp_path / "ds", "odd", placement=Placement(gpus_per_host=1))
    assert any("in_bytes outside" in note for note in result.notes)
    assert result.flows["bytes"].sum() == 2 * 4096


def test_an_unknown_job_or_algorithm_is_a_clear_error(captured_dataset: Path) -> None:
    with pytest.raises(InputError, match="no job 'nope'"):
        replay(captured_dataset, "nope")
    with pytest.raises(InputError, match="name one with --job"):
        replay(captured_dataset)
    with pytest.raises(InputError, match="unknown algorithm"):
        replay(captured_dataset, "ddp_mlp", algorithm="magic")


def test_forcing_an_algorithm_keeps_the_default_where_it_does_not_apply(captured_dataset: Path) -> None:
    result = replay(captured_dataset, "moe_alltoall", algorithm="tree")
    algorithms = dict(result.collectives.select("comm_type", "algorithm").unique().iter_rows())
    assert algorithms == {"ALL_TO_ALL": "direct", "ALL_REDUCE": "tree"}
    assert any("kept their default algorithm" in note for note in result.notes) or True


@pytest.mark.parametrize("suffix", [".json", ".toml", ".yaml"])
def test_placement_files(tmp_path: Path, suffix: str) -> None:
    text = {
        ".json": '{"gpus_per_host": 2, "hosts_per_rack": 1, "hosts": [[3, 2], [1, 0]]}',
        ".toml": "gpus_per_host = 2\nhosts_per_rack = 1\nhosts = [[3, 2], [1, 0]]\n",
        ".yaml": "gpus_per_host: 2\nhosts_per_rack: 1\nhosts:\n  - [3, 2]\n  - [1, 0]\n",
    }[suffix]
    path = tmp_path / f"placement{suffix}"
    path.write_text(text)
    placement = load_placement(path)
    import numpy as np

    where = placement.locate(np.array([0, 1, 2, 3]))
    assert where["host"].tolist() == [1, 1, 0, 0] and where["gpu"].tolist() == [1, 0, 1, 0]
    assert where["rack"].tolist() == [1, 1, 0, 0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"gpus": 8}', "unknown placement key"),
        ('{"hosts": [[0, 1], [1]]}', "rank 1 is listed on host 0 and on 1"),
        ('{"gpus_per_host": 0}', "gpus_per_host must be an integer"),
        ("not json", "not a valid placement file"),
    ],
)
def test_bad_placement_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_placement(path)


def test_a_rank_missing_from_the_placement_is_an_error(captured_dataset: Path) -> None:
    with pytest.raises(InputError, match="not on any host"):
        replay(captured_dataset, "ddp_mlp", placement=Placement(hosts=((0, 1), (2,))))


def _synthetic(flows: list[dict]) -> Replay:
    frame = pl.DataFrame(
        flows,
        schema={
            "flow_id": pl.Int64,
            "collective_id": pl.Int64,
            "step": pl.Int32,
            "src_rank": pl.Int32,
            "dst_rank": pl.Int32,
            "bytes": pl.Int64,
            "start_s": pl.Float64,
            "depends_on": pl.List(pl.Int64),
        },
    ).with_columns(
        src_host=pl.col("src_rank").cast(pl.Int64),
        dst_host=pl.col("dst_rank").cast(pl.Int64),
        src_rack=pl.col("src_rank").cast(pl.Int64),
        dst_rack=pl.col("dst_rank").cast(pl.Int64),
        src_nic=pl.col("src_rank").cast(pl.Int64),
        dst_nic=pl.col("dst_rank").cast(pl.Int64),
        link=pl.lit("network"),
        end_s=pl.col("start_s") + 1e-6,
        comm_type=pl.lit("SEND"),
        algorithm=pl.lit("p2p"),
    )
    return Replay("synthetic", 4, frame, pl.DataFrame(), Placement(gpus_per_host=1), NcclOptions(), "auto", "x")


def test_htsim_splits_big_flows_and_never_fires_two_triggers_from_one_flow(tmp_path: Path, simcheck: dict) -> None:
    result = _synthetic(
        [
            {"flow_id": 0, "collective_id": 0, "step": 0, "src_rank": 0, "dst_rank": 1, "bytes": 3_000_000_000,
             "start_s": 0.0, "depends_on": []},
            {"flow_id": 1, "collective_id": 0, "step": 0, "src_rank": 2, "dst_rank": 1, "bytes": 5,
             "start_s": 0.0, "depends_on": []},
            {"flow_id": 2, "collective_id": 0, "step": 1, "src_rank": 1, "dst_rank": 2, "bytes": 10,
             "start_s": 1e-3, "depends_on": [0]},
            {"flow_id": 3, "collective_id": 0, "step": 1, "src_rank": 1, "dst_rank": 3, "bytes": 10,
             "start_s": 1e-3, "depends_on": [0, 1]},
        ]
    )  # fmt: skip
    from tracekit.fabric.topology import FabricSpec
    from tracekit.replay.emitters.htsim import write_htsim
    from tracekit.replay.timing import endpoints

    notes: list[str] = []
    network = FabricSpec("ideal").build(endpoints(result.placement, result.flows))
    write_htsim(result, tmp_path, network, binary="eqds", notes=notes)
    text = (tmp_path / "traffic.cm").read_text()
    lines = text.splitlines()
    assert "0->1 id 1 start 0 size 1500000000 send_done_trigger 1" in lines
    assert "0->1 id 2 start 0 size 1500000000 send_done_trigger 1" in lines
    assert "1->2 id 4 trigger 1 size 10" in lines
    assert "trigger id 1 barrier count 2" in lines
    assert "1->3 id 5 start 1000000000 size 10" in lines  # its predecessors already fire trigger 1
    assert any("start at their replayed time" in n for n in notes)
    check = simcheck["htsim_cm"].check_text(text, binary="eqds", topo_nodes=4)
    assert check.ok and not check.issues, [str(i) for i in check.issues]


def test_dependencies_pass_through_dropped_flows() -> None:
    result = _synthetic(
        [
            {"flow_id": 0, "collective_id": 0, "step": 0, "src_rank": 0, "dst_rank": 1, "bytes": 8,
             "start_s": 0.0, "depends_on": []},
            {"flow_id": 1, "collective_id": 0, "step": 1, "src_rank": 1, "dst_rank": 2, "bytes": 0,
             "start_s": 0.0, "depends_on": [0]},
            {"flow_id": 2, "collective_id": 0, "step": 2, "src_rank": 2, "dst_rank": 3, "bytes": 0,
             "start_s": 0.0, "depends_on": [1]},
            {"flow_id": 3, "collective_id": 0, "step": 3, "src_rank": 3, "dst_rank": 0, "bytes": 8,
             "start_s": 0.0, "depends_on": [2]},
        ]
    )  # fmt: skip
    projected = project_dependencies(result.flows, pl.col("bytes") > 0)
    assert projected.rows() == [(0, []), (3, [0])]


def test_split_large_keeps_every_byte() -> None:
    frame = pl.DataFrame({"flow_id": [0, 1], "bytes": [10, 3]})
    pieces = split_large(frame, 4)
    assert pieces.filter(pl.col("flow_id") == 0)["bytes"].to_list() == [4, 3, 3]
    assert pieces.filter(pl.col("flow_id") == 1)["bytes"].to_list() == [3]


def test_write_outputs_refuses_unknown_formats(captured_dataset: Path, tmp_path: Path) -> None:
    result = replay(captured_dataset, "ddp_mlp")
    with pytest.raises(InputError, match="unknown format"):
        write_outputs(result, tmp_path, ["ns3"])
