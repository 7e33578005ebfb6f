"""The network a job's flows run on, and how long they take there: a headless numpy core.

Modules (one concern each): endpoints.py (what the fabric attaches to), topology.py (fabric kinds,
FabricSpec.build -> Network), routing.py (ecmp / pinned / spray -> Incidence), fairshare.py
(max-min fair rates), fluid.py (the fluid model with dependencies). Units: bytes, bytes/s,
seconds.
"""

from __future__ import annotations

from tracekit.fabric.endpoints import Endpoints
from tracekit.fabric.fluid import FluidEvent, FluidResult, UtilisationSeries, simulate
from tracekit.fabric.routing import FlowEnds, Incidence, link_loads, route
from tracekit.fabric.topology import KINDS, ROUTINGS, TIERS, FabricSpec, Network

__all__ = [
    "KINDS",
    "ROUTINGS",
    "TIERS",
    "Endpoints",
    "FabricSpec",
    "FlowEnds",
    "FluidEvent",
    "FluidResult",
    "Incidence",
    "Network",
    "UtilisationSeries",
    "link_loads",
    "route",
    "simulate",
]
