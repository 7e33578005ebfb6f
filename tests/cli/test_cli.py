"""The `tracekit` command as users run it: real processes, the real DuckDB shell."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import et_bytes, foreign_database, write_et_job
from tests.conftest import DUCKDB, duckdb_shell, needs_duckdb_shell
from tracekit.schema import TABLES


def tracekit(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_help_starts_without_importing_the_heavy_modules() -> None:
    code = (
        "import sys; from typer.testing import CliRunner; from tracekit.cli import app; "
        "r = CliRunner().invoke(app, ['ingest', '--help']); assert r.exit_code == 0, r.output; "
        "mods = ('duckdb', 'polars', 'pyarrow', 'altair', 'google.protobuf'); "
        "heavy = [m for m in mods if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_ingest_prints_a_summary_and_exits_zero(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 1 << 10)])
    result = tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds")
    assert result.returncode == 0, result.stderr
    assert "2 files added" in result.stderr
    assert "1 jobs, 2 ranks" in result.stderr
    assert "ALL_REDUCE" in result.stderr and "2.0 MiB" in result.stderr


def test_ingest_exit_code_says_some_inputs_failed(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 64)])
    (tmp_path / "in" / "jobA" / "jobA.2.et").write_bytes(et_bytes([("ALL_REDUCE", 64)])[:-2])
    result = tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds")
    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and "jobA.2.et at record" in error_lines[0]
    assert "2 traces ok, 1 with errors" in result.stderr


def test_ingest_refuses_a_dataset_path_that_is_a_file(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0], [("ALL_REDUCE", 64)])
    (tmp_path / "ds").write_text("not a folder")
    result = tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds")
    assert result.returncode == 3
    assert "is not a folder" in result.stderr


@pytest.mark.skipif(DUCKDB is None, reason="the duckdb shell (pip install duckdb-cli) is not installed")
def test_the_real_duckdb_shell_reads_the_dataset_after_it_is_moved(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1, 2, 3], [("ALL_REDUCE", 64), ("BROADCAST", 8)])
    assert tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds", "-q").returncode == 0
    shutil.move(tmp_path / "ds", tmp_path / "moved")
    assert DUCKDB is not None
    shell = subprocess.run(
        [
            DUCKDB,
            "-csv",
            str(tmp_path / "moved" / "tracekit.duckdb"),
            "-c",
            "select comm_type, count(*) from collectives group by 1 order by 1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split() == ["comm_type,count_star()", "ALL_REDUCE,4", "BROADCAST,4"]
    # Every table, ops too (the largest), from a working folder that is not the dataset's.
    counts = " union all ".join(f"select '{t}', count(*) from {t}" for t in TABLES)
    shell = subprocess.run(
        [DUCKDB, "-csv", "-noheader", str(tmp_path / "moved" / "tracekit.duckdb"), "-c", counts],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path / "in",
    )
    assert shell.returncode == 0, shell.stderr
    assert dict(line.split(",") for line in shell.stdout.split())["ops"] == "16"


def test_python_dash_m_and_console_script_agree() -> None:
    script = shutil.which("tracekit", path=str(Path(sys.executable).parent))
    assert script is not None
    out = subprocess.run([script, "--help"], capture_output=True, text=True, check=True).stdout
    assert "ingest" in out and tracekit("--help").stdout == out


def test_info_summarises_a_dataset_and_its_failures(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "gap", [0, 2], [("ALL_REDUCE", 1 << 20)])
    (tmp_path / "in" / "gap" / "gap.3.et").write_bytes(et_bytes([("ALL_REDUCE", 64)])[:-2])
    assert tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds", "-q").returncode == 1
    result = tracekit("info", tmp_path / "ds")
    assert result.returncode == 0, result.stderr
    assert "1 jobs, 2 ranks, 2 traces ok, 1 with errors" in result.stdout
    assert f"error: {tmp_path / 'in' / 'gap' / 'gap.3.et'} at record" in result.stdout
    assert tracekit("info", tmp_path / "in").returncode == 3


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@needs_duckdb_shell
def test_every_read_command_works_while_the_duckdb_shell_holds_the_dataset_open(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1, 2, 3], [("ALL_REDUCE", 1 << 20), ("ALL_GATHER", 4096)])
    assert tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds", "-q").returncode == 0
    write_et_job(tmp_path / "more" / "jobB", [0, 1], [("ALL_REDUCE", 64)])
    with duckdb_shell(tmp_path / "ds" / "tracekit.duckdb") as shell:
        read_commands: list[list[str | Path]] = [
            ["info", tmp_path / "ds"],
            ["query", "job_class", tmp_path / "ds", "-f", "csv"],
            ["report", tmp_path / "ds", "-o", tmp_path / "r.html"],
            ["replay", tmp_path / "ds", "--job", "jobA", "-o", tmp_path / "replay", "-q"],
        ]
        for args in read_commands:
            result = tracekit(*args)
            assert result.returncode == 0, (args, result.stderr)
            assert "Traceback" not in result.stderr
        assert "jobA" in tracekit("query", "job_class", tmp_path / "ds", "-f", "csv").stdout
        # Writing needs the file to itself: a one-line error naming the process that has it.
        refused = tracekit("ingest", tmp_path / "more", "--out", tmp_path / "ds")
    assert refused.returncode == 3
    assert _one_line(refused) == (
        f"error: {tmp_path / 'ds'}: the dataset is open in another program (duckdb, PID {shell.pid}): "
        "close it or use --out elsewhere"
    )


@pytest.mark.parametrize("kind", ["empty", "text", "another database"])
def test_a_duckdb_file_that_tracekit_did_not_write_is_a_one_line_error(tmp_path: Path, kind: str) -> None:
    db = foreign_database(tmp_path / "ds", kind)
    before = db.read_bytes()
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 64)])
    commands: list[list[str | Path]] = [
        ["info", tmp_path / "ds"],
        ["query", "job_class", tmp_path / "ds"],
        ["report", tmp_path / "ds", "-o", tmp_path / "r.html"],
        ["replay", tmp_path / "ds", "--job", "jobA", "-o", tmp_path / "replay"],
        ["ingest", tmp_path / "in", "--out", tmp_path / "ds"],
    ]
    for args in commands:
        result = tracekit(*args)
        assert result.returncode == 3, (args, result.stderr)
        assert _one_line(result).startswith(f"error: {db}: not a tracekit dataset ("), (args, result.stderr)
    assert db.read_bytes() == before  # ingest wrote nothing into it


def test_an_output_path_that_cannot_be_written_is_a_one_line_error_naming_it(
    tmp_path: Path, read_only_dir: Path
) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 64)])
    assert tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds", "-q").returncode == 0
    for args, path in (
        (["query", "job_class", tmp_path / "ds", "-f", "parquet", "-o"], read_only_dir / "classes.parquet"),
        (["query", "job_class", tmp_path / "ds", "-f", "csv", "-o"], read_only_dir / "classes.csv"),
        (["report", tmp_path / "ds", "-o"], read_only_dir / "r.html"),
        (["generate", "--jobs", "2", "--out"], read_only_dir / "fleet"),
        (["generate", "--fit", tmp_path / "ds", "--out"], read_only_dir / "fitted.toml"),
    ):
        result = tracekit(*args, path)
        assert result.returncode == 3, (args, result.stderr)
        assert _one_line(result).startswith(f"error: {path}: "), (args, result.stderr)


def test_an_output_path_that_is_a_folder_is_a_one_line_error_naming_it(tmp_path: Path) -> None:
    write_et_job(tmp_path / "in" / "jobA", [0, 1], [("ALL_REDUCE", 64)])
    assert tracekit("ingest", tmp_path / "in", "--out", tmp_path / "ds", "-q").returncode == 0
    (tmp_path / "folder").mkdir()
    commands: list[list[str | Path]] = [
        ["report", tmp_path / "ds", "-o", "."],
        ["report", tmp_path / "ds", "-o", tmp_path / "folder"],
        ["query", "job_class", tmp_path / "ds", "-f", "csv", "-o", tmp_path / "folder"],
        ["generate", "--fit", tmp_path / "ds", "--out", tmp_path / "folder"],
    ]
    for args in commands:
        result = tracekit(*args, cwd=tmp_path)
        assert result.returncode == 3, (args, result.stderr)
        assert _one_line(result).startswith(f"error: {args[-1]}: cannot write ("), (args, result.stderr)
