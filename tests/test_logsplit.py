"""tracekit split-log: an interleaved NCCL INFO log becomes one file per process, which ingest as a
job of every rank (the log ingested whole gives its lowest rank)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

import tracekit
from tests.conftest import cli
from tracekit.ingest import ingest
from tracekit.logsplit import MAX_OPEN, file_name, split_log

INTERLEAVED = Path(__file__).parent / "parsers" / "nccl_log" / "interleaved" / "node-a.nccl.log"


def _collectives(dataset: Path) -> list[tuple[object, ...]]:
    with tracekit.open(dataset) as ds:
        return ds.sql("select rank, comm_type, in_bytes, seq from collectives order by all").fetchall()


def test_an_interleaved_log_split_ingests_every_rank(tmp_path: Path) -> None:
    done = split_log([INTERLEAVED], tmp_path / "split")
    assert sorted(done.lines) == ["node-a-pid4101.nccl.log", "node-a-pid4102.nccl.log"]
    assert sum(done.lines.values()) + done.other_lines == len(INTERLEAVED.read_bytes().splitlines())
    assert done.other_lines == 1 and not done.errors  # the launcher's `NCCL version` line
    for name in done.lines:  # every line of a file is its process's, in the log's order
        pid = name.split("-pid")[1].split(".")[0]
        lines = (tmp_path / "split" / name).read_text().splitlines()
        assert lines and all(line.startswith(f"node-a:{pid}:") for line in lines)
    assert ingest([tmp_path / "split"], tmp_path / "ds").ok
    assert ingest([INTERLEAVED.parent], tmp_path / "whole").ok
    split_rows, whole_rows = _collectives(tmp_path / "ds"), _collectives(tmp_path / "whole")
    assert {r[0] for r in split_rows} == {0, 1} and {r[0] for r in whole_rows} == {0}
    assert [r for r in split_rows if r[0] == 0] == whole_rows  # rank 0 the same either way
    assert len(split_rows) == 2 * len(whole_rows)


def test_the_command_prints_what_it_wrote_and_bad_logs_are_one_line_each(tmp_path: Path) -> None:
    (tmp_path / "junk.log").write_text("no nccl here\n")
    done = cli("split-log", INTERLEAVED, tmp_path / "junk.log", "-o", tmp_path / "out")
    assert done.returncode == 1
    assert "1 log: 27 lines of 2 processes" in done.stdout
    assert f"error: {tmp_path / 'junk.log'}: no NCCL line" in done.stderr
    assert len(list((tmp_path / "out").iterdir())) == 2
    again = cli("split-log", INTERLEAVED, "-o", tmp_path / "out")  # a second run never writes over the first
    assert again.returncode == 2 and "exists and is not an empty folder" in again.stderr
    missing = cli("split-log", tmp_path / "nope.log", "-o", tmp_path / "new")
    assert missing.returncode == 2 and "nope.log: no such file" in missing.stderr
    assert not (tmp_path / "new").exists()
    folder = cli("split-log", tmp_path, "-o", tmp_path / "new")
    assert folder.returncode == 2 and "is a folder: name its log files" in folder.stderr
    nothing = cli("split-log", tmp_path / "junk.log", "-o", tmp_path / "new")
    assert nothing.returncode == 2 and not (tmp_path / "new").exists()
    assert not [p for p in tmp_path.iterdir() if ".split-" in p.name]  # no work folder left behind


def test_a_gzip_log_long_lines_and_many_processes(tmp_path: Path) -> None:
    processes = MAX_OPEN + 10  # more than are kept open at once
    long_tail = "x" * (3 << 16)
    lines = [f"h{p % 3}:{p}:{p} [0] NCCL INFO line {i} {long_tail if i == 1 else ''}\n" for i in range(3)
             for p in range(processes)]  # fmt: skip
    log = tmp_path / "run.nccl.log.gz"
    log.write_bytes(gzip.compress("".join(lines).encode()))
    done = split_log([log], tmp_path / "out")
    assert len(done.lines) == processes and set(done.lines.values()) == {3}
    text = (tmp_path / "out" / file_name("h1", "4")).read_text()
    assert text == "".join(line for line in lines if line.startswith("h1:4:"))  # a long line kept whole


@pytest.mark.parametrize(
    ("host", "expected"), [("node-a", "node-a-pid7.nccl.log"), ("../../etc", ".._.._etc-pid7.nccl.log")]
)
def test_a_host_name_never_leaves_the_folder(host: str, expected: str) -> None:
    assert file_name(host, "7") == expected and "/" not in file_name(host, "7")
