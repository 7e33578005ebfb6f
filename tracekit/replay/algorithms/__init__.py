"""Collective algorithms as transfer templates (one module per algorithm; see base.Template, registry).

`template(name, request)` returns the template of `request.comm_type` with its network transfers on
NICs and split over QPs, or raises NotApplicable when the algorithm does not serve that collective
for this group (the caller then uses the default). Which algorithm serves what:

| comm_type      | ring  | tree  | direct | halving-doubling | hierarchical | nvls | collnet |
|----------------|-------|-------|--------|------------------|--------------|------|---------|
| ALL_REDUCE     | yes   | yes   | yes    | yes (any n, fold) | equal GPUs per host | 2+ GPUs per host | 2+ hosts |
| REDUCE_SCATTER | yes   | -     | yes    | n = 2^k          | equal GPUs per host | one host | -  |
| ALL_GATHER     | yes   | -     | yes    | n = 2^k          | equal GPUs per host | one host | -  |
| ALL_TO_ALL     | -     | -     | yes    | -                | -            | -    | -       |
| BROADCAST      | chain | -     | yes    | -                | -            | -    | -       |
| REDUCE         | chain | -     | yes    | -                | -            | -    | -       |
| GATHER/SCATTER | -     | -     | yes    | -                | -            | -    | -       |

nvls and collnet send into and out of a switch (base.TO_SWITCH / FROM_SWITCH): NVLink SHARP in the
host's NVSwitch, SHARP in the switch a NIC attaches to.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import resolve_links, split_qps
from tracekit.replay.algorithms.registry import Algorithm, NotApplicable, Request

if TYPE_CHECKING:
    from tracekit.replay.algorithms.base import Template

__all__ = ["Algorithm", "NotApplicable", "Request", "algorithms", "names", "template"]


@cache
def algorithms() -> dict[str, Algorithm]:
    """The registry: every algorithm module's ALGORITHM (and every plugin's), by name, in module order."""
    import sys

    from tracekit.registry import discover

    return discover(sys.modules[__name__], "ALGORITHM", Algorithm)


def names() -> tuple[str, ...]:
    return tuple(algorithms())


def template(name: str, req: Request, qps: int = 1) -> Template:
    """The transfers of `req` under algorithm `name`, network hops on NICs, each split over `qps` QPs."""
    registry = algorithms()
    if name not in registry:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(registry)}")
    built = registry[name].build(req)
    return split_qps(resolve_links(built, req.layout.hosts, req.layout.nics), qps)
