"""Which algorithm serves which collective by default (`--algorithm auto`), NCCL-like.

* ALL_REDUCE: ring or tree, whichever the α–β model (tracekit.replay.model) says is faster, as
  NCCL's tuner does: the tree wins small messages across several hosts (its latency grows with
  log2(hosts) instead of 2(n-1) ring steps), the ring wins large ones. A group inside one host
  always uses the ring.
* REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE: ring (NCCL's only general algorithm for them;
  PAT and NVLS need hardware the trace does not describe).
* ALL_TO_ALL (and all-to-allv, from the recorded splits), GATHER, SCATTER: direct.
* SEND/RECV: one flow. BARRIER: no data.

`--algorithm X` forces X wherever X serves the collective (see tracekit.replay.algorithms); the
others keep this default, and the replay notes how many did.
"""

from __future__ import annotations

from tracekit.replay.model import NetworkModel

DEFAULTS = {
    "REDUCE_SCATTER": "ring",
    "ALL_GATHER": "ring",
    "BROADCAST": "ring",
    "REDUCE": "ring",
    "ALL_TO_ALL": "direct",
    "GATHER": "direct",
    "SCATTER": "direct",
}
NO_DATA = ("BARRIER",)


def default_algorithm(comm_type: str, n: int, hosts: int, per_host: int, size: int, model: NetworkModel) -> str | None:
    """The algorithm NCCL would most likely run; None for collectives that move no data."""
    if comm_type == "ALL_REDUCE":
        if hosts <= 1:
            return "ring"
        return "tree" if model.tree_time(per_host, hosts, size) < model.ring_time(n, hosts, size) else "ring"
    return DEFAULTS.get(comm_type)
