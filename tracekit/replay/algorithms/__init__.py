"""Collective algorithms as transfer templates (one module per algorithm; see base.Template).

`template(algorithm, comm_type, hosts, root)` returns the template, or raises NotApplicable when
the algorithm does not serve that collective for this group (the caller then uses the default).

| comm_type      | ring  | tree  | direct | halving-doubling | hierarchical |
|----------------|-------|-------|--------|------------------|--------------|
| ALL_REDUCE     | yes   | yes   | yes    | yes (any n, fold) | equal GPUs per host |
| REDUCE_SCATTER | yes   | -     | yes    | n = 2^k          | equal GPUs per host |
| ALL_GATHER     | yes   | -     | yes    | n = 2^k          | equal GPUs per host |
| ALL_TO_ALL     | -     | -     | yes    | -                | -            |
| BROADCAST      | chain | -     | yes    | -                | -            |
| REDUCE         | chain | -     | yes    | -                | -            |
| GATHER/SCATTER | -     | -     | yes    | -                | -            |
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms import direct, halving_doubling, hierarchical, ring, tree

if TYPE_CHECKING:
    import numpy as np

    from tracekit.replay.algorithms.base import Template

ALGORITHMS = ("ring", "tree", "direct", "halving-doubling", "hierarchical")


class NotApplicable(Exception):
    """The algorithm does not implement this collective for this group."""


def template(algorithm: str, comm_type: str, hosts: np.ndarray, root: int = 0) -> Template:
    """Transfers of `comm_type` over len(hosts) positions (host ids in placement order)."""
    n = len(hosts)
    if algorithm == "ring":
        builders = {
            "ALL_REDUCE": lambda: ring.all_reduce(n),
            "REDUCE_SCATTER": lambda: ring.reduce_scatter(n),
            "ALL_GATHER": lambda: ring.all_gather(n),
            "BROADCAST": lambda: ring.broadcast(n, root),
            "REDUCE": lambda: ring.reduce(n, root),
        }
    elif algorithm == "tree":
        builders = {"ALL_REDUCE": lambda: tree.all_reduce(hosts)}
    elif algorithm == "direct":
        builders = {
            "ALL_REDUCE": lambda: direct.all_reduce(n),
            "REDUCE_SCATTER": lambda: direct.reduce_scatter(n),
            "ALL_GATHER": lambda: direct.all_gather(n),
            "ALL_TO_ALL": lambda: direct.all_to_all(n),
            "BROADCAST": lambda: direct.broadcast(n, root),
            "REDUCE": lambda: direct.reduce(n, root),
            "GATHER": lambda: direct.gather(n, root),
            "SCATTER": lambda: direct.scatter(n, root),
        }
    elif algorithm == "halving-doubling":
        builders = {"ALL_REDUCE": lambda: halving_doubling.all_reduce(n)}
        if halving_doubling.is_power_of_two(n):
            builders["REDUCE_SCATTER"] = lambda: halving_doubling.reduce_scatter(n)
            builders["ALL_GATHER"] = lambda: halving_doubling.all_gather(n)
    elif algorithm == "hierarchical":
        builders = {}
        if hierarchical.layout(hosts) is not None:
            builders = {
                "ALL_REDUCE": lambda: hierarchical.all_reduce(hosts),
                "REDUCE_SCATTER": lambda: hierarchical.reduce_scatter(hosts),
                "ALL_GATHER": lambda: hierarchical.all_gather(hosts),
            }
    else:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    if comm_type not in builders:
        raise NotApplicable(f"{algorithm} does not serve {comm_type} for this group")
    return builders[comm_type]()
