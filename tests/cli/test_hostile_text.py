"""Text from traces is data: a job id, op name, label, path or error message holding Rich markup
(`[/]`, `[red]x[/red]`) or terminal escape sequences (`\\x1b[2J` clears the screen) is printed as
written, never taken for a style or sent to the terminal raw, by every command that prints it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders import write_et_job
from tests.conftest import cli
from tests.synthetic import write_dataset

JOB = "j[/]\x1b[2J"
LABEL = "[red]x[/red]\x1b[2J"
OP = "[/][bold]op\x1b]0;title\x07\x9b"
ERROR = "bad trace [/] \x1b[31mred"


def _visible(text: str) -> str:
    """How `text` must appear on screen: control characters as escapes, brackets as written."""
    return text.replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\x9b", "\\x9b")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile-text")
    collectives = [
        {
            "job_id": JOB,
            "rank": rank,
            "trace_id": f"t{rank}",
            "op_id": op,
            "op_name": OP,
            "comm_type": "ALL_REDUCE",
            "group_size": 4,
            "pg_name": "0",
            "in_bytes": 1 << 20,
            "in_elems": 1 << 18,
            "dtype": "Float",
            "is_uneven": False,
            "start_us": float(op),
            "duration_us": 10.0,
        }
        for rank in range(4)
        for op in range(3)
    ]
    traces = [{"trace_id": f"t{r}", "job_id": JOB, "rank": r, "path": f"t{r}", "status": "ok"} for r in range(4)]
    traces.append({"trace_id": "bad", "job_id": JOB, "rank": 5, "path": "bad", "status": "error", "error": ERROR})
    jobs = [{"job_id": JOB, "world_size": 8, "label": LABEL, "ranks_missing": 4, "missing_ranks": "4-7 [/]\x1b[2J"}]
    groups = [{"job_id": JOB, "pg_name": "0", "group_size": 4, "ranks": [0, 1, 2, 3]}]
    tables = {"jobs": jobs, "collectives": collectives, "traces": traces, "process_groups": groups}
    return write_dataset(root / "ds", tables)


def _clean(output: str) -> None:
    assert "\x1b" not in output and "\x07" not in output and "\x9b" not in output


def test_shown_escapes_markup_and_shows_control_characters() -> None:
    from tracekit.terminal import shown

    assert shown("a[/]b") == "a\\[/]b"
    assert shown("[red]x[/red]") == "\\[red]x\\[/red]"
    assert shown("\x1b[2J\x00\x7f\x9b\u202e") == "\\x1b[2J\\x00\\x7f\\x9b\\u202e"
    assert shown("tab\tand line\nkept") == "tab\tand line\nkept"
    assert shown("ends in a backslash\\") == "ends in a backslash\\\\"  # would escape the next markup tag


def test_info_prints_job_ids_labels_and_errors_as_written(hostile: Path) -> None:
    result = cli("info", hostile)
    assert result.returncode == 0, result.stderr
    _clean(result.stdout + result.stderr)
    assert _visible(JOB) in result.stdout
    assert _visible(ERROR) in result.stdout


@pytest.mark.parametrize(
    ("query", "param", "expected"),
    [
        ("job_overview", None, [JOB, LABEL]),
        ("collective_group_sizes", None, [JOB, OP]),
        ("job_bytes_by_collective", f"job_id={JOB}", ["ALL_REDUCE"]),
    ],
)
def test_query_prints_cells_as_written(hostile: Path, query: str, param: str | None, expected: list[str]) -> None:
    result = cli("query", query, hostile, *(["-p", param] if param else []))
    assert result.returncode == 0, result.stderr
    _clean(result.stdout + result.stderr)
    for text in expected:
        assert _visible(text) in result.stdout


def test_query_files_keep_the_text_itself(hostile: Path, tmp_path: Path) -> None:
    """Only the screen shows escapes: csv and json hold the values unchanged."""
    result = cli("query", "job_overview", hostile, "-f", "csv", "-o", tmp_path / "o.csv")
    assert result.returncode == 0, result.stderr
    assert JOB in (tmp_path / "o.csv").read_text()


def test_replay_prints_the_job_id_as_written(hostile: Path, tmp_path: Path) -> None:
    result = cli("replay", hostile, "--job", JOB, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    _clean(result.stdout + result.stderr)
    assert f"job {_visible(JOB)}:" in result.stderr


def test_replay_of_an_unknown_hostile_job_names_it_as_written(hostile: Path, tmp_path: Path) -> None:
    result = cli("replay", hostile, "--job", "[/]\x1b[2Jnone", "--out", tmp_path / "out")
    assert result.returncode == 2
    _clean(result.stdout + result.stderr)
    assert "[/]\\x1b[2Jnone" in result.stderr


def test_fleet_replay_prints_skipped_jobs_as_written(hostile: Path, tmp_path: Path) -> None:
    result = cli("replay", hostile, "--fleet", "--out", tmp_path / "fleet")
    _clean(result.stdout + result.stderr)
    assert "Traceback" not in result.stderr


def test_ingest_prints_paths_and_errors_from_traces_as_written(tmp_path: Path) -> None:
    folder = tmp_path / "in" / "[red]x[/red]\x1b[2J"
    folder.mkdir(parents=True)
    (folder / "rank0 [bold]\x1b]0;t\x07.json").write_text('{"nodes": [{"name": "\\u001b[2J[/]"')
    write_et_job(tmp_path / "in" / "j[bold]\x1b[2J", [0, 2], [("ALL_REDUCE", 1024)])  # rank 1 missing: a warning
    result = cli("ingest", tmp_path / "in", "--out", tmp_path / "ds")
    _clean(result.stdout + result.stderr)
    assert "[red]x[/red]\\x1b[2J" in result.stdout + result.stderr
    assert "warning: job j[bold]\\x1b[2J: rank 1 of 3 missing" in result.stdout + result.stderr
