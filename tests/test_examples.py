"""Every example runs as written: the ```sh and ```python blocks of README.md, and the `Example:` and
`then:` lines of every command's --help, against the README's own dataset (the one its first
command makes, `tracekit ingest sample_traces --out sample.dataset`, ingested once per session) in a
folder holding the repository's sample_traces, as a new user's checkout does.

A new example runs by default. The few that cannot run here are in SKIPPED, each with the reason;
an entry no example matches any more fails `test_every_skipped_example_is_still_in_the_docs`.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tracekit.cli import app

pytestmark = pytest.mark.slow  # commands and fleets end to end: make check runs them, make fast does not

README = ROOT / "README.md"
BIN = Path(sys.executable).parent

# Commands (a line of a block, comments and continuation lines joined) that are not run, and why.
SKIPPED = {
    "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/tracekit ingest sample_traces --out "
    "sample.dataset": "the set-up: the session's install is this one, and the ingest is the `readme_dataset` "
    "fixture every example runs against",
    "make check": "the whole gate, which runs this test",
    "tracekit ingest PATH... --out DATASET [--job NAME] [--label MODEL] [--manifest FILE] [--workers N] "
    "[--executor local|dask-local|dask://HOST:PORT] [--memory-budget SIZE] [--strict] [-q]": "a synopsis",
    "dask scheduler --port 8786": "starts a Dask cluster (tests/ingest/test_executors.py runs one)",
    "dask worker tcp://SCHEDULER:8786 --nworkers 8 --nthreads 1": "joins a Dask cluster on another machine",
    "tracekit ingest /shared/fleet --out /shared/fleet.dataset --executor dask://SCHEDULER:8786": "needs a "
    "Dask cluster and its shared storage",
    "tracekit generate --jobs N --out DIR [--seed S] [--profile default|sample|meta-llm-tail|FILE.toml] "
    "[--archive] [--trace-format chakra|pytorch-et] [--workers N] [-q]": "a synopsis",
    "tracekit report [DATASET] -o report.html [--job ID ...] [--label L ...] [--since DATE] [--until DATE] "
    "[--compare OTHER | --compare SINCE..UNTIL]": "a synopsis",
    "tracekit replay DATASET --job J -o OUT [--format flows|hpcc|htsim|chakra|all ...] "
    "[--placement FILE | --gpus-per-host 8 --hosts-per-rack 2 --nics-per-host 8 --nic-gbps 400] "
    "[--cross-nic 0|1|2] [--channels N] [--qps-per-connection N] [--pxn/--no-pxn] "
    "[--protocol auto|LL|LL128|Simple] [--gpu-arch volta|ampere|hopper|blackwell] "
    "[--nccl-log FILE] [--in-network-reduction nvls|collnet ...] "
    "[--algorithm auto|observed|ring|tree|direct|halving-doubling|hierarchical|nvls|collnet] "
    "[--fabric PRESET|FILE] [--htsim-binary uec|eqds|ndp] [--intra-host] [--csv] "
    "[--compare-observed] [-q]": "a synopsis",
    "tracekit replay DATASET --fleet -o OUT [--workers N] [--executor local|dask-local|dask://HOST:PORT] "
    "[--job J] [--label L ...] [--since DATE] [--until DATE]": "a synopsis (the Fleet replay example runs it)",
    "tracekit whatif DATASET --job J --fabric F [--fabric G ...] [--routing ecmp|pinned|spray ...] "
    "[--seeds 8] [-o OUT.csv|.json|.parquet] [the replay's placement and NCCL options]": "a synopsis",
    ".venv/bin/pip install -e '.[dask]'": "installs a package",
    ".venv/bin/python -m bench": "the benchmark suite: minutes (`python -m bench --quick` runs in tests/bench)",
    ".venv/bin/python -m bench --jobs 2000 ingest add-job queries report startup": "a benchmark: minutes",
    ".venv/bin/python -m bench fleet-30k": "a benchmark: 14 GB of inputs, 10 minutes once generated",
}


@dataclass(frozen=True)
class Example:
    where: str  # README.md:LINE, or the command whose --help shows it
    language: str  # sh or python
    text: str

    def commands(self) -> list[str]:
        """The block's commands: comments dropped, indented continuation lines joined to theirs."""
        lines: list[str] = []
        for line in self.text.splitlines():
            code = re.sub(r"\s+#\s.*$", "", line).rstrip()
            if not code.strip():
                continue
            if line[:1].isspace() and lines:
                lines[-1] += " " + code.strip()
            else:
                lines.append(code)
        return lines


def readme_examples() -> list[Example]:
    examples = []
    for match in re.finditer(r"^```(sh|python)\n(.*?)^```", README.read_text(), re.S | re.M):
        line = README.read_text()[: match.start()].count("\n") + 1
        examples.append(Example(f"README.md:{line}", match.group(1), match.group(2)))
    return examples


def help_examples() -> list[Example]:
    """Each command's examples, as its --help shows them (a `then:` line runs after the one before)."""
    examples = []
    for info in app.registered_commands:
        assert info.callback is not None
        doc = inspect.getdoc(info.callback) or ""
        lines = [m.group(2) for m in re.finditer(r"^(Example|then):\s+(tracekit .*)$", doc, re.M)]
        if lines:
            examples.append(Example(f"tracekit {info.name or info.callback.__name__} --help", "sh", "\n".join(lines)))
    return examples


EXAMPLES = readme_examples() + help_examples()


@pytest.fixture(scope="session")
def readme_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dataset the README's first command makes, made by that command."""
    first = readme_examples()[0].commands()[0]
    command = first.rsplit("&& ", 1)[1].replace(".venv/bin/", "")
    assert command == "tracekit ingest sample_traces --out sample.dataset", first
    root = tmp_path_factory.mktemp("readme")
    (root / "sample_traces").symlink_to(ROOT / "sample_traces")
    done = _shell(command, root)
    assert done.returncode == 0, done.stderr
    return root / "sample.dataset"


def _environment(home: Path) -> dict[str, str]:
    # tracekit and duckdb as installed with this Python; a cache of its own, as a new user has.
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "XDG_CACHE_HOME": str(home)}


def _shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, cwd=cwd, env=_environment(cwd / ".cache"), timeout=600
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_the_example_runs_as_written(example: Example, readme_dataset: Path, tmp_path: Path) -> None:
    (tmp_path / "sample_traces").symlink_to(ROOT / "sample_traces")
    (tmp_path / "sample.dataset").symlink_to(readme_dataset)
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # a clone's fixtures, which some examples read
    if example.language == "python":  # run as a script, as a user saves it: no main guard
        (tmp_path / "example.py").write_text(example.text)
        done = subprocess.run(
            [sys.executable, "example.py"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=_environment(tmp_path / ".cache"),
            timeout=600,
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, f"{example.where}:\n{done.stderr}"
        return
    ran = 0
    for command in example.commands():
        if command in SKIPPED:
            continue
        done = _shell(command, tmp_path)
        assert done.returncode == 0, f"{example.where}: `{command}` exited {done.returncode}:\n{done.stderr}"
        assert "Traceback" not in done.stderr, f"{example.where}: `{command}`:\n{done.stderr}"
        ran += 1
    if not ran:
        pytest.skip(f"every command of {example.where} is in SKIPPED")


def test_every_skipped_example_is_still_in_the_docs() -> None:
    commands = {command for example in EXAMPLES for command in example.commands()}
    assert not sorted(set(SKIPPED) - commands)
