"""Fit a profile to an ingested dataset: share a fleet's statistics without sharing its traces.

Everything is read with the SQL files in queries/ (job_size_distribution, job_class_mix,
message_sizes_by_label, message_size_spread, process_group_sizes), so the fit sees exactly what a
user's SQL sees. What is estimated:

* fleet span and periods: from jobs.started_at (`period_months` is kept from the base profile);
* job sizes: weights and the growth of log2(size/8) over time, by maximum likelihood of the
  multinomial-logit model of profile.py (P(s|t) ∝ w_s·exp(g·log2(s/8)·t));
* classes (label 'class:model'): shares and per-class growth, same model with a slope per class;
  models: their share within the class;
* per model, lognormal {median, sigma} of every size from one value per job (log mean and standard
  deviation): ranking dense bytes (sum of a rank's DDP buckets per iteration), all-to-all sizes
  (geometric mean over ranks; the within-job spread gives `uneven_sigma`), FSDP unit bytes (the
  ReduceScatter input), TP and PP message bytes, LLM parameter bytes (ReduceScatter input x tp x pp);
* structure: DDP bucket cap, units per FSDP model, all-to-all calls, TP/PP degrees, micro-batches,
  layers per stage, group caps: from call counts and process-group sizes.

Values the dataset cannot show (e.g. parameter bytes of LLM jobs that never have dp > 1) are kept
from the base profile and marked as such. Jobs whose label is not 'class:model' with a known class
are left out of the class statistics. Tail jobs are folded into job_size.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path
from statistics import fmean, pstdev
from typing import Any

from tracekit.generate.jobs import fleet_span
from tracekit.generate.profile import CLASSES, Profile, load_profile, periods, validate_profile


def run_query(ds: Any, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows of queries/<name>.sql over the open dataset `ds` (tracekit.open), as dicts."""
    relation = ds.query(name, params)
    return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]


def _logit_fit(
    counts: dict[int, Counter[Any]], cats: list[Any], t: dict[int, float], x: dict[Any, float] | None
) -> tuple[dict[Any, float], dict[Any, float]]:
    """Maximum likelihood of P(k|t) ∝ exp(a_k + b_k·t) (x None) or ∝ exp(a_k + g·x_k·t).

    Returns (weights at t=0, normalized; slope per category, or {"g": g}). Concave: plain gradient
    ascent converges.
    """
    a = {k: 0.0 for k in cats}
    b = {k: 0.0 for k in cats}
    g = 0.0
    total = sum(sum(c.values()) for c in counts.values())
    scale = max(1.0, max(t.values(), default=1.0)) * (max((abs(v) for v in (x or {}).values()), default=1.0))
    lr = 1.0 / (1.0 + scale * scale)
    for _ in range(4000):
        ga = dict.fromkeys(cats, 0.0)
        gb = dict.fromkeys(cats, 0.0)
        gg = 0.0
        for p, c in counts.items():
            n = sum(c.values())
            if not n:
                continue
            logits = {k: a[k] + (g * x[k] if x is not None else b[k]) * t[p] for k in cats}
            top = max(logits.values())
            ex = {k: math.exp(v - top) for k, v in logits.items()}
            z = sum(ex.values())
            for k in cats:
                r = c.get(k, 0) - n * ex[k] / z
                ga[k] += r
                if x is not None:
                    gg += r * x[k] * t[p]
                else:
                    gb[k] += r * t[p]
        for k in cats:
            a[k] += lr * ga[k] / total * 4
            b[k] += lr * gb[k] / total * 4
        g += lr * gg / total * 4
    top = max(a.values())
    w = {k: math.exp(a[k] - top) for k in cats}
    z = sum(w.values())
    weights = {k: v / z for k, v in w.items()}
    if x is not None:
        return weights, {"g": g}
    ref = b[cats[0]]
    return weights, {k: b[k] - ref for k in cats}


