"""Ingest tells the truth about real traces copied under misleading names and into misleading folders:
partial jobs, ranks the content records, jobs that must not merge or split, honest re-runs."""

from __future__ import annotations

import gzip
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

import tracekit
from tests.conftest import SAMPLE_TRACES
from tracekit.errors import InputError
from tracekit.ingest import ingest

pytestmark = pytest.mark.slow  # commands and fleets end to end: make check runs them, make fast does not


def _member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        extracted = tar.extractfile(name)
        assert extracted is not None
        return extracted.read()


def _copy(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


def _rows(dataset: Path, sql: str, params: list[object] | None = None) -> list[tuple[Any, ...]]:
    with tracekit.open(dataset) as ds:
        return ds.sql(sql, params).fetchall()


# --- partial jobs ------------------------------------------------------------------------------


def test_one_rank_of_a_two_gpu_job_is_read_and_its_missing_rank_counted(public_traces: Path, tmp_path: Path) -> None:
    report = ingest([public_traces / "hta-nccl-2gpu"], tmp_path / "ds")
    assert report.ok and report.errors == []
    assert report.missing == ["job hta-nccl-2gpu: rank 1 of 2 missing"]
    job = _rows(tmp_path / "ds", "select world_size, ranks_seen, ranks_missing, missing_ranks, inferred from jobs")
    assert job == [(2, 1, 1, "1", [])]
    assert _rows(tmp_path / "ds", "select count(*) from traces where status = 'error' or path is null") == [(0,)]


def _hta_claiming(public_traces: Path, folder: Path, claimed: int) -> None:
    text = gzip.decompress((public_traces / "hta-nccl-2gpu" / "nccl_data.json.gz").read_bytes())
    text = text.replace(b'"rank": 0, "world_size": 2,', f'"rank": 0, "world_size": {claimed},'.encode(), 1)
    folder.mkdir()
    (folder / "nccl_data.json").write_bytes(text)


@pytest.mark.parametrize("claimed", [1024, 1 << 20])
def test_a_huge_claimed_world_size_costs_one_job_row(public_traces: Path, tmp_path: Path, claimed: int) -> None:
    _hta_claiming(public_traces, tmp_path / "in", claimed)
    report = ingest([tmp_path / "in"], tmp_path / "ds", workers=1)
    assert report.ok and report.missing == [f"job in: ranks 1–{claimed - 1} of {claimed} missing"]
    assert _rows(tmp_path / "ds", "select world_size, ranks_missing, missing_ranks from jobs") == [
        (claimed, claimed - 1, f"1-{claimed - 1}")
    ]
    assert _rows(tmp_path / "ds", "select count(*) from traces") == [(1,)]


def test_a_world_size_beyond_any_cluster_is_a_warning_and_the_groups_give_the_size(
    public_traces: Path, tmp_path: Path
) -> None:
    _hta_claiming(public_traces, tmp_path / "in", 2_147_483_647)
    report = ingest([tmp_path / "in"], tmp_path / "ds", workers=1)
    assert report.ok and report.missing == ["job in: rank 1 of 2 missing"]  # the collectives span 2 ranks
    [(warnings,)] = _rows(tmp_path / "ds", "select warnings from traces")
    assert len(warnings) == 1 and "world_size" in warnings[0] and "2147483647" in warnings[0]
    assert _rows(tmp_path / "ds", "select world_size, inferred from jobs") == [(2, ["world_size"])]


def test_one_rank_of_dlrm_has_the_world_size_its_collectives_span(public_traces: Path, tmp_path: Path) -> None:
    # The PyTorch ET states no world size, but its all-to-allv rows span group_size 8.
    data = _member(public_traces / "param-dlrm-8rank" / "dlrm_pytorch_et.tar.gz", "dlrm_pytorch_et/dlrm_eg_0.json")
    (tmp_path / "dlrm").mkdir()
    (tmp_path / "dlrm" / "dlrm_eg_0.json").write_bytes(data)
    report = ingest([tmp_path / "dlrm"], tmp_path / "ds")
    assert report.ok and report.missing == ["job dlrm: ranks 1–7 of 8 missing"]
    assert _rows(tmp_path / "ds", "select world_size, ranks_seen, missing_ranks, inferred from jobs") == [
        (8, 1, "1-7", ["world_size"])
    ]


# --- ranks from content ------------------------------------------------------------------------


def test_a_file_name_does_not_overrule_the_rank_the_content_records(public_traces: Path, tmp_path: Path) -> None:
    # resnet_2gpu_et.json.gz records rank 1 (its default group's collectives); hta's Kineto file rank 0.
    resnet = _copy(public_traces / "param-resnet-2gpu" / "resnet_2gpu_et.json.gz", tmp_path / "a" / "resnet.0.json.gz")
    hta = _copy(public_traces / "hta-nccl-2gpu" / "nccl_data.json.gz", tmp_path / "b" / "rank1.json.gz")
    report = ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "ds")
    assert report.ok
    assert report.missing == ["job a: rank 0 of 2 missing", "job b: rank 1 of 2 missing"]
    rows = _rows(tmp_path / "ds", "select job_id, rank, rank_source, warnings from traces order by job_id")
    assert rows == [
        (
            "a",
            1,
            "collective_args",
            [f"{resnet}: the file name says rank 0 but the default group's collectives record rank 1: rank 1 used"],
        ),
        ("b", 0, "content", [f"{hta}: the file name says rank 1 but distributedInfo record rank 0: rank 0 used"]),
    ]
    assert set(report.warnings) >= {rows[0][3][0], rows[1][3][0]}


