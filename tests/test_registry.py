"""The registries: each built-in extension is one module named for it, and a plugin package installed
beside tracekit adds a simulator format and an algorithm that the CLI lists, offers and runs.

The plugin tests start real `tracekit` processes: entry points are found from the installed
distributions of a fresh interpreter, which is what a user's `pip install tracekit-foo` gives.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest

import tracekit
from tests.conftest import ROOT
from tracekit.registry import EXTENSION_POINTS, ExtensionPoint, built_in_names, discover, names

TOY_PARSER = '''
"""A toy trace format: "TOYTRACE" on the first line, then one "name duration_us" line per op."""
from tracekit.parsers.base import TableBuffer, TraceError, TraceMeta
from tracekit.parsers.formats import Parser

MAGIC = b"TOYTRACE\\n"


def sniff(head):
    return head.startswith(MAGIC)


def parse(source, sink):
    meta = TraceMeta(format="toy")
    ops = TableBuffer("ops", sink)
    data = source.read()
    if not data.startswith(MAGIC):
        raise TraceError("no TOYTRACE line", "byte 0")
    for number, line in enumerate(data[len(MAGIC):].decode().splitlines()):
        name, _, duration = line.partition(" ")
        ops.append({"op_id": number, "name": name, "duration_us": float(duration)})
        meta.node_count += 1
    ops.flush()
    return meta


PARSER = Parser(name="toy", summary="a toy format", content="binary", priority=5, sniff=sniff,
                suffixes=(".toy",), role="host", parse=parse)
'''

TOY_EMITTER = '''
"""A toy simulator format: one line per network flow, `src dst bytes`."""
from tracekit.replay.emitters import Emission, Emitter


def write(emission: Emission):
    flows = emission.result.flows
    out = emission.out
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"{s} {d} {b}" for s, d, b in zip(flows["src_rank"], flows["dst_rank"], flows["bytes"])]
    (out / "flows.txt").write_text("\\n".join(lines) + "\\n")
    return [out / "flows.txt"], {"run": "cat flows.txt"}


EMITTER = Emitter(name="toy", simulator="a toy simulator", folder="toy", summary="src dst bytes per flow", write=write)
'''

TOY_ALGORITHM = '''
"""A toy AllReduce: every rank sends its buffer to the group's first rank, which sends the sum back."""
from tracekit.replay.algorithms.base import Builder
from tracekit.replay.algorithms.registry import Algorithm


def all_reduce(req):
    n = req.layout.n
    b = Builder(n, 1)
    up = [b.add(src=i, dst=0, lo=0, hi=1, deps=[]) for i in range(1, n)]
    for j in range(1, n):
        b.add(src=0, dst=j, lo=0, hi=1, deps=up)
    return b.build()


ALGORITHM = Algorithm(name="star", summary="everything through rank 0", builders={"ALL_REDUCE": all_reduce},
                      channels=False)
