"""The docs stay true to the CLI: every command is documented in the README, every option has help."""

from __future__ import annotations

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
