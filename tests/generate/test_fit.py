"""`--fit`: the profile recovered from a generated fleet's dataset is the generating profile,
within sampling error (its regenerated fleet is tested in test_roundtrip.py, second parameter)."""

from __future__ import annotations

import math
from typing import Any

from typer.testing import CliRunner

from tests.generate.conftest import Fleet
from tracekit.cli import app
from tracekit.generate import load_profile
from tracekit.generate.profile import missing_sources


def test_fit_recovers_structure_and_sizes(fleet_a: Fleet, fitted: dict[str, Any]) -> None:
    true = fleet_a.profile
    assert missing_sources(fitted) == []
    assert all(s["sources"]["share"].startswith("[fit]") for s in fitted["classes"].values())
    assert set(fitted["job_size"]["sizes"]) <= set(true["job_size"]["sizes"])
    for cls, spec in fitted["classes"].items():
        base = true["classes"][cls]
        for key in (
            "bucket_cap_bytes",
            "first_bucket_bytes",
            "tiny_allreduces",
            "tp",
            "micro_batches",
            "layers_per_stage",
        ):
            if key in base:
                assert spec[key] == base[key], (cls, key)
        for model, m in spec["models"].items():
            t = base["models"][model]
            for key in ("units", "a2a_calls"):
                if key in t:
                    assert m[key] == t[key], (model, key)
            for key, dist in m.items():
                if not (isinstance(dist, dict) and set(dist) == {"median", "sigma"}) or not t[key]["median"]:
                    continue
                if t[key]["sigma"] == 0:
                    # Constant sizes come back exactly (param_bytes up to the integer division).
                    assert abs(dist["median"] - t[key]["median"]) <= t[key]["median"] * 1e-6 + 64, (model, key)
                    continue
                # log-median within 4 standard errors of a sample of >= 5 jobs; sigma within a factor 2.
                se = math.sqrt(t[key]["sigma"] ** 2 + m.get("uneven_sigma", 0) ** 2) / math.sqrt(5)
                assert abs(math.log(dist["median"] / t[key]["median"])) < 4 * se, (model, key, dist, t[key])
                assert 0.5 * t[key]["sigma"] < dist["sigma"] < 2 * t[key]["sigma"], (model, key, dist, t[key])


def test_cli_fit_writes_a_loadable_profile(fleet_a: Fleet, tmp_path: Any) -> None:
    out = tmp_path / "mine.toml"
    result = CliRunner().invoke(app, ["generate", "--fit", str(fleet_a.dataset), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    profile = load_profile(out)
    assert set(profile["classes"]) == {"ranking-ddp", "fsdp", "llm-3d"}
