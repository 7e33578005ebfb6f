"""`tracekit whatif`: a job's collectives timed per fabric and routing, as a user runs it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tests.cli.test_cli import tracekit as run

JOB = ["-j", "moe_alltoall", "--gpus-per-host", "1"]  # 4 hosts: the all-to-all crosses the network


def test_the_table_names_every_fabric_and_routing_whole(captured_dataset: Path) -> None:
    done = run("whatif", captured_dataset, *JOB, "--fabric", "clos2-2to1", "--fabric", "dgx-h100-superpod",
               "--routing", "ecmp", "--routing", "spray")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stderr.splitlines()]
    rows = [cells for cells in lines if cells and cells[0] in ("clos2-2to1", "dgx-h100-superpod")]
    assert {(cells[0], cells[1], cells[2]) for cells in rows} == {
        (fabric, routing, kind)
        for fabric in ("clos2-2to1", "dgx-h100-superpod")
        for routing in ("ecmp", "spray")
        for kind in ("all", "ALL_REDUCE", "ALL_TO_ALL")
    }


@pytest.mark.parametrize("suffix", ["csv", "json", "parquet"])
def test_the_table_is_written_in_the_format_its_suffix_says(
    captured_dataset: Path, tmp_path: Path, suffix: str
) -> None:
    out = tmp_path / f"whatif.{suffix}"
    routings = ["--routing", "ecmp", "--routing", "pinned", "--routing", "spray"]
    done = run("whatif", captured_dataset, *JOB, "--fabric", "clos2-2to1", *routings, "-o", out, "-q")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    readers: dict[str, Callable[[Path], pl.DataFrame]] = {
        "csv": pl.read_csv,
        "json": pl.read_json,
        "parquet": pl.read_parquet,
    }
    table = readers[suffix](out)
    job = table.filter(pl.col("comm_type") == "all")
    assert set(job["routing"]) == {"ecmp", "pinned", "spray"}
    assert (job["slowdown"] >= 1.0 - 1e-9).all() and (job["time_s"] >= job["ideal_s"] * (1 - 1e-9)).all()
    by = dict(zip(job["routing"], job["slowdown"], strict=True))
    assert by["spray"] <= by["ecmp"] + 1e-9  # spraying spreads what ECMP hashes onto few uplinks


@pytest.mark.parametrize(
    "args,code,says",
    [
        (["--fabric", "no-such-fabric"], 2, "no-such-fabric"),
        (["--fabric", "clos2-2to1", "-o", "table.txt"], 2, "--format"),
        (["--fabric", "clos2-2to1", "-j", "no-such-job"], 2, "no-such-job"),
    ],
)
def test_bad_options_are_one_line_errors(captured_dataset: Path, tmp_path: Path, args: list[str], code: int,
                                         says: str) -> None:  # fmt: skip
    done = run("whatif", captured_dataset, *JOB, *args, cwd=tmp_path)
    assert done.returncode == code, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr and "Traceback" not in done.stderr


def test_a_missing_dataset_is_a_one_line_error(tmp_path: Path) -> None:
    done = run("whatif", tmp_path / "nope.dataset", *JOB, "--fabric", "clos2-2to1")
    assert done.returncode == 3 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "nope.dataset" in done.stderr


def test_each_collective_type_keeps_its_own_row(captured_dataset: Path, tmp_path: Path) -> None:
    # Found in the new-user pass: an FSDP job's 12 all-gathers and 6 reduce-scatters read as 18
    # all-gathers, because a ring reduce-scatter sends the same flows as a ring all-gather of the
    # same size and the two were timed, and counted, as one.
    out = tmp_path / "fsdp.csv"
    done = run("whatif", captured_dataset, "-j", "fsdp_mlp", "--gpus-per-host", "1", "--fabric", "clos2-2to1",
               "-o", out, "-q")  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = pl.read_csv(out)
    counts = dict(zip(table["comm_type"], table["collectives"], strict=True))
    with tracekit.open(captured_dataset) as ds:
        truth = dict(ds.sql("select comm_type, count(distinct op_id) from collectives where job_id = 'fsdp_mlp' "
                            "and rank = 0 group by 1").fetchall())  # fmt: skip
    assert counts == {"all": sum(truth.values()), **truth}


def test_no_submodule_shadows_a_function_of_the_package() -> None:
    # tracekit.replay.whatif (the module) replaced tracekit.replay.whatif (the function) on first import:
    # `from tracekit.replay import whatif` then gave a module (found in a full test run)
    import importlib
    import pkgutil
    import types

    import tracekit.replay as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"tracekit.replay.{info.name}")
    shadowed = [name for name in package.__all__ if isinstance(getattr(package, name), types.ModuleType)]
    assert not shadowed
