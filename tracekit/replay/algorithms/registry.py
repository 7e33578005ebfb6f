"""The algorithm registry: every module of tracekit.replay.algorithms that defines `ALGORITHM` is one.

An `Algorithm` names the collectives it serves and builds their templates from a `Request`: the
group's layout, what NCCL built for it (channels, rings, trees, NICs), the root, and how many
channels, pipeline pieces and QPs the collective uses. Adding an algorithm is one new module that
defines `ALGORITHM`; `--algorithm` and `--help` read this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.replay.algorithms.base import Template
    from tracekit.replay.layout import GroupLayout
    from tracekit.replay.nccl.comm import CommTopology


class NotApplicable(Exception):
    """The algorithm does not implement this collective for this group."""


@dataclass(frozen=True)
class Request:
    comm_type: str
    layout: GroupLayout
    topology: CommTopology  # channels this collective runs on (already cut to `channels`)
    root: int = 0  # position of the root of a rooted collective
    channels: int = 1  # ring/tree channels, or p2p channels per peer
    chunks: int = 1  # pipeline pieces per channel (chains, trees)
    pxn: bool = True

    def key(self) -> tuple[object, ...]:
        return (self.comm_type, self.layout.key(), self.topology.digest(), self.root, self.channels, self.chunks,
                self.pxn)  # fmt: skip


@dataclass(frozen=True)
class Algorithm:
    name: str
    summary: str  # one line for --help and the README
    builders: dict[str, Callable[[Request], Template]]
    # when it serves a collective only for some groups: a predicate saying so
    applies: Callable[[Request], bool] | None = None
    channels: bool = True  # runs on NCCL's channels (else one channel, its own NICs)
    extra: dict[str, str] = field(default_factory=dict)  # per comm_type: a note on the variant used

    def serves(self, comm_type: str) -> bool:
        return comm_type in self.builders

    def build(self, req: Request) -> Template:
        builder = self.builders.get(req.comm_type)
        if builder is None or (self.applies is not None and not self.applies(req)):
            raise NotApplicable(f"{self.name} does not serve {req.comm_type} for this group")
        return builder(req)
