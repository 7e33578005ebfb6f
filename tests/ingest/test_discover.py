"""Which files ingest finds, and the job each one lands in."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Literal

import pytest

from tracekit.errors import InputError
from tracekit.ingest.discover import discover, read_manifest, with_data
from tracekit.ingest.worker import rank_from_name


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_each_folder_is_a_job_named_by_its_path_below_the_root(tmp_path: Path) -> None:
    _touch(tmp_path / "fleet" / "a" / "w.0.et")
    _touch(tmp_path / "fleet" / "a" / "w.1.et")
    _touch(tmp_path / "fleet" / "b" / "deep" / "w.0.et")
    _touch(tmp_path / "fleet" / "top.0.et")
    _touch(tmp_path / "fleet" / "README.md")  # not a trace name: skipped when walking folders
    jobs = sorted((f.job.job_id, f.name) for f in discover([tmp_path / "fleet"]).files)
    assert jobs == [("a", "w.0.et"), ("a", "w.1.et"), ("b/deep", "w.0.et"), ("fleet", "top.0.et")]


def test_job_option_puts_everything_in_one_job(tmp_path: Path) -> None:
    _touch(tmp_path / "a" / "x.0.et")
    _touch(tmp_path / "b" / "x.1.et")
    assert {f.job.job_id for f in discover([tmp_path], job="one", label="llama").files} == {"one"}
    assert {f.job.label for f in discover([tmp_path], job="one", label="llama").files} == {"llama"}


def _tar(path: Path, members: dict[str, bytes], mode: Literal["w:gz", "w"] = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_archive_is_one_job_listed_first_and_read_in_memory_when_parsed(tmp_path: Path) -> None:
    _tar(tmp_path / "run7.tgz", {"run7/t.0.et": b"a", "run7/t.1.et": b"b", "run7/notes.txt": b"n"})
    found = discover([tmp_path]).files
    # Discovery lists the members (the progress bar knows the total) without keeping their bytes.
    assert [(f.job.job_id, f.name, f.member, f.data) for f in found] == [
        ("run7", "t.0.et", "run7/t.0.et", None),
        ("run7", "t.1.et", "run7/t.1.et", None),
    ]
    assert found[0].display.endswith("run7.tgz!run7/t.0.et")
    handed = [(f.name, f.data) for f in with_data(found)]
    assert handed == [("t.0.et", b"a"), ("t.1.et", b"b")]
    assert [f.data for f in found] == [None, None]  # released once handed over


def test_members_asked_out_of_order_are_still_read(tmp_path: Path) -> None:
    _tar(tmp_path / "r.tgz", {"r/t.0.et": b"a", "r/t.1.et": b"b"})
    found = discover([tmp_path / "r.tgz"]).files
    assert [f.data for f in with_data(reversed(found))] == [b"b", b"a"]


def test_unsafe_archive_members_are_refused_and_never_written(tmp_path: Path) -> None:
    _tar(tmp_path / "evil.tar", {"../escape.0.et": b"a", "/abs/x.1.et": b"b", "ok/t.2.et": b"c"}, mode="w")
    before = set(tmp_path.parent.rglob("*"))
    found = {f.name: f for f in discover([tmp_path / "evil.tar"]).files}
    assert "absolute or '..' path" in (found["escape.0.et"].error or "")
    assert "absolute or '..' path" in (found["x.1.et"].error or "")
    assert found["t.2.et"].error is None and [f.data for f in with_data([found["t.2.et"]])] == [b"c"]
    assert set(tmp_path.parent.rglob("*")) == before


def test_truncated_archive_is_an_error_not_a_crash(tmp_path: Path) -> None:
    whole = _tar(tmp_path / "w.tgz", {"w/t.0.et": b"a" * 100_000}).read_bytes()
    (tmp_path / "cut.tgz").write_bytes(whole[: len(whole) // 2])
    errors = [f.error for f in discover([tmp_path / "cut.tgz"]).files if f.error]
    assert errors and "cut.tgz" in errors[0]


def test_manifest_maps_files_and_folders_to_jobs(tmp_path: Path) -> None:
    _touch(tmp_path / "f" / "j1" / "r.0.et")
    _touch(tmp_path / "f" / "j1" / "r.1.et")
    _touch(tmp_path / "f" / "loose.0.et")
    (tmp_path / "f" / "tracekit_manifest.csv").write_text(
        "job_id,path,label,started_at\njobA,j1,llama3-8b,2024-03-01T10:00:00\njobB,loose.0.et,,\n"
    )
    found = {f.name: f.job for f in discover([tmp_path / "f"]).files}
    assert found["r.0.et"].job_id == "jobA" and found["r.0.et"].label == "llama3-8b"
    assert found["r.0.et"].started_at is not None and found["r.0.et"].started_at.year == 2024
    assert found["loose.0.et"].job_id == "jobB"


def test_files_carry_their_sizes_from_the_listing_with_or_without_a_manifest(tmp_path: Path) -> None:
    """The ingest process batches files by size: discovery learns it from the folder listing, so a
    fleet's million files are not asked one by one (a fleet with a manifest was, before)."""
    _touch(tmp_path / "f" / "j1" / "r.0.et", b"x" * 5)
    _touch(tmp_path / "f" / "j2" / "r.0.et", b"x" * 7)
    (tmp_path / "f" / "tracekit_manifest.csv").write_text("job_id,path,label,started_at\njobA,j1,,\n")
    sizes = {f.job.job_id: f.size for f in discover([tmp_path / "f"]).files}
    assert sizes == {"jobA": 5, "j2": 7}


