"""Synthetic fleets: realistic multi-job Chakra traces drawn from documented profiles.

    from tracekit.generate import generate_fleet, load_profile, fit_profile, write_profile
    summary = generate_fleet("fleet/", jobs=300, seed=1, profile="sample")
    # tracekit.ingest(["fleet/"], "fleet.dataset")
    profile = fit_profile("fleet.dataset")        # statistics only, no traces
    write_profile(profile, "my-fleet.toml")

Profiles live in tracekit/profiles/ (see tracekit/generate/profile.py for the formulas).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FleetSummary",
    "builtin_profiles",
    "fit_profile",
    "generate_fleet",
    "load_profile",
    "write_profile",
]


def __getattr__(name: str) -> Any:
    if name in ("generate_fleet", "FleetSummary"):
        from tracekit.generate import fleet

        return getattr(fleet, name)
    if name in ("load_profile", "write_profile", "builtin_profiles"):
        from tracekit.generate import profile

        return getattr(profile, name)
    if name == "fit_profile":
        from tracekit.generate.fit import fit_profile

        return fit_profile
    raise AttributeError(name)
