"""Profiles: every value sourced, TOML round trip, `extends`, validation; job draws against the
profile's formulas on many draws (no ingest)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from scipy import stats

from tracekit.generate import builtin_profiles, load_profile, write_profile
from tracekit.generate.jobs import draw_job
from tracekit.generate.profile import class_probs, job_sizes, missing_sources, size_probs

ALPHA = 1e-3


@pytest.mark.parametrize("name", ["default", "sample", "meta-llm-tail"])
def test_builtin_profiles_source_every_value(name: str) -> None:
    assert name in builtin_profiles()
    assert missing_sources(load_profile(name)) == []


def test_default_profile_follows_the_public_facts() -> None:
    p = load_profile("default")
    sizes = p["job_size"]["sizes"]
    assert sizes[0] == 8 and max(sizes) == 128 and all(s % 8 == 0 for s in sizes)
    weights = dict(zip(sizes, p["job_size"]["weights"], strict=True))
    assert weights[8] == max(weights.values())  # small jobs most common
    assert p["classes"]["ranking-ddp"]["bucket_cap_bytes"] == 25 * 2**20
    assert p["classes"]["llm-3d"]["tp"] == 8 and p["classes"]["llm-3d"]["dp_max"] == 128
    assert p["tail"]["share"] == 0 and max(p["tail"]["sizes"]) == 16384
    assert load_profile("meta-llm-tail")["tail"]["share"] > 0
    assert max(s for s in load_profile("sample")["job_size"]["sizes"] if s <= 64) == 64


def test_llama3_tail_job_is_tp8_pp16_dp128() -> None:
    profile = load_profile("meta-llm-tail")
    profile["tail"].update(share=1.0, sizes=[16384], weights=[1.0])
    spec = draw_job(profile, 0, 0, 1)
    assert (spec.cls, spec.model, spec.world_size) == ("llm-3d", "llama3-405b", 16384)
    assert (spec.params["tp"], spec.params["pp"], spec.params["dp"]) == (8, 16, 128)


def test_write_and_load_round_trip(tmp_path: Path) -> None:
    for name in builtin_profiles():
        profile = load_profile(name)
        assert load_profile(write_profile(profile, tmp_path / f"{name}.toml")) == profile


def test_extends_and_validation(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('extends = "default"\n[job_size]\nsizes = [8, 12]\nweights = [1.0, 1.0]\n')
    with pytest.raises(ValueError, match="multiple of 8"):
        load_profile(path)
    with pytest.raises(ValueError, match="no profile"):
        load_profile("no-such-profile")
    path.write_text('extends = "default"\n[classes.fsdp]\ndtype = "bf16"\n')
    with pytest.raises(ValueError, match="classes.fsdp.dtype is 'bf16', not one of BFloat16"):
        load_profile(path)
    path.write_text('extends = "sample"\n[job_size]\nmax_size = 16\n')  # two sizes cannot grow 1.5x a year
    with pytest.raises(ValueError, match=r"job_size.growth 0.585 is more than its sizes allow over 24 months"):
        load_profile(path)


def test_job_draws_match_profile_formulas() -> None:
    """20,000 draws: sizes and classes per period (chi-square), a lognormal size (KS)."""
    profile = load_profile("default")
    n = 20_000
    sizes: dict[int, Counter[int]] = defaultdict(Counter)
    classes: dict[int, Counter[str]] = defaultdict(Counter)
    dense: list[float] = []
    for i in range(n):
        spec = draw_job(profile, 5, i, n)
        sizes[spec.period][spec.world_size] += 1
        classes[spec.period][spec.cls] += 1
        if spec.model == "dlrm-a":
            dense.append(math.log(spec.params["dense_bytes"]))
    pvalues = []
    for period in sizes:
        total = sum(sizes[period].values())
        size_names, probs = size_probs(profile, period)
        pvalues.append(stats.chisquare([sizes[period][s] for s in size_names], [total * p for p in probs]).pvalue)
        class_names, probs = class_probs(profile, period)
        pvalues.append(stats.chisquare([classes[period][c] for c in class_names], [total * p for p in probs]).pvalue)
    assert min(pvalues) > ALPHA / len(pvalues)
    d = profile["classes"]["ranking-ddp"]["models"]["dlrm-a"]["dense_bytes"]
    assert stats.kstest(dense, "norm", args=(math.log(d["median"]), d["sigma"])).pvalue > ALPHA
    # Jobs grow: the mean log2 size of the last period is above the first's.
    first, last = min(sizes), max(sizes)
    mean = {p: sum(math.log2(s) * c for s, c in sizes[p].items()) / sum(sizes[p].values()) for p in (first, last)}
    assert mean[last] - mean[first] > 0.2


@pytest.mark.parametrize("name", ["default", "sample"])
def test_the_stated_shares_hold_over_the_whole_span(name: str) -> None:
    """job_size.weights and the class shares are what a whole fleet holds (issue 20: they held at
    the start date only, and growth piled jobs up at the largest size: 128 GPUs were the most common
    size, 22% of jobs, and 8-GPU jobs 15% against the 30% stated)."""
    profile = load_profile(name)
    n = 20_000
    specs = [draw_job(profile, 5, i, n) for i in range(n)]
    sizes = Counter(spec.world_size for spec in specs)
    names, weights = job_sizes(profile)
    total = sum(weights)
    assert stats.chisquare([sizes[s] for s in names], [n * w / total for w in weights]).pvalue > ALPHA
    assert sizes.most_common(1)[0][0] == 8  # small jobs most common
    classes = Counter(spec.cls for spec in specs)
    shares = {c: spec["share"] for c, spec in profile["classes"].items()}
    expected = [n * shares[c] / sum(shares.values()) for c in shares]
    assert stats.chisquare([classes[c] for c in shares], expected).pvalue > ALPHA


def test_jobs_grow_by_the_stated_rate() -> None:
    """job_size.growth is the yearly growth of the mean log2 job size (a median 1.5x a year)."""
    profile = load_profile("default")
    n = 20_000
    specs = [draw_job(profile, 6, i, n) for i in range(n)]
    years = [(s.started_at - specs[0].started_at).total_seconds() / (365.25 * 86400) for s in specs]
    slope = stats.linregress(years, [math.log2(s.world_size / 8) for s in specs]).slope
    assert abs(slope - profile["job_size"]["growth"]) < 0.1 * profile["job_size"]["growth"]
