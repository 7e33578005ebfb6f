"""The written fleet: deterministic bytes, the manifest ingest picks up, and .et files that an
independent protobuf decoder and tracekit's parser read identically."""

from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import io
import json
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]
from typer.testing import CliRunner

import tracekit
from tests.generate.conftest import Fleet
from tracekit.cli import app
from tracekit.generate import generate_fleet
from tracekit.parsers import et_def_pb2 as pb

NODE_TYPES = {v.number: v.name for v in pb.DESCRIPTOR.enum_types_by_name["NodeType"].values}
COMM_TYPES = {v.number: v.name for v in pb.DESCRIPTOR.enum_types_by_name["CollectiveCommType"].values}


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_same_seed_same_bytes_for_any_worker_count(tmp_path: Path) -> None:
    one = generate_fleet(tmp_path / "one", 24, 7, "sample", workers=1)
    two = generate_fleet(tmp_path / "two", 24, 7, "sample", workers=2)
    assert (one.jobs, one.files, one.bytes) == (two.jobs, two.files, two.bytes)
    assert _digest(tmp_path / "one") == _digest(tmp_path / "two")
    generate_fleet(tmp_path / "other", 24, 8, "sample", workers=1)
    assert _digest(tmp_path / "one") != _digest(tmp_path / "other")