def _lognormal(values: list[float], within_var: float = 0.0) -> dict[str, float]:
    vals = [v for v in values if v and v > 0]
    if not vals:
        return {"median": 0, "sigma": 0.0}
    logs = [math.log(v) for v in vals]
    sigma2 = max(0.0, (pstdev(logs) ** 2 if len(logs) > 1 else 0.0) - within_var)
    sigma = math.sqrt(sigma2)
    return {"median": round(math.exp(fmean(logs))), "sigma": round(sigma, 4) if sigma > 1e-6 else 0.0}


def _mode(values: list[Any], default: Any) -> Any:
    return Counter(values).most_common(1)[0][0] if values else default


def fit_profile(dataset: str | Path, base: str | Path | Profile = "default", name: str | None = None) -> Profile:
    """A profile estimated from the ingested dataset at `dataset` (see the module docstring)."""
    from tracekit.api import open as open_dataset

    prof = base if isinstance(base, dict) else load_profile(base)
    import copy

    prof = copy.deepcopy(prof)
    src = f"[fit] {Path(dataset).name}"
    with open_dataset(dataset) as ds:
        params = _period_params(ds, prof)
        bound = {"start": params["start"], "period_months": params["period_months"]}
        jobs = run_query(ds, "job_class_mix", bound)
        sizes = run_query(ds, "job_size_distribution", bound)
        msgs = run_query(ds, "message_sizes_by_label", {"rank": 0})
        spread = run_query(ds, "message_size_spread")
        pgs = run_query(ds, "process_group_sizes")
        iters = ds.sql("select count(*) / count(distinct trace_id) from ops where name = 'optimizer_step'").fetchall()[
            0
        ]
    iterations = max(1, round(iters[0])) if iters and iters[0] else prof["fleet"]["iterations"]
    start = params["start"]
    prof["name"] = name or f"fit-{Path(dataset).name}"
    prof["description"] = f"Fitted by tracekit generate --fit from {Path(dataset).name}"
    prof["fleet"]["start"] = start
    prof["fleet"]["months"] = params["months"]
    prof["fleet"]["iterations"] = iterations
    fs = prof["fleet"]["sources"]
    fs["start"] = f"{src}: first month of jobs.started_at"
    fs["months"] = f"{src}: span of jobs.started_at, in whole periods"
    fs["iterations"] = f"{src}: optimizer_step ops per trace"
    n_periods = periods(prof)
    t = {p: (p + 0.5) * prof["fleet"]["period_months"] / 12.0 for p in range(n_periods)}

    # Job sizes
    size_counts: dict[int, Counter[int]] = defaultdict(Counter)
    for row in sizes:
        size_counts[row["period"]][row["world_size"]] += row["jobs"]
    all_sizes = sorted({s for c in size_counts.values() for s in c})
    weights, slope = _logit_fit(size_counts, all_sizes, t, {s: math.log2(s / 8) for s in all_sizes})
    js = prof["job_size"]
    js.pop("max_size", None)
    js["sources"].pop("max_size", None)
    js.update(sizes=all_sizes, weights=[round(weights[s], 6) for s in all_sizes], growth=round(slope["g"], 4))
    js["sources"].update(
        sizes=f"{src}: job sizes seen",
        weights=f"{src}: multinomial-logit MLE at the fleet start",
        growth=f"{src}: MLE slope of log2(size/8) per year",
    )
    prof["tail"]["share"] = 0.0
    prof["tail"]["sources"]["share"] = f"{src}: large jobs are folded into job_size"

    # Classes and models
    class_counts: dict[int, Counter[str]] = defaultdict(Counter)
    model_counts: dict[str, Counter[str]] = defaultdict(Counter)
    for row in jobs:
        if row["class"] in CLASSES and row["model"]:
            class_counts[row["period"]][row["class"]] += row["jobs"]
            model_counts[row["class"]][row["model"]] += row["jobs"]
    present = [c for c in CLASSES if model_counts.get(c)]
    shares, growth = _logit_fit(class_counts, present, t, None) if present else ({}, {})
    per_job = _per_job(msgs, spread, pgs)
    classes: dict[str, Any] = {}
    for cls in present:
        spec = copy.deepcopy(prof["classes"].get(cls) or load_profile("default")["classes"][cls])
        spec["share"] = round(shares[cls], 6)
        spec["growth"] = round(growth[cls], 4)
        spec["sources"]["share"] = f"{src}: multinomial-logit MLE at the fleet start"
        spec["sources"]["growth"] = f"{src}: MLE log-odds slope per year (relative to {present[0]})"
        base_models = spec["models"]
        spec["models"] = {}
        total = sum(model_counts[cls].values())
        for model, n in sorted(model_counts[cls].items()):
            m = copy.deepcopy(base_models.get(model) or next(iter(base_models.values())))
            m["share"] = round(n / total, 6)
            m["sources"] = {k: f"[est] kept from the base profile ({prof.get('name')})" for k in m if k != "sources"}
            m["sources"]["share"] = f"{src}: job count"
            rows = [r for r in per_job.values() if r["class"] == cls and r["model"] == model]
            _FIT_MODEL[cls](spec, m, rows, src)
            spec["models"][model] = m
        _FIT_CLASS[cls](spec, [r for r in per_job.values() if r["class"] == cls], src)
        classes[cls] = spec
    prof["classes"] = classes
    validate_profile(prof)
    return prof


