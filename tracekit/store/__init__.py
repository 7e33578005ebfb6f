"""Storage: a tracekit dataset on disk, and everything that reads or writes its DuckDB file.

    dataset.py          the dataset folder: its paths, write lock, recovery, read connections
    commit.py           an ingest run's commit (changes.py: the rows a run gathers for it)
    parquet_files.py    the Parquet copy of every table, appended and compacted per run
    snapshot.py         a reader's copy of a file that another process holds read-write
    connect.py          the one place DuckDB is opened, paths and names are quoted, and the
                        catalogue is asked what a database holds
    queries.py          the query catalogue (queries/*.sql), stored in the dataset as views and macros
    summary.py          the headline numbers (`tracekit info`)
    dataset_format.py   the format number stamped in the DuckDB file
    migrations/         one step per format, from each to the next

Older datasets. A dataset of an older format is upgraded on disk by the next ingest, which runs
the migrations in order inside its commit transaction and stamps the number: the upgrade commits
with the run's rows or not at all. A reader (`tracekit.open`, info, query, report, replay) never
writes: it is shown the older dataset upgraded in memory, as temporary tables and views on its own
connection that stand in for what the file lacks (rollups computed by their queries, columns null,
a fleet replay's tables empty). Readers upgrade in memory rather than asking for an ingest first
because a reader may not be able to write (a read-only copy, another user's folder, a file held by
another program) and because every difference between formats so far is one a view can show;
the file itself changes only under the write lock.
"""
