"""The docs stay true to the CLI: every command is documented in the README, every option has help."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import typer.core
import typer.main

from tracekit.cli import app

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_is_in_the_readme_with_its_options(name: str) -> None:
    command = COMMANDS[name]
    assert f"tracekit {name}" in README, f"README does not show `tracekit {name}`"
    assert command.help, f"`tracekit {name}` has no help text"
    for param in command.params:
        if isinstance(param, typer.core.TyperOption) and param.name != "help":
            assert param.help, f"`tracekit {name} {param.opts[0]}` has no help text"
            assert any(opt in README for opt in param.opts), f"README does not mention {param.opts[0]}"


def test_readme_starts_with_the_two_commands() -> None:
    first_block = README.split("```sh", 1)[1].split("```", 1)[0].strip().splitlines()
    setup = "python3 -m venv .venv && .venv/bin/pip install -e . && "
    assert first_block == [setup + ".venv/bin/tracekit ingest sample_traces --out sample.dataset", "make check"]
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert ci.rstrip().splitlines()[-1] == "make check"


def _help(*args: str, width: int = 80) -> str:
    """`tracekit ARGS --help` as a terminal this wide shows it."""
    result = subprocess.run(
        [sys.executable, "-m", "tracekit", *args, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "TERMINAL_WIDTH": str(width), "COLUMNS": str(width)},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _flat(text: str) -> str:
    """Rendered help without its boxes and line breaks, to look for a source text in it."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize("name", ["", *sorted(COMMANDS)])
def test_help_shows_every_bracket_its_text_has(name: str) -> None:
    """Help is rendered as Rich markup: `'tracekit[dask]'` became `'tracekit'`, `[dask]` taken for a style."""
    texts = _source_help(name)
    shown = _flat(_help(*([name] if name else [])))
    for text in texts:
        for bracketed in re.findall(r"\S*\[[^\]]*\]\S*", text):
            assert _flat(bracketed) in shown, f"`tracekit {name} --help` lost {bracketed!r}"


def _source_help(name: str) -> list[str]:
    """The help texts of a command as cli.py writes them: its docstring and its parameters' help."""
    if not name:
        return [app.info.help or ""]
    callback = next(
        c.callback for c in app.registered_commands if c.callback and (c.name or c.callback.__name__) == name
    )
    hints = typing.get_type_hints(callback, include_extras=True)
    helps = [m.help for h in hints.values() for m in getattr(h, "__metadata__", ()) if getattr(m, "help", None)]
    return [inspect.getdoc(callback) or "", *helps]


def test_help_sentences_are_not_cut_where_the_source_wraps() -> None:
    shown = _help("ingest", width=200)
    assert "(ranks a job lacks are a warning: `job J: ranks 1–7 of 8 missing`)" in shown
    assert "pip install 'tracekit[dask]'" in _flat(_help("ingest"))