def test_archives_hold_the_same_rank_files(tmp_path: Path) -> None:
    generate_fleet(tmp_path / "dir", 6, 3, "sample", workers=1)
    generate_fleet(tmp_path / "tgz", 6, 3, "sample", workers=1, archive=True)
    again = generate_fleet(tmp_path / "tgz2", 6, 3, "sample", workers=1, archive=True)
    assert _digest(tmp_path / "tgz") == _digest(tmp_path / "tgz2") and again.jobs == 6
    for archive in sorted((tmp_path / "tgz").glob("*.tgz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                assert data == (tmp_path / "dir" / member.name).read_bytes()


def test_manifest_is_picked_up_by_ingest(fleet_a: Fleet) -> None:
    with open(fleet_a.folder / "tracekit_manifest.csv", newline="") as f:
        manifest = {row["job_id"]: row for row in csv.DictReader(f)}
    with tracekit.open(fleet_a.dataset) as ds:
        jobs = ds.sql("select job_id, label, started_at, world_size, ranks_seen from jobs").fetchall()
        errors = ds.sql("select count(*) from traces where status <> 'ok'").fetchall()[0][0]
    assert errors == 0
    assert {j[0] for j in jobs} == set(manifest)
    for job_id, label, started_at, world, ranks in jobs:
        row = manifest[job_id]
        assert label == row["label"] == f"{row['class']}:{row['model']}"
        assert started_at == datetime.fromisoformat(row["started_at"])
        assert world == ranks == int(row["world_size"])
    starts = [manifest[j]["started_at"] for j in sorted(manifest)]
    assert starts == sorted(starts)  # job ids are chronological


# ---------------------------------------------------------------------------------------------
# Independent decoding


def decode_et(data: bytes) -> tuple[Any, list[Any]]:
    """GlobalMetadata and Nodes by plain protobuf parsing with our own varint framing."""
    messages = []
    pos = 0
    while pos < len(data):
        length, pos = _DecodeVarint(data, pos)
        messages.append(data[pos : pos + length])
        pos += length
    assert pos == len(data)
    return pb.GlobalMetadata.FromString(messages[0]), [pb.Node.FromString(m) for m in messages[1:]]


def _attrs(node: Any) -> dict[str, Any]:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def _independent_rows(nodes: list[Any]) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    ops, colls = [], []
    for n in nodes:
        ops.append(
            (
                n.id,
                n.name,
                NODE_TYPES[n.type],
                float(n.start_time_micros) if n.start_time_micros else None,
                float(n.duration_micros),
                list(n.ctrl_deps),
                list(n.data_deps),
            )
        )
        a = _attrs(n)
        if n.type == pb.COMM_COLL_NODE:
            colls.append((n.id, n.name, COMM_TYPES[a["comm_type"]], a.get("pg_name"), None, a["comm_size"]))
        elif n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
            kind, peer = ("SEND", a["comm_dst"]) if n.type == pb.COMM_SEND_NODE else ("RECV", a["comm_src"])
            colls.append((n.id, n.name, kind, a.get("pg_name"), peer, a["comm_size"]))
    return ops, colls


def test_independent_decoder_and_tracekit_parser_agree(fleet_a: Fleet) -> None:
    with open(fleet_a.folder / "tracekit_manifest.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    picked: dict[str, dict[str, str]] = {}
    for row in rows:  # one job of each class, with more than one stage where there is one
        picked.setdefault(row["class"], row)
        if row["class"] == "llm-3d" and int(row["world_size"]) >= 16:
            picked["llm-3d"] = row
    assert set(picked) == {"ranking-ddp", "fsdp", "llm-3d"}
    checked = 0
    for row in picked.values():
        for path in (
            sorted((fleet_a.folder / row["path"]).glob("*.et"))[:3]
            + sorted((fleet_a.folder / row["path"]).glob("*.et"))[-2:]
        ):
            data = path.read_bytes()
            meta, nodes = decode_et(data)
            ops, colls = _independent_rows(nodes)
            parsed = tracekit.parse_file(path)
            assert parsed.format == "chakra_et" and parsed.meta.schema_version == meta.version
            got_ops = parsed.ops.select(
                ["op_id", "name", "type", "start_us", "duration_us", "ctrl_deps", "data_deps"]
            ).to_pylist()
            assert [tuple(r.values()) for r in got_ops] == ops
            got = parsed.collectives.select(["op_id", "op_name", "comm_type", "pg_name", "peer", "in_bytes"])
            assert [tuple(r.values()) for r in got.to_pylist()] == colls
            # process groups: the metadata node's JSON, read with ast + json, as the parser reads it
            pg_node = next(n for n in nodes if n.type == pb.METADATA_NODE)
            assert "process_group:init" in pg_node.name
            groups = json.loads(ast.literal_eval(pg_node.inputs.values)[0])
            assert [(g.pg_name, g.pg_desc, g.group_size, g.ranks) for g in parsed.meta.process_groups] == [
                (g["pg_name"], g["pg_desc"], g["group_size"], g["ranks"]) for g in groups
            ]
            checked += 1
    assert checked >= 15


def test_alltoallv_sizes_are_uneven_across_ranks(fleet_a: Fleet) -> None:
    with tracekit.open(fleet_a.dataset) as ds:
        spread = ds.sql(
            "select count(distinct in_bytes) > 1 from collectives where op_name = 'embedding_fwd_alltoallv' "
            "group by job_id, op_id"
        ).fetchall()
    assert spread and all(row[0] for row in spread)


def test_every_collective_carries_its_element_type(fleet_a: Fleet) -> None:
    """Issue 20: generated traces carried no dtype, so the report's element-count view was empty."""
    with tracekit.open(fleet_a.dataset) as ds:
        untyped = ds.sql("select count(*) from collectives where dtype is null or in_elems is null").fetchall()
        types = dict(ds.sql("select op_name, any_value(dtype) from collectives group by 1").fetchall())
        mixed = ds.sql(
            "select job_id, op_name from collectives group by all having count(distinct dtype) > 1"
        ).fetchall()
    assert untyped == [(0,)] and mixed == []
    assert types["sparse_input_alltoallv"] == "Long"  # embedding ids
    assert types["ddp_bucket_allreduce"] == "Float"  # fp32 dense gradients
    assert types["fsdp_fwd_allgather"] == types["tp_fwd_allreduce"] == types["pp_fwd_send"] == "BFloat16"


def test_alltoallv_carry_uneven_splits_that_agree_across_ranks(fleet_a: Fleet) -> None:
    """Rank i's in_splits[j] is rank j's out_splits[i] (issue 20: generated all-to-allv had no splits)."""
    with tracekit.open(fleet_a.dataset) as ds:
        rows = ds.sql(
            "select c.job_id, c.op_id, list_position(g.ranks, c.rank) - 1, c.in_splits, c.out_splits, c.is_uneven,"
            " c.in_elems, c.out_elems from collectives c join process_groups g using (job_id, pg_name)"
            " where c.comm_type = 'ALL_TO_ALL'"
        ).fetchall()
    calls: dict[tuple[str, int], dict[int, tuple[list[int], list[int]]]] = {}
    for job, op, index, ins, outs, uneven, in_elems, out_elems in rows:
        assert uneven and sum(ins) == in_elems and sum(outs) == out_elems
        calls.setdefault((job, op), {})[index] = (ins, outs)
    assert calls
    for members in calls.values():
        n = len(members)
        assert sorted(members) == list(range(n))
        for i in range(n):
            assert [members[j][1][i] for j in range(n)] == members[i][0]
    assert any(len(set(ins)) > 1 for members in calls.values() for ins, _ in members.values())


def test_bus_bandwidth_stays_under_the_link_speed(fleet_a: Fleet) -> None:
    """No call of any rank reads faster than the NIC (issue 20: all-to-all read 117-143 GB/s on
    50 GB/s NICs, one duration per collective applied to skewed per-rank sizes)."""
    link = fleet_a.profile["fleet"]["link_gbps"] / 8
    with tracekit.open(fleet_a.dataset) as ds:
        fastest = dict(
            ds.sql("select comm_type, max(busbw_gbps) from collective_bandwidth(null) group by 1").fetchall()
        )
    assert set(fastest) >= {"ALL_REDUCE", "ALL_TO_ALL", "ALL_GATHER", "REDUCE_SCATTER", "SEND"}
    assert all(bw <= link for bw in fastest.values()), fastest
    assert max(fastest.values()) > 0.9 * link  # the largest calls run at the link's speed


def test_cli_generate_then_ingest(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "fleet"
    result = runner.invoke(
        app,
        [
            "generate",
            "--jobs",
            "5",
            "--seed",
            "2",
            "--profile",
            "sample",
            "--out",
            str(out),
            "--archive",
            "--workers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(list(out.glob("*.tgz"))) == 5 and (out / "profile.toml").is_file()
    again = runner.invoke(app, ["generate", "--jobs", "5", "--out", str(out)])
    assert again.exit_code == 2  # an existing fleet: a bad argument
    result = runner.invoke(app, ["ingest", str(out), "--out", str(tmp_path / "ds"), "-q"])
    assert result.exit_code == 0, result.output
    with tracekit.open(tmp_path / "ds") as ds:
        labels = ds.sql("select count(*), count(label), count(started_at) from jobs").fetchall()[0]
    assert labels == (5, 5, 5)
    with gzip.open(next(out.glob("*.tgz"))) as f:
        assert tarfile.open(fileobj=io.BytesIO(f.read())).getnames()


# Runs `tracekit generate` with a Ctrl-C arriving while its pool starts its writer processes: after
# the first is started, before the others are.
_CTRL_C_AS_THE_POOL_STARTS = textwrap.dedent(
    """
    import os, signal, sys
    import tracekit.executors
    from tracekit.__main__ import main

    launch = tracekit.executors._WorkerPopen._launch
    started = []

    def _launch(self, process_obj):
        launch(self, process_obj)
        started.append(self.pid)
        if len(started) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    if __name__ == "__main__":
        tracekit.executors._WorkerPopen._launch = _launch
        sys.argv = ["tracekit", *sys.argv[1:]]
        main()
    """
)


def test_a_ctrl_c_while_the_pool_starts_stops_every_writer_without_a_traceback(tmp_path: Path) -> None:
    """The Ctrl-C stopped the pool half-built, outside the block that stops its processes: a writer
    still starting outlived it and printed a traceback (its semaphores were gone)."""
    (tmp_path / "ctrl_c.py").write_text(_CTRL_C_AS_THE_POOL_STARTS)
    done = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "ctrl_c.py"),
            "generate",
            "--jobs",
            "40",
            "--workers",
            "4",
            "--out",
            str(tmp_path / "fleet"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(1)  # a writer that outlived the command would print now
    assert (done.returncode, done.stderr) == (130, "interrupted\n"), done.stderr
