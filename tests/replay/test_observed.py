"""`tracekit replay --compare-observed`: the replay's network bytes beside NCCL Inspector's proxy
records (tests/replay/observed/: a 4-rank ring all-reduce on 2 hosts, 2 channels, as NCCL sends it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import duckdb
import polars as pl
import pytest

from tests.conftest import DUCKDB
from tests.conftest import cli as tracekit
from tracekit.ingest import ingest
from tracekit.replay import NcclOptions, Placement, replay
from tracekit.replay.observed import agreement, compare

RING = Path(__file__).parent / "observed" / "ring_2x2"
INSPECTOR_V40 = Path(__file__).parents[1] / "parsers" / "nccl_inspector" / "v4_0"
TWO_HOSTS = ("--gpus-per-host", "2", "--nics-per-host", "1")


@pytest.fixture(scope="module")
def ring_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("observed") / "ds"
    assert ingest([RING], out, workers=1).ok
    return out


def _replay(dataset: Path, channels: int) -> pl.DataFrame:
    result = replay(dataset, placement=Placement(gpus_per_host=2, nics_per_host=1),
                    options=NcclOptions(channels=channels, protocol="Simple"))  # fmt: skip
    return compare(result)


def test_the_replay_of_nccl_s_channels_agrees_with_what_its_proxies_observed(ring_dataset: Path) -> None:
    table = _replay(ring_dataset, channels=2)
    # 2 all-reduces x 2 network hops (1 -> 2, 3 -> 0) x 2 channels, each seen by its sender and its receiver
    assert table.height == 16
    assert table["observed_bytes"].to_list() == table["replay_bytes"].to_list()
    per_channel = dict(zip(table["seq"], table["observed_bytes"], strict=True))
    assert per_channel == {1: 48 << 20, 2: 12 << 20}  # 2 (n-1)/n x S / channels
    assert set(zip(table["rank"], table["direction"], table["peer"], strict=True)) == {
        (1, "send", 2), (2, "recv", 1), (3, "send", 0), (0, "recv", 3),
    }  # fmt: skip


def test_a_changed_channel_model_shows_as_the_difference(ring_dataset: Path) -> None:
    table = _replay(ring_dataset, channels=4)
    assert table.height == 32  # the replay's channels 2 and 3 carry what NCCL never sent on them
    extra = table.filter(pl.col("channel") >= 2)
    assert extra["observed_bytes"].to_list() == [0] * 16 and extra["relative_difference"].is_null().all()
    halved = table.filter(pl.col("channel") < 2)
    assert halved["relative_difference"].to_list() == [-0.5] * 16
    assert table["observed_bytes"].sum() == table["replay_bytes"].sum()  # same bytes, other channels


def test_the_command_prints_the_agreement_and_the_largest_differences(ring_dataset: Path, tmp_path: Path) -> None:
    done = tracekit("replay", ring_dataset, "-o", tmp_path / "a", *TWO_HOSTS, "--channels", "2", "--compare-observed")
    assert done.returncode == 0, done.stderr
    assert "16 observed transfers of 2 operations, 503,316,480 bytes" in done.stderr
    assert "16 of 16 (operation, rank, direction, peer, channel) agree within 1%" in done.stderr
    done = tracekit(
        "replay", ring_dataset, "-o", tmp_path / "b", *TWO_HOSTS, "--channels", "4", "--compare-observed", "-q"
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert "0 of 32 (operation, rank, direction, peer, channel) agree" in lines[0]
    assert "AllReduce #1 on 0x5f0c2a9e13b4d687: rank 0 recv from 3 channel 0: observed 50,331,648, replay " in lines[1]
    assert len(lines) == 6  # the totals and the 5 largest differences
    written = pl.read_parquet(tmp_path / "b" / "observed_vs_replay.parquet")
    assert written.height == 32


def test_the_comparison_is_a_view_of_the_replay_database(ring_dataset: Path, tmp_path: Path) -> None:
    assert tracekit("replay", ring_dataset, "-o", tmp_path / "o", *TWO_HOSTS, "--channels", "2", "-q").returncode == 0
    if DUCKDB is None:
        pytest.skip("the duckdb shell (pip install duckdb-cli) is not installed")
    sql = (
        "select count(*), sum(observed_bytes) = sum(replay_bytes) from observed_vs_replay; "
        "select count(*) from observed"
    )
    shell = subprocess.run([DUCKDB, "-csv", "-noheader", str(tmp_path / "o" / "replay.duckdb"), "-c", sql],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split() == ["16,true", "16"]


def test_a_job_without_observed_transfers_is_one_line_and_exit_2(tmp_path: Path) -> None:
    assert ingest([INSPECTOR_V40], tmp_path / "ds", workers=1).ok
    done = tracekit("replay", tmp_path / "ds", "-o", tmp_path / "o", "--compare-observed")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: job v4_0: no observed transfers to compare with: NCCL Inspector files of format v4.3+ written with "
        "NCCL_INSPECTOR_ENABLE_PROXY=1 give them (table observed_transfers)"
    ]
    assert not (tmp_path / "o").exists()
    # without the option the replay stands, its observed table empty
    assert tracekit("replay", tmp_path / "ds", "-o", tmp_path / "o", "-q").returncode == 0
    with duckdb.connect(str(tmp_path / "o" / "replay.duckdb"), read_only=True) as con:
        assert con.sql("select count(*) from observed_vs_replay").fetchall() == [(0,)]
    assert not (tmp_path / "o" / "observed_vs_replay.parquet").exists()


def test_fleet_replay_refuses_the_comparison(ring_dataset: Path, tmp_path: Path) -> None:
    done = tracekit("replay", ring_dataset, "-o", tmp_path / "o", "--fleet", "--compare-observed")
    assert done.returncode == 2 and "--compare-observed compares one job" in done.stderr


def test_the_agreement_counts_records_of_no_operation(ring_dataset: Path) -> None:
    result = replay(ring_dataset, placement=Placement(gpus_per_host=2, nics_per_host=1),
                    options=NcclOptions(channels=2, protocol="Simple"))  # fmt: skip
    result.observed = result.observed.with_columns(pl.lit(None, pl.String).alias("parent_op"))
    table = compare(result)
    summary = agreement(result, table)
    assert (summary.unmatched, summary.cells, summary.operations) == (16, 0, 0)
    assert table["replay_bytes"].is_null().all()


def _tp_job(folder: Path, size: int = 8 << 20) -> None:
    """A 4-rank job (2 hosts of 2) whose only proxied collective is an all-reduce of `size` bytes on
    a 2-rank communicator of global ranks 1 and 2, one per host: its records name peers 0 and 1."""
    from tests.replay.observed.make_fixture import _line

    folder.mkdir(parents=True)
    hosts = {0: "node-a", 1: "node-a", 2: "node-b", 3: "node-b"}

    def marker(comm: str, name: str, rank: int, n: int, proxies: int, host: str, pid: int) -> dict[str, object]:
        return {"header": {"id": comm, "comm_name": name, "rank": rank, "n_ranks": n, "nnodes": 2},
                "metadata": {"inspector_output_format_version": "v4.3", "rec_mechanism": "nccl_profiler_interface",
                             "dump_timestamp_us": 1_000_000, "hostname": host, "pid": pid},
                "dump_stats": {"coll_records": 1, "proxy_records": proxies, "proxy_output_mode": "nested"}}  # fmt: skip

    def coll(sn: int, size: int) -> dict[str, object]:
        return {"coll_perf": {"coll": "AllReduce", "coll_algo": "RING", "coll_proto": "SIMPLE", "coll_sn": sn,
                              "coll_msg_size_bytes": size, "coll_exec_time_us": 100}}  # fmt: skip

    for rank, host in hosts.items():
        lines = [marker("0x1", "default_pg", rank, 4, 0, host, 100 + rank), coll(1, 1 << 20)]
        if rank in (1, 2):
            local = rank - 1
            proxies: list[dict[str, object]] = [
                {"proxy_trace": {"record_type": "proxy_op", "parent_type": "coll", "parent_sn": 1, "rank": local,
                                 "channel_id": channel, "peer": 1 - local, "direction": direction,
                                 "is_final": True, "trans_size_bytes": size // 2}}
                for channel in range(2) for direction in ("send", "recv")
            ]  # fmt: skip
            lines += [marker("0x2", "tp", local, 2, len(proxies), host, 100 + rank), coll(1, size), *proxies]
        (folder / f"{host}-pid{100 + rank}.log").write_text("".join(_line(r) + "\n" for r in lines))


def test_a_peer_named_by_its_rank_in_a_subcommunicator_is_compared_as_its_global_rank(tmp_path: Path) -> None:
    _tp_job(tmp_path / "tp")
    assert ingest([tmp_path / "tp"], tmp_path / "ds", workers=1).ok
    table = _replay(tmp_path / "ds", channels=2).filter(pl.col("pg_name") == "0x2")  # Inspector names it by id
    assert set(zip(table["rank"], table["direction"], table["peer"], strict=True)) == {
        (1, "send", 2), (1, "recv", 2), (2, "send", 1), (2, "recv", 1),
    }  # fmt: skip
    assert table.height == 8 and table["observed_bytes"].to_list() == table["replay_bytes"].to_list()


def _ring_recorded_as(tmp_path: Path, algo: str, proto: str) -> Path:
    """ring_2x2 with NCCL's recorded algorithm and protocol changed, ingested."""
    folder = tmp_path / "job"
    folder.mkdir()
    for path in RING.iterdir():
        text = path.read_text().replace('"coll_algo":"RING"', f'"coll_algo":"{algo}"')
        (folder / path.name).write_text(text.replace('"coll_proto":"SIMPLE"', f'"coll_proto":"{proto}"'))
    assert ingest([folder], tmp_path / "ds", workers=1).ok
    return tmp_path / "ds"