def _period_params(ds: Any, prof: Profile) -> dict[str, Any]:
    first, last = ds.sql("select min(started_at), max(started_at) from jobs").fetchall()[0]
    pm = prof["fleet"]["period_months"]
    if first is None:
        start, _ = fleet_span(prof)
        return {"start": start.date().isoformat(), "period_months": pm, "months": prof["fleet"]["months"]}
    start = first.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    months = (last.year - start.year) * 12 + last.month - start.month + 1
    months = math.ceil(months / pm) * pm
    return {"start": start.date().isoformat(), "period_months": pm, "months": months}


def _per_job(msgs: list[dict[str, Any]], spread: list[dict[str, Any]], pgs: list[dict[str, Any]]) -> dict[str, Any]:
    jobs: dict[str, dict[str, Any]] = {}
    for r in msgs:
        j = jobs.setdefault(
            r["job_id"],
            {
                "class": r["class"],
                "model": r["model"],
                "world": r["world_size"],
                "ops": {},
                "sd": {},
                "mean": {},
                "groups": {},
            },
        )
        j["ops"][r["op_name"]] = r
    for r in spread:
        if r["job_id"] in jobs:
            jobs[r["job_id"]]["sd"][r["op_name"]] = r["sd_ln_bytes"]
            jobs[r["job_id"]]["mean"][r["op_name"]] = r["mean_ln_bytes"]
    for r in pgs:
        if r["job_id"] in jobs:
            jobs[r["job_id"]]["groups"][r["pg_desc"]] = (r["groups"], r["max_size"])
    return jobs


def _calls(rows: list[dict[str, Any]], op: str) -> list[int]:
    return [r["ops"][op]["calls"] for r in rows if op in r["ops"]]


def _fit_a2a(m: dict[str, Any], rows: list[dict[str, Any]], src: str, iterations: int = 1) -> None:
    a2a_rows = [r for r in rows if "embedding_fwd_alltoallv" in r["ops"]]
    if not a2a_rows:
        m.update(
            a2a_bytes={"median": 0, "sigma": 0.0},
            input_bytes={"median": 0, "sigma": 0.0},
            a2a_calls=0,
            uneven_sigma=0.0,
        )
        for k in ("a2a_bytes", "input_bytes", "a2a_calls", "uneven_sigma"):
            m["sources"][k] = f"{src}: no embedding all-to-all seen"
        return
    within = [r["sd"]["embedding_fwd_alltoallv"] for r in a2a_rows if "embedding_fwd_alltoallv" in r["sd"]]
    uneven = math.sqrt(fmean([w * w for w in within])) if within else 0.0
    worlds = [r["world"] for r in a2a_rows]
    # Geometric mean over a job's ranks and calls: the job's logical size times exp(mean skew).
    noise = uneven * uneven * fmean([1.0 / (w * _calls(a2a_rows, "embedding_fwd_alltoallv")[0]) for w in worlds])
    m["a2a_bytes"] = _lognormal([math.exp(r["mean"]["embedding_fwd_alltoallv"]) for r in a2a_rows], noise)
    m["input_bytes"] = _lognormal(
        [math.exp(r["mean"]["sparse_input_alltoallv"]) for r in a2a_rows if "sparse_input_alltoallv" in r["mean"]],
        noise,
    )
    m["a2a_calls"] = _mode(_calls(a2a_rows, "embedding_fwd_alltoallv"), 1) // iterations
    m["uneven_sigma"] = round(uneven, 4)
    m["sources"].update(
        a2a_bytes=f"{src}: per-job geometric mean over ranks of embedding_fwd_alltoallv",
        input_bytes=f"{src}: per-job geometric mean of sparse_input_alltoallv",
        a2a_calls=f"{src}: embedding_fwd_alltoallv calls per rank and iteration",
        uneven_sigma=f"{src}: within-job spread of ln(bytes) across ranks",
    )


