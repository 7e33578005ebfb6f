"""Every output of a replay, on real jobs, passes the simulator-input checkers of ../shared/simcheck."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl
import pytest

from tests.cli.test_cli import DUCKDB
from tests.replay.conftest import CAPTURED_JOBS
from tracekit.replay import Placement, replay, write_outputs
from tracekit.store.queries import load_query, query_header, query_names

ALL = ["flows", "hpcc", "htsim", "chakra"]


def check_htsim(out: Path, simcheck: dict[str, ModuleType], binary: str = "uec") -> Any:
    """simcheck's htsim checker on OUT/htsim, with the -topo file's node count when one was written."""
    text = (out / "htsim" / "traffic.cm").read_text()
    if (out / "htsim" / "topology.topo").is_file():
        nodes = int(next(line for line in text.splitlines() if line.startswith("Nodes ")).split()[1])
        cm = simcheck["htsim_cm"].check_text(text, binary=binary, topo_nodes=nodes)
    else:
        cm = simcheck["htsim_cm"].check_text(text, binary=binary, tiers=3)
    assert cm.ok and not cm.issues, [str(i) for i in cm.issues]
    return cm


def check_all(out: Path, world: int, simcheck: dict[str, ModuleType], binary: str = "uec") -> dict[str, int]:
    """Run every checker on OUT; assert no error, and no warning but simcheck's reminder that config.txt
    must map the 400 Gb/s rate (OUT/hpcc/config.txt does); return what each saw."""
    hpcc, astra = simcheck["hpcc_flow"], simcheck["astra_et"]
    topology, topo_issues = hpcc.check_topology_text((out / "hpcc" / "topology.txt").read_text())
    assert not [i for i in topo_issues if "KMAX_MAP" not in str(i)], [str(i) for i in topo_issues]
    flows = hpcc.check_text((out / "hpcc" / "flow.txt").read_text(), topo=topology, stop_time=1e3)
    assert flows.ok and not flows.issues, [str(i) for i in flows.issues]
    config = (out / "hpcc" / "config.txt").read_text()
    assert "KMAX_MAP" in config and "400000000000" in config
    cm = check_htsim(out, simcheck, binary)
    groups = json.loads((out / "astra" / "comm_groups.json").read_text())
    et = astra.check_prefix(str(out / "astra" / "workload"), npus=world, comm_groups=groups)
    assert et.ok, [str(i) for i in et.issues]
    # The only warnings allowed: BROADCAST, which ASTRA-sim replays but does not simulate, is never
    # written as a collective (sends/recvs instead), so there should be none at all.
    assert not et.issues, [str(i) for i in et.issues]
    return {
        "hpcc": len(flows.flows),
        "htsim": len(cm.conns),
        "astra_nodes": sum(len(t.nodes) for t in et.ranks.values()),
    }


def test_dlrm_produces_every_output_and_passes_simcheck(
    dlrm_dataset: Path, tmp_path: Path, simcheck: dict[str, ModuleType]
) -> None:
    for placement, network in ((Placement(), False), (Placement(gpus_per_host=2), True)):
        result = replay(dlrm_dataset, "dlrm", placement=placement)
        out = tmp_path / f"dlrm-{placement.gpus_per_host}"
        write_outputs(result, out, ALL)
        seen = check_all(out, 8, simcheck)
        inter = result.flows.filter(pl.col("link") == "network").height
        assert seen["hpcc"] >= inter and (seen["hpcc"] > 0) == network
        assert seen["htsim"] == seen["hpcc"]
        assert seen["astra_nodes"] > 0


@pytest.mark.parametrize("job", CAPTURED_JOBS)
@pytest.mark.parametrize("gpus_per_host", [1, 8])
def test_each_captured_job_produces_every_output_and_passes_simcheck(
    captured_dataset: Path, tmp_path: Path, simcheck: dict[str, ModuleType], job: str, gpus_per_host: int
) -> None:
    result = replay(captured_dataset, job, placement=Placement(gpus_per_host=gpus_per_host))
    assert result.flows.height > 0
    write_outputs(result, tmp_path, ALL)
    seen = check_all(tmp_path, 4, simcheck)
    if gpus_per_host == 1:
        assert seen["hpcc"] == result.flows.height
    for name in ("flows", "collectives", "matrix_gpu", "matrix_host", "matrix_rack", "indicators", "burstiness"):
        assert (tmp_path / f"{name}.parquet").is_file()


def test_htsim_eqds_writes_picoseconds_and_its_run_command(
    captured_dataset: Path, tmp_path: Path, simcheck: dict
) -> None:
    result = replay(captured_dataset, "ddp_mlp", placement=Placement(gpus_per_host=1))
    write_outputs(result, tmp_path, ["htsim"], htsim_binary="eqds")
    text = (tmp_path / "htsim" / "traffic.cm").read_text()
    assert "picoseconds for htsim_eqds" in text and "-linkspeed 400000" in text
    check_htsim(tmp_path, simcheck, "eqds")
    run = (tmp_path / "htsim" / "run.sh").read_text()
    assert 'bin/htsim_eqds" -tm traffic.cm -topo topology.topo -linkspeed 400000 -end' in run


def test_hpcc_flows_are_sorted_by_start_and_ranks_are_hosts(captured_dataset: Path, tmp_path: Path) -> None:
    result = replay(captured_dataset, "moe_alltoall", placement=Placement(gpus_per_host=1))
    write_outputs(result, tmp_path, ["hpcc"])
    lines = (tmp_path / "hpcc" / "flow.txt").read_text().splitlines()
    assert int(lines[0]) == len(lines) - 1
    starts = [float(line.split()[5]) for line in lines[1:]]
    assert starts == sorted(starts) and starts[0] == 0.0
    fields = [line.split() for line in lines[1:]]
    assert all(f[2] == "3" and f[3] == "100" and int(f[0]) < 4 and int(f[1]) < 4 for f in fields)  # NIC ids
    total = sum(int(f[4]) for f in fields)
    assert total == result.flows.filter(pl.col("link") == "network")["bytes"].sum()


def test_flows_csv_and_the_duckdb_views(captured_dataset: Path, tmp_path: Path) -> None:
    result = replay(captured_dataset, "moe_alltoall", placement=Placement(gpus_per_host=2))
    write_outputs(result, tmp_path, ["flows"], csv=True)
    csv = pl.read_csv(tmp_path / "flows.csv")
    assert csv.height == result.flows.height and "depends_on" in csv.columns
    matrix = pl.read_parquet(tmp_path / "matrix_host.parquet")
    assert set(matrix["scope"]) == {"intra_host", "inter_host"}
    assert matrix["bytes"].sum() == result.flows["bytes"].sum()
    meta = json.loads((tmp_path / "replay.json").read_text())
    assert meta["job"] == "moe_alltoall" and meta["placement"]["gpus_per_host"] == 2
    assert meta["link_speeds"]["nic_gbps"] == 400


# Rows only where the job has NCCL Inspector's proxy records: its shell run is in tests/replay/test_observed.py.
NEEDS_OBSERVED = {"observed_vs_replay"}


@pytest.mark.parametrize("name", query_names("replay"))
def test_replay_queries_have_a_header_and_run_in_the_duckdb_shell(
    captured_dataset: Path, tmp_path: Path, name: str
) -> None:
    header = query_header(name, "replay")
    assert header["name"] == name and header["answers"] and header["returns"] and "params" in header
    assert "read_parquet" not in load_query(name, "replay")
    result = replay(captured_dataset, "ddp_mlp", placement=Placement(gpus_per_host=2))
    write_outputs(result, tmp_path, ["flows"])
    if DUCKDB is None:
        pytest.skip("the duckdb shell (pip install duckdb-cli) is not installed")
    shell = subprocess.run(
        [DUCKDB, "-csv", "-noheader", str(tmp_path / "replay.duckdb"), "-c", f"select count(*) from {name}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shell.returncode == 0, shell.stderr
    assert int(shell.stdout.strip()) > 0 or name in NEEDS_OBSERVED


def test_the_host_matrix_query_and_the_python_matrix_agree(captured_dataset: Path, tmp_path: Path) -> None:
    import duckdb

    from tracekit.replay import host_matrix

    result = replay(captured_dataset, "ddp_mlp", placement=Placement(gpus_per_host=1))
    write_outputs(result, tmp_path, ["flows"])
    with duckdb.connect(str(tmp_path / "replay.duckdb"), read_only=True) as con:
        sql = con.sql("select src_host, dst_host, bytes from traffic_matrix_host where scope = 'inter_host'").pl()
    python = host_matrix(result).select("src_host", "dst_host", "bytes")
    assert sql.sort("src_host", "dst_host").equals(python.sort("src_host", "dst_host"))


def test_the_simulator_files_are_the_same_on_every_run(captured_dataset: Path, tmp_path: Path) -> None:
    for run in ("a", "b"):
        result = replay(captured_dataset, "pipeline_p2p", placement=Placement(gpus_per_host=1))
        write_outputs(result, tmp_path / run, ["hpcc", "htsim", "chakra"])
    for name in (
        "hpcc/flow.txt",
        "hpcc/topology.txt",
        "hpcc/config.txt",
        "htsim/traffic.cm",
        "htsim/topology.topo",
        "astra/workload.0.et",
        "astra/workload.3.et",
    ):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_out_is_replaced_whole_and_never_a_folder_of_other_files(captured_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = replay(captured_dataset, "moe_alltoall", placement=Placement(gpus_per_host=1))
    write_outputs(first, out, ["hpcc", "htsim", "chakra"])
    assert (out / "astra" / "workload.3.et").is_file()
    second = replay(captured_dataset, "ddp_mlp", placement=Placement(gpus_per_host=1))
    write_outputs(second, out, ["flows"])
    assert not (out / "astra").exists() and not (out / "hpcc").exists()  # nothing of the earlier job is left
    assert json.loads((out / "replay.json").read_text())["job"] == "ddp_mlp"
    assert any("earlier replay" in note for note in second.notes)
    assert not list(tmp_path.glob(".out.tracekit-*"))  # no staging folder left behind
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    from tracekit.errors import InputError

    with pytest.raises(InputError, match="other files"):
        write_outputs(second, other, ["flows"])
    assert (other / "notes.txt").read_text() == "mine"
