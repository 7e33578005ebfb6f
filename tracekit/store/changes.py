"""What one ingest run adds to a dataset, gathered while its files are parsed (`RunChanges`): the
rows it adds, written a round at a time as Parquet in the run's staging folder, until the commit
(tracekit.store.commit) loads them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.schema import arrow_type, table_from_rows
from tracekit.store.parquet_files import STAGED_CODEC

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pyarrow as pa

    from tracekit.rows import JobsRow, ProcessGroupsRow, TracesRow

# The column naming a staged row's file (tracekit.ingest.worker.SEQ_COLUMN).
SEQ = "_seq"
FILE_COLUMNS = {
    SEQ: "int64",
    "trace_id": "string",
    "job_id": "string",
    "rank": "int32",
    "group_size_without_pg": "int32",
    "collectives_staged": "bool",
}


@dataclass
class RunChanges:
    """Everything one ingest run adds or replaces.

    `traces`: the run's `traces` rows, written a round at a time into `folder` as Parquet files
    (`add_traces`; held in memory until the commit, a fleet's rows cost 467 MiB for 30,000 jobs),
    `ingested_at` filled in at the commit. `files`: one row per file read well, in the columns of
    `FILE_COLUMNS` (`add_files`, written likewise): the file's seq (its staged rows' `_seq`), the
    trace id, job and rank its rows get, the group size of its collectives that name no process
    group and record none, and whether its collectives are staged (False: they are in
    `collectives`, finished already). `staged`: the staged Parquet files, by table. `replaced`: the
    (trace id, status) of each `traces` row the dataset holds that the run replaces
    (tracekit.ingest.jobs.finish_job decides which).
    """

    run_id: str
    folder: Path
    traces: list[str] = field(default_factory=list)
    jobs: list[JobsRow] = field(default_factory=list)
    process_groups: list[ProcessGroupsRow] = field(default_factory=list)
    collectives: list[pa.Table] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    staged: dict[str, list[str]] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    failed: int = 0  # traces rows of files that failed
    replaced: list[tuple[str, str]] = field(default_factory=list)

    def add_traces(self, rows: Sequence[TracesRow]) -> None:
        if rows:
            self.traces.append(self._write("traces", table_from_rows("traces", rows)))
            self.failed += sum(row["status"] == "error" for row in rows)

    def add_files(self, files: list[tuple[int, str, str, int | None, int | None, bool]]) -> None:
        import pyarrow as pa

        if files:
            columns = dict(zip(FILE_COLUMNS, map(list, zip(*files, strict=True)), strict=True))
            self.files.append(self._write("files", pa.table(columns, schema=files_schema())))

    def _write(self, name: str, table: pa.Table) -> str:
        import pyarrow.parquet as pq

        self.folder.mkdir(parents=True, exist_ok=True)
        path = str(self.folder / f"{name}-{len(getattr(self, name))}.parquet")
        pq.write_table(table, path, compression=STAGED_CODEC)
        return path


def files_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(name, arrow_type(kind)) for name, kind in FILE_COLUMNS.items()])