@pytest.mark.parametrize(("algo", "proto", "expected"), [("TREE", "LL128", ("tree", "LL128")),
                                                        ("RING", "LL", ("ring", "LL"))])  # fmt: skip
def test_the_observed_algorithm_replays_what_nccl_recorded_running(
    tmp_path: Path, algo: str, proto: str, expected: tuple[str, str]
) -> None:
    dataset = _ring_recorded_as(tmp_path, algo, proto)
    where = Placement(gpus_per_host=2, nics_per_host=1)
    observed = replay(dataset, placement=where, algorithm="observed")
    assert set(zip(observed.collectives["algorithm"], observed.collectives["protocol"], strict=True)) == {expected}
    assert observed.collectives["nccl_algorithm"].to_list() == [algo, algo]
    assert any("2 of 2 collectives replayed with the algorithm and protocol NCCL recorded" in n for n in observed.notes)
    model = replay(dataset, placement=where)  # NCCL's model picks its own, whatever was recorded
    assert set(model.collectives["algorithm"]) == {"ring"}


def test_an_algorithm_the_replay_lacks_or_none_recorded_is_the_models_choice(tmp_path: Path) -> None:
    dataset = _ring_recorded_as(tmp_path, "PAT", "SIMPLE")
    result = replay(dataset, placement=Placement(gpus_per_host=2, nics_per_host=1), algorithm="observed")
    assert set(result.collectives["algorithm"]) == {"ring"}
    assert any(
        "0 of 2 collectives" in n and "2 ran PAT, which the replay has no algorithm for" in n for n in result.notes
    )
    assert ingest([INSPECTOR_V40], tmp_path / "v40", workers=1).ok  # v4.0 records no algorithm
    v40 = replay(tmp_path / "v40", algorithm="observed")
    assert any(n.startswith("job v4_0: 0 of ") for n in v40.notes) and v40.flows.height
    assert tracekit("replay", tmp_path / "v40", "-o", tmp_path / "o", "--algorithm", "observed", "-q").returncode == 0


def test_a_repeated_observed_record_doubles_no_collective(tmp_path: Path) -> None:
    import tracekit
    from tracekit.replay.collectives import load_job

    dataset = _ring_recorded_as(tmp_path, "TREE", "SIMPLE")
    with duckdb.connect(str(dataset / "tracekit.duckdb")) as con:  # a damaged copy: every record twice
        con.execute("insert into observed_collectives select * from observed_collectives")
    with tracekit.open(dataset) as ds:
        matched = load_job(ds, "job")
    assert matched.participants.height == 8 and matched.rows_skipped == 0  # 2 all-reduces x 4 ranks, each once
    assert matched.collectives["nccl_algorithm"].to_list() == ["TREE", "TREE"]
