"""Rollups: the fleet queries read per-job rollups and give what they gave from every collectives row;
every run keeps the rollups in step for the jobs it touches."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import tracekit
from tests.builders import write_et_job
from tracekit.ingest import ingest
from tracekit.schema import ROLLUPS
from tracekit.store.queries import query_names, query_params, rollup_query

FROM_ROWS = Path(__file__).parents[1] / "queries_from_rows"
PARAMS = {"start": "2020-01-01", "period_months": 3}


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory, sample_traces_dir: Path) -> Path:
    out = tmp_path_factory.mktemp("rollups") / "ds"
    assert ingest([sample_traces_dir], out).ok
    return out


@pytest.fixture(scope="module")
def sample_traces_dir() -> Path:
    from tests.conftest import SAMPLE_TRACES

    return SAMPLE_TRACES


FROM_ROWS_QUERIES = ["job_class", *sorted(p.stem for p in FROM_ROWS.glob("*.sql"))]


def _job_class_from_rows() -> str:
    """The class rule over every collectives row: queries/rollups/job_classes.sql with the rollups it
    reads computed from `collectives` in the same statement."""
    rule = rollup_query("job_classes")
    assert rule.startswith("with ")
    inputs = ", ".join(f"{r} as ({rollup_query(r)})" for r in ROLLUPS if r != "job_classes")
    return f"with {inputs}, {rule.removeprefix('with ')} order by job_id"


def _from_rows(ds: tracekit.TraceDataset, name: str) -> pl.DataFrame:
    """The query as it was written over every collectives row (its dependencies too)."""
    con = ds.con
    for old in FROM_ROWS_QUERIES:
        if old == "job_class":
            body = _job_class_from_rows()
        else:
            text = (FROM_ROWS / f"{old}.sql").read_text()
            body = "\n".join(x for x in text.splitlines() if not x.startswith("--")).strip().rstrip(";")
        body = body.replace("job_class", "rows_job_class")
        params = query_params(old)
        if params:
            for p in params:
                body = body.replace(f"${p}", f"param_{p}")
            args = ", ".join(f"param_{p}" for p in params)
            con.execute(f"CREATE OR REPLACE TEMP MACRO rows_{old}({args}) AS TABLE {body}")
        else:
            con.execute(f"CREATE OR REPLACE TEMP VIEW rows_{old} AS {body}")
    params = query_params(name)
    call = f"rows_{name}({', '.join(repr(PARAMS[p]) for p in params)})" if params else f"rows_{name}"
    return con.sql(f"select * from {call}").pl()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated fleet (default profile): many jobs, sizes and classes."""
    from tracekit.generate import generate_fleet

    root = tmp_path_factory.mktemp("rollups-fleet")
    generate_fleet(root / "fleet", 24, 11, "default")
    assert ingest([root / "fleet"], root / "ds").ok
    return root / "ds"


@pytest.fixture(params=["samples", "fleet"])
def dataset(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(request.param)


@pytest.mark.parametrize("name", FROM_ROWS_QUERIES)
def test_a_query_reading_rollups_gives_what_it_gave_from_every_row(dataset: Path, name: str) -> None:
    assert name in query_names()
    with tracekit.open(dataset) as ds:
        params = {p: PARAMS[p] for p in query_params(name)}
        now = ds.query(name, params or None).pl()
        before = _from_rows(ds, name)
    assert now.schema == before.schema
    assert_frame_equal(now, before, check_exact=False, rel_tol=1e-9, abs_tol=1e-12)


def test_a_listing_of_calls_is_per_job_and_the_jobs_add_up_to_every_call(dataset: Path) -> None:
    """collective_wire_bytes and collective_bandwidth take the job; NULL (what the rollups read) gives every job's."""
    with tracekit.open(dataset) as ds:
        jobs = [r[0] for r in ds.sql("select job_id from jobs order by 1").fetchall()]
        assert (
            ds.sql("select count(*) from collective_wire_bytes(null)").fetchall()
            == ds.sql("select count(*) from collectives").fetchall()
        )
        for name in ("collective_wire_bytes", "collective_bandwidth"):
            every = ds.sql(f"select * from {name}(null) order by all").pl()
            per_job = [ds.query(name, {"job_id": job}).pl() for job in jobs]
            assert all(
                frame["job_id"].unique().to_list() in ([job], []) for job, frame in zip(jobs, per_job, strict=True)
            )
            assert_frame_equal(pl.concat(per_job).sort(every.columns), every.sort(every.columns))
        assert ds.query("collective_bandwidth", {"job_id": "no such job"}).pl().height == 0


def _rollups(dataset: Path) -> dict[str, pl.DataFrame]:
    """Each rollup table as stored, and as computed afresh from collectives."""
    out = {}
    with tracekit.open(dataset) as ds:
        for rollup in ROLLUPS:
            stored = ds.sql(f"select * from {rollup} order by all").pl()
            fresh = ds.sql(f"select * from ({rollup_query(rollup)}) order by all").pl()
            out[rollup] = stored
            assert_frame_equal(stored, fresh, check_exact=False, rel_tol=1e-12)
    return out


def test_every_run_keeps_the_rollups_in_step_for_the_jobs_it_touches(tmp_path: Path) -> None:
    write_et_job(tmp_path / "a" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])
    ingest([tmp_path / "a"], tmp_path / "ds")
    first = _rollups(tmp_path / "ds")
    assert first["job_classes"]["job_id"].to_list() == ["jobA"]
    write_et_job(tmp_path / "a" / "jobA", [2, 3], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])  # more ranks
    write_et_job(tmp_path / "b" / "jobB", [0, 1, 2, 3], [("ALL_TO_ALL", 1 << 16)])
    ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "ds")
    second = _rollups(tmp_path / "ds")
    ranks = second["collective_ranks"].filter(pl.col("whole_job")).select("job_id", "ranks").rows()
    assert ranks == [("jobA", 4), ("jobB", 4)]


@pytest.mark.slow
def test_small_parquet_files_are_merged_as_runs_accumulate(tmp_path: Path) -> None:
    for j in range(10):
        write_et_job(tmp_path / f"in{j}" / f"job{j}", [0, 1], [("ALL_REDUCE", 64)])
        ingest([tmp_path / f"in{j}"], tmp_path / "ds")
    files = sorted((tmp_path / "ds" / "collectives").glob("*.parquet"))
    assert len(files) <= 8
    merged = [f for f in files if f.name.startswith("part-")]
    assert merged, [f.name for f in files]
    assert pl.read_parquet(tmp_path / "ds" / "collectives" / "*.parquet").height == 10 * 2
    assert len(list((tmp_path / "ds" / "traces").glob("*.parquet"))) <= 8
    assert pl.read_parquet(tmp_path / "ds" / "traces" / "*.parquet").height == 10 * 2
    part = pl.read_parquet(merged[0])
    assert part.equals(part.sort("job_id", "rank", "trace_id", "op_id"))
    shutil.rmtree(tmp_path / "ds")
