"""Generate -> ingest -> SQL: the fleet's distributions match its profile within sampling error.

Every test runs twice (see conftest.fleet): on a fleet generated from the test profile, and on a
fleet regenerated from the profile `--fit` recovered from the first one. All numbers come from the
SQL files in queries/ over the ingested tables. Seeds are fixed, so each outcome is fixed; the
significance level (ALPHA, Bonferroni-corrected where several tests are made) is conservative.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from typing import Any

from scipy import stats

from tests.generate.conftest import Fleet, period_params, query
from tests.generate.expected import COMM_TYPE, job_calls, mean_log2_group
from tracekit.generate.jobs import draw_job
from tracekit.generate.profile import class_probs, model_probs, periods, size_probs

ALPHA = 1e-3


def chi2_pvalue(observed: Mapping[Any, float], expected: Mapping[Any, float]) -> float:
    """Pearson goodness of fit; cells with expected count < 5 are pooled (smallest first)."""
    keys = sorted(set(observed) | set(expected), key=lambda k: expected.get(k, 0.0))
    obs_cells: list[float] = []
    exp_cells: list[float] = []
    pool_o = pool_e = 0.0
    for key in keys:
        pool_o += observed.get(key, 0)
        pool_e += expected.get(key, 0.0)
        if pool_e >= 5:
            obs_cells.append(pool_o)
            exp_cells.append(pool_e)
            pool_o = pool_e = 0.0
    if pool_e or pool_o:
        if exp_cells:
            obs_cells[-1] += pool_o
            exp_cells[-1] += pool_e
        else:
            obs_cells.append(pool_o)
            exp_cells.append(pool_e)
    assert pool_o == 0 or exp_cells[-1] > 0, "observed counts where the profile expects none"
    if len(obs_cells) < 2:
        return 1.0
    return float(stats.chisquare(obs_cells, exp_cells).pvalue)


def ks_lognormal(values: list[float], dist: dict[str, float], extra_sigma: float = 0.0) -> float:
    sigma = math.sqrt(dist["sigma"] ** 2 + extra_sigma**2)
    logs = [math.log(v) for v in values]
    return float(stats.kstest(logs, "norm", args=(math.log(dist["median"]), sigma)).pvalue)


# ---------------------------------------------------------------------------------------------
# Job sizes, classes, models


def test_job_sizes_match_profile(fleet: Fleet) -> None:
    rows = query(fleet.dataset, "job_size_distribution", period_params(fleet.profile))
    assert rows and all(r["world_size"] % 8 == 0 for r in rows)
    observed: Counter[int] = Counter()
    per_period: Counter[int] = Counter()
    for r in rows:
        observed[r["world_size"]] += r["jobs"]
        per_period[r["period"]] += r["jobs"]
    assert set(per_period) <= set(range(periods(fleet.profile)))
    expected: dict[int, float] = defaultdict(float)
    for period, n in per_period.items():
        for size, prob in zip(*size_probs(fleet.profile, period), strict=True):
            expected[size] += n * prob
    assert chi2_pvalue(observed, expected) > ALPHA


def test_class_and_model_mix_match_profile(fleet: Fleet) -> None:
    rows = query(fleet.dataset, "job_class_mix", period_params(fleet.profile))
    classes: Counter[str] = Counter()
    models: dict[str, Counter[str]] = defaultdict(Counter)
    expected: dict[str, float] = defaultdict(float)
    per_period: Counter[int] = Counter()
    for r in rows:
        classes[r["class"]] += r["jobs"]
        models[r["class"]][r["model"]] += r["jobs"]
        per_period[r["period"]] += r["jobs"]
    for period, n in per_period.items():
        for cls, prob in zip(*class_probs(fleet.profile, period), strict=True):
            expected[cls] += n * prob
    pvalues = [chi2_pvalue(classes, expected)]
    for cls, counts in models.items():
        names, probs = model_probs(fleet.profile, cls)
        total = sum(counts.values())
        pvalues.append(chi2_pvalue(counts, {m: total * p for m, p in zip(names, probs, strict=True)}))
    assert min(pvalues) > ALPHA / len(pvalues), pvalues


# ---------------------------------------------------------------------------------------------
# Per-job structure, read back from SQL


def _jobs(fleet: Fleet) -> dict[str, dict[str, Any]]:
    """Per job: class, model, world, the structure the templates need, and rank 0's messages."""
    jobs: dict[str, dict[str, Any]] = {}
    for r in query(fleet.dataset, "message_sizes_by_label", {"rank": 0}):
        job = jobs.setdefault(
            r["job_id"], {"class": r["class"], "model": r["model"], "world": r["world_size"], "ops": {}, "groups": {}}
        )
        job["ops"][r["op_name"]] = r
    for r in query(fleet.dataset, "process_group_sizes"):
        jobs[r["job_id"]]["groups"][r["pg_desc"]] = r["max_size"]
    it = fleet.profile["fleet"]["iterations"]
    for job in jobs.values():
        g = job["groups"]
        ddp = job["ops"].get("ddp_bucket_allreduce")
        pp, dp = g.get("pp", 1), g.get("dp", 1)
        job["structure"] = {
            "dense_bytes": ddp["total_bytes"] // it if ddp else 0,
            "shard": g.get("fsdp_shard", job["world"]),
            # A TP group as large as the job is the default group (no separate 'tp' group).
            "tp": g.get("tp", job["world"] // (pp * dp)),
            "pp": pp,
            "dp": dp,
        }
    return jobs


def test_collective_mix_per_class_follows_the_templates(fleet: Fleet) -> None:
    """Calls per class and collective type (collective_mix_by_class.sql) = the profile's templates."""
    jobs = _jobs(fleet)
    expected: dict[tuple[str, str], int] = Counter()
    for job in jobs.values():
        calls = job_calls(fleet.profile, job["class"], job["model"], job["world"], job["structure"])
        for op, (n, _) in calls.items():
            expected[(job["class"], COMM_TYPE[op])] += n
    observed = {(r["class"], r["comm_type"]): r["calls"] for r in query(fleet.dataset, "collective_mix_by_class")}
    assert observed == dict(expected)
    shares = {k: v for k, v in observed.items()}
    ranking_ar = shares[("ranking-ddp", "ALL_REDUCE")] / (
        shares[("ranking-ddp", "ALL_REDUCE")] + shares[("ranking-ddp", "ALL_TO_ALL")]
    )
    assert 0.3 < ranking_ar < 0.7  # DDP jobs: AllReduce and AlltoAll(v) share the calls [S1]


def test_group_sizes_follow_the_profile(fleet: Fleet) -> None:
    """Every collective's group size (collective_group_sizes.sql) is the one its role implies."""
    jobs = _jobs(fleet)
    rows = query(fleet.dataset, "collective_group_sizes")
    assert rows
    for r in rows:
        job = jobs[r["job_id"]]
        calls = job_calls(fleet.profile, job["class"], job["model"], job["world"], job["structure"])
        n, group = calls[r["op_name"]]
        assert (r["calls"], r["min_group_size"], r["max_group_size"]) == (n, group, group), r
    # LLM jobs: TP groups are the 8-GPU host, DP groups stay within dp_max.
    for job in jobs.values():
        if job["class"] == "llm-3d":
            s = job["structure"]
            assert s["tp"] == 8 and s["tp"] * s["pp"] * s["dp"] == job["world"]
            assert s["dp"] <= fleet.profile["classes"]["llm-3d"]["dp_max"]


def test_message_sizes_per_collective_and_label_match_profile(fleet: Fleet) -> None:
    """One draw per job (rank 0, first call): KS against the profile's lognormal, per model and role."""
    jobs = _jobs(fleet)
    by_model: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for job in jobs.values():
        by_model[(job["class"], job["model"])].append(job)
    pvalues: dict[str, float] = {}
    exact = 0
    for (cls, model), members in by_model.items():
        m = fleet.profile["classes"][cls]["models"][model]
        roles: list[tuple[str, list[float], dict[str, float], float]] = []
        if cls == "ranking-ddp":
            roles.append(("dense", [j["structure"]["dense_bytes"] for j in members], m["dense_bytes"], 0.0))
        if cls in ("ranking-ddp", "fsdp") and m["a2a_bytes"]["median"] > 0:
            u = m["uneven_sigma"]
            for op, key in (("embedding_fwd_alltoallv", "a2a_bytes"), ("sparse_input_alltoallv", "input_bytes")):
                roles.append((op, [j["ops"][op]["first_bytes"] for j in members], m[key], u))
        if cls == "fsdp":
            units = [j["ops"]["fsdp_bwd_reducescatter"]["first_bytes"] for j in members]
            roles.append(("unit", units, m["unit_bytes"], 0.0))
            for j in members:  # AllGather passes the local shard of the unit (Chakra's convention), in bf16
                ag = j["ops"]["fsdp_fwd_allgather"]["first_bytes"] // 2
                assert ag == -(-j["ops"]["fsdp_bwd_reducescatter"]["first_bytes"] // 2 // j["structure"]["shard"])
        if cls == "llm-3d":
            roles.append(("tp", [j["ops"]["tp_fwd_allreduce"]["first_bytes"] for j in members], m["tp_bytes"], 0.0))
            sends = [j["ops"]["pp_fwd_send"]["first_bytes"] for j in members if "pp_fwd_send" in j["ops"]]
            roles.append(("pp", sends, m["pp_bytes"], 0.0))
        for role, values, dist, extra in roles:
            if not values:
                continue
            if dist["sigma"] == 0 and extra == 0:
                assert set(values) == {dist["median"]}, (model, role)
                exact += 1
            elif len(values) >= 5:
                pvalues[f"{model}/{role}"] = ks_lognormal(values, dist, extra)
    assert len(pvalues) >= 8 and exact >= 2
    worst = min(pvalues, key=pvalues.__getitem__)
    assert pvalues[worst] > ALPHA / len(pvalues), (worst, pvalues)


# ---------------------------------------------------------------------------------------------
# Group sizes against job sizes over time


def _gap_by_period(profile: dict[str, Any], draws: int = 20_000) -> dict[int, tuple[float, float]]:
    """Per period: mean and variance of log2(job size) - mean log2(group size), from the profile."""
    gaps: dict[int, list[float]] = defaultdict(list)
    for i in range(draws):
        spec = draw_job(profile, 987_654, i, draws)
        p = dict(spec.params)
        p.setdefault("tp", 1)
        calls = job_calls(profile, spec.cls, spec.model, spec.world_size, p)
        gaps[spec.period].append(math.log2(spec.world_size) - mean_log2_group(calls))
    return {k: (sum(v) / len(v), stats.tvar(v)) for k, v in gaps.items()}


def test_profile_makes_jobs_grow_faster_than_groups(test_profile: dict[str, Any]) -> None:
    """The profile's claim [S1]: job sizes grow faster than the GPUs per collective."""
    expected = _gap_by_period(test_profile)
    first, last = min(expected), max(expected)
    assert expected[last][0] - expected[first][0] > 0.1
    slope = stats.linregress(sorted(expected), [expected[p][0] for p in sorted(expected)]).slope
    assert slope > 0


def test_group_size_against_job_size_over_time_matches_profile(fleet: Fleet) -> None:
    rows = query(fleet.dataset, "group_size_vs_job_size", period_params(fleet.profile))
    expected = _gap_by_period(fleet.profile)
    statistic = 0.0
    for r in rows:
        assert r["max_group_size"] <= r["max_job_size"]
        gap = r["mean_log2_job_size"] - r["mean_log2_group_size"]
        mean, var = expected[r["period"]]
        statistic += (gap - mean) ** 2 / (var / r["jobs"])
    assert stats.chi2.sf(statistic, len(rows)) > ALPHA
