"""Simulator inputs a replay writes besides its flows: one module per format, each defining `EMITTER`.

An `Emitter` names its `--format` value, the simulator that reads its files, the folder of OUT they
go to, a one-line summary, and how to write them from a replay (`write`, which also returns what replay.json
says about running them). Adding a format is one new module of this package that defines
`EMITTER`; `tracekit replay --format`, replay.json and the README's list read this registry. Every
format renders the flows table, never the trace files, and refuses a replay it cannot express (a
flow that ends in a switch) in one line rather than leaving part of the traffic out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from tracekit.fabric.topology import Network
    from tracekit.replay.result import Replay


@dataclass
class Emission:
    """What a format is written from: the replay, the folder it writes into (OUT/<folder>), the fabric
    network the replay's flows run on, and the options of the command."""

    result: Replay
    out: Path
    network: Network
    htsim_binary: str = "uec"
    include_intra_host: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Emitter:
    name: str  # the --format value
    simulator: str  # who reads the files, for messages
    folder: str  # OUT/<folder>/, and the key of replay.json's "simulators"
    summary: str  # one line for --help and the README
    # writes the files; returns them and replay.json's facts: how to run them, the link speeds they assume
    write: Callable[[Emission], tuple[list[Path], dict[str, Any]]]


@cache
def emitters() -> dict[str, Emitter]:
    """Every EMITTER defined by a module of this package, by --format name, in module order."""
    from tracekit.registry import discover
    from tracekit.replay import emitters as package

    return discover(package, "EMITTER", Emitter)


def names() -> tuple[str, ...]:
    return tuple(emitters())