def test_a_rank_in_a_file_name_beyond_the_world_size_is_refused(tmp_path: Path) -> None:
    # Chakra files hold no rank; their process group says the world is 4 ranks.
    source = SAMPLE_TRACES / "chakra" / "ddp_mlp"
    for rank in range(3):
        _copy(source / f"ddp_mlp.{rank}.et", tmp_path / "ddp" / f"ddp_mlp.{rank}.et")
    misnamed = _copy(source / "ddp_mlp.3.et", tmp_path / "ddp" / "ddp_mlp.9.et")
    report = ingest([tmp_path / "ddp"], tmp_path / "ds")
    assert report.ok and report.missing == ["job ddp: rank 3 of 4 missing"]
    assert _rows(tmp_path / "ds", "select rank, rank_source, warnings from traces where path = ?", [str(misnamed)]) == [
        (None, None, [f"{misnamed}: rank 9 from the file name is not below the job's world size 4: rank left null"])
    ]
    assert _rows(tmp_path / "ds", "select world_size, ranks_seen from jobs") == [(4, 3)]


@pytest.mark.parametrize("name", ["et-torch-2.1.0.et", "llama.v3.1.et", "trace_step.100.et", "trace-2024-03-01.et"])
def test_versions_dates_and_steps_in_a_name_are_not_ranks(public_traces: Path, tmp_path: Path, name: str) -> None:
    _copy(public_traces / "astra-sim-microbenchmarks" / "all_reduce" / "all_reduce.2.et", tmp_path / "j" / name)
    assert ingest([tmp_path / "j"], tmp_path / "ds").ok
    assert _rows(tmp_path / "ds", "select rank, rank_source from traces") == [(None, None)]


# --- job identity ------------------------------------------------------------------------------


def _captured(job: str, target: Path) -> None:
    for path in sorted((SAMPLE_TRACES / "captured" / job).iterdir()):
        _copy(path, target / path.name)


def test_two_weeks_with_a_folder_of_the_same_name_are_two_jobs(tmp_path: Path) -> None:
    _captured("ddp_mlp", tmp_path / "week1" / "run1")
    _captured("fsdp_mlp", tmp_path / "week2" / "run1")
    assert ingest([tmp_path / "week1"], tmp_path / "ds").warnings == []
    second = ingest([tmp_path / "week2"], tmp_path / "ds")
    assert second.ok
    assert second.warnings == [
        f"job run1 already holds files from {tmp_path / 'week1' / 'run1'}: the files from "
        f"{tmp_path / 'week2' / 'run1'} are kept apart as job week2/run1 "
        "(to add them to job run1, use --job run1; or name jobs in a manifest)"
    ]
    mix = _rows(
        tmp_path / "ds", ("select job_id, list(distinct comm_type order by comm_type) from collectives group by 1")
    )
    assert sorted(mix) == [
        ("run1", ["ALL_REDUCE", "BROADCAST"]),
        ("week2/run1", ["ALL_GATHER", "REDUCE_SCATTER"]),
    ]
    # Running either week again adds nothing and warns of nothing.
    again = ingest([tmp_path / "week2"], tmp_path / "ds")
    assert (again.files_added, again.files_skipped, again.warnings) == (0, 8, [])


def test_two_generated_fleets_in_one_dataset_keep_their_jobs_and_labels(tmp_path: Path) -> None:
    from tracekit.generate import generate_fleet

    labels = {}
    for fleet, seed in (("fleetA", 1), ("fleetB", 2)):
        generate_fleet(tmp_path / fleet, 6, seed, "sample")
        rows = (tmp_path / fleet / "tracekit_manifest.csv").read_text().splitlines()[1:]
        labels[fleet] = {r.split(",")[0]: r.split(",")[2] for r in rows}
    ingest([tmp_path / "fleetA"], tmp_path / "ds")
    second = ingest([tmp_path / "fleetB"], tmp_path / "ds")
    assert second.ok
    assert len(second.warnings) == 1 and "6 job id(s) already in the dataset" in second.warnings[0]
    assert "kept apart as fleetB/job-000000 and 5 more" in second.warnings[0]
    stored = dict(_rows(tmp_path / "ds", "select job_id, label from jobs"))
    expected = {**labels["fleetA"], **{f"fleetB/{j}": label for j, label in labels["fleetB"].items()}}
    assert stored == expected
    assert ingest([tmp_path / "fleetB"], tmp_path / "ds").files_added == 0