def _fit_ranking_model(spec: dict[str, Any], m: dict[str, Any], rows: list[dict[str, Any]], src: str) -> None:
    it = 1
    dense = [r["ops"]["ddp_bucket_allreduce"]["total_bytes"] / it for r in rows if "ddp_bucket_allreduce" in r["ops"]]
    if dense:
        m["dense_bytes"] = _lognormal(dense)
        m["sources"]["dense_bytes"] = f"{src}: per-job sum of rank 0's DDP bucket AllReduces"
    _fit_a2a(m, rows, src)


def _fit_ranking_class(spec: dict[str, Any], rows: list[dict[str, Any]], src: str) -> None:
    spread = [r["ops"]["ddp_bucket_allreduce"] for r in rows if "ddp_bucket_allreduce" in r["ops"]]
    if spread:
        spec["first_bucket_bytes"] = _mode(
            [s["first_bytes"] for s in spread if s["calls"] > 1], spec["first_bucket_bytes"]
        )
        spec["sources"]["first_bucket_bytes"] = f"{src}: most common first bucket"
    tiny = _calls(rows, "loss_allreduce")
    if tiny:
        spec["tiny_allreduces"] = _mode(tiny, spec["tiny_allreduces"])
        spec["sources"]["tiny_allreduces"] = f"{src}: loss_allreduce calls per rank"
    _fit_cap(
        spec,
        "a2a_group_max",
        [(r["groups"].get("embedding_a2a", (0, r["world"]))[1], r["world"]) for r in rows],
        src,
        "all-to-all group",
    )


def _fit_fsdp_model(spec: dict[str, Any], m: dict[str, Any], rows: list[dict[str, Any]], src: str) -> None:
    units = [r["ops"]["fsdp_bwd_reducescatter"] for r in rows if "fsdp_bwd_reducescatter" in r["ops"]]
    if units:
        m["unit_bytes"] = _lognormal([u["first_bytes"] for u in units])
        m["units"] = _mode([u["calls"] for u in units], m["units"])
        m["sources"]["unit_bytes"] = f"{src}: per-job ReduceScatter input (one unit's gradient)"
        m["sources"]["units"] = f"{src}: ReduceScatter calls per rank"
    _fit_a2a(m, rows, src)


def _fit_fsdp_class(spec: dict[str, Any], rows: list[dict[str, Any]], src: str) -> None:
    _fit_cap(
        spec,
        "shard_group_max",
        [(r["groups"].get("fsdp_shard", (0, r["world"]))[1], r["world"]) for r in rows],
        src,
        "FSDP shard group",
    )
    tiny = _calls(rows, "loss_allreduce")
    if tiny:
        spec["tiny_allreduces"] = _mode(tiny, spec["tiny_allreduces"])
        spec["sources"]["tiny_allreduces"] = f"{src}: loss_allreduce calls per rank"


