"""Job ids: unique in a dataset, kept by the place they came from, never silently shared."""

from __future__ import annotations

from tracekit.ingest.discover import ARCHIVE, EXPLICIT, MANIFEST, JobInfo
from tracekit.ingest.identity import JobIds


def test_a_place_the_dataset_holds_keeps_its_job_from_any_level() -> None:
    ids = JobIds([("chakra/ddp_mlp", "/d/samples/chakra/ddp_mlp")])
    assert ids.assign(JobInfo("ddp_mlp", "/d/samples/chakra/ddp_mlp")).job_id == "chakra/ddp_mlp"
    assert ids.assign(JobInfo("chakra/ddp_mlp", "/d/samples/chakra/ddp_mlp")).job_id == "chakra/ddp_mlp"
    assert ids.kept_apart == []


def test_an_id_held_by_another_place_is_kept_apart_under_the_folders_above() -> None:
    ids = JobIds([("run1", "/data/week1/run1")])
    assert ids.assign(JobInfo("run1", "/data/week2/run1")).job_id == "week2/run1"
    # The same place again in the run: the same id, one warning.
    assert ids.assign(JobInfo("run1", "/data/week2/run1")).job_id == "week2/run1"
    assert len(ids.warnings()) == 1 and "kept apart as job week2/run1" in ids.warnings()[0]
    # In a later run, the dataset now holding both, each place finds its own job.
    later = JobIds([("run1", "/data/week1/run1"), ("week2/run1", "/data/week2/run1")])
    assert later.assign(JobInfo("run1", "/data/week2/run1")).job_id == "week2/run1"
    assert later.assign(JobInfo("run1", "/data/week1/run1")).job_id == "run1"


def test_a_second_fleet_manifest_gets_its_folder_as_prefix() -> None:
    ids = JobIds([("job-000000", "/f/fleetA/tracekit_manifest.csv")])
    job = JobInfo("job-000000", "/f/fleetB/tracekit_manifest.csv", kind=MANIFEST)
    assert ids.assign(job).job_id == "fleetB/job-000000"
    assert ids.warnings() == [
        "/f/fleetB/tracekit_manifest.csv: 1 job id(s) already in the dataset from another place (job-000000) "
        "are kept apart as fleetB/job-000000; to choose the ids, edit the manifest's job_id column"
    ]


def test_when_every_folder_name_is_taken_a_number_keeps_jobs_apart() -> None:
    ids = JobIds([("run", "/a/run"), ("b/run", "/x/b/run")])
    assert ids.assign(JobInfo("run", "/b/run")).job_id == "run~2"
    assert JobIds([("run~2", "/b/run")]).assign(JobInfo("run", "/b/run")).job_id == "run~2"


def test_an_archive_is_qualified_by_the_folder_holding_it() -> None:
    ids = JobIds([("dlrm", "/a/dlrm.tgz")])
    assert ids.assign(JobInfo("dlrm", "/b/runs/dlrm.tgz", kind=ARCHIVE)).job_id == "runs/dlrm"


def test_job_option_is_the_users_choice() -> None:
    ids = JobIds([("mine", "/a")])
    assert ids.assign(JobInfo("mine", "/b", kind=EXPLICIT)).job_id == "mine"
    assert ids.kept_apart == []