def test_a_folder_ingested_again_from_another_level_or_copied_elsewhere_is_not_added_twice(tmp_path: Path) -> None:
    shutil.copytree(SAMPLE_TRACES / "chakra", tmp_path / "samples" / "chakra")
    first = ingest([tmp_path / "samples"], tmp_path / "ds")
    counts = _rows(tmp_path / "ds", "select (select count(*) from traces), (select count(*) from collectives)")
    # The same folders, given from one level down: the same jobs, already present.
    again = ingest([tmp_path / "samples" / "chakra"], tmp_path / "ds")
    assert (again.files_added, again.files_skipped, again.warnings) == (0, first.files_added, [])
    # A copy elsewhere: the same files (name and content), reported and not added.
    shutil.copytree(tmp_path / "samples" / "chakra", tmp_path / "copy" / "chakra")
    copied = ingest([tmp_path / "copy"], tmp_path / "ds")
    assert copied.ok and (copied.files_added, copied.files_duplicate) == (0, first.files_added)
    original = tmp_path / "samples" / "chakra" / "ddp_mlp" / "ddp_mlp.0.et"
    assert (
        f"{tmp_path / 'copy' / 'chakra' / 'ddp_mlp' / 'ddp_mlp.0.et'}: the same file (name and content) as "
        f"{original} in job chakra/ddp_mlp; not added again"
    ) in copied.warnings
    assert _rows(tmp_path / "ds", "select (select count(*) from traces), (select count(*) from collectives)") == counts


def test_the_same_file_twice_in_one_run_is_added_once(tmp_path: Path) -> None:
    _captured("ddp_mlp", tmp_path / "a")
    _copy(tmp_path / "a" / "et_rank0.json.gz", tmp_path / "b" / "et_rank0.json.gz")
    report = ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "ds")
    assert (report.files_added, report.files_duplicate) == (8, 1)
    assert _rows(tmp_path / "ds", "select job_id from jobs") == [("a",)]


def test_host_and_device_archives_beside_other_archives_stay_apart(public_traces: Path, tmp_path: Path) -> None:
    for name in ("dlrm_pytorch_et.tar.gz", "dlrm_kineto.tar.gz"):
        _copy(public_traces / "param-dlrm-8rank" / name, tmp_path / "run" / name)
    with tarfile.open(tmp_path / "run" / "other.tgz", "w:gz") as tar:
        tar.add(public_traces / "astra-sim-microbenchmarks" / "all_reduce" / "all_reduce.0.et", "all_reduce.0.et")
    ingest([tmp_path / "run"], tmp_path / "ds")
    assert [j for (j,) in _rows(tmp_path / "ds", "select job_id from jobs order by 1")] == [
        "dlrm_kineto",
        "dlrm_pytorch_et",
        "other",
    ]


# --- honest re-runs ----------------------------------------------------------------------------


def test_a_missing_path_is_an_error_each_time_and_never_a_job(public_traces: Path, tmp_path: Path) -> None:
    good = public_traces / "hta-nccl-2gpu"
    for _ in range(2):
        report = ingest([tmp_path / "nope", good], tmp_path / "ds")
        assert report.errors == [f"{tmp_path / 'nope'}: no such file or folder"]
    assert _rows(tmp_path / "ds", "select job_id from jobs") == [("hta-nccl-2gpu",)]
    with pytest.raises(InputError, match="nothing to ingest: .*nope: no such file or folder"):
        ingest([tmp_path / "nope"], tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_a_junk_file_fails_every_run_until_fixed_and_then_replaces_its_error_row(
    public_traces: Path, tmp_path: Path
) -> None:
    junk = tmp_path / "in" / "x.json"
    junk.parent.mkdir()
    junk.write_text('{"hello": "world"}')
    for _ in range(2):
        report = ingest([tmp_path / "in"], tmp_path / "ds")
        assert len(report.errors) == 1 and "x.json" in report.errors[0]
    junk.write_bytes(gzip.decompress((public_traces / "hta-nccl-2gpu" / "nccl_data.json.gz").read_bytes()))
    fixed = ingest([tmp_path / "in"], tmp_path / "ds")
    assert fixed.ok and fixed.files_added == 1
    assert _rows(tmp_path / "ds", "select path, status, rank from traces") == [(str(junk), "ok", 0)]


def test_an_empty_folder_is_nothing_to_ingest(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="nothing to ingest: no trace files under"):
        ingest([tmp_path / "empty"], tmp_path / "ds")
    assert not (tmp_path / "ds").exists()


def test_a_manifest_row_pointing_nowhere_is_reported(public_traces: Path, tmp_path: Path) -> None:
    _copy(public_traces / "hta-nccl-2gpu" / "nccl_data.json.gz", tmp_path / "f" / "hta" / "nccl_data.json.gz")
    manifest = tmp_path / "f" / "tracekit_manifest.csv"
    manifest.write_text("job_id,path,label\nresnet,hta,resnet50\nghost,missing-run,\n")
    report = ingest([tmp_path / "f"], tmp_path / "ds")
    assert report.warnings == [
        f"{manifest} line 3: {tmp_path / 'f' / 'missing-run'} does not exist; job ghost gets no files from it"
    ]
    assert _rows(tmp_path / "ds", "select job_id, label from jobs") == [("resnet", "resnet50")]
