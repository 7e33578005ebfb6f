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


# --- real fleets: captured samples and public traces -------------------------------------------


def _fit_and_regenerate(dataset: Any, tmp_path: Any) -> dict[str, Any]:
    """`generate --fit` on `dataset` exits 0 and its profile generates a fleet."""
    out = tmp_path / "fitted.toml"
    result = CliRunner().invoke(app, ["generate", "--fit", str(dataset), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    profile = load_profile(out)
    assert missing_sources(profile) == []
    again = CliRunner().invoke(
        app, ["generate", "--profile", str(out), "--jobs", "6", "--seed", "1", "--out", str(tmp_path / "f"), "-q"]
    )
    assert again.exit_code == 0, again.output
    return profile


def test_fit_on_the_captured_samples_keeps_what_they_cannot_show(tmp_path: Any) -> None:
    from tests.conftest import SAMPLE_TRACES
    from tracekit.ingest import ingest

    # Four 4-GPU jobs (not whole 8-GPU hosts), unlabelled, without optimizer_step ops; the Chakra
    # copies have no start time either.
    ingest([SAMPLE_TRACES / "captured", SAMPLE_TRACES / "chakra"], tmp_path / "ds")
    profile = _fit_and_regenerate(tmp_path / "ds", tmp_path)
    base = load_profile("default")
    assert profile["job_size"]["sizes"] == base["job_size"]["sizes"]
    assert set(profile["classes"]) == set(base["classes"])
    assert profile["notes"] == [
        "fleet.iterations: no optimizer_step ops in the dataset; kept from the base profile",
        "4 job(s) without a start time are left out of the size and class fits",
        "job_size: 4 job(s) of sizes 4 are not multiples of 8 GPUs per host (fleet.gpus_per_host) "
        "and are left out of the size fit",
        "job_size: no job size the generator can place; sizes, weights and growth kept from the base",
        "classes: no job is labelled 'class:model' with a known class (ranking-ddp, fsdp, llm-3d); "
        "classes, models and message sizes kept from the base profile",
    ]


def test_fit_on_public_traces_reads_real_sizes_by_collective_type(public_traces: Any, tmp_path: Any) -> None:
    from tracekit.ingest import ingest

    ingest([public_traces / "param-dlrm-8rank"], tmp_path / "ds", label="ranking-ddp:dlrm")
    ingest([public_traces / "hta-nccl-2gpu"], tmp_path / "ds", label="fsdp:resnet")
    profile = _fit_and_regenerate(tmp_path / "ds", tmp_path)
    assert profile["job_size"]["sizes"] == [8]  # the 2-GPU job is not a whole host: noted, left out
    dlrm = profile["classes"]["ranking-ddp"]["models"]["dlrm"]
    # Rank 0's three all-reduces (448 + 907,840 + 1,576,964 bytes) and its four all-to-allv calls.
    assert dlrm["dense_bytes"] == {"median": 2_485_252, "sigma": 0.0}
    assert dlrm["a2a_calls"] == 4
    assert any("read by collective type" in note for note in profile["notes"])