def _fit_llm_model(spec: dict[str, Any], m: dict[str, Any], rows: list[dict[str, Any]], src: str) -> None:
    for key, op in (("tp_bytes", "tp_fwd_allreduce"), ("pp_bytes", "pp_fwd_send")):
        vals = [r["ops"][op]["first_bytes"] for r in rows if op in r["ops"]]
        if vals:
            m[key] = _lognormal(vals)
            m["sources"][key] = f"{src}: per-job {op} bytes"
    params = []
    for r in rows:
        rs = r["ops"].get("dp_grad_reducescatter")
        if rs:
            pp = r["groups"].get("pp", (0, 1))[1]
            tp = r["groups"].get("tp", (0, r["world"] // (pp * r["groups"]["dp"][1] if "dp" in r["groups"] else pp)))[1]
            params.append(rs["first_bytes"] * tp * pp)
    if params:
        m["param_bytes"] = _lognormal(params)
        m["sources"]["param_bytes"] = f"{src}: data-parallel ReduceScatter input x tp x pp"


def _fit_llm_class(spec: dict[str, Any], rows: list[dict[str, Any]], src: str) -> None:
    tps = [r["groups"]["tp"][1] for r in rows if "tp" in r["groups"]] or [r["world"] for r in rows]
    if tps:
        spec["tp"] = max(tps)
        spec["sources"]["tp"] = f"{src}: largest tensor-parallel group"
    depth = {id(r): r["groups"].get("pp", (0, 1))[1] for r in rows}
    seen = sorted(set(depth.values()))
    lcm = math.lcm(*seen) if seen else 1
    # A TP group as large as the job is the default group: tp = world / (pp * dp) then.
    tp_of = {
        id(r): r["groups"].get("tp", (0, r["world"] // (depth[id(r)] * r["groups"].get("dp", (0, 1))[1])))[1]
        for r in rows
    }
    # Only jobs where every depth seen was possible (the generator keeps to divisors of world/tp).
    pps = Counter(depth[id(r)] for r in rows if (r["world"] // max(1, tp_of[id(r)])) % lcm == 0)
    if pps:
        choices = sorted(pps)
        spec["pp_choices"] = choices
        spec["pp_weights"] = [round(pps[c] / sum(pps.values()), 6) for c in choices]
        spec["sources"]["pp_choices"] = f"{src}: pipeline depths seen (pp group sizes; 1 without pp groups)"
        spec["sources"]["pp_weights"] = f"{src}: share of jobs per depth (depth choice is restricted to divisors)"
    dps = [r["groups"]["dp"][1] for r in rows if "dp" in r["groups"]]
    if dps and max(dps) > spec["dp_max"]:
        spec["dp_max"] = max(dps)
        spec["sources"]["dp_max"] = f"{src}: largest data-parallel group seen"
    sends = [r for r in rows if "pp_fwd_send" in r["ops"]]
    if sends:
        spec["micro_batches"] = _mode([r["ops"]["pp_fwd_send"]["calls"] for r in sends], spec["micro_batches"])
        spec["sources"]["micro_batches"] = f"{src}: pp_fwd_send calls per rank of stage 0"
    tpc = [r for r in rows if "tp_fwd_allreduce" in r["ops"]]
    if tpc:
        per = _mode([r["ops"]["tp_fwd_allreduce"]["calls"] for r in tpc], 0)
        spec["layers_per_stage"] = max(1, per // (2 * spec["micro_batches"]))
        spec["sources"]["layers_per_stage"] = f"{src}: tp_fwd_allreduce calls / (2 x micro-batches)"


def _fit_cap(spec: dict[str, Any], key: str, pairs: list[tuple[int, int]], src: str, what: str) -> None:
    """A group cap binds only where a group is smaller than its job: the largest such group."""
    binding = [g for g, w in pairs if g < w]
    if binding:
        spec[key] = max(binding)
        spec["sources"][key] = f"{src}: largest {what} in jobs larger than their group"
    elif pairs and max(w for _, w in pairs) > spec[key]:
        spec[key] = max(w for _, w in pairs)
        spec["sources"][key] = f"{src}: no {what} smaller than its job; cap at least the largest job"


_FIT_MODEL = {"ranking-ddp": _fit_ranking_model, "fsdp": _fit_fsdp_model, "llm-3d": _fit_llm_model}
_FIT_CLASS = {"ranking-ddp": _fit_ranking_class, "fsdp": _fit_fsdp_class, "llm-3d": _fit_llm_class}
