"""`python -m bench.same_outputs [REF]`: are this tree's datasets and replays those of REF, row for row?

A refactor promises "behaviour unchanged"; this checks it. The code of REF (default `main`) is
exported with `git archive`, then both trees ingest the same traces (the bundled sample, and the
public traces in ../shared when present) and replay the same jobs in every output format. Every
table of both datasets, every Parquet file and every simulator input of both replays are then
compared: tables as sorted multisets of rows (so row order and Parquet file layout may change),
other files byte for byte. Columns that say when or how long something ran are left out. Exit 0
when everything matches, 1 with a line per difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = ROOT.parent / "shared" / "traces" / "public"

# Columns whose values are wall-clock facts of the run, not of the traces.
VOLATILE = {
    "started_at",
    "committed_at",
    "finished_at",
    "ingested_at",
    "created_at",
    "seconds",
    "elapsed_s",
    "run_id",
    "wall_s",
}
# Columns of the written-files log (tracekit.store.written_files) that name a run's own files: a path
# holds the run id, and a Parquet file's bytes (so its size and checksum) differ from run to run.
VOLATILE_IN = {"written_files": {"path", "bytes", "sha256"}}
REPLAYS = (
    ("captured/ddp_mlp", ["--gpus-per-host", "2", "--format", "all"]),
    ("job-000032", ["--format", "all"]),
    ("job-000032", ["--in-network-reduction", "nvls", "--in-network-reduction", "collnet"]),
    ("job-000007", ["--channels", "4", "--qps-per-connection", "2", "--format", "htsim"]),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.same_outputs", description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", nargs="?", default="main", help="the git revision to compare with (default main)")
    parser.add_argument("--keep", type=Path, help="build in this folder and keep it")
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="tracekit-same-"))
    ref_tree = work / "ref-tree"
    if not ref_tree.exists():
        ref_tree.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.ref], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(ref_tree)], input=archive.stdout, check=True)
    TREES.extend([str(ref_tree), str(ROOT)])
    outputs = {name: _build(tree, work / name) for name, tree in (("ref", ref_tree), ("this", ROOT))}
    differences = _compare(outputs["ref"], outputs["this"])
    for line in differences:
        print(line)
    print(f"{len(differences)} difference(s) between {args.ref} and this tree ({work})")
    return 1 if differences else 0


def _build(tree: Path, out: Path) -> Path:
    if (out / "done").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(tree)}

    def tracekit(*args: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "tracekit", *args, "-q"], cwd=tree, env=env, check=False, capture_output=True
        )

    tracekit("ingest", "sample_traces", "--out", str(out / "sample.dataset"))
    if PUBLIC.is_dir():
        tracekit("ingest", str(PUBLIC), "--out", str(out / "public.dataset"))
    for i, (job, options) in enumerate(REPLAYS):
        tracekit("replay", str(out / "sample.dataset"), "--job", job, *options, "-o", str(out / f"replay-{i}"))
    (out / "done").touch()
    return out


def _compare(ref: Path, this: Path) -> list[str]:
    differences = []
    ref_files = {p.relative_to(ref) for p in ref.rglob("*") if p.is_file() and not _skipped(p)}
    this_files = {p.relative_to(this) for p in this.rglob("*") if p.is_file() and not _skipped(p)}
    differences += [f"only in ref: {p}" for p in sorted(ref_files - this_files) if not _layout_only(p)]
    differences += [f"only in this tree: {p}" for p in sorted(this_files - ref_files) if not _layout_only(p)]
    for name in sorted(ref_files & this_files):
        if _layout_only(name):
            continue
        a, b = _digest(ref / name), _digest(this / name)
        if a != b:
            differences.append(f"differs: {name}: {_first_difference(a, b)}")
    for dataset in sorted({p.parts[0] for p in ref_files if p.parts[0].endswith(".dataset")}):
        a, b = _tables(ref / dataset), _tables(this / dataset)
        for table in sorted(set(a) | set(b)):
            if a.get(table) != b.get(table):
                differences.append(f"differs: {dataset} table {table}: {_first_difference(a.get(table), b.get(table))}")
    return differences


def _skipped(path: Path) -> bool:
    return path.name in ("done", "replay.duckdb") or path.suffix in (".wal", ".lock") or ".staging" in path.parts


def _layout_only(path: Path) -> bool:
    """Dataset files whose rows the table comparison covers (their split into files may change)."""
    return path.parts[0].endswith(".dataset")


def _digest(path: Path) -> object:
    if path.suffix == ".parquet":
        return _rows(f"SELECT * FROM read_parquet('{path}')")
    if path.suffix == ".json":
        return _without_volatile(json.loads(path.read_text()))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tables(dataset: Path) -> dict[str, object]:
    con = duckdb.connect(str(dataset / "tracekit.duckdb"), read_only=True)
    try:
        names = [
            r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'").fetchall()
        ]
        return {name: _rows(f'SELECT * FROM "{name}"', con, VOLATILE_IN.get(name, set())) for name in names}
    finally:
        con.close()


def _rows(query: str, con: duckdb.DuckDBPyConnection | None = None, volatile: set[str] | None = None) -> object:
    con = con or duckdb.connect()
    relation = con.sql(query)
    columns = [c for c in relation.columns if c not in VOLATILE and c not in (volatile or set())]
    if not columns:
        return ()
    kept = ", ".join(f'"{c}"' for c in columns)
    rows = [tuple(map(_normal, row)) for row in con.sql(f"SELECT {kept} FROM ({query})").fetchall()]
    rows.sort(key=repr)
    return (tuple(columns), len(rows), hashlib.sha256(repr(rows).encode()).hexdigest(), rows[:3])


TREES: list[str] = []  # the two trees' roots, which paths in the dataset start with


def _normal(value: object) -> object:
    """A value as compared: floats to 12 digits (a sum's last bits follow its order), paths tree-free."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, str):
        for tree in TREES:
            value = value.replace(tree, "<tree>")
        return value
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def _without_volatile(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_volatile(v) for k, v in value.items() if k not in VOLATILE and k != "tracekit_version"}
    if isinstance(value, list):
        return [_without_volatile(v) for v in value]
    return value


def _first_difference(a: object, b: object) -> str:
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == 4 and len(b) == 4:
        if a[0] != b[0]:
            return f"columns {sorted(set(a[0]) ^ set(b[0]))} differ"
        return f"{a[1]} rows vs {b[1]}; first rows {a[3]} vs {b[3]}"
    return f"{str(a)[:120]} vs {str(b)[:120]}"


if __name__ == "__main__":
    sys.exit(main())
