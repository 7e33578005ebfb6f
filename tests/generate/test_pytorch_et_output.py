"""`generate --trace-format pytorch-et`: per-rank PyTorch ET JSON that ingests into the same collectives
as the default .et output of the same job and seed."""

from __future__ import annotations

import csv
import gzip
import json
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import tracekit
from tracekit.generate import generate_fleet, load_profile
from tracekit.generate.fleet import write_job
from tracekit.ingest import ingest
from tracekit.ingest.discover import MANIFEST_NAME
from tracekit.ingest.worker import rank_from_name

JOBS = 12
SEED = 10  # 12 jobs of all three classes: ranking-ddp, fsdp and llm-3d (8 GPUs, 16, 16 in 2 stages)
PROFILE = """
extends = "sample"
name = "test-tiny"
description = "sample profile with jobs of at most 16 GPUs, for the output-format tests"

[job_size]
max_size = 16
growth = 0.4

[job_size.sources]
max_size = "[est] keeps these fleets to ~150 rank files"
growth = "[est] the most two sizes allow over two years (0.48)"
"""


@dataclass
class Pair:
    chakra: Path
    json: Path
    chakra_ds: Path
    json_ds: Path
    profile: dict[str, Any]


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    root = tmp_path_factory.mktemp("formats")
    (root / "tiny.toml").write_text(PROFILE)
    profile = load_profile(root / "tiny.toml")
    out = {}
    for fmt in ("chakra", "pytorch-et"):
        folder = root / fmt
        generate_fleet(folder, JOBS, SEED, profile, workers=1, trace_format=fmt)
        dataset = root / f"{fmt}.dataset"
        report = ingest([folder], dataset, workers=1)
        assert report.ok, report.errors[:5]
        out[fmt] = (folder, dataset)
    return Pair(out["chakra"][0], out["pytorch-et"][0], out["chakra"][1], out["pytorch-et"][1], profile)


def _sql(dataset: Path, query: str) -> list[tuple[Any, ...]]:
    with tracekit.open(dataset) as ds:
        return ds.sql(query).fetchall()


def test_one_gzip_json_per_rank_named_for_its_rank(pair: Pair) -> None:
    with open(pair.json / MANIFEST_NAME) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == JOBS
    for row in rows:
        files = sorted((pair.json / row["path"]).iterdir())
        assert len(files) == int(row["world_size"])
        assert {f.name.split(".", 1)[1].split(".", 1)[1] for f in files} == {"json.gz"}
        assert sorted(rank_from_name(f.name) or 0 for f in files) == list(range(int(row["world_size"])))
        assert not list(pair.json.rglob("*.et"))
    doc = json.loads(gzip.decompress((pair.json / rows[0]["path"] / f"{rows[0]['job_id']}.0.json.gz").read_bytes()))
    assert doc["schema"] == "1.1.1-chakra.0.0.4"
    assert doc["nodes"][0]["name"] == "[pytorch|profiler|execution_trace|thread]"
    assert doc["nodes"][1]["name"] == "## process_group:init ##"
    assert doc["nodes"][-1]["name"] == "[pytorch|profiler|execution_trace|process]"


def test_traces_are_pytorch_et_and_ok(pair: Pair) -> None:
    rows = _sql(pair.json_ds, "select format, status, schema_version, count(*) from traces group by all")
    assert [r[:3] for r in rows] == [("pytorch_et", "ok", "1.1.1-chakra.0.0.4")]
    chakra = _sql(pair.chakra_ds, "select count(*) from traces where status = 'ok'")[0][0]
    assert rows[0][3] == chakra
    # The default group's rank argument where the trace records only the whole world; the name where
    # it records sub-groups too (a rank argument may then be local to one of them). Never a conflict.
    sources = _sql(pair.json_ds, "select distinct rank_source from traces order by 1")
    assert sources == [("collective_args",), ("file_name",)]
    assert _sql(pair.json_ds, "select count(*) from traces where len(warnings) > 0") == [(0,)]


def test_jobs_keep_manifest_label_and_start(pair: Pair) -> None:
    query = "select job_id, label, started_at, world_size from jobs order by job_id"
    got = _sql(pair.json_ds, query)
    assert got == _sql(pair.chakra_ds, query)
    with open(pair.json / MANIFEST_NAME) as f:
        manifest = {r["job_id"]: r for r in csv.DictReader(f)}
    assert len(got) == JOBS
    for job_id, label, started_at, world_size in got:
        assert label == manifest[job_id]["label"]
        assert started_at.isoformat() == manifest[job_id]["started_at"]
        assert world_size == int(manifest[job_id]["world_size"])


