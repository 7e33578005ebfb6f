"""`tracekit replay` as users run it, on real captured traces (in this process: what it prints and exits with)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import cli as tracekit


def test_replay_writes_every_format(captured_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = tracekit(
        "replay", captured_dataset, "--job", "moe_alltoall", "--format", "all", "-o", out, "--gpus-per-host", "1"
    )
    assert done.returncode == 0, done.stderr
    assert "job moe_alltoall:" in done.stderr and "flows from 12 collectives" in done.stderr
    for name in ("flows.parquet", "replay.duckdb", "hpcc/flow.txt", "hpcc/topology.txt", "htsim/traffic.cm"):
        assert (out / name).is_file(), name
    assert sorted(p.name for p in (out / "astra").glob("workload.*.et")) == [f"workload.{r}.et" for r in range(4)]
    meta = json.loads((out / "replay.json").read_text())
    assert meta["formats"] == ["flows", "chakra", "hpcc", "htsim"] and meta["placement"]["gpus_per_host"] == 1
    assert pl.read_parquet(out / "flows.parquet").height == meta["flows"]


def test_replay_with_a_placement_file_an_algorithm_and_csv(captured_dataset: Path, tmp_path: Path) -> None:
    placement = tmp_path / "placement.json"
    placement.write_text('{"gpus_per_host": 2, "hosts_per_rack": 1}')
    done = tracekit(
        "replay", captured_dataset, "-j", "ddp_mlp", "-o", tmp_path / "o", "--placement", placement,
        "--algorithm", "halving-doubling", "--csv", "-q",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    flows = pl.read_csv(tmp_path / "o" / "flows.csv")
    assert set(flows.filter(pl.col("comm_type") == "ALL_REDUCE")["algorithm"]) == {"halving-doubling"}
    assert flows["src_host"].n_unique() == 2


def test_replay_errors_are_one_line_with_exit_code_2_or_3(captured_dataset: Path, tmp_path: Path) -> None:
    done = tracekit("replay", captured_dataset, "-o", tmp_path / "o")
    assert done.returncode == 2 and done.stderr.startswith("error: the dataset holds 4 jobs")
    bad = tmp_path / "p.json"
    bad.write_text('{"gpus": 1}')
    done = tracekit("replay", captured_dataset, "-j", "ddp_mlp", "-o", tmp_path / "o", "--placement", bad)
    assert done.returncode == 2 and "unknown placement key" in done.stderr
    done = tracekit("replay", tmp_path / "nothing", "-j", "x", "-o", tmp_path / "o")
    assert done.returncode == 3 and "not a tracekit dataset" in done.stderr


def test_replay_help_does_not_import_the_heavy_modules() -> None:
    code = (
        "import sys; from typer.testing import CliRunner; from tracekit.cli import app; "
        "r = CliRunner().invoke(app, ['replay', '--help']); assert r.exit_code == 0, r.output; "
        "print([m for m in ('duckdb', 'polars', 'pyarrow', 'numpy', 'altair') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_dataset_of_many_jobs_says_how_many_when_no_job_is_named(tmp_path: Path) -> None:
    from tests.builders import write_et_job
    from tracekit.errors import InputError
    from tracekit.ingest import ingest
    from tracekit.replay import replay

    for j in range(25):
        write_et_job(tmp_path / "in" / f"job{j:02d}", [0, 1], [("ALL_REDUCE", 1024)])
    assert ingest([tmp_path / "in"], tmp_path / "ds", workers=1).ok
    with pytest.raises(InputError, match=r"holds 25 jobs: name one with --job \(job00, .*job19, \.\.\.\)"):
        replay(tmp_path / "ds")


def test_in_network_reduction_as_users_switch_it_on(captured_dataset: Path, tmp_path: Path) -> None:
    # ddp_mlp's 4 ranks on one host of an NVSwitch: its all-reduces may run NVLS
    done = tracekit("replay", captured_dataset, "-j", "ddp_mlp", "-o", tmp_path / "o", "--gpus-per-host", "4",
                    "--in-network-reduction", "nvls", "--algorithm", "nvls")  # fmt: skip
    assert done.returncode == 0, done.stderr
    flows = pl.read_parquet(tmp_path / "o" / "flows.parquet")
    reduced = flows.filter(pl.col("comm_type") == "ALL_REDUCE")
    assert reduced.height and set(reduced["link"].cast(pl.String).unique().to_list()) == {"nvls"}
    meta = json.loads((tmp_path / "o" / "replay.json").read_text())
    assert meta["nccl"]["in_network"] == ["nvls"]
    refused = tracekit("replay", captured_dataset, "-j", "ddp_mlp", "-o", tmp_path / "h", "--gpus-per-host", "4",
                       "--algorithm", "nvls", "--format", "htsim")  # fmt: skip
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "htsim cannot express" in refused.stderr and not (tmp_path / "h").exists()
    bad = tracekit("replay", captured_dataset, "-j", "ddp_mlp", "-o", tmp_path / "b", "--in-network-reduction", "x")
    assert bad.returncode == 2 and "nvls" in bad.stderr


def test_the_in_network_choices_are_the_options() -> None:
    from tracekit.cli import InNetwork
    from tracekit.replay.nccl.options import IN_NETWORK

    assert tuple(r.value for r in InNetwork) == IN_NETWORK


def test_the_formats_are_the_emitters() -> None:
    from tracekit.replay.emitters import emitters
    from tracekit.replay.outputs import FORMATS

    assert FORMATS == ("flows", *emitters())
    assert {e.folder for e in emitters().values()} == {"hpcc", "htsim", "astra"}
