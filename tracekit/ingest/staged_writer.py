"""Staged Parquet files: the writer of each table's file for one batch or one big file, and the
thread a write (or a file's hash) runs in while the worker parses on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tracekit.store.parquet_files import STAGED_CODEC

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# Rows the batch holds before writing them out (one row group each).
FLUSH_ROWS = 1 << 20
T = TypeVar("T")


class StagedWriter:
    """The staged Parquet file of each table for one writer (a batch, or one big file).

    `in_thread`: each write runs in a thread while the caller goes on parsing (pyarrow encodes and
    compresses without the GIL), one at a time: the next waits for the last, so at most one write's
    rows are in flight. A write that failed raises at the next write or at `close`."""

    def __init__(self, staging: Path, name: str, in_thread: bool = False) -> None:
        self.staging = staging
        self.name = name
        self.in_thread = in_thread
        self.writers: dict[str, pq.ParquetWriter] = {}
        self._writing: InThread[None] | None = None

    def path(self, table: str) -> Path:
        return self.staging / table / f"{self.name}.parquet"

    def write(self, table: str, batches: list[pa.RecordBatch]) -> None:
        if not batches:
            return
        self._wait()
        if self.in_thread:
            self._writing = InThread(self._write, table, batches)
        else:
            self._write(table, batches)

    def _write(self, table: str, batches: list[pa.RecordBatch]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        data = pa.Table.from_batches(batches).combine_chunks()
        if table not in self.writers:
            self.path(table).parent.mkdir(parents=True, exist_ok=True)
            self.writers[table] = pq.ParquetWriter(self.path(table), data.schema, compression=STAGED_CODEC)
        self.writers[table].write_table(data, row_group_size=FLUSH_ROWS)

    def _wait(self) -> None:
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def close(self) -> list[tuple[str, str]]:
        try:
            self._wait()
        finally:
            for writer in self.writers.values():
                writer.close()
        return [(table, str(self.path(table))) for table in self.writers]

    def remove(self) -> None:
        """Drop what was written (a failed write's error was raised already, or the rows are unwanted)."""
        try:
            self.close()
        except Exception:
            pass
        for table in self.writers:
            self.path(table).unlink(missing_ok=True)


class InThread(Generic[T]):
    """`work(*args)` run by a thread of its own; `result()` waits for it and returns what it returned,
    or raises what it raised."""

    def __init__(self, work: Callable[..., T], *args: Any) -> None:
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(work, *args), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[..., T], *args: Any) -> None:
        try:
            self._value = work(*args)
        except BaseException as exc:  # raised again in the caller's thread, by result()
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set by a run that raised nothing