def test_same_collectives_as_the_chakra_fleet(pair: Pair) -> None:
    query = (
        "select job_id, rank, comm_type, in_bytes, group_size, peer, pg_name, dtype, in_elems, in_splits, out_splits,"
        " case when comm_type = 'ALL_TO_ALL' then [out_elems::varchar, is_uneven::varchar] end from collectives"
    )

    def per_rank(dataset: Path) -> dict[tuple[str, int], Counter]:
        out: dict[tuple[str, int], Counter] = {}
        for job_id, rank, *rest in _sql(dataset, query):
            key = tuple(tuple(v) if isinstance(v, list) else v for v in rest)
            out.setdefault((job_id, rank), Counter())[key] += 1
        return out

    chakra, pet = per_rank(pair.chakra_ds), per_rank(pair.json_ds)
    assert chakra.keys() == pet.keys()
    for key, expected in chakra.items():
        assert pet[key] == expected, key
    kinds = {k[0] for c in pet.values() for k in c}
    assert {"ALL_REDUCE", "ALL_TO_ALL", "ALL_GATHER", "REDUCE_SCATTER", "SEND", "RECV"} <= kinds


def test_collective_details(pair: Pair) -> None:
    rows = _sql(
        pair.json_ds,
        "select comm_type, op_name, is_uneven, count(*) filter (where inferred is not null and len(inferred) > 0),"
        " count(*) filter (where in_bytes <> in_elems * (case dtype when 'BFloat16' then 2 when 'Float' then 4"
        " when 'Long' then 8 end))"
        " from collectives group by all",
    )
    by_type = {r[0]: r for r in rows}
    assert by_type["ALL_TO_ALL"][1:3] == ("all_to_allv", True)
    assert by_type["ALL_GATHER"][1:3] == ("_allgather_base", False)
    assert by_type["REDUCE_SCATTER"][1:3] == ("_reduce_scatter_base", False)
    assert by_type["SEND"][1] == "send" and by_type["RECV"][1] == "recv"
    assert all(r[3] == 0 for r in rows)  # group sizes and peers are recorded, not inferred
    assert all(r[4] == 0 for r in rows)  # in_bytes = in_msg_nelems x dtype size
    assert _sql(pair.json_ds, "select count(*) from process_groups where pg_name = '0' and group_size is null")[0] == (
        0,
    )


def test_json_is_deterministic_for_a_seed(pair: Pair, tmp_path: Path) -> None:
    again = tmp_path / "again"
    generate_fleet(again, JOBS, SEED, pair.profile, workers=2, trace_format="pytorch-et")
    first = sorted(p.relative_to(pair.json) for p in pair.json.rglob("*") if p.is_file())
    assert first == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in first:
        assert (pair.json / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_archive_holds_json_members(pair: Pair, tmp_path: Path) -> None:
    row, files, _ = write_job(pair.profile, SEED, 0, JOBS, tmp_path, archive=True, trace_format="pytorch-et")
    with tarfile.open(tmp_path / row["path"], "r:gz") as tar:
        names = tar.getnames()
    assert len(names) == files == row["world_size"]
    assert all(n.startswith(f"{row['job_id']}/") and n.endswith(".json.gz") for n in names)
    unpacked = {n.rsplit("/", 1)[1] for n in names}
    assert unpacked == {p.name for p in (pair.json / row["job_id"]).iterdir()}


def test_cli_option(tmp_path: Path) -> None:
    from tracekit.cli import app

    runner = CliRunner()
    result = runner.invoke(
        app, ["generate", "--jobs", "2", "--seed", "1", "--profile", "sample", "--out", str(tmp_path / "f"),
              "--trace-format", "pytorch-et", "--workers", "1", "-q"]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "f").rglob("*.json.gz")) and not list((tmp_path / "f").rglob("*.et"))
    bad = runner.invoke(app, ["generate", "--jobs", "1", "--out", str(tmp_path / "g"), "--trace-format", "kineto"])
    assert bad.exit_code != 0