'''


@pytest.mark.parametrize("point", EXTENSION_POINTS, ids=lambda p: p.attribute)
def test_each_built_in_extension_is_one_module_named_for_it(point: ExtensionPoint) -> None:
    package, attribute = point.package, point.attribute
    found = discover(importlib.import_module(package), attribute, object)
    assert tuple(found) == built_in_names(package, attribute, point.dashes) == names(package, attribute, point.dashes)
    assert all(getattr(value, "summary", "") for value in found.values())


def test_the_readme_synopsis_lists_every_format_and_algorithm() -> None:
    """The replay synopsis names the registries' members (a new built-in one must be added there too)."""
    readme = (ROOT / "README.md").read_text()
    formats = re.search(r"--format ([a-z|]+) \.\.\.\]", readme)
    algorithms = re.search(r"--algorithm ([a-z|-]+)\]", readme)
    assert formats and algorithms
    assert set(formats.group(1).split("|")) == {"flows", *built_in_names("tracekit.replay.emitters", "EMITTER"), "all"}
    built_in = built_in_names("tracekit.replay.algorithms", "ALGORITHM")
    assert set(algorithms.group(1).split("|")) == {"auto", "observed", *built_in}
    for name in built_in_names("tracekit.parsers.formats", "PARSER", dashes=False):
        assert f"`{name}`" in readme, name


def _plugin(site: Path, entry_points: str, modules: dict[str, str]) -> dict[str, str]:
    """Install a plugin distribution `toy-tracekit` into `site` (a folder on PYTHONPATH); the environment to run in."""
    package = site / "toy_tracekit"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name, source in modules.items():
        (package / f"{name}.py").write_text(textwrap.dedent(source))
    info = site / "toy_tracekit-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-tracekit\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}


def _tracekit(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tracekit", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def captured_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tracekit.ingest import ingest

    out = tmp_path_factory.mktemp("plugins") / "ddp.dataset"
    assert ingest([ROOT / "sample_traces" / "captured" / "ddp_mlp"], out).ok
    return out


@pytest.fixture
def toy_plugin(tmp_path: Path) -> dict[str, str]:
    entry_points = """
        [tracekit.parser]
        toy = toy_tracekit.parser
        [tracekit.emitter]
        toy = toy_tracekit.emitter
        [tracekit.algorithm]
        star = toy_tracekit.algorithm
    """
    modules = {"parser": TOY_PARSER, "emitter": TOY_EMITTER, "algorithm": TOY_ALGORITHM}
    return _plugin(tmp_path / "site", entry_points, modules)


def test_a_plugin_is_listed_and_offered(toy_plugin: dict[str, str]) -> None:
    listed = _tracekit(toy_plugin, "plugins")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [row[:3] for row in rows] == [["trace", "format", "toy"], ["simulator", "format", "toy"],
                                         ["algorithm", "star", "toy-tracekit"]]  # fmt: skip
    assert "toy-tracekit" in rows[0] and "toy-tracekit" in rows[1]
    help_text = subprocess.run(
        [sys.executable, "-m", "tracekit", "replay", "--help"],
        capture_output=True, text=True, env={**toy_plugin, "COLUMNS": "200"}, timeout=300,
    ).stdout  # fmt: skip
    help_text = " ".join(help_text.replace("│", " ").split())  # the words, wherever the table wrapped them
    assert "chakra, hpcc, htsim, toy, or all" in help_text
    ingest_help = subprocess.run(
        [sys.executable, "-m", "tracekit", "ingest", "--help"],
        capture_output=True, text=True, env={**toy_plugin, "COLUMNS": "200"}, timeout=300,
    ).stdout  # fmt: skip
    assert "chakra_et, chakra_json, flight_recorder, kineto, nccl_inspector, nccl_log, pytorch_et, toy" in " ".join(
        ingest_help.replace("│", " ").split()
    )
    assert "ring, tree, star wherever it applies" in help_text


def test_a_plugin_trace_format_is_ingested(toy_plugin: dict[str, str], tmp_path: Path) -> None:
    job = tmp_path / "toyjob"
    job.mkdir()
    (job / "rank0.toy").write_text("TOYTRACE\nforward 12.5\nbackward 30\n")
    (job / "rank1.toy").write_text("not a toy trace\n")  # its suffix is the toy's: refused by its parser
    done = _tracekit(toy_plugin, "ingest", job, "--out", tmp_path / "toy.dataset", "-q")
    assert done.returncode == 1, done.stderr  # one file could not be read
    assert "rank1.toy" in done.stderr
    with tracekit.open(tmp_path / "toy.dataset") as ds:
        traces = ds.sql("select format, status from traces order by path").fetchall()
        ops = ds.sql("select name, duration_us from ops order by op_id").fetchall()
    assert traces == [("toy", "ok"), ("toy", "error")]
    assert ops == [("forward", 12.5), ("backward", 30.0)]


def test_a_plugin_format_and_algorithm_run_in_a_replay(
    toy_plugin: dict[str, str], captured_dataset: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    done = _tracekit(toy_plugin, "replay", captured_dataset, "-j", "ddp_mlp", "--gpus-per-host", "1",
                     "--algorithm", "star", "--format", "toy", "-o", out, "-q")  # fmt: skip
    assert done.returncode == 0, done.stderr
    flows = pl.read_parquet(out / "flows.parquet")
    reduce = flows.filter(pl.col("comm_type") == "ALL_REDUCE")
    assert reduce.height > 0 and ((reduce["src_rank"] == 0) | (reduce["dst_rank"] == 0)).all()
    lines = (out / "toy" / "flows.txt").read_text().splitlines()
    assert len(lines) == flows.height
    assert lines[0] == " ".join(str(v) for v in flows.select("src_rank", "dst_rank", "bytes").row(0))


def test_a_broken_plugin_is_a_one_line_warning_and_the_rest_works(tmp_path: Path, captured_dataset: Path) -> None:
    entry_points = """
        [tracekit.emitter]
        gone = toy_tracekit.missing
        misnamed = toy_tracekit.emitter
        hpcc = toy_tracekit.emitter
    """
    env = _plugin(tmp_path / "site", entry_points, {"emitter": TOY_EMITTER})
    listed = _tracekit(env, "plugins", "--all")
    assert listed.returncode == 0, listed.stderr
    warnings = listed.stderr.strip().splitlines()
    assert len(warnings) == 3, listed.stderr
    assert any("'gone'" in w and "failed to load: ModuleNotFoundError" in w for w in warnings)
    assert any("'misnamed'" in w and "names its EMITTER 'toy'" in w for w in warnings)
    assert any("'hpcc'" in w and "a built-in EMITTER has that name" in w for w in warnings)
    assert all(w.startswith("warning: plugin ") for w in warnings)
    done = _tracekit(env, "replay", captured_dataset, "-j", "ddp_mlp", "--format", "hpcc", "-o", tmp_path / "o", "-q")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "o" / "hpcc" / "flow.txt").is_file()