def test_manifest_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "m.csv"
    bad.write_text("job_id,path,started_at\nj,x.et,yesterday\n")
    with pytest.raises(ValueError, match=r"m.csv line 2.*yesterday"):
        read_manifest(bad)


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("all_reduce.3.et", 3),
        ("workload.12.et.gz", 12),
        ("dlrm_eg_5.json", 5),
        ("rank-2.Apr_03_18_51_38.1102.pt.trace.json.gz", 2),
        ("kineto_rank7.json.gz", 7),
        ("worker4_step_12.1694128201547.pt.trace.json", 4),
        ("resnet_2gpu_et.json.gz", None),
        ("trace.1694128201547.json", None),
        ("job-000012.3.et", 3),
        # Versions, dates and steps are not ranks.
        ("et-torch-2.1.0.json", None),
        ("llama.v3.1.json", None),
        ("trace_step.100.json", None),
        ("run_iter_7.json", None),
        ("trace-2024-03-01.json", None),
    ],
)
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert rank_from_name(name) == rank


def test_a_manifest_deeper_in_the_tree_applies_below_its_folder(tmp_path: Path) -> None:
    _touch(tmp_path / "samples" / "real" / "j" / "r.0.et")
    _touch(tmp_path / "samples" / "fleet" / "job-1" / "r.0.et")
    (tmp_path / "samples" / "fleet" / "tracekit_manifest.csv").write_text("job_id,path,label\nfleet-1,job-1,dlrm\n")
    found = {str(f.display).split("samples/")[1]: f.job for f in discover([tmp_path / "samples"]).files}
    assert found["real/j/r.0.et"].job_id == "real/j"
    assert (found["fleet/job-1/r.0.et"].job_id, found["fleet/job-1/r.0.et"].label) == ("fleet-1", "dlrm")


def test_a_path_that_does_not_exist_is_an_error_not_a_job(tmp_path: Path) -> None:
    _touch(tmp_path / "j" / "w.0.et")
    found = discover([tmp_path / "nope", tmp_path / "j"])
    assert found.errors == [f"{tmp_path / 'nope'}: no such file or folder"]
    assert [f.job.job_id for f in found.files] == ["j"]


def test_a_path_given_twice_is_read_once(tmp_path: Path) -> None:
    _touch(tmp_path / "j" / "w.0.et")
    found = discover([tmp_path / "j", tmp_path / "j" / "w.0.et", tmp_path / "j"])
    assert [f.name for f in found.files] == ["w.0.et"]


def test_a_missing_manifest_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="nofile.csv: no such manifest file") as raised:
        discover([tmp_path], manifest=tmp_path / "nofile.csv")
    assert raised.value.exit_code == 2


def test_every_manifest_row_that_matches_nothing_is_reported(tmp_path: Path) -> None:
    _touch(tmp_path / "f" / "j1" / "r.0.et")
    _touch(tmp_path / "f" / "empty" / "README.md")
    (tmp_path / "f" / "tracekit_manifest.csv").write_text("job_id,path\njobA,j1\njobB,gone\njobC,empty\n")
    found = discover([tmp_path / "f"])
    assert [f.job.job_id for f in found.files] == ["jobA"]
    manifest = tmp_path / "f" / "tracekit_manifest.csv"
    assert found.warnings == [
        f"{manifest} line 3: {tmp_path / 'f' / 'gone'} does not exist; job jobB gets no files from it",
        f"{manifest} line 4: {tmp_path / 'f' / 'empty'} holds no trace file; job jobC gets none",
    ]
